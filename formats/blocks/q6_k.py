"""Q6_K: 256 weights in 210 bytes; 16 groups of 16, value = d*scale[g]*(q - 32), q in 0..63.

    byte  0                    128          192            208     210
          +--------------------+------------+--------------+-------+
          | ql[128]            | qh[64]     | scales i8[16]| d f16 |   (d is last)
          +--------------------+------------+--------------+-------+
    element e, h = e // 128, t = e % 128, g = t // 32, l = t % 32:
      low 4 bits  = nibble (g // 2) of ql[64h + 32 (g % 2) + l]
      high 2 bits = (qh[32h + l] >> 2g) & 3
      scale       = scales[e // 16]

Dequantize (gguf-py ``Q6_K.dequantize_blocks``, ggml ``dequantize_row_q6_K``), in f32:
``y = (f32(d) * f32(scale[e // 16])) * f32(q - 32)``.
"""

from __future__ import annotations

import numba
import numpy as np

from .._jit import RO_F32, inline_jit, lazy_njit
from ..qtypes import Q6_K as QTYPE
from ..qtypes import QK_K
from ._bits import BlockPlan, Field, byte_map, f16_word, whole_byte
from ._codec import CHUNK_BLOCKS, LANES, declare, f16_field, load_lanes
from ._kquant import GROUP_MAX_EPS, NO_WEIGHTS, clamp, int8, make_qx_quants, make_qx_quants_lanes, nearest_int
from .f16 import f16_at, f16_to_f32, f32_to_f16_bits

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, ql=QK_K // 2, qh=QK_K // 4, scales=QK_K // 16, d=2)


