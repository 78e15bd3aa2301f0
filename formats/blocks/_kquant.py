"""The scalar search routines of ggml's K-quant reference quantizers, as numba kernels.

Each runs ggml's C loop (``ggml-quants.c``) for one group of ``n`` values in the C
operation order, in f32, never contracted to an FMA (numba sets LLVM's ``contract`` flag only
with fastmath), with C's integer conversions spelled out (``int8(v)``: the low byte as signed).
They take 1-D slices and scratch arrays and never raise; the type modules' block kernels
(``q2_k``, ``q3_k``, ``q5_k``, ``q6_k``) call them per group.

* :func:`make_qx_quants` (``rmse_type = 1``, no importance weights): symmetric codes
  ``L in 0 .. 2 nmax - 1`` and the scale; Q6_K (nmax 32).
* :func:`make_q3_quants` (``do_rmse = true``): symmetric, refined by coordinate descent
  (5 passes at most); Q3_K (nmax 4).
* :func:`make_qkx2_quants`: asymmetric ``scale * L + min`` by a grid of ``nstep + 1``
  candidate scales, weighted squared (or absolute, ``use_mad``) error; Q2_K, Q5_K.
  (Q4_K has its own lane-parallel form in ``q4_k.py``.)
"""

from __future__ import annotations

import numpy as np

from .._jit import inline_jit, lazy_njit
from ._codec import k_scale_min, k_scale_put, sum_squares
from .f16 import f16_at, f16_bits_ref, f16_to_f32, f32_to_f16_bits
from .f32 import cvtt_i32_ref, f32_bits, min_max_ref

#: ggml's GROUP_MAX_EPS: a group whose largest |x| is below it is all zero
GROUP_MAX_EPS = np.float32(1e-15)
_MAGIC = np.float32(12582912.0)  # 1.5 * 2**23


@lazy_njit(inline="always")
def nearest_int(v):
    """ggml's nearest_int: the bits of ``f32(v + 1.5*2**23)`` & 0x7fffff, minus 0x400000."""
    return (np.int64(f32_bits(np.float32(v) + _MAGIC)) & 0x7FFFFF) - 0x400000


@lazy_njit(inline="always")
def int8(v):
    """C's conversion of an integer to ``int8_t``: the low byte, signed."""
    return ((np.int64(v) & 0xFF) ^ 0x80) - 0x80


@lazy_njit(inline="always")
def clamp(v, lo, hi):
    """``MAX(lo, MIN(hi, v))``."""
    v = v if v < hi else hi
    return v if v > lo else lo


@lazy_njit(cache=True, error_model="numpy")
def signed_absmax(n, x, L):
    """The first value of largest ``|x|`` (strict ``>`` from 0: a NaN never wins), or 0 after
    zeroing ``L[0:n]`` when that ``|x|`` is below GROUP_MAX_EPS (the opening of make_qx_quants
    and make_q3_quants)."""
    mx = np.float32(0)
    amax = np.float32(0)
    for i in range(n):
        ax = abs(x[i])
        if ax > amax:
            amax = ax
            mx = x[i]
    if amax < GROUP_MAX_EPS:
        for i in range(n):
            L[i] = 0
        return np.float32(0)
    return mx


@lazy_njit(cache=True, error_model="numpy")
def block_min_max(x):
    """ggml's ``if (v < min) min = v; if (v > max) max = v;`` from +-FLT_MAX (Q4_1, Q5_1)."""
    mn = FLT_MAX
    mx = -FLT_MAX
    for j in range(x.size):
        v = x[j]
        if v < mn:
            mn = v
        if v > mx:
            mx = v
    return mn, mx


#: the start of ggml's min/max scans
FLT_MAX = np.float32(3.4028234663852886e38)


#: "no importance weights" (ggml's NULL): the searches then weight by x*x
NO_WEIGHTS = np.empty(0, np.float32)


