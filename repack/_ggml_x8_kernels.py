"""Numba kernels of the ggml-x8 layout (byte layout drawn in ``ggml_x8.py``).

Imported lazily by ``ggml_x8`` on the first pack/unpack. Kernels take arrays and sizes only
and never raise; ``ggml_x8.pack``/``unpack`` validate first, and ``ggml_x8.pack_ref``/
``unpack_ref`` are the references the tests compare them with.

In 64-bit words: a block_q4_0x8 is 18 words (0..1 = d[8]; 2 + 8h + r = row r's qs[8h..8h+7]
^ 0x88..88), a block_q4_Kx8 is 144 words (0..1 d[8], 2..3 dmin[8], 4..15 scales[96],
16 + 8h + r = row r's qs word h, i.e. word 2 + h of its source block).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba import types as nt

from ..formats._jit import RO_U8 as _RO_U8
from ..formats._jit import RO_U64 as _RO_U64
from ..formats._jit import closable_inline, lazy_njit
from ..formats._jit import ld64 as _ld64
from ..formats._jit import st64 as _st64
from ..formats.blocks import q4_0, q4_k

_U = np.uint64
_X88 = np.uint64(0x8888888888888888)
_KERNEL: dict[str, Any] = dict(cache=True, boundscheck=False)

# The source blocks' sizes are the type table's, their byte offsets the codecs' (``AT``,
# formats/blocks/<type>.py); an 8-row block is 8 source blocks with each array's 8 copies side
# by side, so its offsets are 8x theirs. Module globals: numba reads them as constants.
_Q40_BYTES = q4_0.QTYPE.type_size  # 18
_Q40_D, _Q40_QS = q4_0.AT.d, q4_0.AT.qs  # 0, 2
_Q40_HALF = (_Q40_BYTES - _Q40_QS) // 2  # 8: qs bytes of one half h
_X8_Q40_BYTES = 8 * _Q40_BYTES  # 144
_X8_Q40_QS = 8 * _Q40_QS  # 16 (after d[8])
_X8_Q40_WORDS = _X8_Q40_BYTES // 8  # 18
_X8_Q40_QS_W = _X8_Q40_QS // 8  # 2: words of row r's qs half h at 2 + 8h + r
_Q4K_WORDS = q4_k.QTYPE.type_size // 8  # 18: a Q4_K block is whole 64-bit words
_Q4K_DMIN_SH, _Q4K_SC_SH = 8 * q4_k.AT.dmin, 8 * q4_k.AT.scales  # bit shifts in word 0: 16, 32
_Q4K_SC_W = (q4_k.AT.scales + 4) // 8  # 1: scales[4..11]
_Q4K_QS_W = q4_k.AT.qs // 8  # 2
_Q4K_QS_WORDS = _Q4K_WORDS - _Q4K_QS_W  # 16
_X8_Q4K_WORDS = 8 * _Q4K_WORDS  # 144
_X8_Q4K_DMIN_W, _X8_Q4K_SC_W, _X8_Q4K_QS_W = (8 * q4_k.AT.dmin // 8, 8 * q4_k.AT.scales // 8,
                                              8 * q4_k.AT.qs // 8)  # 2, 4, 16


@njit
def _put_d(o64, w, r, d):
    """Store f16 bits d as d[r] of the 8-entry array starting at word w (read-modify-write)."""
    i = w + (r >> _U(2))
    sh = _U(16) * (r & _U(3))
    o64[i] = (o64[i] & ~(_U(0xFFFF) << sh)) | (d << sh)


@njit
def _get_d(x64, w, r):
    return (x64[w + (r >> _U(2))] >> (_U(16) * (r & _U(3)))) & _U(0xFFFF)


@njit(inline="always")
def _q4_0_x8_at(row, b, nb, unit):
    """(first unit of source block ``b`` of ``row``, first unit of its 8-row block), both in
    units of ``unit`` bytes (8: words, for ``b`` a multiple of 4; 1: bytes)."""
    o = (_U(row) * _U(nb) + _U(b)) * _U(_Q40_BYTES) // _U(unit)
    x = (_U(row >> 3) * _U(nb) + _U(b)) * _U(_X8_Q40_BYTES) // _U(unit)
    return o, x


# Q4_0 source rows as words, 4 blocks = 9 words (72 bytes: 4 x (d, qs[16])):
#   block 0: d = w0 & 0xFFFF      qs = (w0>>16 | w1<<48, w1>>16 | w2<<48)
#   block 1: d = w2>>16 & 0xFFFF  qs = (w2>>32 | w3<<32, w3>>32 | w4<<32)
#   block 2: d = w4>>32 & 0xFFFF  qs = (w4>>48 | w5<<16, w5>>48 | w6<<16)
#   block 3: d = w6>>48           qs = (w7, w8)
# and of an 8-row block: d[8] in words 0..1, row r's qs half h in word _X8_Q40_QS_W + 8h + r.
@lazy_njit(nt.void(_RO_U64, nt.int64, nt.int64, nt.uint64[::1]), **_KERNEL)
def _q4_0_x8_pack_w(w64, n, nb, o64):
    h1 = _U(_X8_Q40_QS_W + 8)
    for row in range(n):
        r = _U(row & 7)
        for g4 in range(nb // 4):
            o, x = _q4_0_x8_at(row, 4 * g4, nb, 8)
            a0 = w64[o]
            a1 = w64[o + _U(1)]
            a2 = w64[o + _U(2)]
            a3 = w64[o + _U(3)]
            a4 = w64[o + _U(4)]
            a5 = w64[o + _U(5)]
            a6 = w64[o + _U(6)]
            a7 = w64[o + _U(7)]
            a8 = w64[o + _U(8)]
            _put_d(o64, x, r, a0 & _U(0xFFFF))
            o64[x + _U(_X8_Q40_QS_W) + r] = ((a0 >> _U(16)) | (a1 << _U(48))) ^ _X88
            o64[x + h1 + r] = ((a1 >> _U(16)) | (a2 << _U(48))) ^ _X88
            x += _U(_X8_Q40_WORDS)
            _put_d(o64, x, r, (a2 >> _U(16)) & _U(0xFFFF))
            o64[x + _U(_X8_Q40_QS_W) + r] = ((a2 >> _U(32)) | (a3 << _U(32))) ^ _X88
            o64[x + h1 + r] = ((a3 >> _U(32)) | (a4 << _U(32))) ^ _X88
            x += _U(_X8_Q40_WORDS)
            _put_d(o64, x, r, (a4 >> _U(32)) & _U(0xFFFF))
            o64[x + _U(_X8_Q40_QS_W) + r] = ((a4 >> _U(48)) | (a5 << _U(16))) ^ _X88
            o64[x + h1 + r] = ((a5 >> _U(48)) | (a6 << _U(16))) ^ _X88
            x += _U(_X8_Q40_WORDS)
            _put_d(o64, x, r, a6 >> _U(48))
            o64[x + _U(_X8_Q40_QS_W) + r] = a7 ^ _X88
            o64[x + h1 + r] = a8 ^ _X88


@lazy_njit(nt.void(_RO_U64, nt.int64, nt.int64, nt.uint64[::1]), **_KERNEL)
def _q4_0_x8_unpack_w(x64, n, nb, w64):
    h0 = _U(_X8_Q40_QS_W)
    h1 = _U(_X8_Q40_QS_W + 8)
    for row in range(n):
        r = _U(row & 7)
        for g4 in range(nb // 4):
            o, x = _q4_0_x8_at(row, 4 * g4, nb, 8)
            d0 = _get_d(x64, x, r)
            q00 = x64[x + h0 + r] ^ _X88
            q01 = x64[x + h1 + r] ^ _X88
            x += _U(_X8_Q40_WORDS)
            d1 = _get_d(x64, x, r)
            q10 = x64[x + h0 + r] ^ _X88
            q11 = x64[x + h1 + r] ^ _X88
            x += _U(_X8_Q40_WORDS)
            d2 = _get_d(x64, x, r)
            q20 = x64[x + h0 + r] ^ _X88
            q21 = x64[x + h1 + r] ^ _X88
            x += _U(_X8_Q40_WORDS)
            d3 = _get_d(x64, x, r)
            w64[o] = d0 | (q00 << _U(16))
            w64[o + _U(1)] = (q00 >> _U(48)) | (q01 << _U(16))
            w64[o + _U(2)] = (q01 >> _U(48)) | (d1 << _U(16)) | (q10 << _U(32))
            w64[o + _U(3)] = (q10 >> _U(32)) | (q11 << _U(32))
            w64[o + _U(4)] = (q11 >> _U(32)) | (d2 << _U(32)) | (q20 << _U(48))
            w64[o + _U(5)] = (q20 >> _U(16)) | (q21 << _U(48))
            w64[o + _U(6)] = (q21 >> _U(16)) | (d3 << _U(48))
            w64[o + _U(7)] = x64[x + h0 + r] ^ _X88
            w64[o + _U(8)] = x64[x + h1 + r] ^ _X88


# Q4_0, any K: one block at a time, byte addressed on both sides; one address map, two directions.
@closable_inline
def _q4_0_x8_bytes(src, n, nb, dst, pack):
    """Copy every (d, qs half 0, qs half 1) of the source blocks to their 8-row block
    (``pack``) or back, flipping the qs nibbles' bit 3 (``_X88``) either way."""
    for row in range(n):
        r = _U(row & 7)
        for b in range(nb):
            o, x = _q4_0_x8_at(row, b, nb, 1)
            od, xd = o + _U(_Q40_D), x + _U(_Q40_QS - _Q40_D) * r
            oq, xq = o + _U(_Q40_QS), x + _U(_X8_Q40_QS) + _U(_Q40_HALF) * r
            sd, dd = (od, xd) if pack else (xd, od)
            s0, d0 = (oq, xq) if pack else (xq, oq)
            s1, d1 = (oq + _U(_Q40_HALF), xq + _U(8 * _Q40_HALF)) if pack else (xq + _U(8 * _Q40_HALF), oq + _U(_Q40_HALF))
            dst[dd] = src[sd]
            dst[dd + _U(1)] = src[sd + _U(1)]
            _st64(dst, d0, _ld64(src, s0) ^ _X88)
            _st64(dst, d1, _ld64(src, s1) ^ _X88)


