"""Compiled kernels (verify/compiled.py) against the standard dispatch, for every table row.

panel64 regions are built by ``ref_pack_panel64`` (a test helper written from the closed forms
of docs/FORMAT.md §4.2, independent of ``repack/``); the interleaved layouts reuse the reference packers of
``test_il8_kernels.py``; rowmajor is the source blocks themselves.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from test_il8_kernels import REF_PACKERS as IL8_PACKERS

from panelpack.formats import blocks as B
from panelpack.formats import qtypes
from panelpack.formats.errors import BadInputError, UnsupportedError
from panelpack.verify import _simd
from panelpack.verify import compiled as C
from panelpack.verify import dispatch as D

from builders import random_blocks, run_without_jit
from kernel_checks import assert_fast_is_portable
from tiers import fast_only

TYPES8 = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K")
PANEL_SCALES = {  # scheme -> (group fields, super-block fields); None: the type's scale_field
    "scale": (("d",), ()),
    "scale_min": (("d", "m"), ()),
    "k_scale_min": (("sc", "m"), ("d", "dmin")),
    "k_scale": ((None,), ("d",)),
}


# ---- reference packer (test helper; docs/FORMAT.md §4.2 closed forms) ----------------------------------
def ref_pack_panel64(blocks, n, k, qtype):
    t = qtypes.get(qtype)
    f = B.to_fields(blocks, t, n, k)
    g_ = t.group
    sb = -(-n // 64)
    npad = 64 * sb
    ng = k // g_
    nn, kk = np.meshgrid(np.arange(npad), np.arange(k), indexing="ij")
    kg = ((nn // 64) * ng + kk // g_) * (g_ // 4) + (kk % g_) // 4
    if t.code_bits == 4:  # nibble panels hold the raw code; pad channels the code of value 0
        u = np.full((npad, k), t.code_offset, np.uint8)
        u[:n] = f["codes"]
        panels = np.zeros(sb * ng * (g_ // 4) * 128, np.uint8)
        byte = kg * 128 + 2 * (nn % 64) + (kk % 4) // 2
        np.bitwise_or.at(panels, byte.reshape(-1), (u << (4 * (kk % 2))).astype(np.uint8).reshape(-1))
    else:  # int8 panels hold c = code - code_offset
        c = np.zeros((npad, k), np.int16)
        c[:n] = B.integer_codes(f, t)
        panels = np.zeros(sb * ng * (g_ // 4) * 256, np.uint8)
        byte = kg * 256 + 64 * ((nn % 64) // 16) + 4 * (nn % 16) + kk % 4
        panels[byte.reshape(-1)] = c.astype(np.int8).view(np.uint8).reshape(-1)
    regions = {"panels": panels}
    group_f, super_f = PANEL_SCALES[t.scheme]
    for name in group_f + super_f:
        name = name or t.scale_field
        v = f[name]
        pad = np.zeros((npad, v.shape[1]), v.dtype)
        pad[:n] = v
        regions[name] = np.ascontiguousarray(pad.reshape(sb, 64, -1).transpose(0, 2, 1))
    return regions


def ref_pack_panel64_compact(blocks, n, k, qname):
    """panel64-compact: the reference panel64 regions with their int8 panels turned into bit planes
    by the numpy plane reference (repack/_panel64_compact_kernels.planes_ref)."""
    from panelpack.repack import _panel64_compact_kernels as PK
    from panelpack.repack import panel64_compact as PC

    t = qtypes.get(qname)
    r = ref_pack_panel64(blocks, n, k, t)
    f = PC.form(t)
    if f is not None:
        sb, ng = -(-n // 64), k // t.group
        r["panels"] = PK.planes_ref(r["panels"].reshape(sb, ng, f.kq, 256), f.kq, f.base_bits, f.planes,
                                    t.code_offset, f.bits)
    return r


def pack(layout, blocks, n, k, qname):
    if layout == "panel64":
        return ref_pack_panel64(blocks, n, k, qname)
    if layout == "panel64-compact":
        return ref_pack_panel64_compact(blocks, n, k, qname)
    if layout == "rowmajor":
        return {"blocks": blocks}
    return IL8_PACKERS[(layout, qname)](blocks, n, k)


def _activations(rng, m, k):
    return (rng.standard_normal((m, k)) * rng.uniform(0.1, 10, (m, 1))).astype(np.float32)


def _same_bits(y, z):
    return y.shape == z.shape and np.array_equal(np.asarray(y, np.float32).view(np.uint32),
                                                  np.asarray(z, np.float32).view(np.uint32))


def _check(layout, qname, n, k, ms, rng):
    blocks = random_blocks(qname, n, k, rng)
    prep = C.prepare(layout, pack(layout, blocks, n, k, qname), n, k, qname)
    for m in ms:
        x = _activations(rng, m, k)
        a, _ = D.quantize_activations(x)
        P0, A0 = D.standard_partials(blocks, n, k, qname, a)
        P, A = prep.partials(a)
        assert np.array_equal(P, P0), (layout, qname, n, k, m)
        assert np.array_equal(A, A0)
        y0 = D.standard_matmul(blocks, n, k, qname, x)
        assert _same_bits(prep.matmul(x), y0), (layout, qname, n, k, m)
        y, P1, _ = prep.matmul_and_partials(x)
        assert _same_bits(y, y0) and np.array_equal(P1, P0)
        P2, A2, y2 = prep.run(*D.quantize_activations(x))
        assert _same_bits(y2, y0) and np.array_equal(P2, P0) and np.array_equal(A2, A0)


def _ks(qname):
    return (256, 512) if qtypes.get(qname).block_size == 256 else (32, 96, 256)


# ---- the table ------------------------------------------------------------------------------
def test_table_covers_every_layout_and_type():
    want = {("panel64", q) for q in TYPES8} | {("rowmajor", q) for q in TYPES8} | set(IL8_PACKERS)
    want |= {("panel64-compact", q) for q in TYPES8}  # its own tile on compact types (test_verify_compact.py)
    assert set(C.KERNELS) == want


def test_int16_runs_never_overflow():
    # the run chosen for the worst case of each row still fits int16, and Q8_0 needs int32
    for sp in C.KERNELS.values():
        t = qtypes.get(sp.qtype)
        run = C._chunk(t.group, sp.code_max, 128)
        assert run == 0 or run * sp.code_max * 128 <= 32767
    assert C._chunk(32, 128, 127) == 0
    assert C._chunk(32, 15, 127) == 16


# ---- agreement: P identical, y bit-identical ------------------------------------------------
@pytest.mark.parametrize("layout", fast_only(["panel64", "rowmajor"], {"panel64"}))
@pytest.mark.parametrize("qname", fast_only(TYPES8, {"Q4_0", "Q4_K"}))
def test_panel64_and_rowmajor_match_standard(layout, qname, rng):
    for n in (1, 63, 64, 65, 130):
        for k in _ks(qname):
            _check(layout, qname, n, k, (1, 17) if n in (1, 65) else (1,), rng)


@pytest.mark.parametrize("layout", fast_only(["panel64", "rowmajor"], {"panel64"}))
@pytest.mark.parametrize("qname", fast_only(TYPES8, {"Q4_0", "Q4_K"}))
def test_gemm_row_counts(layout, qname, rng):
    _check(layout, qname, 65, 256, (3, 16, 64), rng)


@pytest.mark.parametrize("form", fast_only(sorted(IL8_PACKERS), {("ggml-x8", "Q4_0")}, ids=lambda f: f"{f[0]}-{f[1]}"))
def test_interleaved_match_standard(form, rng):
    layout, qname = form
    for n in (8, 16, 72):
        for k in _ks(qname):
            _check(layout, qname, n, k, (1, 17), rng)
    _check(layout, qname, 72, 256, (3, 16, 64), rng)


@pytest.mark.parametrize("qname", fast_only(["Q4_0", "Q4_1", "Q5_0", "Q6_K", "Q8_0"], {"Q4_0", "Q8_0"}))
def test_extreme_codes_and_activations(qname, rng):
    """Codes at both ends of their range against a = ±127 / -128: the int16 runs must hold."""
    n, k = 64, 256
    t = qtypes.get(qname)
    f = B.to_fields(random_blocks(qname, n, k, rng), t, n, k)
    lo, hi = (-128, 127) if t.code_bits == 8 else (0, (1 << t.code_bits) - 1)
    codes = np.where(rng.random((n, k)) < 0.5, lo, hi)
    f["codes"] = codes.astype(f["codes"].dtype)
    blocks = B.from_fields(f, t, n, k)
    prep = C.prepare("panel64", ref_pack_panel64(blocks, n, k, qname), n, k, qname)
    for val in (-128, -127, 127):
        a = np.full((2, k), val, np.int8)
        a[1, ::2] = -val if val != -128 else 127
        P, _ = prep.partials(a)
        assert np.array_equal(P, D.standard_partials(blocks, n, k, qname, a)[0]), val


# ---- the AVX2 panel64 nibble kernel (verify/_simd.py) against its references ------------------
needs_avx2 = pytest.mark.skipif(not _simd.AVAILABLE, reason="numba does not target AVX2 here")


@needs_avx2
def test_nibble_group_dot_against_numpy_reference(rng):
    from numba import njit

    @njit
    def call(w, woff, a, aoff, acc):
        _simd.nibble_group_dot(w, woff, a, aoff, acc)

    w = rng.integers(0, 256, 5 * 1024 + 7, dtype=np.uint8)
    a = rng.integers(-128, 128, 200, dtype=np.int8)  # aoff multiples of 4: pair order keeps 4-runs
    cases = [(w, 1024 * i + off, a, aoff) for i, off, aoff in ((0, 0, 0), (1, 3, 8), (3, 7, 168))]
    assert np.array_equal(_simd.pair_order(np.arange(8, dtype=np.int8)[None])[0], [0, 2, 1, 3, 4, 6, 5, 7])
    worst = np.full(1024, 0xFF, np.uint8)  # every code 15 against a = -128 and 127: the int16 bound
    cases += [(worst, 0, np.full(32, v, np.int8), 0) for v in (-128, 127)]
    for wb, woff, ab, aoff in cases:
        acc = np.full(70, -1, np.int32)
        call(wb, woff, _simd.pair_order(ab[None, :len(ab) // 4 * 4])[0], aoff, acc)
        assert np.array_equal(acc[:64], _simd.nibble_group_dot_ref(wb, woff, ab, aoff)), (woff, aoff)
        assert np.all(acc[64:] == -1)  # writes exactly 64 lanes
    assert acc[0] == 15 * 127 * 32


@needs_avx2
@pytest.mark.parametrize("group, name, last_aoff", [(32, "int8_group_dot", 160), (16, "int8_group_dot16", 176)])
def test_int8_group_dot_against_numpy_reference(rng, group, name, last_aoff):
    """The int8 group dots, G = 32 (panel64 Q4_K ... Q8_0) and G = 16 (Q6_K, Q2_K, Q3_K): at
    random offsets, and at the bound |code| 127 against a = -128 and 127 in every lane."""
    from numba import njit

    dot = getattr(_simd, name)

    @njit
    def call(w, woff, a, aoff, acc):
        dot(w, woff, a, aoff, acc)

    gb = 64 * group  # bytes of one group of a 64-channel int8 tile
    w = rng.integers(-127, 128, 5 * gb + 9).astype(np.int8).view(np.uint8)
    a = rng.integers(-128, 128, 200, dtype=np.int8)
    cases = [(w, woff, a, aoff) for woff, aoff in ((0, 0), (gb + 3, 8), (3 * gb + 9, last_aoff))]
    for code in (127, -127):
        cases += [(np.full(gb, code, np.int8).view(np.uint8), 0, np.full(group, v, np.int8), 0) for v in (-128, 127)]
    for wb, woff, ab, aoff in cases:
        acc = np.full(70, -1, np.int32)
        call(wb, woff, ab, aoff, acc)
        assert np.array_equal(acc[:64], _simd.int8_group_dot_ref(wb, woff, ab, aoff, group)), (woff, aoff)
        assert np.all(acc[64:] == -1)


@needs_avx2
def test_q6_k_block_dot_against_references(rng):
    """One Q6_K super-block's 16 group sums read in place: against the numpy statement of ggml's
    element order, and that against the codec's own codes (to_fields)."""
    from numba import njit

    @njit
    def call(w, woff, a, aoff, acc):
        _simd.q6_k_block_dot(w, woff, a, aoff, acc)

    t = qtypes.get("Q6_K")
    assert t.type_size == _simd.Q6_K_BLOCK
    blocks = random_blocks("Q6_K", 3, 256, rng).reshape(-1)
    codes = B.to_fields(blocks.reshape(3, -1), t, 3, 256)["codes"].astype(np.int64)
    a = rng.integers(-128, 128, 600, dtype=np.int8)
    for r, aoff in ((0, 0), (1, 17), (2, 344)):
        acc = np.full(20, -1, np.int32)
        call(blocks, r * 210, a, aoff, acc)
        ref = _simd.q6_k_block_dot_ref(blocks, r * 210, a, aoff)
        assert np.array_equal(ref, (codes[r] * a[aoff:aoff + 256]).reshape(16, 16).sum(axis=1))
        assert np.array_equal(acc[:16], ref) and np.all(acc[16:] == -1), (r, aoff)
    worst = np.full(210, 0xFF, np.uint8)  # every code 63 against a = -128 and 127: the int16 bound
    for v in (-128, 127):
        acc = np.zeros(16, np.int32)
        call(worst, 0, np.full(256, v, np.int8), 0, acc)
        assert np.all(acc == 63 * 16 * v)


