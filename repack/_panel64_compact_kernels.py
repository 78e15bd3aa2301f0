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

from ..formats._jit import lazy_njit

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
#: (int8 panels as uint64 words, groups, kq, base bits, planes, lane xor, lane mask, out words)
_PACK_SIG = nt.void(_RO_U64, nt.int64, nt.int64, nt.int64, nt.int64, nt.uint64, nt.uint64, _U64)
#: (compact bytes, groups, kq, base bits, planes, offset in every lane, out int8 panels as uint64
#: words, spread table)
_UNPACK_SIG = nt.void(_RO_U64, nt.int64, nt.int64, nt.int64, nt.int64, nt.uint64, _U64, _RO_U64)


def lanes(byte: int) -> np.uint64:
    """``byte`` in all 8 byte lanes of a uint64."""
    return _U(byte) * _L01


def _pack_kernel(base: int, nplanes: int, kq: int):
    """The packing kernel of one form (base bits, plane count and kg-blocks a group as
    compile-time constants: the loops over lanes and planes unroll; measured 2x faster than one
    kernel taking them as arguments). Output as uint64 words: 8 int8 words make one plane word
    per plane and 4 (B = 4) or 2 (B = 2) base words, stored whole (1.5x faster than bytes)."""
    bw = 4 * base  # base words of a kg-block (32 * base bytes)
    per = 2 if base == 4 else 4  # int8 words per base word

    @lazy_njit(_PACK_SIG, tag=f"b{base}p{nplanes}q{kq}", cache=True, boundscheck=False)
    def pack_planes(src, ngroups, kq_, base_, nplanes_, xor, mask, dst):
        """int8 panels (``src``: ``ngroups * kq * 256`` bytes as uint64) -> compact group records
        (``dst`` as uint64 words)."""
        gw = kq * (bw + 4 * nplanes)  # words of a group record
        for gi in range(ngroups):
            s0 = gi * kq * 32
            d0 = gi * gw
            for q in range(kq):
                sq = s0 + q * 32
                db = d0 + q * bw
                dp = d0 + kq * bw + q * 4
                for w8 in range(4):  # int8 words 8 w8 .. 8 w8 + 7: one word of each plane
                    pl0 = _U(0)
                    pl1 = _U(0)
                    acc = _U(0)
                    for i in range(8):
                        u = (src[sq + 8 * w8 + i] ^ xor) & mask
                        if base == 4:  # lanes 2j, 2j+1 -> byte j (low nibble first): 32 bits
                            lo = u & _U(0x0F0F0F0F0F0F0F0F)
                            x = (lo | (lo >> _U(4))) & _U(0x00FF00FF00FF00FF)
                            x = (x | (x >> _U(8))) & _U(0x0000FFFF0000FFFF)
                            x = (x | (x >> _U(16))) & _U(0xFFFFFFFF)
                            acc |= x << _U(32 * (i % 2))
                        else:  # lanes 4j .. 4j+3 -> byte j (bits 2(lane % 4)): 16 bits
                            lo = u & _U(0x0303030303030303)
                            x = (lo | (lo >> _U(6))) & _U(0x000F000F000F000F)
                            x = (x | (x >> _U(12))) & _U(0x000000FF000000FF)
                            x = (x | (x >> _U(24))) & _U(0xFFFF)
                            acc |= x << _U(16 * (i % 4))
                        if i % per == per - 1:
                            dst[db + (8 * w8 + i) // per] = acc
                            acc = _U(0)
                        if nplanes > 0:
                            pl0 |= ((((u >> _U(base)) & _L01) * _GATHER) >> _U(56)) << _U(8 * i)
                        if nplanes > 1:
                            pl1 |= ((((u >> _U(base + 1)) & _L01) * _GATHER) >> _U(56)) << _U(8 * i)
                    if nplanes > 0:
                        dst[dp + w8] = pl0
                    if nplanes > 1:
                        dst[dp + kq * 4 + w8] = pl1

    return pack_planes


def _unpack_kernel(base: int, nplanes: int, kq: int):
    """The unpacking kernel of one form (constants as in :func:`_pack_kernel`; the records read
    as uint64 words)."""
    bw = 4 * base
    per = 2 if base == 4 else 4

    @lazy_njit(_UNPACK_SIG, tag=f"b{base}p{nplanes}q{kq}", cache=True, boundscheck=False)
    def unpack_planes(src, ngroups, kq_, base_, nplanes_, sub, dst, spread):
        """Compact group records (``src`` as uint64 words) -> int8 panels (``dst``: ``ngroups *
        kq * 256`` bytes as uint64)."""
        gw = kq * (bw + 4 * nplanes)
        for gi in range(ngroups):
            s0 = gi * gw
            d0 = gi * kq * 32
            for q in range(kq):
                sb = s0 + q * bw
                sp = s0 + kq * bw + q * 4
                dq = d0 + q * 32
                for w8 in range(4):
                    p0 = src[sp + w8] if nplanes > 0 else _U(0)
                    p1 = src[sp + kq * 4 + w8] if nplanes > 1 else _U(0)
                    for i in range(8):
                        bword = src[sb + (8 * w8 + i) // per]
                        if base == 4:
                            x = (bword >> _U(32 * (i % 2))) & _U(0xFFFFFFFF)
                            x = (x | (x << _U(16))) & _U(0x0000FFFF0000FFFF)
                            x = (x | (x << _U(8))) & _U(0x00FF00FF00FF00FF)
                            u = (x | (x << _U(4))) & _U(0x0F0F0F0F0F0F0F0F)
                        else:
                            x = (bword >> _U(16 * (i % 4))) & _U(0xFFFF)
                            x = (x | (x << _U(24))) & _U(0x000000FF000000FF)
                            x = (x | (x << _U(12))) & _U(0x000F000F000F000F)
                            u = (x | (x << _U(6))) & _U(0x0303030303030303)
                        if nplanes > 0:
                            u |= spread[(p0 >> _U(8 * i)) & _U(0xFF)] << _U(base)
                        if nplanes > 1:
                            u |= spread[(p1 >> _U(8 * i)) & _U(0xFF)] << _U(base + 1)
                        dst[dq + 8 * w8 + i] = ((u | _L80) - sub) ^ _L80  # u - offset per lane (no borrow)

    return unpack_planes


#: (base bits, planes, kq) -> kernel, for the four forms of panel64_compact.BASE_BITS (Q5_x G = 32,
#: Q6_K, Q2_K, Q3_K G = 16)
_FORMS = ((4, 1, 8), (4, 2, 4), (2, 0, 4), (2, 1, 4))
_PACK = {f: _pack_kernel(*f) for f in _FORMS}
_UNPACK = {f: _unpack_kernel(*f) for f in _FORMS}


def pack_planes(src, ngroups, kq, base, nplanes, xor, mask, dst) -> None:
    """int8 panels (``src``: ``ngroups * kq * 256`` bytes as uint64) -> compact group records
    (``dst`` as uint64 words)."""
    _PACK[(base, nplanes, kq)](src, ngroups, kq, base, nplanes, xor, mask, dst)


def unpack_planes(src, ngroups, kq, base, nplanes, sub, dst, spread) -> None:
    """Compact group records (``src`` as uint64 words) -> int8 panels (``dst``: ``ngroups * kq *
    256`` bytes as uint64)."""
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
