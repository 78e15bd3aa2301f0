"""Numba kernels of the panel64-compact planes, both directions, with a numpy reference beside
each (``planes_ref`` / ``int8_ref``): the tests compare them byte for byte.

Both directions convert between a group's int8 panel (panel64's expanded order, ``kq`` kg-blocks
of 256 signed codes ``c``) and the group's compact record (panel64_compact.py draws it)::

    u = (c + code_offset) mod 2^bits          the stored code, 0 .. 2^bits - 1
    base plane   kq x 32*B bytes   B = 4: byte 2ch + j//2 holds u(ch, j) & 15 at bit 4*(j%2)
                                   B = 2: byte ch holds u(ch, j) & 3 at bit 2*j
    bit plane p  kq x 32 bytes     byte L//8 holds bit B+p of u at lane L = 4ch + j, bit L%8

Packing, the stored code is the signed code xor the offset in its low ``bits`` (the offset is
2^(bits-1) or 0, so adding it mod 2^bits flips one bit): one xor and one mask per 8 lanes
(uint64 SWAR), the planes gathered 8 lanes to a byte by one multiply (``_GATHER``), the
nibble/crumb base plane by shifts and masks. Unpacking, the planes go back to lanes through a
256-entry table (``SPREAD``) and ``u - offset`` is a lane-wise subtraction with bit 7 set first
(u < 64, so no lane borrows from the next).
"""

from __future__ import annotations

import numpy as np
from numba import types as nt

from ..formats._jit import RO_U8, lazy_njit

_U = np.uint64
_L01 = _U(0x0101010101010101)
#: bit 8i of x -> bit 56 + i of x * _GATHER (the 8 partial products land on distinct bits)
_GATHER = _U(0x0102040810204080)
_L80 = _U(0x8080808080808080)
_BITS = (np.arange(256, dtype=np.uint64)[:, None] >> np.arange(8, dtype=np.uint64)) & np.uint64(1)
#: uint64[256]: bit i of the index -> bit 0 of byte lane i (a plane byte back to 8 lanes)
SPREAD = (_BITS << (np.uint64(8) * np.arange(8, dtype=np.uint64))).sum(axis=1, dtype=np.uint64)

KG_INT8 = 256  # bytes of one int8 kg-block (4 K x 64 channels)
PLANE_KG = 32  # bytes of one 1-bit plane of a kg-block

_U64 = nt.uint64[::1]
_RO_U64 = nt.Array(nt.uint64, 1, "C", readonly=True)
#: (int8 panels as uint64 words, groups, kq, base bits, planes, lane xor, lane mask, out bytes)
_PACK_SIG = nt.void(_RO_U64, nt.int64, nt.int64, nt.int64, nt.int64, nt.uint64, nt.uint64, nt.uint8[::1])
#: (compact bytes, groups, kq, base bits, planes, offset in every lane, out int8 panels as uint64
#: words, spread table)
_UNPACK_SIG = nt.void(RO_U8, nt.int64, nt.int64, nt.int64, nt.int64, nt.uint64, _U64, _RO_U64)


def lanes(byte: int) -> np.uint64:
    """``byte`` in all 8 byte lanes of a uint64."""
    return _U(byte) * _L01


