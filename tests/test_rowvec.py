"""Decode-time products: verify/rowvec.py's one-row path and the in-place Q8_0 row kernel
(``_simd.int8_rows_dot``), against the checked compiled path and the numpy references."""

from __future__ import annotations

import dataclasses
import textwrap

import numpy as np
import pytest
from test_compiled import _same_bits, needs_avx2, pack

from panelpack.formats import blocks as B
from panelpack.formats import qtypes
from panelpack.formats.errors import BadInputError
from panelpack.verify import _simd, rowvec
from panelpack.verify import compiled as C
from panelpack.verify import dispatch as D

from builders import random_blocks, run_without_jit
from tiers import fast_only


@needs_avx2
def test_int8_rows_dot_against_numpy_reference(rng):
    from numba import njit

    @njit
    def call(w, woff, stride, a, aoff, acc):
        _simd.int8_rows_dot(w, woff, stride, a, aoff, acc)

    w = rng.integers(-128, 128, 8 * 612 + 40).astype(np.int8).view(np.uint8)  # -128 codes are fine
    a = rng.integers(-127, 128, 200, dtype=np.int8)
    cases = [(w, woff, stride, a, aoff) for woff, stride, aoff in ((0, 34, 0), (2, 612, 37), (5, 1, 160), (9, 32, 3))]
    for code in (-128, 127, -127):  # the bound: |code| 128 against |a| 127 in every lane
        cases += [(np.full(8 * 32, code, np.int8).view(np.uint8), 0, 32, np.full(32, v, np.int8), 0)
                  for v in (127, -127)]
    for wb, woff, stride, ab, aoff in cases:
        acc = np.full(11, -1, np.int32)
        call(wb, woff, stride, ab, aoff, acc)
        assert np.array_equal(acc[:8], _simd.int8_rows_dot_ref(wb, woff, stride, ab, aoff)), (woff, stride, aoff)
        assert np.all(acc[8:] == -1)


@needs_avx2
def test_q8_0_rows_in_place_agree_with_portable_tile(rng):
    """rowmajor Q8_0 below SCRATCH_MIN_ROWS reads its rows in place (8 at a time, the rest one by
    one; codes -128 included); an activation of -128 sends a call to the portable row tile.
    All == the portable tile and the standard partials."""
    n, k = 75, 320  # 64 + 11 rows: a last tile of one 8-row step and 3 single rows
    t = qtypes.Q8_0
    blocks = random_blocks("Q8_0", n, k, rng)
    f = B.to_fields(blocks, t, n, k)
    f["codes"] = np.where(rng.random(f["codes"].shape) < 0.3, 127, -128).astype(f["codes"].dtype)
    f["codes"][::3] = rng.integers(-128, 128, f["codes"][::3].shape)
    blocks = B.from_fields(f, t, n, k)
    prep = C.prepare("rowmajor", {"blocks": blocks}, n, k, "Q8_0")
    portable = dataclasses.replace(prep, spec=dataclasses.replace(prep.spec, kernel=C._ROW_TILES["Q8_0"]))
    for m in range(1, C.SCRATCH_MIN_ROWS):
        x = (rng.standard_normal((m, k)) * 10).astype(np.float32)
        a, da = D.quantize_activations(x)
        for extreme in (False, True):
            if extreme:
                a[m - 1, 7] = -128
            got, want = prep.run(a, da), portable.run(a, da)
            assert np.array_equal(got[0], want[0]) and _same_bits(got[2], want[2]), (m, extreme)
            assert np.array_equal(got[0], D.standard_partials(blocks, n, k, "Q8_0", a)[0])


def _every_kernel():
    return sorted(C.KERNELS)


@pytest.mark.parametrize("row", fast_only(_every_kernel(), {("rowmajor", "Q4_0"), ("panel64", "Q4_0"),
                                                            ("panel64-compact", "Q3_K")},
                                         ids=lambda r: f"{r[0]}-{r[1]}"))
