"""Q5_0: 32 weights in 22 bytes, value = (q - 16) * d, q = low4 | bit4 << 4.

    byte  0      2              6                    22
          +------+--------------+--------------------+
          | d f16| qh u32 (LE)  | qs[16]             |
          +------+--------------+--------------------+
    low4(e) = nibbles of qs as Q4_0;   bit4(e) = (qh >> e) & 1

Dequantize (gguf-py ``Q5_0.dequantize_blocks``, ggml ``dequantize_row_q5_0``):
``y = f32(d) * f32(q - 16)``, one rounding.
"""

from __future__ import annotations

import numpy as np

from .._jit import inline_jit, lazy_njit
from ..qtypes import Q5_0 as QTYPE
from ..qtypes import QK
from ._bits import BlockPlan, Field, byte_map, f16_word, nibble_codes, qh_bit
from ._codec import declare, offset_ref
from ._kquant import f16_fields, int8, put_q5, q5_code, u32_at, weighted_scale
from .f16 import f16_at, f32_to_f16_bits
from .f32 import cvtt_i32, cvtt_i32_ref, first_absmax_ref, low_i8

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, d=2, qh=4, qs=QK // 2)

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(AT.d),)),
    Field("codes", "u1", tuple(lo + (qh_bit(AT.qh, e),) for e, lo in enumerate(nibble_codes(AT.qs)))),
])


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    half = qk >> 1  # 16; a run-time trip count, so LLVM vectorizes the loops below
    d = f16_at(blk, 0)
    qh = u32_at(blk, 2)
    qh2 = np.int32(qh >> np.int32(half))
    for j in range(half):
        yb[j] = d * np.float32(q5_code(blk[6 + j] & 15, qh, j) - 16)
    for j in range(half):
        yb[half + j] = d * np.float32(q5_code(blk[6 + j] >> 4, qh2, j) - 16)


# ---- quantize ------------------------------------------------------------------------------
@inline_jit
def _quantize_block(xb, blk, iscr, fscr):
    """One block of ggml's ``quantize_row_q5_0_ref``:
        max = the first element of largest |x| (as Q4_0); d = max / -16; id = d ? 1/d : 0
        u = MIN(31, (int8_t)(x*id + 16.5f)) (low byte); qs/qh as Q5_1"""
    L = iscr[0, :32]
    amax = np.float32(0)
    mx = np.float32(0)
    for j in range(32):
        v = xb[j]
        if amax < abs(v):
            amax = abs(v)
            mx = v
    d = mx / np.float32(-16)
    idv = np.float32(1) / d if d != np.float32(0) else np.float32(0)
    hd = f32_to_f16_bits(d)
    blk[0], blk[1] = np.uint8(hd & 0xFF), np.uint8(hd >> 8)
    for j in range(32):
        L[j] = min(31, int8(cvtt_i32(xb[j] * idv + np.float32(16.5)))) & 0xFF
    put_q5(blk, 2, 6, L)


def _encode_ref(xr: np.ndarray) -> dict[str, np.ndarray]:
    """numpy: ggml's scalar loop, vectorised over blocks, as bit fields (for ``quantize_ref``)."""
    xb = xr.reshape(-1, 32)
    mx = first_absmax_ref(xb)
    with np.errstate(all="ignore"):
        d = mx / np.float32(-16)
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        u = (np.minimum(31, low_i8(cvtt_i32_ref(xb * idv[:, None] + np.float32(16.5)))) & 0xFF) & 31
    n, k = xr.shape
    return f16_fields(n, k, u, d=d)


# ---- quantize with importance weights (an imatrix row) ----------------------------------------
@lazy_njit(cache=True, error_model="numpy")
def _weighted_block(xb, qb, blk, sigma2, iscr, fscr):
    """One block of ggml's ``quantize_row_q5_0_impl`` (importance weights ``qb``):
        w = qb * sqrtf(sigma2 + x^2) (sigma2 = sum x^2 / K of the row)
        d = make_qx_quants(32, 16, x, L, rmse_type=1, w); codes L as returned, packed as drawn above"""
    put_q5(blk, 2, 6, weighted_scale(xb, qb, blk, sigma2, iscr, fscr, 16))


CODEC = declare(globals(), QTYPE, PLAN, decode_ref=offset_ref(16),
        quantize_block=_quantize_block, encode_ref=_encode_ref, quantize_weighted_block=_weighted_block)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
quantize_weighted, QUANTIZE_REF_IS_NUMPY = CODEC.quantize_weighted, CODEC.quantize_ref_is_numpy
_dequantize_range, _quantize_range = CODEC.dequantize_range, CODEC.quantize_range
