"""BF16: the top half of an IEEE single, little-endian.

    byte  0           2
          +-----------+
          | bf16 (LE) |      f32 bits = bf16 bits << 16   (exact, NaN payloads kept)
          +-----------+

Widening is a shift; no ml_dtypes or torch. Narrowing (``quantize``) is ggml's
``ggml_compute_fp32_to_bf16`` (as gguf-py writes BF16): round to nearest even on the low
16 bits; a NaN keeps its top 16 bits and gets the quiet bit 0x0040 set.
"""

from __future__ import annotations

import numba
import numpy as np

from .._jit import lazy_njit
from ..qtypes import BF16 as QTYPE
from ._codec import CHUNK_BLOCKS, as_blocks, as_rows_f32, bytes_shape, declare, out_shape
from .f32 import bits_f32


@lazy_njit(numba.float32(numba.int64), cache=True, inline="always")
def bf16_to_f32(h):
    """The f32 value of the bf16 bits ``h`` (0..65535): a shift, NaN payloads kept."""
    return bits_f32(np.uint32(h << 16))


#: the dequantize kernels from ``bf16_to_f32``, named here
CODEC = declare(globals(), QTYPE, dequantize_word=bf16_to_f32, chunk=CHUNK_BLOCKS * 32)
dequantize, _dequantize_range = CODEC.dequantize, CODEC.dequantize_range


def dequantize_ref(blocks: np.ndarray) -> np.ndarray:
    b = as_blocks(blocks, QTYPE)
    u = b.reshape(-1).view("<u2").astype(np.uint32) << np.uint32(16)
    return u.view(np.float32).reshape(out_shape(b, QTYPE))


def quantize(x: np.ndarray, parallel: bool | None = None) -> np.ndarray:
    """f32 to bf16 bytes: round to nearest even, NaN quietened (ggml / gguf-py)."""
    x = as_rows_f32(x, QTYPE)
    n = x.reshape(-1).view(np.uint32).astype(np.uint64)
    nan = (n & 0x7FFFFFFF) > 0x7F800000
    rounded = (n + (0x7FFF + ((n >> 16) & 1))) >> 16
    h = np.where(nan, (n >> 16) | 0x40, rounded).astype("<u2")
    return h.view(np.uint8).reshape(bytes_shape(x, QTYPE))


quantize_ref = quantize
