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
compile on first use and are cached (``cache=True``).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable, Mapping

import numba
import numpy as np
from numba import config, njit, prange, types

from .. import repack
from ..formats import blocks as _blocks
from ..formats import qtypes
from ..formats._jit import lazy_njit
from ..formats.errors import BadInputError, UnsupportedError
from ..repack import panel64 as _panel64
from . import _simd
from . import dispatch as _d
from . import il8 as _il8
from . import registry as _registry
from .dispatch import rescale_lanes

log = logging.getLogger(__name__)

TILE = _panel64.CHANNELS  # output channels per tile (= one panel64 super-block = 8 interleaved super-rows)
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


@njit(cache=True)
def _rows_finish(pt, tw, t, A, s_t, o_t, da, kind, group, P, y, want_p, want_y):
    """Row tiles: store ``pt`` into ``P`` and/or rescale it, group by group, 64 channels at a time."""
    m_rows, ng = pt.shape[0], pt.shape[1]
    if want_p:
        for m in range(m_rows):
            for g in range(ng):
                for r in range(tw):
                    P[m, t * TILE + r, g] = pt[m, g, r]
    if want_y:
        yrow = np.empty(TILE, np.float32)
        for m in range(m_rows):
            for r in range(TILE):
                yrow[r] = np.float32(0.0)
            for g in range(ng):
                rescale_lanes(yrow, pt[m, g], A[m, g], s_t[t, g], o_t[t, g], da[m, (g * group) // 32], kind, TILE)
            for r in range(tw):
                y[m, t * TILE + r] = yrow[r]


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
                buf[4 * q + c, ch] = np.int8(wt[0, g, 256 * q + 4 * ch + c])


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
# row decoders (rowmajor = the standard GGUF blocks, docs/FORMAT.md §2): signed codes c of row r of the
# tile; wt = [rows, blocks, type_size] (a _tile_view), out = [TILE, blocks, block_size]
# =============================================================================================
@lazy_njit(inline="always")
def _row_q4_0(wt, r, out):
    # [d f16][qs 16]: element i < 16 low nibble of qs[i], i >= 16 high nibble of qs[i-16]; c = u - 8
    for b in range(wt.shape[1]):
        for i in range(16):
            v = np.int16(wt[r, b, 2 + i])
            out[r, b, i] = (v & 15) - 8
            out[r, b, 16 + i] = (v >> 4) - 8


@lazy_njit(inline="always")
def _row_q4_1(wt, r, out):
    # [d f16][m f16][qs 16]: nibbles as Q4_0; c = u
    for b in range(wt.shape[1]):
        for i in range(16):
            v = np.int16(wt[r, b, 4 + i])
            out[r, b, i] = v & 15
            out[r, b, 16 + i] = v >> 4


@njit(inline="always")
def _u32(wt, r, b, at):
    return (np.int64(wt[r, b, at]) | (np.int64(wt[r, b, at + 1]) << 8) | (np.int64(wt[r, b, at + 2]) << 16)
            | (np.int64(wt[r, b, at + 3]) << 24))


@lazy_njit(inline="always")
def _row_q5_0(wt, r, out):
    # [d f16][qh u32][qs 16]: low 4 bits as Q4_0, bit 4 of element e = (qh >> e) & 1; c = q - 16
    for b in range(wt.shape[1]):
        qh = _u32(wt, r, b, 2)
        for i in range(16):
            v = np.int16(wt[r, b, 6 + i])
            out[r, b, i] = ((v & 15) | np.int16(((qh >> i) & 1) << 4)) - 16
            out[r, b, 16 + i] = ((v >> 4) | np.int16(((qh >> (i + 16)) & 1) << 4)) - 16


@lazy_njit(inline="always")
def _row_q5_1(wt, r, out):
    # [d f16][m f16][qh u32][qs 16]: as Q5_0; c = q
    for b in range(wt.shape[1]):
        qh = _u32(wt, r, b, 4)
        for i in range(16):
            v = np.int16(wt[r, b, 8 + i])
            out[r, b, i] = (v & 15) | np.int16(((qh >> i) & 1) << 4)
            out[r, b, 16 + i] = (v >> 4) | np.int16(((qh >> (i + 16)) & 1) << 4)


@lazy_njit(inline="always")
def _row_q8_0(wt, r, out):
    # [d f16][qs i8 32]; c = q
    for b in range(wt.shape[1]):
        for i in range(32):
            out[r, b, i] = np.int8(wt[r, b, 2 + i])


@lazy_njit(inline="always")
def _row_q4_k(wt, r, out):
    # [d][dmin][scales 12][qs 128]: element 64c + l (l < 32) low nibble of qs[32c + l],
    # 64c + 32 + l the high nibble; c = q
    for j in range(wt.shape[1]):
        for c in range(4):
            for i in range(32):
                v = np.int16(wt[r, j, 16 + 32 * c + i])
                out[r, j, 64 * c + i] = v & 15
                out[r, j, 64 * c + 32 + i] = v >> 4


@lazy_njit(inline="always")
def _row_q5_k(wt, r, out):
    # [d][dmin][scales 12][qh 32][qs 128]: element e = 32s + l: low 4 bits nibble s%2 of
    # qs[32(s//2) + l], bit 4 = (qh[l] >> s) & 1; c = q
    for j in range(wt.shape[1]):
        for c in range(4):
            for i in range(32):
                v = np.int16(wt[r, j, 48 + 32 * c + i])
                hb = np.int16(wt[r, j, 16 + i])
                out[r, j, 64 * c + i] = (v & 15) | (((hb >> (2 * c)) & 1) << 4)
                out[r, j, 64 * c + 32 + i] = (v >> 4) | (((hb >> (2 * c + 1)) & 1) << 4)


@lazy_njit(inline="always")
def _row_q6_k(wt, r, out):
    # [ql 128][qh 64][scales i8 16][d f16]: e = 128h + 32g + l: low 4 bits nibble g//2 of
    # ql[64h + 32(g%2) + l], high 2 bits (qh[32h + l] >> 2g) & 3; c = q - 32
    for j in range(wt.shape[1]):
        for h in range(2):
            for i in range(32):
                l0 = np.int16(wt[r, j, 64 * h + i])
                l1 = np.int16(wt[r, j, 64 * h + 32 + i])
                hb = np.int16(wt[r, j, 128 + 32 * h + i])
                out[r, j, 128 * h + i] = ((l0 & 15) | ((hb & 3) << 4)) - 32
                out[r, j, 128 * h + 32 + i] = ((l1 & 15) | (((hb >> 2) & 3) << 4)) - 32
                out[r, j, 128 * h + 64 + i] = ((l0 >> 4) | (((hb >> 4) & 3) << 4)) - 32
                out[r, j, 128 * h + 96 + i] = ((l1 >> 4) | (((hb >> 6) & 3) << 4)) - 32


@lazy_njit(inline="always")
def _row_k_2bit(wt, r, out, o_qs, o_hm, bias):
    # Q2_K (o_hm < 0) and Q3_K: element e = 128h + 32j + l holds u = (qs[o_qs + 32h + l] >> 2j)
    # & 3, for Q3_K | ((hmask[o_hm + l] >> (4h + j)) & 1) << 2; c = u - bias
    for b in range(wt.shape[1]):
        blk = wt[r, b]
        ob = out[r, b]
        for e in range(256):
            h, j, l = e >> 7, (e >> 5) & 3, e & 31
            u = (np.int16(blk[o_qs + 32 * h + l]) >> (2 * j)) & 3
            if o_hm >= 0:
                u |= ((np.int16(blk[o_hm + l]) >> (4 * h + j)) & 1) << 2
            ob[e] = u - bias


@lazy_njit(inline="always")
def _row_q2_k(wt, r, out):
    # [scales 16][qs 64][d f16][dmin f16]; c = q
    _row_k_2bit(wt, r, out, 16, -1, 0)


@lazy_njit(inline="always")
def _row_q3_k(wt, r, out):
    # [hmask 32][qs 64][scales 12][d f16]; c = u - 4
    _row_k_2bit(wt, r, out, 32, 0, 4)


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
    _group_done_with(acc, t, g, m, tw, off, A, s_t[t, g], o_t[t, g], da, kind, k0, P, yt, want_p, want_y)


@njit(inline="always")
def _group_done_with(acc, t, g, m, tw, off, A, s, o, da, kind, k0, P, yt, want_p, want_y):
    """:func:`_group_done` with the group's 64 factors ``s``, ``o`` given."""
    asum = A[m, g]
    offa = np.int32(off * asum)
    for j in range(TILE):
        acc[j] = acc[j] - offa
    if want_p:
        for j in range(tw):
            P[m, t * TILE + j, g] = acc[j]
    if want_y:
        rescale_lanes(yt[m], acc, asum, s, o, da[m, k0 // 32], kind, TILE)


@njit(inline="always")
def _tile_done(yt, t, tw, y, want_y):
    """Store a column tile's ``tw`` finished outputs from ``yt`` into ``y``."""
    if want_y:
        for m in range(yt.shape[0]):
            for j in range(tw):
                y[m, t * TILE + j] = yt[m, j]


if _simd.AVAILABLE:
    _nibble_group_dot = _simd.nibble_group_dot
    _f16_lanes = _simd.f16_lanes if _simd.F16_LANES else None

    def _nibble_avx2_tile(half: bool):
        """The AVX2 panel64 nibble tile; with ``half`` its twin that keeps the factors as f16
        (:func:`with_half_factors`: Q4_0, Q4_1, where s = f32(d) and o = f32(m) are f16 values):
        ``s_t``/``o_t`` are then f32 ``[tiles, ng, 32]`` arrays whose bytes are the f16
        ``[tiles, ng, 64]`` factors, widened exactly per group (:func:`_simd.f16_lanes`), so a
        decoded token streams 4 bytes of factors per 32 weights instead of 8."""

        @njit(cache=True)
        def tile(t, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
            # The same partials as _tile_panel64_nibble, one group of 64 channels per call of the
            # vpmaddubsw sequence in _simd (exact: see there). Nibble types all have G = 32; ``a``
            # arrives in _simd.pair_order (KernelSpec.activations), which only this kernel reads.
            ng = s_t.shape[1]
            tw = _tile_width(n, t)
            off = geom[0]
            k = a.shape[1]
            af = a.reshape(-1)
            acc = np.empty(TILE, np.int32)
            s = np.empty(TILE, np.float32)
            o = np.empty(TILE, np.float32)
            yt = np.zeros((a.shape[0], TILE), np.float32)
            s16 = s_t.reshape(-1).view(np.uint16)  # (reshaped once: each reshape is a call)
            o16 = o_t.reshape(-1).view(np.uint16)
            for g in range(ng):
                k0 = g * group
                base = (t * ng + g) * (group * 32)  # 32 bytes per K of a 64-channel nibble tile
                if half:
                    _f16_lanes(s16, (t * ng + g) * TILE, s)
                    _f16_lanes(o16, (t * ng + g) * TILE, o)
                for m in range(a.shape[0]):
                    _nibble_group_dot(w, base, af, m * k + k0, acc)
                    if half:
                        _group_done_with(acc, t, g, m, tw, off, A, s, o, da, kind, k0, P, yt, want_p, want_y)
                    else:
                        _group_done(acc, t, g, m, tw, off, A, s_t, o_t, da, kind, k0, P, yt, want_p, want_y)
            _tile_done(yt, t, tw, y, want_y)

        return tile

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
_INT8_KG = _panel64.INT8_KG_BYTES
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
        # the exact int32 partials of the portable row tile; then that row's finish, the steps of
        # _rows_finish in the same order. Every row re-reads the tile's bytes (53 KB for K = 1024,
        # in L2): ~6x faster per row than decoding the codes once (the portable tile), so it runs
        # at every M (a decoded token's tied output, and eval's 64-position chunks).
        tw = _tile_width(n, t)
        k = a.shape[1]
        ng = s_t.shape[1]
        row_bytes = geom[0]
        off = np.int32(geom[2])
        af = a.reshape(-1)
        pt = np.zeros((ng, TILE), np.int32)  # lanes past tw stay 0
        yrow = np.empty(TILE, np.float32)
        acc = np.empty(16, np.int32)
        first = TILE * t * row_bytes
        for m in range(a.shape[0]):
            for r in range(tw):
                for j in range(geom[1]):
                    _q6_k_block_dot(w, first + r * row_bytes + j * _Q6_K_BLOCK, af, m * k + 256 * j, acc)
                    for i in range(16):
                        pt[16 * j + i, r] = acc[i] - off * A[m, 16 * j + i]
            if want_p:
                for g in range(ng):
                    for r in range(tw):
                        P[m, t * TILE + r, g] = pt[g, r]
            if want_y:
                for r in range(TILE):
                    yrow[r] = np.float32(0.0)
                for g in range(ng):
                    rescale_lanes(yrow, pt[g], A[m, g], s_t[t, g], o_t[t, g], da[m, (g * group) // 32], kind, TILE)
                for r in range(tw):
                    y[m, t * TILE + r] = yrow[r]

    _int8_group_dot32 = _simd.int8_group_dot
    _int8_group_dot16 = _simd.int8_group_dot16

    def _int8_panel_avx2_tile(g16: bool):
        """panel64 int8 panels (``c = code - code_offset``, |c| < 128: every int8 type but Q8_0)
        through _simd's int8 group dot, read in place: the panel bytes of a group are already its
        operand (byte ``256q + 4c + j`` = code of channel ``c`` at K ``4q + j``). ``g16``: groups of
        16 K (Q6_K, Q2_K, Q3_K), else 32. The same exact int32 partials as _tile_panel64_int8."""

        @njit(cache=True)
        def tile(t, w, geom, a, A, s_t, o_t, da, kind, group, chunk, n, P, y, want_p, want_y):
            ng = s_t.shape[1]
            tw = _tile_width(n, t)
            k = a.shape[1]
            af = a.reshape(-1)
            acc = np.empty(TILE, np.int32)
            yt = np.zeros((a.shape[0], TILE), np.float32)
            for g in range(ng):
                k0 = g * group
                base = (t * ng + g) * (group * TILE)  # 64 bytes per K of a 64-channel int8 tile
                for m in range(a.shape[0]):
                    if g16:
                        _int8_group_dot16(w, base, af, m * k + k0, acc)
                    else:
                        _int8_group_dot32(w, base, af, m * k + k0, acc)
                    _group_done(acc, t, g, m, tw, 0, A, s_t, o_t, da, kind, k0, P, yt, want_p, want_y)
            _tile_done(yt, t, tw, y, want_y)

        return tile

    _INT8_PANEL_TILES_AVX2 = {16: _int8_panel_avx2_tile(True), 32: _int8_panel_avx2_tile(False)}
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
    variant: str = ""  # which implementation runs, for ledgers ("avx2"; "" = the portable one)

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


def _nibble_tile(t):
    """(tile function, activation order, variant) of panel64 nibble panels: the AVX2 kernel
    where it runs (G = 32), else the portable one."""
    if _tile_panel64_nibble_avx2 is not None and t.group == _simd.GROUP:
        return _tile_panel64_nibble_avx2, _simd.pair_order, "avx2"
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
    fast = _INT8_PANEL_TILES_AVX2.get(t.group) if _signed_code_max(t) < 128 else None
    if fast is not None:  # through the AVX2 int8 group dot (_int8_panel_avx2_tile)
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
                          activations=_simd.pair_order, variant="avx2")
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
            wap_class = _typed_wap_class()
            wap = tile if wap_class is None else wap_class(tile.overloads[_TSIG.args])
        _READY[tile] = wap
    return wap


_WAP_CLASS: list = []


def _typed_wap_class():
    """numba's ``CompileResultWAP`` with its numba type computed once (None if numba lacks it).

    The driver's dispatcher types every argument on every call; for a ``CompileResultWAP`` that
    means rebuilding its signature and FunctionType, about 25 us a call (measured), more than a
    small tile's work. The subclass registers a ``typeof`` that returns the stored type.
    """
    if not _WAP_CLASS:
        try:  # numba-internal (checked on 0.59-0.68); the dispatcher itself also works
            from numba.core.types.function_type import CompileResultWAP
        except ImportError:  # pragma: no cover - depends on the numba release
            _WAP_CLASS.append(None)
        else:
            from numba.extending import typeof_impl

            class TypedWAP(CompileResultWAP):
                def __init__(self, cres):
                    super().__init__(cres)
                    self.numba_type = types.FunctionType(self.signature())

            typeof_impl.register(TypedWAP)(lambda val, c: val.numba_type)
            _WAP_CLASS.append(TypedWAP)
    return _WAP_CLASS[0]


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
