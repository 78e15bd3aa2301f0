"""The CQ codec (cactus's 1-4-bit rotation + codebook quantization), without torch or scipy.

A weight matrix ``w`` ``[N, K]`` becomes, per (row, group of G = 128 consecutive K):

1. ``K`` zero-padded to ``Kp``, a multiple of G; ``x = w * input_scale`` (1 when uncalibrated);
2. ``norm = ||x||_2`` over the group (f32, in numpy's summation order; stored as f16);
3. ``v = (x / norm) @ R`` with ``R = (diag(left) . H/sqrt(G) . diag(right))[:, perm]``,
   ``H`` the Sylvester Hadamard matrix, ``left``/``right`` random signs, ``perm`` a random
   permutation of G (see :func:`hadamard_components`);
4. ``idx = argmin_i |v - cb_i|`` in the 2^n-entry codebook ``cb`` (:func:`codebook`).

Dequantization: ``w' = (cb[idx] @ R^T) * norm / input_scale``.

The **orthogonal** variant (cactus uses it for token embeddings and the output head) takes
the whole row as one group (``G = K``, one norm per row, CQ4) and a dense K x K orthogonal
rotation stored in the file. Ours is :func:`orthogonal_rotation` (a signed, permuted DCT-II,
rounded to f16); readers take the rotation from the file and need no RNG.

What is computed exactly as cactus does (bit-identical, tested against cactus-compute): the
codebook (f32), the signs and permutation (torch's CPU generator reproduced with numpy's
MT19937), the padding, the input scale, the norms (f32 then f16). What is not: cactus
rotates with a float32 BLAS matrix product, we with an exact-order fast Walsh-Hadamard
transform in f64. The two rotated values differ by at most a few f32 ulps
(``|v_ours - v_cactus| <= ROTATION_TOL``), so an index can differ only where ``v`` lies
within that distance of a decision midpoint: :func:`near_ties` counts those places.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from .errors import BadInputError

GROUP = 128
"""cactus's CQ group size (K values per norm and per rotation block)."""
DEFAULT_SEED = 1234
"""cactus's default rotation seed."""
BITS = (1, 2, 3, 4)
SEED_STRIDE = 17
"""The generator is seeded with ``seed + 17 * group_dim`` (cactus's convention)."""
NORM_FLOOR = 1e-8
ROTATION_TOL = 1e-6
"""Bound on |our rotated value - cactus's| for unit-norm groups. Cactus's float32 product of
G = 128 terms ``y_i * R_ij`` (|R_ij| = 1/sqrt(G), sum |y_i| <= sqrt(G)) has a worst-case error
of about G * 2^-24 * sum|y_i R_ij| <= 7.6e-6, typically ~sqrt(G) * 2^-24 ~ 1e-7; measured at
most 1.8e-7 on random matrices. 1e-6 is the tie band we count and test against."""
CODEBOOK_GRID = 200_001
CODEBOOK_ITERS = 200


# ---- the random signs and permutation (torch's CPU generator, reproduced) ------------------

def mt_draws(seed: int, count: int) -> np.ndarray:
    """The first ``count`` 32-bit outputs of MT19937 seeded the way torch's CPU generator is
    (``manual_seed(s)`` = the reference ``init_genrand(s)``, which is numpy's legacy seeding)."""
    bg = np.random.MT19937(0)
    bg._legacy_seeding(int(seed) & 0xFFFFFFFF)
    return bg.random_raw(count).astype(np.uint64)


