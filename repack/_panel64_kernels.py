"""Numba kernels of the panel64 layout (see ``panel64.py`` for the byte layout).

Imported lazily by ``panel64`` on the first pack/unpack, so planning, refusing and listing
layouts never compile anything. Each kernel takes arrays and sizes only and never raises;
``panel64.pack``/``unpack`` validate first. ``panel64.pack_ref``/``unpack_ref`` are the
references the tests compare them with.

Panel words: a nibble kg-block is 64 little-endian 16-bit words, word c = channel c's two
bytes (``k0 | k1<<4 | k2<<8 | k3<<12``); the word of (group g, kg-block q, channel c) is
``(g*kq + q)*64 + c`` (g counted over all super-blocks: ``sb*ng + group``). An int8
kg-block is 64 32-bit words, word c = channel c's 4 int8 codes (its kernels, of every int8
type, are in ``_panel64_int8_kernels``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba import types as nt

from ..formats import qtypes
from ..formats._jit import closable_inline, lazy_njit, ld64, prefetch
from ..formats.blocks import q4_0, q4_1, q4_k
from ._common import word_step

# ---- fast kernels -----------------------------------------------------------------------
# The nibble and table kernels walk the 64 channels of one super-block in two steps:
#   stage   : a small transposing copy of each channel's source block(s) into a
#             channel-minor buffer (the Q4_0/Q4_1/Q4_K "slots" of four channels a word, see
#             _rows_slots; T8[byte][64] for the byte paths); it stays in L1;
#   compute : one uniform loop over the channels (or channel quads) whose loads and stores
#             are contiguous, so LLVM vectorizes it (SWAR nibble arithmetic on 64-bit words).
# Unpacking runs the same two steps backwards. (The int8 panels' kernels, Q8_0's too, are in
# _panel64_int8_kernels.) Indices are uint64 throughout, so numba emits
# no negative-index wraparound; the Python wrappers validate every size beforehand.
# Small helpers are plain ``@njit`` functions: LLVM inlines them into the kernels all the same
# (same speed measured), while numba's IR-level ``inline="always"`` made a cold-cache compile
# 1.6-2.5x longer (Q4_K pack 6.0 -> 3.7 s CPU, Q6_K 3.7 -> 1.5 s; benchmarks/BENCHMARKS.md).
_U = np.uint64
_M0F = np.uint64(0x0F0F0F0F0F0F0F0F)
_M00FF = np.uint64(0x00FF00FF00FF00FF)
_RO_U64 = nt.Array(nt.uint64, 1, "C", readonly=True)
_RO_U32 = nt.Array(nt.uint32, 1, "C", readonly=True)
_RO_U16 = nt.Array(nt.uint16, 1, "C", readonly=True)
_RO_U8 = nt.Array(nt.uint8, 1, "C", readonly=True)
_HELPER: dict[str, Any] = dict(cache=True, boundscheck=False, no_cpython_wrapper=True)
_KERNEL: dict[str, Any] = dict(cache=True, boundscheck=False)


@lazy_njit(nt.void(_RO_U8, nt.uint64, nt.uint64, nt.int64, nt.int64, nt.uint8[::1]), **_HELPER)
def _unstage_b(t8, o0, rb, cn, nb, a8):
    for c in range(cn):
        o = o0 + _U(c) * rb
        for i in range(nb):
            a8[o + _U(i)] = t8[_U(i) * _U(64) + _U(c)]


@njit
def _pairs(x):
    """Low nibbles n0..n7 of the 8 bytes of x -> two 16-bit panel words.

    ``w & 0xFFFF = n0 | n1<<4 | n2<<8 | n3<<12`` (bytes 2c, 2c+1 of one kg-block) and
    ``(w >> 32) & 0xFFFF`` the same for n4..n7 (the next kg-block).
    """
    x = (x | (x >> _U(4))) & _M00FF
    return x | (x >> _U(8))


@njit
def _spread(v):
    """Inverse of _pairs on a 32-bit group: nibbles n0..n7 of v -> low nibbles of bytes 0..7."""
    v = (v | (v << _U(16))) & _U(0x0000FFFF0000FFFF)
    v = (v | (v << _U(8))) & _M00FF
    return (v | (v << _U(4))) & _M0F


@njit
def _get_qs16(p16, base):
    """Inverse of _put_qs16: (x0, x1)."""
    l0 = _U(p16[base]) | (_U(p16[base + _U(64)]) << _U(16))
    l1 = _U(p16[base + _U(128)]) | (_U(p16[base + _U(192)]) << _U(16))
    h0 = _U(p16[base + _U(256)]) | (_U(p16[base + _U(320)]) << _U(16))
    h1 = _U(p16[base + _U(384)]) | (_U(p16[base + _U(448)]) << _U(16))
    return _spread(l0) | (_spread(h0) << _U(4)), _spread(l1) | (_spread(h1) << _U(4))


@njit
def _set_tb16(t8, i, c, v):
    t8[_U(i) * _U(64) + c] = np.uint8(v & np.uint16(0xFF))
    t8[_U(i + 1) * _U(64) + c] = np.uint8(v >> np.uint16(8))


@njit
def _set_tb64(t8, i, c, x):
    for j in range(8):
        t8[_U(i + j) * _U(64) + c] = np.uint8((x >> _U(8 * j)) & _U(0xFF))


# The blocks' byte offsets are their codecs' (``AT``, formats/blocks/<type>.py), in 16-bit units
# (every field of these three types starts at an even byte), and their sizes the type table's:
# module globals, which numba reads as compile-time constants.
_Q40_UNITS, _Q40_D, _Q40_QS = qtypes.Q4_0.type_size // 2, q4_0.AT.d // 2, q4_0.AT.qs // 2
_Q41_UNITS, _Q41_D, _Q41_M, _Q41_QS = qtypes.Q4_1.type_size // 2, q4_1.AT.d // 2, q4_1.AT.m // 2, q4_1.AT.qs // 2
_Q4K_WORDS = qtypes.Q4_K.type_size // 8  # 18: a Q4_K block is whole 64-bit words
_Q4K_D, _Q4K_DMIN, _Q4K_SC, _Q4K_QS = (q4_k.AT.d // 2, q4_k.AT.dmin // 2, q4_k.AT.scales // 2, q4_k.AT.qs // 2)

#: 64-bit words of each row staged per sweep over a super-block's 64 channels (see _rows_slots):
#: four 9-word Q4_0 steps, seven 5-word Q4_1 steps, or two 18-word Q4_K blocks
_RUN_WORDS = 36
_M1 = _U(0x0000FFFF0000FFFF)
_M1H = _U(0xFFFF0000FFFF0000)
_LO32 = _U(0xFFFFFFFF)
_HI32 = _U(0xFFFFFFFF00000000)
_N0 = _U(0x000F000F000F000F)  # the four nibbles of each 16-bit unit
_N1 = _U(0x00F000F000F000F0)
_N2 = _U(0x0F000F000F000F00)
_N3 = _U(0xF000F000F000F000)
_B16 = _U(0x00FF00FF00FF00FF)


# ---- channel-quad staging of the nibble kernels (Q4_0: K % 128 == 0, Q4_1: K % 64, Q4_K) -----
# A sweep reads _RUN_WORDS words of each of a super-block's 64 rows in one go (4096-wide Q4_0
# rows are 2304 bytes apart: 64 of them share 16 of Zen 3's 64 L1 sets, so a row's lines do not
# survive a sweep over the channels), four rows at a time, prefetching the rows' next run, and
# stages them in L1 as "slots": uint64s that hold two channels' 32-bit halves. The compute
# loops then read the 16-bit unit m of the run (bytes 2m, 2m+1 of the row's run) of the four
# channels 4q..4q+3 as one uint64 ``[c0 | c1 << 16 | c2 << 32 | c3 << 48]``, and write the
# panels' 16-bit words (and the u16 scale regions) four channels a store: the loops over the
# 16 channel quads are contiguous and LLVM vectorizes them, with no narrowing. The 4 x 4
# transpose of 16-bit units is two 2 x 2 steps, each its own inverse:
#
#   rows <-> slots (32-bit halves; r_i = word w of row 4q + i):
#     slot 4w+0 = r0.lo | r2.lo << 32         slot 4w+2 = r0.hi | r2.hi << 32
#     slot 4w+1 = r1.lo | r3.lo << 32         slot 4w+3 = r1.hi | r3.hi << 32
#   slots <-> units (16-bit; unit m = 4w + j, x, y = slots 4w + 2(j >> 1) and the next):
#     unit(m) = (x >> 16(j & 1)) & M1 | ((y >> 16(j & 1)) & M1) << 16     (M1 = 0x0000FFFF0000FFFF)
#
# Slot s of word w, quad q is t[(4w + s)*16 + q]. Quads past the last row of a ragged
# super-block stage a copy of its last row (pack), and are not written back (unpack); the
# pack wrapper's _fill_pads overwrites the pad channels.
@lazy_njit(nt.void(_RO_U64, nt.uint64[::1], nt.uint64, nt.uint64, nt.int64, nt.int64, nt.boolean), **_HELPER)
def _rows_slots(src, dst, o0, wr, cn, nw, to_slots):
    """Rows ``[o0 + c*wr + w]`` (c < cn, w < nw) <-> slots: rows -> slots (``src`` the rows)
    when ``to_slots``, else back. The rows' next run is prefetched (read or written next)."""
    last = _U(src.size - 1) if to_slots else _U(dst.size - 1)
    for c in range(0, cn, 4):
        o_0 = o0 + _U(c) * wr
        o_1 = o_0 + wr if c + 1 < cn else o_0
        o_2 = o_1 + wr if c + 2 < cn else o_1
        o_3 = o_2 + wr if c + 3 < cn else o_2
        for p in range(0, nw, 8):
            at = _U(nw + p)
            for o in (o_0, o_1, o_2, o_3):
                if to_slots:
                    prefetch(src, min(o + at, last))
                else:
                    prefetch(dst, min(o + at, last))
        q = _U(c >> 2)
        for w in range(nw):
            uw = _U(w)
            s = _U(64 * w) + q
            if to_slots:
                r0 = src[o_0 + uw]
                r1 = src[o_1 + uw]
                r2 = src[o_2 + uw]
                r3 = src[o_3 + uw]
                dst[s] = (r0 & _LO32) | (r2 << _U(32))
                dst[s + _U(16)] = (r1 & _LO32) | (r3 << _U(32))
                dst[s + _U(32)] = (r0 >> _U(32)) | (r2 & _HI32)
                dst[s + _U(48)] = (r1 >> _U(32)) | (r3 & _HI32)
            else:
                s0 = src[s]
                s1 = src[s + _U(16)]
                s2 = src[s + _U(32)]
                s3 = src[s + _U(48)]
                dst[o_3 + uw] = (s1 >> _U(32)) | (s3 & _HI32)  # clamped rows: the real row's value last
                dst[o_2 + uw] = (s0 >> _U(32)) | (s2 & _HI32)
                dst[o_1 + uw] = (s1 & _LO32) | (s3 << _U(32))
                dst[o_0 + uw] = (s0 & _LO32) | (s2 << _U(32))


