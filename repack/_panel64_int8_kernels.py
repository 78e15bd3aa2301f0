"""Numba kernels of the panel64 int8 panels (Q5_0, Q5_1, Q5_K, Q6_K, Q2_K, Q3_K, Q8_0), both
directions, and the thin wrappers ``panel64`` dispatches to (``pack``, ``unpack``).

Imported lazily by ``panel64`` on the first pack/unpack of these types. The kernels take byte
arrays and sizes only and never raise; ``panel64.pack``/``unpack`` validate first, and
``panel64.pack_ref``/``unpack_ref`` (through the codec fields) are the references the tests
compare them with, byte for byte.

The int8 panel (panel64.py draws it): the code of element 4q + i of channel c's block ``blk``
(``blk = sb * nblk + b``: super-block of 64 rows, block along K) is byte i of panel word q,
which sits at byte ``(blk * W + q) * 256 + 4 c`` (W = block_size / 4 words a block)::

    panel byte:  blk*W*256  +256        +512                 (+256 per word q)
                 [q0: c0 c1 .. c63][q1: c0 .. c63][q2: ...] ...   each cN = 4 int8 codes
    scales:      field byte ((blk * per_block + s) * 64 + c) * width   (width 2: f16 bits)

So one row's block is W 32-bit words 256 bytes apart, and its scale fields one value per
64 channels. Every kernel is the same walk (_sweep) around a type's block body: each 64-row
super-block row by row, ``run`` blocks of a row per sweep over its channels (RUN_SMALL = 8 of
the 32-element types, 176-272 contiguous bytes a row; RUN_K = 1 K-quant block), so a sweep's
panel bytes (run * W * 256 = 16 KiB either way) stay in L1 while its rows pass. Before a
row's blocks the walk prefetches (llvm.prefetch) what that row touches in the next sweep: its
next run of row bytes and its 1/64 share of the next run's panel bytes. The 64 rows are 64
strided streams no hardware prefetcher follows; measured on this host (bench_repack,
--cpu-time, 4096 x 4096) the hint took Q5_K/Q6_K from ~1.9 to ~2.7 GB/s both ways. Within a
block the work is SWAR on 8 codes at a time (one uint64 = words q, q+1 of one row: 8 lanes).

Packing (low 4 bits from a nibble, bit 4 (and 5) from the high-bit field):

    value v (elements 8p..8p+7):  lane i = nibble(e) | hbits(e) << 4, minus the code offset
    Q5_0/Q5_1 hbits: qh bits 8p..8p+7 -> lanes through a 256-entry table (_HI5) that already
                 holds the offset (Q5_0: lane = 0x00 if the bit is set else 0xF0, i.e. q - 16;
                 Q5_1: 0x10 or 0x00)
    Q5_K hbits: bit s of qh[l] (8 consecutive l = the 8 lanes of one qh uint64)
    Q6_K hbits: bits 2s, 2s+1 of qh[l]; offset 32 by _sub_lanes
    Q2_K: 2-bit fields of qs only; Q3_K: bit 2 from hmask, offset 4 by _sub_lanes

Unpacking runs the same steps backwards: nibbles by masks, the high bits of 8 lanes gathered
into one byte by a multiply (_lane_bits) or put back at bit s of the qh lanes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba import types as nt

from ..formats import qtypes
from ..formats._jit import RO_U8, lazy_njit, ld64, prefetch, prefetch_w, st64
from ..formats.blocks import q2_k, q3_k, q5_0, q5_1, q5_k, q6_k, q8_0

_U = np.uint64


def _lanes(byte: int, lanes: range = range(8)) -> np.uint64:
    """``byte`` in each of the given byte lanes of a uint64 (all 8 by default)."""
    return _U(sum(byte << (8 * i) for i in lanes))


_L01, _L03, _L0C, _L0F = (_lanes(b) for b in (0x01, 0x03, 0x0C, 0x0F))
_L30, _L3F, _L80, _LC0 = (_lanes(b) for b in (0x30, 0x3F, 0x80, 0xC0))
_LO4, _HI4 = _lanes(0x03, range(4)), _lanes(0x03, range(4, 8))  # 03 in lanes 0..3 / 4..7
#: bit 8i of x -> bit 56 + i of x * _GATHER (the 8 partial products land on distinct bits)
_GATHER = _U(0x0102040810204080)
_U8 = nt.uint8[::1]
_KERNEL: dict[str, Any] = dict(cache=True, boundscheck=False)
#: every kernel (_kernels): (source bytes, n, blocks a row, run, panels, four scale fields)
#: packing, (panels, four scale fields, n, blocks a row, run, blocks) unpacking; the fields a
#: type lacks are empty arrays
_PACK_SIG = nt.void(RO_U8, nt.int64, nt.int64, nt.int64, _U8, _U8, _U8, _U8, _U8)
_UNPACK_SIG = nt.void(RO_U8, RO_U8, RO_U8, RO_U8, RO_U8, nt.int64, nt.int64, nt.int64, _U8)
#: the per-block bodies: functions LLVM always inlines into the walk (``forceinline``), lazy
#: kernels (pickled by name) so that the kernels _kernels() makes can close over them
_body = lazy_njit(forceinline=True, cache=True)

#: blocks of one row converted per sweep over a super-block's channels (see the module doc)
RUN_SMALL = 8
RUN_K = 1


def _hi5_table(offset: int) -> np.ndarray:
    """uint64 [256]: byte lane i = (bit i of the index) << 4, minus ``offset`` (16 or 0) mod 256."""
    bits = (np.arange(256)[:, None] >> np.arange(8)) & 1
    lanes = ((bits << 4) - offset) & 0xFF
    return (lanes.astype(np.uint64) << (8 * np.arange(8, dtype=np.uint64))).sum(axis=1, dtype=np.uint64)


#: by code offset (Q5_0 16, Q5_1 0); the packing kernels take the table's bytes as a field
_HI5 = {16: _hi5_table(16), 0: _hi5_table(0)}

# Every byte offset below is the codec's (``AT``: formats/blocks/<type>.py, the one statement of
# its byte diagram, checked against the type table's block bytes), every code offset the type
# table's: numba reads these module globals as compile-time constants.
_Q50, _Q51, _Q5K, _Q6K, _Q2K, _Q3K, _Q80 = (m.AT for m in (q5_0, q5_1, q5_k, q6_k, q2_k, q3_k, q8_0))
#: Q5_0/Q5_1 unpacking: qh holds bit 4 of q; the panel's bit 4 of c = q - 16 is it inverted
_QH_FLIP = {o: 0xFFFFFFFF * ((o >> 4) & 1) for o in _HI5}
_Q50_FLIP, _Q51_FLIP = _QH_FLIP[qtypes.Q5_0.code_offset], _QH_FLIP[qtypes.Q5_1.code_offset]
_Q6_OFF, _Q3_OFF = qtypes.Q6_K.code_offset, qtypes.Q3_K.code_offset
#: adding a code offset of half the code range back is one xor per lane, then the code's bits
_Q6_ADD, _Q6_BITS = _lanes(_Q6_OFF), _lanes((1 << (qtypes.Q6_K.code_bits or 0)) - 1)
_Q3_ADD, _Q3_BITS = _lanes(_Q3_OFF), _lanes((1 << (qtypes.Q3_K.code_bits or 0)) - 1)


# ---- little helpers (plain njit: LLVM inlines them and merges their byte loads/stores). The
# ---- per-block bodies are ``forceinline`` (LLVM's alwaysinline): left to LLVM's heuristics a
# ---- body with many array arguments stayed a call (2-3x slower), and numba's IR inlining
# ---- (inline_jit) left an NRT incref/decref pair per array argument in the loop.
@njit
def _ahead(rows, panel, sb, c, b0, run, nblk, rb, bb, bs, packing):
    """Prefetch what row c touches in the next sweep: its next ``run`` blocks (read when
    packing, written when unpacking; row c of the next super-block after the last run) and its
    1/64 share of the next run's panel bytes (the other way round)."""
    if b0 + run < nblk:
        o = _U(sb * 64 + c) * rb + _U((b0 + run) * bb)
    else:
        o = _U(sb * 64 + 64 + c) * rb
    span = run * bb
    share = run * bs
    pn = _U((sb * nblk + b0 + run) * bs * 64 + c * share)
    for x in range(0, span + 64, 64):
        if packing:
            prefetch(rows, o + _U(min(x, span - 1)))
        else:
            prefetch_w(rows, o + _U(min(x, span - 1)))
    for x in range(0, share, 64):
        if packing:
            prefetch_w(panel, pn + _U(x))
        else:
            prefetch(panel, pn + _U(x))