@functools.lru_cache(maxsize=64)
def hadamard_components(group: int = GROUP, seed: int = DEFAULT_SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(left i8[G], right i8[G], perm u32[G])`` exactly as cactus draws them with
    ``torch.Generator().manual_seed(seed + 17*G)``: ``randint(0, 2, (G,))`` twice (each element
    one 32-bit draw mod 2; sign = 2*bit - 1), then ``randperm(G)``, Fisher-Yates
    ``for i in 0..G-2: swap(a[i], a[i + draw % (G - i)])`` on the next G - 1 draws."""
    d = mt_draws(seed + SEED_STRIDE * group, 3 * group - 1)
    left = (2 * (d[:group] % 2).astype(np.int64) - 1).astype(np.int8)
    right = (2 * (d[group:2 * group] % 2).astype(np.int64) - 1).astype(np.int8)
    perm = np.arange(group, dtype=np.int64)
    draws = d[2 * group:]
    for i in range(group - 1):
        j = i + int(draws[i] % np.uint64(group - i))
        perm[i], perm[j] = perm[j], perm[i]
    for a in (left, right, perm):
        a.setflags(write=False)
    out = perm.astype(np.uint32)
    out.setflags(write=False)
    return left, right, out


def sylvester(g: int) -> np.ndarray:
    """The g x g Sylvester Hadamard matrix (entries +-1), g a power of two:
    ``H[i, j] = (-1)^popcount(i & j)`` (the same matrix as ``scipy.linalg.hadamard``)."""
    if g < 1 or g & (g - 1):
        raise BadInputError(f"Hadamard size {g} is not a power of two")
    i = np.arange(g, dtype=np.uint32)
    bits = np.bitwise_and(i[:, None], i[None, :])
    pop = np.zeros_like(bits)
    while bits.any():
        pop += bits & 1
        bits >>= 1
    return np.where(pop % 2 == 0, 1.0, -1.0).astype(np.float32)


def hadamard_rotation(group: int = GROUP, seed: int = DEFAULT_SEED) -> np.ndarray:
    """The dense rotation ``R = (diag(left) H/sqrt(G) diag(right))[:, perm]`` in f32 (what
    cactus builds; we use it in references and tests, the kernels use the FWHT)."""
    left, right, perm = hadamard_components(group, seed)
    base = sylvester(group) / np.float32(math.sqrt(group))
    return (left.astype(np.float32)[:, None] * base * right.astype(np.float32)[None, :])[:, perm.astype(np.int64)]


# ---- the codebook (Lloyd-Max for the coordinate density of a random unit vector) -----------

def _log_density_constant(d: int) -> float:
    return math.lgamma(d / 2.0) - 0.5 * math.log(math.pi) - math.lgamma((d - 1.0) / 2.0)


@functools.lru_cache(maxsize=64)
def codebook(group_dim: int, bits: int) -> np.ndarray:
    """The 2^bits Lloyd-Max centroids (ascending, f32) for the density of one coordinate of a
    uniformly random unit vector in R^d: ``p(x) ∝ (1 - x^2)^((d-3)/2)`` on [-1, 1].

    Deterministic, computed as cactus does it: the density on a 200001-point grid, start at
    its 2^bits quantiles (linear interpolation of the cumulative sum), then at most 200
    Lloyd steps (each cell's density-weighted mean; cells ``[b_i, b_{i+1})``, the last one
    closed), stopping when no centroid moves by 1e-8. Contiguous grid slices take the place
    of cactus's boolean masks (the same elements in the same order, so the same sums)."""
    if bits not in BITS:
        raise BadInputError(f"CQ bits must be one of {BITS}, got {bits}")
    if group_dim < 4:
        raise BadInputError(f"CQ group size must be at least 4, got {group_dim}")
    c = 1 << bits
    grid = np.linspace(-1.0, 1.0, CODEBOOK_GRID, dtype=np.float64)
    weights = math.exp(_log_density_constant(group_dim)) * np.power(
        np.clip(1.0 - grid * grid, 0.0, None), (group_dim - 3.0) / 2.0)
    quantiles = np.linspace(0.0, 1.0, c + 2, dtype=np.float64)[1:-1]
    cum = np.cumsum(weights)
    cum /= cum[-1]
    cent = np.sort(np.clip(np.interp(quantiles, cum, grid), -1.0, 1.0))
    n = grid.shape[0]
    for _ in range(CODEBOOK_ITERS):
        bounds = np.concatenate(([-1.0], (cent[:-1] + cent[1:]) / 2.0, [1.0]))
        lo = np.searchsorted(grid, bounds[:-1], side="left")  # first grid >= b_i
        hi = np.searchsorted(grid, bounds[1:], side="left")   # first grid >= b_{i+1}
        hi[-1] = n                                             # the last cell includes 1.0
        upd = cent.copy()
        for i in range(c):
            ws = weights[lo[i]:hi[i]]
            s = ws.sum()
            if s > 0:
                upd[i] = float((grid[lo[i]:hi[i]] * ws).sum() / s)
        if np.max(np.abs(upd - cent)) < 1e-8:
            cent = upd
            break
        cent = np.sort(np.clip(upd, -1.0, 1.0))
    out = cent.astype(np.float32)
    out.setflags(write=False)
    return out


def midpoints(cb: np.ndarray) -> np.ndarray:
    """Decision thresholds between neighbouring centroids (f64)."""
    c = cb.astype(np.float64)
    return (c[:-1] + c[1:]) / 2.0


# ---- the orthogonal rotation (ours) ----------------------------------------------------------

@functools.lru_cache(maxsize=16)
def orthogonal_rotation(k: int, seed: int = DEFAULT_SEED) -> np.ndarray:
    """Our deterministic K x K rotation for the orthogonal variant, f16-representable f32:

        R = (diag(s1) . C^T . diag(s2))[:, perm],   C[j, i] = a_j cos(pi (2i + 1) j / (2K))

    ``C`` the orthonormal DCT-II (``a_0 = sqrt(1/K)``, else ``sqrt(2/K)``), ``s1``, ``s2``, ``perm``
    drawn like :func:`hadamard_components` with group size K (seed ``seed + 17K``). It is
    orthogonal for every K (not only powers of two), dense (entries ~ sqrt(2/K), so outlier
    rows are spread like the Hadamard rotation spreads them), closed-form (no QR, no BLAS:
    the same bits on every machine), and rounded to f16 because the file stores it as f16 and
    the reader rotates back with the stored matrix; quantizing with the same rounded matrix
    keeps writer and reader consistent."""
    if k < 4:
        raise BadInputError(f"orthogonal CQ needs K >= 4, got {k}")
    s1, s2, perm = hadamard_components(k, seed)
    i = np.arange(k, dtype=np.float64)
    c = np.cos(np.pi * (2.0 * i[None, :] + 1.0) * i[:, None] / (2.0 * k))
    c *= np.where(i == 0, math.sqrt(1.0 / k), math.sqrt(2.0 / k))[:, None]
    r = (s1.astype(np.float64)[:, None] * c.T * s2.astype(np.float64)[None, :])[:, perm.astype(np.int64)]
    out = r.astype(np.float16).astype(np.float32)
    out.setflags(write=False)
    return out


# ---- the quantized tensor ------------------------------------------------------------------

@dataclass(frozen=True)
class CQTensor:
    """What a CQ file holds, before packing.

    ``indices`` u8 ``[N, Kp]`` (codebook indices), ``norms`` f16 ``[N, Kp/G]``, ``input_scale``
    f16 ``[Kp]``; ``rotation`` is ``"hadamard"`` (``seed`` gives the signs and permutation) or
    ``"orthogonal"`` (``matrix`` is the K x K rotation, ``group == K``). ``k`` is the source K
    before padding."""

    indices: np.ndarray
    norms: np.ndarray
    input_scale: np.ndarray
    bits: int
    group: int = GROUP
    rotation: str = "hadamard"
    seed: int = DEFAULT_SEED
    k: int = 0
    matrix: Optional[np.ndarray] = None
    signs: Optional[tuple] = None
    """Explicit ``(left, right, perm)`` (a file read back); None: drawn from ``seed``."""
    error_stats: Optional[tuple] = field(default=None, repr=False, compare=False)
    """``(norms f32, sums f64 [N, groups, 3])`` from the quantizer (see hadamard_relative_rmse)."""

    @property
    def n(self) -> int:
        return int(self.indices.shape[0])

    @property
    def kp(self) -> int:
        return int(self.indices.shape[1])

    @property
    def groups(self) -> int:
        return self.kp // self.group

    def codebook(self) -> np.ndarray:
        return codebook(self.group, self.bits)

    def components(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(left i8, right i8, perm u32)`` of the Hadamard rotation."""
        return self.signs if self.signs is not None else hadamard_components(self.group, self.seed)

    def rotation_matrix(self) -> np.ndarray:
        if self.rotation == "orthogonal":
            assert self.matrix is not None
            return self.matrix
        left, right, perm = self.components()
        base = sylvester(self.group) / np.float32(math.sqrt(self.group))
        return (left.astype(np.float32)[:, None] * base * right.astype(np.float32)[None, :])[:, perm.astype(np.int64)]

    def with_norms_scaled(self, factor: float) -> "CQTensor":
        if factor == 1.0:
            return self
        return replace(self, norms=(self.norms.astype(np.float32) * np.float32(factor)).astype(np.float16),
                       error_stats=None)


def _as_matrix(w) -> np.ndarray:
    a = np.asarray(w)
    if a.ndim != 2:
        raise BadInputError(f"CQ quantization needs a 2-D matrix, got shape {tuple(a.shape)}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise BadInputError(f"CQ quantization needs a non-empty matrix, got shape {tuple(a.shape)}")
    return np.ascontiguousarray(a, dtype=np.float32)


def _check_bits(bits: int) -> int:
    if bits not in BITS:
        raise BadInputError(f"CQ bits must be one of {BITS}, got {bits}")
    return int(bits)


def pad_k(w: np.ndarray, group: int = GROUP) -> np.ndarray:
    """Zero-pad K up to a multiple of ``group`` (no copy when it already is one)."""
    k = w.shape[1]
    if k % group == 0:
        return w
    return np.pad(w, ((0, 0), (0, group - k % group)), mode="constant")


def prepare_input_scale(input_scale, kp: int) -> np.ndarray:
    """cactus's input scale: ones when uncalibrated; else truncated/padded with 1 to Kp and
    clipped to [1e-8, 65504] (f32)."""
    if input_scale is None:
        return np.ones(kp, dtype=np.float32)
    s = np.asarray(input_scale, dtype=np.float32).reshape(-1)
    if s.shape[0] > kp:
        s = s[:kp]
    elif s.shape[0] < kp:
        s = np.pad(s, (0, kp - s.shape[0]), constant_values=1.0)
    return np.clip(s, 1e-8, 65504.0).astype(np.float32)


def _hadamard_inputs(w, bits: int, input_scale):
    """The checked inputs of a Hadamard quantization: ``bits``, ``w`` as f32 zero-padded to
    Kp (a multiple of GROUP), the original K, and the input scale for Kp columns."""
    bits = _check_bits(bits)
    w = _as_matrix(w)
    k = w.shape[1]
    w = pad_k(w)
    return bits, w, k, prepare_input_scale(input_scale, w.shape[1])


def quantize_hadamard(w, bits: int, seed: int = DEFAULT_SEED, input_scale=None,
                      return_rotated: bool = False):
    """CQ-``bits`` Hadamard quantization (numba kernel, all cores). Returns a :class:`CQTensor`
    (and with ``return_rotated`` also the rotated unit vectors f32 ``[N, Kp]``, for
    :func:`near_ties`)."""
    from . import _cq_kernels as kern

    bits, w, k, scale = _hadamard_inputs(w, bits, input_scale)
    n, kp = w.shape
    left, right, perm = hadamard_components(GROUP, seed)
    cb = codebook(GROUP, bits)
    idx = np.empty((n, kp), dtype=np.uint8)
    norms = np.empty((n, kp // GROUP), dtype=np.float32)
    rotated = np.empty((n if return_rotated else 0, kp), dtype=np.float32)
    stats = np.empty((n, kp // GROUP, 3), dtype=np.float64)
    kern.quantize_hadamard_kernel(w, scale, left.astype(np.float32), right.astype(np.float32),
                                  perm.astype(np.int64), cb, midpoints(cb), idx, norms, rotated, stats)
    cq = CQTensor(idx, norms.astype(np.float16), scale.astype(np.float16), bits, GROUP, "hadamard", int(seed), k,
                  error_stats=(norms, stats) if input_scale is None else None)
    return (cq, rotated) if return_rotated else cq


def hadamard_relative_rmse(cq: CQTensor) -> Optional[float]:
    """The relative RMSE of a Hadamard quantization against its (padded) source, without
    dequantizing: R is orthogonal, so per group ``||x - n16 cb[idx] R^T||^2 = ||n v - n16 cb||^2
    = n^2 A - 2 n n16 B + n16^2 C`` (the kernel's sums), and ``||x||^2 = n^2 A``. Only for an
    uncalibrated tensor just quantized by :func:`quantize_hadamard` (else None: dequantize and
    use :func:`relative_rmse`). Equals the dequantized figure to ~1e-6 relative (tested)."""
    got = cq.error_stats
    if got is None:
        return None
    nf, st = got
    n = nf.astype(np.float64)
    n16 = cq.norms.astype(np.float64)
    a, b, c = st[..., 0], st[..., 1], st[..., 2]
    den = float((n * n * a).sum())
    num = float(np.maximum(n * n * a - 2 * n * n16 * b + n16 * n16 * c, 0.0).sum())
    return math.sqrt(num / den) if den > 0 else 0.0


def fwht_ref(t: np.ndarray) -> np.ndarray:
    """Fast Walsh-Hadamard transform along the last axis (f64, the kernel's exact order)."""
    t = np.array(t, dtype=np.float64, copy=True)
    g = t.shape[-1]
    h = 1
    lead = t.shape[:-1]
    while h < g:
        v = t.reshape(lead + (g // (2 * h), 2, h))
        a = v[..., 0, :].copy()
        b = v[..., 1, :]
        v[..., 0, :] = a + b
        v[..., 1, :] = a - b
        h *= 2
    return t


def nearest_ref(v: np.ndarray, cb: np.ndarray) -> np.ndarray:
    """numpy's argmin over the f32 distances (cactus's rule), in row chunks."""
    v = np.asarray(v, dtype=np.float32)
    out = np.empty(v.shape, dtype=np.uint8)
    flat_v, flat_o = v.reshape(-1), out.reshape(-1)
    step = 1 << 18
    for s in range(0, flat_v.size, step):
        flat_o[s:s + step] = np.abs(flat_v[s:s + step, None] - cb[None, :]).argmin(axis=-1)
    return out


def quantize_hadamard_ref(w, bits: int, seed: int = DEFAULT_SEED, input_scale=None,
                          return_rotated: bool = False):
    """numpy reference of :func:`quantize_hadamard` (same results, bit for bit)."""
    bits, w, k, scale = _hadamard_inputs(w, bits, input_scale)
    n, kp = w.shape
    work = w * scale[None, :]
    left, right, perm = hadamard_components(GROUP, seed)
    p = perm.astype(np.int64)
    cb = codebook(GROUP, bits)
    ng = kp // GROUP
    idx = np.empty((n, kp), dtype=np.uint8)
    norms = np.empty((n, ng), dtype=np.float32)
    rotated = np.empty((n, kp), dtype=np.float32)
    inv_sqrt = 1.0 / math.sqrt(GROUP)
    for g in range(ng):
        grp = work[:, g * GROUP:(g + 1) * GROUP]
        nr = np.linalg.norm(grp, axis=1).clip(min=NORM_FLOOR).astype(np.float32)
        y = grp / nr[:, None]
        t = fwht_ref((left.astype(np.float32)[None, :] * y).astype(np.float64))
        v = (t[:, p] * right.astype(np.float64)[p][None, :] * inv_sqrt).astype(np.float32)
        rotated[:, g * GROUP:(g + 1) * GROUP] = v
        idx[:, g * GROUP:(g + 1) * GROUP] = nearest_ref(v, cb)
        norms[:, g] = nr
    cq = CQTensor(idx, norms.astype(np.float16), scale.astype(np.float16), bits, GROUP, "hadamard", int(seed), k)
    return (cq, rotated) if return_rotated else cq


def quantize_orthogonal(w, bits: int = 4, seed: int = DEFAULT_SEED, input_scale=None,
                        rotation: Optional[np.ndarray] = None, return_rotated: bool = False):
    """Orthogonal CQ (one group per row, ``G = K``): ``v = (x / ||x||) @ R`` with
    ``R = rotation`` or :func:`orthogonal_rotation`. Norms as cactus (f32 ``np.linalg.norm``
    of the row, f16); the product a float32 BLAS matrix product as cactus's; indices by
    cactus's argmin rule (``nearest_kernel``)."""
    bits = _check_bits(bits)
    w = _as_matrix(w)
    n, k = w.shape
    scale = prepare_input_scale(input_scale, k)
    work = w * scale[None, :]
    r = orthogonal_rotation(k, seed) if rotation is None else np.asarray(rotation, dtype=np.float32)
    if r.shape != (k, k):
        raise BadInputError(f"orthogonal CQ rotation must be {k} x {k}, got {r.shape}")
    cb = codebook(k, bits)
    mid = midpoints(cb)
    nr = np.linalg.norm(work, axis=1).clip(min=NORM_FLOOR).astype(np.float32)
    idx = np.empty((n, k), dtype=np.uint8)
    rotated = np.empty((n if return_rotated else 0, k), dtype=np.float32)
    rc = np.ascontiguousarray(r, dtype=np.float32)
    from . import _cq_kernels as kern

    for s in range(0, n, 2048):
        e = min(s + 2048, n)
        v = np.ascontiguousarray((work[s:e] / nr[s:e, None]) @ rc)  # float32 BLAS, as cactus
        kern.nearest_kernel(v, cb, mid, idx[s:e])
        if return_rotated:
            rotated[s:e] = v
    cq = CQTensor(idx, nr.astype(np.float16).reshape(n, 1), scale.astype(np.float16), bits, k,
                  "orthogonal", int(seed), k, r)
    return (cq, rotated) if return_rotated else cq


def near_ties(rotated: np.ndarray, cb: np.ndarray, tol: float = ROTATION_TOL) -> np.ndarray:
    """Boolean mask of the rotated values within ``tol`` of a decision midpoint: the only
    places where our index may differ from cactus's (float summation order decides there)."""
    m = midpoints(cb)
    v = np.asarray(rotated, dtype=np.float64)
    j = np.clip(np.searchsorted(m, v), 1, len(m) - 1) if len(m) > 1 else np.zeros(v.shape, np.int64)
    d = np.abs(v - m[j])
    if len(m) > 1:
        d = np.minimum(d, np.abs(v - m[j - 1]))
    return d <= tol


# ---- dequantization -------------------------------------------------------------------------

def _dequant_parts(cq: CQTensor, cb: Optional[np.ndarray], norms: Optional[np.ndarray]):
    cbf = (cq.codebook() if cb is None else np.asarray(cb, dtype=np.float32)).astype(np.float32)
    nf = (cq.norms if norms is None else norms).astype(np.float32)
    return cbf, np.ascontiguousarray(nf), cq.input_scale.astype(np.float32)


def dequantize(cq: CQTensor, cb: Optional[np.ndarray] = None, norms: Optional[np.ndarray] = None) -> np.ndarray:
    """f32 ``[N, Kp]``: ``(cb[idx] @ R^T) * norm / input_scale``. ``cb``/``norms`` override the
    codec's (a file reader passes the stored, possibly pre-scaled, f16 values)."""
    cbf, nf, scale = _dequant_parts(cq, cb, norms)
    if cq.rotation == "orthogonal":
        return _dequantize_orthogonal(cq, cbf, nf, scale)
    from . import _cq_kernels as kern

    left, right, perm = cq.components()
    out = np.empty((cq.n, cq.kp), dtype=np.float32)
    kern.dequantize_hadamard_kernel(np.ascontiguousarray(cq.indices), nf, scale, left.astype(np.float32),
                                    right.astype(np.float32), perm.astype(np.int64), cbf, out)
    return out


def _dequantize_orthogonal(cq: CQTensor, cbf, nf, scale) -> np.ndarray:
    rt = cq.rotation_matrix().astype(np.float64).T
    out = np.empty((cq.n, cq.kp), dtype=np.float32)
    for s in range(0, cq.n, 1024):
        e = min(s + 1024, cq.n)
        out[s:e] = ((cbf[cq.indices[s:e]].astype(np.float64) @ rt) * nf[s:e, :1]).astype(np.float32) / scale[None, :]
    return out


def dequantize_ref(cq: CQTensor, cb: Optional[np.ndarray] = None, norms: Optional[np.ndarray] = None) -> np.ndarray:
    """numpy reference of :func:`dequantize` (bit-identical for the Hadamard form)."""
    cbf, nf, scale = _dequant_parts(cq, cb, norms)
    if cq.rotation == "orthogonal":
        return _dequantize_orthogonal(cq, cbf, nf, scale)
    left, right, perm = cq.components()
    p = perm.astype(np.int64)
    g, ng, n = cq.group, cq.groups, cq.n
    vals = cbf[cq.indices].reshape(n, ng, g)
    u = np.empty((n, ng, g), dtype=np.float64)
    u[..., p] = right.astype(np.float32)[p] * vals
    z = fwht_ref(u)
    out = (left.astype(np.float32)[None, None, :] * z * (1.0 / math.sqrt(g)) * nf[:, :, None]).astype(np.float32)
    return out.reshape(n, ng * g) / scale[None, :]


def relative_rmse(w: np.ndarray, w_hat: np.ndarray) -> float:
    """||w - w_hat|| / ||w|| (sums in f64), the quality figure the ledger records; ``w_hat``
    may carry K padding columns (ignored)."""
    from . import _cq_kernels as kern

    a = np.ascontiguousarray(w, dtype=np.float32)
    b = np.ascontiguousarray(w_hat, dtype=np.float32)
    if a.ndim != 2 or b.ndim != 2 or b.shape[0] != a.shape[0] or b.shape[1] < a.shape[1]:
        raise BadInputError(f"relative_rmse: shapes {a.shape} and {b.shape} do not match")
    num, den = kern.sq_error_kernel(a, b)
    return float(math.sqrt(num / den)) if den > 0 else 0.0


def relative_rmse_ref(w: np.ndarray, w_hat: np.ndarray) -> float:
    """numpy reference of :func:`relative_rmse`."""
    a = np.asarray(w, dtype=np.float64)
    b = np.asarray(w_hat, dtype=np.float64)[:, : a.shape[1]]
    den = float((a * a).sum())
    return float(math.sqrt(((a - b) ** 2).sum() / den)) if den > 0 else 0.0
