"""The non-matmul operations of a decoder layer, in f32: RMSNorm, RoPE, causal attention,
gated-FFN activations, LFM2's short convolution.

Attention is a numba kernel (:func:`attention`, one ``prange`` over (query, head) pairs, each
pair summed in a fixed order, so its result does not depend on the thread count; a serial twin
for one query) with the numpy reference :func:`attention_ref` beside it; its softmax takes
``e^x`` from :func:`exp_nonpositive` (a vectorising expf, checked against ``np.exp``). The rest
is plain numpy, one vectorised pass each.

RoPE (the angles come from :class:`panelpack.formats.arch.rope.Rope`), on the leading ``r``
dimensions of each head (``r`` = 2·cos.shape[1]; the rest pass through), two conventions::

    pairs  (GGUF llama):   (x[2i], x[2i+1])      -> (x0·cos − x1·sin, x0·sin + x1·cos)
    halves (HF, NeoX):     (x[i],  x[i + r/2])   -> the same rotation
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange, types

from ...formats._jit import lazy_njit
from .ggml_arith import fma32


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x²) + eps) · w`` over the last axis of f32 ``x``, in ggml's steps
    (``ggml_compute_forward_rms_norm_f32``): each square rounded to f32 and summed in f64 in index
    order, ``mean = f32(sum / d)``, ``scale = 1.f / sqrtf(mean + f32(eps))`` in f32, then
    ``(x·scale)·w`` in f32 (:func:`_rms_norm_kernel`: one call, where the numpy steps of
    :func:`rms_norm_ref` cost ~40 us per decoded row, 60 rows a token)."""
    d = x.shape[-1]
    rows = np.ascontiguousarray(x, np.float32).reshape(-1, d)
    out = np.empty(rows.shape, np.float32)
    _rms_norm_kernel(rows, np.ascontiguousarray(w, np.float32).reshape(d), float(eps), out)
    return out.reshape(x.shape)


def rms_norm_ref(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """numpy reference of :func:`rms_norm` (its f64 sum in numpy's order: equal within f32 rounding)."""
    ms = ((x * x).astype(np.float64).sum(-1) / x.shape[-1]).astype(np.float32)
    scale = np.float32(1) / np.sqrt(ms + np.float32(eps))
    return (x * scale[..., None]) * w


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pairs: bool) -> np.ndarray:
    """Rotate the leading ``2·cos.shape[1]`` dimensions of each head of ``x`` f32 ``[M, H, D]``
    (the rest pass through; ``cos``/``sin`` ``[M, 0]``: no rotation); returns a new array.
    Each pair as ggml's compiled ``rotate_pairs`` (its multiply-adds contracted)::

        x0' = fma(x0, cos, −(x1·sin))      x1' = fma(x0, sin, x1·cos)"""
    out = np.array(x, np.float32, order="C", copy=True)
    if cos.shape[1] == 0:
        return out
    _rope_kernel(out, np.ascontiguousarray(cos, np.float32), np.ascontiguousarray(sin, np.float32), bool(pairs))
    return out


def rope_ref(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pairs: bool) -> np.ndarray:
    """numpy reference of :func:`rope` (each fma as an exact f64 product and sum, rounded to f32:
    equal to it but for a double rounding in about 2^-29 of the elements)."""
    half = cos.shape[1]
    out = x.copy()
    if half == 0:
        return out
    c, s = cos[:, None, :], sin[:, None, :]
    i0, i1 = (slice(0, 2 * half, 2), slice(1, 2 * half, 2)) if pairs else (slice(0, half), slice(half, 2 * half))
    x0, x1 = x[..., i0].astype(np.float64), x[..., i1]
    out[..., i0] = (x0 * c - (x1 * s).astype(np.float64)).astype(np.float32)
    out[..., i1] = (x0 * s + (x1 * c).astype(np.float64)).astype(np.float32)
    return out


_F2 = types.Array(types.float32, 2, "C", readonly=True)
_F1 = types.Array(types.float32, 1, "C", readonly=True)


