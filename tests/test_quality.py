"""The converter's quantization-error figures (convert/quality.py): the compiled one-pass kernel
against its numpy reference, and the chunked statistics against the whole-tensor formula."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.convert import quality
from panelpack.formats import blocks as codecs
from panelpack.formats import qtypes

from tiers import fast_only


@pytest.mark.parametrize("size", [quality.KERNEL_MIN_ELEMENTS, quality.KERNEL_MIN_ELEMENTS + 13, 1 << 20])
def test_error_kernel_matches_reference(rng, size):
    ref = (rng.standard_normal(size) * 0.05).astype(np.float32)
    new = (ref + rng.standard_normal(size).astype(np.float32) * 1e-3).astype(np.float32)
    got = quality._error_sums_kernel()(new, ref)
    want = quality.error_sums_ref(new, ref)
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-12)  # f64 sums in another order
    assert got[2] == want[2]  # the max is exact


def test_error_kernel_flags_every_nonfinite_element(rng):
    ref = rng.standard_normal(quality.KERNEL_MIN_ELEMENTS).astype(np.float32)
    for bad, where in [(np.inf, "new"), (np.nan, "new"), (-np.inf, "ref"), (np.nan, "ref")]:
        for pos in (0, 7, ref.size - 1):
            new, r = ref.copy(), ref.copy()
            (new if where == "new" else r)[pos] = bad
            sq_d = quality._error_sums_kernel()(new, r)[0]
            assert not np.isfinite(sq_d), (bad, where, pos)


def _whole_formula(x_new, x_ref):
    d = x_new.astype(np.float64) - x_ref.astype(np.float64)
    ok = np.isfinite(d)
    rms_ref = np.sqrt(np.mean(x_ref.astype(np.float64)[ok] ** 2))
    return np.sqrt(np.mean(d[ok] ** 2)) / rms_ref, np.max(np.abs(d[ok]))


@pytest.mark.parametrize("qtype", fast_only(["Q4_0", "Q6_K", "Q8_0"], {"Q4_0", "Q8_0"}))
def test_chunked_stats_equal_the_whole_formula(rng, qtype):
    t = qtypes.BY_NAME[qtype]
    x = (rng.standard_normal((512, 512)) * 0.02).astype(np.float32)
    y = codecs.dequantize(codecs.quantize(x, t), t, 512, 512).reshape(512, 512)
    stats = quality.ErrorStats()
    for r0 in range(0, 512, 128):  # chunks at and above the kernel size, as the pipeline adds them
        stats.add(y[r0:r0 + 128], x[r0:r0 + 128])
    got = stats.result()
    rel, mx = _whole_formula(y, x)
    assert got["rel_rms"] == pytest.approx(rel, rel=1e-12) and got["max_abs"] == mx


def test_nonfinite_chunk_takes_the_masked_path(rng):
    x = rng.standard_normal((256, 256)).astype(np.float32)
    y = x + np.float32(1e-3)
    x[3, 5] = np.inf
    stats = quality.ErrorStats()
    stats.add(y, x)
    got = stats.result("w")
    rel, mx = _whole_formula(y, x)
    assert got["nonfinite"] == {"source": 1, "dequantized": 0}
    assert got["rel_rms"] == pytest.approx(rel, rel=1e-12) and got["max_abs"] == pytest.approx(mx)
    assert "non-finite source" in got["warning"]


# ---- the vector error kernel (convert/_error_kernels.py) against its scalar reference ----------
def _cases(rng):
    for size in (0, 1, 7, 8, 9, 64, 1000, 4096 + 5, 1 << 16):
        ref = (rng.standard_normal(size) * 0.05).astype(np.float32)
        new = (ref + rng.standard_normal(size).astype(np.float32) * 1e-3).astype(np.float32)
        yield f"random {size}", new, ref
    big = rng.uniform(-3e38, 3e38, 1 << 14).astype(np.float32)  # f32's range: the f64 sums stay finite
    yield "huge", big, big[::-1].copy()
    sub = (rng.standard_normal(4096) * 1e-40).astype(np.float32)  # subnormal
    yield "subnormal", sub, np.zeros_like(sub)
    for bad in (np.nan, np.inf, -np.inf):
        for pos in (0, 5, 8, 4095, 4099):
            ref = rng.standard_normal(4100).astype(np.float32)
            new = ref.copy()
            new[pos] = bad
            yield f"{bad} at {pos} (new)", new, ref
            yield f"{bad} at {pos} (ref)", ref, new.copy()


def _same(a: float, b: float) -> bool:
    return (a == b and np.signbit(a) == np.signbit(b)) or (np.isnan(a) and np.isnan(b))


@pytest.mark.slow
def test_vector_error_kernel_gives_the_scalar_kernels_bits(rng):
    from panelpack.convert import _error_kernels as ek

    if ek.lane_sums is None:
        pytest.skip("JIT disabled: only the scalar kernel runs")
    assert ek.error_sums is not ek.error_sums_scalar
    for label, new, ref in _cases(rng):
        got, want = ek.error_sums(new, ref), ek.error_sums_scalar(new, ref)
        assert all(_same(g, w) for g, w in zip(got, want)), (label, got, want)


def test_scalar_error_kernel_is_the_reference_up_to_order(rng):
    from panelpack.convert import _error_kernels as ek

    for label, new, ref in _cases(rng):
        got, want = ek.error_sums_scalar(new, ref), quality.error_sums_ref(new, ref)
        if not np.isfinite(want[0]):  # non-finite: the ledger takes the masked numpy path
            assert not np.isfinite(got[0]), label
            continue
        np.testing.assert_allclose(got[:2], want[:2], rtol=1e-12, err_msg=label)
        assert got[2] == want[2], label
