"""F16: one IEEE half per element, little-endian; and the f16 <-> f32 conversions every
block codec uses for its scales.

    byte  0          2
          +----------+
          | f16 (LE) |        bit 15: sign | 14..10: exponent (bias 15) | 9..0: mantissa
          +----------+

f16 -> f32 (``f16_to_f32``) is exact and keeps NaN payloads bit for bit, signalling ones too
(numpy's conversion, hence gguf-py's, does the same; ggml's quietens them):

    exponent 31 (inf/NaN): sign | 0x7f800000 | mantissa << 13
    exponent 1..30:        sign | (bits15 << 13) + (112 << 23)          (rebias 15 -> 127)
    exponent 0 (subnormal, zero): +-(mantissa * 2**-24), exact in f32

f32 -> f16 (``f32_to_f16_bits``) is ggml's ``GGML_FP32_TO_FP16``: round to nearest, ties to
even; |x| >= 65520 -> inf; every NaN -> 0x7e00 | sign (numpy keeps payload bits instead; the
two agree on every non-NaN value).
"""

from __future__ import annotations

import numba
import numpy as np

from .._jit import lazy_njit
from ..qtypes import F16 as QTYPE
from ._codec import CHUNK_BLOCKS, as_blocks, as_rows_f32, bytes_shape, declare, out_shape
from .f32 import bits_f32, f32_bits

_TWO_M24 = np.float32(2.0**-24)


@lazy_njit(numba.float32(numba.int64), cache=True, inline="always")
def f16_to_f32(h):
    """The f32 value of the f16 bits ``h`` (0..65535): exact, NaN payloads kept."""
    sign = (h & 0x8000) << 16
    em = h & 0x7FFF
    normal = sign | ((em << 13) + 0x38000000)
    special = sign | 0x7F800000 | ((em & 0x3FF) << 13)
    v = bits_f32(np.uint32(special if em >= 0x7C00 else normal))
    sub = np.float32(em) * _TWO_M24  # exact: em < 1024
    if sign:
        sub = -sub
    return v if em >= 0x400 else sub


@lazy_njit(numba.int64(numba.float32), cache=True, inline="always")
def f32_to_f16_bits(x):
    """ggml's f32 -> f16: bits (0..65535) of ``x`` rounded to nearest even; NaN -> 0x7e00|sign."""
    w = np.int64(f32_bits(x)) & 0xFFFFFFFF
    sign = (w >> 16) & 0x8000
    a = w & 0x7FFFFFFF
    if a > 0x7F800000:  # NaN
        return sign | 0x7E00
    if a >= 0x477FF000:  # >= 65520 rounds to inf (and inf itself)
        return sign | 0x7C00
    if a >= 0x38800000:  # normal f16: drop 13 mantissa bits, round half to even
        r = a + 0xFFF + ((a >> 13) & 1)
        return sign | ((r - 0x38000000) >> 13)
    if a <= 0x33000000:  # <= 2**-25: rounds to zero (2**-25 is a tie, even is 0)
        return sign
    # subnormal f16: value m * 2**(e - 150) in units of 2**-24 is m >> (126 - e)
    e = a >> 23
    m = (a & 0x7FFFFF) | 0x800000
    s = 126 - e
    r = m + (1 << (s - 1)) - 1 + ((m >> s) & 1)
    return sign | (r >> s)


@lazy_njit(inline="always")
def f16_at(blk, o):
    """The f32 value of the little-endian f16 at byte ``o`` of the bytes ``blk``."""
    return f16_to_f32(np.int64(blk[o]) | (np.int64(blk[o + 1]) << 8))


def f16_bits_ref(x: np.ndarray) -> np.ndarray:
    """numpy twin of :func:`f32_to_f16_bits`: uint16 bits, NaN -> 0x7e00 | sign (as ggml)."""
    x = np.asarray(x, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype("<f2").view(np.uint16)
    sign = (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16) & np.uint16(0x8000)
    return np.where(np.isnan(x), sign | np.uint16(0x7E00), h).astype(np.uint16)


# ---- F16 tensors: element e is the LE u16 at byte 2e ---------------------------------------
#: the dequantize kernels from ``f16_to_f32``, named here
CODEC = declare(globals(), QTYPE, dequantize_word=f16_to_f32, chunk=CHUNK_BLOCKS * 32)
dequantize, _dequantize_range = CODEC.dequantize, CODEC.dequantize_range


def dequantize_ref(blocks: np.ndarray) -> np.ndarray:
    b = as_blocks(blocks, QTYPE)
    return b.reshape(-1).view("<f2").astype(np.float32).reshape(out_shape(b, QTYPE))


def quantize(x: np.ndarray, parallel: bool | None = None) -> np.ndarray:
    """f32 to f16 bytes, round to nearest even (numpy's conversion, as gguf-py writes F16)."""
    x = as_rows_f32(x, QTYPE)
    return x.astype("<f2").view(np.uint8).reshape(bytes_shape(x, QTYPE))


quantize_ref = quantize
