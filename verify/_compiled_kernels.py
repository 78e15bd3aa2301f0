"""The compiled kernels of :mod:`panelpack.verify.compiled`: per layout the tile functions (64
output channels each: partials, then the shared rescale), their unpackers, and the one parallel
driver body that runs them (the rowmajor tiles' row decoders are :mod:`._row_decoders`'; the entry
points, the table of kernels per layout and type, and the driver's start-up are :mod:`.compiled`'s;
its docstring says how ``P`` is formed).

Every tile function is ``cache=True``: numba keys its cache by this file, so editing here
recompiles them once (docs/BENCHMARKS.md, "cold start").
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types

from ..formats._jit import closable_inline, lazy_njit, prefetch
from ..repack import panel64 as _panel64
from . import _simd
from . import il8 as _il8
from ._row_decoders import _row_q8_0
from .dispatch import rescale_lanes

TILE = _panel64.CHANNELS  # output channels per tile (= one panel64 super-block = 8 interleaved super-rows)
_INT8_KG = _panel64.INT8_KG_BYTES
_TILES_PER_GRAB = 2  # dynamic scheduling chunk of the parallel driver
I16_MAX = 32767

# kernel(w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y); inputs are
# typed read-only, so memory-mapped checkpoint and bundle files go in without a copy (writable
# arrays are accepted for read-only parameters)
def _ro(dtype, ndim):
    return types.Array(dtype, ndim, "C", readonly=True)


_KSIG = types.void(
    _ro(types.uint8, 1), _ro(types.int64, 1), _ro(types.int8, 2), _ro(types.int32, 2),
    _ro(types.float32, 3), _ro(types.float32, 3), _ro(types.float32, 2),
    types.int64, types.int64, types.int64, types.int64,
    types.int32[:, :, ::1], types.float32[:, ::1], types.boolean, types.boolean,
)


# =============================================================================================
# shared pieces (inlined into every kernel)
# =============================================================================================
@njit(inline="always")
def _tile_width(n, t):
    return min(TILE, n - t * TILE)


@njit(inline="always")
def _dot_cols(buf, a, m, k0, group, chunk, tw, h, acc):
    """``acc[j] = Σ_{kk < group} buf[kk, j]·a[m, k0 + kk]`` for ``j < tw`` (int32).

    With ``chunk > 0`` each run of ``chunk`` K is summed in int16 lanes first (the caller
    guarantees ``chunk·max|buf|·max|a| <= 32767``), which is what makes this fast.
    """
    for j in range(tw):
        acc[j] = 0
    if chunk > 0:
        for c0 in range(0, group, chunk):
            for j in range(tw):
                h[j] = 0
            for kk in range(c0, c0 + chunk, 8):
                a0 = a[m, k0 + kk]
                a1 = a[m, k0 + kk + 1]
                a2 = a[m, k0 + kk + 2]
                a3 = a[m, k0 + kk + 3]
                a4 = a[m, k0 + kk + 4]
                a5 = a[m, k0 + kk + 5]
                a6 = a[m, k0 + kk + 6]
                a7 = a[m, k0 + kk + 7]
                for j in range(tw):  # int16 products (numba computes wider; the store narrows)
                    h[j] += (np.int16(buf[kk, j]) * a0 + np.int16(buf[kk + 1, j]) * a1
                             + np.int16(buf[kk + 2, j]) * a2 + np.int16(buf[kk + 3, j]) * a3
                             + np.int16(buf[kk + 4, j]) * a4 + np.int16(buf[kk + 5, j]) * a5
                             + np.int16(buf[kk + 6, j]) * a6 + np.int16(buf[kk + 7, j]) * a7)
            for j in range(tw):
                acc[j] += h[j]
    else:
        for kk in range(0, group, 4):
            a0 = np.int32(a[m, k0 + kk])
            a1 = np.int32(a[m, k0 + kk + 1])
            a2 = np.int32(a[m, k0 + kk + 2])
            a3 = np.int32(a[m, k0 + kk + 3])
            for j in range(tw):
                acc[j] += (np.int32(buf[kk, j]) * a0 + np.int32(buf[kk + 1, j]) * a1
                           + np.int32(buf[kk + 2, j]) * a2 + np.int32(buf[kk + 3, j]) * a3)


@njit(cache=True)
def _rows_partials(codes, tw, a, group, pt):
    """Row tiles: ``pt[m, g, r] = Σ_k codes[r, gG + k]·a[m, gG + k]`` (int32 reductions along K).

    A plain (not inlined) function called once per tile; the 3-D views keep every index a
    non-negative loop counter, so the reductions vectorise without wraparound checks.
    """
    m_rows, k = a.shape
    ng = k // group
    c3 = codes.reshape(codes.shape[0], ng, group)
    a3 = a.reshape(m_rows, ng, group)
    for r in range(tw):
        for m in range(m_rows):
            for g in range(ng):
                acc = np.int32(0)
                for kk in range(group):
                    acc += np.int32(c3[r, g, kk]) * np.int32(a3[m, g, kk])
                pt[m, g, r] = acc


@njit(inline="always")
def _row_finish(ptm, m, tw, t, A, s_t, o_t, da, kind, group, P, y, want_p, want_y, yrow):
    """Row tiles, activation row ``m``: store its partials ``ptm`` ``[ng, TILE]`` into ``P``
    and/or rescale them, group by group, 64 channels at a time (``yrow``: [1, TILE] f32 of scratch)."""
    ng = ptm.shape[0]
    if want_p:
        for g in range(ng):
            for r in range(tw):
                P[m, t * TILE + r, g] = ptm[g, r]
    if want_y:
        for r in range(TILE):
            yrow[0, r] = np.float32(0.0)
        for g in range(ng):
            rescale_lanes(yrow, 0, ptm[g], A[m, g], s_t, o_t, t, g, da[m, (g * group) // 32], kind, TILE)
        for r in range(tw):
            y[m, t * TILE + r] = yrow[0, r]


@njit(cache=True)
def _rows_finish(pt, tw, t, A, s_t, o_t, da, kind, group, P, y, want_p, want_y):
    """Row tiles: :func:`_row_finish` of every activation row's partials ``pt[m]``."""
    yrow = np.empty((1, TILE), np.float32)
    for m in range(pt.shape[0]):
        _row_finish(pt[m], m, tw, t, A, s_t, o_t, da, kind, group, P, y, want_p, want_y, yrow)


