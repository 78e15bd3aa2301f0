"""Q4_1: 32 weights in 20 bytes, value = u * d + m.

    byte  0      2      4                            20
          +------+------+----------------------------+
          | d f16| m f16| qs[16]  (nibbles as Q4_0)  |
          +------+------+----------------------------+

Dequantize (gguf-py ``Q4_1.dequantize_blocks``, ggml ``dequantize_row_q4_1``), in f32:
``y = f32(d) * f32(u) + f32(m)`` (two roundings, never fused).
When both ``d*u`` and ``m`` are NaN the result is ``d*u``'s NaN (x86's rule for the first
operand, as ggml and gguf-py compute it; see ``f32.add_first_nan``).
"""

from __future__ import annotations

import numpy as np

from .._jit import inline_jit, lazy_njit
from ..qtypes import Q4_1 as QTYPE
from ..qtypes import QK
from ._bits import BlockPlan, Field, byte_map, f16_word, nibble_codes
from ._codec import declare, min_ref
from ._kquant import f16_fields, int8, min_scale_head, min_scale_ref, put_q4, weighted_scale_min
from .f16 import f16_at
from .f32 import add_first_nan, cvtt_i32, low_i8

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, d=2, m=2, qs=QK // 2)

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(AT.d),)),
    Field("m", "u2", (f16_word(AT.m),)),
    Field("codes", "u1", nibble_codes(AT.qs)),
])


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    half = qk >> 1  # 16; a run-time trip count, so LLVM vectorizes the loops below
    d, m = f16_at(blk, 0), f16_at(blk, 2)
    for j in range(half):
        yb[j] = add_first_nan(d * np.float32(np.int32(blk[4 + j] & 15)), m)
    for j in range(half):
        yb[half + j] = add_first_nan(d * np.float32(np.int32(blk[4 + j] >> 4)), m)


# ---- quantize ------------------------------------------------------------------------------
@inline_jit
def _quantize_block(xb, blk, iscr, fscr):
    """One block of ggml's ``quantize_row_q4_1_ref``:
        min, max over the block ("if (v < min)", from +-FLT_MAX); d = (max - min) / 15
        id = d ? 1/d : 0;  u = MIN(15, (int8_t)((x - min)*id + 0.5f))  (low byte stored)"""
    mn, idv = min_scale_head(xb, blk, 15)
    for j in range(16):
        u0 = min(15, int8(cvtt_i32((xb[j] - mn) * idv + np.float32(0.5)))) & 0xFF
        u1 = min(15, int8(cvtt_i32((xb[j + 16] - mn) * idv + np.float32(0.5)))) & 0xFF
        blk[4 + j] = np.uint8((u0 | (u1 << 4)) & 0xFF)


def _encode_ref(xr: np.ndarray) -> dict[str, np.ndarray]:
    """numpy: ggml's scalar loop, vectorised over blocks, as bit fields (for ``quantize_ref``)."""
    mn, d, t = min_scale_ref(xr, 15)
    u = np.minimum(15, low_i8(t)) & 0xFF
    n, k = xr.shape
    # a code above 15 (a negative int8) spills into the other nibble, as ggml's "|=" does
    lo, hi = u[:, :16], u[:, 16:]
    byte = (lo | (hi << 4)) & 0xFF
    codes = np.concatenate([byte & 15, byte >> 4], axis=1)
    return f16_fields(n, k, codes, d=d, m=mn)


# ---- quantize with importance weights (an imatrix row) ----------------------------------------
@lazy_njit(cache=True, error_model="numpy")
def _weighted_block(xb, qb, blk, sigma2, iscr, fscr):
    """One block of ggml's ``quantize_row_q4_1_impl`` (importance weights ``qb``):
        w = qb * sqrtf(sigma2 + x^2) (sigma2 = sum x^2 / K of the row)
        d, min = make_qkx3_quants(32, 15, x, w, L, &min, Laux, -0.9, 0.05, 36, false)
        stored d = f16(d), m = f16(-min); codes L as returned"""
    put_q4(blk, 4, weighted_scale_min(xb, qb, blk, sigma2, iscr, fscr, 15))


CODEC = declare(globals(), QTYPE, PLAN, decode_ref=min_ref,
        quantize_block=_quantize_block, encode_ref=_encode_ref, quantize_weighted_block=_weighted_block)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
quantize_weighted, QUANTIZE_REF_IS_NUMPY = CODEC.quantize_weighted, CODEC.quantize_ref_is_numpy
_dequantize_range, _quantize_range = CODEC.dequantize_range, CODEC.quantize_range
