"""The standard dispatch (docs/FORMAT.md §3): the numeric reference every layout's kernel must agree with.

A matrix product ``y = W·x`` on quantized weights runs in three steps:

1. **Activation quantization** (:func:`quantize_activations`), llama.cpp's
   ``quantize_row_q8_0_ref`` per 32-element block ``b`` of each activation row::

       amax = max |x|            (f32)
       d    = amax / 127         (f32 division)
       id   = d ? 1/d : 0        (f32; also 0 when 1/d overflows, see below)
       a    = roundf(x * id)     (f32 product, rounded half away from zero, int8)
       da   = f32(f16(d))        (round to nearest even through f16)

2. **Integer partials** (:func:`standard_partials`): per activation row ``m``, output channel
   ``n`` and weight group ``g`` (``G`` consecutive K; 32, or 16 for Q6_K, Q3_K, Q2_K)::

       P[m, n, g] = Σ_k c[n, k] · a[m, k]      A[m, g] = Σ_k a[m, k]      (int32)

   where ``c = code - code_offset`` is the weight's integer code (``formats.blocks.integer_codes``).

3. **Rescale** (:func:`rescale`), in f32, groups in increasing order from ``y = 0.0f``, every
   product and sum rounded on its own (numba does not contract to FMA without ``fastmath``)::

       scale        (Q4_0, Q5_0, Q8_0, Q6_K, Q3_K)  y = y + (f32(P)·s)·da
       scale_min    (Q4_1, Q5_1)                    y = y + ((f32(P)·s)·da + (o·f32(A))·da)
       k_scale_min  (Q4_K, Q5_K, Q2_K)              y = y + ((s·f32(P)) − (o·f32(A)))·da

   with ``s``/``o`` per (channel, group) from :func:`scale_arrays` (``s = f32(d)``,
   ``f32(d)·f32(sc)``, ``f32(d)·f32(scale)``, Q3_K ``f32(d)·f32(sc − 32)``; ``o = f32(m)``,
   ``f32(dmin)·f32(m)``) and ``da = da[m, (g·G)//32]`` (two 16-groups of Q6_K, Q3_K, Q2_K
   share one activation block).

Every path in ``verify/`` (this reference, the emulated SME2/NEON leaves, the interleaved kernels,
the compiled kernels) ends in :func:`rescale`, or in :func:`rescale_lanes` (many channels side by
side), both made of :func:`rescale_step`, the one scalar update, applied per channel in increasing
group order. So "the same ``P`` gives the same bits" holds by construction; the tests check it.

Non-finite activations are refused (llama.cpp's ``MAX`` and gguf-py's ``max`` disagree on NaN).
When ``amax`` is so small that ``1/d`` overflows f32 (``amax`` below about ``3.7e-37``), C
converts ``±inf`` to int8, which it leaves undefined; the codec does what x86 does (``a = 0``)
and the numpy reference takes ``id = 0`` (``a = 0``); ``da`` is 0 there anyway.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from ..formats import blocks as _blocks
from ..formats import qtypes
from ..formats._jit import lazy_njit
from ..formats.errors import BadInputError, UnsupportedError

QK8 = 32  # activation block (Q8_0)

#: rescale family (``GGMLType.scheme``) -> the formula number used by :func:`rescale_step`.
#: ``k_scale`` (Q6_K, Q3_K) is the scale-only formula with G = 16; Q2_K is ``k_scale_min`` with G = 16.
SCALE, SCALE_MIN, K_SCALE_MIN = 0, 1, 2
SCHEME_KIND: dict[str, int] = {"scale": SCALE, "scale_min": SCALE_MIN, "k_scale": SCALE,
                               "k_scale_min": K_SCALE_MIN}


def qtype_of(qtype) -> qtypes.GGMLType:
    """The registry entry of a type with an integer form (docs/FORMAT.md §3), or UnsupportedError."""
    t = qtypes.get(qtype)
    if t.scheme is None:
        raise UnsupportedError(f"type {t.name} has no integer form; the standard dispatch does not apply")
    return t


def scheme_kind(qtype) -> int:
    return SCHEME_KIND[qtype_of(qtype).scheme]


# ---------------------------------------------------------------------------------------------
# 1. activation quantization
# ---------------------------------------------------------------------------------------------
def _as_activation_rows(x, what: str = "activations") -> tuple[np.ndarray, bool]:
    """``x`` as C-contiguous f32 ``[M, K]`` and whether it was 1-D."""
    arr = np.asarray(x)
    vector = arr.ndim == 1
    if arr.ndim not in (1, 2):
        raise BadInputError(f"{what} must be [K] or [M, K], got shape {arr.shape}")
    if arr.dtype != np.float32:
        if not np.issubdtype(arr.dtype, np.floating):
            raise BadInputError(f"{what} must be float32, got {arr.dtype}")
        arr = arr.astype(np.float32)
    arr = np.ascontiguousarray(arr.reshape(1, -1) if vector else arr)
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise BadInputError(f"{what} are empty (shape {arr.shape})")
    if arr.shape[1] % QK8:
        raise BadInputError(f"{what}: K={arr.shape[1]} is not a multiple of {QK8}")
    if not np.isfinite(arr).all():
        raise BadInputError(f"{what} contain non-finite values (NaN or inf)")
    return arr, vector


#: activation batches of at most this many values are quantized by the numpy twin
#: (:func:`quantize_activations_ref`, the same bytes): a small model's first verify then
#: never compiles the Q8_0 quantizer kernel
NUMPY_ACTIVATIONS = 1 << 16


def quantize_activations(x) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp ``quantize_row_q8_0_ref`` per row: ``x`` f32 ``[M, K]`` (or ``[K]``) ->
    ``(a int8 [M, K], da f32 [M, K/32])`` (for a 1-D ``x``, ``M = 1``).

    Runs the Q8_0 codec's quantizer (``formats.blocks.q8_0.quantize``, byte-identical with
    ggml's) and splits its blocks (:func:`quantize_activations_kernel`); a batch of at most
    :data:`NUMPY_ACTIVATIONS` values goes to the numpy twin, :func:`quantize_activations_ref`.
    """
    xr, _ = _as_activation_rows(x)
    if xr.size <= NUMPY_ACTIVATIONS:  # a small batch: the numpy twin is as fast, and compiles nothing
        return quantize_activations_ref(xr)
    return quantize_activations_kernel(xr)