#: the fast int8 panel tiles by instruction set, and the one the kernel table picks where both run
INT8_PANEL_TILES = {"avx2": C._INT8_PANEL_TILES_AVX2, "avx512": C._INT8_PANEL_TILES_AVX512}
DEFAULT_ISA = "avx512" if C._INT8_PANEL_TILES_AVX512 else "avx2"


@needs_avx2
@pytest.mark.parametrize("qname, isa", [
    pytest.param(q, isa, marks=() if (q, isa) in {("Q6_K", "avx2"), ("Q6_K", "avx512"), ("Q8_0", "avx512")}
                 else (pytest.mark.slow,))
    for q in ("Q6_K", "Q5_0", "Q5_1", "Q5_K", "Q2_K", "Q3_K", "Q8_0") for isa in ("avx2", "avx512")
    if (q, isa) != ("Q8_0", "avx2")])  # vpsignb cannot negate Q8_0's -128 codes: no AVX2 tile for them
def test_fast_and_portable_int8_panel_kernels_agree(qname, isa, rng):
    """panel64 int8 panels through the AVX2 (vpsignb) and the AVX-512 (vpdpbusd) group dots ==
    the portable column tile, bit for bit, with activations at -128 and codes at both ends of
    their range (Q8_0's -128 codes: AVX-512 only; vpsignb cannot negate them)."""
    import dataclasses

    if not INT8_PANEL_TILES[isa]:
        pytest.skip(f"numba does not target {isa} here")
    n, k = 136, 512
    t = qtypes.get(qname)
    f = B.to_fields(random_blocks(qname, n, k, rng), t, n, k)
    f["codes"] = np.where(rng.random(f["codes"].shape) < 0.3, 0, (1 << t.code_bits) - 1).astype(f["codes"].dtype)
    blocks = B.from_fields(f, t, n, k)
    prep = C.prepare("panel64", ref_pack_panel64(blocks, n, k, qname), n, k, qname)
    if qname != "Q8_0" or DEFAULT_ISA == "avx512":
        assert prep.spec.path == f"compiled.panel64.{DEFAULT_ISA}"
        assert prep.spec.kernel is INT8_PANEL_TILES[DEFAULT_ISA][t.group]
    fast = dataclasses.replace(prep, spec=dataclasses.replace(prep.spec, kernel=INT8_PANEL_TILES[isa][t.group]))
    portable = dataclasses.replace(prep, spec=dataclasses.replace(prep.spec, kernel=C._tile_panel64_int8))
    assert_fast_is_portable(fast, portable, blocks, n, k, qname, rng.standard_normal((3, k)))


