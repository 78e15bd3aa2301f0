"""Interleaved-layout kernels (verify/il8.py) against the standard dispatch (docs/FORMAT.md §3, §4).

The layouts are built here by small reference packers written from the closed forms of docs/FORMAT.md §4
(``ref_pack_*``, test helpers independent of ``repack/`` and of ``verify/il8.py``); when a
``repack`` layout module exists, its ``pack`` is checked against them byte for byte.
"""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.formats import blocks as B
from panelpack.formats.errors import BadInputError, UnsupportedError
from panelpack.verify import dispatch as D
from panelpack.verify import il8

from builders import random_blocks, run_without_jit


# ---- reference packers (test helpers; docs/FORMAT.md §4 closed forms) --------------------------------
def _fields(blocks, qtype, n, k):
    return B.to_fields(blocks, qtype, n, k)


def _f16(bits):
    return np.asarray(bits, np.uint16).view(np.float16).astype(np.float32)


def ref_pack_x8_q4_0(blocks, n, k):
    """block_q4_0x8: d[8] f16, then qs[64h + 8r + i] = row_r.qs[8h + i] ^ 0x88."""
    nb = k // 32
    raw = blocks.reshape(n // 8, 8, nb, 18)  # [sr, r, b, byte]
    out = np.zeros((n // 8, nb, 144), np.uint8)
    for r in range(8):
        out[:, :, 2 * r:2 * r + 2] = raw[:, r, :, 0:2]
        for h in range(2):
            for i in range(8):
                out[:, :, 16 + 64 * h + 8 * r + i] = raw[:, r, :, 2 + 8 * h + i] ^ 0x88
    return {"blocks": out.reshape(-1)}


def _pack12(sc, m):
    """The Q4_K 12-byte rule with 8 slots (docs/FORMAT.md §2), slots on the last axis."""
    b = np.zeros(sc.shape[:-1] + (12,), np.uint8)
    for j in range(4):
        b[..., j] = (sc[..., j] & 63) | ((sc[..., j + 4] >> 4) << 6)
        b[..., j + 4] = (m[..., j] & 63) | ((m[..., j + 4] >> 4) << 6)
        b[..., j + 8] = (sc[..., j + 4] & 15) | ((m[..., j + 4] & 15) << 4)
    return b


def ref_pack_x8_q4_k(blocks, n, k):
    """block_q4_Kx8: d[8], dmin[8], 8 groups of 12 scale bytes (slots = rows), qs interleaved by 8."""
    nsb = k // 256
    f = _fields(blocks, "q4_k", n, k)
    raw = blocks.reshape(n // 8, 8, nsb, 144)
    sc = f["sc"].reshape(n // 8, 8, nsb, 8).astype(np.uint8)  # [sr, r, j, sub]
    mn = f["m"].reshape(n // 8, 8, nsb, 8).astype(np.uint8)
    out = np.zeros((n // 8, nsb, 1152), np.uint8)
    for r in range(8):
        out[:, :, 2 * r:2 * r + 2] = raw[:, r, :, 0:2]
        out[:, :, 16 + 2 * r:18 + 2 * r] = raw[:, r, :, 2:4]
    for s in range(8):
        out[:, :, 32 + 12 * s:44 + 12 * s] = _pack12(sc[:, :, :, s].transpose(0, 2, 1),
                                                     mn[:, :, :, s].transpose(0, 2, 1))
    for h in range(16):
        for r in range(8):
            for i in range(8):
                out[:, :, 128 + 64 * h + 8 * r + i] = raw[:, r, :, 16 + 8 * h + i]
    return {"blocks": out.reshape(-1)}


def _il8_index(n, k, per):
    """Index grids (sr, b, g, i) over the (sr, 32-block, 4-K group, byte-in-group) of il8 forms."""
    return np.meshgrid(np.arange(n // 8), np.arange(k // 32), np.arange(8), np.arange(per), indexing="ij")


def _il8_nibbles(u, n, k):
    sr, b, g, i = _il8_index(n, k, 16)
    e = 32 * b + 4 * g + i % 4
    lo = u[8 * sr + i // 4, e]
    hi = u[8 * sr + 4 + i // 4, e]
    return (lo | (hi << 4)).astype(np.uint8).reshape(-1)


def _per_row_f32(v, n, k):
    """f32 [(sr·nb + b)·8 + r] from a per-(row, 32-block) array [n, nb]."""
    return np.ascontiguousarray(v.reshape(n // 8, 8, k // 32).transpose(0, 2, 1), np.float32).reshape(-1)


def ref_pack_il8_nibble_q4_0(blocks, n, k):
    f = _fields(blocks, "q4_0", n, k)
    return {"qs": _il8_nibbles(f["codes"].astype(np.uint8), n, k), "scales": _per_row_f32(_f16(f["d"]), n, k)}


def ref_pack_il8_int8_q4_0(blocks, n, k):
    f = _fields(blocks, "q4_0", n, k)
    u = f["codes"].astype(np.int16)
    sr, b, g, j = _il8_index(n, k, 32)  # j = 16h + 4r + c
    h, r, c = j // 16, (j % 16) // 4, j % 4
    qs = (u[8 * sr + 4 * h + r, 32 * b + 4 * g + c] - 8).astype(np.int8).view(np.uint8).reshape(-1)
    return {"qs": qs, "scales": _per_row_f32(_f16(f["d"]), n, k)}


def ref_pack_il8_nibble_q4_k(blocks, n, k):
    f = _fields(blocks, "q4_k", n, k)
    d = np.repeat(_f16(f["d"]), 8, axis=1)
    dmin = np.repeat(_f16(f["dmin"]), 8, axis=1)
    dsc = d * f["sc"].astype(np.float32)  # f32 products, as the seed's repack
    dmn = dmin * f["m"].astype(np.float32)
    return {"qs": _il8_nibbles(f["codes"].astype(np.uint8), n, k),
            "dsc": _per_row_f32(dsc, n, k), "dmn": _per_row_f32(dmn, n, k)}


REF_PACKERS = {
    ("ggml-x8", "Q4_0"): ref_pack_x8_q4_0,
    ("ggml-x8", "Q4_K"): ref_pack_x8_q4_k,
    ("il8-nibble", "Q4_0"): ref_pack_il8_nibble_q4_0,
    ("il8-nibble", "Q4_K"): ref_pack_il8_nibble_q4_k,
    ("il8-int8", "Q4_0"): ref_pack_il8_int8_q4_0,
}
KS = {"Q4_0": (32, 96, 256), "Q4_K": (256, 512)}


def _activations(rng, m, k):
    return (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)


def _same_bits(y, z):
    return y.shape == z.shape and np.array_equal(np.asarray(y, np.float32).view(np.uint32),
                                                  np.asarray(z, np.float32).view(np.uint32))


# ---- the table ------------------------------------------------------------------------------
def test_every_form_has_a_reference_packer():
    assert set(il8.FORMS) == set(REF_PACKERS)


# ---- agreement with the standard dispatch ---------------------------------------------------
@pytest.mark.parametrize("form", sorted(REF_PACKERS), ids=lambda f: f"{f[0]}-{f[1]}")
@pytest.mark.parametrize("n", [8, 16, 72])
def test_partials_and_outputs_match_standard(form, n, rng):
    layout, qname = form
    for k in KS[qname]:
        blocks = random_blocks(qname, n, k, rng)
        regions = REF_PACKERS[form](blocks, n, k)
        for m in (1, 17):
            x = _activations(rng, m, k)
            a, _ = D.quantize_activations(x)
            P, A = il8.il8_partials(layout, regions, n, k, qname, a)
            P0, A0 = D.standard_partials(blocks, n, k, qname, a)
            assert np.array_equal(P, P0), (layout, qname, n, k, m)
            assert np.array_equal(A, A0)
            y = il8.il8_matmul(layout, regions, n, k, qname, x)
            assert _same_bits(y, D.standard_matmul(blocks, n, k, qname, x)), (layout, qname, n, k, m)


@pytest.mark.parametrize("form", sorted(REF_PACKERS), ids=lambda f: f"{f[0]}-{f[1]}")
@pytest.mark.parametrize("m", [3, 16, 64])
def test_gemm_row_counts(form, m, rng):
    layout, qname = form
    n, k = 16, 256
    blocks = random_blocks(qname, n, k, rng)
    regions = REF_PACKERS[form](blocks, n, k)
    x = _activations(rng, m, k)
    assert _same_bits(il8.il8_matmul(layout, regions, n, k, qname, x), D.standard_matmul(blocks, n, k, qname, x))


@pytest.mark.parametrize("form", sorted(REF_PACKERS), ids=lambda f: f"{f[0]}-{f[1]}")
def test_scales_match_the_standard_factors(form, rng):
    layout, qname = form
    n, k = 16, 512
    blocks = random_blocks(qname, n, k, rng)
    s, o = il8.il8_scales(layout, REF_PACKERS[form](blocks, n, k), n, k, qname)
    _, s0, o0 = D.integer_form(blocks, n, k, qname)
    assert _same_bits(s, s0) and _same_bits(o, o0)


def test_vector_input_gives_vector_output(rng):
    n, k = 8, 64
    blocks = random_blocks("q4_0", n, k, rng)
    x = _activations(rng, 1, k)[0]
    y = il8.il8_matmul("il8-int8", ref_pack_il8_int8_q4_0(blocks, n, k), n, k, "q4_0", x)
    assert y.shape == (n,)
    assert _same_bits(y, D.standard_matmul(blocks, n, k, "q4_0", x))


# ---- hand-made cases: each lane is its own row ---------------------------------------------
@pytest.mark.parametrize("form", [f for f in sorted(REF_PACKERS) if f[1] == "Q4_0"], ids=lambda f: f[0])
def test_q4_0_lanes_are_rows(form):
    """Row r holds code u = r + 4 everywhere (c = r - 4), d = 1; a = 1 on every K: P[r] = 32 (r - 4)."""
    layout, _ = form
    n, k = 8, 32
    fields = {"d": np.full((n, 1), 0x3C00, np.uint16),
              "codes": np.repeat(np.arange(4, 12, dtype=np.uint8)[:, None], k, axis=1)}
    blocks = B.from_fields(fields, "q4_0", n, k)
    a = np.ones((1, k), np.int8)
    P, A = il8.il8_partials(layout, REF_PACKERS[form](blocks, n, k), n, k, "q4_0", a)
    assert P[0, :, 0].tolist() == [32 * (r - 4) for r in range(8)]
    assert A.tolist() == [[32]]


def test_q4_k_lanes_are_rows_and_subblocks():
    """Row r, element e holds q = (r + e // 32) % 16; a = 1: P[r, s] = 32·((r + s) % 16)."""
    n, k = 8, 256
    q = (np.arange(n)[:, None] + np.arange(k)[None, :] // 32) % 16
    fields = {"d": np.full((n, 1), 0x3C00, np.uint16), "dmin": np.zeros((n, 1), np.uint16),
              "sc": np.ones((n, 8), np.uint8), "m": np.zeros((n, 8), np.uint8), "codes": q.astype(np.uint8)}
    blocks = B.from_fields(fields, "q4_k", n, k)
    a = np.ones((1, k), np.int8)
    for layout in ("ggml-x8", "il8-nibble"):
        P, _ = il8.il8_partials(layout, REF_PACKERS[(layout, "Q4_K")](blocks, n, k), n, k, "q4_k", a)
        want = 32 * ((np.arange(8)[:, None] + np.arange(8)[None, :]) % 16)
        assert np.array_equal(P[0], want), layout


def test_x8_xor_makes_twos_complement_nibbles():
    """u ^ 8 read as a signed 4-bit number is u - 8, for every u (the 0x88 XOR of block_q4_0x8)."""
    u = np.arange(16)
    v = u ^ 8
    assert ((v ^ 8) - 8 == u - 8).all()  # what il8._int4 computes, and its inverse
    assert (np.where(v >= 8, v - 16, v) == u - 8).all()


# ---- refusals -------------------------------------------------------------------------------
def test_refuses_unknown_form_and_bad_shapes(rng):
    blocks = random_blocks("q4_0", 8, 64, rng)
    regions = ref_pack_il8_nibble_q4_0(blocks, 8, 64)
    a = np.zeros((1, 64), np.int8)
    with pytest.raises(UnsupportedError, match="no interleaved kernel"):
        il8.il8_partials("il8-int8", regions, 8, 64, "q4_k", a)
    with pytest.raises(UnsupportedError, match="multiple of 8"):
        il8.il8_partials("il8-nibble", regions, 12, 64, "q4_0", a)
    with pytest.raises(BadInputError, match="region 'scales' missing"):
        il8.il8_matmul("il8-nibble", {"qs": regions["qs"]}, 8, 64, "q4_0", np.zeros(64, np.float32))
    with pytest.raises(BadInputError, match=r"\[8, 32\]: region 'qs' has 256 bytes, expected 128"):
        il8.il8_partials("il8-nibble", regions, 8, 32, "q4_0", a[:, :32])
    with pytest.raises(BadInputError, match=r"int8 \[M, 64\]"):
        il8.il8_partials("il8-nibble", regions, 8, 64, "q4_0", np.zeros((1, 64), np.int16))


# ---- the repack packers, once they exist ----------------------------------------------------
def _repack_layout(name):
    from panelpack import repack

    get = getattr(repack, "get", None)
    if get is None:
        pytest.skip("repack.get is not available yet")
    try:
        return get(name)
    except (KeyError, UnsupportedError, BadInputError):
        pytest.skip(f"repack has no layout {name!r} yet")


@pytest.mark.parametrize("form", sorted(REF_PACKERS), ids=lambda f: f"{f[0]}-{f[1]}")
def test_repack_pack_matches_reference_packer(form, rng):
    layout, qname = form
    mod = _repack_layout(layout)
    n, k = 16, 512
    blocks = random_blocks(qname, n, k, rng)
    got = mod.pack(blocks, n, k, qname)
    want = REF_PACKERS[form](blocks, n, k)
    assert set(got) == set(want)
    for name in want:
        assert np.array_equal(np.ascontiguousarray(got[name]).reshape(-1).view(np.uint8),
                              np.ascontiguousarray(want[name]).reshape(-1).view(np.uint8)), name
    x = _activations(rng, 3, k)
    assert _same_bits(il8.il8_matmul(layout, got, n, k, qname, x), D.standard_matmul(blocks, n, k, qname, x))


# ---- the kernel bodies without the JIT ------------------------------------------------------
def test_il8_kernels_without_jit_match():
    import textwrap

    code = textwrap.dedent("""
        import numpy as np
        from builders import random_blocks
        from panelpack.verify import dispatch as D, il8
        import test_il8_kernels as t
        rng = np.random.default_rng(7)
        for (layout, q), packer in sorted(t.REF_PACKERS.items()):
            blocks = random_blocks(q, 8, 256, rng)
            x = rng.standard_normal((2, 256)).astype(np.float32)
            y = il8.il8_matmul(layout, packer(blocks, 8, 256), 8, 256, q, x)
            y0 = D.standard_matmul_ref(blocks, 8, 256, q, x)
            assert np.array_equal(y.view(np.uint32), y0.view(np.uint32)), (layout, q)
        print("ok")
    """)
    assert run_without_jit(code) == "ok"