@_body
def _sweep(body, rows, panel, f0, f1, f2, f3, n, nblk, bb, bs, run, packing):
    """The walk of every kernel: for each 64-row super-block sb, for each run of ``run`` blocks
    along K, for each row c, prefetch what the next sweep touches (_ahead), then
    ``body(rows, panel, f0..f3, byte of block b in row c, blk = sb * nblk + b, c, w)`` for
    the run's blocks b, ``w`` the panel byte of the block's word 0 in channel c. ``bb``: bytes
    a block, ``bs``: elements a block."""
    rb = _U(nblk * bb)
    for sb in range((n + 63) >> 6):
        for b0 in range(0, nblk, run):
            for c in range(min(64, n - sb * 64)):
                o = _U(sb * 64 + c) * rb
                _ahead(rows, panel, sb, c, b0, run, nblk, rb, bb, bs, packing)
                for b in range(b0, min(nblk, b0 + run)):
                    blk = _U(sb * nblk + b)
                    body(rows, panel, f0, f1, f2, f3, o + _U(b * bb), blk, _U(c), blk * _U(64 * bs) + _U(4 * c))


@njit
def _field(blk, c, per_block, s, width):
    """Byte of value s of block blk, channel c, in a [SB][groups][64] scale region."""
    return ((blk * _U(per_block) + _U(s)) * _U(64) + c) * _U(width)