@pytest.mark.parametrize("kg_blocks", [8, 4])
def test_vnni_group_dots_are_their_reference(kg_blocks, rng):
    """_simd512's group dots (signed int8 panels, raw unsigned codes) against their numpy
    statements, every byte value and activations at -128 and 127."""
    from numba import njit

    from panelpack.verify import _simd512

    if not _simd512.AVAILABLE:
        pytest.skip("numba does not target AVX-512 VNNI here")
    signed = _simd512.int8_group_dot if kg_blocks == 8 else _simd512.int8_group_dot16
    raw = _simd512.raw_group_dot if kg_blocks == 8 else _simd512.raw_group_dot16

    @njit
    def run(w, woff, a, aoff, acc, out):
        signed(w, woff, a, aoff, acc)
        raw(w, woff, a, aoff, out)

    gb = 256 * kg_blocks
    for w in (rng.integers(0, 256, 3 * gb), np.full(3 * gb, 0x80), np.full(3 * gb, 0xFF), np.full(3 * gb, 0x7F)):
        w = np.asarray(w, np.uint8)
        for a in (rng.integers(-128, 128, 4 * kg_blocks + 8), np.full(4 * kg_blocks + 8, -128),
                  np.full(4 * kg_blocks + 8, 127)):
            a = np.asarray(a, np.int8)
            acc, out = np.zeros(64, np.int32), np.zeros(64, np.int32)
            run(w, gb, a, 4, acc, out)
            assert np.array_equal(acc, _simd.int8_group_dot_ref(w, gb, a, 4, 4 * kg_blocks))
            u = w[gb:2 * gb].reshape(kg_blocks, 64, 4).astype(np.int64)
            assert np.array_equal(out, np.einsum("qcj,qj->c", u, a[4:4 + 4 * kg_blocks].reshape(kg_blocks, 4)))