@njit
def _unit(t, m, q):
    """16-bit unit m of the staged run, channels 4q..4q+3 (one per 16 bits)."""
    s = _U(64 * (m >> 2) + 32 * ((m >> 1) & 1)) + q
    sh = _U(16 * (m & 1))
    return ((t[s] >> sh) & _M1) | (((t[s + _U(16)] >> sh) & _M1) << _U(16))


@njit
def _put_units(t, m, q, even, odd):
    """Units m (even) and m + 1 of channels 4q..4q+3 -> their two slots (inverse of _unit)."""
    s = _U(64 * (m >> 2) + 32 * ((m >> 1) & 1)) + q
    t[s] = (even & _M1) | ((odd & _M1) << _U(16))
    t[s + _U(16)] = ((even >> _U(16)) & _M1) | (odd & _M1H)


@njit
def _or_units(t, m, q, even, odd):
    """_put_units, OR-ed into the slots (bits the first write left 0)."""
    s = _U(64 * (m >> 2) + 32 * ((m >> 1) & 1)) + q
    t[s] |= (even & _M1) | ((odd & _M1) << _U(16))
    t[s + _U(16)] |= ((even >> _U(16)) & _M1) | (odd & _M1H)


@njit
def _kg_low(a, b):
    """Units a = qs bytes (4i, 4i+1), b = (4i+2, 4i+3) -> the panel word of their low nibbles
    (k0 | k1 << 4 | k2 << 8 | k3 << 12), per 16-bit unit."""
    return (a & _N0) | ((a >> _U(4)) & _N1) | ((b << _U(8)) & _N2) | ((b << _U(4)) & _N3)


