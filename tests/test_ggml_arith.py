"""The runtime's ``ggml`` path (verify/runtime/ggml_arith.py) and the ggml steps of its ops,
against ggml-cpu's own x86 functions where libggml-python's ``libggml-cpu.so`` is installed
(``quantize_row_q8_0`` and ``ggml_vec_dot_q8_0_q8_0`` through ``ggml_get_type_traits_cpu``), and
against numpy emulations of the documented steps everywhere.
(The whole-model comparison with llama.cpp is tests/test_arch_llama_cpp.py, slow tier.)"""

from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest

from panelpack.formats.arch import rope as _rope
from panelpack.verify import dispatch
from panelpack.verify.runtime import Model, ggml_arith, ops

import ggml_ref

K = 384


def _activations(rng) -> np.ndarray:
    x = (rng.standard_normal((6, K)) * np.exp(rng.standard_normal((6, 1)))).astype(np.float32)
    x[1, :32] = np.float32(2.5)  # amax 2.5: x·(127/2.5) = 127 exactly
    x[2, :32] = np.arange(32, dtype=np.float32) - np.float32(14.5)  # amax 17.5 ...
    x[2, 0] = np.float32(127)  # ... now 127: id = 1, the halves are exact ties
    x[3, :32] = 0  # an all-zero block
    return x


def _emulated_dot(codes, dw, a, da) -> np.ndarray:
    """The module doc's steps in numpy: 8 lanes of 4 products, fma as an exact f64 product and sum
    rounded to f32 (equal to fma except in a rare double rounding), then hsum_float_8."""
    m, k = a.shape
    n, nb = dw.shape
    c = codes.reshape(n, nb, 8, 4).astype(np.int32)
    av = a.reshape(m, nb, 8, 4).astype(np.int32)
    acc = np.zeros((m, n, 8), np.float32)
    for b in range(nb):
        lanes = np.einsum("nlj,mlj->mnl", c[:, b], av[:, b]).astype(np.float64)
        dd = (dw[None, :, b] * da[:, b, None]).astype(np.float32).astype(np.float64)
        acc = (dd[..., None] * lanes + acc.astype(np.float64)).astype(np.float32)
    r = acc[..., 4:] + acc[..., :4]
    return (r[..., 0] + r[..., 2]) + (r[..., 1] + r[..., 3])


def test_quantizer_rounds_ties_to_even_with_127_over_amax():
    x = _activations(np.random.default_rng(0))
    a, da = ggml_arith.quantize_x86(x)
    ref_a, ref_da = dispatch.quantize_activations(x)  # ggml's quantize_row_q8_0_ref (roundf)
    assert np.array_equal(da, ref_da)
    assert a[2, 2] == -12 and ref_a[2, 2] == -13  # -12.5 · 1: to even, against away from zero
    assert np.array_equal(a[3, :32], np.zeros(32, np.int8)) and da[3, 0] == 0
    blk = x.reshape(6, -1, 32)
    amax = np.abs(blk).max(2)
    want = np.rint(blk * np.where(amax > 0, np.float32(127) / np.maximum(amax, 1e-30), 0)[..., None].astype(np.float32))
    assert np.array_equal(a, want.reshape(6, K).astype(np.int8))


def test_q8_matrix_is_the_documented_dot():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((70, K)).astype(np.float32)
    blocks = ggml_ref_free_blocks(w)
    mat = ggml_arith.Q8Matrix(blocks, 70, K)
    a, da = ggml_arith.quantize_x86(_activations(rng))
    assert np.array_equal(mat.run(a, da), _emulated_dot(mat.codes.reshape(70, K), mat.dw, a, da))


def ggml_ref_free_blocks(w: np.ndarray) -> np.ndarray:
    """Q8_0 blocks of ``w`` by the panelpack codec (byte-identical with ggml's, tested elsewhere)."""
    from panelpack.formats import qtypes

    return qtypes.Q8_0.codec_module.quantize(w)


def _cpu_traits():
    """ggml-cpu's (from_float, vec_dot) of Q8_0 from libggml-python, or skip."""
    if platform.machine() not in ("x86_64", "AMD64") or not ggml_ref.available():
        pytest.skip("needs libggml-python's libggml-cpu on x86-64")
    path = ggml_ref.library_path().with_name("libggml-cpu.so")
    if not path.is_file():
        pytest.skip("libggml-python ships no libggml-cpu.so")
    ggml_ref.lib()  # libggml-base first

    class Traits(ctypes.Structure):  # ggml-cpu.h: struct ggml_type_traits_cpu
        _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                    ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]

    cpu = ctypes.CDLL(str(path))
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(Traits)
    cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    cpu.ggml_cpu_init()
    t = cpu.ggml_get_type_traits_cpu(8).contents  # GGML_TYPE_Q8_0
    if not cpu.ggml_cpu_has_avx2():
        pytest.skip("this libggml-cpu has no AVX2 kernels (the arithmetic ggml_arith follows)")
    from_float = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(t.from_float)
    vec_dot = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)(t.vec_dot)
    return from_float, vec_dot