@lazy_njit(types.void(_F2, _F1, types.float64, types.float32[:, ::1]), cache=True)
def _rms_norm_kernel(x, w, eps, out):
    d = x.shape[1]
    e = np.float32(eps)
    for r in range(x.shape[0]):
        s = 0.0
        for i in range(d):
            s += np.float64(x[r, i] * x[r, i])
        scale = np.float32(1.0) / np.sqrt(np.float32(s / d) + e)
        for i in range(d):
            out[r, i] = (x[r, i] * scale) * w[i]


@lazy_njit(inline="always")
def _head_norm(t, off, d, w, eps):
    """:func:`rms_norm` of ``t[off:off + d]`` in place (the same f32 steps as its kernel)."""
    acc = 0.0
    for i in range(d):
        acc += np.float64(t[off + i] * t[off + i])
    scale = np.float32(1.0) / np.sqrt(np.float32(acc / d) + np.float32(eps))
    for i in range(d):
        t[off + i] = (t[off + i] * scale) * w[i]


@lazy_njit(types.void(_F2, types.int64, types.int64, _F1, _F1, _F1, _F1, _F1, types.float64, _F2, _F2,
                      types.boolean, types.int64, types.float32[:, :, ::1], types.float32[:, :, ::1],
                      types.float32[:, :, ::1]), cache=True)
def rope_into_cache(y, nq, nk, bq, bk, bv, qn, kn, eps, cos, sin, pairs, pos0, q, kt, vc):
    """A layer's stacked q/k/v product ``y [M, nq + 2·nk]`` (heads of ``D`` = ``q.shape[2]``) to
    attention's inputs in one pass: ``+ b`` where a bias has elements (``bq``, ``bk``, ``bv``;
    size 0: none), the per-head RMSNorm where a norm weight has elements (``qn``, ``kn``, with
    ``eps``), :func:`rope` on the leading ``2·cos.shape[1]`` dimensions of q and k heads,
    rotated q into ``q [M, H, D]``, rotated k into the key cache ``kt[:, :, pos0 + m]`` and v
    into ``vc[:, pos0 + m]``. The same f32 operations, in the same order, as the numpy steps of
    ``Model._layer`` (split, ``+= b``, :func:`rms_norm`, :func:`rope`, the cache stores): the
    same bits (tested)."""
    d = q.shape[2]
    half = cos.shape[1]
    t = np.empty(d, np.float32)
    for m in range(y.shape[0]):
        for part in range(2):  # q, then k
            base = 0 if part == 0 else nq
            b = bq if part == 0 else bk
            w = qn if part == 0 else kn
            heads = nq // d if part == 0 else nk // d
            for h in range(heads):
                for i in range(d):
                    x = y[m, base + h * d + i]
                    t[i] = x + b[h * d + i] if b.size else x
                if w.size:
                    _head_norm(t, 0, d, w, eps)
                for i in range(half):
                    j0, j1 = (2 * i, 2 * i + 1) if pairs else (i, i + half)
                    x0, x1 = t[j0], t[j1]
                    c, s = cos[m, i], sin[m, i]
                    t[j0] = fma32(x0, c, -(x1 * s))
                    t[j1] = fma32(x0, s, x1 * c)
                for i in range(d):
                    if part == 0:
                        q[m, h, i] = t[i]
                    else:
                        kt[h, i, pos0 + m] = t[i]
        for h in range(nk // d):
            for i in range(d):
                v = y[m, nq + nk + h * d + i]
                vc[h, pos0 + m, i] = v + bv[h * d + i] if bv.size else v


@lazy_njit(types.void(types.float32[:, :, ::1], _F2, _F2, types.boolean), cache=True)
def _rope_kernel(x, cos, sin, pairs):
    """:func:`rope` in place on ``x [M, H, D]`` (the rotation of :func:`rope_into_cache`)."""
    half = cos.shape[1]
    for m in range(x.shape[0]):
        for h in range(x.shape[1]):
            for i in range(half):
                j0, j1 = (2 * i, 2 * i + 1) if pairs else (i, i + half)
                x0, x1 = x[m, h, j0], x[m, h, j1]
                c, s = cos[m, i], sin[m, i]
                x[m, h, j0] = fma32(x0, c, -(x1 * s))
                x[m, h, j1] = fma32(x0, s, x1 * c)


def short_conv(bx: np.ndarray, w: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LFM2's causal depthwise convolution of ``bx`` f32 ``[M, d]`` (the rows B ⊙ x of this
    call) with the kernel ``w`` f32 ``[L, d]`` (HF's ``Conv1d`` weight ``[d, 1, L]`` transposed;
    ``w[L-1]`` multiplies the current row), after the ``L - 1`` rows ``state`` ``[L-1, d]`` of
    the calls before (zeros at the start)::

        ext = state ++ bx                    [L-1+M, d]
        y[t] = Σ_j w[j] ⊙ ext[t + j]         j = 0 .. L-1, summed in that order in f32

    Returns ``y [M, d]`` and the next state (the last ``L - 1`` rows of ``ext``): prefill in
    chunks and decoding one row at a time give the same bits."""
    taps = w.shape[0]
    m = bx.shape[0]
    ext = np.concatenate([state, bx]) if state.shape[0] else bx
    y = ext[0:m] * w[0]
    for j in range(1, taps):
        y += ext[j:j + m] * w[j]
    return y, np.ascontiguousarray(ext[ext.shape[0] - (taps - 1):])


def short_conv_ref(bx: np.ndarray, w: np.ndarray, state: np.ndarray) -> np.ndarray:
    """f64 reference of :func:`short_conv`'s ``y`` (a direct sum over the history)."""
    ext = np.concatenate([state, bx]).astype(np.float64)
    taps, m = w.shape[0], bx.shape[0]
    return np.stack([(ext[t:t + taps] * w.astype(np.float64)).sum(0) for t in range(m)]).astype(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1) + np.exp(-x))


