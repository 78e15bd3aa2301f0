"""Q4_0: 32 weights in 18 bytes, value = (u - 8) * d.

    byte  0      2                                   18
          +------+-----------------------------------+
          | d f16| qs[16]                            |
          +------+-----------------------------------+
    qs[i] = u[i] | u[i + 16] << 4        (element e < 16: low nibble of qs[e],
                                          e >= 16: high nibble of qs[e - 16])

Dequantize (gguf-py ``Q4_0.dequantize_blocks``, ggml ``dequantize_row_q4_0``):
``y = f32(d) * f32(u - 8)``, one rounding.

Quantize (ggml ``quantize_row_q4_0_ref``, which gguf-py ``Q4_0.quantize_blocks`` mirrors):
    max = the first element with the largest |x| (a NaN never wins: the scan is ``amax < |v|``;
          all-zero/NaN block: max = +0.0)
    d   = max / -8                 (f32; stored as f16(d), round to nearest even)
    id  = d != 0 ? 1/d : 0         (from the f32 d, not from f16(d))
    u   = min(15, (int8)(x*id + 8.5f))   ((int8) truncates toward zero; x86 turns NaN/out of
                                          range into INT_MIN, whose low byte is 0)
"""

from __future__ import annotations

import numba
import numpy as np

from .._jit import RO_F32, inline_jit, lazy_njit
from ..qtypes import Q4_0 as QTYPE
from ..qtypes import QK
from ._bits import BlockPlan, Field, byte_map, f16_word, nibble_codes
from ._codec import LANES, declare, load_lanes, offset_ref
from ._kquant import put_q4, store_lanes, weighted_scale
from .f16 import f16_at, f16_bits_ref
from .f32 import cvtt_i32, cvtt_i32_ref, low_i8

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, d=2, qs=QK // 2)

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(AT.d),)),
    Field("codes", "u1", nibble_codes(AT.qs)),
])


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    half = qk >> 1  # 16; a run-time trip count, so LLVM vectorizes the loops below
    d = f16_at(blk, 0)
    for j in range(half):
        yb[j] = d * np.float32(np.int32(blk[2 + j] & 15) - 8)
    for j in range(half):
        yb[half + j] = d * np.float32(np.int32(blk[2 + j] >> 4) - 8)


# ---- quantize ------------------------------------------------------------------------------
@lazy_njit(numba.void(RO_F32, numba.uint8[::1], numba.int64, numba.int64), cache=True, error_model="numpy")
def _quantize_range(x, out, b0, b1):
    """Blocks ``[b0, b1)``; ggml's per-block loop run for ``LANES`` blocks side by side."""
    xt = np.empty((32, LANES), np.float32)  # xt[e, l]: element e of block c0 + l
    amax = np.empty(LANES, np.float32)
    d = np.empty(LANES, np.float32)
    idv = np.empty(LANES, np.float32)
    qs = np.empty((16, LANES), np.int32)  # qs[j, l]: byte j of the nibbles of block c0 + l
    for c0 in range(b0, b1, LANES):
        nl = min(LANES, b1 - c0)
        load_lanes(x, c0, nl, xt)
        for l in range(nl):
            amax[l] = np.float32(0)
            d[l] = np.float32(0)  # holds `max` until turned into d
        for e in range(32):  # if (amax < fabsf(v)) { amax = fabsf(v); max = v; }
            row = xt[e]
            for l in range(nl):
                v = row[l]
                a = abs(v)
                upd = amax[l] < a
                amax[l] = a if upd else amax[l]
                d[l] = v if upd else d[l]
        for l in range(nl):
            dl = d[l] / np.float32(-8)
            d[l] = dl
            idv[l] = np.float32(1) / dl if dl != np.float32(0) else np.float32(0)
        for j in range(16):
            r0 = xt[j]
            r1 = xt[j + 16]
            qj = qs[j]
            for l in range(nl):
                t0 = cvtt_i32(r0[l] * idv[l] + np.float32(8.5))
                t1 = cvtt_i32(r1[l] * idv[l] + np.float32(8.5))
                u0 = min(15, ((t0 & 0xFF) ^ 0x80) - 0x80) & 0xFF  # MIN(15, (int8_t)...)
                u1 = min(15, ((t1 & 0xFF) ^ 0x80) - 0x80) & 0xFF
                qj[l] = np.int32((u0 | (u1 << 4)) & 0xFF)
        store_lanes(out, c0, nl, 18, d, qs)


def _encode_ref(xr: np.ndarray) -> dict[str, np.ndarray]:
    """numpy: ggml's scalar loop, vectorised over blocks, as bit fields (for ``quantize_ref``)."""
    xb = xr.reshape(-1, 32)
    amax = np.zeros(len(xb), np.float32)
    mx = np.zeros(len(xb), np.float32)
    for e in range(32):  # for (j...) if (amax < fabsf(v)) { amax = fabsf(v); max = v; }
        v = xb[:, e]
        upd = amax < np.abs(v)
        amax = np.where(upd, np.abs(v), amax)
        mx = np.where(upd, v, mx)
    d = mx / np.float32(-8)
    with np.errstate(divide="ignore", over="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        t = cvtt_i32_ref(xb * idv[:, None] + np.float32(8.5))
    u = np.minimum(15, low_i8(t)) & 0xFF
    n, k = xr.shape
    fields = {"d": f16_bits_ref(d).reshape(n, -1), "codes": u.astype(np.uint8).reshape(n, k)}
    return fields


# ---- quantize with importance weights (an imatrix row) ----------------------------------------
@lazy_njit(cache=True, error_model="numpy")
def _weighted_block(xb, qb, blk, sigma2, iscr, fscr):
    """One block of ggml's ``quantize_row_q4_0_impl`` (importance weights ``qb``):
        w = qb * sqrtf(sigma2 + x^2) (sigma2 = sum x^2 / K of the row)
        d = make_qx_quants(32, 8, x, L, rmse_type=1, w); codes L as returned, packed as drawn above"""
    put_q4(blk, 2, weighted_scale(xb, qb, blk, sigma2, iscr, fscr, 8))


CODEC = declare(globals(), QTYPE, PLAN, decode_ref=offset_ref(8),
        quantize_range=_quantize_range, encode_ref=_encode_ref, quantize_weighted_block=_weighted_block)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
quantize_weighted, _dequantize_range, QUANTIZE_REF_IS_NUMPY = CODEC.quantize_weighted, CODEC.dequantize_range, CODEC.quantize_ref_is_numpy