@lazy_njit(cache=True, error_model="numpy")
def _first_pass(n, nmax, x, L, qw, bias):
    """The opening make_qx_quants and make_q3_quants share: ``iscale = -nmax / max`` (the signed
    absmax), ``L = clamp(nearest_int(iscale * x), -nmax, nmax-1) + bias`` and the sums
    ``sum w*x*l``, ``sum w*l*l`` in ggml's order (``w = qw``, or ``x*x`` when ``qw`` is empty).
    Returns ``(max, sumlx, suml2)``; ``max`` 0: every |x| is below GROUP_MAX_EPS, ``L`` all 0."""
    f32 = np.float32
    mx = signed_absmax(n, x, L)
    if mx == f32(0):
        return f32(0), f32(0), f32(0)
    iscale = f32(-nmax) / mx
    sumlx = f32(0)
    suml2 = f32(0)
    for i in range(n):
        l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1)
        L[i] = l + bias
        w = qw[i] if qw.size else x[i] * x[i]
        fl = f32(l)
        sumlx = sumlx + w * x[i] * fl
        suml2 = suml2 + w * fl * fl
    return mx, sumlx, suml2


@lazy_njit(cache=True, error_model="numpy")
def make_qx_quants(n, nmax, x, L, qw):
    """``make_qx_quants(n, nmax, x, L, rmse_type=1, qw)``: writes ``L[0:n]`` (0 .. 2nmax-1),
    returns the scale. Weights: ``qw[i]`` (importance), or ``x*x`` when ``qw`` is empty (NULL)."""
    f32 = np.float32
    mx, sumlx, suml2 = _first_pass(n, nmax, x, L, qw, nmax)
    if mx == f32(0):  # all |x| below GROUP_MAX_EPS: L = 0, scale 0
        return f32(0)
    scale = sumlx / suml2 if suml2 != f32(0) else f32(0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(f32(nmax) + f32(0.1) * f32(step)) / mx
        sumlx = f32(0)
        suml2 = f32(0)
        for i in range(n):
            fl = f32(clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1))
            w = qw[i] if qw.size else x[i] * x[i]
            sumlx = sumlx + w * x[i] * fl
            suml2 = suml2 + w * fl * fl
        if suml2 > f32(0) and sumlx * sumlx > best * suml2:
            for i in range(n):
                L[i] = nmax + clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1)
            scale = sumlx / suml2
            best = scale * sumlx
    return scale


@lazy_njit(cache=True, error_model="numpy")
def make_qx_quants_lanes(xt, nl, nmax, scale, L):
    """:func:`make_qx_quants` without importance weights (``w = x*x``) for ``nl`` groups side
    by side: lane ``l`` runs ggml's scalar loop on ``xt[:, l]`` (``n = xt.shape[0]`` values) in
    ggml's order, every float operation as there, so each lane's result is bit-identical while
    the work is SIMD across lanes. Writes ``scale[l]`` and the codes ``L[e, l]`` (0 .. 2nmax-1).

    A candidate step's codes are not stored when it wins: they are ``clamp(nearest_int(iscale *
    x), -nmax, nmax-1)`` of the winning ``iscale``, recomputed once at the end."""
    f32 = np.float32
    n = xt.shape[0]
    mx = np.zeros(nl, f32)
    amax = np.zeros(nl, f32)
    for e in range(n):  # signed_absmax: the first value of largest |x| (strict >: a NaN never wins)
        row = xt[e]
        for l in range(nl):
            a = abs(row[l])
            upd = a > amax[l]
            amax[l] = a if upd else amax[l]
            mx[l] = row[l] if upd else mx[l]
    live = np.empty(nl, np.bool_)
    for l in range(nl):
        live[l] = amax[l] >= GROUP_MAX_EPS
        mx[l] = mx[l] if live[l] else f32(1)  # a dead lane computes harmlessly, its result is 0
    iscale = np.empty(nl, f32)
    best_is = np.empty(nl, f32)
    best = np.empty(nl, f32)
    sumlx = np.empty(nl, f32)
    suml2 = np.empty(nl, f32)
    lo, hi = -nmax, nmax - 1
    for step in range(-10, 10):  # -10: the first pass at -nmax/max; then -9..9 without 0
        if step == 0:
            continue
        for l in range(nl):
            iscale[l] = f32(-nmax) / mx[l] if step == -10 else -(f32(nmax) + f32(0.1) * f32(step)) / mx[l]
            sumlx[l] = f32(0)
            suml2[l] = f32(0)
        for e in range(n):
            row = xt[e]
            for l in range(nl):
                v = row[l]
                fl = f32(clamp(nearest_int(iscale[l] * v), lo, hi))
                w = v * v
                sumlx[l] = sumlx[l] + w * v * fl
                suml2[l] = suml2[l] + w * fl * fl
        for l in range(nl):
            if step == -10:
                scale[l] = sumlx[l] / suml2[l] if suml2[l] != f32(0) else f32(0)
                best[l] = scale[l] * sumlx[l]
                best_is[l] = iscale[l]
            elif suml2[l] > f32(0) and sumlx[l] * sumlx[l] > best[l] * suml2[l]:
                scale[l] = sumlx[l] / suml2[l]
                best[l] = scale[l] * sumlx[l]
                best_is[l] = iscale[l]
    for e in range(n):
        row = xt[e]
        le = L[e]
        for l in range(nl):
            le[l] = (nmax + clamp(nearest_int(best_is[l] * row[l]), lo, hi)) if live[l] else 0
    for l in range(nl):
        scale[l] = scale[l] if live[l] else f32(0)


