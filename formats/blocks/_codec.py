"""Input checks and shapes shared by the codec wrappers (the thin Python side of each kernel).

Kernels never raise for user errors; these helpers do, with a :class:`BadInputError` that
names the type and the problem. Callers that know the file and tensor (readers, converters)
catch and re-raise with that context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numba
import numpy as np

from .. import _numba_internals
from .._jit import RO_F32, RO_U8, RO_U16, lazy_njit, readonly
from ..errors import BadInputError
from ..qtypes import GGMLType
from ._bits import K_SCALES

#: Inputs with fewer elements than this run on the calling thread (a parallel launch costs
#: tens of microseconds, more than the work itself for one activation row).
PARALLEL_MIN_ELEMENTS = 1 << 18

#: Blocks per parallel work item: large enough to amortise scheduling, small enough to balance.
CHUNK_BLOCKS = 2048

@lazy_njit(inline="always")
def k_scale_min(blk, s):
    """Sub-block ``s``'s 6-bit ``(sc, m)`` from a Q4_K/Q5_K block (scales at bytes 4..15),
    read through the one table of the packing (``_bits.K_SCALES``, drawn in
    ``_bits.k_scale_parts``)."""
    v0 = np.int32(0)
    v1 = np.int32(0)
    for p in range(2):
        b, sh, nb, d = K_SCALES[0, s, p, 0], K_SCALES[0, s, p, 1], K_SCALES[0, s, p, 2], K_SCALES[0, s, p, 3]
        v0 |= ((np.int32(blk[4 + b]) >> sh) & ((1 << nb) - 1)) << d
        b, sh, nb, d = K_SCALES[1, s, p, 0], K_SCALES[1, s, p, 1], K_SCALES[1, s, p, 2], K_SCALES[1, s, p, 3]
        v1 |= ((np.int32(blk[4 + b]) >> sh) & ((1 << nb) - 1)) << d
    return np.int32(v0), np.int32(v1)


@lazy_njit(inline="always")
def k_scale_put(blk, s, sc, m):
    """Store sub-block ``s``'s 6-bit ``(sc, m)`` into a Q4_K/Q5_K block's scales (bytes 4..15),
    read-modify-write through ``_bits.K_SCALES``: once all 8 slots are stored every bit of the
    12 bytes is set, whatever they held before."""
    for f in range(2):
        v = np.int64(sc) if f == 0 else np.int64(m)
        for p in range(2):
            b, sh, nb, d = K_SCALES[f, s, p, 0], K_SCALES[f, s, p, 1], K_SCALES[f, s, p, 2], K_SCALES[f, s, p, 3]
            mask = (1 << nb) - 1
            cur = np.int64(blk[4 + b]) & ~(mask << sh)
            blk[4 + b] = np.uint8(cur | (((v >> d) & mask) << sh))


def _tag(kernel) -> str:
    """The type module a kernel comes from (``q4_k``): the name suffix of its factory-made twins."""
    return getattr(kernel, "py_func", kernel).__module__.rsplit(".", 1)[-1]


def _range_signature(words):
    """The numba signature of a dequantize range kernel ``(b, y, i0, i1, qk)``."""
    return numba.void(words, numba.float32[::1], numba.int64, numba.int64, numba.int64)


#: The numba signatures of a block type's range kernels: ``_dequantize_range(b, y, i0, i1, qk)``
#: (blocks ``[i0, i1)`` of the flat bytes ``b`` into the flat f32 ``y``) and
#: ``_quantize_range(x, out, b0, b1)``. A type module's range kernel is a three-line loop over its
#: ``inline_jit`` block body, which numba inlines (docs/DEVELOPING.md, "the codec surface").
DEQUANTIZE_RANGE = _range_signature(RO_U8)
QUANTIZE_RANGE = numba.void(RO_F32, numba.uint8[::1], numba.int64, numba.int64)


def _dequantize_loop(b, y, i0, i1, qk):
    # the template of every block type's ``_dequantize_range`` (see :func:`type_loop`): the
    # globals resolve in the type module
    for i in range(i0, i1):
        _dequantize_block(b[i * _TYPE_SIZE:i * _TYPE_SIZE + _TYPE_SIZE], y[i * qk:i * qk + qk], qk)  # noqa: F821


def _quantize_loop(x, out, b0, b1):
    # the template of the block-by-block ``_quantize_range`` (see :func:`type_loop`)
    iscr, fscr = block_scratch()
    for i in range(b0, b1):
        _quantize_block(x[i * _BLOCK_SIZE:i * _BLOCK_SIZE + _BLOCK_SIZE],  # noqa: F821
                        out[i * _TYPE_SIZE:i * _TYPE_SIZE + _TYPE_SIZE], iscr, fscr)  # noqa: F821


def type_loop(template, namespace: dict, qtype: GGMLType, signature, name: str):
    """A type module's range kernel: ``template``'s code as a function of the type module itself
    (its globals are ``namespace``'s names, its file the module's; ``namespace`` is read, never
    written). So the names it calls, the module's ``inline_jit`` block body, are module globals,
    which numba inlines; the block geometry (``_TYPE_SIZE``, ``_BLOCK_SIZE``, added to its
    globals here) is a compile-time constant; and numba caches the kernel beside the type module,
    invalidated when that file changes. The type module names the kernel (``name``) itself."""
    scope = {"_TYPE_SIZE": qtype.type_size, "_BLOCK_SIZE": qtype.block_size, "block_scratch": block_scratch,
             **namespace}
    fn = _numba_internals.rehome(template, scope, name)
    return lazy_njit(signature, cache=True, error_model="numpy")(fn)


@lazy_njit(cache=True)
def block_scratch():
    """The scratch a per-block quantizer body gets (the plain and the importance-weighted ones):
    int32 ``[4, 256]`` and f32 ``[4, 32]``."""
    return np.zeros((4, 256), np.int32), np.zeros((4, 32), np.float32)


def word_range(value_kernel):
    """The dequantize range kernel of a plain 16-bit type from ``value_kernel(word) -> f32``:
    elements ``[e0, e1)`` of the little-endian words ``b``."""

    @lazy_njit(_range_signature(RO_U16), cache=True, tag=_tag(value_kernel))
    def dequantize_range(b, y, e0, e1, qk):
        bs = b[e0:e1]
        ys = y[e0:e1]
        for e in range(ys.size):  # from 0: LLVM sees the bounds and vectorizes
            ys[e] = value_kernel(np.int64(bs[e]))

    return dequantize_range


def parallel_dequantize(range_kernel, words=RO_U8, chunk: int = CHUNK_BLOCKS, tag: str | None = None):
    """The parallel twin of a dequantize range kernel: ``prange`` over chunks of ``chunk`` units.

    ``range_kernel(b, y, i0, i1, qk)`` decodes units ``[i0, i1)`` (blocks of ``qk`` elements;
    single elements for plain types, ``qk = 1``); ``words`` is the numba type of ``b``.
    """

    @lazy_njit(numba.void(words, numba.float32[::1], numba.int64), parallel=True, error_model="numpy",
               tag=tag or _tag(range_kernel))
    def dequantize_parallel(b, y, qk):
        units = y.size // qk
        for c in numba.prange((units + chunk - 1) // chunk):
            range_kernel(b, y, c * chunk, min(units, (c + 1) * chunk), qk)

    return dequantize_parallel


def parallel_quantize(range_kernel, block: int, chunk: int = CHUNK_BLOCKS):
    """The parallel twin of a quantize range kernel ``range_kernel(x, out, b0, b1)``."""

    @lazy_njit(numba.void(RO_F32, numba.uint8[::1]), parallel=True, error_model="numpy", tag=_tag(range_kernel))
    def quantize_parallel(x, out):
        nb = x.size // block
        for c in numba.prange((nb + chunk - 1) // chunk):
            range_kernel(x, out, c * chunk, min(nb, (c + 1) * chunk))

    return quantize_parallel


@lazy_njit(cache=True, error_model="numpy")
def sum_squares(x):
    """``sum x[i]*x[i]`` in order, in f32 (ggml's ``sum_x2`` / ``sumx2``)."""
    s = np.float32(0)
    for i in range(x.size):
        s = s + x[i] * x[i]
    return s


def weighted_rows(block_kernel, qk: int, type_size: int):
    """The row kernel of an importance-weighted quantizer from its block kernel:
    ``rows(x, qw, out, r0, r1, k)`` quantizes rows ``[r0, r1)`` of the flat ``x`` (rows of
    ``k``) with the weights ``qw[k]``, calling ``block_kernel(xb, qb, blk, sigma2, iscr, fscr)``
    per block of ``qk`` values (``sigma2``: the row's ``sum x^2 / k``, which the 32-element
    types use; scratch ``iscr`` int32 ``[4, 256]`` and ``fscr`` f32 ``[4, 32]``)."""

    @lazy_njit(numba.void(RO_F32, RO_F32, numba.uint8[::1], numba.int64, numba.int64, numba.int64),
               cache=True, error_model="numpy", tag=_tag(block_kernel))
    def rows(x, qw, out, r0, r1, k):
        iscr, fscr = block_scratch()
        nb = k // qk
        for r in range(r0, r1):
            xr = x[r * k:r * k + k]
            sigma2 = sum_squares(xr) / np.float32(k)
            for i in range(nb):
                o = (r * nb + i) * type_size
                block_kernel(xr[i * qk:i * qk + qk], qw[i * qk:i * qk + qk], out[o:o + type_size], sigma2, iscr, fscr)

    return rows


def parallel_weighted(rows_kernel, tag: str | None = None):
    """The parallel twin of a weighted row kernel ``rows_kernel(x, qw, out, r0, r1, k)``: prange over rows."""

    @lazy_njit(numba.void(RO_F32, RO_F32, numba.uint8[::1], numba.int64, numba.int64), parallel=True,
               error_model="numpy", tag=tag or _tag(rows_kernel))
    def quantize_weighted_parallel(x, qw, out, n, k):
        for r in numba.prange(n):
            rows_kernel(x, qw, out, r, r + 1, k)

    return quantize_weighted_parallel


#: Blocks (or sub-blocks) processed side by side by the quantizers: lane ``l`` of a group is
#: block ``first + l``, and each step of ggml's scalar loop runs for all lanes at once, so the
#: per-block float operation order is ggml's while the work is SIMD across blocks.
LANES = 128


@lazy_njit(numba.void(RO_F32, numba.int64, numba.int64, numba.float32[:, ::1]), cache=True)
def load_lanes(x, first, nl, xt):
    """Transpose ``nl`` consecutive blocks of ``bs = xt.shape[0]`` values, starting at block
    ``first`` of the flat ``x``, into ``xt[e, l]`` (element ``e`` of block ``first + l``)."""
    bs = xt.shape[0]
    xs = x[first * bs:(first + nl) * bs]
    l = 0
    while l + 4 <= nl:  # four source blocks at a time: contiguous reads, 4-wide writes
        a = xs[l * bs:(l + 1) * bs]
        b = xs[(l + 1) * bs:(l + 2) * bs]
        c = xs[(l + 2) * bs:(l + 3) * bs]
        d = xs[(l + 3) * bs:(l + 4) * bs]
        for e in range(bs):
            row = xt[e]
            row[l] = a[e]
            row[l + 1] = b[e]
            row[l + 2] = c[e]
            row[l + 3] = d[e]
        l += 4
    for r in range(l, nl):
        for e in range(bs):
            xt[e, r] = xs[r * bs + e]


def as_blocks(blocks, qtype: GGMLType) -> np.ndarray:
    """``blocks`` as C-contiguous uint8, 1-D (flat) or 2-D ``[rows, row_bytes]``."""
    if isinstance(blocks, (bytes, bytearray, memoryview)):
        blocks = np.frombuffer(blocks, np.uint8)
    if not isinstance(blocks, np.ndarray):
        raise BadInputError(f"{qtype.name} blocks must be a numpy uint8 array, got {type(blocks).__name__}")
    if blocks.dtype != np.uint8:
        raise BadInputError(f"{qtype.name} blocks must be uint8, got {blocks.dtype}")
    if blocks.ndim not in (1, 2):
        raise BadInputError(f"{qtype.name} blocks must be 1-D or [rows, row_bytes], got shape {blocks.shape}")
    if blocks.shape[-1] % qtype.type_size:
        what = "row" if blocks.ndim == 2 else "buffer"
        raise BadInputError(
            f"{qtype.name}: {what} of {blocks.shape[-1]} bytes is not a whole number of "
            f"{qtype.type_size}-byte blocks"
        )
    return np.ascontiguousarray(blocks)


def ref_fields(blocks, qtype: GGMLType, plan) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
    """For the numpy references: the blocks' fields by ``plan`` and the f32 output shape."""
    b = as_blocks(blocks, qtype)
    shape = out_shape(b, qtype)
    n = b.shape[0] if b.ndim == 2 else 1
    return plan.to_fields(b, n, shape[-1]), shape


def out_shape(b: np.ndarray, qtype: GGMLType) -> tuple[int, ...]:
    """The f32 shape ``b`` (checked by :func:`as_blocks`) decodes to."""
    k = b.shape[-1] // qtype.type_size * qtype.block_size
    return (b.shape[0], k) if b.ndim == 2 else (k,)


def as_rows_f32(x, qtype: GGMLType) -> np.ndarray:
    """``x`` as C-contiguous float32, 1-D or 2-D, with a last axis made of whole blocks."""
    if not isinstance(x, np.ndarray):
        raise BadInputError(f"{qtype.name}: values to quantize must be a numpy array, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise BadInputError(f"{qtype.name}: values to quantize must be floating point, got {x.dtype}")
    if x.ndim not in (1, 2):
        raise BadInputError(f"{qtype.name}: values to quantize must be 1-D or [rows, K], got shape {x.shape}")
    if x.shape[-1] % qtype.block_size:
        raise BadInputError(
            f"{qtype.name}: K={x.shape[-1]} is not a multiple of the block size {qtype.block_size}"
        )
    return np.ascontiguousarray(x, dtype=np.float32)


def bytes_shape(x: np.ndarray, qtype: GGMLType) -> tuple[int, ...]:
    """The uint8 shape the f32 array ``x`` quantizes to (1-D stays 1-D)."""
    rb = x.shape[-1] // qtype.block_size * qtype.type_size
    return (x.shape[0], rb) if x.ndim == 2 else (rb,)


def check_out(out, shape: tuple[int, ...], dtype, qtype: GGMLType) -> np.ndarray:
    """A caller-provided output array must match exactly (shape, dtype, C order, writable)."""
    if (
        not isinstance(out, np.ndarray)
        or out.shape != shape
        or out.dtype != dtype
        or not out.flags.c_contiguous
        or not out.flags.writeable
    ):
        got = f"{getattr(out, 'shape', None)} {getattr(out, 'dtype', type(out).__name__)}"
        raise BadInputError(f"{qtype.name}: out must be a writable C-contiguous {np.dtype(dtype)} array of shape {shape}, got {got}")
    return out


def run_dequantize(qtype: GGMLType, blocks, out, range_kernel, parallel_kernel, words=None,
                   parallel: bool | None = None) -> np.ndarray:
    """Validate, allocate, and run a codec's dequantize kernel (serial when small).

    ``range_kernel(b, y, i0, i1, qk)`` decodes blocks ``[i0, i1)`` of the flat bytes ``b`` into
    the flat f32 ``y``; ``parallel_kernel(b, y, qk)`` does all of them across numba's threads.
    ``qk`` is the block size, passed at run time on purpose: a loop whose trip count LLVM
    cannot see gets vectorized (numba runs no SLP vectorizer), one of 16 or 32 is unrolled.
    ``words``: hand the kernel the bytes as this little-endian word type (F16/BF16: uint16),
    copying first in the rare case the buffer is not aligned for it. ``parallel``: None picks
    by size; False forces the calling thread (callers that run several tensors at once: a
    parallel launch waits for every core, which a busy machine does not give at once).
    """
    b = as_blocks(blocks, qtype)
    shape = out_shape(b, qtype)
    y = np.empty(shape, np.float32) if out is None else check_out(out, shape, np.float32, qtype)
    fb, fy = b.reshape(-1), y.reshape(-1)
    if words is not None:
        if fb.ctypes.data % np.dtype(words).itemsize:
            fb = fb.copy()
        fb = fb.view(np.dtype(words).newbyteorder("<")).astype(words, copy=False)
    if parallel is None:
        parallel = fy.size >= PARALLEL_MIN_ELEMENTS
    if not parallel:
        range_kernel(fb, fy, 0, fy.size // qtype.block_size, qtype.block_size)
    else:
        parallel_kernel(fb, fy, qtype.block_size)
    return y


def run_quantize(qtype: GGMLType, x, range_kernel, parallel_kernel, parallel: bool | None) -> np.ndarray:
    """Validate, allocate, and run a codec's quantize kernel.

    ``parallel``: None picks by size; False forces the calling thread; True numba's threads.
    """
    xr = as_rows_f32(x, qtype)
    out = np.empty(bytes_shape(xr, qtype), np.uint8)
    fx, fo = xr.reshape(-1), out.reshape(-1)
    if parallel is None:
        parallel = fx.size >= PARALLEL_MIN_ELEMENTS
    if parallel:
        parallel_kernel(fx, fo)
    else:
        range_kernel(fx, fo, 0, fx.size // qtype.block_size)
    return out


# ---- numpy references from the plan's fields (the ``decode_ref`` of the common shapes) ------
def f16_field(f: dict, name: str, repeat: int) -> np.ndarray:
    """The f16 field ``name`` of a plan's fields as f32, each value repeated ``repeat`` times
    along the row."""
    return f[name].view("<f2").astype(np.float32).repeat(repeat, axis=1)


def offset_ref(offset: int):
    """``decode_ref`` of the 32-element types with one scale: ``d * (code - offset)`` (Q4_0: 8,
    Q5_0: 16, Q8_0: 0, its codes signed already)."""
    def decode_ref(f: dict) -> np.ndarray:
        return f16_field(f, "d", 32) * (f["codes"].astype(np.float32) - np.float32(offset))

    return decode_ref


def min_ref(f: dict) -> np.ndarray:
    """``decode_ref`` of the 32-element types with a scale and a min (Q4_1, Q5_1): ``d * code + m``."""
    return f16_field(f, "d", 32) * f["codes"].astype(np.float32) + f16_field(f, "m", 32)


def k_min_ref(sub: int):
    """``decode_ref`` of the super-block types with sub-block scales and mins (Q2_K: ``sub`` =
    16, Q4_K and Q5_K: 32): ``(d * sc) * code - (dmin * m)``."""
    def decode_ref(f: dict) -> np.ndarray:
        per = f["sc"].shape[1] // f["d"].shape[1]  # sub-blocks per super-block
        ds = (f16_field(f, "d", per) * f["sc"].astype(np.float32)).repeat(sub, axis=1)
        ms = (f16_field(f, "dmin", per) * f["m"].astype(np.float32)).repeat(sub, axis=1)
        return ds * f["codes"].astype(np.float32) - ms

    return decode_ref


# ---- declaring a codec: its public surface, built from its plan and kernels ---------------
@dataclass(frozen=True)
class Codec:
    """The codec surface :func:`declare` builds for a type module, which names each piece it has
    as a module global in plain sight (``dequantize = CODEC.dequantize``; docs/DEVELOPING.md).
    ``None``: the type lacks that piece (and its module leaves the name out)."""

    dequantize: Callable[..., np.ndarray]
    dequantize_range: Any  # the range kernel ``(b, y, i0, i1, qk)`` (module global ``_dequantize_range``)
    dequantize_parallel: Any  # its parallel twin (``_dequantize_parallel``)
    to_fields: Any = None
    from_fields: Any = None
    dequantize_ref: Any = None
    quantize: Any = None
    quantize_range: Any = None  # (``_quantize_range``, when declare() built it from ``quantize_block``)
    quantize_parallel: Any = None  # (``_quantize_parallel``)
    quantize_weighted: Any = None
    quantize_weighted_parallel: Any = None  # (``_quantize_weighted_parallel``)
    quantize_ref: Any = None
    quantize_ref_is_numpy: bool = False  # all numpy: a small job may run it instead (formats/engine.py)

    @property
    def surface(self) -> tuple:
        """``(to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref)``: what
        every quantized type module names in one line (``to_fields, ..., quantize_ref = CODEC.surface``)."""
        return self.to_fields, self.from_fields, self.dequantize, self.dequantize_ref, self.quantize, self.quantize_ref


def declare(namespace: dict, qtype: GGMLType, plan=None, *, dequantize_range=None, dequantize_word=None,
            chunk: int = CHUNK_BLOCKS, decode_ref=None, quantize_range=None, quantize_block=None,
            quantize_chunk: int = CHUNK_BLOCKS, encode_ref=None, scalar_range=None,
            quantize_weighted_block=None) -> Codec:
    """The codec surface of docs/DEVELOPING.md for a type module (``namespace`` is its
    ``globals()``, read for its block bodies and file, never written), the way gguf-py's
    ``__init_subclass__`` registers a quant class: the module states its byte diagram, its
    :class:`~._bits.BlockPlan` and its kernels; this builds the rest, identically for every type,
    and the module names what it gets (:class:`Codec`).

    * ``to_fields`` / ``from_fields``: ``plan``'s, both ways (when there is a plan);
    * ``dequantize(blocks, out=None, parallel=None)``: validates, then ``dequantize_range(b, y,
      i0, i1, qk)`` on the calling thread for small inputs, else its parallel twin
      ``_dequantize_parallel`` over chunks of ``chunk`` units; the plain 16-bit types give
      ``dequantize_word(w) -> f32`` instead (the bytes read as little-endian uint16 words,
      see :func:`word_range`);
    * ``dequantize_ref(blocks)``: ``decode_ref(fields) -> f32 [n, k]``, numpy on the plan's
      fields, with invalid/overflow warnings off (NaN and inf payloads are data here);
    * ``quantize(x, parallel=None)`` and ``_quantize_parallel`` from ``quantize_range(x, out,
      b0, b1)`` (blocks ``[b0, b1)``), or from the module's ``inline_jit`` body
      ``quantize_block`` (``_quantize_block(xb, blk, iscr, fscr)``) in the one loop
      (:func:`type_loop`), when given;
    * ``quantize_weighted(x, weights, parallel=None)`` (an imatrix row) from
      ``quantize_weighted_block`` (see :func:`weighted_rows`), when given;
    * ``quantize_ref(x)``: ``encode_ref(x2d) -> fields`` (``x2d`` f32 ``[n, k]``, checked),
      packed by ``plan.from_fields``, when given; ``encode_ref="scalar"``: the range kernel's
      Python function run serially (the K-quant searches, whose reference is ggml's C), or
      ``scalar_range``'s when the fast range kernel is not ggml's loop block by block, or the
      per-block body ``quantize_block(xb, blk, iscr, fscr)``'s (with :func:`block_scratch`).
    """
    name = qtype.name
    out: dict[str, Any] = {}
    if plan is not None:
        out.update(to_fields=plan.to_fields, from_fields=plan.from_fields)
    for needed, body in ((dequantize_range is None and dequantize_word is None, "_dequantize_block"),
                         (quantize_range is None and quantize_block is not None, "_quantize_block")):
        if needed and body not in namespace:  # the loop template calls the module's body by this name
            raise TypeError(f"{name}: declare() needs the module's {body} (or the range kernel itself)")
    if quantize_block is not None and namespace.get("_quantize_block", quantize_block) is not quantize_block:
        raise TypeError(f"{name}: quantize_block must be the module's _quantize_block")
    words = None
    if dequantize_word is not None:
        dequantize_range, words = word_range(dequantize_word), np.uint16
    elif dequantize_range is None:  # the module's ``_dequantize_block`` in the one loop
        dequantize_range = type_loop(_dequantize_loop, namespace, qtype, DEQUANTIZE_RANGE, "_dequantize_range")
    par = parallel_dequantize(dequantize_range, RO_U8 if words is None else readonly(words), chunk,
                              tag=_tag(dequantize_word or dequantize_range))

    def dequantize(blocks: np.ndarray, out: np.ndarray | None = None, parallel: bool | None = None) -> np.ndarray:
        return run_dequantize(qtype, blocks, out, dequantize_range, par, words=words, parallel=parallel)

    dequantize.__doc__ = (f"uint8 ``[rows, row_bytes]`` (or flat) {name} blocks to f32 ``[rows, K]``; "
                          "bit-identical with gguf-py. ``parallel``: None picks by size.")
    out.update(dequantize=dequantize, dequantize_range=dequantize_range, dequantize_parallel=par)
    if decode_ref is not None:
        def dequantize_ref(blocks: np.ndarray) -> np.ndarray:
            f, shape = ref_fields(blocks, qtype, plan)
            with np.errstate(invalid="ignore", over="ignore"):
                return decode_ref(f).reshape(shape)

        dequantize_ref.__doc__ = f"numpy reference of {name} ``dequantize``, from the bit fields."
        out["dequantize_ref"] = dequantize_ref
    if quantize_range is None and quantize_block is not None:  # the module's ``_quantize_block`` in the one loop
        quantize_range = type_loop(_quantize_loop, namespace, qtype, QUANTIZE_RANGE, "_quantize_range")
        out["quantize_range"] = quantize_range
    if quantize_range is not None:
        qpar = parallel_quantize(quantize_range, qtype.block_size, quantize_chunk)

        def quantize(x: np.ndarray, parallel: bool | None = None) -> np.ndarray:
            return run_quantize(qtype, x, quantize_range, qpar, parallel)

        quantize.__doc__ = (f"f32 ``[rows, K]`` (or 1-D) to {name} blocks, byte-identical with ggml's "
                            "reference quantizer. ``parallel``: None picks by size.")
        out.update(quantize=quantize, quantize_parallel=qpar)
    if quantize_weighted_block is not None:
        quantize_weighted_rows = weighted_rows(quantize_weighted_block, qtype.block_size, qtype.type_size)
        wpar = parallel_weighted(quantize_weighted_rows, _tag(quantize_weighted_block))

        def quantize_weighted(x: np.ndarray, weights: np.ndarray, parallel: bool | None = None) -> np.ndarray:
            xr = as_rows_f32(x, qtype)
            k = xr.shape[-1]
            w = np.ascontiguousarray(weights, dtype=np.float32).reshape(-1)
            if w.size != k:
                raise BadInputError(f"{name}: {w.size} importance weights for rows of {k} values")
            out = np.empty(bytes_shape(xr, qtype), np.uint8)
            n = xr.size // k if k else 0
            if parallel is None:
                parallel = xr.size >= PARALLEL_MIN_ELEMENTS
            if parallel:
                wpar(xr.reshape(-1), w, out.reshape(-1), n, k)
            else:
                quantize_weighted_rows(xr.reshape(-1), w, out.reshape(-1), 0, n, k)
            return out

        quantize_weighted.__doc__ = (f"f32 ``[rows, K]`` to {name} blocks with importance weights ``[K]`` (an imatrix "
                                     "row), byte-identical with ggml's ``ggml_quantize_chunk`` given the same weights.")
        out.update(quantize_weighted=quantize_weighted, quantize_weighted_parallel=wpar)
    if encode_ref == "scalar":
        def quantize_ref(x: np.ndarray) -> np.ndarray:
            xr = as_rows_f32(x, qtype)
            out = np.empty(bytes_shape(xr, qtype), np.uint8)
            fx, fo = xr.reshape(-1), out.reshape(-1)
            nb = fx.size // qtype.block_size
            if quantize_block is not None:  # the block loop and the body as plain Python
                qk, ts = qtype.block_size, qtype.type_size
                iscr, fscr = block_scratch.py_func()
                for i in range(nb):
                    quantize_block.py_func(fx[i * qk:(i + 1) * qk], fo[i * ts:(i + 1) * ts], iscr, fscr)
            else:
                (scalar_range or quantize_range).py_func(fx, fo, 0, nb)
            return out

        quantize_ref.__doc__ = (f"scalar reference of {name} ``quantize``: the block loop as plain Python "
                                "(ggml's C order line by line), its search routines compiled.")
        out["quantize_ref"] = quantize_ref
    elif encode_ref is not None:
        def quantize_ref(x: np.ndarray) -> np.ndarray:
            xr = as_rows_f32(x, qtype)
            n, k = (xr.shape[0] if xr.ndim == 2 else 1), xr.shape[-1]
            fields = encode_ref(xr.reshape(n, k))
            return plan.from_fields(fields, n, k).reshape(bytes_shape(xr, qtype))

        quantize_ref.__doc__ = f"numpy reference of {name} ``quantize`` (ggml's scalar loop), packed by ``from_fields``."
        out.update(quantize_ref=quantize_ref, quantize_ref_is_numpy=True)
    return Codec(**out)