@needs_avx2
@pytest.mark.parametrize("qname", fast_only(["Q4_0", "Q4_1", "Q4_K"], {"Q4_0"}))
def test_avx2_and_portable_nibble_kernels_agree(qname, rng):
    import dataclasses

    n, k = 136, 512
    blocks = random_blocks(qname, n, k, rng)
    prep = C.prepare("panel64", ref_pack_panel64(blocks, n, k, qname), n, k, qname)
    assert prep.spec.kernel is C._tile_panel64_nibble_avx2  # the default where AVX2 runs
    portable = dataclasses.replace(prep, spec=dataclasses.replace(prep.spec, kernel=C._tile_panel64_nibble,
                                                                  activations=None))
    assert_fast_is_portable(prep, portable, blocks, n, k, qname, rng.standard_normal((3, k)))


@needs_avx2
@pytest.mark.parametrize("qname", fast_only(["Q4_0", "Q4_1", "Q4_K", "Q8_0", "Q6_K"], {"Q4_0", "Q8_0", "Q6_K"}))
def test_avx2_and_portable_rowmajor_kernels_agree(qname, rng):
    """rowmajor rows through the AVX2 tiles (4-bit: the nibble kernel; Q8_0: the int8 kernel,
    whose tiles holding a code of -128 fall back to the row partials; Q6_K: super-blocks read in
    place, activation row by row) == the portable row tile."""
    import dataclasses

    n, k = 136, 512
    blocks = random_blocks(qname, n, k, rng)
    if qname == "Q8_0":  # codes at both ends; one -128 in the second tile only
        t = qtypes.get(qname)
        f = B.to_fields(blocks, t, n, k)
        f["codes"] = np.where(rng.random(f["codes"].shape) < 0.3, 127, -127).astype(f["codes"].dtype)
        f["codes"].reshape(n, k)[70, 5] = -128
        blocks = B.from_fields(f, t, n, k)
    prep = C.prepare("rowmajor", {"blocks": blocks}, n, k, qname)
    assert prep.spec.kernel is C._ROW_TILES_AVX2[qname] and prep.spec.path == "compiled.rowmajor.avx2"
    portable = dataclasses.replace(prep, geom=C._geom_rows(prep.qtype, n, k), spec=dataclasses.replace(
        prep.spec, kernel=C._ROW_TILES[qname], activations=None))
    x = rng.standard_normal((5 if qname == "Q6_K" else 3, k))  # Q6_K: M >= 4 too
    assert_fast_is_portable(prep, portable, blocks, n, k, qname, x)