def _pack_kernel(base: int, nplanes: int, kq: int):
    """The packing kernel of one form (base bits, plane count and kg-blocks a group as
    compile-time constants: the loops over lanes and planes unroll; measured 2x faster than one
    kernel taking them as arguments)."""

    @lazy_njit(_PACK_SIG, tag=f"b{base}p{nplanes}q{kq}", cache=True, boundscheck=False)
    def pack_planes(src, ngroups, kq_, base_, nplanes_, xor, mask, dst):
        """int8 panels (``src``: ``ngroups * kq * 256`` bytes as uint64) -> compact group records."""
        bb = 32 * base
        gb = kq * (bb + PLANE_KG * nplanes)
        for gi in range(ngroups):
            s0 = gi * kq * (KG_INT8 // 8)
            d0 = gi * gb
            for q in range(kq):
                sq = s0 + q * (KG_INT8 // 8)
                db = d0 + q * bb
                dp = d0 + kq * bb + q * PLANE_KG
                for w in range(KG_INT8 // 8):  # lanes 8w .. 8w+7
                    u = (src[sq + w] ^ xor) & mask
                    if base == 4:  # lanes 2i, 2i+1 -> byte i (low nibble first): 4 bytes
                        lo = u & _U(0x0F0F0F0F0F0F0F0F)
                        x = (lo | (lo >> _U(4))) & _U(0x00FF00FF00FF00FF)
                        x = (x | (x >> _U(8))) & _U(0x0000FFFF0000FFFF)
                        x = x | (x >> _U(16))
                        o = db + 4 * w
                        dst[o] = np.uint8(x & _U(0xFF))
                        dst[o + 1] = np.uint8((x >> _U(8)) & _U(0xFF))
                        dst[o + 2] = np.uint8((x >> _U(16)) & _U(0xFF))
                        dst[o + 3] = np.uint8((x >> _U(24)) & _U(0xFF))
                    else:  # lanes 4i .. 4i+3 -> byte i (bits 2j): 2 bytes
                        lo = u & _U(0x0303030303030303)
                        x = (lo | (lo >> _U(6))) & _U(0x000F000F000F000F)
                        x = (x | (x >> _U(12))) & _U(0x000000FF000000FF)
                        x = x | (x >> _U(24))
                        o = db + 2 * w
                        dst[o] = np.uint8(x & _U(0xFF))
                        dst[o + 1] = np.uint8((x >> _U(8)) & _U(0xFF))
                    for p in range(nplanes):
                        bits = (u >> _U(base + p)) & _L01
                        dst[dp + p * kq * PLANE_KG + w] = np.uint8((bits * _GATHER) >> _U(56))

    return pack_planes


def _unpack_kernel(base: int, nplanes: int, kq: int):
    """The unpacking kernel of one form (constants as in :func:`_pack_kernel`)."""

    @lazy_njit(_UNPACK_SIG, tag=f"b{base}p{nplanes}q{kq}", cache=True, boundscheck=False)
    def unpack_planes(src, ngroups, kq_, base_, nplanes_, sub, dst, spread):
        """Compact group records -> int8 panels (``dst``: ``ngroups * kq * 256`` bytes as uint64)."""
        bb = 32 * base
        gb = kq * (bb + PLANE_KG * nplanes)
        for gi in range(ngroups):
            s0 = gi * gb
            d0 = gi * kq * (KG_INT8 // 8)
            for q in range(kq):
                sb = s0 + q * bb
                sp = s0 + kq * bb + q * PLANE_KG
                dq = d0 + q * (KG_INT8 // 8)
                for w in range(KG_INT8 // 8):
                    if base == 4:
                        o = sb + 4 * w
                        x = (_U(src[o]) | (_U(src[o + 1]) << _U(8)) | (_U(src[o + 2]) << _U(16))
                             | (_U(src[o + 3]) << _U(24)))
                        x = (x | (x << _U(16))) & _U(0x0000FFFF0000FFFF)
                        x = (x | (x << _U(8))) & _U(0x00FF00FF00FF00FF)
                        u = (x | (x << _U(4))) & _U(0x0F0F0F0F0F0F0F0F)
                    else:
                        o = sb + 2 * w
                        x = _U(src[o]) | (_U(src[o + 1]) << _U(8))
                        x = (x | (x << _U(24))) & _U(0x000000FF000000FF)
                        x = (x | (x << _U(12))) & _U(0x000F000F000F000F)
                        u = (x | (x << _U(6))) & _U(0x0303030303030303)
                    for p in range(nplanes):
                        u |= spread[src[sp + p * kq * PLANE_KG + w]] << _U(base + p)
                    dst[dq + w] = ((u | _L80) - sub) ^ _L80  # u - offset in each lane (u < 128: no borrow)

    return unpack_planes


#: (base bits, planes, kq) -> kernel, for the four forms of panel64_compact.BASE_BITS (Q5_x G = 32,
#: Q6_K, Q2_K, Q3_K G = 16)
_FORMS = ((4, 1, 8), (4, 2, 4), (2, 0, 4), (2, 1, 4))
_PACK = {f: _pack_kernel(*f) for f in _FORMS}
_UNPACK = {f: _unpack_kernel(*f) for f in _FORMS}


def pack_planes(src, ngroups, kq, base, nplanes, xor, mask, dst) -> None:
    """int8 panels (``src``: ``ngroups * kq * 256`` bytes as uint64) -> compact group records."""
    _PACK[(base, nplanes, kq)](src, ngroups, kq, base, nplanes, xor, mask, dst)


def unpack_planes(src, ngroups, kq, base, nplanes, sub, dst, spread) -> None:
    """Compact group records -> int8 panels (``dst``: ``ngroups * kq * 256`` bytes as uint64)."""
    _UNPACK[(base, nplanes, kq)](src, ngroups, kq, base, nplanes, sub, dst, spread)


# ---- numpy references (obviously right: one array op per field of the layout) -------------
def planes_ref(int8_panels: np.ndarray, kq: int, base: int, nplanes: int, offset: int, bits: int) -> np.ndarray:
    """int8 panels ``[..., kq, 256]`` (signed codes) -> compact records ``[..., kq * 32 * bits]``."""
    c = np.asarray(int8_panels).view(np.int8)
    lead = c.shape[:-2]
    u = ((c.astype(np.int16) + offset) & ((1 << bits) - 1)).astype(np.uint8).reshape(*lead, kq, 64, 4)
    b = u & ((1 << base) - 1)
    if base == 4:
        bp = (b[..., 0::2] | (b[..., 1::2] << 4)).reshape(*lead, kq * 128)
    else:
        bp = (b[..., 0] | (b[..., 1] << 2) | (b[..., 2] << 4) | (b[..., 3] << 6)).reshape(*lead, kq * 64)
    parts: list[np.ndarray] = [bp.astype(np.uint8)]
    for p in range(nplanes):
        bitv = ((u >> (base + p)) & 1).reshape(*lead, kq, 256)
        parts.append(np.packbits(bitv, axis=-1, bitorder="little").reshape(*lead, kq * PLANE_KG))
    return np.ascontiguousarray(np.concatenate(parts, axis=-1))


def int8_ref(records: np.ndarray, kq: int, base: int, nplanes: int, offset: int, bits: int) -> np.ndarray:
    """Inverse of :func:`planes_ref`: compact records ``[..., GB]`` -> int8 panels ``[..., kq, 256]``."""
    r = np.asarray(records).view(np.uint8)
    lead = r.shape[:-1]
    bb = kq * 32 * base
    bp = r[..., :bb].reshape(*lead, kq, 32 * base)
    if base == 4:
        u = np.stack([bp & 15, bp >> 4], axis=-1).reshape(*lead, kq, 256)
    else:
        u = np.stack([(bp >> (2 * j)) & 3 for j in range(4)], axis=-1).reshape(*lead, kq, 256)
    u = u.astype(np.int16)
    for p in range(nplanes):
        pl = r[..., bb + p * kq * PLANE_KG: bb + (p + 1) * kq * PLANE_KG].reshape(*lead, kq, PLANE_KG)
        u |= np.unpackbits(pl, axis=-1, bitorder="little").astype(np.int16) << (base + p)
    c = u - offset
    return np.ascontiguousarray(c.astype(np.int8))