@njit
def _ld(a8, o, nb):
    x = _U(0)
    for j in range(nb):
        x |= _U(a8[o + _U(j)]) << _U(8 * j)
    return x


@njit
def _st(a8, o, x, nb):
    for j in range(nb):
        a8[o + _U(j)] = np.uint8((x >> _U(8 * j)) & _U(0xFF))


@njit
def _put_words(p8, w, v):
    """The 8 codes of v -> panel words at bytes w (lanes 0..3) and w + 256 (lanes 4..7)."""
    _st(p8, w, v, 4)
    _st(p8, w + _U(256), v >> _U(32), 4)


@njit
def _get_words(p8, w):
    return _ld(p8, w, 4) | (_ld(p8, w + _U(256), 4) << _U(32))


@njit
def _sub_lanes(v, off):
    """Each byte lane (< 128) of v minus ``off``, mod 256 (bit 7 set first: no lane borrows)."""
    return ((v | _L80) - _U(off) * _L01) ^ _L80


@njit
def _lane_bits(v, s):
    """Bit s of byte lanes 0..7 of v -> bits 0..7 of the result (bit 8i + s times 2^(56 - 7i - s)
    lands at 56 + i: _GATHER >> s, the lane bits left in place)."""
    return ((v & (_L01 << _U(s))) * (_GATHER >> _U(s))) >> _U(56)


@njit
def _copy(dst, do, src, so, nb):
    """``nb`` <= 8 bytes, loaded before they are stored (so LLVM merges each side into one)."""
    _st(dst, do, _ld(src, so, nb), nb)


# ---- Q5_0 / Q5_1 ----------------------------------------------------------------------------
#   Q5_0 (22 B): d f16 | qh u32 | qs[16]        Q5_1 (24 B): d f16 | m f16 | qh u32 | qs[16]
#   (hq = 2)          2        6         22      (hq = 4)                  4        8        24
#   element j < 16 = qs[j] & 15 | qh bit j << 4;  element 16 + j = qs[j] >> 4 | qh bit 16+j << 4
#   x0 = qs[0..7], x1 = qs[8..15] as uint64:
#     v0 = elements 0..7   = x0 & 0F | hi(qh byte 0)   -> words 0, 1
#     v1 = elements 8..15  = x1 & 0F | hi(qh byte 1)   -> words 2, 3
#     v2 = elements 16..23 = x0 >> 4 & 0F | hi(byte 2) -> words 4, 5
#     v3 = elements 24..31 = x1 >> 4 & 0F | hi(byte 3) -> words 6, 7
#   Back: qh byte p = bit 4 of the 8 lanes of v_p, inverted for Q5_0 (bit 4 of a code q - 16
#   is bit 4 of q inverted); qs = the low nibbles of v0 | v2 << 4 and v1 | v3 << 4.
#   The bodies have no branches: one in a body kept numba's reference counting of its array
#   arguments (an NRT incref/decref pair per array and block, 3x slower), so each type has its
#   own bodies around the shared code part.
@njit
def _q5_codes_put(a8, p8, hi5, oq, os, w):
    """The codes of the block whose qh is at a8[oq], qs at a8[os]; ``hi5``: the bytes of the
    type's _HI5 table (entry h = 8 bytes at 8h)."""
    for p in range(4):
        x = ld64(a8, os + _U(8 * (p & 1)))
        _put_words(p8, w + _U(512 * p), ((x >> _U(4 * (p >> 1))) & _L0F) | ld64(hi5, _U(a8[oq + _U(p)]) << _U(3)))


@njit
def _q5_codes_get(p8, a8, oq, os, w, flip):
    v0 = _get_words(p8, w)
    v1 = _get_words(p8, w + _U(512))
    v2 = _get_words(p8, w + _U(1024))
    v3 = _get_words(p8, w + _U(1536))
    qh = _lane_bits(v0, 4) | (_lane_bits(v1, 4) << _U(8)) | (_lane_bits(v2, 4) << _U(16)) | (_lane_bits(v3, 4) << _U(24))
    _st(a8, oq, qh ^ _U(flip), 4)
    st64(a8, os, (v0 & _L0F) | ((v2 & _L0F) << _U(4)))
    st64(a8, os + _U(8), (v1 & _L0F) | ((v3 & _L0F) << _U(4)))