def test_panel64_reference_reader_matches_codes(rng):
    for qname in TYPES8:
        n, k = 65, 256
        blocks = random_blocks(qname, n, k, rng)
        c = C.panel64_codes_ref(ref_pack_panel64(blocks, n, k, qname), n, k, qname)
        assert np.array_equal(c, B.integer_codes(B.to_fields(blocks, qname, n, k), qname)), qname


# ---- refusals -------------------------------------------------------------------------------
def test_refusals(rng):
    blocks = random_blocks("q4_0", 8, 64, rng)
    with pytest.raises(UnsupportedError, match="no compiled kernel for layout 'panel65'"):
        C.matmul("panel65", {"blocks": blocks}, 8, 64, "q4_0", np.zeros(64, np.float32))
    with pytest.raises(UnsupportedError, match="no integer form"):
        C.matmul("rowmajor", {"blocks": blocks}, 8, 64, "f16", np.zeros(64, np.float32))
    with pytest.raises(BadInputError, match="region 'blocks' has 288 bytes, expected 144"):
        C.prepare("rowmajor", {"blocks": blocks}, 4, 64, "q4_0")
    with pytest.raises(BadInputError, match="region 'panels' missing"):
        C.prepare("panel64", {"blocks": blocks}, 8, 64, "q4_0")
    with pytest.raises(UnsupportedError, match="N=12 is not a multiple of 8"):
        C.prepare("il8-int8", {}, 12, 64, "q4_0")
    prep = C.prepare("rowmajor", {"blocks": blocks}, 8, 64, "q4_0")
    with pytest.raises(BadInputError, match="K=32, the Q4_0 matrix has K=64"):
        prep.matmul(np.zeros(32, np.float32))
    with pytest.raises(BadInputError, match="non-finite"):
        prep.matmul(np.full(64, np.nan, np.float32))
    with pytest.raises(BadInputError, match=r"da must have shape \(1, 2\)"):
        prep.run(np.zeros((1, 64), np.int8), np.zeros((1, 3), np.float32))


