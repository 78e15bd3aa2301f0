"""The standard dispatch (verify/dispatch.py, docs/FORMAT.md §3): activation quantizer, partials, rescale."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from panelpack.formats import blocks as B
from panelpack.formats import qtypes
from panelpack.formats.errors import BadInputError, UnsupportedError
from panelpack.verify import dispatch as D

import ggml_ref
from builders import random_blocks, run_without_jit

TYPES8 = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K")


def _bits(y):
    return np.ascontiguousarray(y, np.float32).view(np.uint32)


def _split_q8_0(q, m, k):
    q = q.reshape(m, k // 32, 34)
    a = np.ascontiguousarray(q[:, :, 2:]).view(np.int8).reshape(m, k)
    d = np.ascontiguousarray(q[:, :, :2]).view("<f2").astype(np.float32).reshape(m, k // 32)
    return a, d


def _wide_activations(rng, m, k):
    """Rows with magnitudes from 1e-6 to 1e4, plus exact .5 ties and zero blocks."""
    x = (rng.standard_normal((m, k)) * 10.0 ** rng.uniform(-6, 4, (m, 1))).astype(np.float32)
    x[0, :32] = 0.0
    x[-1, 32:64] = np.arange(32) - np.float32(15.5)  # every value a .5 tie once amax = 127
    x[-1, 32] = 127.0
    return x


# ---- 1. activation quantization -------------------------------------------------------------
def test_activation_quantizer_matches_gguf_bytes(rng):
    m, k = 9, 512
    x = _wide_activations(rng, m, k)
    a, da = D.quantize_activations(x)
    qa, qd = _split_q8_0(gguf_quantize(x, GGMLQuantizationType.Q8_0), m, k)
    assert np.array_equal(a, qa)
    assert np.array_equal(_bits(da), _bits(qd))
    ra, rd = D.quantize_activations_ref(x)
    assert np.array_equal(ra, a) and np.array_equal(_bits(rd), _bits(da))
    ka, kd = D.quantize_activations_kernel(x)  # the kernel, which this small batch skips
    assert np.array_equal(ka, a) and np.array_equal(_bits(kd), _bits(da))


@pytest.mark.skipif(not ggml_ref.available(), reason="libggml-python is not installed")
def test_activation_quantizer_matches_ggml_c_reference(rng):
    m, k = 17, 1024
    x = _wide_activations(rng, m, k)
    a, da = D.quantize_activations(x)
    ca, cd = _split_q8_0(ggml_ref.quantize(x, "q8_0"), m, k)  # quantize_row_q8_0_ref
    assert np.array_equal(a, ca)
    assert np.array_equal(_bits(da), _bits(cd))
    ka, kd = D.quantize_activations_kernel(x)
    assert np.array_equal(ka, ca) and np.array_equal(_bits(kd), _bits(cd))


def test_quantizer_hand_cases():
    # amax = 127 -> d = 1, id = 1: a = roundf(x), ties away from zero
    x = np.zeros((1, 32), np.float32)
    x[0, :8] = [127, 0.5, -0.5, 1.5, -1.5, 2.5, -126.5, 0.49999997]
    a, da = D.quantize_activations(x)
    assert a[0, :8].tolist() == [127, 1, -1, 2, -2, 3, -127, 0]
    assert da.tolist() == [[1.0]]
    # an all-zero row: a = 0, da = 0
    a, da = D.quantize_activations(np.zeros(64, np.float32))
    assert not a.any() and da.tolist() == [[0.0, 0.0]]
    # the ties x*id lands on: amax = 254 -> d = 2, id = 0.5; 3 * 0.5 = 1.5 -> 2, -5 * 0.5 -> -3
    x = np.zeros(32, np.float32)
    x[:3] = [254, 3, -5]
    a, da = D.quantize_activations(x)
    assert a[0, :3].tolist() == [127, 2, -3] and da.tolist() == [[2.0]]


@pytest.mark.parametrize(
    "amax, want_da",
    [
        (127 * 65504.0, 65504.0),  # d = the largest f16
        (127 * 65520.0, np.inf),  # d rounds up past the largest f16: da = inf
        (127 * 2.0 ** -24, 2.0 ** -24),  # the smallest f16 subnormal
        (127 * 2.0 ** -25, 0.0),  # the tie below it rounds to even: da = 0
        (127 * 3 * 2.0 ** -26, 2.0 ** -24),  # above the tie: rounds up
    ],
)
def test_quantizer_f16_edges_of_da(amax, want_da):
    x = np.zeros(32, np.float32)
    x[0] = np.float32(amax)
    x[1] = np.float32(-amax / 2)
    a, da = D.quantize_activations(x)
    assert da[0, 0] == np.float32(want_da)
    assert a[0, 0] == 127 and a[0, 1] in (-64, -63)
    with np.errstate(over="ignore"):  # gguf-py's f16 cast of an overflowing d warns
        qa, qd = _split_q8_0(gguf_quantize(x.reshape(1, -1), GGMLQuantizationType.Q8_0), 1, 32)
    assert np.array_equal(a, qa) and np.array_equal(_bits(da), _bits(qd))


def test_quantizer_when_one_over_d_overflows():
    x = np.zeros(32, np.float32)
    x[:2] = [1e-38, -5e-39]  # d = 7.9e-41 (subnormal), 1/d = inf in f32
    a, da = D.quantize_activations(x)
    ra, rd = D.quantize_activations_ref(x)
    assert not a.any() and not ra.any()
    assert da.tolist() == rd.tolist() == [[0.0]]


def test_quantizer_refuses_bad_input():
    with pytest.raises(BadInputError, match="non-finite"):
        D.quantize_activations(np.array([np.inf] + [0.0] * 31, np.float32))
    with pytest.raises(BadInputError, match="not a multiple of 32"):
        D.quantize_activations(np.zeros(33, np.float32))
    with pytest.raises(BadInputError, match=r"\[K\] or \[M, K\]"):
        D.quantize_activations(np.zeros((1, 1, 32), np.float32))
    with pytest.raises(BadInputError, match="must be float32"):
        D.quantize_activations(np.zeros(32, np.int32))
    with pytest.raises(BadInputError, match="empty"):
        D.quantize_activations(np.zeros((0, 32), np.float32))


# ---- 2./3. hand-computed products per scheme ------------------------------------------------
def _f16bits(v):
    return np.array(v, np.float16).view(np.uint16)


def _x_block_heads(k, head=127.0):
    """x with ``head`` at the first element of every 32-block, 0 elsewhere: a = x, da = 1."""
    x = np.zeros(k, np.float32)
    x[::32] = head
    return x


HAND = {
    # Q4_0: row 0 c = +1 (u = 9), d = 1; row 1 c = -2 (u = 6), d = 0.5; P = 127 c, y = (P·s)·da
    "Q4_0": (32, lambda: {"d": _f16bits([[1.0], [0.5]]),
                          "codes": np.array([[9] * 32, [6] * 32], np.uint8)}, [127.0, -127.0]),
    # Q4_1: u = 3, d = 0.5, m = -2: y = (381·0.5) + (-2·127) = -63.5
    "Q4_1": (32, lambda: {"d": _f16bits([[0.5]]), "m": _f16bits([[-2.0]]),
                          "codes": np.full((1, 32), 3, np.uint8)}, [-63.5]),
    # Q5_0: q = 21 -> c = 5, d = 0.25: y = 635·0.25
    "Q5_0": (32, lambda: {"d": _f16bits([[0.25]]), "codes": np.full((1, 32), 21, np.uint8)}, [158.75]),
    # Q5_1: q = 31, d = 1, m = 0.5: y = 3937 + 63.5
    "Q5_1": (32, lambda: {"d": _f16bits([[1.0]]), "m": _f16bits([[0.5]]),
                          "codes": np.full((1, 32), 31, np.uint8)}, [4000.5]),
    # Q8_0: q = -3, d = 2: y = -381·2
    "Q8_0": (32, lambda: {"d": _f16bits([[2.0]]), "codes": np.full((1, 32), -3, np.int8)}, [-762.0]),
    # Q4_K: q = 1, d = 1, dmin = 0.5, sc[s] = s + 1, m[s] = 2:
    #   y = Σ_s ((s+1)·127 − 1·127) = 127·(36 − 8)
    "Q4_K": (256, lambda: {"d": _f16bits([[1.0]]), "dmin": _f16bits([[0.5]]),
                           "sc": np.arange(1, 9, dtype=np.uint8)[None], "m": np.full((1, 8), 2, np.uint8),
                           "codes": np.ones((1, 256), np.uint8)}, [127.0 * 28]),
    # Q5_K: q = 20: y = Σ_s ((s+1)·20·127 − 127) = 127·(720 − 8)
    "Q5_K": (256, lambda: {"d": _f16bits([[1.0]]), "dmin": _f16bits([[0.5]]),
                           "sc": np.arange(1, 9, dtype=np.uint8)[None], "m": np.full((1, 8), 2, np.uint8),
                           "codes": np.full((1, 256), 20, np.uint8)}, [127.0 * 712]),
    # Q6_K: q = 34 -> c = 2, d = 0.5, scale[j] = j − 8; the 127s sit in the even 16-groups:
    #   y = Σ_b 254·(0.5·(2b − 8)) = 127·(56 − 64)
    "Q6_K": (256, lambda: {"d": _f16bits([[0.5]]), "scale": (np.arange(16) - 8).astype(np.int8)[None],
                           "codes": np.full((1, 256), 34, np.uint8)}, [-1016.0]),
    # Q2_K: q = 2, d = 1, dmin = 0.5, sc[g] = g, m[g] = 3 (G = 16: the 127s sit in the even groups):
    #   y = Σ_b ((2b·254) − (1.5·127)) = 508·28 − 8·190.5
    "Q2_K": (256, lambda: {"d": _f16bits([[1.0]]), "dmin": _f16bits([[0.5]]),
                           "sc": np.arange(16, dtype=np.uint8)[None], "m": np.full((1, 16), 3, np.uint8),
                           "codes": np.full((1, 256), 2, np.uint8)}, [12700.0]),
    # Q3_K: u = 7 -> c = 3, d = 0.25, sc[g] = 28 + g -> scale g − 4: y = Σ_b 381·(0.25·(2b − 4)) = 95.25·24
    "Q3_K": (256, lambda: {"d": _f16bits([[0.25]]), "sc": (28 + np.arange(16)).astype(np.uint8)[None],
                           "codes": np.full((1, 256), 7, np.uint8)}, [2286.0]),
}


@pytest.mark.parametrize("qname", TYPES8)
def test_hand_computed_product(qname):
    k, make, want = HAND[qname]
    fields = make()
    n = len(want)
    blocks = B.from_fields(fields, qname, n, k)
    x = _x_block_heads(k)
    y = D.standard_matmul(blocks, n, k, qname, x)
    assert y.tolist() == want
    assert D.sanity_reference(blocks, n, k, qname, x).tolist() == want  # exact here
    a, da = D.quantize_activations(x)
    assert np.array_equal(a[0], x.astype(np.int8)) and (da == 1).all()
    P, A = D.standard_partials(blocks, n, k, qname, a)
    c = B.integer_codes(fields, qname)
    g = qtypes.get(qname).group
    assert np.array_equal(P[0], (c.reshape(n, k // g, g)[:, :, 0] * 127) * (np.arange(k // g) * g % 32 == 0))
    assert np.array_equal(A[0], np.where(np.arange(k // g) * g % 32 == 0, 127, 0))


def test_rescale_order_is_per_group_in_f32():
    """Three groups whose f32 sum depends on the order: (1e8 + 1) + (-1e8) = 0 in f32, not 1."""
    P = np.array([[[1, 1, -1]]], np.int32)
    A = np.zeros((1, 3), np.int32)
    s = np.array([[1e8, 1.0, 1e8]], np.float32)
    da = np.ones((1, 3), np.float32)
    y = D.rescale(P, A, s, None, da, "q4_0")
    assert y.tolist() == [[0.0]]
    assert D.rescale_ref(P, A, s, None, da, "q4_0").tolist() == [[0.0]]


def test_rescale_formulas_differ_per_scheme():
    """Same P, A, s, o: each scheme's own formula (values chosen so every term matters)."""
    P = np.array([[[3]]], np.int32)
    A = np.array([[5]], np.int32)
    s = np.array([[0.5]], np.float32)
    o = np.array([[0.25]], np.float32)
    da = np.full((1, 1), 2.0, np.float32)
    assert D.rescale(P, A, s, o, da, "q4_0").tolist() == [[3.0]]  # (3·0.5)·2
    assert D.rescale(P, A, s, o, da, "q4_1").tolist() == [[5.5]]  # 3 + (0.25·5)·2
    p8 = np.repeat(P, 8, axis=2)
    a8 = np.repeat(A, 8, axis=1)
    s8, o8 = np.repeat(s, 8, axis=1), np.repeat(o, 8, axis=1)
    da8 = np.full((1, 8), 2.0, np.float32)
    assert D.rescale(p8, a8, s8, o8, da8, "q4_k").tolist() == [[8 * 0.5]]  # (1.5 − 1.25)·2 per group
    # Q6_K: two 16-groups share one da
    p2 = np.array([[[1] * 16]], np.int32)
    da2 = np.arange(1, 9, dtype=np.float32)[None]
    y = D.rescale(p2, np.zeros((1, 16), np.int32), np.ones((1, 16), np.float32), None, da2, "q6_k")
    assert y.tolist() == [[2.0 * 36]]


