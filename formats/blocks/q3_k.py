"""Q3_K: 256 weights in 110 bytes; 16 groups of 16, value = d*(sc[g] - 32)*(u - 4), u in 0..7.

    byte  0            32                       96             108     110
          +------------+------------------------+--------------+-------+
          | hmask[32]  | qs[64]                 | scales[12]   | d f16 |
          +------------+------------------------+--------------+-------+
    element e, c = e // 128, t = e % 128, j = t // 32, l = t % 32:
      u = ((qs[32c + l] >> 2j) & 3) | ((hmask[e % 32] >> (e // 32)) & 1) << 2
    6-bit sc[g]: low 4 bits = scales[g] & 15 (g < 8) or scales[g - 8] >> 4 (g >= 8)
                 high 2 bits = (scales[8 + g % 4] >> 2 (g // 4)) & 3
                 bit 7 6 5 4 | 3 2 1 0
        scales[0..7]:  sc[8..15] low | sc[0..7] low
        scales[8..11]: sc[g] high bits at 2 (g // 4) for g % 4 = byte - 8

Dequantize (gguf-py ``Q3_K.dequantize_blocks``, ggml ``dequantize_row_q3_K``), in f32:
``y = (f32(d) * f32(sc[g] - 32)) * f32(u - 4)``.

Quantize: ggml's ``quantize_row_q3_K_ref`` (no importance matrix), in C order:
  per group: scale[g] = make_q3_quants(16, 4, x, L, do_rmse=true)
  max_scale: the scale of largest |scale| (strict ">", first wins)
  max_scale != 0: iscale = -32/max_scale; l = (int8)nearest_int(iscale*scale[g]) (the low byte
      first, then) clamp(l, -32, 31) + 32 into sc[g]; d = f16(1/iscale)      else d = 0
  per group with dd = f32(d)*(sc[g] - 32) != 0: u = clamp(nearest_int(x/dd), -4, 3) + 4
      (dd == 0: make_q3_quants' codes stay)
"""

from __future__ import annotations

import numpy as np

from .._jit import inline_jit, lazy_njit
from ..qtypes import Q3_K as QTYPE
from ..qtypes import QK_K
from ._bits import BlockPlan, Field, byte_map, f16_word
from ._codec import CHUNK_BLOCKS, declare, f16_field
from ._kquant import clamp, importance_weights, int8, make_q3_quants, make_qx_quants, nearest_int, put_q2, sum_squares
from .f16 import f16_at, f16_to_f32, f32_to_f16_bits

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, hmask=QK_K // 8, qs=QK_K // 4, scales=12, d=2)