# ---- the kernel bodies without the JIT (coverage sees them; same answers) --------------------
def test_kernels_without_jit_match():
    code = textwrap.dedent("""
        import numpy as np
        from panelpack.verify import compiled as C, dispatch as D
        import test_compiled as tc
        rng = np.random.default_rng(5)
        from builders import random_blocks
        for (layout, q) in sorted(C.KERNELS):
            n, k = (16, 256)
            blocks = random_blocks(q, n, k, rng)
            x = rng.standard_normal((2, k)).astype(np.float32)
            y = C.matmul(layout, tc.pack(layout, blocks, n, k, q), n, k, q, x)
            y0 = D.standard_matmul(blocks, n, k, q, x)
            assert np.array_equal(y.view(np.uint32), y0.view(np.uint32)), (layout, q)
        print("ok", len(C.KERNELS))
    """)
    assert run_without_jit(code) == f"ok {len(C.KERNELS)}"


# ---- the repack packers ---------------------------------------------------------------------
@pytest.mark.parametrize("qname", fast_only(TYPES8, {"Q4_0", "Q4_K"}))
def test_repack_panel64_matches_reference_packer(qname, rng):
    from panelpack import repack

    n, k = 65, 512
    blocks = random_blocks(qname, n, k, rng)
    got = repack.get("panel64").pack(blocks, n, k, qname)
    want = ref_pack_panel64(blocks, n, k, qname)
    assert set(got) == set(want)
    for name in want:
        assert np.array_equal(np.ascontiguousarray(got[name]).reshape(-1).view(np.uint8),
                              np.ascontiguousarray(want[name]).reshape(-1).view(np.uint8)), name
    x = _activations(rng, 2, k)
    y = C.matmul("panel64", got, n, k, qname, x)
    assert _same_bits(y, D.standard_matmul(blocks, n, k, qname, x))


