"""llama.cpp's x86 CPU arithmetic for Q8_0 matrices: the runtime's ``ggml`` kernel path.

The standard dispatch (docs/FORMAT.md §3) quantizes activations as ggml's *reference*
``quantize_row_q8_0_ref`` and sums each 32-group exactly before one f32 rescale. llama.cpp on
an x86 CPU (ggml-cpu, AVX2 and up) runs a Q8_0 product otherwise (``arch/x86/quants.c``
``quantize_row_q8_0`` and ``ggml_vec_dot_q8_0_q8_0``; llamafile's ``tinyBLAS_Q0_AVX`` for
batches, the same arithmetic), per activation row, 32-element block ``b``::

    amax = max |x|;  d = amax / 127.f;  da = f32(f16(d))          (as the reference)
    id   = amax ? 127.f / amax : 0                                 (not 1/d)
    a    = round-half-to-even(x · id)                              (_mm256_round_ps; not roundf)

    dd      = f32(f16 dw[b]) · da[b]                               (f32 product)
    lane[l] = Σ_{j<4} w[32b + 4l + j] · a[32b + 4l + j]            (int, l = 0..7: vpmaddubsw/vpdpbusd)
    acc[l]  = fma(dd, f32(lane[l]), acc[l])                        (blocks in order, from 0)
    y = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7))     (hsum_float_8)

So the codes of one activation in about a thousand differ from the reference's (ties, and
``127/amax`` against ``1/(amax/127)``), and each output differs from the dispatch's by f32
rounding. Small as both are, a Q8_0 network amplifies them: every later quantizer turns a
tiny input change into whole-code flips. Measured on the tiny random checkpoints of
tests/hf_models.py against llama.cpp (f32 KV cache): 0-5 of 64 top-1 flips per architecture
with the dispatch's arithmetic; with this path (and ggml's RMSNorm and RoPE steps, which
``ops`` now follows) most architectures give llama.cpp's logits bit for bit
(docs/RUNTIME.md, "Against llama.cpp").

:func:`quantize_x86` is the activation step, :class:`Q8Matrix` one matrix (its int8 codes and
f32 block scales copied once out of the GGUF blocks: about one more byte a weight in memory; a
reference path, not a fast one), ``Q8Matrix.matmul(x)`` the product.
:func:`fma32` is the one fused multiply-add (LLVM's ``llvm.fma.f32``) the runtime's kernels use
where ggml's compiled C contracts a multiply and an add.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange, types

from ...formats._jit import lazy_njit
from ...formats.errors import BadInputError

QK = 32  # Q8_0 block
LANES = 8  # int32 lanes of one block's dot (4 products each)

if numba.config.DISABLE_JIT:  # type: ignore[attr-defined]
    def fma32(a, b, c):
        """``a·b + c`` rounded once (plain-Python twin: exact in f64 except for rare double rounding)."""
        return np.float32(np.float64(a) * np.float64(b) + np.float64(c))
else:
    from llvmlite import ir
    from numba.extending import intrinsic

    from ...formats import _numba_internals

    @intrinsic
    def _fma(typingctx, a, b, c):
        sig = types.float32(types.float32, types.float32, types.float32)

        def codegen(context, builder, signature, args):
            f32 = ir.FloatType()
            fn = _numba_internals.llvm_function(builder, ir.FunctionType(f32, [f32, f32, f32]), "llvm.fma.f32")
            return builder.call(fn, args)

        return sig, codegen

    @numba.njit(inline="always")
    def fma32(a, b, c):
        """``a·b + c`` in f32 rounded once (``llvm.fma.f32``: one vfmadd where the CPU has FMA)."""
        return _fma(np.float32(a), np.float32(b), np.float32(c))


def quantize_x86(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml-cpu's x86 ``quantize_row_q8_0`` per row of f32 ``x [M, K]``: ``(a int8 [M, K],
    da f32 [M, K/32])`` (see the module doc). ``127/amax`` overflows only for ``amax`` under
    ~3.7e-37, where ``da`` is 0 and the codes do not matter; they are 0 here."""
    x = np.ascontiguousarray(x, np.float32)
    if x.ndim != 2 or x.shape[1] % QK:
        raise BadInputError(f"activations must be [M, K] with K a multiple of {QK}, got {x.shape}")
    if not np.isfinite(x).all():
        raise BadInputError("activations contain non-finite values (NaN or inf)")
    m, k = x.shape
    blk = x.reshape(m, k // QK, QK)
    amax = np.abs(blk).max(axis=2)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.float32(127) / amax
    inv = np.where((amax != 0) & np.isfinite(inv), inv, np.float32(0)).astype(np.float32)
    a = np.rint(blk * inv[:, :, None]).astype(np.int8)  # f32 product, ties to even
    with np.errstate(over="ignore"):
        da = d.astype(np.float16).astype(np.float32)
    return a.reshape(m, k), da


@lazy_njit(types.void(types.Array(types.int8, 3, "C", readonly=True), types.Array(types.float32, 2, "C", readonly=True),
                      types.Array(types.int8, 3, "C", readonly=True), types.Array(types.float32, 2, "C", readonly=True),
                      types.float32[:, ::1]), parallel=True, cache=True)
def _q8_0_kernel(c, dw, a, da, out):
    """``out[m, n]`` = ggml's ``vec_dot_q8_0_q8_0`` of weight row ``n`` (codes ``c [N, nb, 32]``,
    scales ``dw [N, nb]``) and activation row ``m`` (``a [M, nb, 32]``, ``da [M, nb]``)."""
    n_rows, nb = dw.shape
    for n in prange(n_rows):
        acc = np.empty(LANES, np.float32)
        for m in range(a.shape[0]):
            for j in range(LANES):
                acc[j] = np.float32(0.0)
            for b in range(nb):
                dd = dw[n, b] * da[m, b]
                for j in range(LANES):
                    s = np.int32(0)
                    for i in range(4 * j, 4 * j + 4):
                        s += np.int32(c[n, b, i]) * np.int32(a[m, b, i])
                    acc[j] = fma32(dd, np.float32(s), acc[j])
            out[m, n] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))