@njit
def _kg_high(a, b):
    """The same for their high nibbles."""
    return ((a >> _U(4)) & _N0) | ((a >> _U(8)) & _N1) | ((b << _U(4)) & _N2) | (b & _N3)


@njit
def _qs_low(lw, e):
    """Inverse of _kg_low: from the panel word of the low nibbles, their bits of qs unit a
    (e = 0) or b (e = 1), per 16-bit unit."""
    x = (lw >> _U(8 * e)) & _B16
    return (x & _N0) | ((x & _N1) << _U(4))


@njit
def _qs_high(hw, e):
    """Inverse of _kg_high: the high nibbles' bits of the same unit."""
    y = (hw >> _U(8 * e)) & _B16
    return ((y & _N0) << _U(4)) | ((y & _N1) << _U(8))


@njit
def _qs_unit(lw, hw, e):
    """Inverse of _kg_low/_kg_high: from the panel words of the low (``lw``) and high (``hw``)
    nibbles, qs unit a (e = 0) or b (e = 1), per 16-bit unit."""
    return _qs_low(lw, e) | _qs_high(hw, e)


# -- Q4_0, K % 128 == 0: four blocks = 72 bytes = 36 units per row step ------------------
#   unit 9b: d of block b;  units 9b+1+2i, 9b+2+2i: its qs bytes 4i .. 4i+3 (i < 4), whose
#   low nibbles are kg-block i of the group and high nibbles kg-block 4+i.
#   p64[(blk*8 + kg)*16 + q] = panel words of channels 4q..4q+3; d64[blk*16 + q] likewise.
@njit
def _put_kg2(t, u, q, p64, kg):
    """Panel words of kg-blocks kg (low nibbles) and kg + 4 (high) of channels 4q..4q+3 from
    the units u, u+1 (qs bytes 4i .. 4i+3 of a block whose first kg-block is kg - i)."""
    a = _unit(t, u, q)
    b = _unit(t, u + 1, q)
    lo = kg * _U(16) + q
    p64[lo] = _kg_low(a, b)
    p64[lo + _U(64)] = _kg_high(a, b)


