"""One activation row through a compiled tensor, with the per-call Python planned away (decode).

A decoded token runs ~120 matrix products of one activation row, each a few tens of
microseconds of kernel work. Through :meth:`panelpack.verify.compiled.Prepared.run` every
call also pays for checks, the activation quantizer's wrapper, the group sums, the kernel's
activation order, a new chunk length and numba's typing of a first-class function argument:
about 70 us, more than the work. :class:`RowProduct` does all of that once per tensor (buffers,
the tile function, a chunk table) and each call is one nopython function, :func:`_row_serial`
(or its parallel twin for large tensors, :func:`_row_parallel`), entered through its compiled
entry point:

    x f32 [K] ─ Q8_0 codec's _quantize_range (the very quantizer of dispatch.quantize_activations)
              ─ a int8 [1, K], da = f32(f16 d) [1, K/32], A [1, K/G], max |a|
              ─ a in the kernel's order (spec.activations: _act_tables.PAIR_ORDER for the AVX2 nibble tiles;
                an _act_tables.Recipe: the compact planes dots' row, tables appended)
              ─ chunk = chunks[max |a|]   (compiled._chunk, tabled for every max |a| at planning)
              ─ the tile function over every tile (the same call the drivers make)

So ``y`` is the bits :meth:`~panelpack.verify.compiled.Prepared.run` gives for the same ``x``
(tested). An input with a non-finite value makes the nopython function report it instead of
computing, and the call goes through the checked path, which refuses it as before.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

import numba
import numpy as np
from numba import config, njit, prange, types
from numba.extending import intrinsic

from ..formats import _jit, _numba_internals, qtypes  # noqa: F401  (_jit: numba's symbol names, before any compile)
from ..formats.blocks.f16 import f16_at
from . import _act_tables
from . import compiled as _c
from . import dispatch as _d

_Q8 = qtypes.Q8_0
_quantize_q8_0 = _Q8.codec_module._quantize_range  # blocks [b0, b1) of f32 x into Q8_0 bytes
_QB = _Q8.type_size  # 34: [d f16][qs i8 32]
_QK = _Q8.block_size


def _ro(dtype, ndim):
    return types.Array(dtype, ndim, "C", readonly=True)


_TILE = types.FunctionType(_c._TSIG)

if config.DISABLE_JIT:
    def _tile_at(tile, _unused):
        return tile
else:
    @intrinsic
    def _tile_at(typingctx, jit_addr, c_addr):
        """The tile function compiled at these two addresses (numba's own first-class function
        value: its numba-convention entry, used for the call, and its C wrapper). Unboxing a
        dispatcher as a function argument looks both up in Python on every call (about 30 us,
        a fifth of a small product); :meth:`RowProduct._plan` looks them up once."""
        def codegen(context, builder, sig, args):
            return _numba_internals.function_value(context, builder, _TILE, args[0], args[1])
        return _TILE(types.int64, types.int64), codegen


def _tile_addresses(tile) -> tuple:
    """What :func:`_tile_at` takes for ``tile`` (a compiled tile, which the caller keeps alive)."""
    if config.DISABLE_JIT:
        return tile, 0
    return _numba_internals.overload_addresses(tile, _c._TSIG)


_RSIG = types.boolean(
    types.int64, types.int64, _ro(types.float32, 1), types.uint8[::1], types.int8[:, ::1], types.int8[:, ::1],
    types.int32[:, ::1], types.float32[:, ::1], _ro(types.uint8, 1), _ro(types.int64, 1),
    _ro(types.float32, 3), _ro(types.float32, 3), types.int64, types.int64, _ro(types.int64, 1), types.int64,
    types.int64, types.int32[:, :, ::1], types.float32[:, ::1],
)


@njit(inline="always")
def _prologue(x, qbuf, a, a_k, A, da, group, mode, fill):
    """Quantize ``x`` into ``a``/``da`` (and ``a_k``, the kernel's row: ``mode`` is
    ``_act_tables.fill``'s, passed as ``fill``; 0 for ``a`` itself), sum ``A``; return ``max |a|``,
    or -1 when ``x`` holds a non-finite value (nothing else is then written)."""
    k = x.shape[0]
    for i in range(k):
        if not np.isfinite(x[i]):
            return -1
    nb = k // _QK
    _quantize_q8_0(x, qbuf, 0, nb)
    a_max = 0
    for b in range(nb):
        da[0, b] = f16_at(qbuf, b * _QB)
        for i in range(_QK):
            v = np.int8(qbuf[b * _QB + 2 + i])
            a[0, b * _QK + i] = v
            a_max = max(a_max, abs(np.int64(v)))
    for g in range(k // group):
        s = np.int32(0)
        for i in range(g * group, (g + 1) * group):
            s += np.int32(a[0, i])
        A[0, g] = s
    if mode:  # pair order (_simd.pair_order: each run of 4 as x0, x2, x1, x3) and/or tables
        fill(a, mode, a_k)
    return a_max


@njit(inline="always")
def _start(x, qbuf, a, a_k, A, da, group, mode, chunks, fill):
    """The chunk length for the tiles, or -1 for a non-finite ``x`` (see :func:`_prologue`)."""
    a_max = _prologue(x, qbuf, a, a_k, A, da, group, mode, fill)
    return chunks[a_max] if a_max >= 0 else -1


def _row_bodies(fill):
    """The row functions, closures over the activation-row builder ``fill`` (``_act_tables.fill``)
    they compile in: numba hashes a closure's cells into its cache key, and ``fill`` pickles with a
    digest of ``_act_tables``' source (its keyed intrinsics), so an edit there (the table bytes the
    tiles read) compiles the row functions afresh instead of loading a cached prologue that writes
    the old ones (numba's cache stamps only the file a function is defined in)."""

    def _row_serial(tile_j, tile_c, x, qbuf, a, a_k, A, da, w, geom, s_t, o_t, kind, group, chunks, mode, n, P, y):
        tile = _tile_at(tile_j, tile_c)
        chunk = _start(x, qbuf, a, a_k, A, da, group, mode, chunks, fill)
        for t in range(s_t.shape[0] if chunk >= 0 else 0):
            tile(np.int64(t), w, geom, a_k, A, s_t, o_t, da, kind, group, chunk, n, P, y, False, True)
        return chunk >= 0

    def _row_parallel(tile_j, tile_c, x, qbuf, a, a_k, A, da, w, geom, s_t, o_t, kind, group, chunks, mode, n, P, y):
        tile = _tile_at(tile_j, tile_c)
        chunk = _start(x, qbuf, a, a_k, A, da, group, mode, chunks, fill)
        nt = s_t.shape[0] if chunk >= 0 else 0
        for t in prange(nt):
            tile(np.int64(t), w, geom, a_k, A, s_t, o_t, da, kind, group, chunk, n, P, y, False, True)
        return chunk >= 0

    return _row_serial, _row_parallel


_row_serial, _row_parallel = _row_bodies(_act_tables.fill)


#: from this many multiply-adds a row product runs its tiles on numba's threads. Lower than
#: compiled.SERIAL_WORK (Prepared._run at M = 1): a row product has no per-call Python left to
#: amortise, and a 576 x 576 product (SmolLM2's smallest) is 9 tiles of 64 channels.
PARALLEL_WORK = 1 << 18

_ENTRIES: dict[bool, Callable] = {}


def _entry(parallel: bool) -> Callable:
    """The compiled function's entry point (argument unboxing only: numba's dispatcher would
    type the first-class tile argument on every call, about 20 us), or the Python function
    without the JIT."""
    fn = _ENTRIES.get(parallel)
    if fn is None:
        body = _row_parallel if parallel else _row_serial
        if config.DISABLE_JIT:
            fn = body
        else:
            disp = njit(_RSIG, parallel=parallel, cache=True)(body)
            cres = disp.overloads.get(_RSIG.args)
            fn = disp if cres is None else cres.entry_point
        _ENTRIES[parallel] = fn
    return fn


_HELD = threading.local()  # .depth: open held_chunks() blocks on this thread (numba's chunk size is per thread)


@contextlib.contextmanager
def held_chunks() -> Iterator[None]:
    """Hold numba's parallel chunk size at the tiles-per-grab of the compiled kernels for a block
    of :class:`RowProduct` calls: one set and one restore for a decoded token instead of one pair
    per matrix (each pair takes numba's launch lock, ~5-15 us; a decoded LFM2-350M token makes 70
    products). Calls inside run exactly as they would outside (same chunk size, same bits)."""
    previous = numba.set_parallel_chunksize(_c._TILES_PER_GRAB)
    _HELD.depth = getattr(_HELD, "depth", 0) + 1
    try:
        yield
    finally:
        _HELD.depth -= 1
        numba.set_parallel_chunksize(previous)


class RowProduct:
    """``y = W·x`` for one f32 row ``x [1, K]`` (or ``[K]``) -> f32 ``[1, N]``, bit-identical
    with ``prep.run(*dispatch.quantize_activations(x))``; buffers and plan made on the first call
    (a model that never decodes never compiles or loads the row functions)."""

    def __init__(self, prep: _c.Prepared):
        self.prep = prep
        self.n, self.k = prep.n, prep.k
        self._fn = None

    def _plan(self) -> None:
        prep = self.prep
        t = prep.qtype
        self._tile = _c._compiled(prep.spec.kernel)
        self._tile_args = _tile_addresses(self._tile)
        acts = prep.spec.activations
        if acts is None:
            self._mode, width = 0, self.k
        elif isinstance(acts, _act_tables.Recipe):
            self._mode, width = acts.mode, acts.width(self.k)
        else:
            raise NotImplementedError(f"{prep.spec.path}: activations other than an _act_tables.Recipe")
        self._qbuf = np.empty(self.k // _QK * _QB, np.uint8)
        self._a = np.empty((1, self.k), np.int8)
        self._a_k = np.empty((1, width), np.int8) if self._mode else self._a
        self._A = np.empty((1, self.k // t.group), np.int32)
        self._da = np.empty((1, self.k // _d.QK8), np.float32)
        self._P = np.empty((1, 1, 1), np.int32)
        self._kind = _d.SCHEME_KIND[t.scheme]
        self._chunks = np.array([_c._chunk(t.group, prep.spec.code_max, m) for m in range(129)], np.int64)
        self._parallel = self.n * self.k >= PARALLEL_WORK
        self._fn = _entry(self._parallel)
        p = prep
        self._tail = (self._qbuf, self._a, self._a_k, self._A, self._da, p.weights, p.geom, p.s_t, p.o_t, self._kind,
                      t.group, self._chunks, self._mode, self.n, self._P)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self._fn is None:
            self._plan()
        xr = x.reshape(-1) if x.dtype == np.float32 and x.flags.c_contiguous else None
        if xr is None or xr.shape[0] != self.k:
            return self._checked(x)
        y = np.empty((1, self.n), np.float32)
        args = (*self._tile_args, xr, *self._tail, y)
        if self._parallel and not getattr(_HELD, "depth", 0):
            previous = numba.set_parallel_chunksize(_c._TILES_PER_GRAB)
            try:
                ok = self._fn(*args)
            finally:
                numba.set_parallel_chunksize(previous)
        else:
            ok = self._fn(*args)
        return y if ok else self._checked(x)

    def _checked(self, x):
        """The validating path (it refuses what the nopython function would not compute)."""
        a, da = _d.quantize_activations(np.asarray(x).reshape(1, -1) if np.ndim(x) == 1 else x)
        return self.prep.run(a, da, want_p=False)[2]