def _code(e: int) -> tuple:
    c, t = divmod(e, 128)
    j, l = divmod(t, 32)
    return ((AT.qs + 32 * c + l, 2 * j, 2, 0), (AT.hmask + e % 32, e // 32, 1, 2))


def _scale(g: int) -> tuple:
    low = (AT.scales + g, 0, 4, 0) if g < 8 else (AT.scales + g - 8, 4, 4, 0)
    return (low, (AT.scales + 8 + g % 4, 2 * (g // 4), 2, 4))


PLAN = BlockPlan(QTYPE, [
    Field("codes", "u1", tuple(_code(e) for e in range(256))),
    Field("sc", "u1", tuple(_scale(g) for g in range(16))),
    Field("d", "u2", (f16_word(AT.d),)),
])


@lazy_njit(inline="always")
def _scale6(blk, g):
    """sc[g] (0..63) from the block's 12 scale bytes (at 96), as drawn above."""
    lo = (np.int32(blk[96 + g]) & 15) if g < 8 else (np.int32(blk[96 + g - 8]) >> 4)
    return lo | (((np.int32(blk[104 + (g & 3)]) >> (2 * (g >> 2))) & 3) << 4)


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    n16 = qk >> 4  # 16; a run-time trip count, so LLVM vectorizes the loop below
    d = f16_at(blk, 108)
    for g in range(16):
        dl = d * np.float32(_scale6(blk, g) - 32)
        o = 16 * (g & 1)
        q = blk[32 + 32 * (g >> 3) + o:32 + 32 * (g >> 3) + o + 16]
        hm = blk[o:o + 16]
        sh = 2 * ((g & 7) >> 1)
        hb = g >> 1  # e // 32 for this group's elements
        ys = yb[16 * g:16 * g + 16]
        for l in range(n16):
            u = ((np.int32(q[l]) >> sh) & 3) | (((np.int32(hm[l]) >> hb) & 1) << 2)
            ys[l] = dl * np.float32(u - 4)


def _decode_ref(f):
    """numpy: the f32 values from the bit fields (for ``dequantize_ref``)."""
    d = f16_field(f, "d", 16)
    dl = (d * (f["sc"].astype(np.float32) - np.float32(32))).repeat(16, axis=1)
    return dl * (f["codes"].astype(np.float32) - np.float32(4))


# ---- quantize ------------------------------------------------------------------------------
@inline_jit
def _quantize_block(xb, blk, iscr, fscr):
    """One super-block of ggml's ``quantize_row_q3_K_ref`` (recipe in the module text)."""
    L = iscr[0]
    scales = fscr[0, :16]
    max_scale = np.float32(0)
    amax = np.float32(0)
    for g in range(16):
        sc = make_q3_quants(16, 4, xb[16 * g:16 * g + 16], L[16 * g:16 * g + 16])
        scales[g] = sc
        if abs(sc) > amax:
            amax = abs(sc)
            max_scale = sc
    for j in range(12):
        blk[96 + j] = 0
    if max_scale != np.float32(0):
        iscale = np.float32(-32) / max_scale
        for g in range(16):
            l = clamp(int8(nearest_int(iscale * scales[g])), -32, 31) + 32
            if g < 8:
                blk[96 + g] = np.uint8(l & 15)
            else:
                blk[96 + g - 8] = np.uint8(blk[96 + g - 8] | ((l & 15) << 4))
            blk[104 + g % 4] = np.uint8((np.int64(blk[104 + g % 4]) | ((l >> 4) << (2 * (g // 4)))) & 0xFF)
        hd = f32_to_f16_bits(np.float32(1) / iscale)
    else:
        hd = f32_to_f16_bits(np.float32(0))
    _finish_block(xb, blk, L, hd)


@lazy_njit(cache=True, error_model="numpy")
def _finish_block(xb, blk, L, hd):
    """Store the f16 bits d, then the codes from the stored 6-bit scales (a group whose
    f32(d)*(sc-32) is 0 keeps ``L``), hmask and qs (ggml's tail of both _ref and _impl)."""
    blk[108] = np.uint8(hd & 0xFF)
    blk[109] = np.uint8(hd >> 8)
    fd = f16_to_f32(hd)
    for g in range(16):
        dd = fd * np.float32(int8(_scale6(blk, g) - 32))
        if dd == np.float32(0):
            continue
        for e in range(16 * g, 16 * g + 16):
            L[e] = clamp(nearest_int(xb[e] / dd), -4, 3) + 4
    for m in range(32):
        blk[m] = 0
    for e in range(256):
        if L[e] > 3:
            blk[e % 32] = np.uint8(blk[e % 32] | (1 << (e // 32)))
            L[e] -= 4
    put_q2(blk, 32, L)


@lazy_njit(cache=True, error_model="numpy")
def _weighted_block(xb, qb, blk, sigma2, iscr, fscr):
    """One super-block of ggml's ``quantize_row_q3_K_impl`` (importance weights ``qb``):
        sigma2 = 2 * sum x^2 / 256; w = qb * sqrtf(sigma2 + x^2), sw[g] = sum w
        scale[g] = make_qx_quants(16, 4, x, L, 1, w); d = make_qx_quants(16, 32, scale, Ls, 1, sw)
        6-bit scales from Ls packed as drawn above; then the reference's tail with f16(d)"""
    L, ls = iscr[0], iscr[2, :16]
    w, sw, scales = fscr[0, :16], fscr[1, :16], fscr[2, :16]
    sig = np.float32(2) * sum_squares(xb) / np.float32(256)
    for g in range(16):
        xs = xb[16 * g:16 * g + 16]
        sw[g] = importance_weights(qb[16 * g:16 * g + 16], xs, sig, w)
        scales[g] = make_qx_quants(16, 4, xs, L[16 * g:16 * g + 16], w)
    for j in range(12):
        blk[96 + j] = 0
    d_block = make_qx_quants(16, 32, scales, ls, sw)
    for g in range(16):
        l = ls[g]
        if g < 8:
            blk[96 + g] = np.uint8(l & 15)
        else:
            blk[96 + g - 8] = np.uint8(blk[96 + g - 8] | ((l & 15) << 4))
        blk[104 + g % 4] = np.uint8((np.int64(blk[104 + g % 4]) | ((l >> 4) << (2 * (g // 4)))) & 0xFF)
    _finish_block(xb, blk, L, f32_to_f16_bits(d_block))


CODEC = declare(globals(), QTYPE, PLAN, chunk=CHUNK_BLOCKS // 8,
        decode_ref=_decode_ref, quantize_block=_quantize_block, quantize_chunk=64, encode_ref="scalar",
        quantize_weighted_block=_weighted_block)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
quantize_weighted, _dequantize_range, _quantize_range = CODEC.quantize_weighted, CODEC.dequantize_range, CODEC.quantize_range
