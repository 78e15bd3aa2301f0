"""The non-matmul operations of a decoder layer, in f32: RMSNorm, RoPE, causal attention,
gated-FFN activations.

Attention is a numba kernel (:func:`attention`, one ``prange`` over (query, head) pairs, each
pair summed in a fixed order, so its result does not depend on the thread count) with the numpy
reference :func:`attention_ref` beside it; the rest is plain numpy, one vectorised pass each.

RoPE (``theta_i = pos · base^(-2i/d)``), two conventions::

    pairs  (GGUF llama):   (x[2i], x[2i+1])      -> (x0·cos − x1·sin, x0·sin + x1·cos)
    halves (HF, NeoX):     (x[i],  x[i + d/2])   -> the same rotation
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange, types

from ...formats._jit import lazy_njit


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x²) + eps) · w`` over the last axis; the mean of squares in f64."""
    ms = np.einsum("...i,...i->...", x, x, dtype=np.float64) / x.shape[-1]
    scale = (1.0 / np.sqrt(ms + eps)).astype(np.float32)
    return (x * scale[..., None]) * w


def rope_tables(positions: np.ndarray, dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """``cos, sin`` f32 ``[M, dim/2]`` for the given positions."""
    inv = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    ang = np.asarray(positions, np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pairs: bool) -> np.ndarray:
    """Rotate ``x`` f32 ``[M, H, D]`` in place-free form (returns a new array)."""
    c, s = cos[:, None, :], sin[:, None, :]
    out = np.empty_like(x)
    if pairs:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
    else:
        h = x.shape[-1] // 2
        x0, x1 = x[..., :h], x[..., h:]
        out[..., :h] = x0 * c - x1 * s
        out[..., h:] = x0 * s + x1 * c
    return out


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1) + np.exp(-x))


_GELU_C = np.float32(math.sqrt(2.0 / math.pi))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(_GELU_C * (x + np.float32(0.044715) * x * x * x)))


#: gated FFN activation by name (ArchSpec.activation)
ACTIVATIONS = {"silu": silu, "gelu_tanh": gelu_tanh}


_F3 = types.Array(types.float32, 3, "C", readonly=True)


@lazy_njit(types.void(_F3, _F3, _F3, types.int64, types.int64, types.float32, types.int64, types.float32[:, :, ::1]),
           parallel=True, cache=True)
def _attention_kernel(q, kt, vc, length, pos0, scale, window, out):
    """Causal attention for queries at positions ``pos0 + m`` over the cached keys ``0 .. pos0 + m``
    (the last ``window`` of them when ``window > 0``). Cache layouts: keys ``kt [Hkv, D, cap]``
    (transposed, so one query element meets consecutive keys), values ``vc [Hkv, cap, D]``.
    GQA: head ``h`` reads kv head ``h // (H / Hkv)``. Each score is summed over D in order, then
    scaled; softmax (maximum subtracted) and the weighted sum in f32, keys in increasing order."""
    m_rows, heads, d = q.shape
    group = heads // kt.shape[0]
    for job in prange(m_rows * heads):
        m = job // heads
        h = job % heads
        kvh = h // group
        p = pos0 + m
        lo = 0
        if window > 0 and p - window + 1 > 0:
            lo = p - window + 1
        n = p - lo + 1
        sc = np.zeros(n, np.float32)
        for i in range(d):
            qi = q[m, h, i]
            for j in range(n):
                sc[j] += qi * kt[kvh, i, lo + j]
        best = np.float32(-np.inf)
        for j in range(n):
            sc[j] = sc[j] * scale
            if sc[j] > best:
                best = sc[j]
        total = np.float32(0.0)
        for j in range(n):
            e = np.float32(np.exp(sc[j] - best))
            sc[j] = e
            total += e
        for i in range(d):
            out[m, h, i] = np.float32(0.0)
        for j in range(n):
            w = sc[j] / total
            for i in range(d):
                out[m, h, i] += w * vc[kvh, lo + j, i]


def attention(q: np.ndarray, kt: np.ndarray, vc: np.ndarray, pos0: int, scale: float, window: int = 0) -> np.ndarray:
    """``q`` f32 ``[M, H, D]``; key cache ``kt [Hkv, D, cap]``, value cache ``vc [Hkv, cap, D]``
    holding positions ``0 .. pos0 + M - 1`` -> ``[M, H, D]``."""
    out = np.empty(q.shape, np.float32)
    _attention_kernel(np.ascontiguousarray(q, np.float32), kt, vc, int(pos0 + q.shape[0]), int(pos0),
                      np.float32(scale), int(window), out)
    return out


def attention_ref(q, kt, vc, pos0: int, scale: float, window: int = 0) -> np.ndarray:
    """numpy reference of :func:`attention` (f64 sums: equal to it within f32 rounding)."""
    m_rows, heads, d = q.shape
    group = heads // kt.shape[0]
    out = np.zeros(q.shape, np.float64)
    for m in range(m_rows):
        p = pos0 + m
        lo = max(0, p - window + 1) if window > 0 else 0
        for h in range(heads):
            k = kt[h // group, :, lo:p + 1].astype(np.float64).T
            s = (k @ q[m, h].astype(np.float64)) * scale
            w = np.exp(s - s.max())
            out[m, h] = (w / w.sum()) @ vc[h // group, lo:p + 1].astype(np.float64)
    return out.astype(np.float32)