class Q8Matrix:
    """One Q8_0 matrix ``[n, k]`` from its GGUF blocks (34 bytes per 32 weights: f16 scale, 32
    int8 codes), multiplied in llama.cpp's x86 arithmetic."""

    def __init__(self, blocks: np.ndarray, n: int, k: int):
        if k % QK:
            raise BadInputError(f"Q8_0 matrix [{n}, {k}]: K must be a multiple of {QK}")
        raw = np.ascontiguousarray(blocks).reshape(-1).view(np.uint8)
        if raw.size != n * (k // QK) * (QK + 2):
            raise BadInputError(f"Q8_0 matrix [{n}, {k}] needs {n * (k // QK) * (QK + 2)} bytes, got {raw.size}")
        raw = raw.reshape(n, k // QK, QK + 2)
        self.n, self.k = n, k
        self.dw = np.ascontiguousarray(raw[:, :, :2]).view("<f2")[:, :, 0].astype(np.float32)
        self.codes = np.ascontiguousarray(raw[:, :, 2:]).view(np.int8)

    def run(self, a: np.ndarray, da: np.ndarray) -> np.ndarray:
        """``y f32 [M, n]`` from activations already quantized by :func:`quantize_x86`."""
        m = a.shape[0]
        out = np.empty((m, self.n), np.float32)
        _q8_0_kernel(self.codes, self.dw, np.ascontiguousarray(a).reshape(m, self.k // QK, QK),
                     np.ascontiguousarray(da, np.float32), out)
        return out

    def matmul(self, x: np.ndarray) -> np.ndarray:
        """``y = W·x`` f32 ``[M, n]`` for f32 ``x [M, k]``."""
        return self.run(*quantize_x86(x))
