"""panel64-compact (docs/FORMAT.md §4.2.1): the bit-plane forms of Q5_0/Q5_1/Q5_K/Q6_K/Q2_K/Q3_K,
golden bytes, the closed-form address of every weight, the kernels against the numpy references,
lossless round trips at N not a multiple of 64 and every K the types allow."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack import repack
from panelpack.formats import blocks as B
from panelpack.formats import qtypes
from panelpack.repack import _panel64_compact_kernels as K
from panelpack.repack import panel64 as P
from panelpack.repack import panel64_compact as PC

from builders import blocks_with_codes, random_blocks

COMPACT = ["Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q2_K", "Q3_K"]
OTHERS = ["Q4_0", "Q4_1", "Q4_K", "Q8_0"]


@pytest.fixture
def kernels(monkeypatch):
    from panelpack.formats import engine

    monkeypatch.setattr(engine, "_kernels", True)  # the numba path, whatever the size


def test_registered_and_forms():
    assert repack.get("panel64-compact") is PC
    assert {t.name for t in PC.COMPACT_TYPES} == set(COMPACT)
    for name in COMPACT:
        t = qtypes.get(name)
        f = PC.form(t)
        assert f.bits == t.code_bits and f.base_bits + f.planes == f.bits
        assert f.group_bytes % 64 == 0  # every group record 64-byte aligned
        assert f.group_bytes * 8 == t.group * 64 * t.code_bits  # exactly bits per weight
    assert all(PC.form(x) is None for x in OTHERS)


def test_zt0_tables():
    z = {name: np.frombuffer(PC.zt0_table(name), np.int8) for name in COMPACT}
    assert list(z["Q5_0"][0:64:4]) == list(range(-16, 0))
    assert list(z["Q6_K"][0:64:4]) == list(range(-32, -16))
    assert list(z["Q5_K"][0:64:4]) == list(range(16))
    assert list(z["Q3_K"][0:16:4]) == [-4, -3, -2, -1] and not z["Q3_K"][16:].any()
    assert list(z["Q2_K"][0:16:4]) == [0, 1, 2, 3] and not z["Q2_K"][16:].any()
    for name in COMPACT:
        assert not np.delete(z[name], np.arange(0, 64, 4)).any()  # bytes 4i+1..4i+3 are 0


def test_params_record_the_form():
    p = PC.params("Q6_K", 70, 256)
    assert p["layout"] == "panel64-compact" and p["code_form"] == "compact"
    assert p["plane_bits"] == [4, 5] and p["base_bits"] == 4 and p["expand"] == "luti4"
    assert p["group_bytes"] == 768 and len(p["zt0"]) == 64
    assert PC.params("Q3_K", 1, 256)["plane_bits"] == [2] and PC.params("Q2_K", 1, 256)["expand"] == "luti2"
    q4 = PC.params("Q4_K", 70, 256)
    assert q4["code_form"] == "nibble" and q4["layout"] == "panel64-compact"
    assert P.params("Q6_K", 70, 256)["code_form"] == "int8"  # panel64 itself unchanged


def test_golden_q5_0_one_channel(rng):
    # Q5_0 codes q = k (0..31) in channel 0 of one block: c = q - 16, u = q
    codes = np.arange(32, dtype=np.uint8)[None, :]
    raw = blocks_with_codes("Q5_0", codes, rng)
    reg = PC.pack(raw, 1, 32, "Q5_0")
    p = reg["panels"].reshape(-1)
    assert p.size == 1280
    # base: kg-block q, channel 0 -> bytes 128q, 128q+1 = u(4q)|u(4q+1)<<4, u(4q+2)|u(4q+3)<<4 (low nibbles)
    for q in range(8):
        lo = [(4 * q + j) & 15 for j in range(4)]
        assert p[128 * q] == lo[0] | lo[1] << 4 and p[128 * q + 1] == lo[2] | lo[3] << 4
    # plane (bit 4): kg-block q, lanes 0..3 = channel 0 -> byte 1024 + 32q, bits 0..3
    for q in range(8):
        assert p[1024 + 32 * q] == (0xF if q >= 4 else 0x0) | 0xF0  # lanes 4..7 = channel 1: pad, u = 16
        assert all(p[1024 + 32 * q + b] == 0xFF for b in range(1, 32))  # pad channels: bit 4 set
    # pad channels' base nibbles are 0 (u = 16)
    assert not p[2:128].any()


def test_golden_q2_k_crumbs(rng):
    codes = np.zeros((2, 256), np.uint8)
    codes[1, :4] = [1, 2, 3, 0]
    raw = blocks_with_codes("Q2_K", codes, rng)
    p = PC.pack(raw, 2, 256, "Q2_K")["panels"].reshape(-1)
    assert p.size == 16 * 256
    assert p[1] == 1 | 2 << 2 | 3 << 4 and p[0] == 0 and not p[2:].any()


def closed_form_codes(qtype, n, k, rng):
    t = qtypes.get(qtype)
    codes = rng.integers(0, 1 << t.code_bits, (n, k), dtype=np.uint8)
    return codes, codes.astype(np.int16) - t.code_offset


@pytest.mark.parametrize("qtype", COMPACT)
@pytest.mark.parametrize("n", [1, 70, 129])
def test_every_weight_lands_at_its_closed_form_address(qtype, n, rng):
    t = qtypes.get(qtype)
    k = 2 * t.block_size
    codes, c = closed_form_codes(qtype, n, k, rng)
    raw = blocks_with_codes(qtype, codes, rng)
    reg = PC.pack(raw, n, k, qtype)
    assert np.array_equal(PC.signed_codes(reg["panels"], n, k, qtype), c)
    # and pad channels read as c = 0
    geo = P.geometry(t, n, k)
    full = PC.signed_codes(reg["panels"], geo.np_, k, qtype)
    assert not full[n:].any()


# every K remainder the types allow: K is whole blocks (32 for Q5_0/Q5_1, 256 for the K-quants);
# groups along K of 1, 2, 3, odd and even; N at every residue class that matters mod 64
CASES = [("Q5_0", 70, 32), ("Q5_0", 1, 96), ("Q5_0", 129, 320), ("Q5_1", 63, 64), ("Q5_1", 65, 160),
         ("Q5_K", 70, 256), ("Q5_K", 1, 768), ("Q6_K", 70, 256), ("Q6_K", 129, 512), ("Q6_K", 5, 1280),
         ("Q2_K", 70, 256), ("Q2_K", 3, 768), ("Q3_K", 63, 512), ("Q3_K", 130, 256), ("Q3_K", 200, 4096)]


@pytest.mark.parametrize("qtype, n, k", CASES)
def test_kernels_match_the_references_and_round_trip(qtype, n, k, rng, kernels):
    raw = random_blocks(qtype, n, k, rng)
    fast = PC.pack(raw, n, k, qtype)
    ref = PC.pack_ref(raw, n, k, qtype)
    assert [r.name for r in PC.plan(qtype, n, k)] == list(fast) == list(ref)
    for name in ref:
        assert np.array_equal(fast[name].view(np.uint8), ref[name].view(np.uint8)), name
    assert np.array_equal(PC.unpack(fast, n, k, qtype), raw)
    assert np.array_equal(PC.unpack_ref(fast, n, k, qtype), raw)
    # a small pack (numpy reference path) writes the same bytes
    for name, a in PC.pack(raw, n, k, qtype).items():
        assert np.array_equal(a.view(np.uint8), fast[name].view(np.uint8))


@pytest.mark.parametrize("qtype, n, k", [("Q5_0", 70, 96), ("Q6_K", 70, 256), ("Q3_K", 3, 256)])
def test_small_packs_run_the_reference(qtype, n, k, rng, monkeypatch):
    from panelpack.formats import engine

    monkeypatch.setattr(engine, "_kernels", False)
    calls, ref = [], PC.pack_ref
    monkeypatch.setattr(PC, "pack_ref", lambda *a: calls.append(1) or ref(*a))
    raw = random_blocks(qtype, n, k, rng)
    out = PC.pack(raw, n, k, qtype)
    assert calls == [1]
    assert np.array_equal(PC.unpack(out, n, k, qtype), raw)


@pytest.mark.parametrize("qtype", COMPACT)
def test_pack_into_misaligned_out_and_unpack_read_only(qtype, rng, kernels):
    n, k = 67, 256
    raw = random_blocks(qtype, n, k, rng)
    ref = PC.pack_ref(raw, n, k, qtype)
    out = {}
    for spec in PC.plan(qtype, n, k):
        buf = np.zeros(spec.nbytes + 1, np.uint8)
        out[spec.name] = buf[1:].view(spec.np_dtype).reshape(spec.shape)
    PC.pack(raw, n, k, qtype, out=out)
    for name in ref:
        assert np.array_equal(out[name].view(np.uint8), ref[name].view(np.uint8)), name
        out[name].flags.writeable = False
    assert np.array_equal(PC.unpack(out, n, k, qtype), raw)


@pytest.mark.parametrize("qtype", COMPACT)
def test_dequantize_is_the_codec(qtype, rng):
    n, k = 70, 512
    raw = random_blocks(qtype, n, k, rng)
    reg = PC.pack_ref(raw, n, k, qtype)
    got = PC.dequantize(reg, n, k, qtype)
    want = B.dequantize(raw, qtype, n, k).reshape(n, k)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("qtype", OTHERS)
def test_other_types_are_panel64_unchanged(qtype, rng):
    n, k = 70, 256
    raw = random_blocks(qtype, n, k, rng)
    a, b = PC.pack(raw, n, k, qtype), P.pack(raw, n, k, qtype)
    assert list(a) == list(b) and all(np.array_equal(a[x], b[x]) for x in a)
    assert np.array_equal(PC.unpack(a, n, k, qtype), raw)


@pytest.mark.parametrize("qtype", COMPACT)
def test_sizes_are_the_source_code_bits(qtype):
    t = qtypes.get(qtype)
    n, k = 128, 1024
    compact, int8 = PC.plan(t, n, k), P.plan(t, n, k)
    assert compact[0].nbytes * 8 == n * k * t.code_bits  # no padding at N % 64 == 0: bits a weight
    assert compact[1:] == int8[1:]  # the scale regions as panel64 keeps them
    assert compact[0].nbytes * 8 == int8[0].nbytes * t.code_bits


def test_plane_kernels_against_the_references_on_random_panels():
    rng = np.random.default_rng(7)
    for name in COMPACT:
        t = qtypes.get(name)
        f = PC.form(t)
        c = (rng.integers(0, 1 << f.bits, (3, 2, f.kq, 256)) - t.code_offset).astype(np.int8)
        ref = K.planes_ref(c, f.kq, f.base_bits, f.planes, t.code_offset, f.bits)
        out = np.zeros(3 * 2 * f.group_bytes, np.uint8)
        K.pack_records(c.reshape(-1).view(np.uint8), 6, f.kq, f.base_bits, f.planes, t.code_offset, f.bits, out)
        assert np.array_equal(out, ref.reshape(-1)), name
        back = np.zeros(c.size, np.uint8)
        K.unpack_records(out, 6, f.kq, f.base_bits, f.planes, t.code_offset, back)
        assert np.array_equal(back.view(np.int8), c.reshape(-1)), name
        assert np.array_equal(K.int8_ref(ref, f.kq, f.base_bits, f.planes, t.code_offset, f.bits), c), name
    assert set(K._VPACK) == set(K._VUNPACK) == {(f.base_bits, f.planes, f.kq) for f in map(PC.form, COMPACT)}
    for fn in (*K._VPACK.values(), *K._VUNPACK.values()):
        assert len(fn.signatures) == 1  # compiled with its explicit signature only


@pytest.mark.slow
def test_kernels_without_jit_match_the_references():
    """The plane kernels, the compiled tiles and the emulated leaves as plain Python
    (NUMBA_DISABLE_JIT=1: coverage sees their bodies), against the references."""
    from builders import run_without_jit

    code = """