@lazy_njit(nt.void(_RO_U64, nt.uint64, nt.uint64[::1], nt.uint64[::1]), **_HELPER)
def _q4_0_quads(t, blk0, p64, d64):
    # one loop over the channel quads per output: a loop that stores to more arrays needs more
    # run-time overlap checks than LLVM makes, and stays scalar (pack 4.2 -> 1.4 GB/s)
    for b in range(4):
        blk = blk0 + _U(b)
        for q in range(16):
            d64[blk * _U(16) + _U(q)] = _unit(t, _Q40_UNITS * b + _Q40_D, _U(q))
        for i in range(4):
            for q in range(16):
                _put_kg2(t, _Q40_UNITS * b + _Q40_QS + 2 * i, _U(q), p64, blk * _U(8) + _U(i))


@njit
def _qs_units(p64, kg, q, k):
    """qs units k and k+1 (k even) of channels 4q..4q+3 from the panel words of the block
    whose first kg-block is ``kg`` (inverse of _put_kg2)."""
    lo = (kg + _U(k >> 1)) * _U(16) + q
    lw = p64[lo]
    hw = p64[lo + _U(64)]
    return _qs_unit(lw, hw, 0), _qs_unit(lw, hw, 1)


@lazy_njit(nt.void(nt.uint64[::1], nt.uint64, _RO_U64, _RO_U64), **_HELPER)
def _q4_0_unquads(t, blk0, p64, d64):
    """Inverse of _q4_0_quads. Block b's units start at 9b: for even b the unit pairs (m, m+1)
    of the slots are (d, qs0), (qs1, qs2) .. (qs7, d of block b+1), for odd b (qs0, qs1) ..."""
    for bp in range(2):
        blk = blk0 + _U(2 * bp)
        m = 2 * _Q40_UNITS * bp
        for q in range(16):
            uq = _U(q)
            kg = blk * _U(8)
            u0, u1 = _qs_units(p64, kg, uq, 0)
            u2, u3 = _qs_units(p64, kg, uq, 2)
            u4, u5 = _qs_units(p64, kg, uq, 4)
            u6, u7 = _qs_units(p64, kg, uq, 6)
            _put_units(t, m, uq, d64[blk * _U(16) + uq], u0)
            _put_units(t, m + 2, uq, u1, u2)
            _put_units(t, m + 4, uq, u3, u4)
            _put_units(t, m + 6, uq, u5, u6)
            _put_units(t, m + 8, uq, u7, d64[(blk + _U(1)) * _U(16) + uq])
            for k in range(0, 8, 2):
                v0, v1 = _qs_units(p64, kg + _U(8), uq, k)
                _put_units(t, m + 10 + k, uq, v0, v1)


# -- Q4_1, K % 64 == 0: two blocks = 40 bytes = 20 units per row step ---------------------
#   unit 10b: d, 10b+1: m of block b;  units 10b+2 .. 10b+9: its qs bytes (as Q4_0's)
@lazy_njit(nt.void(_RO_U64, nt.uint64, nt.uint64[::1], nt.uint64[::1], nt.uint64[::1]), **_HELPER)
def _q4_1_quads(t, blk0, p64, d64, m64):
    for b in range(2):
        blk = blk0 + _U(b)
        for q in range(16):
            d64[blk * _U(16) + _U(q)] = _unit(t, _Q41_UNITS * b + _Q41_D, _U(q))
        for q in range(16):
            m64[blk * _U(16) + _U(q)] = _unit(t, _Q41_UNITS * b + _Q41_M, _U(q))
        for i in range(4):
            for q in range(16):
                _put_kg2(t, _Q41_UNITS * b + _Q41_QS + 2 * i, _U(q), p64, blk * _U(8) + _U(i))


@lazy_njit(nt.void(nt.uint64[::1], nt.uint64, _RO_U64, _RO_U64, _RO_U64), **_HELPER)
def _q4_1_unquads(t, blk0, p64, d64, m64):
    for b in range(2):
        blk = blk0 + _U(b)
        for q in range(16):
            uq = _U(q)
            _put_units(t, _Q41_UNITS * b + _Q41_D, uq, d64[blk * _U(16) + uq], m64[blk * _U(16) + uq])  # d, m
            for k in range(0, 8, 2):
                v0, v1 = _qs_units(p64, blk * _U(8), uq, k)
                _put_units(t, _Q41_UNITS * b + _Q41_QS + k, uq, v0, v1)