@_body
def _q5_0_put(a8, p8, d8, hi5, f2, f3, ob, blk, c, w):
    _copy(d8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q50.d), 2)
    _q5_codes_put(a8, p8, hi5, ob + _U(_Q50.qh), ob + _U(_Q50.qs), w)


@_body
def _q5_0_get(a8, p8, d8, f1, f2, f3, ob, blk, c, w):
    _copy(a8, ob + _U(_Q50.d), d8, _field(blk, c, 1, 0, 2), 2)
    _q5_codes_get(p8, a8, ob + _U(_Q50.qh), ob + _U(_Q50.qs), w, _Q50_FLIP)


@_body
def _q5_1_put(a8, p8, d8, m8, hi5, f3, ob, blk, c, w):
    _copy(d8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q51.d), 2)
    _copy(m8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q51.m), 2)
    _q5_codes_put(a8, p8, hi5, ob + _U(_Q51.qh), ob + _U(_Q51.qs), w)


@_body
def _q5_1_get(a8, p8, d8, m8, f2, f3, ob, blk, c, w):
    _copy(a8, ob + _U(_Q51.d), d8, _field(blk, c, 1, 0, 2), 2)
    _copy(a8, ob + _U(_Q51.m), m8, _field(blk, c, 1, 0, 2), 2)
    _q5_codes_get(p8, a8, ob + _U(_Q51.qh), ob + _U(_Q51.qs), w, _Q51_FLIP)


# ---- Q5_K -----------------------------------------------------------------------------------
#   176 B: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]      (code offset 0)
#          0       2          4            16       48
#   element 64j + l (l < 32): qs[32j + l] & 15 | (qh[l] >> 2j & 1) << 4
#   element 64j + 32 + l:     qs[32j + l] >> 4 | (qh[l] >> 2j+1 & 1) << 4
#   with h = qh[8 t .. 8 t + 7], x = qs[32j + 8t ..] as uint64 (t < 4), the 8 lanes of
#     lo = x & 0F | (h >> 2j & 01) << 4   are elements 64j + 8t .. (words 16j + 2t, +1)
#     hi = x >> 4 & 0F | (h >> 2j+1 & 01) << 4       64j + 32 + 8t .. (words 16j + 8 + 2t, +1)
#   scales: the 6-bit sc[s], m[s] (s < 8) of the 12 bytes q, as 8 byte lanes each:
#     sc[s] = q[s] & 63, m[s] = q[4+s] & 63; sc[4+s] = q[8+s] & 15 | (q[s] >> 6) << 4,
#     m[4+s] = q[8+s] >> 4 | (q[4+s] >> 6) << 4  (s < 4)
@njit
def _k_scales_get(a8, o):
    lo = _ld(a8, o, 4)
    mid = _ld(a8, o + _U(4), 4)
    hi = _ld(a8, o + _U(8), 4)
    sc = (lo & _U(0x3F3F3F3F)) | (((hi & _U(0x0F0F0F0F)) | ((lo >> _U(2)) & _U(0x30303030))) << _U(32))
    mm = (mid & _U(0x3F3F3F3F)) | ((((hi >> _U(4)) & _U(0x0F0F0F0F)) | ((mid >> _U(2)) & _U(0x30303030))) << _U(32))
    return sc, mm


@njit
def _k_scales_put(a8, o, sc, mm):
    """Inverse of _k_scales_get (each value taken to its 6 bits)."""
    sc &= _L3F
    mm &= _L3F
    schi = sc >> _U(32)
    mhi = mm >> _U(32)
    _st(a8, o, (sc & _U(0xFFFFFFFF)) | (((schi >> _U(4)) & _U(0x03030303)) << _U(6)), 4)
    _st(a8, o + _U(4), (mm & _U(0xFFFFFFFF)) | (((mhi >> _U(4)) & _U(0x03030303)) << _U(6)), 4)
    _st(a8, o + _U(8), (schi & _U(0x0F0F0F0F)) | ((mhi & _U(0x0F0F0F0F)) << _U(4)), 4)


@njit
def _lanes_to_plane(f8, i, v, count):
    """Byte lane s < count of v -> f8[i + 64 s] (one value per 64-channel row of a field)."""
    for s in range(count):
        f8[i + _U(64 * s)] = np.uint8((v >> _U(8 * s)) & _U(0xFF))