@pytest.mark.parametrize("layout", fast_only(["rowmajor", "ggml-x8", "il8-nibble", "il8-int8"], {"ggml-x8", "il8-int8"}))
def test_compiled_reads_repack_output(layout, rng):
    from panelpack import repack

    mod = repack.get(layout)
    for qname in sorted(q.name for q in mod.SOURCE_TYPES if (layout, q.name) in C.KERNELS):
        n, k = 72, 512
        blocks = random_blocks(qname, n, k, rng)
        x = _activations(rng, 3, k)
        y = C.matmul(layout, mod.pack(blocks, n, k, qname), n, k, qname, x)
        assert _same_bits(y, D.standard_matmul(blocks, n, k, qname, x)), (layout, qname)


# ---- real tensors ---------------------------------------------------------------------------
@pytest.mark.real
@pytest.mark.parametrize("model", fast_only(["gemma", "smollm2"], {"smollm2"}))
def test_real_tensors_agree(model, request):
    """One tensor of every integer-form type in the real checkpoints: compiled rowmajor and
    panel64 (repack's packer) against the standard dispatch, and the f64 sanity bound."""
    from panelpack import repack
    from panelpack.formats.checkpoint import open_checkpoint

    path = request.getfixturevalue(model)
    rng = np.random.default_rng(3)
    with open_checkpoint(path) as ck:
        picked = {}
        for info in ck.tensors:
            t = qtypes.get(info.type)
            if t.scheme and len(info.shape) == 2 and t.name not in picked and info.shape[0] <= 4096:
                picked[t.name] = info
        assert picked, "no quantized matrix found"
        for qname, info in picked.items():
            n, k = info.shape
            blocks = np.ascontiguousarray(ck.array(info.name))
            x = rng.standard_normal((3, k)).astype(np.float32)
            y0 = D.standard_matmul(blocks, n, k, qname, x)
            for layout, regions in (("rowmajor", {"blocks": blocks}),
                                    ("panel64", repack.get("panel64").pack(blocks, n, k, qname))):
                assert _same_bits(C.matmul(layout, regions, n, k, qname, x), y0), (info.name, layout)
            assert D.sanity_error(y0, D.sanity_reference(blocks, n, k, qname, x)) < 2e-2, info.name


def test_read_only_inputs(rng):
    """Memory-mapped regions and activations arrive read-only: every entry point takes them."""
    from panelpack.verify import il8

    n, k = 16, 256

    def ro(v):
        v = np.array(v, copy=True)
        v.setflags(write=False)
        return v

    for layout, qname in (("panel64", "Q4_K"), ("rowmajor", "Q6_K"), ("il8-nibble", "Q4_0"), ("ggml-x8", "Q4_K")):
        blocks = random_blocks(qname, n, k, rng)
        regions = {name: ro(v) for name, v in pack(layout, blocks, n, k, qname).items()}
        x = ro(_activations(rng, 2, k))
        a = ro(D.quantize_activations(x)[0])
        P0, _ = D.standard_partials(ro(blocks), n, k, qname, a)
        assert np.array_equal(C.partials(layout, regions, n, k, qname, a)[0], P0)
        y0 = D.standard_matmul(ro(blocks), n, k, qname, x)
        assert _same_bits(C.matmul(layout, regions, n, k, qname, x), y0)
        if (layout, qname) in il8.FORMS:
            assert _same_bits(il8.il8_matmul(layout, regions, n, k, qname, x), y0)
            assert np.array_equal(il8.il8_partials(layout, regions, n, k, qname, a)[0], P0)