#: (blocks, words) of a row step (_common.word_step): Q4_0 (hdr = its qs offset, 2) four 18-byte
#: blocks in 9 words, Q4_1 (hdr 4) two of 20 in 5
_Q40_STEP, _Q41_STEP = word_step(qtypes.Q4_0), word_step(qtypes.Q4_1)


@njit
def _q4_step(hdr):
    return _Q40_STEP if hdr == q4_0.AT.qs else _Q41_STEP


@closable_inline
def _sweeps(rows, fields, n, nsteps, bw, gather, move, scatter, arg):
    """The sweeps of a channel-quad word kernel (Q4_0, Q4_1, Q4_K), both ways: rows of
    ``nsteps`` steps of ``bw`` words, ``_RUN_WORDS // bw`` steps of a super-block's 64 channels
    at a time. ``gather(rows, t, first word, words a row, channels, words)`` stages them
    (packing), ``move(slots, s, fields, arg)`` moves step ``s`` (``sb * nsteps + its index``)
    between its slots and the panel and scale ``fields`` (either way), and ``scatter(t, rows,
    ...)`` writes the slots back (unpacking); the stage a direction lacks is :func:`_no_stage`."""
    run = _RUN_WORDS // bw
    wr = _U(nsteps * bw)
    t = np.zeros(_RUN_WORDS * 64, np.uint64)
    for sb in range((n + 63) >> 6):
        cn = min(64, n - sb * 64)
        for g0 in range(0, nsteps, run):
            steps = min(run, nsteps - g0)
            o0 = _U(sb * 64) * wr + _U(bw * g0)
            gather(rows, t, o0, wr, cn, bw * steps)
            for st in range(steps):
                move(t[64 * bw * st:], sb * nsteps + g0 + st, fields, arg)
            scatter(t, rows, o0, wr, cn, bw * steps)


@lazy_njit()
def _to_slots(rows, t, o0, wr, cn, nw):
    _rows_slots(rows, t, o0, wr, cn, nw, True)


@lazy_njit()
def _from_slots(t, rows, o0, wr, cn, nw):
    _rows_slots(t, rows, o0, wr, cn, nw, False)


@lazy_njit()
def _no_stage(a, b, o0, wr, cn, nw):
    """The stage a direction does not have."""


@closable_inline
def _q4_move(slots, s, fields, arg):
    """Step ``s`` of Q4_0 (``hdr`` 2: four blocks) or Q4_1 (two), ``arg = (hdr, the Q4_0 move,
    the Q4_1 move)``: _q4_0_quads and _q4_1_quads, or their inverses."""
    hdr, q4_0_move, q4_1_move = arg
    p64, d64, m64 = fields
    blk = _U(_q4_step(hdr)[0] * s)
    if hdr == 2:
        q4_0_move(slots, blk, p64, d64)
    else:
        q4_1_move(slots, blk, p64, d64, m64)


