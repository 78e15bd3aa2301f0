"""Q4_K: 256 weights in 144 bytes; 8 sub-blocks of 32, value = d*sc[s]*q - dmin*m[s].

    byte  0      2        4              16                                   144
          +------+--------+--------------+-------------------------------------+
          | d f16|dmin f16| scales[12]   | qs[128]                             |
          +------+--------+--------------+-------------------------------------+
    scales: 6-bit sc[8], m[8] packed as drawn in _bits.k_scale_parts.
    element e: chunk c = e // 64, t = e % 64 -> qs[32c + t % 32], low nibble if t < 32 else high
               (sub-block s = e // 32 uses nibble s % 2 of qs[32 (s // 2) .. +32])

Dequantize (gguf-py ``Q4_K.dequantize_blocks``, ggml ``dequantize_row_q4_K``), in f32:
    y = (f32(d) * f32(sc[s])) * f32(q) - (f32(dmin) * f32(m[s]))

Quantize: ggml's ``quantize_row_q4_K_ref`` (what ``ggml_quantize_chunk`` runs for Q4_K with no
importance matrix), reproduced operation for operation in f32, never contracted to FMA:
  per sub-block s (32 values x):
    sum_x2 = sum x*x (in order);  av_x = sqrtf(sum_x2/32);  w = av_x + |x|
    scale[s], min[s] = make_qkx2_quants(nmax=15, rmin=-1, rdelta=0.1, nstep=20, use_mad=false)
  max_scale, max_min = the largest scale / min ("if (v > max)" in sub-block order)
  ls = MIN(63, (uint8)nearest_int(63/max_scale * scale[s])), lm likewise (inv = 0 if max <= 0)
  d = f16(max_scale/63), dmin = f16(max_min/63)
  per sub-block with dd = f32(d)*ls != 0:  q = clamp(nearest_int((x + f32(dmin)*lm) / dd), 0, 15)
      (dd == 0: the codes make_qkx2_quants chose stay)
nearest_int(v): the bits of f32(v + 12582912) & 0x7fffff, minus 0x400000 -- round half to even
inside |v| <= 4194303, and the same bit trick (not a rounding) outside it, NaN -> 0.
See make_qkx2_quants in ``_make_qkx2_ref`` (the scalar order, written out).
"""

from __future__ import annotations

import numba
import numpy as np

from .._jit import RO_F32, inline_jit, lazy_njit
from ..qtypes import Q4_K as QTYPE
from ..qtypes import QK_K
from ._bits import BlockPlan, Field, byte_map, k_min_fields
from ._codec import CHUNK_BLOCKS, declare, k_min_ref, k_scale_put, load_lanes
from ._kquant import k_final_codes, k_min_block, k_weighted_scales
from .f16 import f16_bits_ref, f16_to_f32, f32_to_f16_bits
from .f32 import f32_bits

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, d=2, dmin=2, scales=12, qs=QK_K // 2)