_GELU_C = np.float32(math.sqrt(2.0 / math.pi))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(_GELU_C * (x + np.float32(0.044715) * x * x * x)))


#: gated FFN activation by name (Hyper.activation)
ACTIVATIONS = {"silu": silu, "gelu_tanh": gelu_tanh}


_F3 = types.Array(types.float32, 3, "C", readonly=True)

# expf on the softmax's arguments (x <= 0 after the maximum is subtracted), written so the loop
# that calls it vectorises (libm's expf is a call per element, most of attention's time):
#   x = n·ln2 + r,  n = floor(x·log2(e) + 1/2),  r = (x − n·C1) − n·C2   (C1 + C2 = ln2, C1 exact
#   in 9 bits, so n·C1 is exact for |n| < 2^15),  e^r = 1 + r + r²·p(r) (Cephes' degree-5 p),
#   2^n built from its bits ((n + 127) << 23). Below −87 (e^x < 2^-125) the result is 0.
_LOG2E = np.float32(1.44269504088896341)
_C1 = np.float32(0.693359375)
_C2 = np.float32(-2.12194440e-4)
_EXP_MIN = np.float32(-87.0)
_P = tuple(np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                   1.6666665459e-1, 5.0000001201e-1))


@lazy_njit(types.void(types.float32[::1], types.int64, types.int32[::1]), cache=True)
def exp_nonpositive(x, n, bits):
    """``x[:n] = e^x[:n]`` in place for ``x <= 0`` (f32, within 2 ulp of ``np.exp``; see above);
    ``bits`` int32 scratch of ``n`` or more."""
    p0, p1, p2, p3, p4, p5 = _P
    for j in range(n):
        v = max(x[j], _EXP_MIN)
        k = np.floor(v * _LOG2E + np.float32(0.5))
        r = (v - k * _C1) - k * _C2
        poly = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
        bits[j] = ((np.int32(k) + np.int32(127)) << np.int32(23)) if x[j] >= _EXP_MIN else np.int32(0)
        x[j] = (poly * (r * r) + r) + np.float32(1.0)
    two_n = bits[:n].view(np.float32)  # 2^n, or 0.0 (all bits clear) below the range
    for j in range(n):
        x[j] = x[j] * two_n[j]