def _code(e: int) -> tuple:
    h, t = divmod(e, 128)
    g, l = divmod(t, 32)
    return ((AT.ql + 64 * h + 32 * (g % 2) + l, 4 * (g // 2), 4, 0), (AT.qh + 32 * h + l, 2 * g, 2, 4))


PLAN = BlockPlan(QTYPE, [
    Field("codes", "u1", tuple(_code(e) for e in range(256))),
    Field("scale", "i1", tuple(whole_byte(AT.scales + i) for i in range(16))),
    Field("d", "u2", (f16_word(AT.d),)),
])


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    # ggml's loop: per half h, l in 0..31 gives elements l, l+32, l+64, l+96 of the half
    # (groups g = 0..3), scale index 8h + 2g + l // 16. n32 comes at run time so LLVM
    # vectorizes the l loop instead of unrolling it.
    n32 = qk >> 3
    g16 = qk >> 4
    d = f16_at(blk, 208)
    for h in range(2):
        ql = blk[64 * h:64 * h + 64]
        qh = blk[128 + 32 * h:128 + 32 * h + 32]
        sc = blk[192 + 8 * h:200 + 8 * h]
        s0a = d * np.float32((np.int32(sc[0]) ^ 0x80) - 0x80)
        s0b = d * np.float32((np.int32(sc[1]) ^ 0x80) - 0x80)
        s1a = d * np.float32((np.int32(sc[2]) ^ 0x80) - 0x80)
        s1b = d * np.float32((np.int32(sc[3]) ^ 0x80) - 0x80)
        s2a = d * np.float32((np.int32(sc[4]) ^ 0x80) - 0x80)
        s2b = d * np.float32((np.int32(sc[5]) ^ 0x80) - 0x80)
        s3a = d * np.float32((np.int32(sc[6]) ^ 0x80) - 0x80)
        s3b = d * np.float32((np.int32(sc[7]) ^ 0x80) - 0x80)
        ys = yb[128 * h:128 * h + 128]
        for l in range(n32):
            lo0 = np.int32(ql[l])
            lo1 = np.int32(ql[l + 32])
            hi = np.int32(qh[l])
            first = l < g16
            ys[l] = (s0a if first else s0b) * np.float32(((lo0 & 15) | ((hi & 3) << 4)) - 32)
            ys[l + 32] = (s1a if first else s1b) * np.float32(((lo1 & 15) | (((hi >> 2) & 3) << 4)) - 32)
            ys[l + 64] = (s2a if first else s2b) * np.float32(((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32)
            ys[l + 96] = (s3a if first else s3b) * np.float32(((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32)


def _decode_ref(f):
    """numpy: the f32 values from the bit fields (for ``dequantize_ref``)."""
    d = f16_field(f, "d", 16)
    ds = (d * f["scale"].astype(np.float32)).repeat(16, axis=1)
    q = f["codes"].astype(np.float32) - np.float32(32)
    return ds * q


# ---- quantize ------------------------------------------------------------------------------


@lazy_njit(cache=True, error_model="numpy")
def _quantize_block(xb, blk, L, scales, qw):
    """One super-block of ggml's ``quantize_row_q6_K_ref`` (``qw`` empty) or, with importance
    weights ``qw[256]``, of ``quantize_row_q6_K_impl`` (the same recipe, make_qx_quants
    weighted by ``qw``):
        per group of 16: scale[g] = make_qx_quants(16, 32, x, L, rmse_type=1, qw)
        max_scale = the scale of largest |scale| (first wins); below GROUP_MAX_EPS: all 210 bytes 0
        iscale = -128/max_scale; d = f16(1/iscale); sc[g] = (int8)MIN(127, nearest_int(iscale*scale[g]))
        per group with dd = f32(d)*sc[g] != 0: L = clamp(nearest_int(x/dd), -32, 31) + 32
        (dd == 0: make_qx_quants' codes stay); packed as drawn above."""
    for g in range(16):
        scales[g] = make_qx_quants(16, 32, xb[16 * g:16 * g + 16], L[16 * g:16 * g + 16], qw[16 * g:16 * g + 16])
    _finish_block(xb, blk, L, scales)


@lazy_njit(cache=True, error_model="numpy")
def _finish_block(xb, blk, L, scales):
    """The rest of ``_quantize_block`` once the 16 group scales and their codes are found."""
    max_scale = np.float32(0)
    max_abs = np.float32(0)
    for g in range(16):
        sc = scales[g]
        if abs(sc) > max_abs:
            max_abs = abs(sc)
            max_scale = sc
    if max_abs < GROUP_MAX_EPS:
        blk[:] = 0
        return
    iscale = np.float32(-128) / max_scale
    hd = f32_to_f16_bits(np.float32(1) / iscale)
    blk[208] = np.uint8(hd & 0xFF)
    blk[209] = np.uint8(hd >> 8)
    fd = f16_to_f32(hd)
    for g in range(16):
        blk[192 + g] = np.uint8(min(127, nearest_int(iscale * scales[g])) & 0xFF)
    for g in range(16):
        dd = fd * np.float32(int8(blk[192 + g]))
        if dd == np.float32(0):
            continue
        for e in range(16 * g, 16 * g + 16):
            L[e] = clamp(nearest_int(xb[e] / dd), -32, 31) + 32
    for h in range(2):
        ql = blk[64 * h:64 * h + 64]
        qh = blk[128 + 32 * h:128 + 32 * h + 32]
        Lh = L[128 * h:128 * h + 128]
        for l in range(32):
            ql[l] = np.uint8((Lh[l] & 15) | ((Lh[l + 64] & 15) << 4))
            ql[l + 32] = np.uint8((Lh[l + 32] & 15) | ((Lh[l + 96] & 15) << 4))
            qh[l] = np.uint8(((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4)
                              | ((Lh[l + 96] >> 4) << 6)) & 0xFF)


@lazy_njit(numba.void(RO_F32, numba.uint8[::1], numba.int64, numba.int64), cache=True, error_model="numpy")
def _quantize_range_scalar(x, out, b0, b1):
    """Super-blocks ``[b0, b1)`` of ggml's ``quantize_row_q6_K_ref``, one at a time (see
    ``_quantize_block``): the scalar reference of :func:`_quantize_range`."""
    L = np.empty(256, np.int32)
    scales = np.empty(16, np.float32)
    for i in range(b0, b1):
        _quantize_block(x[i * 256:i * 256 + 256], out[i * 210:i * 210 + 210], L, scales, NO_WEIGHTS)


#: Super-blocks per lane group of the fast quantizer (16 groups of 16 each).
_SB_LANES = LANES // 16


@lazy_njit(numba.void(RO_F32, numba.uint8[::1], numba.int64, numba.int64), cache=True, error_model="numpy")
def _quantize_range(x, out, b0, b1):
    """Super-blocks ``[b0, b1)`` of ggml's ``quantize_row_q6_K_ref``: the 16-value groups of
    ``_SB_LANES`` super-blocks searched side by side (``make_qx_quants_lanes``, ggml's order in
    each lane), then each super-block finished as ``_quantize_block`` does."""
    xt = np.empty((16, LANES), np.float32)
    lt = np.empty((16, LANES), np.int32)
    sct = np.empty(LANES, np.float32)
    L = np.empty(256, np.int32)
    scales = np.empty(16, np.float32)
    for s0 in range(b0, b1, _SB_LANES):
        ns = min(_SB_LANES, b1 - s0)
        load_lanes(x, 16 * s0, 16 * ns, xt)
        make_qx_quants_lanes(xt, 16 * ns, 32, sct, lt)
        for s in range(ns):
            for g in range(16):
                scales[g] = sct[16 * s + g]
                for e in range(16):
                    L[16 * g + e] = lt[e, 16 * s + g]
            i = s0 + s
            _finish_block(x[i * 256:i * 256 + 256], out[i * 210:i * 210 + 210], L, scales)


@lazy_njit(cache=True, error_model="numpy")
def _weighted_block(xb, qb, blk, sigma2, iscr, fscr):
    """One super-block of ``quantize_row_q6_K_impl`` (importance weights ``qb``)."""
    _quantize_block(xb, blk, iscr[0], fscr[0, :16], qb)


CODEC = declare(globals(), QTYPE, PLAN, chunk=CHUNK_BLOCKS // 8,
        decode_ref=_decode_ref, quantize_range=_quantize_range, quantize_chunk=64, encode_ref="scalar",
        scalar_range=_quantize_range_scalar,
        quantize_weighted_block=_weighted_block)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
quantize_weighted, _dequantize_range = CODEC.quantize_weighted, CODEC.dequantize_range