@njit
def _plane_to_lanes(f8, i, count):
    v = _U(0)
    for s in range(count):
        v |= _U(f8[i + _U(64 * s)]) << _U(8 * s)
    return v


@njit
def _sixteen_to_plane(f8, blk, c, lo, hi):
    """A block's 16 one-byte values (lanes of ``lo``: values 0..7, of ``hi``: 8..15; Q3_K's and
    Q6_K's sub-block scales) -> channel ``c``'s column of their [SB][groups][16][64] field."""
    _lanes_to_plane(f8, _field(blk, c, 16, 0, 1), lo, 8)
    _lanes_to_plane(f8, _field(blk, c, 16, 8, 1), hi, 8)


@njit
def _sixteen_from_plane(f8, blk, c):
    """Inverse of _sixteen_to_plane: (lo, hi)."""
    return _plane_to_lanes(f8, _field(blk, c, 16, 0, 1), 8), _plane_to_lanes(f8, _field(blk, c, 16, 8, 1), 8)


@_body
def _q5_k_put(a8, p8, sc8, m8, d8, dmin8, ob, blk, c, w):
    _copy(d8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q5K.d), 2)
    _copy(dmin8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q5K.dmin), 2)
    sc, mm = _k_scales_get(a8, ob + _U(_Q5K.scales))
    _lanes_to_plane(sc8, _field(blk, c, 8, 0, 1), sc, 8)
    _lanes_to_plane(m8, _field(blk, c, 8, 0, 1), mm, 8)
    for t in range(4):
        h = ld64(a8, ob + _U(_Q5K.qh + 8 * t))
        for j in range(4):
            x = ld64(a8, ob + _U(_Q5K.qs + 32 * j + 8 * t))
            _put_words(p8, w + _U(256 * (16 * j + 2 * t)), (x & _L0F) | (((h >> _U(2 * j)) & _L01) << _U(4)))
            _put_words(p8, w + _U(256 * (16 * j + 8 + 2 * t)), ((x >> _U(4)) & _L0F) | (((h >> _U(2 * j + 1)) & _L01) << _U(4)))


@_body
def _q5_k_get(a8, p8, sc8, m8, d8, dmin8, ob, blk, c, w):
    for t in range(4):
        h = _U(0)
        for j in range(4):
            lo = _get_words(p8, w + _U(256 * (16 * j + 2 * t)))
            hi = _get_words(p8, w + _U(256 * (16 * j + 8 + 2 * t)))
            st64(a8, ob + _U(_Q5K.qs + 32 * j + 8 * t), (lo & _L0F) | ((hi & _L0F) << _U(4)))
            h |= (((lo >> _U(4)) & _L01) << _U(2 * j)) | (((hi >> _U(4)) & _L01) << _U(2 * j + 1))
        st64(a8, ob + _U(_Q5K.qh + 8 * t), h)
    _copy(a8, ob + _U(_Q5K.d), d8, _field(blk, c, 1, 0, 2), 2)
    _copy(a8, ob + _U(_Q5K.dmin), dmin8, _field(blk, c, 1, 0, 2), 2)
    _k_scales_put(a8, ob + _U(_Q5K.scales), _plane_to_lanes(sc8, _field(blk, c, 8, 0, 1), 8),
                  _plane_to_lanes(m8, _field(blk, c, 8, 0, 1), 8))


# ---- Q6_K -----------------------------------------------------------------------------------
#   210 B: ql[128] | qh[64] | scales[16] int8 | d f16      (code offset 32)
#          0         128      192               208
#   element 128h + 32s + l (h < 2, s < 4, l < 32):
#     ql[64h + 32(s & 1) + l] nibble s >> 1  |  (qh[32h + l] >> 2s & 3) << 4
#   with a = ql[64h + 8t ..], b = ql[64h + 32 + 8t ..], q = qh[32h + 8t ..] as uint64 (t < 4):
#     s = 0: a & 0F | (q & 03) << 4        s = 1: b & 0F | (q >> 2 & 03) << 4
#     s = 2: a >> 4 & 0F | (q >> 4 & 03) << 4   s = 3: b >> 4 & 0F | (q >> 6 & 03) << 4
#   each minus 32 (_sub_lanes) = words 32h + 8s + 2t, +1. Back: q6 = (code ^ 0x20) & 0x3F per
#   lane (adding 32 mod 64 flips bit 5), its low nibble and bits 4-5 returned to ql/qh.
@_body
def _q6_k_put(a8, p8, s8, d8, f2, f3, ob, blk, c, w):
    _copy(d8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q6K.d), 2)
    _sixteen_to_plane(s8, blk, c, ld64(a8, ob + _U(_Q6K.scales)), ld64(a8, ob + _U(_Q6K.scales + 8)))
    for h in range(2):
        for t in range(4):
            a = ld64(a8, ob + _U(_Q6K.ql + 64 * h + 8 * t))
            bq = ld64(a8, ob + _U(_Q6K.ql + 64 * h + 32 + 8 * t))
            q = ld64(a8, ob + _U(_Q6K.qh + 32 * h + 8 * t))
            x = w + _U(256 * (32 * h + 2 * t))
            _put_words(p8, x, _sub_lanes((a & _L0F) | ((q & _L03) << _U(4)), _Q6_OFF))
            _put_words(p8, x + _U(2048), _sub_lanes((bq & _L0F) | (((q >> _U(2)) & _L03) << _U(4)), _Q6_OFF))
            _put_words(p8, x + _U(4096), _sub_lanes(((a >> _U(4)) & _L0F) | (((q >> _U(4)) & _L03) << _U(4)), _Q6_OFF))
            _put_words(p8, x + _U(6144), _sub_lanes(((bq >> _U(4)) & _L0F) | (((q >> _U(6)) & _L03) << _U(4)), _Q6_OFF))