@lazy_njit(inline="always")
def _attend(q, kt, vc, pos0, scale, window, m, h, group, sc, bits, acc, out):
    """One query row ``m`` and head ``h`` (see :func:`_attention_kernel`). The inner loops read
    1-D views from index 0, so their indices are non-negative counters and they vectorise."""
    d = q.shape[2]
    kvh = h // group
    p = pos0 + m
    lo = 0
    if window > 0 and p - window + 1 > 0:
        lo = p - window + 1
    n = p - lo + 1
    for j in range(n):
        sc[j] = np.float32(0.0)
    for i in range(d):
        qi = q[m, h, i]
        keys = kt[kvh, i, lo:]
        for j in range(n):
            sc[j] += qi * keys[j]
    best = np.float32(-np.inf)
    for j in range(n):
        sc[j] = sc[j] * scale
        best = max(best, sc[j])
    for j in range(n):
        sc[j] = sc[j] - best
    exp_nonpositive(sc, n, bits)
    total = np.float32(0.0)
    for j in range(n):
        total += sc[j]
    for i in range(d):
        acc[i] = np.float32(0.0)
    values = vc[kvh, lo:]
    for j in range(n):
        w = sc[j] / total
        for i in range(d):
            acc[i] += w * values[j, i]
    for i in range(d):
        out[m, h, i] = acc[i]


_ASIG = types.void(_F3, _F3, _F3, types.int64, types.int64, types.float32, types.int64, types.float32[:, :, ::1])


@lazy_njit(inline="always")
def _attend_job(q, kt, vc, length, pos0, scale, window, job, out):
    heads = q.shape[1]
    sc = np.empty(length, np.float32)
    bits = np.empty(length, np.int32)
    acc = np.empty(q.shape[2], np.float32)
    _attend(q, kt, vc, pos0, scale, window, job // heads, job % heads, heads // kt.shape[0], sc, bits, acc, out)


@lazy_njit(_ASIG, parallel=True, cache=True)
def _attention_kernel(q, kt, vc, length, pos0, scale, window, out):
    """Causal attention for queries at positions ``pos0 + m`` over the cached keys ``0 .. pos0 + m``
    (the last ``window`` of them when ``window > 0``). Cache layouts: keys ``kt [Hkv, D, cap]``
    (transposed, so one query element meets consecutive keys), values ``vc [Hkv, cap, D]``.
    GQA: head ``h`` reads kv head ``h // (H / Hkv)``. Each score is summed over D in order, then
    scaled; softmax (maximum subtracted, :func:`exp_nonpositive`) and the weighted sum in f32,
    keys in increasing order. Each (query, head) pair is computed on its own, so the result
    does not depend on the thread count or on how queries are batched."""
    for job in prange(q.shape[0] * q.shape[1]):
        _attend_job(q, kt, vc, length, pos0, scale, window, job, out)


@lazy_njit(_ASIG, cache=True)
def _attention_serial(q, kt, vc, length, pos0, scale, window, out):
    """:func:`_attention_kernel` on the calling thread (a decoded token's one query: waking
    the thread pool costs more than its few microseconds of work); the same bits."""
    for job in range(q.shape[0] * q.shape[1]):
        _attend_job(q, kt, vc, length, pos0, scale, window, job, out)


SERIAL_QUERIES = 1  # at most this many query rows run serially ...
#: ... unless their heads read at least this many cached key and value elements (H · D · positions):
#: a decoded token of SmolLM2 (9 heads of 64) stays on the calling thread up to ~450 positions, one
#: of Qwen3-0.6B (16 heads of 128) or Phi-3-mini (32 of 96) splits its heads over the threads from
#: ~130 and ~90 (measured: docs/BENCHMARKS.md, issue 29)
SERIAL_ATTENTION_WORK = 1 << 18


def attention(q: np.ndarray, kt: np.ndarray, vc: np.ndarray, pos0: int, scale: float, window: int = 0) -> np.ndarray:
    """``q`` f32 ``[M, H, D]``; key cache ``kt [Hkv, D, cap]``, value cache ``vc [Hkv, cap, D]``
    holding positions ``0 .. pos0 + M - 1`` -> ``[M, H, D]``. Every (query, head) pair is computed
    on its own, so which kernel runs (serial, parallel) never changes the bits."""
    out = np.empty(q.shape, np.float32)
    m_rows, heads, d = q.shape
    span = pos0 + m_rows if window <= 0 else min(pos0 + m_rows, window)
    serial = m_rows <= SERIAL_QUERIES and heads * d * span < SERIAL_ATTENTION_WORK
    kernel = _attention_serial if serial else _attention_kernel
    kernel(np.ascontiguousarray(q, np.float32), kt, vc, int(pos0 + q.shape[0]), int(pos0),
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