# Q4_K: _Q4K_WORDS = 18 words per source block (word 0 = d | dmin<<16 | scales[0..3]<<32, word 1 =
# scales[4..11], words 2..17 = qs), _X8_Q4K_WORDS = 144 per block_q4_Kx8.
@njit
def _unpack12(lo, mid, hi):
    """The 12 scale bytes as three 32-bit lanes -> (sc, m) with byte s = value of slot s."""
    sc = (lo & _U(0x3F3F3F3F)) | (((hi & _U(0x0F0F0F0F)) | ((lo >> _U(2)) & _U(0x30303030))) << _U(32))
    m = (mid & _U(0x3F3F3F3F)) | ((((hi >> _U(4)) & _U(0x0F0F0F0F)) | ((mid >> _U(2)) & _U(0x30303030))) << _U(32))
    return sc, m


@njit
def _pack12(sc, m):
    """Inverse of _unpack12: (lo, mid, hi) 32-bit lanes."""
    schi = sc >> _U(32)
    mhi = m >> _U(32)
    lo = (sc & _U(0x3F3F3F3F)) | (((schi >> _U(4)) & _U(0x03030303)) << _U(6))
    mid = (m & _U(0x3F3F3F3F)) | (((mhi >> _U(4)) & _U(0x03030303)) << _U(6))
    hi = (schi & _U(0x0F0F0F0F)) | ((mhi & _U(0x0F0F0F0F)) << _U(4))
    return lo, mid, hi