import numpy as np
from panelpack.formats import engine, qtypes
from panelpack.repack import panel64_compact as PC
from panelpack.verify import compiled as C, compact_leaves as L, dispatch as D
from builders import random_blocks
engine.start_kernels()
rng = np.random.default_rng(3)
for name in ("Q5_0", "Q6_K", "Q2_K", "Q3_K"):
    t = qtypes.get(name)
    f = PC.form(t)
    n, k = 65, t.block_size
    raw = random_blocks(t, n, k, rng)
    reg = PC.pack(raw, n, k, t)
    ref = PC.pack_ref(raw, n, k, t)
    assert all(np.array_equal(reg[x].view(np.uint8), ref[x].view(np.uint8)) for x in ref), name
    assert np.array_equal(PC.unpack(reg, n, k, t), raw), name
    a = rng.integers(-127, 128, (1, k), dtype=np.int8)
    P0, _ = D.standard_partials(raw, n, k, t, a)
    assert np.array_equal(C.prepare(PC.NAME, reg, n, k, t).partials(a)[0], P0), name
    zt0 = np.frombuffer(PC.zt0_table(t), np.uint8)
    for leaf in (L.gemv_leaf, L.neon_leaf):
        assert np.array_equal(leaf(reg["panels"], zt0, a, n, k, t.group, f.base_bits, f.planes), P0), name
print("ok")
"""
    assert run_without_jit(code) == "ok"
