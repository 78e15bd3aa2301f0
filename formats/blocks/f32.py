"""F32: one IEEE single per element, little-endian; dequantize is a reinterpretation.

    byte  0          4
          +----------+
          | f32 (LE) |
          +----------+

Also home of the f32-level helpers the other codecs' kernels share:

* ``f32_bits`` / ``bits_f32``: bit casts, LLVM ``bitcast`` intrinsics under numba and numpy
  views when numba's JIT is off (``NUMBA_DISABLE_JIT=1``), so kernels run unchanged as Python;
* ``cvtt_i32``: C's ``(int)x`` as x86 computes it (what ggml's ``(int8_t)`` casts see);
* ``add_first_nan``: ``a + b`` whose NaN payload is ``a``'s when both are NaN (x86's rule).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types as nbt
from numba.extending import intrinsic

from .._jit import lazy_njit
from ..qtypes import F32 as QTYPE
from ._codec import as_blocks, as_rows_f32, bytes_shape, check_out, out_shape

if numba.config.DISABLE_JIT:  # type: ignore[attr-defined]  # (set at run time) plain-Python twins of the intrinsics below

    def f32_bits(x):
        """The IEEE bits of a float32, as a signed int32 value."""
        return int(np.float32(x).view(np.int32))

    def bits_f32(u):
        """The float32 whose IEEE bits are ``u`` (low 32 bits of an integer)."""
        return np.array([int(u) & 0xFFFFFFFF], np.uint32).view(np.float32)[0]

else:

    @intrinsic
    def f32_bits(typingctx, x):
        """The IEEE bits of a float32, as int32 (one ``bitcast``, vectorizable)."""
        if x != nbt.float32:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(nbt.int32))

        return nbt.int32(nbt.float32), codegen

    @intrinsic
    def bits_f32(typingctx, u):
        """The float32 whose IEEE bits are ``u`` (an int32 or uint32)."""
        if u not in (nbt.int32, nbt.uint32):
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(nbt.float32))

        return nbt.float32(u), codegen


def dequantize(blocks: np.ndarray, out: np.ndarray | None = None, parallel: bool | None = None) -> np.ndarray:
    """uint8 ``[rows, 4*K]`` (or flat) to f32 ``[rows, K]``: a view unless ``out`` is given."""
    b = as_blocks(blocks, QTYPE)
    y = b.reshape(-1).view("<f4").reshape(out_shape(b, QTYPE))
    if out is None:
        return y
    np.copyto(check_out(out, y.shape, np.float32, QTYPE), y)
    return out


def dequantize_ref(blocks: np.ndarray) -> np.ndarray:
    b = as_blocks(blocks, QTYPE)
    return np.frombuffer(b.tobytes(), "<f4").astype(np.float32).reshape(out_shape(b, QTYPE))


def quantize(x: np.ndarray, parallel: bool | None = None) -> np.ndarray:
    """f32 ``[rows, K]`` (or 1-D) to its little-endian bytes ``uint8 [rows, 4*K]``."""
    x = as_rows_f32(x, QTYPE)
    return x.astype("<f4").view(np.uint8).reshape(bytes_shape(x, QTYPE))


quantize_ref = quantize


_I32_LO = np.float32(-2147483648.0)
_I32_HI = np.float32(2147483648.0)


@lazy_njit(numba.int64(numba.float32), cache=True, inline="always")
def cvtt_i32(v):
    """C's ``(int)v`` as x86 computes it (``cvttss2si``): truncate toward zero; NaN and
    values outside int32 give INT_MIN. ggml's ``(int8_t)v`` is the low byte of this."""
    if v >= _I32_LO and v < _I32_HI:
        return np.int64(np.int32(v))
    return np.int64(-2147483648)


def cvtt_i32_ref(v: np.ndarray) -> np.ndarray:
    """numpy twin of :func:`cvtt_i32` (elementwise, int64 result)."""
    v = np.asarray(v, np.float32)
    ok = (v >= _I32_LO) & (v < _I32_HI)
    return np.where(ok, np.trunc(np.where(ok, v, 0)), -2147483648).astype(np.int64)


def low_i8(t):
    """The int8 value of the low byte of an integer (C's conversion to ``int8_t``)."""
    return ((t & 0xFF) ^ 0x80) - 0x80


@lazy_njit(numba.float32(numba.float32, numba.float32), cache=True, inline="always")
def add_first_nan(a, b):
    """``a + b`` whose NaN, when both are NaN, is ``a``'s (x86 returns the first operand's).

    LLVM may swap the operands of a commutative ``fadd``, which changes only which NaN
    payload comes out; this pins it to what ggml's ``a + b`` and numpy's give.
    """
    s = a + b
    return a if a != a else s


def min_max_ref(xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``xb``: ggml's ``if (v < min) min = v; if (v > max) max = v;`` scan from
    ``+FLT_MAX`` / ``-FLT_MAX`` (a NaN is never taken; an all-NaN row keeps the start values)."""
    big = np.float32(np.finfo(np.float32).max)
    mn = np.full(len(xb), big, np.float32)
    mx = np.full(len(xb), -big, np.float32)
    for e in range(xb.shape[1]):
        v = xb[:, e]
        mn = np.where(v < mn, v, mn)
        mx = np.where(v > mx, v, mx)
    return mn, mx


def first_absmax_ref(xb: np.ndarray) -> np.ndarray:
    """Per row of ``xb``: the first value of largest ``|x|`` by ggml's ``if (amax < fabsf(v))``
    scan from ``+0.0`` (a NaN never wins; no winner: +0.0)."""
    amax = np.zeros(len(xb), np.float32)
    mx = np.zeros(len(xb), np.float32)
    for e in range(xb.shape[1]):
        v = xb[:, e]
        upd = amax < np.abs(v)
        amax = np.where(upd, np.abs(v), amax)
        mx = np.where(upd, v, mx)
    return mx