def test_against_ggml_cpu_x86_functions():
    from_float, vec_dot = _cpu_traits()
    rng = np.random.default_rng(2)
    x = _activations(rng)
    w = rng.standard_normal((40, K)).astype(np.float32)

    def q(rows):
        out = np.zeros((rows.shape[0], K // 32 * 34), np.uint8)
        for i in range(rows.shape[0]):
            from_float(np.ascontiguousarray(rows[i]).ctypes.data, out[i].ctypes.data, K)
        return out

    xb, wb = q(x), q(w)
    a, da = ggml_arith.quantize_x86(x)
    blk = xb.reshape(6, K // 32, 34)
    assert np.array_equal(blk[:, :, 2:].view(np.int8).reshape(6, K), a)
    assert np.array_equal(np.ascontiguousarray(blk[:, :, :2]).view("<f2")[..., 0].astype(np.float32), da)
    y = ggml_arith.Q8Matrix(wb, 40, K).run(a, da)
    want = np.zeros_like(y)
    s = ctypes.c_float()
    for m in range(6):
        for n in range(40):
            vec_dot(K, ctypes.byref(s), 0, wb[n].ctypes.data, 0, xb[m].ctypes.data, 0, 1)
            want[m, n] = s.value
    assert np.array_equal(y, want)


def test_fma32_rounds_once():
    from numba import njit

    @njit
    def f(a, b, c):
        return ggml_arith.fma32(a, b, c)

    a = np.float32(1 + 2.0 ** -12)
    p = np.float32(a * a)  # 1 + 2^-11 + 2^-24 rounded: the 2^-24 is lost
    assert f(a, a, -p) == np.float32(2.0 ** -24) and np.float32(a * a) - p == 0


def test_rope_and_norm_in_ggml_steps():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 3, 64)).astype(np.float32)
    cos, sin = _rope.ggml_tables(np.arange(5), 48, 10000.0, (), 1.0, 1.0)
    for pairs in (True, False):
        assert np.array_equal(ops.rope(x, cos, sin, pairs), ops.rope_ref(x, cos, sin, pairs))
    # the angles: f32 running product of theta_scale, within a few ulp·i of the exact ones
    exact = np.arange(5)[:, None] * 10000.0 ** (-np.arange(0, 48, 2) / 48)
    cosf = _rope._libm()[1]
    assert np.abs(cos - np.cos(exact)).max() < 1e-6 and cos[:, 0].tolist() == [np.float32(cosf(p)) for p in range(5)]
    y = ops.rms_norm(x, np.ones(64, np.float32), 1e-5)
    assert np.array_equal(y, ops.rms_norm_ref(x, np.ones(64, np.float32), 1e-5))


def test_ggml_path_runs_q8_0_in_its_arithmetic_and_the_rest_compiled(tmp_path):
    """A Q8_0 bundle's matrices run ggml_arith (read through the layout's standard blocks); other
    types run the compiled kernels, bit for bit (llama.cpp quantizes their activations to Q8_K,
    which no runtime path follows)."""
    from panelpack.convert import convert
    from panelpack.convert.example import write_tiny_llama

    src = write_tiny_llama(tmp_path / "hf")
    ids = [1, 17, 300, 42, 499]
    q8 = convert(src, tmp_path / "q8.ppk", layout="panel64", quant="q8_0").bundle
    model = Model.open(q8, "ggml")
    assert "ggml:q8_0.x86" in model.paths()
    got = model.logits(ids, chunk=2)
    assert np.isfinite(got).all() and not np.array_equal(got, Model.open(q8).logits(ids, chunk=2))
    q4 = convert(src, tmp_path / "q4.ppk", layout="panel64", quant="q4_k").bundle
    model, comp = Model.open(q4, "ggml"), Model.open(q4, fuse=False)
    assert all(p.startswith("ggml:") for p in model.paths()), model.paths()
    pairs = [(a, b) for a, b in zip(model.layers[0].linears(), comp.layers[0].linears()) if a.path != "ggml:q8_0.x86"]
    assert pairs
    x = np.random.default_rng(4).standard_normal((3, pairs[0][0].k)).astype(np.float32)
    for a, b in pairs:
        if a.k == x.shape[1]:
            assert a.path == "ggml:" + b.path.split(":", 1)[1] and np.array_equal(a(x), b(x)), a.name