def test_row_product_equals_checked_run(row, rng):
    """RowProduct's one nopython call == prep.run of dispatch.quantize_activations, for every
    compiled kernel, serial and parallel; what it cannot take goes the checked path."""
    layout, qname = row
    t = qtypes.get(qname)
    n, k = (72, 512) if t.block_size == 256 else (72, 96)
    blocks = random_blocks(qname, n, k, rng)
    prep = C.prepare(layout, pack(layout, blocks, n, k, qname), n, k, qname)
    rp = rowvec.RowProduct(prep)
    rp._plan()
    assert not rp._parallel
    par = rowvec.RowProduct(prep)
    par._plan()
    par._parallel, par._fn = True, rowvec._entry(True)
    for scale in (1e-3, 1.0, 1e4):
        x = (rng.standard_normal((1, k)) * scale).astype(np.float32)
        want = prep.run(*D.quantize_activations(x), want_p=False)[2]
        for r in (rp, par):
            assert _same_bits(r(x), want), (layout, qname, scale)
        assert _same_bits(rp(x[0]), want) and _same_bits(rp(x.astype(np.float64)), want)  # checked path
    x2 = (rng.standard_normal((2, k))).astype(np.float32)
    assert _same_bits(rp(x2), prep.run(*D.quantize_activations(x2), want_p=False)[2])
    x[0, 3] = np.nan
    with pytest.raises(BadInputError, match="non-finite"):
        rp(x)


def test_row_product_without_jit():
    """The scalar reference: the nopython function run as Python (NUMBA_DISABLE_JIT=1)."""
    code = textwrap.dedent("""
        import numpy as np
        from builders import random_blocks
        from panelpack.verify import compiled as C, dispatch as D, rowvec
        rng = np.random.default_rng(5)
        for layout, q in (("panel64", "Q4_1"), ("rowmajor", "Q8_0"), ("rowmajor", "Q6_K")):
            n, k = 16, 256
            blocks = random_blocks(q, n, k, rng)
            regions = {"blocks": blocks} if layout == "rowmajor" else __import__("test_compiled").pack(layout, blocks, n, k, q)
            prep = C.prepare(layout, regions, n, k, q)
            x = rng.standard_normal((1, k)).astype(np.float32)
            y = rowvec.RowProduct(prep)(x)
            y0 = D.standard_matmul(blocks, n, k, q, x)
            assert np.array_equal(y.view(np.uint32), y0.view(np.uint32)), (layout, q)
        print("ok")
    """)
    assert run_without_jit(code) == "ok"


@pytest.mark.parametrize("pairs", [True, False])
@pytest.mark.parametrize("bias,norm,rot", [(True, False, 16), (False, False, 16), (False, True, 16), (True, True, 8)])
def test_rope_into_cache_equals_the_numpy_steps(pairs, bias, norm, rot, rng):
    """ops.rope_into_cache == Model._layer's numpy steps (split, += b, per-head RMSNorm, ops.rope on
    the leading ``rot`` dimensions, cache stores), bit for bit."""
    from panelpack.formats.arch.rope import Rope, default_inv_freq
    from panelpack.verify.runtime import ops

    m, heads, kvh, d, pos0, cap, eps = 2, 6, 2, 16, 5, 12, 1e-6
    nq, nk = heads * d, kvh * d
    y = rng.standard_normal((m, nq + 2 * nk)).astype(np.float32)
    bq, bk, bv = (rng.standard_normal(n).astype(np.float32) if bias else np.zeros(0, np.float32) for n in (nq, nk, nk))
    qn, kn = (rng.standard_normal(d).astype(np.float32) if norm else np.zeros(0, np.float32) for _ in range(2))
    cos, sin = Rope(rot, tuple(default_inv_freq(10000.0, rot))).tables(np.arange(pos0, pos0 + m))
    q = np.empty((m, heads, d), np.float32)
    kt, vc = np.zeros((kvh, d, cap), np.float32), np.zeros((kvh, cap, d), np.float32)
    ops.rope_into_cache(y, nq, nk, bq, bk, bv, qn, kn, eps, cos, sin, pairs, pos0, q, kt, vc)
    q0, k0, v0 = (p.copy() for p in np.split(y, [nq, nq + nk], axis=1))
    if bias:
        q0, k0, v0 = q0 + bq, k0 + bk, v0 + bv
    q0, k0 = q0.reshape(m, heads, d), k0.reshape(m, kvh, d)
    if norm:
        q0, k0 = ops.rms_norm(q0, qn, eps), ops.rms_norm(k0, kn, eps)
    q0, k0 = ops.rope(q0, cos, sin, pairs), ops.rope(k0, cos, sin, pairs)
    kt0, vc0 = np.zeros_like(kt), np.zeros_like(vc)
    kt0[:, :, pos0:pos0 + m] = k0.transpose(1, 2, 0)
    vc0[:, pos0:pos0 + m] = v0.reshape(m, kvh, d).transpose(1, 0, 2)
    for got, want in ((q, q0), (kt, kt0), (vc, vc0)):
        assert _same_bits(got, want)