@_body
def _q6_k_get(a8, p8, s8, d8, f2, f3, ob, blk, c, w):
    _copy(a8, ob + _U(_Q6K.d), d8, _field(blk, c, 1, 0, 2), 2)
    lo, hi = _sixteen_from_plane(s8, blk, c)
    st64(a8, ob + _U(_Q6K.scales), lo)
    st64(a8, ob + _U(_Q6K.scales + 8), hi)
    for h in range(2):
        for t in range(4):
            x = w + _U(256 * (32 * h + 2 * t))
            q0 = (_get_words(p8, x) ^ _Q6_ADD) & _Q6_BITS
            q1 = (_get_words(p8, x + _U(2048)) ^ _Q6_ADD) & _Q6_BITS
            q2 = (_get_words(p8, x + _U(4096)) ^ _Q6_ADD) & _Q6_BITS
            q3 = (_get_words(p8, x + _U(6144)) ^ _Q6_ADD) & _Q6_BITS
            st64(a8, ob + _U(_Q6K.ql + 64 * h + 8 * t), (q0 & _L0F) | ((q2 & _L0F) << _U(4)))
            st64(a8, ob + _U(_Q6K.ql + 64 * h + 32 + 8 * t), (q1 & _L0F) | ((q3 & _L0F) << _U(4)))
            st64(a8, ob + _U(_Q6K.qh + 32 * h + 8 * t), ((q0 >> _U(4)) & _L03) | ((q1 >> _U(2)) & _L0C) | (q2 & _L30)
                 | ((q3 << _U(2)) & _LC0))


# ---- Q2_K and Q3_K (G = 16) ------------------------------------------------------------------
#   Q2_K (84 B):  scales[16] | qs[64] | d f16 | dmin f16        (code offset 0)
#                 0            16       80      82
#     scales[g] = sc[g] | m[g] << 4;  element 128h + 32j + l (h < 2, j < 4, l < 32):
#     q = qs[32h + l] >> 2j & 3
#   Q3_K (110 B): hmask[32] | qs[64] | scales[12] | d f16       (code offset 4: u - 4)
#                 0           32       96           108
#     u = (qs[32h + l] >> 2j & 3) | (hmask[l] >> (4h + j) & 1) << 2
#     6-bit sc[g]: low 4 bits = scales[g] & 15 (g < 8), scales[g - 8] >> 4 (g >= 8);
#                  high 2 bits = scales[8 + g % 4] >> 2 (g // 4) & 3
#   with x = qs[32h + 8t ..] (and hm = hmask[8t ..]) as uint64 (t < 4), the 8 lanes of
#   x >> 2j & 03 (| (hm >> 4h + j & 01) << 2) are elements 128h + 32j + 8t .. = words
#   32h + 8j + 2t, +1. Back: Q3_K's u = (code ^ 4) & 7 per lane (adding 4 mod 8 flips bit 2).
@njit
def _q3_k_scales_get(a8, o):
    """sc[0..7] and sc[8..15] (byte lanes) of the 12 scale bytes at a8[o]."""
    lo8 = ld64(a8, o)
    h = _ld(a8, o + _U(8), 4)
    h = h | (h << _U(32))  # lanes 0..3 and 4..7 = scales[8..11]
    sc0 = (lo8 & _L0F) | (((h & _LO4) | ((h >> _U(2)) & _HI4)) << _U(4))
    sc1 = ((lo8 >> _U(4)) & _L0F) | ((((h >> _U(4)) & _LO4) | ((h >> _U(6)) & _HI4)) << _U(4))
    return sc0, sc1


