"""Block codecs, encoding side: Q4_0 and Q8_0 byte-identical with ggml's quantize_row_*_ref
and with gguf-py's numpy twin; Q4_K byte-identical with ggml's quantize_row_q4_K_ref; the
numba kernels equal their numpy references; special values follow ggml; and the kernels run
unchanged as plain Python (NUMBA_DISABLE_JIT=1)."""

from __future__ import annotations

import importlib
import textwrap

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import quantize as gguf_quantize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from panelpack.formats import blocks, qtypes

import ggml_ref
from builders import run_without_jit
from tiers import fast_only

QUANTIZABLE = [t.lower for t in qtypes.QUANTIZABLE]
GGUF_PY_QUANTIZES = ["q4_0", "q8_0"]  # gguf-py cannot quantize Q4_K

needs_ggml = pytest.mark.skipif(not ggml_ref.available(), reason="libggml-python is not installed")


def codec(name):
    return importlib.import_module(f"panelpack.formats.blocks.{name}")


def gguf_py(x: np.ndarray, name: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return gguf_quantize(x, GGMLQuantizationType(qtypes.get(name).id))


def block_rows(a: np.ndarray, name: str) -> np.ndarray:
    return a.reshape(-1, qtypes.get(name).type_size)


def assert_same_bytes(a: np.ndarray, b: np.ndarray, name: str):
    assert a.shape == b.shape and a.dtype == b.dtype == np.uint8
    bad = np.flatnonzero((block_rows(a, name) != block_rows(b, name)).any(axis=1))
    assert bad.size == 0, (f"{bad.size} {name} blocks differ, first #{bad[0]}: "
                           f"{block_rows(a, name)[bad[0]].tobytes().hex()} vs {block_rows(b, name)[bad[0]].tobytes().hex()}")


def distributions(rng: np.random.Generator, n: int = 6, k: int = 1024):
    """Named f32 test matrices ``[n, k]`` (k a multiple of 256)."""
    f32 = np.float32
    normal = rng.standard_normal((n, k)).astype(f32)
    yield "normal", normal
    yield "uniform", rng.uniform(-1, 1, (n, k)).astype(f32)
    yield "heavy-tails", rng.standard_t(1.2, (n, k)).astype(f32)
    yield "const-32", np.repeat(rng.standard_normal((n, k // 32, 1)), 32, axis=2).reshape(n, k).astype(f32)
    yield "const-256", np.repeat(rng.standard_normal((n, k // 256, 1)), 256, axis=2).reshape(n, k).astype(f32)
    yield "zeros", np.zeros((n, k), f32)
    yield "tiny", (normal * f32(1e-30)).astype(f32)
    yield "subnormal", (normal * f32(1e-40)).astype(f32)
    yield "huge", (normal * f32(1e37)).astype(f32)
    yield "positive", (np.abs(normal) + f32(3)).astype(f32)
    yield "negative", (-np.abs(normal) - f32(0.5)).astype(f32)
    out = normal.copy()
    out.reshape(-1, 32)[:, 7] *= f32(1000)
    yield "one-outlier-per-block", out
    yield "integers", rng.integers(-8, 9, (n, k)).astype(f32)
    # Q8_0 rounding ties: amax 127 makes d = 1 exactly, so x.5 lands on x.5
    ties = (rng.integers(-126, 126, (n, k)) + f32(0.5)).astype(f32)
    ties.reshape(-1, 32)[:, 0] = 127
    yield "ties", ties
    # mostly +0.0 (a block of zeros starting with -0.0 is the one finite case where gguf-py
    # and ggml disagree, tested on its own below)
    yield "sparse", np.where(rng.random((n, k)) < 0.1, normal, f32(0)).astype(f32)


CASES = list(distributions(np.random.default_rng(99)))
CASE_IDS = [c[0] for c in CASES]


# ---- hand-computed blocks --------------------------------------------------------------------
def test_golden_q4_0_block():
    x = np.zeros(32, np.float32)
    x[5], x[6] = -4.0, 2.0  # max = -4 -> d = 0.5, id = 2: u5 = trunc(0.5) = 0, u6 = trunc(12.5) = 12
    qs = [0x88] * 16
    qs[5] = 0x80  # u5 = 0 | u21 = 8
    qs[6] = 0x8C  # u6 = 12 | u22 = 8
    want = np.array([0x00, 0x38] + qs, np.uint8)  # d = f16(0.5) = 0x3800
    for fn in (codec("q4_0").quantize, codec("q4_0").quantize_ref):
        assert fn(x).tobytes() == want.tobytes()


def test_golden_q8_0_block():
    x = np.zeros(32, np.float32)
    x[:6] = [127.0, 0.5, -0.5, 1.5, -63.5, 2.49]  # d = 1, id = 1; roundf: half away from zero
    q = np.zeros(32, np.int8)
    q[:6] = [127, 1, -1, 2, -64, 2]
    want = np.concatenate([np.array([0x00, 0x3C], np.uint8), q.view(np.uint8)])
    for fn in (codec("q8_0").quantize, codec("q8_0").quantize_ref):
        assert fn(x).tobytes() == want.tobytes()


def test_golden_q4_k_zero_and_constant_blocks():
    z = np.zeros((1, 256), np.float32)
    for fn in (codec("q4_k").quantize, codec("q4_k").quantize_ref):
        assert not fn(z).any()  # d = dmin = 0, scales 0, codes 0
    # a negative constant: every sub-block has max == min -> scale 0, the_min = 2: d = 0,
    # dmin = f16(2/63), lm = nearest_int(63/2 * 2) = 63, codes 0 (d*sc == 0 keeps them)
    c = np.full((1, 256), -2.0, np.float32)
    for fn in (codec("q4_k").quantize, codec("q4_k").quantize_ref):
        b = fn(c).reshape(-1)
        dmin = np.array([np.float32(2.0) / np.float32(63)], np.float32).astype(np.float16).view(np.uint8)
        assert b[:4].tolist() == [0, 0, *dmin.tolist()]
        # scales[0..3] = sc | (sc[4..7] >> 4) << 6 = 0; scales[4..7] = m | (m[4..7] >> 4) << 6
        # = 63 | 3 << 6; scales[8..11] = sc[4..7] & 15 | (m[4..7] & 15) << 4 = 0xF0
        assert b[4:8].tolist() == [0] * 4
        assert b[8:12].tolist() == [0xFF] * 4
        assert b[12:16].tolist() == [0xF0] * 4
        assert not b[16:].any()
    if ggml_ref.available():
        assert np.array_equal(ggml_ref.quantize(c, "q4_k"), codec("q4_k").quantize(c))


# ---- differential: fast == numpy reference == ggml (== gguf-py) --------------------------------
@pytest.mark.parametrize("name", fast_only(QUANTIZABLE, {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k"}))
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_fast_equals_reference(name, case):
    x = case[1]
    with np.errstate(all="ignore"):
        assert_same_bytes(codec(name).quantize(x), codec(name).quantize_ref(x), name)


@needs_ggml
@pytest.mark.parametrize("name", QUANTIZABLE)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_equals_ggml(name, case):
    x = case[1]
    assert_same_bytes(codec(name).quantize(x), ggml_ref.quantize(x, name), name)


@pytest.mark.parametrize("name", GGUF_PY_QUANTIZES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_equals_gguf_py(name, case):
    x = case[1]
    assert_same_bytes(codec(name).quantize(x), gguf_py(x, name), name)


@needs_ggml
def test_ggml_and_gguf_py_agree_where_we_claim_both(rng):
    """The premise of the two tests above: on finite input (and no all-zero block starting
    with -0.0) gguf-py's numpy quantizers are ggml's."""
    x = rng.standard_normal((4, 512)).astype(np.float32)
    for name in GGUF_PY_QUANTIZES:
        assert_same_bytes(gguf_py(x, name), ggml_ref.quantize(x, name), name)


# ---- special values: ggml is the reference ----------------------------------------------------
def special_rows(rng) -> np.ndarray:
    f32 = np.float32
    rows = []
    for pos in (0, 1, 15, 16, 31, 100, 255):
        for val in (np.nan, np.inf, -np.inf, -0.0, f32(1e-45), f32(3.4e38), f32(-3.4e38)):
            r = rng.standard_normal(256).astype(f32)
            r[pos] = val
            rows.append(r)
    rows.append(np.full(256, np.nan, f32))
    rows.append(np.full(256, np.inf, f32))
    rows.append(np.full(256, -0.0, f32))
    r = np.zeros(256, f32)
    r[0] = -0.0  # an all-zero block whose first value is -0.0
    rows.append(r)
    rows.append(np.where(np.arange(256) % 2 == 0, f32(3e38), f32(-3e38)).astype(f32))
    rows.append(np.concatenate([np.zeros(255, f32), [f32(1e-45)]]))
    rows.append((rng.standard_normal(256) * 1e-38).astype(f32))  # 1/d overflows to inf
    r = -np.abs(rng.standard_normal(256)).astype(f32) - 1
    r[::32] = -1e-30  # all-negative sub-blocks with a max close to 0
    rows.append(r)
    return np.array(rows, f32)


@needs_ggml
@pytest.mark.parametrize("name", QUANTIZABLE)
def test_special_values_follow_ggml(name, rng):
    x = special_rows(rng)
    with np.errstate(all="ignore"):
        fast = codec(name).quantize(x)
        ref = codec(name).quantize_ref(x)
    want = ggml_ref.quantize(x, name)
    assert_same_bytes(fast, want, name)
    assert_same_bytes(ref, want, name)


def test_q4_0_zero_block_starting_with_negative_zero_follows_ggml():
    """ggml scans with amax < |v| from max = +0.0, so an all-zero block gets d = 0/-8 = -0.0
    (f16 0x8000) whatever the sign of its zeros; gguf-py takes x[argmax|x|] = x[0] = -0.0 and
    writes d = +0.0 there. We follow ggml (documented in docs/CODECS.md)."""
    x = np.zeros(32, np.float32)
    x[0] = -0.0
    assert codec("q4_0").quantize(x)[:2].tolist() == [0x00, 0x80]
    assert gguf_py(x.reshape(1, -1), "q4_0")[0, :2].tolist() == [0x00, 0x00]
    if ggml_ref.available():
        assert ggml_ref.quantize(x, "q4_0")[0, :2].tolist() == [0x00, 0x80]


def test_nan_in_block_follows_ggml_not_gguf_py():
    """A NaN never wins ggml's max scan (Q4_0) and only survives Q8_0's MAX() as the last
    element; numpy's argmax / max propagate it. We follow ggml."""
    x = np.linspace(-1, 1, 32, dtype=np.float32)
    x[3] = np.nan
    for name in ("q4_0", "q8_0"):
        ours = codec(name).quantize(x)
        d = ours[:2].view(np.float16)[0]
        assert np.isfinite(d) and d != 0, name
        assert not np.array_equal(ours, gguf_py(x.reshape(1, -1), name)[0]), name
        if ggml_ref.available():
            assert np.array_equal(ours, ggml_ref.quantize(x, name)[0]), name


f32_values = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
f32_finite = st.floats(width=32, min_value=-1e6, max_value=1e6, allow_subnormal=True)


@needs_ggml
@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(x=hnp.arrays(np.float32, (2, 256), elements=st.one_of(f32_finite, f32_values)))
def test_property_equals_ggml(x):
    with np.errstate(all="ignore"):
        for name in QUANTIZABLE:
            assert_same_bytes(codec(name).quantize(x), ggml_ref.quantize(x, name), name)


# ---- shapes, threads, round trip -------------------------------------------------------------
@pytest.mark.parametrize("name", fast_only(QUANTIZABLE, {"q4_0", "q8_0"}))
def test_parallel_path_equals_serial(name, rng):
    x = rng.standard_normal((300, 1024)).astype(np.float32)
    mod = codec(name)
    assert_same_bytes(mod.quantize(x, parallel=True), mod.quantize(x, parallel=False), name)


@pytest.mark.parametrize("name", QUANTIZABLE)
def test_shapes_and_round_trip(name, rng):
    t = qtypes.get(name)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    q = codec(name).quantize(x)
    assert q.shape == (3, t.row_bytes(512)) and q.dtype == np.uint8
    q1 = codec(name).quantize(x[1])
    assert q1.shape == (t.row_bytes(512),) and np.array_equal(q1, q[1])
    assert np.array_equal(blocks.quantize(x, name), q)
    assert np.array_equal(blocks.quantize(x.astype(np.float64), name), q)  # cast like gguf-py
    assert np.array_equal(codec(name).quantize(np.asfortranarray(x)), q)
    y = blocks.dequantize(q, name, 3, 512)
    err = np.abs(y - x).max() / np.abs(x).max()
    assert err < {"q8_0": 0.01, "q4_0": 0.15, "q4_k": 0.15, "q4_1": 0.15, "q5_0": 0.08, "q5_1": 0.08,
                  "q5_k": 0.08, "q6_k": 0.04, "q3_k": 0.3, "q2_k": 0.5}[name]


@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
def test_plain_types_quantize_like_gguf_py(name, rng):
    x = rng.standard_normal((2, 64)).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -0.0, 1e-40]
    t = qtypes.get(name)
    got = blocks.quantize(x, name)
    assert got.shape == (2, t.row_bytes(64))
    want = gguf_py(x, name)
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()
    assert np.array_equal(codec(name).dequantize(got).view(np.uint32), blocks.dequantize(got, name, 2, 64).view(np.uint32))


# ---- the kernels as plain Python ---------------------------------------------------------------
def test_kernels_run_without_jit(tmp_path, rng):
    """NUMBA_DISABLE_JIT=1: every kernel runs as Python and gives the same bytes/bits."""
    x = rng.standard_normal((2, 256)).astype(np.float32)
    x[1, 3] = np.nan
    x[1, 40] = -np.inf
    np.save(tmp_path / "x.npy", x)
    raws = {}
    for t in qtypes.DECODABLE:
        raws[t.lower] = np.random.default_rng(t.id).integers(0, 256, (2, t.row_bytes(256)), dtype=np.uint8)
    np.savez(tmp_path / "raw.npz", **raws)
    script = textwrap.dedent(
        """
        import sys, numpy as np, numba
        assert numba.config.DISABLE_JIT
        from panelpack.formats import blocks
        d = sys.argv[1]
        x = np.load(d + "/x.npy")
        raws = dict(np.load(d + "/raw.npz"))
        out = {}
        with np.errstate(all="ignore"):
            for name in %r:
                out["q_" + name] = blocks.quantize(x, name)
            for name, raw in raws.items():
                out["d_" + name] = blocks.dequantize(raw, name, 2, 256)
        np.savez(d + "/out.npz", **out)
        """ % (QUANTIZABLE,)
    )
    run_without_jit(script, str(tmp_path), timeout=300)
    out = np.load(tmp_path / "out.npz")
    with np.errstate(all="ignore"):
        for name in QUANTIZABLE:
            assert_same_bytes(out["q_" + name], codec(name).quantize(x), name)
        for name, raw in raws.items():
            want = blocks.dequantize(raw, name, 2, 256)
            assert np.array_equal(out["d_" + name].view(np.uint32), want.view(np.uint32)), name
