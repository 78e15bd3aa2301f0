"""Fast compiled kernels: ``P`` and ``y`` straight from each layout's bytes (whole-model checks).

Every kernel walks the output channels in **tiles of 64**, builds the int32 partials
``P[m, n, g]`` of docs/FORMAT.md §3 from the layout's own bytes, and finishes each channel with
:func:`panelpack.verify.dispatch.rescale_lanes` (64 channels at a time of
:func:`~panelpack.verify.dispatch.rescale_step`) in increasing group order: the same scalar
update :func:`~panelpack.verify.dispatch.rescale` is made of. So a kernel that gets ``P`` right
is bit-identical with the standard dispatch; the tests check both.

How ``P`` is formed, per tile and group ``g``:

* **panel64 nibble panels** (Q4_0, Q4_1, Q4_K): read in place. Where numba targets AVX2, one
  ``vpmaddubsw`` sequence per group (:mod:`panelpack.verify._simd`); elsewhere each 128-byte
  kg-block as 64 u16 words (one per channel, 4 codes at bits 0/4/8/12), multiply-added in
  int16 lanes. Both give the same exact int32 partials (tested against each other);
* **column tiles** (panel64 int8 panels, ``ggml-x8``, ``il8-nibble``, ``il8-int8``): an unpacker
  writes the group's codes for the 64 channels to ``buf[G][64]`` (int8), then
  ``P[:, tile, g] = Σ_k buf[k]·a[m, k]`` runs over the 64 lanes (:func:`_dot_cols`);
* **row tiles** (``rowmajor``, the standard blocks): each row is decoded to ``codes[K]`` and each
  group's ``P`` is a reduction along K (:func:`_rows_partials`).

Sums run in int16 lanes for runs of ``chunk`` K when that cannot overflow (:func:`_chunk`;
``chunk·max|code|·max|a| <= 32767``), in int32 otherwise. Raw-nibble forms hold ``u`` and
subtract ``offset·A[m, g]`` afterwards (``Σ (u − off)·a = Σ u·a − off·Σ a``, exact in int32).

Entry points: :func:`matmul`, :func:`partials`, and :func:`prepare` (a :class:`Prepared` tensor:
the layout's bytes plus the f32 rescale factors laid out per tile, built once, then
``.matmul(x)`` / ``.partials(a)`` / ``.run(a, da)`` / ``.matmul_and_partials(x)`` as often as
wanted).
:data:`KERNELS` maps ``(layout, type)`` to its tile function: the compiled rows of the verifier
registry (:mod:`panelpack.verify.registry`, keyed by layout name), whose entries name this
module's kernel factories (:func:`panel64_kernel`, :func:`rowmajor_kernel`, :func:`x8_kernel`,
:func:`il8_nibble_kernel`, :func:`il8_int8_kernel`). Region names and byte sizes come from each
layout module's ``plan()`` and constants. One parallel driver (``prange`` over tiles) runs every
kernel, taking the tile function as a first-class function value. Tile functions and the driver
compile on first use and are cached (``cache=True``); they are in :mod:`._compiled_kernels`,
this module keeps the entry points, the factories and the driver's start-up.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable, Mapping

import numba
import numpy as np
from numba import config, njit, types

from .. import repack
from ..formats import _numba_internals, qtypes
from ..formats import blocks as _blocks
from ..formats.errors import BadInputError, UnsupportedError
from ..repack import panel64 as _panel64
from . import _act_tables, _simd, _simd512
from . import dispatch as _d
from . import il8 as _il8
from . import registry as _registry
from ._compiled_kernels import (
    _INT8_PANEL_TILES_AVX2,
    _KSIG,
    _TILES_PER_GRAB,
    _TSIG,
    I16_MAX,
    SCRATCH_MIN_ROWS,  # noqa: F401  (rowvec and the tests read it here)
    TILE,
    _drive,
    _int8_panel_in_place,
    _row_tile,
    _row_tile_nibble_avx2,
    _tile_il8_int8,
    _tile_il8_nibble,
    _tile_panel64_int8,
    _tile_panel64_nibble,
    _tile_panel64_nibble_avx2,
    _tile_panel64_nibble_avx2_f16,
    _tile_rowmajor_q6_k_avx2,
    _tile_rowmajor_q8_0_avx2,
    _tile_x8_q4_0,
    _tile_x8_q4_k,
    int8_group_tile,
)
from ._row_decoders import (
    _row_q2_k,
    _row_q3_k,
    _row_q4_0,
    _row_q4_1,
    _row_q4_k,
    _row_q5_0,
    _row_q5_1,
    _row_q5_k,
    _row_q6_k,
    _row_q8_0,
)

log = logging.getLogger(__name__)



# =============================================================================================
# layouts: where the bytes are, and the rescale factors per (channel, group)
# =============================================================================================
def _region(regions: Mapping[str, np.ndarray], layout: str, qname: str, name: str, nbytes: int) -> np.ndarray:
    if name not in regions:
        raise BadInputError(f"layout {layout} {qname}: region {name!r} missing (have {sorted(regions)})")
    arr = np.ascontiguousarray(regions[name])
    if arr.nbytes != nbytes:
        raise BadInputError(f"layout {layout} {qname}: region {name!r} has {arr.nbytes} bytes, expected {nbytes}")
    return arr.reshape(-1).view(np.uint8)


def panel64_code_bytes(t, regions, n, k, layout=_panel64.NAME):
    """The code panels (nibble or int8; the first region of panel64's plan) as flat uint8."""
    codes = _panel64.plan(t, n, k)[0]
    return _region(regions, layout, t.name, codes.name, codes.nbytes)


def panel64_scale_arrays(t, regions, n, k, layout=_panel64.NAME):
    """The rescale factors ``(s, o)`` f32 ``[n, ng]`` from panel64's ``[SB][x][64]`` scale
    regions (every region of its plan after the panels, each named by its codec field)."""
    fields = {}
    for r in _panel64.plan(t, n, k)[1:]:
        sb, x, ch = r.shape
        raw = _region(regions, layout, t.name, r.name, r.nbytes)
        fields[r.name] = raw.view(r.np_dtype.newbyteorder("<")).reshape(sb, x, ch).transpose(0, 2, 1).reshape(sb * ch, x)[:n]
    return _d.scale_arrays(fields, t)


def _il8_bytes(t, regions, n, k, layout):
    f = _il8.form(layout, t, n, k)
    reg = _il8.region_bytes(f, regions, n, k)
    return reg[next(iter(f.regions))]


def _il8_scales(t, regions, n, k, layout):
    return _il8.il8_scales(layout, regions, n, k, t)


def _rowmajor_bytes(t, regions, n, k, layout=repack.rowmajor.NAME):
    return _region(regions, layout, t.name, "blocks", n * t.row_bytes(k))


_FIELD_ROWS = 4096  # rows per to_fields call (bounds its temporaries on 262k-row embeddings)


def _scale_fields(t, raw, n, k):
    """The block fields :func:`~panelpack.verify.dispatch.scale_arrays` reads: all but the
    codes (the codec's bit plan gathers only those; the codes were 90% of the time)."""
    plan = getattr(t.codec_module, "PLAN", None)
    if plan is None:
        return _blocks.to_fields(raw, t, n, k)
    return plan.to_fields(raw, n, k, names=[f for f in plan.fields if f != "codes"])


def _rowmajor_scales(t, regions, n, k, layout=repack.rowmajor.NAME):
    raw = _rowmajor_bytes(t, regions, n, k).reshape(n, t.row_bytes(k))
    s = np.empty((n, k // t.group), np.float32)
    o = np.empty((n, k // t.group), np.float32)
    for r0 in range(0, n, _FIELD_ROWS):
        r1 = min(n, r0 + _FIELD_ROWS)
        s[r0:r1], o[r0:r1] = _d.scale_arrays(_scale_fields(t, raw[r0:r1], r1 - r0, k), t)
    return s, o


@dataclass(frozen=True)
class KernelSpec:
    """One row of :data:`KERNELS`."""

    layout: str
    qtype: str
    kernel: Callable  # the tile function (a lazily compiled numba dispatcher)
    weights: Callable  # (t, regions, n, k, layout) -> uint8 bytes the kernel reads
    scales: Callable  # (t, regions, n, k, layout) -> (s, o) f32 [n, ng]
    geom: Callable  # (t, n, k) -> int64 constants the kernel reads
    code_max: int  # max |value| the unpacker puts in buf (bounds the int16 runs)
    row_multiple: int = 1
    activations: Callable | None = None  # a -> the int8 [M, K] the kernel reads, if not a itself
    # (an _act_tables.Recipe: pair order and/or the activation tables of the AVX2 tiles)
    variant: str = ""  # which implementation runs, for ledgers ("avx2", "avx512"; "" = the portable one)

    @property
    def path(self) -> str:
        """The kernel path's name in verification ledgers: ``compiled.<layout>[.<variant>]``."""
        return f"compiled.{self.layout}" + (f".{self.variant}" if self.variant else "")


def _geom_offset(off):
    return lambda t, n, k: np.array([off], np.int64)


def _geom_rows(t, n, k):
    return np.array([t.row_bytes(k), k // t.block_size], np.int64)


# the largest |c| of a type's signed code (c = code - code_offset)
def _signed_code_max(t):
    return max(t.code_offset, (1 << t.code_bits) - 1 - t.code_offset)


#: rowmajor: the row decoder of each type (the standard GGUF block layouts)
_ROW_TILES = {t: _row_tile(dec) for t, dec in (
    ("Q4_0", _row_q4_0), ("Q4_1", _row_q4_1), ("Q5_0", _row_q5_0), ("Q5_1", _row_q5_1),
    ("Q8_0", _row_q8_0), ("Q4_K", _row_q4_k), ("Q5_K", _row_q5_k), ("Q6_K", _row_q6_k),
    ("Q2_K", _row_q2_k), ("Q3_K", _row_q3_k))}
#: rowmajor 4-bit types (G = 32) where numba targets AVX2: the nibble tile of each decoder
_ROW_TILES_AVX2 = {} if _row_tile_nibble_avx2 is None else {
    **{t: _row_tile_nibble_avx2(dec) for t, dec in (("Q4_0", _row_q4_0), ("Q4_1", _row_q4_1), ("Q4_K", _row_q4_k))},
    "Q8_0": _tile_rowmajor_q8_0_avx2, "Q6_K": _tile_rowmajor_q6_k_avx2}


#: panel64 int8 panels (G = 16 or 32) through _simd512's VNNI group dot, where it runs
_INT8_PANEL_TILES_AVX512 = {group: int8_group_tile(f"int8_avx512_g{group}", dot, _int8_panel_in_place, 0, stride=group * TILE)
                            for group, dot in ((16, _simd512.int8_group_dot16), (32, _simd512.int8_group_dot))
                            } if _simd512.AVAILABLE else {}


def _nibble_tile(t):
    """(tile function, activation order, variant) of panel64 nibble panels: the AVX2 kernel
    where it runs (G = 32), else the portable one."""
    if _tile_panel64_nibble_avx2 is not None and t.group == _simd.GROUP:
        return _tile_panel64_nibble_avx2, _act_tables.PAIR_ORDER, "avx2"
    return _tile_panel64_nibble, None, ""


# ---- the kernel factories the verifier registry names, one per layout: (layout, t) -> spec ----
def panel64_kernel(layout: str, t) -> KernelSpec | None:
    if t.scheme is None:
        return None
    if t.code_bits == 4:  # nibble panels hold the raw code u; the kernel subtracts code_offset
        tile, order, variant = _nibble_tile(t)
        return KernelSpec(layout, t.name, tile, panel64_code_bytes, panel64_scale_arrays,
                          _geom_offset(t.code_offset), 15, activations=order, variant=variant)
    # int8 panels hold c = code - code_offset
    fast = _INT8_PANEL_TILES_AVX512.get(t.group)
    if fast is not None:  # through the AVX-512 VNNI group dot (_simd512; any int8 code, Q8_0's -128 too)
        return KernelSpec(layout, t.name, fast, panel64_code_bytes, panel64_scale_arrays, _geom_offset(0),
                          _signed_code_max(t), variant="avx512")
    fast = _INT8_PANEL_TILES_AVX2.get(t.group) if _signed_code_max(t) < 128 else None
    if fast is not None:  # through the AVX2 int8 group dot (_INT8_PANEL_TILES_AVX2, int8_group_tile)
        return KernelSpec(layout, t.name, fast, panel64_code_bytes, panel64_scale_arrays, _geom_offset(0),
                          _signed_code_max(t), variant="avx2")
    return KernelSpec(layout, t.name, _tile_panel64_int8, panel64_code_bytes, panel64_scale_arrays,
                      _geom_offset(0), _signed_code_max(t))


def _geom_rows_offset(t, n, k):
    return np.array([t.row_bytes(k), k // t.block_size, t.code_offset], np.int64)


def rowmajor_kernel(layout: str, t) -> KernelSpec | None:
    tile = _ROW_TILES.get(t.name)
    if tile is None:
        return None
    fast = _ROW_TILES_AVX2.get(t.name)
    if fast is not None and t.code_bits == 4:  # through the AVX2 nibble kernel (_row_tile_nibble_avx2)
        return KernelSpec(layout, t.name, fast, _rowmajor_bytes, _rowmajor_scales, _geom_rows_offset, 15,
                          activations=_act_tables.PAIR_ORDER, variant="avx2")
    if fast is not None and t.name == "Q6_K":  # super-blocks read in place, row by row (_tile_rowmajor_q6_k_avx2)
        return KernelSpec(layout, t.name, fast, _rowmajor_bytes, _rowmajor_scales, _geom_rows_offset,
                          _signed_code_max(t), variant="avx2")
    if fast is not None:  # Q8_0 through the AVX2 int8 kernel (_tile_rowmajor_q8_0_avx2)
        return KernelSpec(layout, t.name, fast, _rowmajor_bytes, _rowmajor_scales, _geom_rows,
                          _signed_code_max(t), variant="avx2")
    return KernelSpec(layout, t.name, tile, _rowmajor_bytes, _rowmajor_scales, _geom_rows, _signed_code_max(t))


def _column_kernel(tiles: dict[str, tuple[Callable, int, int]]) -> Callable[[str, qtypes.GGMLType], KernelSpec | None]:
    """A factory over ``type name -> (tile function, code offset subtracted, max |code|)``."""

    def factory(layout: str, t) -> KernelSpec | None:
        row = tiles.get(t.name)
        if row is None:
            return None
        tile, offset, code_max = row
        return KernelSpec(layout, t.name, tile, _il8_bytes, _il8_scales, _geom_offset(offset), code_max,
                          repack.get(layout).ROW_MULTIPLE)

    return factory


x8_kernel = _column_kernel({"Q4_0": (_tile_x8_q4_0, 0, 8), "Q4_K": (_tile_x8_q4_k, 0, 15)})
il8_nibble_kernel = _column_kernel({"Q4_0": (_tile_il8_nibble, 8, 15), "Q4_K": (_tile_il8_nibble, 0, 15)})
il8_int8_kernel = _column_kernel({"Q4_0": (_tile_il8_int8, 0, 8)})


def __getattr__(name: str):
    if name == "KERNELS":  # (layout, type name) -> KernelSpec: the compiled rows of the registry
        return _registry.compiled_kernels()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_DRIVER: list = []
_SERIAL_DRIVER: list = []

#: a call with fewer multiply-adds than this (M·N·K) runs its tiles on the calling thread: a
#: decoded token's layer products (M = 1, under 2 M MACs, tens of microseconds) cost less than
#: waking the thread pool, and on a shared host a parallel region waits for a thread that lost
#: its core. Tiles are computed independently, so the result is the same either way.
SERIAL_WORK = 1 << 22

#: below this many multiply-adds a call also runs on the calling thread while the parallel
#: driver is neither built in this process nor in numba's on-disk cache: its first build
#: (~1.2 s here, a parfor) costs more than a serial run of such a call (tens of ms at most), so
#: a small bundle's first verify never compiles it. Again the same result either way.
PARALLEL_COLD_WORK = 1 << 27


def _parallel_pays(work: int) -> bool:
    """Whether a call of ``work`` multiply-adds runs the parallel driver (else the serial one)."""
    if work < SERIAL_WORK:
        return False
    if _DRIVER or work >= PARALLEL_COLD_WORK or config.DISABLE_JIT:
        return True
    from ..formats._jit import cached_on_disk

    return cached_on_disk(_drive)


def _drive_serial(tile, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
    for t in range(s_t.shape[0]):
        tile(np.int64(t), w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y)


def _driver(serial: bool = False) -> Callable:
    """The parallel driver, or with ``serial`` its one-thread twin (compiled, or loaded from the
    cache, on first use)."""
    store, body = (_SERIAL_DRIVER, _drive_serial) if serial else (_DRIVER, _drive)
    if not store:
        if config.DISABLE_JIT:
            store.append(body)
        else:
            store.append(njit(types.void(types.FunctionType(_TSIG), *_KSIG.args), parallel=not serial,
                              cache=True)(body))
    return store[0]


_READY: dict = {}


def _compiled(tile: Callable):
    """A table row's tile function as the driver's first-class function argument.

    Compiled for :data:`_TSIG` on first use and wrapped once in numba's ``CompileResultWAP``
    (the wrapper-address protocol): handing the driver a bare dispatcher instead makes numba
    look the compiled address up again on every call (measured: docs/BENCHMARKS.md, #5). Without the JIT, the
    Python function itself.
    """
    wap = _READY.get(tile)
    if wap is None:
        if config.DISABLE_JIT:
            wap = tile
        else:
            log.debug("compiling (or loading from numba's cache) %s", tile.__name__)
            tile.compile(_TSIG.args)
            wap_class = _numba_internals.typed_wap_class()
            wap = tile if wap_class is None else wap_class(tile.overloads[_TSIG.args])
        _READY[tile] = wap
    return wap


def spec(layout: str, qtype) -> KernelSpec:
    t = _d.qtype_of(qtype)
    s = _registry.kernel_spec(layout, t)
    if s is None:
        have = sorted({lay for lay, _ in _registry.compiled_kernels()})
        raise UnsupportedError(f"no compiled kernel for layout {layout!r} with type {t.name} (layouts: {have})")
    return s


def _chunk(group: int, code_max: int, a_max: int) -> int:
    """The longest run (8, 16, 32; dividing ``group``) whose int16 sum cannot overflow, or 0."""
    best = 0
    for run in (8, 16, 32):
        if group % run == 0 and run * code_max * max(a_max, 1) <= I16_MAX:
            best = run
    return best


# =============================================================================================
# entry points
# =============================================================================================
@dataclass
class Prepared:
    """A tensor ready for the compiled kernels: its bytes and per-tile f32 rescale factors."""

    layout: str
    qtype: qtypes.GGMLType
    n: int
    k: int
    spec: KernelSpec
    weights: np.ndarray  # uint8, what the kernel reads
    geom: np.ndarray  # int64
    s_t: np.ndarray  # f32 [tiles, ng, 64]
    o_t: np.ndarray  # f32 [tiles, ng, 64] (the same array as s_t for scale-only types: unused)

    @property
    def groups(self) -> int:
        return self.k // self.qtype.group

    def _run(self, a, want_p: bool, want_y: bool, da=None):
        t = self.qtype
        m = a.shape[0]
        A = _d.group_sums(a, t.group)
        a_max = int(np.abs(a.astype(np.int16)).max()) if a.size else 0
        chunk = _chunk(t.group, self.spec.code_max, a_max)
        P = np.empty((m, self.n, self.groups) if want_p else (1, 1, 1), np.int32)
        y = np.empty((m, self.n) if want_y else (1, 1), np.float32)
        if da is None:
            da = np.zeros((m, self.k // _d.QK8), np.float32)
        a_k = a if self.spec.activations is None else self.spec.activations(a)
        args = (_compiled(self.spec.kernel), self.weights, self.geom, a_k, A, self.s_t, self.o_t, da,
                _d.SCHEME_KIND[t.scheme], t.group, chunk, self.n, P, y, want_p, want_y)
        if not _parallel_pays(m * self.n * self.k):
            _driver(serial=True)(*args)
            return P, A, y
        # tiles handed out a few at a time (not one static half per thread), so a thread that
        # loses its core for a while does not hold the whole call up
        previous = numba.set_parallel_chunksize(_TILES_PER_GRAB)
        try:
            _driver()(*args)
        finally:
            numba.set_parallel_chunksize(previous)
        return P, A, y

    def run(self, a, da, want_p: bool = True) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """``(P, A, y)`` in one pass from already quantized activations (``a int8 [M, k]``,
        ``da f32 [M, k/32]``, as :func:`~panelpack.verify.dispatch.quantize_activations` gives),
        so every path a verifier compares sees the very same activations. With ``want_p``
        False, ``P`` (``M·n·ng`` int32, large for a big embedding) is not kept and is None."""
        a8 = _d.check_codes_activations(a, self.k)
        da = np.asarray(da)
        if da.shape != (a8.shape[0], self.k // _d.QK8):
            raise BadInputError(f"activation scales da must have shape {(a8.shape[0], self.k // _d.QK8)},"
                                f" got {da.shape}")
        P, A, y = self._run(a8, want_p, True, np.ascontiguousarray(da, np.float32))
        return (P if want_p else None), A, y

    def partials(self, a) -> tuple[np.ndarray, np.ndarray]:
        """``(P int32 [M, n, ng], A int32 [M, ng])`` for int8 activations ``a [M, k]``."""
        a8 = _d.check_codes_activations(a, self.k)
        P, A, _ = self._run(a8, True, False)
        return P, A

    def matmul(self, x) -> np.ndarray:
        """``y`` f32 ``[M, n]`` (``[n]`` for ``x [k]``): quantize ``x``, partials, rescale."""
        xr, vector = _d._as_activation_rows(x)
        if xr.shape[1] != self.k:
            raise BadInputError(f"activations have K={xr.shape[1]}, the {self.qtype.name} matrix has K={self.k}")
        a, da = _d.quantize_activations(xr)
        _, _, y = self._run(a, False, True, da)
        return y[0] if vector else y

    def matmul_and_partials(self, x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(y, P, A)`` from one pass (for verification, which wants both)."""
        xr, _ = _d._as_activation_rows(x)
        if xr.shape[1] != self.k:
            raise BadInputError(f"activations have K={xr.shape[1]}, the {self.qtype.name} matrix has K={self.k}")
        a, da = _d.quantize_activations(xr)
        P, A, y = self._run(a, True, True, da)
        return y, P, A


def _tile_major(v: np.ndarray, n: int) -> np.ndarray:
    """``[n, ng]`` -> ``[ceil(n/64), ng, 64]`` (pad channels zero)."""
    tiles = -(-n // TILE)
    ng = v.shape[1]
    out = np.zeros((tiles * TILE, ng), np.float32)
    out[:n] = v
    return np.ascontiguousarray(out.reshape(tiles, TILE, ng).transpose(0, 2, 1))


def prepare(layout: str, regions: Mapping[str, np.ndarray], n: int, k: int, qtype) -> Prepared:
    """Check a packed tensor's regions and lay its rescale factors out for the kernels."""
    t = _d.qtype_of(qtype)
    sp = spec(layout, t)
    if isinstance(n, bool) or isinstance(k, bool) or int(n) < 1 or int(k) < 1:
        raise BadInputError(f"layout {layout} {t.name}: bad shape [{n}, {k}]")
    n, k = int(n), int(k)
    if k % t.block_size:
        raise UnsupportedError(f"layout {layout} {t.name}: K={k} is not a multiple of {t.block_size}")
    if n % sp.row_multiple:
        raise UnsupportedError(f"layout {layout} {t.name}: N={n} is not a multiple of {sp.row_multiple}")
    if not isinstance(regions, Mapping):
        raise BadInputError(f"layout {layout}: regions must be a mapping of name to array")
    w = sp.weights(t, regions, n, k, layout)
    s, o = sp.scales(t, regions, n, k, layout)
    s_t = _tile_major(s, n)
    # scale-only formulas never read o: share s's memory instead of carrying a zero array
    o_t = s_t if _d.SCHEME_KIND[t.scheme] == _d.SCALE else _tile_major(o, n)
    return Prepared(layout, t, n, k, sp, w, sp.geom(t, n, k), s_t, o_t)


def with_half_factors(prep: Prepared) -> Prepared:
    """``prep`` with its factors kept as f16 where that loses nothing (the AVX2 panel64 nibble
    kernel of Q4_0/Q4_1, every factor finite and an f16 value): half the factor bytes a decoded
    token streams (:func:`_tile_panel64_nibble_avx2_f16`, the same bits). Otherwise ``prep``."""
    if (_tile_panel64_nibble_avx2_f16 is None or prep.spec.kernel is not _tile_panel64_nibble_avx2
            or _d.SCHEME_KIND[prep.qtype.scheme] == _d.K_SCALE_MIN):
        return prep
    halves = []
    for v in (prep.s_t, prep.o_t):
        h = v.astype(np.float16)
        if not (np.isfinite(v).all() and np.array_equal(h.astype(np.float32).view(np.uint32), v.view(np.uint32))):
            return prep
        halves.append(np.ascontiguousarray(h).view(np.float32))  # [tiles, ng, 32]: the f16 bytes
    o_t = halves[0] if prep.o_t is prep.s_t else halves[1]
    spec = dataclasses.replace(prep.spec, kernel=_tile_panel64_nibble_avx2_f16, variant=prep.spec.variant + ".f16")
    return dataclasses.replace(prep, spec=spec, s_t=halves[0], o_t=o_t)


def partials(layout: str, regions, n: int, k: int, qtype, a) -> tuple[np.ndarray, np.ndarray]:
    """``(P int32 [M, n, K/G], A int32 [M, K/G])`` computed from the layout's bytes."""
    return prepare(layout, regions, n, k, qtype).partials(a)


def matmul(layout: str, regions, n: int, k: int, qtype, x) -> np.ndarray:
    """``y = W·x`` f32 ``[M, n]`` from the layout's bytes (bit-identical with the standard dispatch)."""
    return prepare(layout, regions, n, k, qtype).matmul(x)


# =============================================================================================
# numpy reference reader of panel64 (docs/FORMAT.md §4.2 closed form), for the tests
# =============================================================================================
def panel64_codes_ref(regions, n: int, k: int, qtype) -> np.ndarray:
    """Integer codes ``c [n, k]`` (int16) read back from panel64 regions by the closed form.

    Nibble panels: ``byte = ((sb·ng + k//G)·(G/4) + (k%G)//4)·128 + 2·(n%64) + (k%4)//2``,
    ``shift = 4·(k%2)``, value ``u − code_offset``. Int8 panels: ``byte = (…)·256 +
    64·((n%64)//16) + 4·(n%16) + k%4`` holds ``c`` itself.
    """
    t = _d.qtype_of(qtype)
    w = panel64_code_bytes(t, regions, n, k)
    ng = _panel64.geometry(t, n, k).ng
    nn, kk = np.meshgrid(np.arange(n), np.arange(k), indexing="ij")
    kg = ((nn // TILE) * ng + kk // t.group) * (t.group // 4) + (kk % t.group) // 4
    if t.code_bits == 4:
        byte = kg * 128 + 2 * (nn % TILE) + (kk % 4) // 2
        return ((w[byte] >> (4 * (kk % 2))) & 15).astype(np.int16) - np.int16(t.code_offset)
    byte = kg * 256 + 64 * ((nn % TILE) // 16) + 4 * (nn % 16) + kk % 4
    return w[byte].view(np.int8).astype(np.int16)
