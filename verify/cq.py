"""The cactus CQ4 panel kernels, emulated (docs/FORMAT.md §4.2 geometry with G = 128), and their oracles.

What a runtime computes for ``y = W' a`` with a ``.cq4p.weights`` tensor (``W'`` its
dequantization, ``Kp`` = padded K, groups of G = 128):

1. activation transform per group (``transform_activations``): ``z = a / input_scale``
   (the stored reciprocal, f16), then ``z' = z @ R``: left signs, fast Walsh-Hadamard
   transform, ``1/sqrt(G)``, right signs, permutation (``z'_j = right[p_j]/sqrt(G) *
   FWHT(left * z)[p_j]``), in f64 here (f32 result);
2. int8 quantization per group (``quantize_activations``): ``s_g = max|z'|/127``,
   ``q = round_half_even(z'/s_g)`` saturated to [-127, 127] (``s_g = 0``: q = 0);
3. the streaming leaves on the panels: LUTI4 with ZT0 byte ``4i`` = int8 codebook value of
   nibble ``i``, SDOT vgx4 (GEMV, M = 1) or SMOPA (GEMM, 16-row tiles), int32 partials
   ``P[m, n, g] = sum_j c8[idx[n, gG + j]] * q[m, gG + j]`` (``verify/leaves.py`` runs them);
4. outside streaming mode: ``y[m, n] = sum_g P[m, n, g] * folded[n, g] * s[m, g]`` (f32, g in
   order), ``folded`` the file's f32 norms ``[SB][ng][64]`` (norm x codebook factor).

``direct_partials`` is the same integer sum computed directly from the unpacked indices: the
leaves must give identical int32. ``oracle`` is the f64 value ``sum_g norm16'[n,g] *
sum_j cb16'[idx] * z'_j`` from the stored (pre-scaled) f16 codebook and norms, which equals the
legacy file's dequantization applied to ``a``; ``error_bound`` is the rigorous bound of the
integer path against it (activation rounding ``|s q - z'| <= s/2``, codebook rounding
``|c8 - cb16'| <= 1/2``), plus 1e-5 relative for the f32 rescale.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from ..formats import cactus as cfile
from ..formats import cq as cqc
from ..formats.errors import BadInputError
from ..repack import cq4_panel
from . import leaves
from .sme2 import zt0_bytes

G = cqc.GROUP


def transform_activations(a: np.ndarray, recip16: np.ndarray, left: np.ndarray, right: np.ndarray,
                          perm: np.ndarray) -> np.ndarray:
    """f32 ``[M, Kp]``: per group, ``(a * recip) @ R`` via signs, FWHT, 1/sqrt(G), signs, perm."""
    a = np.atleast_2d(np.asarray(a, dtype=np.float32))
    m, kp = a.shape
    if kp % G or recip16.shape != (kp,):
        raise BadInputError(f"activations K={kp} must be a multiple of {G} and match the input scale")
    z = (a * recip16.astype(np.float32)[None, :]).reshape(m, kp // G, G)
    t = cqc.fwht_ref((left.astype(np.float32) * z).astype(np.float64))
    p = perm.astype(np.int64)
    out = t[..., p] * right.astype(np.float64)[p] * (1.0 / math.sqrt(G))
    return out.astype(np.float32).reshape(m, kp)


def quantize_activations(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 ``q [M, Kp]`` and f32 scales ``s [M, ng]``: ``s = max|z|/127`` per group,
    ``q = rint(z / s)`` (round half to even) saturated to [-127, 127]; an all-zero group has
    ``s = 0`` and ``q = 0``."""
    z = np.asarray(z, dtype=np.float32)
    m, kp = z.shape
    zg = z.reshape(m, kp // G, G)
    s = (np.abs(zg).max(axis=2) / np.float32(127.0)).astype(np.float32)
    safe = np.where(s > 0, s, np.float32(1.0))
    q = np.clip(np.rint(zg / safe[:, :, None]), -127, 127)
    q[s == 0] = 0
    return q.astype(np.int8).reshape(m, kp), s


def direct_partials(nibbles: np.ndarray, c8: np.ndarray, q: np.ndarray) -> np.ndarray:
    """int32 ``P[M, N, ng]`` computed directly: ``sum_j c8[nib[n, k]] * q[m, k]`` per group."""
    return leaves.partials_ref(c8.astype(np.int64)[nibbles], q, G)


def rescale(p: np.ndarray, folded: np.ndarray, s: np.ndarray) -> np.ndarray:
    """f32 ``y[M, N] = sum_g P[m, n, g] * folded[n, g] * s[m, g]`` (groups in order)."""
    m, n, ng = p.shape
    y = np.zeros((m, n), dtype=np.float32)
    for g in range(ng):
        y += p[:, :, g].astype(np.float32) * folded[None, :, g] * s[:, g][:, None]
    return y


def oracle(nibbles: np.ndarray, cb16: np.ndarray, norms16: np.ndarray, z: np.ndarray) -> np.ndarray:
    """f64 ``y[M, N] = sum_g norm16'[n, g] * sum_j cb16'[idx] * z'[m, gG + j]``."""
    n, kp = nibbles.shape
    vals = cb16.astype(np.float64)[nibbles].reshape(n, kp // G, G)
    zz = z.astype(np.float64).reshape(z.shape[0], kp // G, G)
    return np.einsum("ng,ngj,mgj->mn", norms16.astype(np.float64), vals, zz)


def error_bound(nibbles: np.ndarray, c8: np.ndarray, norms16: np.ndarray, z: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Per (m, n): ``sum_g |norm| * (s_g/2 * sum_j |c8[idx]| + 1/2 * sum_j |z'_j|)``, times
    (1 + 1e-5), plus 1e-5 of the output's magnitude scale (the f32 rescale)."""
    n, kp = nibbles.shape
    ng = kp // G
    absc = np.abs(c8.astype(np.float64)[nibbles]).reshape(n, ng, G).sum(axis=2)          # [n, g]
    absz = np.abs(z.astype(np.float64)).reshape(z.shape[0], ng, G).sum(axis=2)           # [m, g]
    nn = np.abs(norms16.astype(np.float64))
    b = np.einsum("ng,mg,ng->mn", nn, s.astype(np.float64) / 2, absc) + np.einsum("ng,mg->mn", nn, absz / 2)
    mag = np.einsum("ng,mg,ng->mn", nn, s.astype(np.float64), absc)
    return b * (1 + 1e-5) + 1e-5 * mag + 1e-30


class PanelCheck:
    """The emulated leaves of one ``.cq4p.weights`` file against the direct computation;
    :meth:`from_legacy` packs a legacy CQ4 Hadamard file into the same panels in memory.

    The oracle and bound read ``indices`` (the codebook indices), ``cb`` and ``norms`` (the
    pre-divided codebook and the matching norms): a panel file's own values (its nibbles are
    its indices), a legacy file's values as :meth:`from_legacy` derives them."""

    def __init__(self, f: cfile.CactusTensorFile):
        if f.lineage != cfile.LINEAGE_PANEL:
            raise BadInputError(f"{f.path}: not a CQ4 panel file ({f.lineage})")
        self.f = f
        self.n, self.kp = f.shape
        m = f.metadata()
        self.meta = m
        self.cb16 = m["codebook"]
        self.c8 = cfile.int8_codebook(self.cb16)
        self.zt0 = zt0_bytes(self.c8[np.arange(16)])
        self.panels = np.array(f.data)
        self.nibbles = cq4_panel.unpack(self.panels, self.n, self.kp)
        sb = -(-self.n // cq4_panel.CHANNELS)
        self.folded = m["folded_norms"].transpose(0, 2, 1).reshape(sb * cq4_panel.CHANNELS, -1)[: self.n]
        self.indices, self.cb, self.norms = self.nibbles, self.cb16, m["norms"]

    @classmethod
    def from_legacy(cls, f: cfile.CactusTensorFile) -> "PanelCheck":
        """A legacy CQ4 Hadamard file (row-major LSB or INTERLEAVED_4ROW) in panel form, in memory:
        INTERLEAVED_4ROW files store the codebook pre-divided by ``max|cb|/127`` and the norms
        multiplied by it, the values of a panel file; row-major files store them plain, so both
        are scaled here by that factor in f64 (the oracle is then exactly the file's own
        dequantization applied to the activations; the folded f32 norms round once). Indices
        become nibbles (the first index of equal int8 value) packed by ``repack/cq4_panel.py``."""
        if f.kind != "cq" or f.bits != 4 or f.orthogonal or f.lineage != cfile.LINEAGE_LEGACY:
            raise BadInputError(f"{f.path}: not a legacy CQ4 Hadamard file")
        self = cls.__new__(cls)
        self.f = f
        self.n, self.kp = f.shape
        m = f.metadata()
        self.meta = m
        cb, norms = m["codebook"].astype(np.float64), m["norms"].astype(np.float64)
        if not f.interleaved:
            factor = cfile.codebook_factor(cb)
            cb, norms = cb / factor, norms * factor
        self.cb16, self.cb, self.norms = cb, cb, norms
        self.c8 = np.clip(np.rint(cb), -127, 127).astype(np.int8)
        first = np.array([int(np.flatnonzero(self.c8 == self.c8[i])[0]) for i in range(16)], dtype=np.uint8)
        self.indices = f.indices()
        self.nibbles = first[self.indices]
        self.panels = cq4_panel.pack(self.nibbles)
        self.zt0 = zt0_bytes(self.c8[np.arange(16)])
        self.folded = norms.astype(np.float32)
        return self

    def activations(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = self.meta
        z = transform_activations(a, m["input_scale_recip"], m["left"], m["right"], m["perm"])
        q, s = quantize_activations(z)
        return z, q, s

    def run(self, a: np.ndarray, sbs: Optional[Sequence[int]] = None) -> dict:
        """Both leaves (GEMV per row, GEMM on all rows) on super-blocks ``sbs``; returns the
        facts: ``partials_equal``, the max |y - oracle| / bound, and the rows checked."""
        z, q, s = self.activations(a)
        chans = leaves.sb_channels(range(-(-self.n // 64)) if sbs is None else sbs, self.n)
        want = direct_partials(self.nibbles[chans], self.c8, q)
        gemv = leaves.gemv_leaf(self.panels, self.zt0, q, self.n, self.kp, G, True, sbs)
        gemm = leaves.gemm_leaf(self.panels, self.zt0, q, self.n, self.kp, G, True, sbs)
        y = rescale(gemm, self.folded[chans], s)
        o = oracle(self.indices[chans], self.cb, self.norms[chans], z)
        bound = error_bound(self.indices[chans], self.c8, self.norms[chans], z, s)
        ratio = float((np.abs(y.astype(np.float64) - o) / bound).max()) if y.size else 0.0
        first = None
        for name, got in (("sme2.gemv.luti4_sdot", gemv), ("sme2.gemm.luti4_smopa", gemm)):
            if not np.array_equal(got, want):
                i = np.argwhere(got != want)[0]
                first = f"{name}: P{tuple(int(x) for x in i)} = {int(got[tuple(i)])}, direct {int(want[tuple(i)])}"
                break
        return {"partials_equal": first is None, "first_diff": first, "bound_ratio": ratio,
                "rows": int(chans.size), "m": int(q.shape[0])}
