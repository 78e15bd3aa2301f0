"""Numba kernels of the il8-nibble and il8-int8 layouts (byte layouts drawn in
``il8_nibble.py`` / ``il8_int8.py``); imported lazily on the first pack/unpack.

Both layouts cut a (super-row, 32-block) into 8 four-element steps ``g``; in 32-bit words:

    il8-nibble: word (sr*nb + b)*32 + 4g + r   (r = 0..3) = bytes 16g + 4r .. +3
                = nibbles of rows r (low) and r+4 (high) at elements 4g .. 4g+3
    il8-int8:   word (sr*nb + b)*64 + 8g + 4h + r           = bytes 32g + 16h + 4r .. +3
                = int8 (u - 8) of row 4h + r at elements 4g .. 4g+3

A Q4_0 row's qs bytes 0..7 (``x``) and 8..15 (``y``) hold elements 0..7 / 8..15 in their low
nibbles and 16..23 / 24..31 in their high nibbles, so one 64-bit word of qs feeds two steps.
Kernels take arrays and sizes only and never raise; the layout modules validate first, and
the checks that need every value (f16 scales exact, int8 codes in -8..7) are a kernel's return
value (``_f16_exact``, ``_int8_q4_0_unpack``), after which the wrapper raises.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba import types as nt

from ..formats import qtypes
from ..formats._jit import RO_F32 as _RO_F32
from ..formats._jit import RO_U8 as _RO_U8
from ..formats._jit import RO_U32 as _RO_U32
from ..formats._jit import closable_inline, lazy_njit
from ..formats._jit import ld64 as _ld64
from ..formats._jit import st64 as _st64
from ..formats.blocks import q4_0, q4_k

_U = np.uint64
_M0F = np.uint64(0x0F0F0F0F0F0F0F0F)
_MF0 = np.uint64(0xF0F0F0F0F0F0F0F0)
_M08 = np.uint64(0x0808080808080808)
_M80 = np.uint64(0x8080808080808080)
_M88 = np.uint64(0x8888888888888888)
_KERNEL: dict[str, Any] = dict(cache=True, boundscheck=False)
#: the Q4_0 and Q4_K block facts, from the type table and the codecs' byte maps (module globals:
#: compile-time constants in numba)
_Q40_BYTES, _Q40_QS, _Q4K_BYTES = qtypes.Q4_0.type_size, q4_0.AT.qs, qtypes.Q4_K.type_size
_Q4K_DMIN, _Q4K_SC, _Q4K_QS = q4_k.AT.dmin, q4_k.AT.scales, q4_k.AT.qs


@njit
def _put2(w32, i0, i1, v):
    """Low 32 bits of v -> word i0, high 32 bits -> word i1."""
    w32[i0] = np.uint32(v & _U(0xFFFFFFFF))
    w32[i1] = np.uint32(v >> _U(32))


@njit
def _get2(w32, i0, i1):
    return _U(w32[i0]) | (_U(w32[i1]) << _U(32))


@njit
def _signed(v):
    """Per byte: low nibble u (high nibble 0) -> int8 (u - 8): bit 7 set first, so that no
    lane borrows, 8 subtracted, bit 7 flipped back (u + 0x78: 0x78..0x7F -> 0xF8..0xFF for
    u < 8, 0x80..0x87 -> 0x00..0x07 for u >= 8). Three ops, no multiply: the il8-int8 pack
    ran 2.0 -> 2.3-2.7 GB/s (kernel alone, same process) against the previous
    ``t = v ^ 8; t | (t & 8) * 0x1E``."""
    return ((v | _M80) - _M08) ^ _M80


@njit
def _f16_bits_at(a8, o, f16u):
    """The f16 at byte o of a8, widened: the f32's bits. Exponent 1..30 rebiased by 112, 31
    (inf/NaN) to 255, payload kept; only the subnormals (exponent 0) are looked up in
    ``f16u`` (``_common.F16_TO_F32`` as uint32), in its first 1024 entries of each sign: a
    lookup of every scale in the 256 KB table missed the cache on random scales (pack 6.3 ->
    2.8 GB/s here)."""
    h = _U(a8[o]) | (_U(a8[o + _U(1)]) << _U(8))
    e = (h >> _U(10)) & _U(31)
    m = (h & _U(0x8000)) << _U(16) | ((h & _U(1023)) << _U(13))
    sub = _U(f16u[h & _U(0x83FF)])
    v = m | _U(0x7F800000) if e == _U(31) else (m | ((e + _U(112)) << _U(23)) if e != _U(0) else sub)
    return np.uint32(v)


@njit
def _f16_d(a8, o, f16, pow2):
    """The f16 at byte o of a8 as an f32 value: a normal one computed, (1024 + m) * 2^(e - 25)
    (exact; ``pow2[e]``), zero, subnormals, inf and NaN (payload kept) looked up in ``f16``
    (``_common.F16_TO_F32``) at entries that stay cached (see :func:`_f16_bits_at`). The sign
    is a product with +-1 (exact), not a branch: ``-v if sign else v`` compiled to a jump that a
    random sign mispredicts half the time (il8-nibble Q4_K pack about 10-25% slower)."""
    h = _U(a8[o]) | (_U(a8[o + _U(1)]) << _U(8))
    e = (h >> _U(10)) & _U(31)
    odd = _U((e == _U(0)) | (e == _U(31)))  # zero, subnormal, inf, NaN: looked up
    looked = f16[h & (_U(0x83FF) | (odd * _U(0x7C00)))]
    v = np.float32(_U(1024) + (h & _U(1023))) * pow2[e] * (np.float32(1) - np.float32(2) * np.float32(h >> _U(15)))
    return looked if odd else v


@njit
def _pow2_table():
    """pow2[e] = 2^(e - 25) as f32, for :func:`_f16_d`."""
    pow2 = np.empty(32, np.float32)
    for e in range(32):
        pow2[e] = np.float32(2.0 ** (e - 25))
    return pow2


@njit
def _mask(cond):
    """All 64 bits set if cond, else 0 (no wrapping arithmetic: plain Python runs it too)."""
    return _U(cond) * _U(0xFFFFFFFFFFFFFFFF)


@lazy_njit(nt.int64(_RO_U32, nt.uint16[::1]), **_KERNEL)
def _f16_exact(s32, d16):
    """f32 scales (as uint32) -> the f16 bits whose widening they are, into ``d16``; returns 0,
    or 1 when some scale is no widened f16 (``d16`` then holds no defined value). By f32
    exponent e: 113..142 (f16 normals) and 255 (inf, NaN: the payload's top 10 bits) keep the
    exponent and the top 10 mantissa bits, 103..112 are f16 subnormals (the mantissa with its
    implicit bit, shifted right 126 - e), 0 is zero; exact when the bits dropped are 0. Masks,
    not branches, so the loop vectorizes (the numpy check it replaces took ~5 ms for 4096 x
    4096 Q4_0, more than the unpack itself)."""
    bad = _U(0)
    for i in range(s32.size):
        x = _U(s32[i])
        e = (x >> _U(23)) & _U(0xFF)
        mant = x & _U(0x7FFFFF)
        full = mant | _U(0x800000)
        sh = min(_U(126) - min(e, _U(126)), _U(31))
        normal = _mask((e >= _U(113)) & (e <= _U(142)))
        special = _mask(e == _U(255))
        sub = _mask((e >= _U(103)) & (e <= _U(112)))
        zero = _mask(e == _U(0))
        h = ((((e - _U(112)) << _U(10)) | (mant >> _U(13))) & normal) | ((_U(0x7C00) | (mant >> _U(13))) & special)
        h |= (full >> sh) & sub
        d16[i] = np.uint16(((x >> _U(16)) & _U(0x8000)) | (h & _U(0x7FFF)))
        bad |= ((mant & _U(0x1FFF)) & (normal | special)) | ((full & ((_U(1) << sh) - _U(1))) & sub) | (mant & zero)
        bad |= ~(normal | special | sub | zero) & _U(1)
    return 0 if bad == _U(0) else 1


# -- Q4_0, both layouts: every row of every (super-row, block) -------------------------------
@closable_inline
def _q4_0_rows(rows, n, nb, steps, f0, f1, f2, move):
    """``move(rows, o, rb, blk, r, f0, f1, f2)`` for every super-row ``sr``, block ``b`` and row
    step ``r < steps`` (il8-nibble 4: rows r and r + 4 at once; il8-int8 8): ``o`` the byte of
    block ``b`` in row 8 sr + r, ``rb`` the bytes of a row, ``blk = sr*nb + b``; the moves'
    results or-ed (a check's flags; 0 from a move that checks nothing)."""
    rb = _U(nb * _Q40_BYTES)
    bad = _U(0)
    for sr in range(n // 8):
        for b in range(nb):
            blk = _U(sr * nb + b)
            for r in range(steps):
                bad |= move(rows, _U(8 * sr + r) * rb + _U(_Q40_BYTES * b), rb, blk, r, f0, f1, f2)
    return bad


# -- il8-nibble, Q4_0 -----------------------------------------------------------------------
@closable_inline
def _nibble_q4_0_put(a8, o0, rb, blk, r, f16u, q32, scales):
    w = blk * _U(32)
    o1 = o0 + _U(4) * rb
    x0 = _ld64(a8, o0 + _U(_Q40_QS))
    y0 = _ld64(a8, o0 + _U(_Q40_QS + 8))
    x1 = _ld64(a8, o1 + _U(_Q40_QS))
    y1 = _ld64(a8, o1 + _U(_Q40_QS + 8))
    ur = _U(r)
    _put2(q32, w + ur, w + _U(4) + ur, (x0 & _M0F) | ((x1 & _M0F) << _U(4)))
    _put2(q32, w + _U(8) + ur, w + _U(12) + ur, (y0 & _M0F) | ((y1 & _M0F) << _U(4)))
    _put2(q32, w + _U(16) + ur, w + _U(20) + ur, ((x0 >> _U(4)) & _M0F) | (x1 & _MF0))
    _put2(q32, w + _U(24) + ur, w + _U(28) + ur, ((y0 >> _U(4)) & _M0F) | (y1 & _MF0))
    scales[blk * _U(8) + ur] = _f16_bits_at(a8, o0, f16u)
    scales[blk * _U(8) + ur + _U(4)] = _f16_bits_at(a8, o1, f16u)
    return _U(0)


@lazy_njit(nt.void(_RO_U8, nt.int64, nt.int64, _RO_U32, nt.uint32[::1], nt.uint32[::1]), **_KERNEL)
def _nibble_q4_0_pack(a8, n, nb, f16u, q32, scales):
    _q4_0_rows(a8, n, nb, 4, f16u, q32, scales, _nibble_q4_0_put)


@closable_inline
def _nibble_q4_0_get(a8, o0, rb, blk, r, q32, d8, unused):
    w = blk * _U(32)
    ur = _U(r)
    o1 = o0 + _U(4) * rb
    lx = _get2(q32, w + ur, w + _U(4) + ur)
    ly = _get2(q32, w + _U(8) + ur, w + _U(12) + ur)
    hx = _get2(q32, w + _U(16) + ur, w + _U(20) + ur)
    hy = _get2(q32, w + _U(24) + ur, w + _U(28) + ur)
    _st64(a8, o0 + _U(_Q40_QS), (lx & _M0F) | ((hx & _M0F) << _U(4)))
    _st64(a8, o0 + _U(_Q40_QS + 8), (ly & _M0F) | ((hy & _M0F) << _U(4)))
    _st64(a8, o1 + _U(_Q40_QS), ((lx >> _U(4)) & _M0F) | (hx & _MF0))
    _st64(a8, o1 + _U(_Q40_QS + 8), ((ly >> _U(4)) & _M0F) | (hy & _MF0))
    s = (blk * _U(8) + ur) * _U(2)
    a8[o0] = d8[s]
    a8[o0 + _U(1)] = d8[s + _U(1)]
    a8[o1] = d8[s + _U(8)]
    a8[o1 + _U(1)] = d8[s + _U(9)]
    return _U(0)


@lazy_njit(nt.void(_RO_U32, _RO_U8, nt.int64, nt.int64, nt.uint8[::1]), **_KERNEL)
def _nibble_q4_0_unpack(q32, d8, n, nb, a8):
    """``d8``: the f16 bits of every scale (2 bytes per (sr, b, r)), already checked exact."""
    _q4_0_rows(a8, n, nb, 4, q32, d8, d8, _nibble_q4_0_get)


# -- il8-int8, Q4_0 -------------------------------------------------------------------------
@closable_inline
def _int8_q4_0_put(a8, o, rb, blk, rr, f16u, q32, scales):
    x = _ld64(a8, o + _U(_Q40_QS))
    y = _ld64(a8, o + _U(_Q40_QS + 8))
    slot = blk * _U(64) + _U(4 * (rr // 4) + rr % 4)  # 4h + r
    _put2(q32, slot, slot + _U(8), _signed(x & _M0F))  # g = 0, 1
    _put2(q32, slot + _U(16), slot + _U(24), _signed(y & _M0F))  # g = 2, 3
    _put2(q32, slot + _U(32), slot + _U(40), _signed((x >> _U(4)) & _M0F))  # g = 4, 5
    _put2(q32, slot + _U(48), slot + _U(56), _signed((y >> _U(4)) & _M0F))  # g = 6, 7
    scales[blk * _U(8) + _U(rr)] = _f16_bits_at(a8, o, f16u)
    return _U(0)


@lazy_njit(nt.void(_RO_U8, nt.int64, nt.int64, _RO_U32, nt.uint32[::1], nt.uint32[::1]), **_KERNEL)
def _int8_q4_0_pack(a8, n, nb, f16u, q32, scales):
    _q4_0_rows(a8, n, nb, 8, f16u, q32, scales, _int8_q4_0_put)


@njit
def _q4_range_bits(v):
    """Per byte of v (an int8 code), bits 4..7 of the result are bits 4..7 of the code xor bits
    3..6: all zero exactly when bits 3..7 are equal, i.e. the code is in -8..7. (Bit 0 takes a
    bit of the lane below: masked off, ``& _MF0``, once the results are or-ed together.)"""
    return v ^ (v << _U(1))


@closable_inline
def _int8_q4_0_get(a8, o, rb, blk, rr, q32, d8, unused):
    """u = code ^ 8 in the low nibble (both nibbles of a qs byte flipped at once: ``^ 0x88``);
    returns the range bits of the codes (_q4_range_bits, masked once at the end)."""
    slot = blk * _U(64) + _U(4 * (rr // 4) + rr % 4)
    vx = _get2(q32, slot, slot + _U(8))
    vy = _get2(q32, slot + _U(16), slot + _U(24))
    wx = _get2(q32, slot + _U(32), slot + _U(40))
    wy = _get2(q32, slot + _U(48), slot + _U(56))
    _st64(a8, o + _U(_Q40_QS), ((vx & _M0F) | ((wx & _M0F) << _U(4))) ^ _M88)
    _st64(a8, o + _U(_Q40_QS + 8), ((vy & _M0F) | ((wy & _M0F) << _U(4))) ^ _M88)
    s = (blk * _U(8) + _U(rr)) * _U(2)
    a8[o] = d8[s]
    a8[o + _U(1)] = d8[s + _U(1)]
    return _q4_range_bits(vx) | _q4_range_bits(vy) | _q4_range_bits(wx) | _q4_range_bits(wy)


@lazy_njit(nt.int64(_RO_U32, _RO_U8, nt.int64, nt.int64, nt.uint8[::1]), **_KERNEL)
def _int8_q4_0_unpack(q32, d8, n, nb, a8):
    """Returns 0, or 1 when a code is outside -8..7 (``a8`` is then partly written: the wrapper
    raises). The range check and the xor took the kernel from 1.7-2.2 to 2.4-2.8 GB/s (alone,
    same process) against the per-lane add."""
    bad = _q4_0_rows(a8, n, nb, 8, q32, d8, d8, _int8_q4_0_get)
    return 0 if (bad & _MF0) == _U(0) else 1


# -- il8-nibble, Q4_K -----------------------------------------------------------------------
# Q4_K block (144 B): d, dmin, scales[12], qs[128]; sub-block s = nibble s%2 of qs[32(s//2)..+32],
# so the 32 bytes of chunk p feed sub-blocks 2p (low nibbles) and 2p+1 (high nibbles); step g of a
# sub-block reads qs bytes 32p + 4g .. +3.
@lazy_njit(nt.void(_RO_U8, nt.int64, nt.int64, _RO_F32, nt.uint32[::1], nt.float32[::1], nt.float32[::1]), **_KERNEL)
def _nibble_q4_k_pack(a8, n, nsb, f16, q32, dsc, dmn):
    pow2 = _pow2_table()
    rb = _U(nsb * _Q4K_BYTES)
    nb = nsb * 8
    for sr in range(n // 8):
        for j in range(nsb):
            for r in range(4):
                ur = _U(r)
                o0 = _U(8 * sr + r) * rb + _U(_Q4K_BYTES * j)
                o1 = o0 + _U(4) * rb
                for p in range(4):
                    wl = _U((sr * nb + 8 * j + 2 * p) * 32)  # sub-block 2p
                    wh = wl + _U(32)  # sub-block 2p + 1
                    for t in range(4):  # qs word t of the chunk -> steps g = 2t, 2t+1
                        x0 = _ld64(a8, o0 + _U(_Q4K_QS + 32 * p + 8 * t))
                        x1 = _ld64(a8, o1 + _U(_Q4K_QS + 32 * p + 8 * t))
                        g = _U(8 * t)
                        _put2(q32, wl + g + ur, wl + g + _U(4) + ur, (x0 & _M0F) | ((x1 & _M0F) << _U(4)))
                        _put2(q32, wh + g + ur, wh + g + _U(4) + ur, ((x0 >> _U(4)) & _M0F) | (x1 & _MF0))
                for half in range(2):
                    o = o0 + _U(half * 4) * rb
                    d = _f16_d(a8, o, f16, pow2)
                    dmin = _f16_d(a8, o + _U(_Q4K_DMIN), f16, pow2)
                    for s in range(8):
                        if s < 4:
                            sc = a8[o + _U(_Q4K_SC + s)] & np.uint8(63)
                            m = a8[o + _U(_Q4K_SC + 4 + s)] & np.uint8(63)
                        else:
                            sc = ((a8[o + _U(_Q4K_SC + 4 + s)] & np.uint8(15))
                                  | ((a8[o + _U(_Q4K_SC - 4 + s)] >> np.uint8(6)) << np.uint8(4)))
                            m = ((a8[o + _U(_Q4K_SC + 4 + s)] >> np.uint8(4))
                                 | ((a8[o + _U(_Q4K_SC + s)] >> np.uint8(6)) << np.uint8(4)))
                        i = _U(sr * nb + 8 * j + s) * _U(8) + ur + _U(4 * half)
                        dsc[i] = d * np.float32(sc)
                        dmn[i] = dmin * np.float32(m)