@njit
def _transpose8(v):
    """8x8 byte transpose in place: byte s of v[r] <-> byte r of v[s]."""
    for r in range(8):
        for s in range(r + 1, 8):
            a = (v[r] >> _U(8 * s)) & _U(0xFF)
            b = (v[s] >> _U(8 * r)) & _U(0xFF)
            v[r] = (v[r] & ~(_U(0xFF) << _U(8 * s))) | (b << _U(8 * s))
            v[s] = (v[s] & ~(_U(0xFF) << _U(8 * r))) | (a << _U(8 * r))


@njit(inline="always")
def _q4_k_x8_at(sr, r, j, nsb):
    """(first word of super-block ``j`` of row ``8 sr + r``, first word of its 8-row block)."""
    o = (_U(8 * sr + r) * _U(nsb) + _U(j)) * _U(_Q4K_WORDS)
    x = (_U(sr) * _U(nsb) + _U(j)) * _U(_X8_Q4K_WORDS)
    return o, x


# Q4_K: one walk, two directions. Per 8-row block: d and dmin (16 bits a row, 4 rows a word)
# and the 12-byte scale groups go from row major (the rows) to sub-block major (the x8 block)
# through one 8x8 byte transpose (its own inverse), the qs words move as they are (_q4_k_x8_qs).
@njit(inline="always")
def _q4_k_x8_qs(src, dst, o, x, r, pack):
    """Row ``r``'s qs words (its block at word ``o``) to words 8h + r of the x8 block at ``x``
    (``pack``), or back."""
    for h in range(_Q4K_QS_WORDS):
        oq, xq = o + _U(_Q4K_QS_W + h), x + _U(_X8_Q4K_QS_W + 8 * h + r)
        if pack:
            dst[xq] = src[oq]
        else:
            dst[oq] = src[xq]