@pytest.mark.skipif(not _simd.F16_LANES, reason="numba does not target AVX2 with F16C here")
def test_f16_lanes_against_numpy(rng):
    from numba import njit

    @njit
    def call(h, off, out):
        _simd.f16_lanes(h, off, out)

    bits = np.arange(1 << 16, dtype=np.uint16)
    bits = bits[~np.isnan(bits.view(np.float16))]  # NaN payloads: see with_half_factors
    out = np.full(70, -1, np.float32)
    for off in list(range(0, bits.size - 64, 64)) + [3, bits.size - 64]:
        call(bits, off, out)
        assert np.array_equal(out[:64].view(np.uint32), bits[off:off + 64].view(np.float16).astype(np.float32).view(np.uint32))
    assert np.all(out[64:] == -1)


@pytest.mark.parametrize("qname", ["Q4_0", "Q4_1", "Q4_K", "Q8_0"])
def test_half_factors_same_bits(qname, rng):
    """compiled.with_half_factors: Q4_0/Q4_1 panel64 read their factors as f16 (the same bits, every
    M, P too); other types, or a non-finite factor, keep the f32 kernel."""
    n, k = 130, 256
    blocks = random_blocks(qname, n, k, rng)
    prep = C.prepare("panel64", pack("panel64", blocks, n, k, qname), n, k, qname)
    half = C.with_half_factors(prep)
    if qname in ("Q4_0", "Q4_1") and _simd.F16_LANES:
        assert half.spec.path == "compiled.panel64.avx2.f16" and half.s_t.nbytes * 2 == prep.s_t.nbytes
    else:
        assert half is prep
    for m in (1, 3, 17):
        x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
        q = D.quantize_activations(x)
        for got, want in zip(half.run(*q), prep.run(*q)):
            assert np.array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32)), (qname, m)
    x = rng.standard_normal((1, k)).astype(np.float32)
    assert _same_bits(rowvec.RowProduct(half)(x), prep.run(*D.quantize_activations(x), want_p=False)[2])
    if half is not prep:
        bad = dataclasses.replace(prep, s_t=prep.s_t.copy())
        bad.s_t[0, 0, 0] = np.inf
        assert C.with_half_factors(bad) is bad


@pytest.mark.slow
def test_the_parallel_row_product_is_a_parallel_loop():
    """_row_parallel's tile loop compiles to one numba parallel loop (with the tile count
    computed inside ``prange(...)`` numba once left it serial, with only a warning)."""
    import warnings

    from numba import njit
    from numba.core.errors import NumbaPerformanceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", NumbaPerformanceWarning)
        disp = njit(rowvec._RSIG, parallel=True)(rowvec._row_parallel)
    assert len(disp.overloads[rowvec._RSIG.args].metadata["parfor_diagnostics"].initial_parfors) == 1


def test_the_row_functions_cache_key_holds_the_table_builder():
    """The row functions inline ``_act_tables.fill`` (the activation tables the compact AVX2 tiles
    read): their numba cache key holds it, with a digest of ``_act_tables``' source, so an edit
    there compiles them afresh rather than loading a prologue that writes the old table bytes."""
    import hashlib

    from numba.core.caching import FunctionCache
    from numba.core.registry import cpu_target
    from numba.core.serialize import dumps

    from panelpack.formats import _numba_internals
    from panelpack.verify import _act_tables, _simd

    if not _simd.AVAILABLE:
        pytest.skip("numba does not target AVX2 here: fill is the scalar builder (no tables read)")
    digest = _numba_internals._sources_digest((_act_tables.__name__,)).encode()
    for body in (rowvec._row_serial, rowvec._row_parallel):
        cells = tuple(c.cell_contents for c in body.__closure__)
        assert _act_tables.fill in cells
        assert digest in dumps(cells)  # what numba hashes into the key: the cells as it pickles them
        key = FunctionCache(body)._index_key(rowvec._RSIG.args, cpu_target.target_context.codegen())
        assert key[2][1] == hashlib.sha256(dumps(cells)).hexdigest()