def quantize_activations_kernel(x) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quantize_activations` by the Q8_0 codec's kernel at any size."""
    xr, _ = _as_activation_rows(x)
    m, k = xr.shape
    q = qtypes.Q8_0.codec_module.quantize(xr).reshape(m, k // QK8, 2 + QK8)
    a = np.ascontiguousarray(q[:, :, 2:]).view(np.int8).reshape(m, k)
    da = _f16(np.ascontiguousarray(q[:, :, :2]).view("<u2").reshape(m, k // QK8))
    return a, da


def quantize_activations_ref(x) -> tuple[np.ndarray, np.ndarray]:
    """numpy reference of :func:`quantize_activations`, written from the C source's steps."""
    xr, _ = _as_activation_rows(x)
    m, k = xr.shape
    blk = xr.reshape(m, k // QK8, QK8)
    amax = np.abs(blk).max(axis=2)  # f32; |x| and max are exact
    d = amax / np.float32(127)  # f32 division, as C's amax / ((1 << 7) - 1)
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.float32(1) / d
    ident = np.where((d != 0) & np.isfinite(inv), inv, np.float32(0)).astype(np.float32)
    v = blk * ident[:, :, None]  # f32 product, as C's x * id
    # roundf: half away from zero. |v| <= 127 (+ulps), so |v| + 0.5 is exact in f64.
    v64 = v.astype(np.float64)
    a = (np.sign(v64) * np.floor(np.abs(v64) + 0.5)).astype(np.int8)
    with np.errstate(over="ignore"):  # beyond f16's range: inf, as ggml's conversion
        da = d.astype(np.float16).astype(np.float32)  # f32 -> f16 rounds to nearest even, as ggml
    return a.reshape(m, k), da


def group_sums(a: np.ndarray, group: int) -> np.ndarray:
    """``A[m, g] = Σ a[m, g·G : (g+1)·G]`` as int32 ``[M, K/G]``."""
    m, k = a.shape
    return a.reshape(m, k // group, group).sum(axis=2, dtype=np.int32)


# ---------------------------------------------------------------------------------------------
# 2. integer partials
# ---------------------------------------------------------------------------------------------
def check_blocks(blocks, n: int, k: int, qtype) -> np.ndarray:
    """``blocks`` as uint8 ``[n, row_bytes]`` (a view when possible), or BadInputError."""
    t = qtypes.get(qtype)
    if n < 1 or k < 1 or k % t.block_size:
        raise BadInputError(f"{t.name} matrix [{n}, {k}]: K must be a positive multiple of {t.block_size}")
    raw = np.asarray(blocks)
    want = n * t.row_bytes(k)
    if raw.nbytes != want:
        raise BadInputError(f"{t.name} matrix [{n}, {k}] needs {want} bytes of blocks, got {raw.nbytes}")
    return np.ascontiguousarray(raw).reshape(-1).view(np.uint8).reshape(n, t.row_bytes(k))


def check_codes_activations(a, k: int) -> np.ndarray:
    """Quantized activations ``a`` as C-contiguous int8 ``[M, k]``, or BadInputError."""
    arr = np.asarray(a)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.dtype != np.int8 or arr.shape[1] != k or arr.shape[0] < 1:
        raise BadInputError(f"quantized activations must be int8 [M, {k}], got {arr.dtype} {arr.shape}")
    return np.ascontiguousarray(arr)


def _ro(dtype, ndim):
    """A read-only C-contiguous array type (writable arrays are accepted for it too)."""
    return types.Array(dtype, ndim, "C", readonly=True)


@lazy_njit(types.void(_ro(types.int16, 2), _ro(types.int8, 2), types.int64, types.int32[:, :, ::1]), cache=True)
def _partials_kernel(c, a, group, out):
    """Scalar reference: ``out[m, n, g] = Σ_k c[n, k]·a[m, k]`` over each group (int32 sums).
    (Unsigned indices into the row views: numba emits no negative-index wraparound, so LLVM
    vectorizes the group's sum, 10x here; the integer sums are the same in any order.)"""
    m_rows, k = a.shape
    n_rows = c.shape[0]
    ng = k // group
    for m in range(m_rows):
        am = a[m]
        for n in range(n_rows):
            cn = c[n]
            for g in range(ng):
                base = np.uint64(g * group)
                acc = np.int32(0)
                for j in range(np.uint64(group)):
                    acc += np.int32(cn[base + j]) * np.int32(am[base + j])
                out[m, n, g] = acc


def partials_from_codes(c: np.ndarray, a: np.ndarray, group: int) -> np.ndarray:
    """``P[m, n, g]`` (int32 ``[M, N, K/G]``) from integer codes ``c [N, K]`` (numba loops)."""
    c16 = np.ascontiguousarray(c, dtype=np.int16)
    a8 = check_codes_activations(a, c16.shape[1])
    out = np.empty((a8.shape[0], c16.shape[0], c16.shape[1] // group), np.int32)
    _partials_kernel(c16, a8, group, out)
    return out


def partials_ref(c: np.ndarray, a: np.ndarray, group: int) -> np.ndarray:
    """numpy reference of :func:`partials_from_codes` (int64 einsum, then int32)."""
    n, k = c.shape
    m = a.shape[0]
    cg = c.astype(np.int64).reshape(n, k // group, group)
    ag = a.astype(np.int64).reshape(m, k // group, group)
    return np.einsum("ngj,mgj->mng", cg, ag).astype(np.int32)


def integer_form(blocks, n: int, k: int, qtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(c int16 [n, k], s f32 [n, ng], o f32 [n, ng])`` of standard blocks (via the codec fields)."""
    t = qtype_of(qtype)
    raw = check_blocks(blocks, n, k, t)
    fields = _blocks.to_fields(raw, t, n, k)
    c = _blocks.integer_codes(fields, t)
    s, o = scale_arrays(fields, t)
    return c, s, o


def standard_partials(blocks, n: int, k: int, qtype, a) -> tuple[np.ndarray, np.ndarray]:
    """``(P int32 [M, n, K/G], A int32 [M, K/G])`` of standard blocks against int8 ``a [M, K]``."""
    t = qtype_of(qtype)
    raw = check_blocks(blocks, n, k, t)
    a8 = check_codes_activations(a, k)
    c = _blocks.integer_codes(_blocks.to_fields(raw, t, n, k), t)
    return partials_from_codes(c, a8, t.group), group_sums(a8, t.group)


# ---------------------------------------------------------------------------------------------
# 3. rescale
# ---------------------------------------------------------------------------------------------
def _f16(bits) -> np.ndarray:
    """f16 values stored as raw uint16 bits -> f32 (exact)."""
    return np.ascontiguousarray(bits).astype(np.uint16, copy=False).view(np.float16).astype(np.float32)


def _per_group(super_values: np.ndarray, groups_per_super: int) -> np.ndarray:
    return np.repeat(super_values, groups_per_super, axis=1)


def _scales_scale(fields, t):
    s = _f16(fields["d"])
    return s, np.zeros_like(s)


def _scales_scale_min(fields, t):
    return _f16(fields["d"]), _f16(fields["m"])


def _scales_k_scale_min(fields, t):
    per = qtypes.QK_K // t.group
    d = _per_group(_f16(fields["d"]), per)
    dmin = _per_group(_f16(fields["dmin"]), per)
    # f32 × f32, each product rounded once (numpy does not fuse)
    return d * fields["sc"].astype(np.float32), dmin * fields["m"].astype(np.float32)


def _scales_k_scale(fields, t):
    # s = f32(d)·f32(scale) (Q6_K), f32(d)·f32(sc − 32) (Q3_K): the registry's scale_field/offset
    per = qtypes.QK_K // t.group
    s = _per_group(_f16(fields["d"]), per) * _blocks.k_scales(fields, t).astype(np.float32)
    return s, np.zeros_like(s)


#: scheme -> how the per-(channel, group) factors ``s``, ``o`` are made from the codec fields.
_SCALE_BUILDERS = {
    "scale": _scales_scale,
    "scale_min": _scales_scale_min,
    "k_scale_min": _scales_k_scale_min,
    "k_scale": _scales_k_scale,
}


def scale_arrays(fields: dict[str, np.ndarray], qtype) -> tuple[np.ndarray, np.ndarray]:
    """The rescale factors ``(s, o)``, f32 ``[n, K/G]`` each, from codec fields (see module doc).

    ``fields`` holds the raw scale fields of ``formats.blocks.to_fields`` (``d``, ``m``, ``sc``,
    ``dmin``, ``scale``; ``codes`` is not needed); a layout that keeps the source's scale values
    can pass them rearranged to ``[n, ...]``. ``o`` is all zero for scale-only types.
    """
    t = qtype_of(qtype)
    s, o = _SCALE_BUILDERS[t.scheme](fields, t)
    return np.ascontiguousarray(s, np.float32), np.ascontiguousarray(o, np.float32)


@njit(inline="always")
def rescale_step(y, p, asum, s, o, da, kind):
    """One group's update of one output: the single definition of docs/FORMAT.md §3 step 3.

    ``y``, ``s``, ``o``, ``da`` float32; ``p``, ``asum`` int32; ``kind`` from :data:`SCHEME_KIND`.
    """
    pf = np.float32(p)
    if kind == SCALE_MIN:
        af = np.float32(asum)
        return y + ((pf * s) * da + (o * af) * da)
    if kind == K_SCALE_MIN:
        af = np.float32(asum)
        return y + ((s * pf) - (o * af)) * da
    return y + (pf * s) * da


@njit(inline="always")
def rescale_lanes(y, m, p, asum, s, o, t, g, da, kind, count):
    """One group's update of ``count`` outputs side by side: ``y[m, j] = rescale_step(y[m, j], p[j],
    asum, s[t, g, j], o[t, g, j], da, kind)``. ``kind`` is tested once, outside the loop, so each
    loop sees a constant formula and vectorises; the arithmetic is :func:`rescale_step`'s, unchanged.

    The factors (``[tiles, groups, lanes]``) are indexed in place, never taken as a view
    ``s[t, g]``: a view takes and drops a reference on the array's meminfo, an atomic add that
    the threads of one product, sharing the factors, contend on once a group (2 threads, Q6_K
    4096²: 0.96 ms a product with views, 0.61 ms without; one thread the same).
    """
    if kind == SCALE_MIN:
        for j in range(count):
            y[m, j] = rescale_step(y[m, j], p[j], asum, s[t, g, j], o[t, g, j], da, SCALE_MIN)
    elif kind == K_SCALE_MIN:
        for j in range(count):
            y[m, j] = rescale_step(y[m, j], p[j], asum, s[t, g, j], o[t, g, j], da, K_SCALE_MIN)
    else:
        for j in range(count):
            y[m, j] = rescale_step(y[m, j], p[j], asum, s[t, g, j], o[t, g, j], da, SCALE)


_RESCALE_SIG = types.void(
    _ro(types.int32, 3), _ro(types.int32, 2), _ro(types.float32, 2), _ro(types.float32, 2),
    _ro(types.float32, 2), types.int64, types.int64, types.float32[:, ::1],
)


@lazy_njit(_RESCALE_SIG, cache=True)
def _rescale_kernel(P, A, s, o, da, kind, group, out):
    m_rows, n_rows, ng = P.shape
    for m in range(m_rows):
        for n in range(n_rows):
            y = np.float32(0.0)
            for g in range(ng):
                y = rescale_step(y, P[m, n, g], A[m, g], s[n, g], o[n, g], da[m, (g * group) // QK8], kind)
            out[m, n] = y


def _check_rescale_args(P, A, s, o, da, t):
    P = np.asarray(P)
    if P.ndim != 3:
        raise BadInputError(f"partials P must be [M, N, groups], got shape {P.shape}")
    m, n, ng = P.shape
    k = ng * t.group
    want = {"A": (A, (m, ng)), "s": (s, (n, ng)), "o": (o, (n, ng)), "da": (da, (m, k // QK8))}
    if k % QK8:
        raise BadInputError(f"{t.name}: {ng} groups of {t.group} is not a whole number of activation blocks")
    for name, (arr, shape) in want.items():
        if np.shape(arr) != shape:
            raise BadInputError(f"rescale {t.name}: {name} must have shape {shape}, got {np.shape(arr)}")
    return (np.ascontiguousarray(P, np.int32), np.ascontiguousarray(A, np.int32),
            np.ascontiguousarray(s, np.float32), np.ascontiguousarray(o, np.float32),
            np.ascontiguousarray(da, np.float32))


def rescale(P, A, s, o, da, qtype) -> np.ndarray:
    """docs/FORMAT.md §3 step 3: f32 ``y [M, N]`` from partials ``P [M, N, ng]``, sums ``A [M, ng]``,
    factors ``s``/``o`` ``[N, ng]`` (``o`` may be None for scale-only types) and ``da [M, K/32]``.
    """
    t = qtype_of(qtype)
    if o is None:
        o = np.zeros(np.shape(s), np.float32)
    P, A, s, o, da = _check_rescale_args(P, A, s, o, da, t)
    out = np.empty(P.shape[:2], np.float32)
    _rescale_kernel(P, A, s, o, da, SCHEME_KIND[t.scheme], t.group, out)
    return out


def rescale_ref(P, A, s, o, da, qtype) -> np.ndarray:
    """numpy reference of :func:`rescale` (vectorised over M×N, the same f32 operations per group)."""
    t = qtype_of(qtype)
    if o is None:
        o = np.zeros(np.shape(s), np.float32)
    P, A, s, o, da = _check_rescale_args(P, A, s, o, da, t)
    kind = SCHEME_KIND[t.scheme]
    y = np.zeros(P.shape[:2], np.float32)
    for g in range(P.shape[2]):
        pf = P[:, :, g].astype(np.float32)
        af = A[:, g].astype(np.float32)[:, None]
        dg = da[:, (g * t.group) // QK8][:, None]
        sg, og = s[None, :, g], o[None, :, g]
        if kind == SCALE_MIN:
            y = y + ((pf * sg) * dg + (og * af) * dg)
        elif kind == K_SCALE_MIN:
            y = y + ((sg * pf) - (og * af)) * dg
        else:
            y = y + (pf * sg) * dg
    return y


# ---------------------------------------------------------------------------------------------
# the whole product
# ---------------------------------------------------------------------------------------------
def _shape_like(y: np.ndarray, vector: bool) -> np.ndarray:
    return y[0] if vector else y


def standard_matmul(blocks, n: int, k: int, qtype, x) -> np.ndarray:
    """``y = W·x`` by the standard dispatch: f32 ``[M, n]`` for ``x [M, k]`` (``[n]`` for ``x [k]``)."""
    t = qtype_of(qtype)
    xr, vector = _as_activation_rows(x)
    if xr.shape[1] != k:
        raise BadInputError(f"activations have K={xr.shape[1]}, the {t.name} matrix has K={k}")
    a, da = quantize_activations(xr)
    c, s, o = integer_form(blocks, n, k, t)
    P = partials_from_codes(c, a, t.group)
    return _shape_like(rescale(P, group_sums(a, t.group), s, o, da, t), vector)


def standard_matmul_ref(blocks, n: int, k: int, qtype, x) -> np.ndarray:
    """numpy-only twin of :func:`standard_matmul` (einsum partials, vectorised rescale)."""
    t = qtype_of(qtype)
    xr, vector = _as_activation_rows(x)
    a, da = quantize_activations(xr)
    c, s, o = integer_form(blocks, n, k, t)
    return _shape_like(rescale_ref(partials_ref(c, a, t.group), group_sums(a, t.group), s, o, da, t), vector)


# ---------------------------------------------------------------------------------------------
# sanity (docs/FORMAT.md §3): quantization error, not layout error
# ---------------------------------------------------------------------------------------------
def dequantize_f64(blocks, n: int, k: int, qtype) -> np.ndarray:
    """The weights as f64 ``[n, k]`` (gguf-py's dequantizer, bit-exact with ggml's)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    t = qtypes.get(qtype)
    raw = check_blocks(blocks, n, k, t)
    return dequantize(raw, GGMLQuantizationType(t.id)).astype(np.float64).reshape(n, k)


def sanity_reference(blocks, n: int, k: int, qtype, x) -> np.ndarray:
    """``f64(dequant(W)) · f64(x)``: ``[M, n]`` (``[n]`` for a 1-D ``x``)."""
    xr, vector = _as_activation_rows(x)
    w = dequantize_f64(blocks, n, k, qtype)
    return _shape_like(xr.astype(np.float64) @ w.T, vector)


def sanity_error(y, y64) -> float:
    """Relative L2 error ``‖y − y64‖ / ‖y64‖`` (0 when both are zero, inf when only ``y64`` is)."""
    y = np.asarray(y, np.float64)
    y64 = np.asarray(y64, np.float64)
    if y.shape != y64.shape:
        raise BadInputError(f"sanity_error: shapes differ, {y.shape} vs {y64.shape}")
    num = float(np.linalg.norm(y - y64))
    den = float(np.linalg.norm(y64))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den