@njit
def _q3_k_scales_put(a8, o, sc0, sc1):
    """Inverse of _q3_k_scales_get (each value taken to its 6 bits)."""
    st64(a8, o, (sc0 & _L0F) | ((sc1 & _L0F) << _U(4)))
    x = (sc0 >> _U(4)) & _L03
    y = (sc1 >> _U(4)) & _L03
    _st(a8, o + _U(8), (x & _U(0xFFFFFFFF)) | ((x >> _U(32)) << _U(2)) | ((y & _U(0xFFFFFFFF)) << _U(4))
        | ((y >> _U(32)) << _U(6)), 4)


@_body
def _q2_k_put(a8, p8, sc8, m8, d8, dmin8, ob, blk, c, w):
    _copy(d8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q2K.d), 2)
    _copy(dmin8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q2K.dmin), 2)
    for half in range(2):
        v = ld64(a8, ob + _U(_Q2K.scales + 8 * half))
        _lanes_to_plane(sc8, _field(blk, c, 16, 8 * half, 1), v & _L0F, 8)
        _lanes_to_plane(m8, _field(blk, c, 16, 8 * half, 1), (v >> _U(4)) & _L0F, 8)
    for h in range(2):
        for t in range(4):
            x = ld64(a8, ob + _U(_Q2K.qs + 32 * h + 8 * t))
            for j in range(4):
                _put_words(p8, w + _U(256 * (32 * h + 8 * j + 2 * t)), (x >> _U(2 * j)) & _L03)


@_body
def _q2_k_get(a8, p8, sc8, m8, d8, dmin8, ob, blk, c, w):
    _copy(a8, ob + _U(_Q2K.d), d8, _field(blk, c, 1, 0, 2), 2)
    _copy(a8, ob + _U(_Q2K.dmin), dmin8, _field(blk, c, 1, 0, 2), 2)
    for half in range(2):
        i = _field(blk, c, 16, 8 * half, 1)
        st64(a8, ob + _U(_Q2K.scales + 8 * half), (_plane_to_lanes(sc8, i, 8) & _L0F) | ((_plane_to_lanes(m8, i, 8) & _L0F) << _U(4)))
    for h in range(2):
        for t in range(4):
            x = _U(0)
            for j in range(4):
                x |= (_get_words(p8, w + _U(256 * (32 * h + 8 * j + 2 * t))) & _L03) << _U(2 * j)
            st64(a8, ob + _U(_Q2K.qs + 32 * h + 8 * t), x)


@_body
def _q3_k_put(a8, p8, sc8, d8, f2, f3, ob, blk, c, w):
    _copy(d8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q3K.d), 2)
    _sixteen_to_plane(sc8, blk, c, *_q3_k_scales_get(a8, ob + _U(_Q3K.scales)))
    for t in range(4):
        hm = ld64(a8, ob + _U(_Q3K.hmask + 8 * t))
        for h in range(2):
            x = ld64(a8, ob + _U(_Q3K.qs + 32 * h + 8 * t))
            for j in range(4):
                u = ((x >> _U(2 * j)) & _L03) | (((hm >> _U(4 * h + j)) & _L01) << _U(2))
                _put_words(p8, w + _U(256 * (32 * h + 8 * j + 2 * t)), _sub_lanes(u, _Q3_OFF))


@_body
def _q3_k_get(a8, p8, sc8, d8, f2, f3, ob, blk, c, w):
    _copy(a8, ob + _U(_Q3K.d), d8, _field(blk, c, 1, 0, 2), 2)
    _q3_k_scales_put(a8, ob + _U(_Q3K.scales), *_sixteen_from_plane(sc8, blk, c))
    for t in range(4):
        hm = _U(0)
        for h in range(2):
            x = _U(0)
            for j in range(4):
                u = (_get_words(p8, w + _U(256 * (32 * h + 8 * j + 2 * t))) ^ _Q3_ADD) & _Q3_BITS
                x |= (u & _L03) << _U(2 * j)
                hm |= ((u >> _U(2)) & _L01) << _U(4 * h + j)
            st64(a8, ob + _U(_Q3K.qs + 32 * h + 8 * t), x)
        st64(a8, ob + _U(_Q3K.hmask + 8 * t), hm)