def test_rescale_refuses_bad_shapes():
    P = np.zeros((1, 2, 3), np.int32)
    with pytest.raises(BadInputError, match=r"s must have shape \(2, 3\)"):
        D.rescale(P, np.zeros((1, 3), np.int32), np.zeros((2, 4), np.float32), None, np.zeros((1, 3)), "q4_0")
    with pytest.raises(BadInputError, match=r"da must have shape \(1, 3\)"):
        D.rescale(P, np.zeros((1, 3), np.int32), np.zeros((2, 3), np.float32), None, np.zeros((1, 2)), "q4_0")
    with pytest.raises(UnsupportedError, match="no integer form"):
        D.rescale(P, None, None, None, None, "f32")


# ---- numba vs numpy references, and the scale factors vs gguf-py's dequantizer ---------------
@pytest.mark.parametrize("qname", TYPES8)
def test_numba_path_matches_numpy_reference(qname, rng):
    n, k = 24, 512
    blocks = random_blocks(qname, n, k, rng)
    for m in (1, 5):
        x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
        y = D.standard_matmul(blocks, n, k, qname, x)
        assert np.array_equal(_bits(y), _bits(D.standard_matmul_ref(blocks, n, k, qname, x)))
        a, _ = D.quantize_activations(x)
        c, _, _ = D.integer_form(blocks, n, k, qname)
        g = qtypes.get(qname).group
        assert np.array_equal(D.partials_from_codes(c, a, g), D.partials_ref(c, a, g))


