"""The row-walk kernels of the panel64 int8 panels (repack/_panel64_int8_kernels.py) against the
field-based references ``panel64.pack_ref``/``unpack_ref``: same bytes both ways, for ragged row counts,
several K, run remainders, misaligned and preallocated ``out=`` buffers, read-only regions,
and panel bytes that no pack wrote."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from panelpack.formats import engine, qtypes
from panelpack.repack import _panel64_int8_kernels as I
from panelpack.repack import panel64 as P

from builders import random_blocks, run_without_jit
from tiers import fast_only

TYPES = sorted(I.TYPES)
#: (n, blocks along K): one row, odd rows (the last channel pairs with a pad), a full
#: super-block, one past it, several super-blocks; K of 1, 2, 9 and 17 blocks (the 32-element
#: types sweep RUN_SMALL = 8 blocks a row: 9 and 17 leave a remainder)
SHAPES = [(1, 1), (3, 2), (63, 9), (64, 1), (65, 17), (130, 2)]


@pytest.fixture
def kernels(monkeypatch):
    """Small jobs would run the numpy reference (formats/engine.py): force the kernels."""
    monkeypatch.setattr(engine, "_kernels", True)


def _case(qtype, n, nblk, rng):
    """(type, K, random blocks [n, row_bytes], pack_ref's regions) of ``nblk`` blocks a row."""
    t = qtypes.get(qtype)
    k = nblk * t.block_size
    raw = random_blocks(t, n, k, rng)
    return t, k, raw, P.pack_ref(raw, n, k, t)


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for name in b:
        assert np.array_equal(np.asarray(a[name]).view(np.uint8), np.asarray(b[name]).view(np.uint8)), name


def test_panel64_dispatches_these_types_to_the_row_kernels():
    assert I.TYPES == {"Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "Q8_0"}
    for name in I.TYPES:
        assert P._FAST_PACK[name] is P._pack_int8_rows and P._FAST_UNPACK[name] is P._unpack_int8_rows


@pytest.mark.parametrize("qtype", fast_only(TYPES, {"Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"}))
@pytest.mark.parametrize("n, nblk", SHAPES)
def test_pack_and_unpack_give_the_reference_bytes(qtype, n, nblk, rng, kernels, monkeypatch):
    t, k, raw, ref = _case(qtype, n, nblk, rng)
    calls, pack = [], I.pack
    monkeypatch.setattr(I, "pack", lambda *a: calls.append(1) or pack(*a))
    fast = P.pack(raw, n, k, t)
    assert calls == [1]  # the kernel ran, not pack_ref
    _same(fast, ref)
    assert np.array_equal(P.unpack(fast, n, k, t), raw)  # round trip
    assert np.array_equal(P.unpack(ref, n, k, t), P.unpack_ref(ref, n, k, t))


@pytest.mark.parametrize("qtype", fast_only(TYPES, {"Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"}))
def test_any_run_length_gives_the_same_bytes(qtype, rng, kernels, monkeypatch):
    n = 67
    t, k, raw, ref = _case(qtype, n, 5, rng)
    for run in (1, 2, 3, 5, 7):
        monkeypatch.setattr(I, "RUN_SMALL", run)
        monkeypatch.setattr(I, "RUN_K", run)
        _same(P.pack(raw, n, k, t), ref)
        assert np.array_equal(P.unpack(ref, n, k, t), raw), run


@pytest.mark.parametrize("qtype", TYPES)
def test_unpack_of_arbitrary_panel_bytes_matches_the_reference(qtype, rng):
    # codes out of the type's range, scale bytes with bits the codec does not have: the kernels
    # keep exactly the bits the reference keeps
    n, k = 70, 2 * qtypes.get(qtype).block_size
    regions = {s.name: rng.integers(0, 256, s.nbytes, dtype=np.uint8).view(s.np_dtype).reshape(s.shape)
               for s in P.plan(qtype, n, k)}
    assert np.array_equal(P.unpack(regions, n, k, qtype), P.unpack_ref(regions, n, k, qtype))


@pytest.mark.parametrize("qtype", fast_only(TYPES, {"Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"}))
def test_misaligned_preallocated_and_read_only_buffers(qtype, rng, kernels):
    n = 67
    t, k, raw, ref = _case(qtype, n, 3, rng)
    out = {}
    for spec in P.plan(t, n, k):
        buf = np.full(spec.nbytes + 1, 0xA5, np.uint8)  # one byte off every alignment, stale bytes
        out[spec.name] = buf[1:].view(spec.np_dtype).reshape(spec.shape)
    assert P.pack(raw[:, :], n, k, t, out=out) is not None
    _same(out, ref)
    src = np.frombuffer(raw.tobytes() + b"\0", np.uint8)[:-1].reshape(raw.shape)  # read-only source
    _same(P.pack(src, n, k, t), ref)
    ro = {name: np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape) for name, a in ref.items()}  # read-only
    back = np.full(raw.nbytes + 3, 0x5A, np.uint8)
    view = back[3:].reshape(raw.shape)
    assert P.unpack(ro, n, k, t, out=view) is view
    assert np.array_equal(view, raw) and (back[:3] == 0x5A).all()


def test_the_kernels_are_compiled_with_explicit_signatures():
    for name, (pack, unpack, _, _) in I._KERNELS.items():
        for f in (pack, unpack):
            if not hasattr(f, "signatures"):
                pytest.skip("numba JIT disabled (NUMBA_DISABLE_JIT=1)")
            assert f.signatures and f.options.get("cache") and f.key.endswith("_" + name), f.key


def test_swar_helpers_against_scalar_statements():
    rng = np.random.default_rng(2)
    lane_bits = getattr(I._lane_bits, "py_func", I._lane_bits)
    sub = getattr(I._sub_lanes, "py_func", I._sub_lanes)
    with np.errstate(over="ignore"):  # the gather's multiply wraps on purpose
        _check_swar(rng, lane_bits, sub)
    for off in (0, 16):
        table = I._HI5[off]
        for h in (0, 1, 0x80, 0xA5, 0xFF):
            assert [(int(table[h]) >> (8 * i)) & 0xFF for i in range(8)] == [(((h >> i) & 1) * 16 - off) & 0xFF
                                                                            for i in range(8)]


def _check_swar(rng, lane_bits, sub):
    for x in rng.integers(0, 2**63, 40, dtype=np.uint64):
        lanes = [(int(x) >> (8 * i)) & 0xFF for i in range(8)]
        for s in (0, 4, 7):
            assert int(lane_bits(np.uint64(x), s)) == sum(((v >> s) & 1) << i for i, v in enumerate(lanes))
        low = [v & 0x7F for v in lanes]
        v7 = np.uint64(sum(v << (8 * i) for i, v in enumerate(low)))
        for off in (16, 32):
            assert int(sub(v7, off)) == sum(((v - off) & 0xFF) << (8 * i) for i, v in enumerate(low))


def test_the_kernels_as_plain_python_give_the_same_bytes():
    # NUMBA_DISABLE_JIT: the kernel bodies run as Python (the prefetch hint becomes a no-op)
    code = textwrap.dedent("""
        import numpy as np
        from builders import random_blocks
        from panelpack.formats import engine
        from panelpack.repack import panel64 as P
        engine.start_kernels()
        rng = np.random.default_rng(5)
        for q, n, k in (("Q5_0", 3, 64), ("Q5_1", 2, 32), ("Q5_K", 3, 256), ("Q6_K", 2, 256), ("Q2_K", 2, 256),
                        ("Q3_K", 3, 256), ("Q8_0", 3, 64), ("Q8_0", 2, 32)):
            raw = random_blocks(q, n, k, rng)
            fast, ref = P.pack(raw, n, k, q), P.pack_ref(raw, n, k, q)
            assert all(np.array_equal(fast[r].view(np.uint8), ref[r].view(np.uint8)) for r in ref), q
            assert np.array_equal(P.unpack(fast, n, k, q), raw), q
        print("ok")
    """)
    assert run_without_jit(code) == "ok"
