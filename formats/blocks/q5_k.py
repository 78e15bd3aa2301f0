"""Q5_K: 256 weights in 176 bytes; 8 sub-blocks of 32, value = d*sc[s]*q - dmin*m[s], q in 0..31.

    byte  0      2        4            16            48                         176
          +------+--------+------------+-------------+---------------------------+
          | d f16|dmin f16| scales[12] | qh[32]      | qs[128]                   |
          +------+--------+------------+-------------+---------------------------+
    element e, s = e // 32, l = e % 32:
      low 4 bits = nibble (s % 2) of qs[32 (s // 2) + l]     bit 4 = (qh[l] >> s) & 1

Dequantize (gguf-py ``Q5_K.dequantize_blocks``, ggml ``dequantize_row_q5_K``), in f32:
``y = (f32(d) * f32(sc[s])) * f32(q) - (f32(dmin) * f32(m[s]))``.
"""

from __future__ import annotations

import numpy as np

from .._jit import inline_jit, lazy_njit
from ..qtypes import Q5_K as QTYPE
from ..qtypes import QK_K
from ._bits import BlockPlan, Field, byte_map, k_min_fields
from ._codec import CHUNK_BLOCKS, declare, k_min_ref, k_scale_put
from ._kquant import (
    k_final_codes,
    k_min_block,
    k_weighted_scales,
    make_qkx2_quants,
    nearest_int,
    positive_max,
)

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, d=2, dmin=2, scales=12, qh=QK_K // 8, qs=QK_K // 2)

PLAN = BlockPlan(QTYPE, [
    *k_min_fields(AT),
    Field("codes", "u1", tuple(((AT.qs + 32 * (e // 64) + e % 32, 4 * ((e // 32) % 2), 4, 0),
                                (AT.qh + e % 32, e // 32, 1, 4)) for e in range(256))),
])


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    k_min_block(blk, yb, qk, AT.qs, AT.qh)


# ---- quantize ------------------------------------------------------------------------------
_RMIN = np.float32(-0.5)
_RDELTA = np.float32(0.1)


@inline_jit
def _quantize_block(xb, blk, iscr, fscr):
    """One super-block of ggml's ``quantize_row_q5_K_ref``: Q4_K's recipe (see
    q4_k.py) with nmax 31 and make_qkx2_quants(32, 31, x, w, L, &min, Laux, -0.5, 0.1, 15,
    false), w = sqrtf(sum x^2 / 32) + |x|; the final codes from the stored 6-bit scales;
    low 4 bits into qs, bit 4 into qh as drawn above."""
    L = iscr[0]
    laux = iscr[1, :32]
    w = fscr[0]
    scales = fscr[1, :8]
    mins = fscr[2, :8]
    for j in range(8):
        xs = xb[32 * j:32 * j + 32]
        s2 = np.float32(0)
        for l in range(32):
            s2 = s2 + xs[l] * xs[l]
        av = np.sqrt(s2 / np.float32(32))
        for l in range(32):
            w[l] = av + abs(xs[l])
        scales[j], mins[j] = make_qkx2_quants(32, 31, xs, w, L[32 * j:32 * j + 32], laux, _RMIN, _RDELTA, 15, False)
    max_scale, max_min = positive_max(scales), positive_max(mins)
    inv_scale = np.float32(63) / max_scale if max_scale > np.float32(0) else np.float32(0)
    inv_min = np.float32(63) / max_min if max_min > np.float32(0) else np.float32(0)
    for j in range(8):
        ls = min(63, nearest_int(inv_scale * scales[j]) & 0xFF)
        lm = min(63, nearest_int(inv_min * mins[j]) & 0xFF)
        k_scale_put(blk, j, ls, lm)
    _finish_block(xb, blk, L, max_scale / np.float32(63), max_min / np.float32(63))


@lazy_njit(cache=True, error_model="numpy")
def _finish_block(xb, blk, L, d, dmin):
    """ggml's tail of both quantize_row_q5_K_ref and _impl: d, dmin and the final codes
    (:func:`~._kquant.k_final_codes`), then low 4 bits into qs and bit 4 into qh."""
    k_final_codes(xb, blk, L, d, dmin, 31)
    qh = blk[16:48]
    qh[:] = 0
    for c in range(4):
        ql = blk[48 + 32 * c:48 + 32 * c + 32]
        for l in range(32):
            l1 = L[64 * c + l]
            l2 = L[64 * c + 32 + l]
            if l1 > 15:
                l1 -= 16
                qh[l] = np.uint8(qh[l] | (1 << (2 * c)))
            if l2 > 15:
                l2 -= 16
                qh[l] = np.uint8(qh[l] | (2 << (2 * c)))
            ql[l] = np.uint8((l1 | (l2 << 4)) & 0xFF)


@lazy_njit(cache=True, error_model="numpy")
def _weighted_block(xb, qb, blk, sigma2, iscr, fscr):
    """One super-block of ggml's ``quantize_row_q5_K_impl`` (importance weights ``qb``):
    Q4_K's weighted recipe (q4_k.py) with nmax 31 (make_qkx3_quants(32, 31, ..., -0.9, 0.05,
    36)), the make_qp_quants codes clamped to 63, then the reference's tail."""
    L, d_block, m_block = k_weighted_scales(xb, qb, blk, iscr, fscr, 31)
    _finish_block(xb, blk, L, d_block, m_block)


CODEC = declare(globals(), QTYPE, PLAN, chunk=CHUNK_BLOCKS // 8,
        decode_ref=k_min_ref(32), quantize_block=_quantize_block, quantize_chunk=64, encode_ref="scalar",
        quantize_weighted_block=_weighted_block)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
quantize_weighted, _dequantize_range, _quantize_range = CODEC.quantize_weighted, CODEC.dequantize_range, CODEC.quantize_range