# =============================================================================================
# column-tile unpackers: codes of group g of the tile -> buf[G][64]
#
# Each reads ``wt``, a 3-D view of the tile's bytes made once per tile by :func:`_tile_view`
# (``wt[unit row, unit, byte]``). Hot loops index such views with loop counters instead of
# slicing per step: every numba array view costs reference counting, and non-negative counters
# let LLVM drop the negative-index wraparound and vectorise.
# =============================================================================================
@njit(inline="always")
def _tile_view(w, first, count, units, unit_bytes):
    """Bytes of ``count`` consecutive unit rows from ``first`` as ``[count, units, unit_bytes]``."""
    row = units * unit_bytes
    return w[first * row:(first + count) * row].reshape(count, units, unit_bytes)


@lazy_njit(inline="always")
def _unpack_panel64_int8(wt, g, buf, tw):
    # panel64 int8 panel (docs/FORMAT.md §4.2); wt = [1, ng, G/4 * 256]: per kg-block q, byte 64v + 4ch + c
    # = int8 code of channel 16v + ch at K offset 4q + c, i.e. channel j's codes at 4j .. 4j+3
    for q in range(buf.shape[0] // 4):
        for c in range(4):
            for ch in range(TILE):
                buf[4 * q + c, ch] = np.int8(wt[0, g, _INT8_KG * q + 4 * ch + c])


@lazy_njit(inline="always")
def _unpack_x8_q4_0(wt, g, buf, tw):
    # block_q4_0x8; wt = [super-rows, nb, 144]: qs at +16, qs[64h + 8r + i] low nibble =
    # element 8h + i, high nibble = element 8h + i + 16, two's-complement int4 (the 0x88 XOR)
    for s in range(tw // 8):
        for h in range(2):
            for r in range(8):
                for i in range(8):
                    byte = np.int16(wt[s, g, 16 + 64 * h + 8 * r + i])
                    buf[8 * h + i, 8 * s + r] = ((byte & 15) ^ 8) - 8
                    buf[8 * h + i + 16, 8 * s + r] = ((byte >> 4) ^ 8) - 8


@lazy_njit(inline="always")
def _unpack_x8_q4_k(wt, g, buf, tw):
    # block_q4_Kx8; wt = [super-rows, nsb, 1152]: qs at +128, qs[64h + 8r + i] = row_r.qs[8h + i];
    # sub-block sub = g % 8 lives in h = 4(sub // 2) .. +3, low nibble if sub is even
    j = g // 8
    sub = g % 8
    first = 128 + 256 * (sub // 2)
    shift = 4 * (sub % 2)
    for s in range(tw // 8):
        for hh in range(4):
            for r in range(8):
                for i in range(8):
                    buf[8 * hh + i, 8 * s + r] = (wt[s, j, first + 64 * hh + 8 * r + i] >> shift) & 15


@lazy_njit(inline="always")
def _unpack_il8_nibble(wt, g, buf, tw):
    # il8-nibble; wt = [super-rows, nb, 128]: byte 16gg + i, low nibble = row i//4, high nibble =
    # row 4 + i//4, element 4gg + i%4; raw u (the offset is subtracted after the dot)
    for s in range(tw // 8):
        for gg in range(8):
            for i in range(16):
                byte = wt[s, g, 16 * gg + i]
                buf[4 * gg + i % 4, 8 * s + i // 4] = byte & 15
                buf[4 * gg + i % 4, 8 * s + 4 + i // 4] = byte >> 4


@lazy_njit(inline="always")
def _unpack_il8_int8(wt, g, buf, tw):
    # il8-int8; wt = [super-rows, nb, 256]: byte 32gg + 16h + 4r + c = int8 code of row 4h + r,
    # element 4gg + c
    for s in range(tw // 8):
        for gg in range(8):
            for h in range(2):
                for r in range(4):
                    for c in range(4):
                        buf[4 * gg + c, 8 * s + 4 * h + r] = np.int8(wt[s, g, 32 * gg + 16 * h + 4 * r + c])


# =============================================================================================
# the kernels: one tile function per table row (serial, compiled on first use), all run by one
# parallel driver (prange over tiles). Keeping the heavy bodies out of the parfor keeps compile
# time low (compile times: docs/BENCHMARKS.md, "cold start"; cache=True keeps them).
# =============================================================================================
# Column tiles: the panel64 nibble kernel reads its panels in place; the others are one loop
# (_column_tile) around each layout's view and unpacker. Every arithmetic piece is shared:
# _dot_cols for P, rescale_lanes (dispatch.rescale_step) for y. Lanes past tw compute on zero
# codes and zero factors and are never stored.
@njit(cache=True)
def _tile_panel64_nibble(t, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
    # Nibble panels are read in place, without an unpack buffer (twice as fast, measured): a
    # 128-byte kg-block is 64 little-endian u16 words, word c = channel c's bytes 2c | 2c+1 << 8,
    # i.e. its 4 codes at bits 0, 4, 8, 12 (K offsets 4q + 0..3).
    ng = s_t.shape[1]
    tw = _tile_width(n, t)
    off = geom[0]
    qpg = group // 4
    run = max(chunk // 4, 1)  # kg-blocks per int16 run (nibble rows always get chunk >= 16)
    words = _tile_view(w, t, 1, ng, qpg * 128).view(np.uint16).reshape(ng, qpg, TILE)
    h = np.empty(TILE, np.int16)
    acc = np.empty(TILE, np.int32)
    yt = np.zeros((a.shape[0], TILE), np.float32)
    for g in range(ng):
        k0 = g * group
        for m in range(a.shape[0]):
            for j in range(TILE):
                acc[j] = 0
            for q0 in range(0, qpg, run):
                for j in range(TILE):
                    h[j] = 0
                for q in range(q0, q0 + run):
                    a0 = np.int16(a[m, k0 + 4 * q])
                    a1 = np.int16(a[m, k0 + 4 * q + 1])
                    a2 = np.int16(a[m, k0 + 4 * q + 2])
                    a3 = np.int16(a[m, k0 + 4 * q + 3])
                    for j in range(TILE):
                        v = words[g, q, j]
                        h[j] += (np.int16(v & np.uint16(15)) * a0
                                 + np.int16((v >> np.uint16(4)) & np.uint16(15)) * a1
                                 + np.int16((v >> np.uint16(8)) & np.uint16(15)) * a2
                                 + np.int16(v >> np.uint16(12)) * a3)
                for j in range(TILE):
                    acc[j] += h[j]
            _group_done(acc, t, g, m, tw, off, A, s_t, o_t, da, kind, k0, P, yt, want_p, want_y)
    _tile_done(yt, t, tw, y, want_y)


@njit(inline="always")
def _group_done(acc, t, g, m, tw, off, A, s_t, o_t, da, kind, k0, P, yt, want_p, want_y):
    """A column tile's group ``g`` for row ``m``, once ``acc`` holds ``Σ u·a``: subtract
    ``off·A`` (raw codes; ``off`` 0 for signed ones), store ``P`` and/or add the group's
    rescale into ``yt``."""
    _group_done_with(acc, t, g, m, tw, off, A, s_t, o_t, t, g, da, kind, k0, P, yt, want_p, want_y)


@njit(inline="always")
def _group_done_with(acc, t, g, m, tw, off, A, s, o, st, sg, da, kind, k0, P, yt, want_p, want_y):
    """:func:`_group_done` with the group's 64 factors at ``s[st, sg]``, ``o[st, sg]``."""
    asum = A[m, g]
    offa = np.int32(off * asum)
    for j in range(TILE):
        acc[j] = acc[j] - offa
    if want_p:
        for j in range(tw):
            P[m, t * TILE + j, g] = acc[j]
    if want_y:
        rescale_lanes(yt, m, acc, asum, s, o, st, sg, da[m, k0 // 32], kind, TILE)


@njit(inline="always")
def _tile_done(yt, t, tw, y, want_y):
    """Store a column tile's ``tw`` finished outputs from ``yt`` into ``y``."""
    if want_y:
        for m in range(yt.shape[0]):
            for j in range(tw):
                y[m, t * TILE + j] = yt[m, j]


@closable_inline  # (a plain function in the tiles' closure cells: their cache keys stay stable)
def _int8_panel_in_place(w, t, g, ng, group, geom, scratch):
    # panel64 int8 panels (``c = code - code_offset``; byte ``256q + 4c + j`` = channel ``c`` at K ``4q + j``)
    # are the group dots' operand, read in place (AVX2: |c| < 128, every int8 type but Q8_0; AVX-512: any)
    return w, (t * ng + g) * (group * TILE)


def _tile_around(groups, scratch_bytes: int, name: str):
    """The tile ``tile_<name>`` that runs ``groups(t, w, geom, a, A, s_t, o_t, da, kind, group, n, P, yt, want_p,
    want_y, acc, scratch)``, a group loop compiled without reference counting (``_nrt=False``), on
    fresh buffers: ``yt`` f32 [M, TILE], ``acc`` int32 [TILE], ``scratch_bytes`` of scratch.
    Each array an inlined function receives takes and drops a reference (an atomic add on its
    meminfo); where the body uses it in a loop or branch, LLVM's pruning keeps the pair: a handful
    a group in the finish (12-23 % of a GEMV at M = 1, docs/BENCHMARKS.md #26). ``name`` (unique per
    tile) names numba's cache index: closures sharing one index race on its entry numbers when
    processes compile at once (``_jit.lazy_njit``'s ``tag``). The portable tiles keep their loops
    in the tile: their unpack and ``_dot_cols`` dominate, and the change measured no faster there."""

    def tile(t, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
        yt = np.zeros((a.shape[0], TILE), np.float32)
        groups(t, w, geom, a, A, s_t, o_t, da, kind, group, n, P, yt, want_p, want_y, np.empty(TILE, np.int32),
               np.empty(scratch_bytes, np.uint8))
        _tile_done(yt, t, _tile_width(n, t), y, want_y)

    tile.__name__ = tile.__qualname__ = f"tile_{name}"
    return njit(cache=True)(tile)


#: groups ahead whose weight bytes a SIMD column tile prefetches (all their cache lines): the
#: compact records' dots do more arithmetic per byte than the int8 dot, and without the hint the
#: hardware prefetcher fell behind them (Zen 3, streamed Q6_K: compact/int8 1.29-1.51 without,
#: 0.88-1.05 with; int8 alone unchanged within noise: docs/BENCHMARKS.md, "Issue 26 on AVX2")
PREFETCH_GROUPS = 8


def int8_group_tile(name: str, dot, operand, scratch_bytes: int, raw: bool = False, single=None, stride: int = 0,
                    single_raw: bool | None = None):
    """A column tile over int8 panels through an int8 group ``dot`` (_simd: AVX2, _simd512: VNNI;
    G = 16 or 32): per group ``operand(w, t, g, ng, group, geom, scratch)`` gives its panel's bytes
    and offset (in place, or expanded into ``scratch_bytes`` of scratch), a dot per activation row, the finish (_group_done);
    ``raw``: raw codes, the finish subtracts ``geom[0]·A``; ``single``: (dot, operand) for one row,
    ``single_raw`` (default ``raw``) its ``raw``;
    ``name``: the tile's, unique (:func:`_tile_around`); ``stride``: the bytes of ``w`` per group
    (group ``g`` of tile ``t`` at ``(t·ng + g)·stride``), whose lines :data:`PREFETCH_GROUPS` ahead are
    prefetched (0: no prefetch)."""
    dot1, operand1 = single or (dot, operand)
    raw1 = raw if single_raw is None else single_raw

    # compiled into the tile (cached there); named after it, as every closure a factory compiles
    # (the symbol numba gives it: formats/_numba_internals 11)
    @lazy_njit(cache=False, _nrt=False, tag=name)
    def groups(t, w, geom, a, A, s_t, o_t, da, kind, group, n, P, yt, want_p, want_y, acc, scratch):
        ng = s_t.shape[1]
        tw = _tile_width(n, t)
        k = a.shape[1]
        af = a.reshape(-1)
        off = geom[0] if raw else 0
        off1 = geom[0] if raw1 else 0
        for g in range(ng):
            if stride:  # (a hint: past the end of w it fetches nothing and never faults)
                ahead = (t * ng + g + PREFETCH_GROUPS) * stride
                for o in range(0, stride, 64):
                    prefetch(w, ahead + o)
            if a.shape[0] == 1:
                src1, at1 = operand1(w, t, g, ng, group, geom, scratch)
                dot1(src1, at1, af, g * group, acc)
                _group_done(acc, t, g, 0, tw, off1, A, s_t, o_t, da, kind, g * group, P, yt, want_p, want_y)
                continue
            src, at = operand(w, t, g, ng, group, geom, scratch)
            for m in range(a.shape[0]):
                dot(src, at, af, m * k + g * group, acc)
                _group_done(acc, t, g, m, tw, off, A, s_t, o_t, da, kind, g * group, P, yt, want_p, want_y)

    return _tile_around(groups, scratch_bytes, name)


if _simd.AVAILABLE:
    _nibble_group_dot = _simd.nibble_group_dot
    _f16_lanes = _simd.f16_lanes if _simd.F16_LANES else None

    def _nibble_avx2_tile(half: bool):
        """The AVX2 panel64 nibble tile; with ``half`` its twin that keeps the factors as f16
        (:func:`with_half_factors`: Q4_0, Q4_1, where s = f32(d) and o = f32(m) are f16 values):
        ``s_t``/``o_t`` are then f32 ``[tiles, ng, 32]`` arrays whose bytes are the f16
        ``[tiles, ng, 64]`` factors, widened exactly per group (:func:`_simd.f16_lanes`) into
        the scratch, so a decoded token streams 4 bytes of factors per 32 weights instead of 8."""

        @lazy_njit(cache=False, _nrt=False, tag="f16" if half else "f32")
        def groups(t, w, geom, a, A, s_t, o_t, da, kind, group, n, P, yt, want_p, want_y, acc, scratch):
            # The same partials as _tile_panel64_nibble, one group of 64 channels per call of the
            # vpmaddubsw sequence in _simd (exact: see there). Nibble types all have G = 32; ``a``
            # arrives in pair order (KernelSpec.activations: _act_tables.PAIR_ORDER), which only this kernel reads.
            ng = s_t.shape[1]
            tw = _tile_width(n, t)
            off = geom[0]
            k = a.shape[1]
            af = a.reshape(-1)
            so = scratch.view(np.float32).reshape(2, 1, 1, TILE)  # the f16 factors' group, widened
            s16 = s_t.reshape(-1).view(np.uint16)  # (reshaped once: each reshape is a call)
            o16 = o_t.reshape(-1).view(np.uint16)
            for g in range(ng):
                k0 = g * group
                base = (t * ng + g) * (group * 32)  # 32 bytes per K of a 64-channel nibble tile
                if half:
                    _f16_lanes(s16, (t * ng + g) * TILE, so[0])
                    _f16_lanes(o16, (t * ng + g) * TILE, so[1])
                for m in range(a.shape[0]):
                    _nibble_group_dot(w, base, af, m * k + k0, acc)
                    if half:
                        _group_done_with(acc, t, g, m, tw, off, A, so[0], so[1], 0, 0, da, kind, k0, P, yt, want_p,
                                         want_y)
                    else:
                        _group_done(acc, t, g, m, tw, off, A, s_t, o_t, da, kind, k0, P, yt, want_p, want_y)

        return _tile_around(groups, 2 * TILE * 4, "nibble_avx2_f16" if half else "nibble_avx2")

    _tile_panel64_nibble_avx2 = _nibble_avx2_tile(False)
    _tile_panel64_nibble_avx2_f16 = _nibble_avx2_tile(True) if _simd.F16_LANES else None
else:
    _tile_panel64_nibble_avx2 = None
    _tile_panel64_nibble_avx2_f16 = None


def _column_tile(view, unpack):
    """A column-tile kernel: ``view(w, t, tw, ng, group)`` is the tile's bytes as ``wt``,
    ``unpack(wt, g, buf, tw)`` reads group ``g``'s codes of the tile into ``buf[G][64]``.

    A factory rather than one shared inline helper: each kernel it returns is compiled with
    its view and unpacker as constants, the same code as a hand-written copy (a shared helper
    inlined a level deeper ran 1.6x slower), while the loop is written once. The cells are
    lazy kernels, which pickle by name, so numba's cache key for each kernel is stable.
    """

    @njit(cache=True)
    def tile(t, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
        ng = s_t.shape[1]
        tw = _tile_width(n, t)
        off = geom[0]
        wt = view(w, t, tw, ng, group)
        buf = np.zeros((group, TILE), np.int8)  # codes; lanes an unpacker does not fill stay 0
        h = np.empty(TILE, np.int16)
        acc = np.empty(TILE, np.int32)
        yt = np.zeros((a.shape[0], TILE), np.float32)
        for g in range(ng):
            unpack(wt, g, buf, tw)
            for m in range(a.shape[0]):
                _dot_cols(buf, a, m, g * group, group, chunk, TILE, h, acc)
                _group_done(acc, t, g, m, tw, off, A, s_t, o_t, da, kind, g * group, P, yt, want_p, want_y)
        _tile_done(yt, t, tw, y, want_y)

    return tile


# the tile's bytes per layout: panel64 = one super-block of ng groups of G/4 kg-blocks; the
# 8-row forms = the tile's tw/8 super-rows of units (blocks, or K-quant super-blocks). Unit sizes
# are the layouts' own (their plan() and constants, via il8.UNIT_BYTES), frozen in as constants.
_KG = _panel64.KG
_X8_Q4_0 = _il8.UNIT_BYTES["x8_q4_0"]
_X8_Q4_K = _il8.UNIT_BYTES["x8_q4_k"]
_NIBBLE = _il8.UNIT_BYTES["il8_nibble"]
_INT8 = _il8.UNIT_BYTES["il8_int8"]
_SR = _il8.ROWS  # rows per super-row


@lazy_njit(inline="always")
def _view_panel64_int8(w, t, tw, ng, group):
    return _tile_view(w, t, 1, ng, group // _KG * _INT8_KG)


@lazy_njit(inline="always")
def _view_x8_q4_0(w, t, tw, ng, group):
    return _tile_view(w, _SR * t, tw // _SR, ng, _X8_Q4_0)


@lazy_njit(inline="always")
def _view_x8_q4_k(w, t, tw, ng, group):
    return _tile_view(w, _SR * t, tw // _SR, ng // 8, _X8_Q4_K)


@lazy_njit(inline="always")
def _view_il8_nibble(w, t, tw, ng, group):
    return _tile_view(w, _SR * t, tw // _SR, ng, _NIBBLE)


@lazy_njit(inline="always")
def _view_il8_int8(w, t, tw, ng, group):
    return _tile_view(w, _SR * t, tw // _SR, ng, _INT8)


_tile_panel64_int8 = _column_tile(_view_panel64_int8, _unpack_panel64_int8)
_tile_x8_q4_0 = _column_tile(_view_x8_q4_0, _unpack_x8_q4_0)
_tile_x8_q4_k = _column_tile(_view_x8_q4_k, _unpack_x8_q4_k)
_tile_il8_nibble = _column_tile(_view_il8_nibble, _unpack_il8_nibble)
_tile_il8_int8 = _column_tile(_view_il8_int8, _unpack_il8_int8)


# rowmajor: geom = [row_bytes, blocks per row]
def _row_tile(decode):
    """A row-tile kernel: ``decode(wt, r, codes)`` writes row ``r``'s signed codes."""

    @njit(cache=True)
    def tile(t, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
        tw = _tile_width(n, t)
        wt = _tile_view(w, TILE * t, tw, geom[1], geom[0] // geom[1])
        codes = np.empty((TILE, geom[1], a.shape[1] // geom[1]), np.int16)
        pt = np.zeros((a.shape[0], s_t.shape[1], TILE), np.int32)  # lanes past tw stay 0
        for r in range(tw):
            decode(wt, r, codes)
        _rows_partials(codes.reshape(TILE, a.shape[1]), tw, a, group, pt)
        _rows_finish(pt, tw, t, A, s_t, o_t, da, kind, group, P, y, want_p, want_y)

    return tile


SCRATCH_MIN_ROWS = 4  # activation rows from which the AVX2 row tiles build their scratch tile


@njit(inline="always")
def _rows_portable(codes, tw, t, a, A, s_t, o_t, da, kind, group, P, y, want_p, want_y):
    """The portable row tile's partials and finish on the decoded (signed) codes."""
    pt = np.zeros((a.shape[0], s_t.shape[1], TILE), np.int32)
    _rows_partials(codes.reshape(TILE, a.shape[1]), tw, a, group, pt)
    _rows_finish(pt, tw, t, A, s_t, o_t, da, kind, group, P, y, want_p, want_y)


def _scratch_dots(dot, group_bytes):
    """The rest of an AVX2 row tile once its scratch tile is written: per group and activation
    row one call of the intrinsic ``dot`` (``group_bytes`` of scratch per group), then the
    column tiles' finish (``off·A`` subtracted, P and/or the rescale)."""

    @njit(inline="always")
    def finish(scratch, t, a, A, s_t, o_t, da, kind, group, n, P, y, want_p, want_y, off):
        tw = _tile_width(n, t)
        k = a.shape[1]
        af = a.reshape(-1)
        acc = np.empty(TILE, np.int32)
        yt = np.zeros((a.shape[0], TILE), np.float32)
        for g in range(s_t.shape[1]):
            k0 = g * group
            for m in range(a.shape[0]):
                dot(scratch, g * group_bytes, af, m * k + k0, acc)
                _group_done(acc, t, g, m, tw, off, A, s_t, o_t, da, kind, k0, P, yt, want_p, want_y)
        _tile_done(yt, t, tw, y, want_y)

    return finish


if _simd.AVAILABLE:
    _NIBBLE_GROUP_BYTES = _simd.KG_BLOCKS * _simd.KG_BYTES  # one group of a 64-channel nibble tile
    _nibble_scratch_dots = _scratch_dots(_simd.nibble_group_dot, _NIBBLE_GROUP_BYTES)

    def _row_tile_nibble_avx2(decode):
        """rowmajor 4-bit rows (Q4_0, Q4_1, Q4_K; G = 32) through the AVX2 panel64 kernel: the
        tile's rows are decoded (``decode``, as the portable row tile), re-biased to the raw code
        ``u = c + code_offset`` and written as one panel64 nibble tile in a scratch buffer, then
        each group is one ``vpmaddubsw`` sequence per activation row (:func:`_simd.nibble_group_dot`)
        and ``off·A`` is subtracted after it. The partials are the same exact int32 sums as the
        portable row tile's (tested against each other); the scratch costs one pass over the
        tile's codes, shared by the ``M`` activation rows. geom = [row_bytes, blocks per row,
        code_offset]::

            scratch[g·1024 + q·128 + 2c]     = u(c, 32g + 4q)     | u(c, 32g + 4q + 1) << 4
            scratch[g·1024 + q·128 + 2c + 1] = u(c, 32g + 4q + 2) | u(c, 32g + 4q + 3) << 4
        """

        @njit(cache=True)
        def tile(t, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
            tw = _tile_width(n, t)
            k = a.shape[1]
            ng = s_t.shape[1]
            off = geom[2]
            wt = _tile_view(w, TILE * t, tw, geom[1], geom[0] // geom[1])
            codes = np.zeros((TILE, geom[1], k // geom[1]), np.int16)  # lanes past tw stay 0
            for r in range(tw):
                decode(wt, r, codes)
            c4 = codes.reshape(TILE, ng, _simd.KG_BLOCKS, 4)
            if a.shape[0] < SCRATCH_MIN_ROWS:  # the scratch would cost more than it saves:
                for r in range(tw):  # codes into the activations' pair order (x0, x2, x1, x3)
                    for g in range(ng):
                        for q in range(_simd.KG_BLOCKS):
                            c4[r, g, q, 1], c4[r, g, q, 2] = c4[r, g, q, 2], c4[r, g, q, 1]
                _rows_portable(codes, tw, t, a, A, s_t, o_t, da, kind, group, P, y, want_p, want_y)
                return
            panel = np.empty(ng * _NIBBLE_GROUP_BYTES, np.uint8)
            for g in range(ng):
                for q in range(_simd.KG_BLOCKS):
                    at = g * _NIBBLE_GROUP_BYTES + q * _simd.KG_BYTES
                    for c in range(TILE):
                        panel[at + 2 * c] = np.uint8((c4[c, g, q, 0] + off) | ((c4[c, g, q, 1] + off) << 4))
                        panel[at + 2 * c + 1] = np.uint8((c4[c, g, q, 2] + off) | ((c4[c, g, q, 3] + off) << 4))
            _nibble_scratch_dots(panel, t, a, A, s_t, o_t, da, kind, group, n, P, y, want_p, want_y, off)

        return tile

    _INT8_GROUP_BYTES = _simd.INT8_GROUP_BYTES
    _int8_scratch_dots = _scratch_dots(_simd.int8_group_dot, _INT8_GROUP_BYTES)

    _int8_rows_dot = _simd.int8_rows_dot
    _ROWS = _simd.ROWS

    @njit(inline="always")
    def _q8_0_rows_partials(w, t, geom, a, tw, pt):
        """rowmajor Q8_0 partials read in place (M < SCRATCH_MIN_ROWS, no activation -128):
        ``pt[m, g, r]`` of the tile's rows 8 at a time, one :func:`_simd.int8_rows_dot` per
        block (``qs`` at byte 2 of each 34-byte block); the rows past the last 8 one by one."""
        row_bytes = geom[0]
        bsz = row_bytes // geom[1]
        k = a.shape[1]
        af = a.reshape(-1)
        acc = np.empty(_ROWS, np.int32)
        first = TILE * t * row_bytes
        full = tw - tw % _ROWS
        for m in range(a.shape[0]):
            for r0 in range(0, full, _ROWS):
                for g in range(geom[1]):
                    _int8_rows_dot(w, first + r0 * row_bytes + g * bsz + 2, row_bytes, af, m * k + g * 32, acc)
                    for r in range(_ROWS):
                        pt[m, g, r0 + r] = acc[r]
            for r in range(full, tw):
                for g in range(geom[1]):
                    at = first + r * row_bytes + g * bsz + 2
                    total = np.int32(0)
                    for kk in range(32):
                        total += np.int32(np.int8(w[at + kk])) * np.int32(af[m * k + g * 32 + kk])
                    pt[m, g, r] = total

    @njit(cache=True)
    def _tile_rowmajor_q8_0_avx2(t, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
        # rowmajor Q8_0 ([d f16][qs i8 32] per block = group) through the AVX2 int8 kernels.
        # Below SCRATCH_MIN_ROWS activation rows the rows are read in place (_q8_0_rows_partials;
        # an activation of -128 sends the tile to the portable row partials). From there the
        # tile's codes are copied into one int8 scratch tile (byte 2048g + 256q + 4c + j = code
        # of row c at K 32g + 4q + j), then one _simd.int8_group_dot per group and activation
        # row; a code of -128 (which vpsignb cannot negate there) sends the tile to the portable
        # row partials. All give the exact int32 sums (tested against each other).
        tw = _tile_width(n, t)
        k = a.shape[1]
        ng = s_t.shape[1]
        wt = _tile_view(w, TILE * t, tw, geom[1], geom[0] // geom[1])
        extreme = a.shape[0] < SCRATCH_MIN_ROWS  # then the scratch would cost more than it saves
        if extreme and a.min() > -128:
            pt = np.zeros((a.shape[0], ng, TILE), np.int32)  # lanes past tw stay 0
            _q8_0_rows_partials(w, t, geom, a, tw, pt)
            _rows_finish(pt, tw, t, A, s_t, o_t, da, kind, group, P, y, want_p, want_y)
            return
        scratch = np.zeros(0 if extreme else ng * _INT8_GROUP_BYTES, np.uint8)
        for c in range(0 if extreme else tw):
            for g in range(ng):
                for b in range(group):
                    v = wt[c, g, 2 + b]
                    extreme = extreme or v == 128
                    scratch[g * _INT8_GROUP_BYTES + (b // 4) * (4 * TILE) + 4 * c + b % 4] = v
        if extreme:
            codes = np.zeros((TILE, geom[1], k // geom[1]), np.int16)
            for r in range(tw):
                _row_q8_0(wt, r, codes)
            _rows_portable(codes, tw, t, a, A, s_t, o_t, da, kind, group, P, y, want_p, want_y)
            return
        _int8_scratch_dots(scratch, t, a, A, s_t, o_t, da, kind, group, n, P, y, want_p, want_y, 0)
    _q6_k_block_dot = _simd.q6_k_block_dot
    _Q6_K_BLOCK = _simd.Q6_K_BLOCK

    @njit(cache=True)
    def _tile_rowmajor_q6_k_avx2(t, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
        # rowmajor Q6_K: for each activation row, each super-block's 16 group sums of the raw codes
        # q are read in place (_simd.q6_k_block_dot), less off·A (c = q - off, off = geom[2] = 32):
        # the exact int32 partials of the portable row tile; then that row's finish (_row_finish,
        # as _rows_finish does for every row). Every row re-reads the tile's bytes (53 KB for K = 1024,
        # in L2): ~6x faster per row than decoding the codes once (the portable tile), so it runs
        # at every M (a decoded token's tied output, and eval's 64-position chunks).
        tw = _tile_width(n, t)
        k = a.shape[1]
        ng = s_t.shape[1]
        row_bytes = geom[0]
        off = np.int32(geom[2])
        af = a.reshape(-1)
        pt = np.zeros((ng, TILE), np.int32)  # lanes past tw stay 0
        yrow = np.empty((1, TILE), np.float32)
        acc = np.empty(16, np.int32)
        first = TILE * t * row_bytes
        for m in range(a.shape[0]):
            for r in range(tw):
                for j in range(geom[1]):
                    _q6_k_block_dot(w, first + r * row_bytes + j * _Q6_K_BLOCK, af, m * k + 256 * j, acc)
                    for i in range(16):
                        pt[16 * j + i, r] = acc[i] - off * A[m, 16 * j + i]
            _row_finish(pt, m, tw, t, A, s_t, o_t, da, kind, group, P, y, want_p, want_y, yrow)

    # groups of 16 K (Q6_K, Q2_K, Q3_K) or 32: the same exact int32 partials as _tile_panel64_int8
    _INT8_PANEL_TILES_AVX2 = {group: int8_group_tile(f"int8_avx2_g{group}", dot, _int8_panel_in_place, 0, stride=group * TILE)
                              for group, dot in ((16, _simd.int8_group_dot16), (32, _simd.int8_group_dot))}
else:
    _row_tile_nibble_avx2 = None
    _tile_rowmajor_q8_0_avx2 = None
    _tile_rowmajor_q6_k_avx2 = None
    _INT8_PANEL_TILES_AVX2 = {}


# the driver: one parallel loop over tiles for every table row; the tile function comes in as a
# first-class function value (numba FunctionType), so only one parfor is ever compiled
_TSIG = types.void(types.int64, *_KSIG.args)


def _drive(tile, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
    for t in prange(s_t.shape[0]):
        tile(np.int64(t), w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y)