# ---- Q8_0 -----------------------------------------------------------------------------------
#   34 B: d f16 | qs[32] int8      (code offset 0)
#         0       2
#   qs[4q .. 4q+3] (elements 4q ..) is panel word q as it is: the 8 lanes of x = qs[8p ..] as
#   uint64 are words 2p, 2p+1 (p < 4), no arithmetic: the walk and its prefetches are the
#   kernel. (Measured, bench_repack --cpu-time 4096 x 4096: the block-column kernel this
#   replaces, two channels a uint64 store, ran 2.2-2.6 GB/s both ways.)
@_body
def _q8_0_put(a8, p8, d8, f1, f2, f3, ob, blk, c, w):
    _copy(d8, _field(blk, c, 1, 0, 2), a8, ob + _U(_Q80.d), 2)
    for p in range(4):
        _put_words(p8, w + _U(512 * p), ld64(a8, ob + _U(_Q80.qs + 8 * p)))


@_body
def _q8_0_get(a8, p8, d8, f1, f2, f3, ob, blk, c, w):
    _copy(a8, ob + _U(_Q80.d), d8, _field(blk, c, 1, 0, 2), 2)
    for p in range(4):
        st64(a8, ob + _U(_Q80.qs + 8 * p), _get_words(p8, w + _U(512 * p)))


# ---- the kernels and the wrappers panel64 dispatches to (its pack/unpack validated everything)
def _kernels(tag, put, get, bb, bs):
    """The pack and unpack kernels of one type: the walk (_sweep) over its ``bb``-byte blocks of
    ``bs`` elements, with its bodies."""

    @lazy_njit(_PACK_SIG, tag=tag, **_KERNEL)
    def pack(a8, n, nblk, run, p8, f0, f1, f2, f3):
        _sweep(put, a8, p8, f0, f1, f2, f3, n, nblk, bb, bs, run, True)

    @lazy_njit(_UNPACK_SIG, tag=tag, **_KERNEL)
    def unpack(p8, f0, f1, f2, f3, n, nblk, run, a8):
        _sweep(get, a8, p8, f0, f1, f2, f3, n, nblk, bb, bs, run, False)

    return pack, unpack


_NONE = np.zeros(0, np.uint8)

def _row(t: qtypes.GGMLType, put, get, hi5: bool = False):
    """One row of _KERNELS: the block geometry is the type table's, the scale fields (in the
    order the bodies take them) the regions panel64 stores (``GGMLType.scale_fields``), then
    the _HI5 table where the body takes it."""
    fields = tuple(name for name, _, _ in t.scale_fields) + (("hi5",) if hi5 else ())
    run = "RUN_K" if t.block_size == qtypes.QK_K else "RUN_SMALL"
    return t.name, (*_kernels(t.name, put, get, t.type_size, t.block_size), fields, run)


#: type -> (pack kernel, unpack kernel, scale regions in kernel order, blocks a row per sweep):
#: one line a type
_KERNELS = dict((
    _row(qtypes.Q5_0, _q5_0_put, _q5_0_get, hi5=True),
    _row(qtypes.Q5_1, _q5_1_put, _q5_1_get, hi5=True),
    _row(qtypes.Q5_K, _q5_k_put, _q5_k_get),
    _row(qtypes.Q6_K, _q6_k_put, _q6_k_get),
    _row(qtypes.Q2_K, _q2_k_put, _q2_k_get),
    _row(qtypes.Q3_K, _q3_k_put, _q3_k_get),
    _row(qtypes.Q8_0, _q8_0_put, _q8_0_get),
))
TYPES = frozenset(_KERNELS)


def _b(a: np.ndarray) -> np.ndarray:
    """A C-contiguous array as its flat bytes (a view)."""
    return a.reshape(-1).view(np.uint8)


def _args(t, n, k, regions, packing):
    """(pack kernel, unpack kernel, panels, the four scale fields, n, blocks a row, run) of
    type ``t``; the field ``hi5`` is the type's _HI5 table (packing; unused unpacking)."""
    pack, unpack, fields, run = _KERNELS[t.name]
    hi5 = _HI5[t.code_offset].view(np.uint8) if packing and "hi5" in fields else _NONE
    f = [hi5 if name == "hi5" else _b(regions[name]) for name in fields] + [_NONE] * (4 - len(fields))
    return pack, unpack, _b(regions["panels"]), f, n, k // t.block_size, globals()[run]


def pack(raw, t, n, k, out) -> None:
    """Blocks [n, row_bytes] of ``t`` -> the panel and scale regions ``out`` (real channels only:
    panel64 fills the pad channels afterwards)."""
    kernel, _, p8, f, n, nblk, run = _args(t, n, k, out, packing=True)
    kernel(_b(raw), n, nblk, run, p8, *f)


def unpack(r, t, n, k, raw) -> None:
    """Regions of ``t`` -> every byte of the blocks ``raw`` [n, row_bytes]."""
    _, kernel, p8, f, n, nblk, run = _args(t, n, k, r, packing=False)
    kernel(p8, *f, n, nblk, run, _b(raw))
