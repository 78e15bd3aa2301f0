"""Q2_K: 256 weights in 84 bytes; 16 groups of 16, value = d*sc[g]*q - dmin*m[g], q in 0..3.

    byte  0                16                                  80     82      84
          +----------------+-----------------------------------+------+-------+
          | scales[16]     | qs[64]                            | d f16|dmin f16|
          +----------------+-----------------------------------+------+-------+
    scales[g] = sc[g] (low nibble) | m[g] << 4 (high nibble)
    element e, c = e // 128, t = e % 128, j = t // 32, l = t % 32:
      q = (qs[32c + l] >> 2j) & 3        group g = e // 16

Dequantize (gguf-py ``Q2_K.dequantize_blocks``, ggml ``dequantize_row_q2_K``), in f32:
``y = (f32(d) * f32(sc[g])) * f32(q) - (f32(dmin) * f32(m[g]))``.

Quantize: ggml's ``quantize_row_q2_K_ref`` (no importance matrix), in C order:
  per group: w = |x|;  scale[g], min[g] = make_qkx2_quants(16, 3, x, w, L, &min, Laux,
             rmin=-0.5, rdelta=0.1, nstep=15, use_mad=true)
  max_scale, max_min: the largest (strict ">" in group order, from 0)
  max_scale > 0: sc[g] = (uint8)nearest_int(15/max_scale * scale[g]), d = f16(max_scale/15)
                 else sc = 0, d = 0;   the mins likewise into the high nibbles (OR-ed, low byte)
  per group with dd = f32(d)*(sc & 15) != 0: dm = f32(dmin)*(sc >> 4),
      q = clamp(nearest_int((x + dm)/dd), 0, 3)   (dd == 0: make_qkx2_quants' codes stay)
"""

from __future__ import annotations

import numpy as np

from .._jit import inline_jit, lazy_njit
from ..qtypes import Q2_K as QTYPE
from ..qtypes import QK_K
from ._bits import BlockPlan, Field, byte_map, f16_word
from ._codec import CHUNK_BLOCKS, declare, k_min_ref
from ._kquant import (
    RDELTA3,
    RMIN3,
    clamp,
    importance_weights,
    make_qkx2_quants,
    make_qkx3_quants,
    make_qp_quants,
    nearest_int,
    positive_max,
    put_q2,
    sum_squares,
)
from .f16 import f16_at, f16_to_f32, f32_to_f16_bits

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, scales=QK_K // 16, qs=QK_K // 4, d=2, dmin=2)


def _code(e: int) -> tuple:
    c, t = divmod(e, 128)
    j, l = divmod(t, 32)
    return ((AT.qs + 32 * c + l, 2 * j, 2, 0),)


PLAN = BlockPlan(QTYPE, [
    Field("sc", "u1", tuple(((AT.scales + g, 0, 4, 0),) for g in range(16))),
    Field("m", "u1", tuple(((AT.scales + g, 4, 4, 0),) for g in range(16))),
    Field("codes", "u1", tuple(_code(e) for e in range(256))),
    Field("d", "u2", (f16_word(AT.d),)),
    Field("dmin", "u2", (f16_word(AT.dmin),)),
])


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    n16 = qk >> 4  # 16; a run-time trip count, so LLVM vectorizes the loop below
    d = f16_at(blk, 80)
    dmin = f16_at(blk, 82)
    for g in range(16):
        s = np.int32(blk[g])
        dl = d * np.float32(s & 15)
        ml = dmin * np.float32(s >> 4)
        q = blk[16 + 32 * (g >> 3) + 16 * (g & 1):16 + 32 * (g >> 3) + 16 * (g & 1) + 16]
        sh = 2 * ((g & 7) >> 1)
        ys = yb[16 * g:16 * g + 16]
        for l in range(n16):
            ys[l] = dl * np.float32((np.int32(q[l]) >> sh) & 3) - ml


# ---- quantize ------------------------------------------------------------------------------
_RMIN = np.float32(-0.5)
_RDELTA = np.float32(0.1)


