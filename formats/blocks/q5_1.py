"""Q5_1: 32 weights in 24 bytes, value = q * d + m, q = low4 | bit4 << 4.

    byte  0      2      4              8             24
          +------+------+--------------+-------------+
          | d f16| m f16| qh u32 (LE)  | qs[16]      |
          +------+------+--------------+-------------+

Dequantize (gguf-py ``Q5_1.dequantize_blocks``, ggml ``dequantize_row_q5_1``), in f32:
``y = f32(d) * f32(q) + f32(m)`` (two roundings, never fused).
When both ``d*u`` and ``m`` are NaN the result is ``d*u``'s NaN (x86's rule for the first
operand, as ggml and gguf-py compute it; see ``f32.add_first_nan``).
"""

from __future__ import annotations

import numpy as np

from .._jit import inline_jit, lazy_njit
from ..qtypes import Q5_1 as QTYPE
from ..qtypes import QK
from ._bits import BlockPlan, Field, byte_map, f16_word, nibble_codes, qh_bit
from ._codec import declare, min_ref
from ._kquant import (
    f16_fields,
    min_scale_head,
    min_scale_ref,
    put_q5,
    q5_code,
    u32_at,
    weighted_scale_min,
)
from .f16 import f16_at
from .f32 import add_first_nan, cvtt_i32

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, d=2, m=2, qh=4, qs=QK // 2)

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(AT.d),)),
    Field("m", "u2", (f16_word(AT.m),)),
    Field("codes", "u1", tuple(lo + (qh_bit(AT.qh, e),) for e, lo in enumerate(nibble_codes(AT.qs)))),
])


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    half = qk >> 1  # 16; a run-time trip count, so LLVM vectorizes the loops below
    d, m = f16_at(blk, 0), f16_at(blk, 2)
    qh = u32_at(blk, 4)
    qh2 = np.int32(qh >> np.int32(half))
    for j in range(half):
        yb[j] = add_first_nan(d * np.float32(q5_code(blk[8 + j] & 15, qh, j)), m)
    for j in range(half):
        yb[half + j] = add_first_nan(d * np.float32(q5_code(blk[8 + j] >> 4, qh2, j)), m)


# ---- quantize ------------------------------------------------------------------------------
@inline_jit
def _quantize_block(xb, blk, iscr, fscr):
    """One block of ggml's ``quantize_row_q5_1_ref``:
        min, max as Q4_1; d = (max - min) / 31; id = d ? 1/d : 0
        u = (uint8_t)((x - min)*id + 0.5f)  (the low byte of the truncation, no clamp)
        qs[j] = u[j] & 15 | (u[j+16] & 15) << 4;  qh bit j = bit 4 of u[j]"""
    L = iscr[0, :32]
    mn, idv = min_scale_head(xb, blk, 31)
    for j in range(32):
        L[j] = cvtt_i32((xb[j] - mn) * idv + np.float32(0.5)) & 0xFF
    put_q5(blk, 4, 8, L)


def _encode_ref(xr: np.ndarray) -> dict[str, np.ndarray]:
    """numpy: ggml's scalar loop, vectorised over blocks, as bit fields (for ``quantize_ref``)."""
    mn, d, t = min_scale_ref(xr, 31)
    u = t & 31
    n, k = xr.shape
    return f16_fields(n, k, u, d=d, m=mn)


# ---- quantize with importance weights (an imatrix row) ----------------------------------------
@lazy_njit(cache=True, error_model="numpy")
def _weighted_block(xb, qb, blk, sigma2, iscr, fscr):
    """One block of ggml's ``quantize_row_q5_1_impl``: Q4_1's weighted recipe (q4_1.py) with
    nmax 31, the codes stored as Q5_1 stores them."""
    put_q5(blk, 4, 8, weighted_scale_min(xb, qb, blk, sigma2, iscr, fscr, 31))


CODEC = declare(globals(), QTYPE, PLAN, decode_ref=min_ref,
        quantize_block=_quantize_block, encode_ref=_encode_ref, quantize_weighted_block=_weighted_block)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
quantize_weighted, QUANTIZE_REF_IS_NUMPY = CODEC.quantize_weighted, CODEC.quantize_ref_is_numpy
_dequantize_range, _quantize_range = CODEC.dequantize_range, CODEC.quantize_range