@pytest.mark.parametrize("qname", TYPES8)
def test_scale_factors_reproduce_gguf_dequantize(qname, rng):
    """``s·c`` (``+ o`` for Q4_1/Q5_1, ``− o`` for K-quants) is gguf-py's dequantized value, bit for bit."""
    n, k = 8, 512
    t = qtypes.get(qname)
    blocks = random_blocks(qname, n, k, rng)
    c, s, o = D.integer_form(blocks, n, k, qname)
    g = t.group
    w = (c.reshape(n, k // g, g).astype(np.float32) * s[:, :, None])
    if t.scheme == "scale_min":
        w = w + o[:, :, None]
    elif t.scheme == "k_scale_min":
        w = w - o[:, :, None]
    want = gguf_dequantize(blocks, GGMLQuantizationType(t.id)).reshape(n, k)
    assert np.array_equal(_bits(w.reshape(n, k)), _bits(want))


# ---- sanity bound ---------------------------------------------------------------------------
@pytest.mark.parametrize("qname", TYPES8)
def test_sanity_error_is_activation_quantization_only(qname, rng):
    """vs f64(dequant(W))·f64(x) only the 8-bit activations err: for x ~ N(0, 1) the relative L2
    error is about (amax/127)/sqrt(12) ~ 0.6 %; we assert < 1.5 %."""
    n, k = 64, 512
    blocks = random_blocks(qname, n, k, rng)
    x = rng.standard_normal((4, k)).astype(np.float32)
    err = D.sanity_error(D.standard_matmul(blocks, n, k, qname, x), D.sanity_reference(blocks, n, k, qname, x))
    assert 0 < err < 1.5e-2


def test_sanity_error_helper():
    assert D.sanity_error(np.zeros(3), np.zeros(3)) == 0.0
    assert D.sanity_error(np.ones(3), np.zeros(3)) == float("inf")
    assert D.sanity_error(np.array([3.0, 4.0]), np.array([0.0, 5.0])) == pytest.approx(np.sqrt(10) / 5)
    with pytest.raises(BadInputError, match="shapes differ"):
        D.sanity_error(np.zeros(2), np.zeros(3))


# ---- entry-point checks ---------------------------------------------------------------------
def test_vector_and_matrix_inputs(rng):
    n, k = 4, 64
    blocks = random_blocks("q8_0", n, k, rng)
    x = rng.standard_normal(k).astype(np.float32)
    y1 = D.standard_matmul(blocks, n, k, "q8_0", x)
    y2 = D.standard_matmul(blocks, n, k, "q8_0", x[None])
    assert y1.shape == (n,) and y2.shape == (1, n) and np.array_equal(_bits(y1), _bits(y2[0]))


def test_entry_points_refuse_bad_input(rng):
    blocks = random_blocks("q4_0", 4, 64, rng)
    with pytest.raises(BadInputError, match=r"needs 144 bytes of blocks, got 72"):
        D.standard_matmul(blocks[:2], 4, 64, "q4_0", np.zeros(64, np.float32))
    with pytest.raises(BadInputError, match="K=32, the Q4_0 matrix has K=64"):
        D.standard_matmul(blocks, 4, 64, "q4_0", np.zeros(32, np.float32))
    with pytest.raises(BadInputError, match=r"int8 \[M, 64\]"):
        D.standard_partials(blocks, 4, 64, "q4_0", np.zeros((1, 64), np.float32))
    with pytest.raises(UnsupportedError, match="IQ4_NL has no integer form"):
        D.standard_matmul(blocks, 4, 64, "iq4_nl", np.zeros(64, np.float32))


# ---- the kernels without the JIT ------------------------------------------------------------
def test_dispatch_without_jit_matches():
    code = textwrap.dedent("""
        import numpy as np
        from builders import random_blocks
        from panelpack.verify import dispatch as D
        rng = np.random.default_rng(11)
        for q in ("Q4_0", "Q4_1", "Q5_K", "Q6_K", "Q2_K", "Q3_K"):
            k = 256
            blocks = random_blocks(q, 8, k, rng)
            x = rng.standard_normal((2, k)).astype(np.float32)
            y = D.standard_matmul(blocks, 8, k, q, x)
            r = D.standard_matmul_ref(blocks, 8, k, q, x)
            assert np.array_equal(y.view(np.uint32), r.view(np.uint32)), q
        print("ok")
    """)
    assert run_without_jit(code) == "ok"
