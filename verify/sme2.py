"""An SME2 instruction emulator pinned to a 512-bit streaming vector length (docs/FORMAT.md §4.2).

The architectural state is plain numpy arrays (numba takes them as they are); every instruction
is a small numba function that reads and writes them. The leaves in ``verify/leaves.py`` are
written as sequences of these calls, so what they compute is what the instruction sequence
computes, lane by lane.

Authority: the ``Operation`` pseudocode of each instruction in the Arm Architecture Reference
Manual (DDI 0487 / DDI 0602), chapter C9.2 for SME/SME2 and C8.2 for SVE, as published in the
Markdown copy ``wuyongzheng/arm-md-specs`` (``arm/arm-C9.2.<n>.md``). Each docstring names the
section it follows and restates the index arithmetic at SVL = 512 (VL = 512 bits = 64 bytes).

State (SVL = 512)::

    Z    uint8[32, 64]   z0..z31, byte e of zN is Z[N, e] (little-endian element order:
                         element e of size s bytes is bytes [s*e, s*e+s))
    ZA   uint8[64, 64]   ZA array vectors ZA[0..63]; as int32, 16 lanes per vector.
                         Tile t of .S (t = 0..3), horizontal slice i (0..15) is array vector
                         4*i + t  (ZAhslice: row = tile + slice * esize/8)
    ZT0  uint8[64]       the lookup table; 32-bit entry i is bytes [4i, 4i+4)
    P    uint8[16, 64]   p0..p15, one bit (stored as 0/1) per byte of a vector. For an element of
                         s bytes the governing bit is the one of its lowest byte,
                         ``P[p, s*e]`` (ActivePredicateElement / ElemP)
    memory               any uint8[::1] array, addressed by byte offset

Integer arithmetic follows the pseudocode: 8-bit elements are read with ``SInt`` (signed) and the
32-bit accumulators are ``bits(32)``, i.e. every sum wraps modulo 2**32 like the hardware.

Kernels here never raise. Register numbers, tile numbers and addresses are preconditions that the
caller (a leaf program, or a test) must respect; they are documented per instruction and are the
same constraints the instruction encodings impose.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import types

from ..formats._jit import lazy_njit

SVL_BITS = 512
VL = SVL_BITS // 8  # bytes per Z vector (64)
LANES_S = VL // 4  # 32-bit lanes per vector (16)
N_Z = 32
N_P = 16
N_ZA = VL  # ZA array vectors (SVL/8 = 64)
ZT0_BYTES = 64
VGX4_STRIDE = N_ZA // 4  # vstride of a VGx4 group (16)


class State(NamedTuple):
    """The architectural state of one PE in streaming mode (all arrays C-contiguous)."""

    Z: np.ndarray  # uint8[32, 64]
    ZA: np.ndarray  # uint8[64, 64]
    ZT0: np.ndarray  # uint8[64]
    P: np.ndarray  # uint8[16, 64]


def new_state() -> State:
    """A zeroed state (what SMSTART leaves: Z, P and ZA are zero; ZT0 is zeroed with ZA)."""
    return State(
        np.zeros((N_Z, VL), np.uint8),
        np.zeros((N_ZA, VL), np.uint8),
        np.zeros(ZT0_BYTES, np.uint8),
        np.zeros((N_P, VL), np.uint8),
    )


def zt0_bytes(values) -> np.ndarray:
    """ZT0 image for a 16-entry int8 table: entry ``i`` at byte ``4i``, the other 3 bytes 0.

    This is the table format of docs/FORMAT.md §4.2 (Q4_0: ``i - 8``; Q4_1/Q4_K: ``i``).
    """
    v = np.asarray(values, dtype=np.int64)
    if v.shape != (16,) or v.min() < -128 or v.max() > 127:
        raise ValueError(f"a ZT0 byte table needs 16 int8 values, got shape {v.shape}")
    out = np.zeros(ZT0_BYTES, np.uint8)
    out[0::4] = (v & 0xFF).astype(np.uint8)
    return out


# numba types of the state and operands
_u8_1d = types.uint8[::1]
_u8_2d = types.uint8[:, ::1]
_i64 = types.int64
_void = types.void


@lazy_njit(types.int32(types.int64), cache=True, inline="always")
def _wrap32(x):
    """The low 32 bits of ``x`` as a signed int32 (two's complement wrap, as ``bits(32)``)."""
    return np.int32(((x + 0x80000000) & 0xFFFFFFFF) - 0x80000000)


# --------------------------------------------------------------------------------------------
# predicates
# --------------------------------------------------------------------------------------------


@lazy_njit(_void(_u8_2d, _i64, _i64), cache=True)
def ptrue(P, pd, esize_bytes):
    """PTRUE <Pd>.<T> (pattern ALL): every element active.

    Per the predicate register layout, element ``e`` of ``esize_bytes`` bytes is governed by bit
    ``e*esize_bytes`` (its lowest byte); the other bits of the element are written 0.
    """
    for b in range(VL):
        P[pd, b] = 1 if b % esize_bytes == 0 else 0


@lazy_njit(_void(_u8_2d, _i64), cache=True)
def pfalse(P, pd):
    """PFALSE <Pd>.B: all bits 0."""
    for b in range(VL):
        P[pd, b] = 0


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64, _i64), cache=True)
def whilelt(P, pd, esize_bytes, start, limit):
    """WHILELT <Pd>.<T>, <Xn>, <Xm> (signed): C8.2 WHILELT.

    Operation: ``last = TRUE; for e: last = last && (start + e < limit); ElemP[pd, e] = last``.
    Element ``e`` (of ``esize_bytes`` bytes) sets bit ``e*esize_bytes``; other bits are 0.
    """
    last = True
    for e in range(VL // esize_bytes):
        last = last and (start + e < limit)
        for b in range(esize_bytes):
            P[pd, e * esize_bytes + b] = 1 if (last and b == 0) else 0


# --------------------------------------------------------------------------------------------
# loads and stores
# --------------------------------------------------------------------------------------------


@lazy_njit(_void(_u8_2d, _i64, _u8_1d, _i64, _u8_2d, _i64), cache=True)
def ld1b(Z, zt, mem, addr, P, pg):
    """LD1B { <Zt>.B }, <Pg>/Z, [<Xn>, <Xm>] (C8.2 LD1B, scalar plus scalar, 8-bit elements).

    Operation: ``for e = 0 to 63: if ElemP[mask, e, 8] then Elem[result, e, 8] = Mem[addr + e]
    else Zeros``; ``Z[t] = result``. Inactive lanes are zero and their bytes are not read (an
    inactive lane never faults), so ``mem`` only needs the active bytes.
    """
    for e in range(VL):
        if P[pg, e] != 0:
            Z[zt, e] = mem[addr + e]
        else:
            Z[zt, e] = 0


@lazy_njit(_void(_u8_2d, _i64, _u8_1d, _i64, _u8_2d, _i64), cache=True)
def ld1rqb(Z, zt, mem, addr, P, pg):
    """LD1RQB { <Zt>.B }, <Pg>/Z, [<Xn>, <Xm>] (C8.2 LD1RQB): load 16 bytes, replicate.

    Operation: ``for e = 0 to 15: Elem[result, e, 8] = ElemP[mask, e, 8] ? Mem[addr + e] : 0``
    (only the low 16 predicate bits are used); ``Z[t] = Replicate(result, VL DIV 128)``, i.e.
    byte ``e`` of the vector is ``result[e % 16]``.
    """
    for e in range(16):
        v = mem[addr + e] if P[pg, e] != 0 else np.uint8(0)
        for s in range(VL // 16):
            Z[zt, 16 * s + e] = v


@lazy_njit(_void(_u8_1d, _u8_1d, _i64), cache=True)
def ldr_zt0(ZT0, mem, addr):
    """LDR ZT0, [<Xn|SP>] (C9.2 LDR (table)): ``ZT0[511:0] = Mem[addr, 64]``."""
    for b in range(ZT0_BYTES):
        ZT0[b] = mem[addr + b]


@lazy_njit(_void(_u8_2d, _i64, _u8_1d, _i64, _u8_2d, _i64), cache=True)
def st1w_z(Z, zt, mem, addr, P, pg):
    """ST1W { <Zt>.S }, <Pg>, [<Xn>, <Xm>, LSL #2] (C8.2 ST1W, scalar plus scalar, 32-bit).

    Operation: ``for e = 0 to 15: if ElemP[mask, e, 32] then Mem[addr + 4e, 4] = Elem[Z[t], e,
    32]``. The governing bit of element ``e`` is ``P[pg, 4e]``. Inactive elements leave memory
    untouched.
    """
    for e in range(LANES_S):
        if P[pg, 4 * e] != 0:
            for b in range(4):
                mem[addr + 4 * e + b] = Z[zt, 4 * e + b]


@lazy_njit(_void(_u8_2d, _i64, _i64, _u8_1d, _i64, _u8_2d, _i64), cache=True)
def st1w_za_h(ZA, tile, slice_, mem, addr, P, pg):
    """ST1W { ZA<t>H.S[<Ws>, <offs>] }, <Pg>, [<Xn>, <Xm>, LSL #2] (C9.2 ST1W (tile slice)).

    ``slice_`` is ``(Ws + offs) MOD 16``, computed by the caller. The slice is ZAhslice(tile, 32,
    slice) = array vector ``4*slice + tile``. Operation: ``for e = 0 to 15: if ElemP[mask, e, 32]
    then Mem[addr + 4e, 4] = Elem[slice, e, 32]``.
    """
    row = 4 * (slice_ % LANES_S) + tile
    for e in range(LANES_S):
        if P[pg, 4 * e] != 0:
            for b in range(4):
                mem[addr + 4 * e + b] = ZA[row, 4 * e + b]


# --------------------------------------------------------------------------------------------
# table lookup
# --------------------------------------------------------------------------------------------


@lazy_njit(_void(_u8_2d, _i64, _u8_1d, _i64, _i64, _i64), cache=True)
def luti4_x2(Z, zd, ZT0, zn, idx, esize):
    """LUTI4 { <Zd1>.<T>-<Zd2>.<T> }, ZT0, <Zn>[<index>] (C9.2.162, LUTI4 (two registers)).

    Decode: ``isize = 4; nreg = 2; d = Zd:'0'`` (``zd`` even); ``esize`` in {8, 16, 32}.
    Operation::

        elements = VL DIV esize; segments = esize DIV (isize * nreg); segment = imm MOD segments
        indexes = Z[n]
        for r = 0 to 1:
            base = (segment * nreg + r) * elements
            for e = 0 to elements-1:
                index = UInt(Elem[indexes, base + e, 4])          # nibble base+e, low nibble first
                Elem[Z[d+r], e, esize] = Elem[ZT0, index, 32]<esize-1:0>

    For the byte form (esize = 8) ``segments = 8 DIV 8 = 1``, so the index is ignored (always
    segment 0): ``Z[d]`` takes nibbles 0..63 (bytes 0..31 of Zn) and ``Z[d+1]`` nibbles 64..127
    (bytes 32..63), and each result byte is the LOW byte of the 32-bit ZT0 entry. For .H (2
    segments) and .S (4 segments) the index selects which quarter/half of Zn's nibbles is read.
    The source is read in full before the destination is written (Zn may overlap Zd).
    """
    elements = VL * 8 // esize
    segments = esize // 8
    segment = idx % segments
    ebytes = esize // 8
    overlap = zn == zd or zn == zd + 1
    src = Z[zn]
    if overlap:
        src = Z[zn].copy()
    if esize == 8:  # the same index arithmetic, two nibbles (one source byte) at a time
        for r in range(2):
            for j in range(VL // 2):
                byte = np.int64(src[(r * VL) // 2 + j])
                Z[zd + r, 2 * j] = ZT0[4 * (byte & 0x0F)]
                Z[zd + r, 2 * j + 1] = ZT0[4 * (byte >> 4)]
        return
    for r in range(2):
        base = (segment * 2 + r) * elements
        for e in range(elements):
            nib = base + e
            byte = np.int64(src[nib >> 1])
            index = (byte >> 4) if (nib & 1) else (byte & 0x0F)
            for b in range(ebytes):
                Z[zd + r, e * ebytes + b] = ZT0[4 * index + b]


@lazy_njit(_void(_u8_2d, _i64, _u8_1d, _i64, _i64, _i64), cache=True)
def luti2_x4(Z, zd, ZT0, zn, idx, esize):
    """LUTI2 { <Zd1>.<T>-<Zd4>.<T> }, ZT0, <Zn>[<index>] (C9.2.160, LUTI2 (four registers),
    consecutive form).

    Decode: ``isize = 2; nreg = 4; d = Zd:'00'`` (``zd`` a multiple of 4); ``esize`` in {8, 16, 32}.
    Operation (as LUTI4's, with 2-bit indexes)::

        elements = VL DIV esize; segments = esize DIV (isize * nreg); segment = imm MOD segments
        for r = 0 to 3:
            base = (segment * nreg + r) * elements
            for e = 0 to elements-1:
                index = UInt(Elem[indexes, base + e, 2])        # field base+e, bits 2(base+e)..
                Elem[Z[d+r], e, esize] = Elem[ZT0, index, 32]<esize-1:0>

    For bytes (esize = 8) ``segments = 8 DIV 8 = 1``: the index selects nothing, ``Z[d+r]``
    element ``e`` is 2-bit field ``64r + e`` of Zn (byte ``16r + e//4``, bits ``2(e%4)``), looked
    up as the LOW byte of ZT0 entry 0..3. Zn is read in full before Zd is written.
    """
    elements = VL * 8 // esize
    segments = max(1, esize // 8)
    segment = idx % segments
    ebytes = esize // 8
    src = Z[zn].copy()
    for r in range(4):
        base = (segment * 4 + r) * elements
        for e in range(elements):
            f = base + e
            index = (np.int64(src[f >> 2]) >> (2 * (f & 3))) & 3
            for b in range(ebytes):
                Z[zd + r, e * ebytes + b] = ZT0[4 * index + b]


@lazy_njit(_void(_u8_2d, _i64, _u8_1d, _i64), cache=True)
def ldr_p(P, pt, mem, addr):
    """LDR <Pt>, [<Xn|SP>{, #<imm>, MUL VL}] (C8.2 LDR (predicate)).

    Operation: ``elements = PL DIV 8`` (8 bytes at VL 512); ``for e: Elem[src, e, 8] =
    Mem[addr + e, 1]; P[t] = src``. Predicate bit ``i`` is bit ``i MOD 8`` of byte ``i DIV 8``,
    and bit ``i`` governs byte element ``i`` (``ElemP[mask, e, 8] = mask<e>``).
    """
    for i in range(VL):
        P[pt, i] = (mem[addr + (i >> 3)] >> (i & 7)) & 1


@lazy_njit(_void(_u8_2d, _i64, _i64), cache=True)
def dup_imm_b(Z, zd, imm):
    """DUP <Zd>.B, #<imm> (C8.2 DUP (immediate), unpredicated): every byte element = imm<7:0>."""
    for b in range(VL):
        Z[zd, b] = np.uint8(imm & 0xFF)


@lazy_njit(_void(_u8_2d, _i64, _u8_2d, _i64, _i64), cache=True)
def add_b_pred(Z, zdn, P, pg, zm):
    """ADD <Zdn>.B, <Pg>/M, <Zdn>.B, <Zm>.B (C8.2 ADD (vectors, predicated), 8-bit elements).

    ``pg`` is p0..p7 (3-bit field). Operation: ``for e: if ActivePredicateElement(mask, e, 8)
    then Elem[result, e] = Elem[operand1, e] + Elem[operand2, e] (mod 2^8) else Elem[operand1,
    e]`` (merging: inactive elements keep Zdn).
    """
    for e in range(VL):
        if P[pg, e] != 0:
            Z[zdn, e] = np.uint8((np.int64(Z[zdn, e]) + np.int64(Z[zm, e])) & 0xFF)


# --------------------------------------------------------------------------------------------
# ZA arithmetic
# --------------------------------------------------------------------------------------------


@lazy_njit(_void(_u8_2d, _i64, _i64, _u8_2d, _i64, _i64, _i64), cache=True)
def sdot_za_vgx4_indexed(ZA, wv, offs, Z, zn, zm, idx):
    """SDOT ZA.S[<Wv>, <offs>, VGx4], { <Zn1>.B-<Zn4>.B }, <Zm>.B[<index>]
    (C9.2.200, SDOT (4-way, multiple and indexed vector), four ZA single-vectors, 32-bit).

    Decode: ``esize = 32; n = Zn:'00'`` (``zn`` a multiple of 4); ``m = '0':Zm`` (z0..z15);
    ``index`` 0..3; ``offs`` 0..7; ``wv`` is the value of W8..W11. Operation at VL = 512::

        vectors = VL DIV 8 = 64; vstride = vectors DIV 4 = 16; eltspersegment = 128 DIV 32 = 4
        vec = (wv + offs) MOD 16
        for r = 0 to 3:                                   # ZA vector vec + 16 r
            for e = 0 to 15:
                s = (e - e MOD 4) + index
                sum = ZA[vec][e] (bits(32))
                for i = 0 to 3: sum += SInt(Zn_r byte 4e+i) * SInt(Zm byte 4s+i)
            vec += 16

    i.e. lane ``e`` of array vector ``(wv+offs)%16 + 16 r`` gains
    ``sum_c Zn_r[4e+c] * Zm[16*(e//4) + 4*index + c]``, wrapping modulo 2**32.
    """
    za = ZA.view(np.int32)
    zs = Z.view(np.int8)
    vec = (wv + offs) % VGX4_STRIDE
    for r in range(4):
        for e in range(LANES_S):
            s = 4 * (e // 4) + idx
            acc = np.int64(za[vec, e])
            for i in range(4):
                acc += np.int64(zs[zn + r, 4 * e + i]) * np.int64(zs[zm, 4 * s + i])
            za[vec, e] = _wrap32(acc)
        vec += VGX4_STRIDE


@lazy_njit(_void(_u8_2d, _i64, _u8_2d, _i64, _i64, _u8_2d, _i64, _i64), cache=True)
def smopa_s_4way(ZA, tile, Z, zn, zm, P, pn, pm):
    """SMOPA <ZAda>.S, <Pn>/M, <Pm>/M, <Zn>.B, <Zm>.B (C9.2.225, SMOPA (4-way), 32-bit variant).

    Decode: ``esize = 32``; ``da`` = tile 0..3; ``pn``/``pm`` are P0..P7. Operation at VL = 512::

        dim = VL DIV 32 = 16
        for row = 0 to 15, col = 0 to 15:
            sum = ZAtile[da][row*16 + col]                 # = array vector 4*row + da, lane col
            for k = 0 to 3:
                if ActivePredicateElement(mask1, 4*row + k, 8) &&
                   ActivePredicateElement(mask2, 4*col + k, 8):
                    sum += SInt(Zn byte 4*row + k) * SInt(Zm byte 4*col + k)
            ZAtile[da][row*16 + col] = sum                 # bits(32): wraps

    The predicates are per BYTE (the source element size, ``esize DIV 4 = 8``): an inactive
    source byte counts as 0, and an element whose 4 products are all inactive is written back
    unchanged. A ``.S``-granular predicate (only every 4th bit set, as ``PTRUE p.S`` makes)
    therefore enables only the ``k = 0`` products.
    """
    za = ZA.view(np.int32)
    zs = Z.view(np.int8)
    for row in range(LANES_S):
        arow = 4 * row + tile
        for col in range(LANES_S):
            acc = np.int64(za[arow, col])
            for k in range(4):
                if P[pn, 4 * row + k] != 0 and P[pm, 4 * col + k] != 0:
                    acc += np.int64(zs[zn, 4 * row + k]) * np.int64(zs[zm, 4 * col + k])
            za[arow, col] = _wrap32(acc)


# --------------------------------------------------------------------------------------------
# ZA zeroing and reads
# --------------------------------------------------------------------------------------------


@lazy_njit(_void(_u8_2d), cache=True)
def zero_za_all(ZA):
    """ZERO { ZA } (C9.2 ZERO (tiles), mask 0xFF): every array vector set to zero."""
    for v in range(N_ZA):
        for b in range(VL):
            ZA[v, b] = 0


@lazy_njit(_void(_u8_2d, _i64), cache=True)
def zero_za_tiles(ZA, mask):
    """ZERO { <mask> } (C9.2 ZERO (tiles)): ``for i = 0 to 7: if mask<i> then ZAtile[i, 64] = 0``.

    64-bit tile ``ZAi.D`` is the array vectors ``i + 8*s`` (ZAhslice with esize 64), so bit ``i``
    zeroes every vector ``v`` with ``v % 8 == i``. The 32-bit tile ``ZAt.S`` (vectors ``v % 4 ==
    t``) is ``ZAt.D`` + ``ZA(t+4).D``: mask ``0x11 << t``.
    """
    for v in range(N_ZA):
        if (mask >> (v % 8)) & 1:
            for b in range(VL):
                ZA[v, b] = 0


@lazy_njit(_void(_u8_2d, _i64, _i64), cache=True)
def zero_za_vgx4(ZA, wv, offs):
    """ZERO ZA.D[<Wv>, <offs>, VGx4] (C9.2 ZERO (single-vector), FEAT_SME2p1).

    ``vstride = 64 DIV 4 = 16; vec = (wv + offs) MOD 16``; zeroes array vectors ``vec + 16 r``,
    r = 0..3 -- the same four vectors a VGx4 ``SDOT ZA.S[wv, offs, VGx4]`` accumulates into.
    """
    vec = (wv + offs) % VGX4_STRIDE
    for r in range(4):
        for b in range(VL):
            ZA[vec + VGX4_STRIDE * r, b] = 0


@lazy_njit(_void(_u8_2d, _i64, _u8_2d, _i64, _i64), cache=True)
def mova_za_to_z_vgx4(Z, zd, ZA, wv, offs):
    """MOVA { <Zd1>.D-<Zd4>.D }, ZA.D[<Wv>, <offs>, VGx4] (C9.2 MOVA (array to vector, four
    registers)). ``vstride = 16; vec = (wv + offs) MOD 16``; ``Z[zd + r] = ZAvector[vec + 16 r]``
    for r = 0..3 (``zd`` a multiple of 4). A bit copy: the int32 lanes move unchanged.
    """
    vec = (wv + offs) % VGX4_STRIDE
    for r in range(4):
        for b in range(VL):
            Z[zd + r, b] = ZA[vec + VGX4_STRIDE * r, b]


@lazy_njit(_void(_u8_2d, _i64, _u8_2d, _i64, _u8_2d, _i64, _i64), cache=True)
def mova_tile_to_z_h(Z, zd, P, pg, ZA, tile, slice_):
    """MOVA <Zd>.S, <Pg>/M, ZA<t>H.S[<Ws>, <offs>] (C9.2.180 MOVA (tile to vector, single)).

    ``slice_ = (Ws + offs) MOD 16`` (by the caller). The source is ZAhslice(tile, 32, slice) =
    array vector ``4*slice + tile``. ``for e = 0 to 15: if ElemP[mask, e, 32] then Elem[Z[d], e]
    = Elem[slice, e]``; inactive elements of ``Zd`` remain unmodified (merging).
    """
    row = 4 * (slice_ % LANES_S) + tile
    for e in range(LANES_S):
        if P[pg, 4 * e] != 0:
            for b in range(4):
                Z[zd, 4 * e + b] = ZA[row, 4 * e + b]


# --------------------------------------------------------------------------------------------
# Python-side views (tests, debugging)
# --------------------------------------------------------------------------------------------


def za_vector_s32(ZA: np.ndarray, v: int) -> np.ndarray:
    """Array vector ``v`` as 16 int32 lanes (a copy)."""
    return ZA[v].view(np.int32).copy()


def za_tile_s32(ZA: np.ndarray, t: int) -> np.ndarray:
    """Tile ``ZAt.S`` as an int32 [16 rows, 16 cols] matrix: row ``i`` = array vector ``4i + t``."""
    return ZA.view(np.int32)[t::4].copy()


def z_s32(Z: np.ndarray, r: int) -> np.ndarray:
    """Register ``zr`` as 16 int32 lanes (a copy)."""
    return Z[r].view(np.int32).copy()