@lazy_njit(nt.void(_RO_U64, nt.int64, nt.int64, nt.int64, nt.uint64[::1], nt.uint64[::1], nt.uint64[::1]), **_KERNEL)
def _q4_pack_w(w64, n, ng, hdr, p64, d64, m64):
    """Q4_0 (hdr 2, K % 128 == 0; m64 unused) and Q4_1 (hdr 4, K % 64 == 0)."""
    nbk, bw = _q4_step(hdr)
    _sweeps(w64, (p64, d64, m64), n, ng // nbk, bw, _to_slots, _q4_move, _no_stage, (hdr, _q4_0_quads, _q4_1_quads))


@lazy_njit(nt.void(_RO_U64, _RO_U64, _RO_U64, nt.int64, nt.int64, nt.int64, nt.uint64[::1]), **_KERNEL)
def _q4_unpack_w(p64, d64, m64, n, ng, hdr, w64):
    nbk, bw = _q4_step(hdr)
    _sweeps(w64, (p64, d64, m64), n, ng // nbk, bw, _no_stage, _q4_move, _from_slots, (hdr, _q4_0_unquads, _q4_1_unquads))


# -- Q4_0 (any K) and Q4_1: one block at a time, staged as byte planes ---------------------
#   Q4_0: bytes 0-1 d, 2-17 qs          Q4_1: bytes 0-1 d, 2-3 m, 4-19 qs
@lazy_njit(nt.void(_RO_U16, _RO_U16, _RO_U16, nt.int64, nt.int64, nt.uint64, nt.uint8[::1]), **_HELPER)
def _q4_b_uncompute(p16, d16, m16, cn, hdr, blk, t8):
    for c in range(cn):
        uc = _U(c)
        _set_tb16(t8, 0, uc, d16[blk * _U(64) + uc])
        if hdr == 4:
            _set_tb16(t8, 2, uc, m16[blk * _U(64) + uc])
        x0, x1 = _get_qs16(p16, blk * _U(512) + uc)
        _set_tb64(t8, hdr, uc, x0)
        _set_tb64(t8, hdr + 8, uc, x1)


@lazy_njit(nt.void(_RO_U16, _RO_U16, _RO_U16, nt.int64, nt.int64, nt.int64, nt.uint8[::1]), **_KERNEL)
def _q4_unpack_b(p16, d16, m16, n, ng, hdr, a8):
    bb = hdr + 16
    rb = _U(ng * bb)
    t8 = np.zeros(bb * 64, np.uint8)
    for sb in range((n + 63) >> 6):
        cn = min(64, n - sb * 64)
        for b in range(ng):
            _q4_b_uncompute(p16, d16, m16, cn, hdr, _U(sb * ng + b), t8)
            _unstage_b(t8, _U(sb * 64) * rb + _U(b * bb), rb, cn, bb, a8)


# -- Q4_K: 144 bytes = 18 words = 72 units per super-block j (rows are always whole words) -
#   unit 0: d   unit 1: dmin   units 2..7: scales[12] (unit 2+k = scales[2k] | scales[2k+1] << 8)
#   units 8..71: qs[128]; chunk p (units 8+16p .. 23+16p) holds sub-block 2p in its low nibbles
#   and 2p+1 in its high nibbles; units 8+16p+2i, 9+16p+2i = elements 4i .. 4i+3 of each.
#   6-bit scales, per byte (s = 0..3):
#     sc[s] = scales[s] & 63              sc[4+s] = scales[8+s] & 15 | (scales[s] >> 6) << 4
#     m[s]  = scales[4+s] & 63            m[4+s]  = scales[8+s] >> 4 | (scales[4+s] >> 6) << 4
#   The sc and m regions are written (read) four channels a uint32: byte c % 4 of word
#   (g*64 + c) / 4, from the 16-bit units by _narrow (_widen back).
_S6 = _U(0x003F003F003F003F)  # 6 and 2 low bits of each 16-bit unit (the shifts cross units: masked after)
_S2 = _U(0x0003000300030003)


@njit
def _narrow(v):
    """Four 16-bit units, each < 256 -> the four bytes of a uint32."""
    v = (v | (v >> _U(8))) & _M1
    return np.uint32((v | (v >> _U(16))) & _LO32)


@njit
def _widen(x):
    """Inverse of _narrow: the four bytes of x -> four 16-bit units."""
    v = _U(x)
    v = (v | (v << _U(16))) & _M1
    return (v | (v << _U(8))) & _B16


@njit
def _scale_byte(t, i, q):
    """scales[i] of channels 4q..4q+3, one per 16-bit unit."""
    return (_unit(t, _Q4K_SC + (i >> 1), q) >> _U(8 * (i & 1))) & _B16


@lazy_njit(nt.void(_RO_U64, nt.uint64, nt.uint64, nt.uint64[::1], nt.uint32[::1], nt.uint32[::1], nt.uint64[::1],
                   nt.uint64[::1]), **_HELPER)
def _q4_k_quads(t, g0, sbj, p64, sc32, m32, d64, dmin64):
    for q in range(16):  # one output a loop (see _q4_0_quads)
        d64[sbj * _U(16) + _U(q)] = _unit(t, _Q4K_D, _U(q))
    for q in range(16):
        dmin64[sbj * _U(16) + _U(q)] = _unit(t, _Q4K_DMIN, _U(q))
    for s in range(4):
        i = (g0 + _U(s)) * _U(16)
        for q in range(16):
            sc32[i + _U(q)] = _narrow(_scale_byte(t, s, _U(q)) & _S6)
        for q in range(16):
            m32[i + _U(q)] = _narrow(_scale_byte(t, 4 + s, _U(q)) & _S6)
        for q in range(16):
            lo = _scale_byte(t, s, _U(q))
            sc32[i + _U(64 + q)] = _narrow((_scale_byte(t, 8 + s, _U(q)) & _N0) | (((lo >> _U(6)) & _S2) << _U(4)))
        for q in range(16):
            mid = _scale_byte(t, 4 + s, _U(q))
            m32[i + _U(64 + q)] = _narrow(((_scale_byte(t, 8 + s, _U(q)) >> _U(4)) & _N0)
                                          | (((mid >> _U(6)) & _S2) << _U(4)))
    # the panel words in address order: group 2p's kg-blocks 0..7 (low nibbles), then group
    # 2p + 1's (high), each unit pair read twice; interleaving the two groups' stores (every unit
    # read once) ran about 10% slower: the output lines' misses, not the arithmetic, bound it
    for p in range(4):
        for i in range(8):
            lo = ((g0 + _U(2 * p)) * _U(8) + _U(i)) * _U(16)
            for q in range(16):
                uq = _U(q)
                p64[lo + uq] = _kg_low(_unit(t, _Q4K_QS + 16 * p + 2 * i, uq), _unit(t, _Q4K_QS + 1 + 16 * p + 2 * i, uq))
        for i in range(8):
            hi = ((g0 + _U(2 * p + 1)) * _U(8) + _U(i)) * _U(16)
            for q in range(16):
                uq = _U(q)
                p64[hi + uq] = _kg_high(_unit(t, _Q4K_QS + 16 * p + 2 * i, uq), _unit(t, _Q4K_QS + 1 + 16 * p + 2 * i, uq))


@njit
def _k_bytes(sc32, m32, i):
    """scales[s], scales[4+s], scales[8+s] of four channels (one per 16-bit unit) from their
    sc, m words at i (group s) and i + 64 (group 4+s), each value taken to its 6 bits."""
    sl = _widen(sc32[i]) & _S6
    ml = _widen(m32[i]) & _S6
    sh = _widen(sc32[i + _U(64)]) & _S6
    mh = _widen(m32[i + _U(64)]) & _S6
    return (sl | (((sh >> _U(4)) & _S2) << _U(6)), ml | (((mh >> _U(4)) & _S2) << _U(6)),
            (sh & _N0) | ((mh & _N0) << _U(4)))


@lazy_njit(nt.void(nt.uint64[::1], nt.uint64, nt.uint64, _RO_U64, _RO_U32, _RO_U32, _RO_U64, _RO_U64), **_HELPER)
def _q4_k_unquads(t, g0, sbj, p64, sc32, m32, d64, dmin64):
    for q in range(16):
        uq = _U(q)
        _put_units(t, _Q4K_D, uq, d64[sbj * _U(16) + uq], dmin64[sbj * _U(16) + uq])  # d, dmin
        i = g0 * _U(16) + uq
        a0, b0, c0 = _k_bytes(sc32, m32, i)
        a1, b1, c1 = _k_bytes(sc32, m32, i + _U(16))
        a2, b2, c2 = _k_bytes(sc32, m32, i + _U(32))
        a3, b3, c3 = _k_bytes(sc32, m32, i + _U(48))
        _put_units(t, _Q4K_SC, uq, a0 | (a1 << _U(8)), a2 | (a3 << _U(8)))
        _put_units(t, _Q4K_SC + 2, uq, b0 | (b1 << _U(8)), b2 | (b3 << _U(8)))
        _put_units(t, _Q4K_SC + 4, uq, c0 | (c1 << _U(8)), c2 | (c3 << _U(8)))
    # the panel words read in address order, as _q4_k_quads writes them: group 2p's low
    # nibbles into the slots, then group 2p + 1's high nibbles OR-ed in (about 5-10% faster
    # than reading the two groups' words side by side)
    for p in range(4):
        for i in range(8):
            lo = ((g0 + _U(2 * p)) * _U(8) + _U(i)) * _U(16)
            for q in range(16):
                uq = _U(q)
                lw = p64[lo + uq]
                _put_units(t, _Q4K_QS + 16 * p + 2 * i, uq, _qs_low(lw, 0), _qs_low(lw, 1))
        for i in range(8):
            hi = ((g0 + _U(2 * p + 1)) * _U(8) + _U(i)) * _U(16)
            for q in range(16):
                uq = _U(q)
                hw = p64[hi + uq]
                _or_units(t, _Q4K_QS + 16 * p + 2 * i, uq, _qs_high(hw, 0), _qs_high(hw, 1))


@closable_inline
def _q4_k_move(slots, s, fields, move):
    """Super-block step ``s``: ``move`` = _q4_k_quads or _q4_k_unquads."""
    p64, sc32, m32, d64, dmin64 = fields
    move(slots, _U(8 * s), _U(s), p64, sc32, m32, d64, dmin64)


@lazy_njit(nt.void(_RO_U64, nt.int64, nt.int64, nt.uint64[::1], nt.uint32[::1], nt.uint32[::1], nt.uint64[::1],
                   nt.uint64[::1]), **_KERNEL)
def _q4_k_pack(w64, n, nsb, p64, sc32, m32, d64, dmin64):
    _sweeps(w64, (p64, sc32, m32, d64, dmin64), n, nsb, _Q4K_WORDS, _to_slots, _q4_k_move, _no_stage, _q4_k_quads)


@lazy_njit(nt.void(_RO_U64, _RO_U32, _RO_U32, _RO_U64, _RO_U64, nt.int64, nt.int64, nt.uint64[::1]), **_KERNEL)
def _q4_k_unpack(p64, sc32, m32, d64, dmin64, n, nsb, w64):
    _sweeps(w64, (p64, sc32, m32, d64, dmin64), n, nsb, _Q4K_WORDS, _no_stage, _q4_k_move, _from_slots, _q4_k_unquads)


# ---- byte loads of the Q4_0/Q4_1 block-column kernel below (LLVM merges them into one load)
@njit
def _u16_at(a8, o):
    return _U(a8[o]) | (_U(a8[o + _U(1)]) << _U(8))


# ---- block-column kernel of the Q4_0/Q4_1 nibble panels ------------------------------------
# Block column b (block b of the super-block's 64 rows) at a time, its rows four at a time (a
# block column of panel stays in L1 while its rows pass): a nibble panel word (kg-block w,
# channel c) is 16 bits at p16[64 w + c], so the words of channels c..c+3 make one uint64 at
# p64[(64 w + c) / 4]. _pairs turns 8 qs bytes of one row into two words (bits 0-15: kg-block
# w, bits 32-47: w + 1); _quad interleaves four rows' values into the two uint64 stores.
#
#   p64[(64 w + c) / 4] = word(w, c) | word(w, c+1) << 16 | word(w, c+2) << 32 | word(w, c+3) << 48
#
# Rows past the super-block's last (n not a multiple of 4) repeat the last row into pad
# channels, which the wrapper's _fill_pads then overwrites.
@njit
def _quad(p64, i, v0, v1, v2, v3, sh):
    """Bits sh..sh+15 of v0..v3 -> one uint64 (v0 lowest) at p64[i]."""
    m = _U(0xFFFF)
    p64[i] = (((v0 >> _U(sh)) & m) | (((v1 >> _U(sh)) & m) << _U(16)) | (((v2 >> _U(sh)) & m) << _U(32))
              | (((v3 >> _U(sh)) & m) << _U(48)))


@njit
def _quad_rows(sb, c, cn, rb, b, bb):
    """Byte offsets of block b in rows c..c+3 of super-block sb (the last row again past cn)."""
    o0 = _U(sb * 64 + c) * rb + _U(b * bb)
    o1 = o0 + rb if c + 1 < cn else o0
    o2 = o1 + rb if c + 2 < cn else o1
    o3 = o2 + rb if c + 3 < cn else o2
    return o0, o1, o2, o3


@njit
def _quad_u16(d64, i, a8, o0, o1, o2, o3, at):
    """The u16 fields at byte ``at`` of four blocks -> one uint64 at d64[i]."""
    d64[i] = (_u16_at(a8, o0 + _U(at)) | (_u16_at(a8, o1 + _U(at)) << _U(16))
              | (_u16_at(a8, o2 + _U(at)) << _U(32)) | (_u16_at(a8, o3 + _U(at)) << _U(48)))


@njit
def _q4_words(a8, o, j):
    """qs bytes 8j..8j+7 of a Q4_0/Q4_1 block at a8[o] (qs at o): the low nibbles as words
    2j, 2j+1 (elements 8j..8j+7) and the high nibbles as words 4+2j, 5+2j (16+8j..)."""
    x = ld64(a8, o + _U(8 * j))
    return _pairs(x & _M0F), _pairs((x >> _U(4)) & _M0F)


@lazy_njit(nt.void(_RO_U8, nt.int64, nt.int64, nt.int64, nt.uint64[::1], nt.uint64[::1], nt.uint64[::1]), **_KERNEL)
def _q4_small_cols(a8, n, nblk, hdr, p64, d64, m64):
    """Q4_0 (hdr 2: d, qs[16]) and Q4_1 (hdr 4: d, m, qs[16]; m64 unused for Q4_0)."""
    bb = hdr + 16
    rb = _U(nblk * bb)
    for sb in range((n + 63) >> 6):
        cn = min(64, n - sb * 64)
        for b in range(nblk):
            blk = _U(sb * nblk + b)
            for c in range(0, cn, 4):
                o0, o1, o2, o3 = _quad_rows(sb, c, cn, rb, b, bb)
                qc = _U(c >> 2)
                _quad_u16(d64, blk * _U(16) + qc, a8, o0, o1, o2, o3, 0)
                if hdr == 4:
                    _quad_u16(m64, blk * _U(16) + qc, a8, o0, o1, o2, o3, 2)
                i0 = blk * _U(128) + qc
                for j in range(2):
                    l0, h0 = _q4_words(a8, o0 + _U(hdr), j)
                    l1, h1 = _q4_words(a8, o1 + _U(hdr), j)
                    l2, h2 = _q4_words(a8, o2 + _U(hdr), j)
                    l3, h3 = _q4_words(a8, o3 + _U(hdr), j)
                    i = i0 + _U(32 * j)
                    _quad(p64, i, l0, l1, l2, l3, 0)
                    _quad(p64, i + _U(16), l0, l1, l2, l3, 32)
                    _quad(p64, i + _U(64), h0, h1, h2, h3, 0)
                    _quad(p64, i + _U(80), h0, h1, h2, h3, 32)