@inline_jit
def _quantize_block(xb, blk, iscr, fscr):
    """One super-block of ggml's ``quantize_row_q2_K_ref`` (recipe in the module text)."""
    L = iscr[0]
    laux = iscr[1, :16]
    w = fscr[0, :16]
    scales = fscr[1, :16]
    mins = fscr[2, :16]
    f15 = np.float32(15)
    for g in range(16):
        xs = xb[16 * g:16 * g + 16]
        for l in range(16):
            w[l] = abs(xs[l])
        scales[g], mins[g] = make_qkx2_quants(16, 3, xs, w, L[16 * g:16 * g + 16], laux, _RMIN, _RDELTA, 15, True)
    max_scale, max_min = positive_max(scales), positive_max(mins)
    if max_scale > np.float32(0):
        iscale = f15 / max_scale
        for g in range(16):
            blk[g] = np.uint8(nearest_int(iscale * scales[g]) & 0xFF)
        hd = f32_to_f16_bits(max_scale / f15)
    else:
        for g in range(16):
            blk[g] = 0
        hd = f32_to_f16_bits(np.float32(0))
    if max_min > np.float32(0):
        iscale = f15 / max_min
        for g in range(16):
            blk[g] = np.uint8((np.int64(blk[g]) | (nearest_int(iscale * mins[g]) << 4)) & 0xFF)
        hm = f32_to_f16_bits(max_min / f15)
    else:
        hm = f32_to_f16_bits(np.float32(0))
    _finish_block(xb, blk, L, hd, hm)


@lazy_njit(cache=True, error_model="numpy")
def _finish_block(xb, blk, L, hd, hm):
    """Store the f16 bits d/dmin, then the codes from the stored 4-bit scales (a group whose
    f32(d)*sc is 0 keeps ``L``) and the qs bytes (ggml's tail of both _ref and _impl)."""
    blk[80], blk[81], blk[82], blk[83] = np.uint8(hd & 0xFF), np.uint8(hd >> 8), np.uint8(hm & 0xFF), np.uint8(hm >> 8)
    fd = f16_to_f32(hd)
    fm = f16_to_f32(hm)
    for g in range(16):
        dd = fd * np.float32(np.int32(blk[g]) & 15)
        if dd == np.float32(0):
            continue
        dm = fm * np.float32(np.int32(blk[g]) >> 4)
        for e in range(16 * g, 16 * g + 16):
            L[e] = clamp(nearest_int((xb[e] + dm) / dd), 0, 3)
    put_q2(blk, 16, L)


@lazy_njit(cache=True, error_model="numpy")
def _weighted_block(xb, qb, blk, sigma2, iscr, fscr):
    """One super-block of ggml's ``quantize_row_q2_K_impl`` (importance weights ``qb``):
        sigma2 = sum x^2 / 256; w = qb * sqrtf(sigma2 + x^2), sw[g] = sum w
        scale[g], min[g] = make_qkx3_quants(16, 3, x, w, L, &min, Laux, -0.9, 0.05, 36, false)
        d = make_qp_quants(16, 15, scale, Ls, sw), dmin likewise; scales[g] = Ls | Lm << 4
        then the reference's tail with f16(d), f16(dmin)"""
    L, laux, ls, lm = iscr[0], iscr[1, :16], iscr[2, :16], iscr[3, :16]
    w, sw, scales, mins = fscr[0, :16], fscr[1, :16], fscr[2, :16], fscr[3, :16]
    sig = sum_squares(xb) / np.float32(256)
    for g in range(16):
        xs = xb[16 * g:16 * g + 16]
        sw[g] = importance_weights(qb[16 * g:16 * g + 16], xs, sig, w)
        scales[g], mins[g] = make_qkx3_quants(16, 3, xs, w, L[16 * g:16 * g + 16], laux, RMIN3, RDELTA3, 36, False)
    dm = make_qp_quants(16, 15, scales, ls, sw)
    mm = make_qp_quants(16, 15, mins, lm, sw)
    for g in range(16):
        blk[g] = np.uint8((ls[g] | (lm[g] << 4)) & 0xFF)
    _finish_block(xb, blk, L, f32_to_f16_bits(dm), f32_to_f16_bits(mm))


CODEC = declare(globals(), QTYPE, PLAN, chunk=CHUNK_BLOCKS // 8,
        decode_ref=k_min_ref(16), quantize_block=_quantize_block, quantize_chunk=64, encode_ref="scalar",
        quantize_weighted_block=_weighted_block)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
quantize_weighted, _dequantize_range, _quantize_range = CODEC.quantize_weighted, CODEC.dequantize_range, CODEC.quantize_range