@closable_inline
def _q4_k_x8_words(src, n, nsb, dst, pack):
    """Every Q4_K block of the ``n`` rows to its block_q4_Kx8 (``pack``) or back."""
    sc = np.zeros(8, np.uint64)
    mm = np.zeros(8, np.uint64)
    for sr in range(n // 8):
        for j in range(nsb):
            x = _q4_k_x8_at(sr, 0, j, nsb)[1]
            if pack:  # the rows' d, dmin -> 4 words; row r's scales -> sc[r], mm[r]
                d = _U(0)
                dm = _U(0)
                d2 = _U(0)
                dm2 = _U(0)
                for r in range(8):
                    o = _q4_k_x8_at(sr, r, j, nsb)[0]
                    a0 = src[o]
                    a1 = src[o + _U(_Q4K_SC_W)]
                    if r < 4:
                        d |= (a0 & _U(0xFFFF)) << _U(16 * r)
                        dm |= ((a0 >> _U(_Q4K_DMIN_SH)) & _U(0xFFFF)) << _U(16 * r)
                    else:
                        d2 |= (a0 & _U(0xFFFF)) << _U(16 * (r - 4))
                        dm2 |= ((a0 >> _U(_Q4K_DMIN_SH)) & _U(0xFFFF)) << _U(16 * (r - 4))
                    sc[r], mm[r] = _unpack12((a0 >> _U(_Q4K_SC_SH)) & _U(0xFFFFFFFF), a1 & _U(0xFFFFFFFF), a1 >> _U(32))
                    _q4_k_x8_qs(src, dst, o, x, r, True)
                dst[x] = d
                dst[x + _U(1)] = d2
                dst[x + _U(_X8_Q4K_DMIN_W)] = dm
                dst[x + _U(_X8_Q4K_DMIN_W + 1)] = dm2
            else:  # group s of the x8 block -> sc[s], mm[s] (byte r: row r)
                for s2 in range(4):
                    w = x + _U(_X8_Q4K_SC_W + 3 * s2)
                    a = src[w]
                    b = src[w + _U(1)]
                    c = src[w + _U(2)]
                    sc[2 * s2], mm[2 * s2] = _unpack12(a & _U(0xFFFFFFFF), a >> _U(32), b & _U(0xFFFFFFFF))
                    sc[2 * s2 + 1], mm[2 * s2 + 1] = _unpack12(b >> _U(32), c & _U(0xFFFFFFFF), c >> _U(32))
            _transpose8(sc)  # packing: sc[s] byte r = scale of sub-block s, row r; unpacking: the reverse
            _transpose8(mm)
            if pack:  # group s = 12 bytes at byte 32 + 12 s: lanes (lo, mid, hi); pairs of groups fill 3 words
                for s2 in range(4):
                    l0, m0, h0 = _pack12(sc[2 * s2], mm[2 * s2])
                    l1, m1, h1 = _pack12(sc[2 * s2 + 1], mm[2 * s2 + 1])
                    w = x + _U(_X8_Q4K_SC_W + 3 * s2)
                    dst[w] = l0 | (m0 << _U(32))
                    dst[w + _U(1)] = h0 | (l1 << _U(32))
                    dst[w + _U(2)] = m1 | (h1 << _U(32))
            else:  # row r's word 0 (d, dmin, scales[0..3]) and word 1 (scales[4..11])
                for r in range(8):
                    o = _q4_k_x8_at(sr, r, j, nsb)[0]
                    ur = _U(r)
                    lo, mid, hi = _pack12(sc[r], mm[r])
                    d = _get_d(src, x, ur)
                    dm = _get_d(src, x + _U(_X8_Q4K_DMIN_W), ur)
                    dst[o] = d | (dm << _U(_Q4K_DMIN_SH)) | (lo << _U(_Q4K_SC_SH))
                    dst[o + _U(_Q4K_SC_W)] = mid | (hi << _U(32))
                    _q4_k_x8_qs(src, dst, o, x, r, False)


def _two_ways(walk, src_type, dst_type):
    """The (pack, unpack) kernels of a two-way walk ``walk(src, n, units a row, dst, pack)``
    (``_q4_0_x8_bytes``, ``_q4_k_x8_words``): one signature, the direction a constant."""
    sig = nt.void(src_type, nt.int64, nt.int64, dst_type)
    tag = walk.__name__.strip("_")

    @lazy_njit(sig, tag=tag, **_KERNEL)
    def pack(src, n, units, dst):
        walk(src, n, units, dst, True)

    @lazy_njit(sig, tag=tag, **_KERNEL)
    def unpack(src, n, units, dst):
        walk(src, n, units, dst, False)

    return pack, unpack


_q4_0_x8_pack_b, _q4_0_x8_unpack_b = _two_ways(_q4_0_x8_bytes, _RO_U8, nt.uint8[::1])
_q4_k_x8_pack, _q4_k_x8_unpack = _two_ways(_q4_k_x8_words, _RO_U64, nt.uint64[::1])
