"""Numba kernels of the CQ codec (see ``cq.py`` for the maths and the Python wrappers).

Imported lazily by ``cq`` on the first fast quantize/dequantize. Kernels take arrays and
sizes only and never raise; ``cq.quantize_hadamard``/``dequantize`` validate first, and
``cq.quantize_hadamard_ref``/``dequantize_ref`` are the numpy references the tests compare
them with, element for element.

One (row, group) step of the quantizer, G = 128:

    x   = w[row, G*g : G*(g+1)] * input_scale[G*g : ...]          (f32, as cactus)
    nrm = sqrt(pairwise_sum(x*x))                                  (f32, numpy's order)
    y   = x / max(nrm, 1e-8)                                       (f32)
    t   = FWHT(left * y)                                           (f64, Sylvester order)
    v_j = f32(t[perm_j] * right[perm_j] / sqrt(G))                 (= y @ R, R the rotation)
    idx = argmin_i |v_j - cb_i|  (f32 distances, first minimum on a tie, as numpy's argmin)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import prange
from numba import types as nt

from ._jit import lazy_njit

_RO_F32_2 = nt.Array(nt.float32, 2, "C", readonly=True)
_RO_F32 = nt.Array(nt.float32, 1, "C", readonly=True)
_RO_F64 = nt.Array(nt.float64, 1, "C", readonly=True)
_RO_I64 = nt.Array(nt.int64, 1, "C", readonly=True)
_RO_U8_2 = nt.Array(nt.uint8, 2, "C", readonly=True)
_HELPER: dict[str, Any] = dict(cache=True, boundscheck=False, no_cpython_wrapper=True, inline="always")
_KERNEL: dict[str, Any] = dict(cache=True, boundscheck=False)


@lazy_njit(nt.float32(nt.float32[::1], nt.int64), **_HELPER)
def pairwise_sum_128(a, n):
    """numpy's float32 ``add.reduce`` of ``n <= 128`` contiguous values, in its exact order:
    eight running sums over strides of 8, a fixed tree, then the remainder in sequence
    (n < 8: plain sequence). That is what makes our norms bit-identical to cactus's
    ``np.linalg.norm(group, axis=1)``."""
    if n < 8:
        res = np.float32(0.0)
        for i in range(n):
            res = res + a[i]
        return res
    r0, r1, r2, r3 = a[0], a[1], a[2], a[3]
    r4, r5, r6, r7 = a[4], a[5], a[6], a[7]
    i = 8
    top = n - (n % 8)
    while i < top:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[i]
        i += 1
    return res


@lazy_njit(nt.void(nt.float64[::1], nt.int64), **_HELPER)
def fwht(t, g):
    """In-place fast Walsh-Hadamard transform (unnormalised, Sylvester order: the same
    matrix as ``scipy.linalg.hadamard``) of ``t[:g]``, g a power of two."""
    h = 1
    while h < g:
        for s in range(0, g, 2 * h):
            for j in range(s, s + h):
                a = t[j]
                b = t[j + h]
                t[j] = a + b
                t[j + h] = a - b
        h *= 2


TIE_BAND = 1e-6
"""|v - midpoint| below which the f32 distances (numpy argmin's rule) decide the index."""


@lazy_njit(nt.void(nt.float32[::1], _RO_F32, _RO_F64, nt.uint8[::1], nt.int64), **_HELPER)
def nearest_group(v, cb, mid, out, o0):
    """out[o0 + j] = index of the codebook entry nearest to v[j], j < len(v).

    Branch-free count of the midpoints below each value (vectorized over j); only values
    within TIE_BAND of a midpoint then compare f32 distances to the candidate and its
    neighbours with numpy argmin's first-minimum rule, the same arithmetic cactus's argmin
    does on the same value."""
    g = v.shape[0]
    c = cb.shape[0]
    cnt = np.zeros(g, np.int64)
    for m in range(c - 1):
        t = mid[m]
        for j in range(g):
            cnt[j] += v[j] > t
    for j in range(g):
        k = cnt[j]
        x = v[j]
        near = False
        if k > 0 and abs(x - mid[k - 1]) < TIE_BAND:
            near = True
        if k < c - 1 and abs(x - mid[k]) < TIE_BAND:
            near = True
        if near:
            best = k
            dbest = abs(x - cb[k])
            a = k - 1 if k > 0 else 0
            b = k + 1 if k + 1 < c else c - 1
            for i in range(a, b + 1):
                d = abs(x - cb[i])
                if d < dbest or (d == dbest and i < best):
                    best = i
                    dbest = d
            k = best
        out[o0 + j] = np.uint8(k)


@lazy_njit(nt.void(_RO_F32_2, _RO_F32, _RO_F32, _RO_F32, _RO_I64, _RO_F32, _RO_F64,
                   nt.uint8[:, ::1], nt.float32[:, ::1], nt.float32[:, ::1], nt.float64[:, :, ::1]),
           parallel=True, **_KERNEL)
def quantize_hadamard_kernel(w, scale, left, right, perm, cb, mid, idx, norms, rotated, stats):
    """w f32 [N, Kp] (Kp a multiple of G = len(left)) -> idx u8 [N, Kp], norms f32 [N, Kp/G].
    ``rotated`` [N or 0, Kp]: when it has N rows the rotated unit vectors ``y @ R`` (f32) are
    stored too (the near-tie accounting reads them). ``stats`` f64 [N, Kp/G, 3] gets, per
    group, ``(sum v^2, sum v*cb[idx], sum cb[idx]^2)``: with the rotation orthogonal, the
    group's squared reconstruction error is ``n^2 A - 2 n n16 B + n16^2 C`` (``cq.py``)."""
    n, kp = w.shape
    g = left.shape[0]
    ng = kp // g
    keep = rotated.shape[0] == n
    inv_sqrt = 1.0 / math.sqrt(g)
    for row in prange(n):
        x = np.empty(g, np.float32)
        sq = np.empty(g, np.float32)
        t = np.empty(g, np.float64)
        v = np.empty(g, np.float32)
        irow = idx[row]
        for grp in range(ng):
            k0 = grp * g
            for i in range(g):
                xi = w[row, k0 + i] * scale[k0 + i]
                x[i] = xi
                sq[i] = xi * xi
            nrm = np.float32(math.sqrt(pairwise_sum_128(sq, g)))
            if nrm < np.float32(1e-8):
                nrm = np.float32(1e-8)
            norms[row, grp] = nrm
            for i in range(g):
                t[i] = left[i] * (x[i] / nrm)
            fwht(t, g)
            for j in range(g):
                p = perm[j]
                v[j] = np.float32(t[p] * right[p] * inv_sqrt)
            nearest_group(v, cb, mid, irow, k0)
            sa = 0.0
            sb = 0.0
            sc = 0.0
            for j in range(g):
                vj = np.float64(v[j])
                cj = np.float64(cb[irow[k0 + j]])
                sa += vj * vj
                sb += vj * cj
                sc += cj * cj
            stats[row, grp, 0] = sa
            stats[row, grp, 1] = sb
            stats[row, grp, 2] = sc
            if keep:
                for j in range(g):
                    rotated[row, k0 + j] = v[j]


@lazy_njit(nt.void(_RO_U8_2, _RO_F32_2, _RO_F32, _RO_F32, _RO_F32, _RO_I64, _RO_F32,
                   nt.float32[:, ::1]),
           parallel=True, **_KERNEL)
def dequantize_hadamard_kernel(idx, norms, scale, left, right, perm, cb, out):
    """out[row, k] = (cb[idx] @ R^T)[k] * norm / input_scale[k] (f32 divide), R^T applied as
    u[perm_j] = right[perm_j]*cb[idx_j]; z = FWHT(u); out = left*z/sqrt(G) (f64 inside)."""
    n, kp = idx.shape
    g = left.shape[0]
    ng = kp // g
    inv_sqrt = 1.0 / math.sqrt(g)
    for row in prange(n):
        u = np.empty(g, np.float64)
        for grp in range(ng):
            k0 = grp * g
            for j in range(g):
                p = perm[j]
                u[p] = right[p] * cb[idx[row, k0 + j]]
            fwht(u, g)
            nrm = norms[row, grp]
            for i in range(g):
                out[row, k0 + i] = np.float32(left[i] * u[i] * inv_sqrt * nrm) / scale[k0 + i]


@lazy_njit(nt.void(nt.float32[:, ::1], _RO_F32, _RO_F64, nt.uint8[:, ::1]), parallel=True, **_KERNEL)
def nearest_kernel(v, cb, mid, out):
    """out[r, j] = nearest codebook index of v[r, j] (rows in parallel; ``nearest_group``)."""
    n = v.shape[0]
    for r in prange(n):
        nearest_group(v[r], cb, mid, out[r], 0)


@lazy_njit(nt.UniTuple(nt.float64, 2)(_RO_F32_2, _RO_F32_2), parallel=True, **_KERNEL)
def sq_error_kernel(w, d):
    """(sum (w - d[:, :K])^2, sum w^2) in f64, rows in parallel (``d`` may be wider: padding)."""
    n, k = w.shape
    num = np.zeros(n, np.float64)
    den = np.zeros(n, np.float64)
    for r in prange(n):
        a = 0.0
        b = 0.0
        for j in range(k):
            x = np.float64(w[r, j])
            e = x - np.float64(d[r, j])
            a += e * e
            b += x * x
        num[r] = a
        den[r] = b
    return num.sum(), den.sum()