PLAN = BlockPlan(QTYPE, [
    *k_min_fields(AT),
    Field("codes", "u1", tuple(((AT.qs + 32 * (e // 64) + e % 32, 4 * ((e % 64) // 32), 4, 0),)
                               for e in range(256))),
])


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    k_min_block(blk, yb, qk, AT.qs, -1)


# ---- quantize ------------------------------------------------------------------------------
NMAX = 15
RMIN = np.float32(-1.0)
RDELTA = np.float32(0.1)
NSTEP = 20
_MAGIC = np.float32(12582912.0)  # 1.5 * 2**23

#: Sub-blocks per lane group of the fast quantizer (8 per super-block).
SUB_LANES = 256


@lazy_njit(numba.int64(numba.float32), cache=True, inline="always")
def nearest_int(v):
    """ggml's nearest_int: the float magic-number trick, bit for bit."""
    return (np.int64(f32_bits(v + _MAGIC)) & 0x7FFFFF) - 0x400000


@lazy_njit(numba.float32(numba.float32, numba.float32), cache=True, inline="always")
def _code(v, top):
    """MAX(0, MIN(top, nearest_int(v))) as an exact f32 (the integer is < 2**23)."""
    q = np.float32(f32_bits(v + _MAGIC) & 0x7FFFFF) - np.float32(4194304)
    q = q if q < top else top
    return q if q > np.float32(0) else np.float32(0)


def nearest_int_ref(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return ((v + _MAGIC).view(np.int32).astype(np.int64) & 0x7FFFFF) - 0x400000


# Per-lane state rows of the fast quantizer's scratch array ``st[row, lane]``.
(_MN, _MX, _SW, _SX, _ISC, _SC, _BEST, _SL, _SL2, _SXL, _TSC, _TMN, _CUR, _LISC, _LMN, _MN0,
 _S2, _DD, _DM, _NROWS) = range(20)


@lazy_njit(numba.void(numba.float32[:, ::1], numba.float32[:, ::1], numba.float32[:, ::1], numba.int64,
               numba.float32[:, ::1]),
    cache=True,
    error_model="numpy",
)
def _make_qkx2_lanes(xt, w, laux, nl, st):
    """make_qkx2_quants(32, 15, x, weights, L, &the_min, Laux, -1, 0.1, 20, false) for ``nl``
    sub-blocks at once: lane ``l`` runs ggml's scalar loop on ``xt[:, l]`` in ggml's order.

    Leaves per lane: ``st[_SC]`` = the returned scale, ``st[_MN]`` = -the_min (0 when all
    values are equal: then also ``st[_SC] = 0``), and the codes L as the recipe
    ``L = clamp(nearest_int(st[_LISC] * (x - st[_LMN])), 0, 15)`` (the iscale and min of the
    pass that produced them), recomputed by the caller only where it needs them.
    """
    mn, mx, sw, sx, isc, sc, best = st[_MN], st[_MX], st[_SW], st[_SX], st[_ISC], st[_SC], st[_BEST]
    sl, sl2, sxl, tsc, tmn, cur = st[_SL], st[_SL2], st[_SXL], st[_TSC], st[_TMN], st[_CUR]
    lisc, lmn, mn0 = st[_LISC], st[_LMN], st[_MN0]
    nmax = np.float32(NMAX)
    zero = np.float32(0)
    r0 = xt[0]
    w0 = w[0]
    for l in range(nl):
        mn[l] = r0[l]
        mx[l] = r0[l]
        sw[l] = w0[l]
        sx[l] = w0[l] * r0[l]
    for e in range(1, 32):
        row = xt[e]
        we = w[e]
        for l in range(nl):
            v = row[l]
            mn[l] = v if v < mn[l] else mn[l]
            mx[l] = v if v > mx[l] else mx[l]
            sw[l] = sw[l] + we[l]
            sx[l] = sx[l] + we[l] * v
    for l in range(nl):
        m = zero if mn[l] > zero else mn[l]  # if (min > 0) min = 0  (a NaN stays)
        mn[l] = m
        mn0[l] = m
        isc[l] = nmax / (mx[l] - m)
        sc[l] = np.float32(1) / isc[l]
        lisc[l] = isc[l]
        lmn[l] = m
        best[l] = zero
    for e in range(32):  # best_error of the first guess
        row = xt[e]
        we = w[e]
        for l in range(nl):
            q = _code(isc[l] * (row[l] - mn[l]), nmax)
            diff = sc[l] * q + mn[l] - row[l]
            best[l] = best[l] + we[l] * (diff * diff)
    for step in range(NSTEP + 1):
        num = RMIN + RDELTA * np.float32(step) + nmax
        for l in range(nl):
            isc[l] = num / (mx[l] - mn[l])
            sl[l] = zero
            sl2[l] = zero
            sxl[l] = zero
        for e in range(32):
            row = xt[e]
            we = w[e]
            la = laux[e]
            for l in range(nl):
                q = _code(isc[l] * (row[l] - mn[l]), nmax)
                la[l] = q
                wq = we[l] * q
                sl[l] = sl[l] + wq
                sl2[l] = sl2[l] + wq * q
                sxl[l] = sxl[l] + wq * row[l]
        for l in range(nl):
            D = sw[l] * sl2[l] - sl[l] * sl[l]
            this_scale = (sw[l] * sxl[l] - sx[l] * sl[l]) / D
            this_min = (sl2[l] * sx[l] - sl[l] * sxl[l]) / D
            if this_min > zero:
                this_min = zero
                this_scale = sxl[l] / sl2[l]
            # a lane with D <= 0 (or NaN) must not be updated: make its error NaN
            tsc[l] = this_scale
            tmn[l] = this_min
            cur[l] = zero if D > zero else np.float32(np.nan)
        for e in range(32):
            row = xt[e]
            we = w[e]
            la = laux[e]
            for l in range(nl):
                diff = tsc[l] * la[l] + tmn[l] - row[l]
                cur[l] = cur[l] + we[l] * (diff * diff)
        for l in range(nl):
            if cur[l] < best[l]:
                best[l] = cur[l]
                lisc[l] = isc[l]
                lmn[l] = mn[l]
                sc[l] = tsc[l]
                mn[l] = tmn[l]
    for l in range(nl):
        if mx[l] == mn0[l]:  # max == min: L = 0, the_min = -min, scale 0
            sc[l] = zero
            mn[l] = mn0[l]


@lazy_njit(numba.void(RO_F32, numba.uint8[::1], numba.int64, numba.int64), cache=True, error_model="numpy")
def _quantize_range(x, out, b0, b1):
    """Super-blocks ``[b0, b1)``: ``SUB_LANES`` sub-blocks side by side, ggml's order per lane."""
    xt = np.empty((32, SUB_LANES), np.float32)
    w = np.empty((32, SUB_LANES), np.float32)
    lq = np.empty((32, SUB_LANES), np.float32)
    st = np.empty((_NROWS, SUB_LANES), np.float32)
    s2, dd, dm = st[_S2], st[_DD], st[_DM]
    sc, mn, lisc, lmn, mx, mn0 = st[_SC], st[_MN], st[_LISC], st[_LMN], st[_MX], st[_MN0]
    zero = np.float32(0)
    f63 = np.float32(63)
    nmax = np.float32(NMAX)
    for g0 in range(b0, b1, SUB_LANES // 8):
        nsb = min(SUB_LANES // 8, b1 - g0)
        nl = 8 * nsb
        load_lanes(x, 8 * g0, nl, xt)
        # weights: av_x = sqrtf(sum_x2 / 32); w = av_x + |x|
        for l in range(nl):
            s2[l] = zero
        for e in range(32):
            row = xt[e]
            for l in range(nl):
                s2[l] = s2[l] + row[l] * row[l]
        for l in range(nl):
            s2[l] = np.sqrt(s2[l] / np.float32(32))
        for e in range(32):
            row = xt[e]
            we = w[e]
            for l in range(nl):
                we[l] = s2[l] + abs(row[l])
        _make_qkx2_lanes(xt, w, lq, nl, st)
        # per super-block, in sub-block order: 6-bit scales, d, dmin (scales[j] = sc, mins[j] = -mn)
        for sb in range(nsb):
            max_scale = zero
            max_min = zero
            for j in range(8):
                if sc[8 * sb + j] > max_scale:
                    max_scale = sc[8 * sb + j]
                if -mn[8 * sb + j] > max_min:
                    max_min = -mn[8 * sb + j]
            inv_scale = f63 / max_scale if max_scale > zero else zero
            inv_min = f63 / max_min if max_min > zero else zero
            o = (g0 + sb) * 144
            blk = out[o:o + 144]
            hd = f32_to_f16_bits(max_scale / f63)
            hm = f32_to_f16_bits(max_min / f63)
            blk[0] = np.uint8(hd & 0xFF)
            blk[1] = np.uint8(hd >> 8)
            blk[2] = np.uint8(hm & 0xFF)
            blk[3] = np.uint8(hm >> 8)
            fd = f16_to_f32(hd)
            fm = f16_to_f32(hm)
            for j in range(8):
                ls = min(63, nearest_int(inv_scale * sc[8 * sb + j]) & 0xFF)
                lm = min(63, nearest_int(inv_min * -mn[8 * sb + j]) & 0xFF)
                k_scale_put(blk, j, ls, lm)
                dd[8 * sb + j] = fd * np.float32(ls)
                dm[8 * sb + j] = fm * np.float32(lm)
        # final codes: clamp(nearest_int((x + dm) / d), 0, 15) where d*sc != 0, else the codes
        # make_qkx2_quants chose (recomputed from their recipe; 0 for a flat sub-block)
        for e in range(32):
            row = xt[e]
            le = lq[e]
            for l in range(nl):
                q = _code((row[l] + dm[l]) / dd[l], nmax)
                q0 = _code(lisc[l] * (row[l] - lmn[l]), nmax)
                q0 = q0 if mx[l] != mn0[l] else zero
                le[l] = q if dd[l] != zero else q0
        # pack: qs[32c + t] = L(sub 2c)[t] | L(sub 2c+1)[t] << 4
        for sb in range(nsb):
            o = (g0 + sb) * 144 + 16
            qs = out[o:o + 128]
            for c in range(4):
                l0 = 8 * sb + 2 * c
                for t in range(32):
                    qs[32 * c + t] = np.uint8(np.int32(lq[t, l0]) | (np.int32(lq[t, l0 + 1]) << 4))


# ---- the numpy reference: ggml's C, line by line, vectorised over sub-blocks ----------------
def _c_sum(a: np.ndarray) -> np.ndarray:
    """The columns of ``a`` ``[n, S]`` summed top to bottom in its own dtype, as C's ``for``
    loop adds (one vector add per row; ``np.sum`` may add pairwise)."""
    acc = a[0].copy()
    for row in a[1:]:
        acc += row
    return acc


def _make_qkx2_ref(x: np.ndarray, weights: np.ndarray, nmax: int, rmin, rdelta, nstep: int):
    """make_qkx2_quants(n=32, ..., use_mad=false) for every row of ``x`` ``[S, 32]`` at once.

    Returns (L ``[S, 32]`` int64, scale ``[S]``, the_min ``[S]``), all f32 arithmetic in C order:
    each product as C forms it, each sum left to right (:func:`_c_sum`, over the transposed
    ``[32, S]`` arrays, so that every step is a vector operation across sub-blocks).
    """
    f32 = np.float32
    x, weights = np.ascontiguousarray(x.T), np.ascontiguousarray(weights.T)
    n = x.shape[0]
    mn = x[0].copy()
    mx = x[0].copy()
    for i in range(1, n):  # C's compare-and-take (a NaN never replaces the running value)
        mn = np.where(x[i] < mn, x[i], mn)
        mx = np.where(x[i] > mx, x[i], mx)
    sum_w = _c_sum(weights)
    sum_x = _c_sum(weights * x)
    mn = np.where(mn > 0, f32(0), mn)
    flat = mx == mn
    min_flat = mn.copy()
    iscale = f32(nmax) / (mx - mn)
    scale = f32(1) / iscale
    L = np.clip(nearest_int_ref(iscale * (x - mn)), 0, nmax)
    diff = scale * L.astype(f32) + mn - x
    best_error = _c_sum(weights * (diff * diff))
    for step in range(nstep + 1):
        iscale = (f32(rmin) + f32(rdelta) * f32(step) + f32(nmax)) / (mx - mn)
        Laux = np.clip(nearest_int_ref(iscale * (x - mn)), 0, nmax)
        fl = Laux.astype(f32)
        wl = weights * fl
        sum_l = _c_sum(wl)
        sum_l2 = _c_sum(wl * fl)
        sum_xl = _c_sum(wl * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
        clamp = this_min > 0
        this_min = np.where(clamp, f32(0), this_min)
        this_scale = np.where(clamp, sum_xl / sum_l2, this_scale)
        diff = this_scale * fl + this_min - x
        cur_error = _c_sum(weights * (diff * diff))
        better = (D > 0) & (cur_error < best_error)
        L = np.where(better, Laux, L)
        best_error = np.where(better, cur_error, best_error)
        scale = np.where(better, this_scale, scale)
        mn = np.where(better, this_min, mn)
    L = np.where(flat, 0, L)
    scale = np.where(flat, f32(0), scale)
    the_min = -np.where(flat, min_flat, mn)
    return L.T, scale.astype(f32), the_min.astype(f32)


def _encode_ref(xr: np.ndarray) -> dict[str, np.ndarray]:
    """numpy: ggml's scalar loop, vectorised over blocks, as bit fields (for ``quantize_ref``)."""
    f32 = np.float32
    xs = xr.reshape(-1, 32)  # one row per sub-block; 8 per super-block
    with np.errstate(all="ignore"):
        sum_x2 = _c_sum((xs * xs).T)
        av_x = np.sqrt(sum_x2 / f32(32))
        weights = av_x[:, None] + np.abs(xs)
        L, scales, mins = _make_qkx2_ref(xs, weights, NMAX, RMIN, RDELTA, NSTEP)
        scales = scales.reshape(-1, 8)
        mins = mins.reshape(-1, 8)
        max_scale = np.zeros(len(scales), np.float32)
        max_min = np.zeros(len(scales), np.float32)
        for j in range(8):
            max_scale = np.where(scales[:, j] > max_scale, scales[:, j], max_scale)
            max_min = np.where(mins[:, j] > max_min, mins[:, j], max_min)
        inv_scale = np.where(max_scale > 0, f32(63) / max_scale, f32(0)).astype(f32)
        inv_min = np.where(max_min > 0, f32(63) / max_min, f32(0)).astype(f32)
        ls = np.minimum(63, nearest_int_ref(inv_scale[:, None] * scales) & 0xFF)
        lm = np.minimum(63, nearest_int_ref(inv_min[:, None] * mins) & 0xFF)
        hd = f16_bits_ref(max_scale / f32(63))
        hm = f16_bits_ref(max_min / f32(63))
        d = (hd.view("<f2").astype(f32)[:, None] * ls.astype(f32)).reshape(-1)
        dm = (hm.view("<f2").astype(f32)[:, None] * lm.astype(f32)).reshape(-1)
        q = np.clip(nearest_int_ref((xs + dm[:, None]) / d[:, None]), 0, NMAX)
        L = np.where((d != 0)[:, None], q, L)
    n, k = xr.shape
    fields = {
        "d": hd.reshape(n, -1),
        "dmin": hm.reshape(n, -1),
        "sc": ls.astype(np.uint8).reshape(n, -1),
        "m": lm.astype(np.uint8).reshape(n, -1),
        "codes": L.astype(np.uint8).reshape(n, k),
    }
    return fields


# ---- quantize with importance weights (an imatrix row) ----------------------------------------
@lazy_njit(cache=True, error_model="numpy")
def _weighted_block(xb, qb, blk, sigma2, iscr, fscr):
    """One super-block of ggml's ``quantize_row_q4_K_impl`` (importance weights ``qb``):
        sigma2 = 2 * sum x^2 / 256;  w = qb * sqrtf(sigma2 + x^2)
        scale[s], min[s] = make_qkx3_quants(32, 15, x, w, L, &min, Laux, -0.9, 0.05, 36, false)
        sc = make_qp_quants(8, 63, scale, Ls, sw), m likewise (sw[s] = sum of w over the sub-block)
        the 12 scale bytes as ggml writes them (its codes are <= 63), d = f16(sc), dmin = f16(m),
        then the codes from the stored 6-bit scales, as the reference does."""
    L, d_block, m_block = k_weighted_scales(xb, qb, blk, iscr, fscr, 15)
    k_final_codes(xb, blk, L, d_block, m_block, 15)
    qs = blk[16:144]
    for c in range(4):
        for t in range(32):
            qs[32 * c + t] = np.uint8((L[64 * c + t] | (L[64 * c + 32 + t] << 4)) & 0xFF)


CODEC = declare(globals(), QTYPE, PLAN, chunk=CHUNK_BLOCKS // 8,
        decode_ref=k_min_ref(32), quantize_range=_quantize_range, quantize_chunk=64, encode_ref=_encode_ref,
        quantize_weighted_block=_weighted_block)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
quantize_weighted, _dequantize_range, QUANTIZE_REF_IS_NUMPY = CODEC.quantize_weighted, CODEC.dequantize_range, CODEC.quantize_ref_is_numpy
