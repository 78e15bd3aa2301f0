"""panel64 (docs/FORMAT.md §4.2): golden bytes, the closed-form address of every weight, padding, ZT0,
and the fast kernels against the field-based references."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from panelpack.formats import blocks as B
from panelpack.formats import qtypes
from panelpack.repack import _panel64_kernels as K
from panelpack.repack import panel64 as P

from builders import blocks_with_codes, random_blocks, run_without_jit

NIBBLE = ["Q4_0", "Q4_1", "Q4_K"]
INT8 = ["Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0", "Q2_K", "Q3_K"]


def hexbytes(s: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(s), np.uint8)


# ---- golden bytes, written out by hand -----------------------------------------------------
def test_golden_q4_0_two_channels():
    # row 0 holds u = e % 16, row 1 u = 15 - e % 16 (e = element 0..31); d = 1.0 and 2.0.
    # Each kg-block q covers elements 4q..4q+3 (and q+4 the same four of the upper 16), so
    # channel 0's bytes are (u0 | u1<<4, u2 | u3<<4); channels 2..63 are padding (code 8 = 0x88).
    qs0 = bytes(0x11 * i for i in range(16))
    qs1 = bytes(0x11 * (15 - i) for i in range(16))
    raw = np.frombuffer(b"\x00\x3c" + qs0 + b"\x00\x40" + qs1, np.uint8).reshape(2, 18)
    reg = P.pack(raw, 2, 32, "Q4_0")
    ch01 = {0: "10 32 ef cd", 1: "54 76 ab 89", 2: "98 ba 67 45", 3: "dc fe 23 01"}
    want = np.concatenate([np.concatenate([hexbytes(ch01[q % 4]), np.full(124, 0x88, np.uint8)]) for q in range(8)])
    assert reg["panels"].shape == (1, 1, 8, 128)
    assert np.array_equal(reg["panels"].reshape(-1), want)
    assert reg["d"].reshape(-1)[:3].tolist() == [0x3C00, 0x4000, 0] and not reg["d"].reshape(-1)[2:].any()
    assert np.array_equal(P.unpack(reg, 2, 32, "Q4_0"), raw)


def test_golden_q8_0_one_channel():
    # one row, qs[e] = e - 16: int8 kg-block q = the 4 bytes qs[4q .. 4q+3] at channel 0.
    qs = bytes((e - 16) & 0xFF for e in range(32))
    raw = np.frombuffer(b"\x00\x3c" + qs, np.uint8).reshape(1, 34)
    reg = P.pack(raw, 1, 32, "Q8_0")
    p = reg["panels"].reshape(8, 256).view(np.uint8)
    assert p[0, :8].tobytes().hex(" ") == "f0 f1 f2 f3 00 00 00 00"
    assert p[7, :4].tobytes().hex(" ") == "0c 0d 0e 0f"
    assert not p[:, 4:].any()
    assert reg["d"].reshape(-1)[0] == 0x3C00


def test_golden_q5_0_int8_code_is_signed():
    # Q5_0 code q in 0..31 is stored as q - 16 (the integer code of the standard dispatch).
    rng = np.random.default_rng(0)
    codes = np.arange(32, dtype=np.uint8).reshape(1, 32)
    reg = P.pack(blocks_with_codes("Q5_0", codes, rng), 1, 32, "Q5_0")
    p = reg["panels"].reshape(8, 256)
    assert p[0, :4].tolist() == [-16, -15, -14, -13] and p[7, :4].tolist() == [12, 13, 14, 15]


def test_golden_q2_k_q3_k_int8_codes():
    # Q3_K code u in 0..7 is stored as u - 4, Q2_K q in 0..3 as q; G = 16 (4 kg-blocks a group),
    # the scale regions keep the 4-bit sc/m (Q2_K) and the 6-bit sc (Q3_K) of each 16-group.
    rng = np.random.default_rng(0)
    e = np.arange(256)
    for qtype, span, off in (("Q3_K", 8, 4), ("Q2_K", 4, 0)):
        codes = (e % span).astype(np.uint8).reshape(1, 256)
        raw = blocks_with_codes(qtype, codes, rng)
        reg = P.pack(raw, 1, 256, qtype)
        p = reg["panels"]
        assert p.shape == (1, 16, 4, 256) and p.dtype == np.int8
        assert p[0, 0, 0, :8].tolist() == [c - off for c in (0, 1, 2, 3)] + [0] * 4
        assert p[0, 0, 1, :4].tolist() == [c % span - off for c in (4, 5, 6, 7)]
        assert not p[..., 4:].any()
        f = B.to_fields(raw, qtype, 1, 256)
        assert reg["sc"].shape == (1, 16, 64) and np.array_equal(reg["sc"][0, :, 0], f["sc"][0])
        assert not reg["sc"][0, :, 1:].any()
        assert np.array_equal(P.unpack(reg, 1, 256, qtype), raw)


def test_zt0_tables():
    assert P.zt0_table("Q4_0").hex() == "".join(f"{(i - 8) & 0xFF:02x}000000" for i in range(16))
    assert P.zt0_table("Q4_0")[:8] == bytes([0xF8, 0, 0, 0, 0xF9, 0, 0, 0])
    assert P.zt0_table("Q4_1") == P.zt0_table("Q4_K") == bytes(sum(([i, 0, 0, 0] for i in range(16)), []))
    assert P.params("Q4_0", 3, 32)["zt0"] == list(P.zt0_table("Q4_0"))
    assert "zt0" not in P.params("Q8_0", 3, 32)


def test_params():
    p = P.params("Q6_K", 100, 512)
    assert p["group_size"] == 16 and p["ng"] == 32 and p["padded_n"] == 128 and p["super_blocks"] == 2
    assert p["nsb"] == 2 and p["code_form"] == "int8" and p["code_offset"] == 32 and p["invertible"]
    p = P.params("Q4_0", 64, 64)
    assert p["code_form"] == "nibble" and p["pad_code"] == 8 and p["padded_n"] == 64


# ---- every weight at its closed-form address (position-encoded tensors) --------------------
def closed_form(n, k, G, nibble):
    """byte = (((n//64)·ng + k//G)·(G/4) + (k%G)//4)·W + (2·(n%64) + (k%4)//2 | 4·(n%64) + k%4)."""
    ng = k // G
    nn, kk = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    blk = ((nn // 64) * ng + kk // G) * (G // 4) + (kk % G) // 4
    if nibble:
        return blk * 128 + 2 * (nn % 64) + (kk % 4) // 2, 4 * (kk % 2)
    return blk * 256 + 4 * (nn % 64) + kk % 4, np.zeros_like(kk)


@pytest.mark.parametrize("qtype", NIBBLE + INT8)
@pytest.mark.parametrize("n", [1, 64, 70, 130])
def test_every_weight_lands_at_its_closed_form_address(qtype, n, rng):
    t = qtypes.get(qtype)
    k = 2 * t.block_size
    nn, kk = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    span = 1 << t.code_bits
    codes = ((nn * 7 + kk) % span) if t.code_bits == 4 else ((nn + 3 * kk) % span)  # encodes (n, k)
    if t.code_bits == 8:
        codes = codes - 128  # Q8_0 codes are int8
    reg = P.pack(blocks_with_codes(t, codes, rng), n, k, t)
    panel = reg["panels"].reshape(-1).view(np.uint8)
    byte, shift = closed_form(n, k, t.group, t.code_bits == 4)
    if t.code_bits == 4:
        got = (panel[byte] >> shift) & 15
        want = codes
    else:
        got = panel[byte].view(np.int8).astype(np.int64)
        want = codes - t.code_offset
    bad = np.argwhere(got != want)
    assert bad.size == 0, (f"{qtype} N={n}: weight (n={bad[0][0]}, k={bad[0][1]}) expected "
                           f"{want[tuple(bad[0])]} at byte {byte[tuple(bad[0])]}, found {got[tuple(bad[0])]}")
    # and the closed form covers every byte that is not padding exactly once
    used = np.zeros(panel.size * 2, np.int64)
    np.add.at(used, (byte * 2 + shift // 4).reshape(-1), 1)
    assert used.max() == 1


@pytest.mark.parametrize("qtype", NIBBLE + INT8)
def test_pad_channels_hold_the_zero_code_and_zero_scales(qtype, rng):
    t = qtypes.get(qtype)
    n, k = 70, t.block_size
    reg = P.pack(random_blocks(t, n, k, rng), n, k, t)
    panels = reg["panels"]
    per = panels.shape[-1] // 64
    pad = panels[-1].reshape(panels.shape[1], panels.shape[2], 64, per)[:, :, n - 64:]
    if t.code_bits == 4:
        code = P.pad_code(t)
        assert (pad == (code | code << 4)).all() and (code == 8) == (qtype == "Q4_0")
        table = np.frombuffer(P.zt0_table(t), np.int8)[0::4]
        assert table[code] == 0
    else:
        assert not pad.any()
    for name, a in reg.items():
        if name != "panels":
            assert not a[-1, :, n - 64:].any(), name


@pytest.mark.parametrize("qtype", NIBBLE + INT8)
def test_scale_regions_are_the_source_fields_in_channel_order(qtype, rng):
    t = qtypes.get(qtype)
    n, k = 70, 2 * t.block_size
    raw = random_blocks(t, n, k, rng)
    f = B.to_fields(raw, t, n, k)
    reg = P.pack(raw, n, k, t)
    for name, a in reg.items():
        if name == "panels":
            continue
        per_row = a.transpose(0, 2, 1).reshape(-1, a.shape[1])[:n]
        assert np.array_equal(per_row.view(np.uint8), f[name].view(np.uint8)), name


# ---- fast kernels against the field-based references -----------------------------------------
@pytest.mark.parametrize("qtype, n, k", [
    ("Q4_0", 64, 128), ("Q4_0", 70, 512), ("Q4_0", 3, 96), ("Q4_0", 130, 576),  # word and byte paths
    ("Q4_1", 70, 96), ("Q4_1", 1, 512),
    ("Q4_K", 70, 512), ("Q4_K", 5, 256),
    ("Q4_0", 67, 2176), ("Q4_1", 130, 64), ("Q4_1", 67, 1920), ("Q4_K", 66, 1280),  # channel quads: several sweeps
    ("Q8_0", 70, 96), ("Q8_0", 128, 256),
    ("Q5_0", 70, 96), ("Q5_1", 64, 64), ("Q5_K", 70, 512), ("Q6_K", 70, 512), ("Q6_K", 1, 256),  # int8 row kernels
    ("Q8_0", 71, 64), ("Q5_0", 3, 64), ("Q5_1", 129, 32), ("Q5_K", 65, 256),  # odd last row: paired with a pad
    ("Q2_K", 70, 512), ("Q2_K", 1, 256), ("Q3_K", 130, 768), ("Q3_K", 63, 256),
])
def test_fast_kernels_match_the_references(qtype, n, k, rng, monkeypatch):
    from panelpack.formats import engine

    monkeypatch.setattr(engine, "_kernels", True)  # the kernels, whatever ran before
    raw = random_blocks(qtype, n, k, rng)
    fast = P.pack(raw, n, k, qtype)
    ref = P.pack_ref(raw, n, k, qtype)
    assert list(fast) == list(ref)
    for name in ref:
        assert np.array_equal(fast[name].view(np.uint8), ref[name].view(np.uint8)), name
    assert np.array_equal(P.unpack(ref, n, k, qtype), P.unpack_ref(ref, n, k, qtype))
    assert np.array_equal(P.unpack(fast, n, k, qtype), raw)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q4_K", "Q2_K", "Q3_K"])
def test_block_column_kernels_write_misaligned_out_regions(qtype, rng, monkeypatch):
    from panelpack.formats import engine

    monkeypatch.setattr(engine, "_kernels", True)
    n, k = 67, 256
    raw = random_blocks(qtype, n, k, rng)
    ref = P.pack_ref(raw, n, k, qtype)
    out = {}
    for spec in P.plan(qtype, n, k):
        buf = np.zeros(spec.nbytes + 1, np.uint8)  # one byte off every alignment
        out[spec.name] = buf[1:].view(spec.np_dtype).reshape(spec.shape)
    P.pack(raw, n, k, qtype, out=out)
    for name in ref:
        assert np.array_equal(out[name].view(np.uint8), ref[name].view(np.uint8)), name


@pytest.mark.parametrize("qtype, n, k", [("Q4_0", 67, 256), ("Q4_1", 67, 256), ("Q4_1", 5, 96), ("Q4_K", 67, 256)])
def test_nibble_kernels_read_misaligned_regions(qtype, n, k, rng):
    raw = random_blocks(qtype, n, k, rng)
    ref = P.pack_ref(raw, n, k, qtype)
    shifted = {}
    for name, a in ref.items():
        buf = np.zeros(a.nbytes + 1, np.uint8)  # one byte off every alignment, read-only as a memory map is
        buf[1:] = a.reshape(-1).view(np.uint8)
        shifted[name] = buf[1:].view(a.dtype).reshape(a.shape)
        shifted[name].flags.writeable = False
    assert np.array_equal(P.unpack(shifted, n, k, qtype), raw)


@pytest.mark.parametrize("qtype, n, k", [
    ("Q4_0", 64, 128), ("Q4_0", 70, 512), ("Q4_0", 3, 96), ("Q4_0", 2000, 576),  # several steps
    ("Q4_1", 70, 96), ("Q4_1", 1, 512), ("Q4_1", 1100, 1024),
    ("Q8_0", 70, 96), ("Q8_0", 128, 256), ("Q8_0", 1, 32), ("Q8_0", 900, 1024),
])
def test_numpy_packers_match_the_references(qtype, n, k, rng, monkeypatch):
    raw = random_blocks(qtype, n, k, rng)
    ref = P.pack_ref(raw, n, k, qtype)
    monkeypatch.setattr(P.C, "prefer_jit", lambda nbytes, kind="repack": False)
    calls, packer = [], P._NUMPY_PACK[qtype]
    monkeypatch.setitem(P._NUMPY_PACK, qtype, lambda *a: calls.append(1) or packer(*a))
    plain = P.pack(raw, n, k, qtype)
    assert calls == [1]  # the numpy packer ran, not the kernel
    assert list(plain) == list(ref)
    for name in ref:
        assert np.array_equal(plain[name].view(np.uint8), ref[name].view(np.uint8)), name


def test_numba_is_used_from_the_payoff_size_or_once_started(monkeypatch):
    from panelpack.formats import engine
    from panelpack.repack import _common

    monkeypatch.setattr(engine, "_kernels", False)
    assert not _common.prefer_jit(_common.JIT_PAYOFF_BYTES - 1)
    assert _common.prefer_jit(_common.JIT_PAYOFF_BYTES)
    budget = engine.NUMPY_BUDGET_BYTES["repack_ref"]
    assert not _common.prefer_jit(budget - 1, "repack_ref") and _common.prefer_jit(budget, "repack_ref")
    assert not engine.expect(repack=_common.JIT_PAYOFF_BYTES // 2, repack_ref=budget // 4)
    assert not engine.kernels_started()
    assert engine.expect(repack=_common.JIT_PAYOFF_BYTES // 2, repack_ref=budget // 2)  # shares add up
    assert engine.kernels_started() and _common.prefer_jit(0)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K", "Q5_0"])
def test_a_small_pack_without_a_numpy_packer_runs_the_reference(qtype, rng, monkeypatch):
    from panelpack.formats import engine

    n, k = 70, 512
    raw = random_blocks(qtype, n, k, rng)
    monkeypatch.setattr(engine, "_kernels", True)
    fast = P.pack(raw, n, k, qtype)  # the kernel
    monkeypatch.setattr(engine, "_kernels", False)
    calls, ref = [], P.pack_ref
    monkeypatch.setattr(P, "pack_ref", lambda *a: calls.append(1) or ref(*a))
    small = P.pack(raw, n, k, qtype)
    assert calls == [1]
    for name in fast:
        assert np.array_equal(small[name].view(np.uint8), fast[name].view(np.uint8)), name


def test_the_fast_paths_are_the_ones_exercised():
    assert set(P._FAST_PACK) == {t.name for t in P.SOURCE_TYPES} == set(P._FAST_UNPACK)
    for name in ("_q4_pack_w", "_q4_unpack_w", "_q4_small_cols", "_q4_unpack_b", "_q4_k_pack", "_q4_k_unpack"):
        f = getattr(K, name)
        if not hasattr(f, "signatures"):
            pytest.skip("numba JIT disabled (NUMBA_DISABLE_JIT=1)")
        assert f.signatures, name  # compiled with an explicit signature


def test_kernel_swar_helpers_against_scalar_reference():
    rng = np.random.default_rng(1)
    for x in rng.integers(0, 2**63, 50, dtype=np.uint64):
        x = int(x)
        nib = [(x >> (8 * i)) & 15 for i in range(8)]
        w = int(getattr(K._pairs, "py_func", K._pairs)(np.uint64(x & 0x0F0F0F0F0F0F0F0F)))
        assert w & 0xFFFF == nib[0] | nib[1] << 4 | nib[2] << 8 | nib[3] << 12
        assert (w >> 32) & 0xFFFF == nib[4] | nib[5] << 4 | nib[6] << 8 | nib[7] << 12
        v = (w & 0xFFFF) | ((w >> 32) & 0xFFFF) << 16
        assert int(getattr(K._spread, "py_func", K._spread)(np.uint64(v))) == x & 0x0F0F0F0F0F0F0F0F


def test_dequantize_reads_the_zt0_value_of_the_nibble():
    # Q4_0 code u means u - 8 (ZT0), Q4_1 code u means u; d = 1, m = 0.
    raw = np.frombuffer(b"\x00\x3c" + bytes(0x11 * i for i in range(16)), np.uint8).reshape(1, 18)
    y = P.dequantize(P.pack(raw, 1, 32, "Q4_0"), 1, 32, "Q4_0")
    assert y.reshape(-1).tolist() == [float(i - 8) for i in range(16)] * 2
    raw1 = np.frombuffer(b"\x00\x3c\x00\x00" + bytes(0x11 * i for i in range(16)), np.uint8).reshape(1, 20)
    y = P.dequantize(P.pack(raw1, 1, 32, "Q4_1"), 1, 32, "Q4_1")
    assert y.reshape(-1).tolist() == [float(i) for i in range(16)] * 2


def test_nibble_kernels_without_jit_match_the_references():
    # the channel-quad kernels (and formats._jit.prefetch, a no-op) as plain Python, and the il8
    # kernels with their scale checks: the same bytes as the references, no overflow warnings
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("error")
        import numpy as np
        from builders import random_blocks
        from panelpack.formats import engine
        from panelpack.repack import panel64 as P, il8_nibble as IN, il8_int8 as I8
        engine.start_kernels()
        rng = np.random.default_rng(3)
        for q, n, k in (("Q4_0", 5, 128), ("Q4_1", 5, 64), ("Q4_K", 5, 256)):
            raw = random_blocks(q, n, k, rng)
            fast, ref = P.pack(raw, n, k, q), P.pack_ref(raw, n, k, q)
            assert all(np.array_equal(fast[r].view(np.uint8), ref[r].view(np.uint8)) for r in ref), q
            assert np.array_equal(P.unpack(fast, n, k, q), raw), q
        for mod, q, k in ((IN, "Q4_0", 64), (IN, "Q4_K", 256), (I8, "Q4_0", 64)):
            raw = random_blocks(q, 8, k, rng)
            fast, ref = mod.pack(raw, 8, k, q), mod.pack_ref(raw, 8, k, q)
            assert all(np.array_equal(fast[r].view(np.uint8), ref[r].view(np.uint8)) for r in ref), (mod.NAME, q)
            if mod.invertible(q):
                assert np.array_equal(mod.unpack(fast, 8, k, q), raw), mod.NAME
        print("ok")
    """)
    assert run_without_jit(code) == "ok"