@lazy_njit(cache=True, error_model="numpy")
def make_q3_quants(n, nmax, x, L):
    """``make_q3_quants(n, nmax, x, L, do_rmse=true)``: writes ``L[0:n]`` (0 .. 2nmax-1),
    returns the scale."""
    f32 = np.float32
    mx, sumlx, suml2 = _first_pass(n, nmax, x, L, NO_WEIGHTS, 0)
    if mx == f32(0):  # all |x| below GROUP_MAX_EPS: L = 0, scale 0
        return f32(0)
    for _ in range(5):
        changed = 0
        for i in range(n):
            w = x[i] * x[i]
            slx = sumlx - w * x[i] * f32(L[i])
            if slx > f32(0):
                sl2 = suml2 - w * f32(L[i]) * f32(L[i])
                new_l = clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1)
                if new_l != L[i]:
                    slx = slx + w * x[i] * f32(new_l)
                    sl2 = sl2 + w * f32(new_l) * f32(new_l)
                    if sl2 > f32(0) and slx * slx * suml2 > sumlx * sumlx * sl2:
                        L[i] = new_l
                        sumlx = slx
                        suml2 = sl2
                        changed += 1
        if changed == 0:
            break
    for i in range(n):
        L[i] += nmax
    return sumlx / suml2 if suml2 > f32(0) else f32(0)