def test_serial_and_parallel_drivers_agree(rng, monkeypatch):
    """Small calls run their tiles on the calling thread (compiled.SERIAL_WORK): the same bits."""
    n, k = 200, 256
    for layout, qname in (("panel64", "Q4_1"), ("rowmajor", "Q8_0"), ("rowmajor", "Q4_K")):
        blocks = random_blocks(qname, n, k, rng)
        regions = {"blocks": blocks} if layout == "rowmajor" else ref_pack_panel64(blocks, n, k, qname)
        prep = C.prepare(layout, regions, n, k, qname)
        a, da = D.quantize_activations(rng.standard_normal((5, k)).astype(np.float32))
        monkeypatch.setattr(C, "SERIAL_WORK", 0)
        monkeypatch.setattr(C, "PARALLEL_COLD_WORK", 0)  # the parallel driver even on a cold cache
        par = prep.run(a, da)
        monkeypatch.setattr(C, "SERIAL_WORK", 1 << 40)
        ser = prep.run(a, da)
        for x, z in zip(par, ser):
            assert np.array_equal(np.asarray(x).view(np.uint32), np.asarray(z).view(np.uint32)), (layout, qname)


@pytest.mark.parametrize("qname", TYPES8)
def test_rowmajor_scale_fields_subset(qname, rng):
    """The rowmajor scales gather only the scale fields (BlockPlan.to_fields names=): the same
    fields, bit for bit, as the whole plan's."""
    n, k = 9, 256
    t = qtypes.get(qname)
    raw = random_blocks(qname, n, k, rng)
    full = B.to_fields(raw, t, n, k)
    part = C._scale_fields(t, raw, n, k)
    assert "codes" not in part and set(part) == set(full) - {"codes"}
    for name, v in part.items():
        assert np.array_equal(v, full[name]), name


def test_simd_switch_keeps_the_avx2_kernels():
    """``PANELPACK_SIMD=avx2`` turns the AVX-512 kernels off (read at import): the table then
    picks the AVX2 tiles, as on a CPU without AVX-512 VNNI."""
    import os
    import subprocess
    import sys

    code = ("from panelpack.verify import _simd512, compiled as C; from panelpack.formats import qtypes;"
            "print(_simd512.AVAILABLE, C.panel64_kernel('panel64', qtypes.get('Q6_K')).path)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PANELPACK_SIMD": "avx2"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False" and out[1] == ("compiled.panel64.avx2" if _simd.AVAILABLE else "compiled.panel64")


def _tile_cache_keys() -> dict:
    """numba's cache key (hashed) of every tile dispatcher in the kernel tables of verify."""
    import hashlib

    from numba.core.caching import FunctionCache
    from numba.core.dispatcher import Dispatcher
    from numba.core.registry import cpu_target

    from panelpack.verify import compact

    codegen = cpu_target.target_context.codegen()
    tables = {"compiled.INT8_AVX2": C._INT8_PANEL_TILES_AVX2, "compiled.INT8_AVX512": C._INT8_PANEL_TILES_AVX512,
              "compact.AVX2": compact._AVX2_TILES, "compact.AVX512": compact._AVX512_TILES,
              "compact.portable": compact._TILES, "compiled.ROW_AVX2": C._ROW_TILES_AVX2}
    out = {}
    for name, table in tables.items():
        for k, tile in table.items():
            if isinstance(tile, Dispatcher):
                key = FunctionCache(tile.py_func)._index_key(C._TSIG.args, codegen)
                out[f"{name}[{k}]"] = hashlib.sha256(repr(key).encode()).hexdigest()
    from panelpack.verify import _act_tables  # the compact tiles' activation rows (a closure over an intrinsic)

    key = FunctionCache(_act_tables.fill.py_func)._index_key(_act_tables._FILL_SIG.args, codegen)
    out["_act_tables.fill"] = hashlib.sha256(repr(key).encode()).hexdigest()
    return out


def test_tiles_keep_their_cache_key_across_processes():
    """A tile that closes over a group dot (an intrinsic) and its operand body keeps one numba
    cache key from process to process (keyed intrinsics, closable bodies): otherwise every process
    compiles it again and adds an entry to its cache index."""
    import json
    import os
    import subprocess
    import sys

    here = _tile_cache_keys()
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_compiled;"
            "print(json.dumps(test_compiled._tile_cache_keys()))")
    there = json.loads(subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], capture_output=True,
                                      text=True, check=True).stdout)
    assert here and here == there, sorted(k for k in here if here[k] != there.get(k))