@lazy_njit(cache=True, error_model="numpy")
def make_qkx_quants(n, nmax, x, weights, L, Laux, rmin, rdelta, nstep, use_mad, flat_le):
    """ggml's ``make_qkx2_quants`` (``flat_le`` false) and ``make_qkx3_quants`` (``flat_le``
    true, weights given): writes ``L[0:n]`` (0 .. nmax), returns ``(scale, the_min)``
    (``the_min`` is ggml's ``*the_min``, i.e. minus the offset). The two differ only in the
    flat test: ``max == min`` (qkx2) or ``max <= min`` (qkx3)."""
    f32 = np.float32
    mn = x[0]
    mx = x[0]
    sum_w = weights[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        w = weights[i]
        sum_w = sum_w + w
        sum_x = sum_x + w * x[i]
    if mn > f32(0):
        mn = f32(0)
    if (mx <= mn) if flat_le else (mx == mn):
        for i in range(n):
            L[i] = 0
        return f32(0), -mn
    iscale = f32(nmax) / (mx - mn)
    scale = f32(1) / iscale
    best_error = f32(0)
    for i in range(n):
        L[i] = clamp(nearest_int(iscale * (x[i] - mn)), 0, nmax)
        diff = scale * f32(L[i]) + mn - x[i]
        diff = abs(diff) if use_mad else diff * diff
        best_error = best_error + weights[i] * diff
    for step in range(nstep + 1):
        iscale = (rmin + rdelta * f32(step) + f32(nmax)) / (mx - mn)
        sum_l = f32(0)
        sum_l2 = f32(0)
        sum_xl = f32(0)
        for i in range(n):
            l = clamp(nearest_int(iscale * (x[i] - mn)), 0, nmax)
            Laux[i] = l
            w = weights[i]
            fl = f32(l)
            sum_l = sum_l + w * fl
            sum_l2 = sum_l2 + w * fl * fl
            sum_xl = sum_xl + w * fl * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > f32(0):
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > f32(0):
                this_min = f32(0)
                this_scale = sum_xl / sum_l2
            cur_error = f32(0)
            for i in range(n):
                diff = this_scale * f32(Laux[i]) + this_min - x[i]
                diff = abs(diff) if use_mad else diff * diff
                cur_error = cur_error + weights[i] * diff
            if cur_error < best_error:
                for i in range(n):
                    L[i] = Laux[i]
                best_error = cur_error
                scale = this_scale
                mn = this_min
    return scale, -mn


@lazy_njit(cache=True, error_model="numpy")
def make_qkx2_quants(n, nmax, x, weights, L, Laux, rmin, rdelta, nstep, use_mad):
    """``make_qkx2_quants`` (see :func:`make_qkx_quants`)."""
    return make_qkx_quants(n, nmax, x, weights, L, Laux, rmin, rdelta, nstep, use_mad, False)


@lazy_njit(cache=True, error_model="numpy")
def make_qkx3_quants(n, nmax, x, weights, L, Laux, rmin, rdelta, nstep, use_mad):
    """``make_qkx3_quants`` with weights (see :func:`make_qkx_quants`)."""
    return make_qkx_quants(n, nmax, x, weights, L, Laux, rmin, rdelta, nstep, use_mad, True)


#: make_qkx3_quants' grid in every ``_impl`` quantizer: rmin -0.9, rdelta 0.05, 36 steps
RMIN3 = np.float32(-0.9)
RDELTA3 = np.float32(0.05)


@lazy_njit(cache=True, error_model="numpy")
def importance_weights(qw, x, sigma2, w):
    """``w[i] = qw[i] * sqrtf(sigma2 + x[i]*x[i])`` (the imatrix weighting of every ``_impl``
    quantizer); returns ``sum w`` in order (their ``sumw``)."""
    for i in range(x.size):
        w[i] = qw[i] * np.sqrt(sigma2 + x[i] * x[i])
    s = np.float32(0)
    for i in range(x.size):
        s = s + w[i]
    return s


@lazy_njit(cache=True, error_model="numpy")
def kx3_sub_blocks(xb, qb, L, laux, w, sw, scales, mins, nmax):
    """The sub-block search of ggml's ``quantize_row_q4_K_impl`` / ``q5_K_impl`` for one
    super-block: sigma2 = 2 * sum x^2 / 256, each sub-block's importance weights,
    ``make_qkx3_quants(32, nmax, ..., -0.9, 0.05, 36, false)``; fills ``scales``, ``mins``,
    ``sw`` (the sub-blocks' weight sums) and ``L``."""
    sigma2 = np.float32(2) * sum_squares(xb) / np.float32(256)
    for j in range(8):
        xs = xb[32 * j:32 * j + 32]
        sw[j] = importance_weights(qb[32 * j:32 * j + 32], xs, sigma2, w)
        sc, mn = make_qkx_quants(32, nmax, xs, w, L[32 * j:32 * j + 32], laux, RMIN3, RDELTA3, 36, False, True)
        scales[j] = sc
        mins[j] = mn


@lazy_njit(cache=True, error_model="numpy")
def make_qp_quants(n, nmax, x, L, qw):
    """``make_qp_quants(n, nmax, x, L, quant_weights)``: positive values (the sub-block scales
    or mins) to codes ``L`` (uint8: the low byte), returns the scale."""
    f32 = np.float32
    mx = f32(0)
    for i in range(n):
        mx = mx if mx > x[i] else x[i]  # MAX(max, x[i])
    if mx < GROUP_MAX_EPS:
        for i in range(n):
            L[i] = 0
        return f32(0)
    iscale = f32(nmax) / mx
    for i in range(n):
        L[i] = nearest_int(iscale * x[i]) & 0xFF
    scale = f32(1) / iscale
    best_mse = f32(0)
    for i in range(n):
        diff = x[i] - scale * f32(L[i])
        best_mse = best_mse + qw[i] * diff * diff
    for step in range(-4, 5):
        if step == 0:
            continue
        iscale_is = (f32(0.1) * f32(step) + f32(nmax)) / mx
        scale_is = f32(1) / iscale_is
        mse = f32(0)
        for i in range(n):
            l = min(nmax, nearest_int(iscale_is * x[i]))
            diff = x[i] - scale_is * f32(l)
            mse = mse + qw[i] * diff * diff
        if mse < best_mse:
            best_mse = mse
            iscale = iscale_is
    sumlx = f32(0)
    suml2 = f32(0)
    for i in range(n):
        l = min(nmax, nearest_int(iscale * x[i]))
        L[i] = l & 0xFF
        w = qw[i]
        sumlx = sumlx + w * x[i] * f32(l)
        suml2 = suml2 + w * f32(l) * f32(l)
    for _ in range(5):
        changed = 0
        for i in range(n):
            w = qw[i]
            li = f32(L[i])
            slx = sumlx - w * x[i] * li
            sl2 = suml2 - w * li * li
            if slx > f32(0) and sl2 > f32(0):
                new_l = min(nmax, nearest_int(x[i] * sl2 / slx))
                if new_l != L[i]:
                    slx = slx + w * x[i] * f32(new_l)
                    sl2 = sl2 + w * f32(new_l) * f32(new_l)
                    if slx * slx * suml2 > sumlx * sumlx * sl2:
                        L[i] = new_l & 0xFF
                        sumlx = slx
                        suml2 = sl2
                        changed += 1
        if changed == 0:
            break
    return sumlx / suml2 if suml2 > f32(0) else f32(0)


# ---- byte helpers of the block writers --------------------------------------------------------
@lazy_njit(inline="always")
def put_f16(blk, o, h):
    """The f16 bits ``h`` as the little-endian word at byte ``o``."""
    blk[o] = np.uint8(h & 0xFF)
    blk[o + 1] = np.uint8((h >> 8) & 0xFF)


@lazy_njit(inline="always")
def put_q4(blk, o, L):
    """32 four-bit codes ``L`` as Q4_0/Q4_1 store them at ``o``: ``qs[j] = L[j] | L[j+16] << 4``."""
    for j in range(16):
        blk[o + j] = np.uint8((L[j] | (L[j + 16] << 4)) & 0xFF)


@lazy_njit(cache=True, error_model="numpy")
def put_q5(blk, o_qh, o_qs, L):
    """32 five-bit codes ``L`` (their low byte) as Q5_0/Q5_1 store them: ``qs[j] = L[j] & 15 |
    (L[j+16] & 15) << 4`` at ``o_qs``, bit 4 of ``L[e]`` as bit ``e`` of the LE u32 at ``o_qh``."""
    qh = np.int64(0)
    for j in range(16):
        u0 = np.int64(L[j]) & 0xFF
        u1 = np.int64(L[j + 16]) & 0xFF
        blk[o_qs + j] = np.uint8((u0 & 15) | ((u1 & 15) << 4))
        qh |= ((u0 >> 4) & 1) << j
        qh |= ((u1 >> 4) & 1) << (j + 16)
    for b in range(4):
        blk[o_qh + b] = np.uint8((qh >> (8 * b)) & 0xFF)



@lazy_njit(inline="always")
def u32_at(blk, o):
    """The little-endian u32 at byte ``o`` of ``blk``, as int32 bits."""
    return np.int32(np.int64(blk[o]) | (np.int64(blk[o + 1]) << 8) | (np.int64(blk[o + 2]) << 16)
                    | (np.int64(blk[o + 3]) << 24))


@inline_jit
def q5_code(nibble, qh, j):
    """A Q5_0/Q5_1 code as :func:`put_q5` stores it: its ``nibble`` from ``qs``, and bit ``j``
    of ``qh`` (the block's qh word, shifted right 16 for the second half) as bit 4. int32
    throughout (numba widens integer arithmetic to int64 unless told)."""
    return np.int32(np.int32(nibble) | np.int32((np.int32(qh >> np.int32(j)) & np.int32(1)) << np.int32(4)))


@lazy_njit(cache=True, error_model="numpy")
def k_final_codes(xb, blk, L, d, dmin, nmax):
    """The tail ggml's Q4_K and Q5_K quantizers share, once the 12 scale bytes are stored: store
    ``d`` and ``dmin`` as f16 (bytes 0..3), then each sub-block's codes from the stored values,
    ``L = clamp(nearest_int((x + dm) / dd), 0, nmax)`` with ``dd = f16(d) * sc`` and ``dm =
    f16(dmin) * m``; a sub-block whose ``dd`` is 0 keeps the codes ``L`` holds."""
    hd = f32_to_f16_bits(d)
    hm = f32_to_f16_bits(dmin)
    put_f16(blk, 0, hd)
    put_f16(blk, 2, hm)
    fd = f16_to_f32(hd)
    fm = f16_to_f32(hm)
    for j in range(8):
        sc, m = k_scale_min(blk, j)
        dd = fd * np.float32(sc)
        if dd == np.float32(0):
            continue
        dm = fm * np.float32(m)
        for e in range(32 * j, 32 * j + 32):
            L[e] = clamp(nearest_int((xb[e] + dm) / dd), 0, nmax)


@inline_jit
def k_min_block(blk, yb, qk, o_qs, o_qh):
    """Dequantize one Q4_K (``o_qh`` = -1) or Q5_K block: sub-block ``s`` is ``d*sc[s] * q -
    dmin*m[s]``, ``q`` the nibble ``s & 1`` of the 32 bytes at ``o_qs + 32*(s >> 1)``, plus, for
    Q5_K, bit ``s`` of the 32 bytes at ``o_qh`` as bit 4. ``qk >> 3`` (32) is the sub-block
    loop's trip count at run time, so LLVM vectorizes it."""
    sub = qk >> 3
    d = f16_at(blk, 0)
    dmin = f16_at(blk, 2)
    for s in range(8):
        sc, m = k_scale_min(blk, s)
        ds = d * np.float32(sc)
        ms = dmin * np.float32(m)
        ql = blk[o_qs + 32 * (s >> 1):o_qs + 32 * (s >> 1) + 32]
        ys = yb[32 * s:32 * s + 32]
        sh = 4 * (s & 1)
        if o_qh < 0:
            for j in range(sub):
                ys[j] = ds * np.float32((np.int32(ql[j]) >> sh) & 15) - ms
        else:
            qh = blk[o_qh:o_qh + 32]
            for j in range(sub):
                ys[j] = ds * np.float32(((np.int32(ql[j]) >> sh) & 15) | (((np.int32(qh[j]) >> s) & 1) << 4)) - ms


@lazy_njit(inline="always")
def put_q2(blk, o, L):
    """256 two-bit codes ``L`` as Q2_K and Q3_K store their low bits: byte ``l`` of the 32 at
    ``o + 32c`` holds ``L[128c + l + 32k]`` in bits ``2k..2k+1``, k = 0..3."""
    for c in range(2):
        qs = blk[o + 32 * c:o + 32 * c + 32]
        Lc = L[128 * c:128 * c + 128]
        for l in range(32):
            qs[l] = np.uint8((Lc[l] | (Lc[l + 32] << 2) | (Lc[l + 64] << 4) | (Lc[l + 96] << 6)) & 0xFF)


@lazy_njit(cache=True)
def store_lanes(out, first, nl, type_size, d, qs):
    """Store ``nl`` blocks of a one-scale type from the lanes of a side-by-side quantizer (the
    inverse of ``_codec.load_lanes``): block ``first + l`` gets ``f16(d[l])`` at bytes 0..1, then
    the bytes ``qs[j, l]`` at ``2 + j``."""
    for l in range(nl):
        o = (first + l) * type_size
        dst = out[o:o + type_size]
        put_f16(dst, 0, f32_to_f16_bits(d[l]))
        for j in range(qs.shape[0]):
            dst[2 + j] = np.uint8(qs[j, l])


# ---- the importance-weighted 32-element blocks: the search and the stored scales ---------------
@lazy_njit(cache=True, error_model="numpy")
def weighted_scale(xb, qb, blk, sigma2, iscr, fscr, nmax):
    """The head of ggml's ``quantize_row_q4_0_impl`` / ``q5_0_impl``: ``w = qb * sqrtf(sigma2 +
    x^2)``, ``d = make_qx_quants(32, nmax, x, L, rmse_type=1, w)`` stored as f16 at byte 0;
    returns the codes ``L`` (the caller packs them)."""
    L, w = iscr[0, :32], fscr[0]
    importance_weights(qb, xb, sigma2, w)
    put_f16(blk, 0, f32_to_f16_bits(make_qx_quants(32, nmax, xb, L, w)))
    return L


@lazy_njit(cache=True, error_model="numpy")
def weighted_scale_min(xb, qb, blk, sigma2, iscr, fscr, nmax):
    """The head of ggml's ``quantize_row_q4_1_impl`` / ``q5_1_impl``: the weights as
    :func:`weighted_scale`, ``d, min = make_qkx3_quants(32, nmax, x, w, L, &min, Laux, -0.9,
    0.05, 36, false)``, stored ``f16(d)`` at byte 0 and ``f16(-min)`` at 2; returns ``L``."""
    L, laux, w = iscr[0, :32], iscr[1, :32], fscr[0]
    importance_weights(qb, xb, sigma2, w)
    d, mn = make_qkx3_quants(32, nmax, xb, w, L, laux, RMIN3, RDELTA3, 36, False)
    put_f16(blk, 0, f32_to_f16_bits(d))
    put_f16(blk, 2, f32_to_f16_bits(-mn))
    return L


@lazy_njit(cache=True, error_model="numpy")
def k_weighted_scales(xb, qb, blk, iscr, fscr, nmax):
    """The head ggml's ``quantize_row_q4_K_impl`` and ``q5_K_impl`` share: the sub-block
    searches (:func:`kx3_sub_blocks`, codes up to ``nmax``), ``d = make_qp_quants(8, 63, scale,
    Ls, sw)`` and ``dmin`` likewise, the 6-bit ``Ls``/``Lm`` stored in the 12 scale bytes.
    Returns ``(L, d, dmin)``: the codes so far and the two super-block scales."""
    L, laux, ls, lm = iscr[0], iscr[1], iscr[2, :8], iscr[3, :8]
    w, sw, scales, mins = fscr[0], fscr[1, :8], fscr[2, :8], fscr[3, :8]
    kx3_sub_blocks(xb, qb, L, laux, w, sw, scales, mins, nmax)
    d = make_qp_quants(8, 63, scales, ls, sw)
    dmin = make_qp_quants(8, 63, mins, lm, sw)
    for j in range(8):  # make_qp_quants' codes are <= 63: the MIN(63, ...) of q5_K_impl is a no-op
        k_scale_put(blk, j, min(63, ls[j] & 0xFF), min(63, lm[j] & 0xFF))
    return L, d, dmin


@lazy_njit(inline="always")
def positive_max(v):
    """ggml's ``max = 0; for (...) if (v[j] > max) max = v[j];``: the largest value above 0, or 0."""
    m = np.float32(0)
    for j in range(v.size):
        if v[j] > m:
            m = v[j]
    return m


def f16_fields(n: int, k: int, codes: np.ndarray, **scales: np.ndarray) -> dict[str, np.ndarray]:
    """numpy: a 32-element type's bit fields from its f32 scales (stored as ggml's f16, one per
    block) and its codes: what the ``_encode_ref`` references return."""
    out = {name: f16_bits_ref(v).reshape(n, -1) for name, v in scales.items()}
    out["codes"] = codes.astype(np.uint8).reshape(n, k)
    return out


@inline_jit
def min_scale_head(xb, blk, nmax):
    """The opening of ggml's ``quantize_row_q4_1_ref`` / ``q5_1_ref``: min and max of the block
    (:func:`block_min_max`), ``d = (max - min) / nmax``, ``id = d ? 1/d : 0``; stores ``f16(d)``
    at byte 0 and ``f16(min)`` at 2; returns ``(min, id)``."""
    mn, mx = block_min_max(xb)
    d = (mx - mn) / np.float32(nmax)
    idv = np.float32(1) / d if d != np.float32(0) else np.float32(0)
    put_f16(blk, 0, f32_to_f16_bits(d))
    put_f16(blk, 2, f32_to_f16_bits(mn))
    return mn, idv


def min_scale_ref(xr: np.ndarray, nmax: int):
    """numpy twin of :func:`min_scale_head` over all blocks of ``xr``: ``(min, d, t)`` with ``t =
    (int32)((x - min) * id + 0.5f)`` (C's truncation), each type clamping and packing ``t``."""
    xb = xr.reshape(-1, 32)
    mn, mx = min_max_ref(xb)
    with np.errstate(all="ignore"):
        d = (mx - mn) / np.float32(nmax)
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        t = cvtt_i32_ref((xb - mn[:, None]) * idv[:, None] + np.float32(0.5))
    return mn, d, t
