"""The NEON panel path, emulated: the fallback that reads the SAME ``panel64`` bytes (docs/FORMAT.md §4.2).

A runtime without SME2, or with a streaming vector length other than 512 bits, runs this path
on the panels as written: 128-bit Advanced SIMD registers, no predicates, the 16-entry int8
code table in one register (``tbl``) and the 4-way ``sdot`` by element. It produces the same
int32 partials ``P[m, n, g]`` as the SME2 leaves, which is what makes the three paths (SME2,
NEON, the standard dispatch) agree bit for bit after the §3 rescale.

State: ``V`` uint8[32, 16] -- v0..v31, byte ``e`` of vN is ``V[N, e]``. Memory is any
uint8[::1] array addressed by byte offset. Each instruction follows its A64 ``Operation``
pseudocode (Arm ARM C7.2, Advanced SIMD); the docstrings restate it. Arithmetic wraps like
hardware (``bits(32)`` accumulators).

How one 128-byte nibble kg-block (64 channels x 4 K) is consumed, 16 bytes (8 channels) at a
time, register ``r`` = bytes ``16r .. 16r+15`` = channels ``8r .. 8r+7``::

    byte 2c' = k0 | k1<<4, byte 2c'+1 = k2 | k3<<4        (c' = 0..7 within the register)
    and  lo, x, #0x0f   -> lo[2c'] = k0, lo[2c'+1] = k2
    ushr hi, x, #4      -> hi[2c'] = k1, hi[2c'+1] = k3
    zip1 w0, lo, hi     -> k0 k1 k2 k3 of channels 8r+0..8r+3   ([4 ch][4 K], the sdot order)
    zip2 w1, lo, hi     -> k0 k1 k2 k3 of channels 8r+4..8r+7
    tbl  w, {table}, w  -> int8 value of each code
    sdot acc[2r].4s, w0.16b, act.4b[q%4];  sdot acc[2r+1].4s, w1.16b, act.4b[q%4]

so accumulator ``j`` (v16+j) holds channels ``4j .. 4j+3``. An int8 kg-block (256 B) is already
``[4 v][16 ch][4 K]``: register ``r`` = channels ``4r .. 4r+3``, fed to ``sdot`` directly into
accumulator ``r``. ``act`` is the 16 activation bytes ``a[G*g + 4*(q & ~3) ..]``, as the SME2
GEMV's ``ld1rqb`` loads them.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from numba import types

from ..formats._jit import closable_inline, lazy_njit
from .leaves import CHANNELS, INT8_BLOCK, NIBBLE_BLOCK, check_leaf_inputs, gather_partials

Q = 16  # bytes per Advanced SIMD register
N_V = 32

_u8_1d = types.uint8[::1]
_u8_2d = types.uint8[:, ::1]
_i64 = types.int64
_i64_1d = types.int64[::1]
_void = types.void


def new_vregs() -> np.ndarray:
    """A zeroed Advanced SIMD register file, uint8[32, 16]."""
    return np.zeros((N_V, Q), np.uint8)


@lazy_njit(types.int32(types.int64), cache=True, inline="always")
def _wrap32(x):
    return np.int32(((x + 0x80000000) & 0xFFFFFFFF) - 0x80000000)


@lazy_njit(_void(_u8_2d, _i64, _u8_1d, _i64), cache=True)
def ld1_16b(V, vt, mem, addr):
    """LD1 { <Vt>.16B }, [<Xn>] (C7.2 LD1 (multiple structures), one register):
    ``V[t] = Mem[addr, 16]``, byte e from ``addr + e``."""
    for e in range(Q):
        V[vt, e] = mem[addr + e]


@lazy_njit(_void(_u8_2d, _i64, _u8_1d, _i64), cache=True)
def st1_4s(V, vt, mem, addr):
    """ST1 { <Vt>.4S }, [<Xn>] (C7.2 ST1 (multiple structures), one register):
    ``Mem[addr, 16] = V[t]`` (little-endian, so lane ``e`` lands at ``addr + 4e``)."""
    for e in range(Q):
        mem[addr + e] = V[vt, e]


@lazy_njit(_void(_u8_2d, _i64, _i64), cache=True)
def movi_16b(V, vd, imm8):
    """MOVI <Vd>.16B, #<imm8> (C7.2 MOVI): every byte = imm8 (``movi v.4s, #0`` zeroes too)."""
    for e in range(Q):
        V[vd, e] = np.uint8(imm8 & 0xFF)


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64), cache=True)
def and_16b(V, vd, vn, vm):
    """AND <Vd>.16B, <Vn>.16B, <Vm>.16B (C7.2 AND (vector)): ``V[d] = V[n] AND V[m]``."""
    for e in range(Q):
        V[vd, e] = V[vn, e] & V[vm, e]


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64), cache=True)
def ushr_16b(V, vd, vn, shift):
    """USHR <Vd>.16B, <Vn>.16B, #<shift> (C7.2 USHR), shift 1..8: for each byte element
    ``result = UInt(element) >> shift`` (logical; a shift of 8 gives 0)."""
    for e in range(Q):
        V[vd, e] = np.uint8((np.int64(V[vn, e]) >> shift) & 0xFF)


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64), cache=True)
def zip1_16b(V, vd, vn, vm):
    """ZIP1 <Vd>.16B, <Vn>.16B, <Vm>.16B (C7.2 ZIP1): ``pairs = 8; base = 0;
    for p = 0 to 7: result[2p] = op1[base+p]; result[2p+1] = op2[base+p]``.
    Both operands are read in full before ``Vd`` is written."""
    if vd == vn or vd == vm:
        a = V[vn].copy()
        b = V[vm].copy()
        for p in range(Q // 2):
            V[vd, 2 * p] = a[p]
            V[vd, 2 * p + 1] = b[p]
    else:
        for p in range(Q // 2):
            V[vd, 2 * p] = V[vn, p]
            V[vd, 2 * p + 1] = V[vm, p]


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64), cache=True)
def zip2_16b(V, vd, vn, vm):
    """ZIP2 <Vd>.16B, <Vn>.16B, <Vm>.16B (C7.2 ZIP2): as ZIP1 with ``base = 8`` (upper halves):
    ``result[2p] = op1[8+p]; result[2p+1] = op2[8+p]``."""
    if vd == vn or vd == vm:
        a = V[vn].copy()
        b = V[vm].copy()
        for p in range(Q // 2):
            V[vd, 2 * p] = a[Q // 2 + p]
            V[vd, 2 * p + 1] = b[Q // 2 + p]
    else:
        for p in range(Q // 2):
            V[vd, 2 * p] = V[vn, Q // 2 + p]
            V[vd, 2 * p + 1] = V[vm, Q // 2 + p]


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64), cache=True)
def tbl1_16b(V, vd, vn, vm):
    """TBL <Vd>.16B, { <Vn>.16B }, <Vm>.16B (C7.2 TBL, one table register):
    ``for i = 0 to 15: index = UInt(Elem[indices, i, 8]); result[i] = index < 16 ?
    table[index] : 0`` (TBL zeroes out-of-range lanes; TBX would keep them)."""
    if vd == vn:
        table = V[vn].copy()
        for i in range(Q):
            j = np.int64(V[vm, i])
            V[vd, i] = table[j] if j < Q else np.uint8(0)
    else:  # Vd == Vm is safe: lane i reads index i before writing lane i
        for i in range(Q):
            j = np.int64(V[vm, i])
            V[vd, i] = V[vn, j] if j < Q else np.uint8(0)


@lazy_njit(_void(_u8_2d, _i64, _u8_1d, _i64, _i64), cache=True)
def ld1r(V, vt, mem, addr, esize_bytes):
    """LD1R { <Vt>.<T> }, [<Xn>] (C7.2 LD1R): load one element of ``esize_bytes`` bytes
    (little-endian) and replicate it to every element of ``Vt``: byte ``e`` = ``Mem[addr + e
    MOD esize_bytes]``."""
    for e in range(Q):
        V[vt, e] = mem[addr + e % esize_bytes]


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64), cache=True)
def ushl_16b(V, vd, vn, vm):
    """USHL <Vd>.16B, <Vn>.16B, <Vm>.16B (C7.2 USHL): ``shift = SInt(Elem[op2, e, 8]<7:0>);
    result = shift >= 0 ? UInt(op1) << shift : UInt(op1) >> -shift`` (low 8 bits kept)."""
    for e in range(Q):
        sh = np.int64(np.int8(V[vm, e]))
        x = np.int64(V[vn, e])
        if sh >= 0:
            V[vd, e] = np.uint8((x << min(sh, 63)) & 0xFF) if sh < 8 else np.uint8(0)
        else:
            V[vd, e] = np.uint8((x >> min(-sh, 63)) & 0xFF)


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64), cache=True)
def cmtst_16b(V, vd, vn, vm):
    """CMTST <Vd>.16B, <Vn>.16B, <Vm>.16B (C7.2 CMTST): ``test_passed = (op1 AND op2) !=
    0``; each byte element is all ones if it passed, else 0."""
    for e in range(Q):
        V[vd, e] = np.uint8(0xFF) if (V[vn, e] & V[vm, e]) != 0 else np.uint8(0)


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64), cache=True)
def add_16b(V, vd, vn, vm):
    """ADD <Vd>.16B, <Vn>.16B, <Vm>.16B (C7.2 ADD (vector)): byte-wise sum mod 2^8."""
    for e in range(Q):
        V[vd, e] = np.uint8((np.int64(V[vn, e]) + np.int64(V[vm, e])) & 0xFF)


@lazy_njit(_void(_u8_2d, _i64, _i64, _i64, _i64), cache=True)
def sdot_4s_elem(V, vd, vn, vm, lane):
    """SDOT <Vd>.4S, <Vn>.16B, <Vm>.4B[<index>] (C7.2 SDOT (by element), FEAT_DotProd).

    Operation: ``for e = 0 to 3: res = 0; for i = 0 to 3: res += SInt(Vn byte 4e+i) *
    SInt(Vm byte 4*index+i); Elem[Vd, e, 32] = Elem[Vd, e, 32] + res`` (bits(32), wraps).
    ``vm`` is V0..V31 (the full 5-bit form, M:Rm), ``index`` = H:L in 0..3.
    """
    acc = V.view(np.int32)
    vs = V.view(np.int8)
    for e in range(4):
        res = np.int64(acc[vd, e])
        for i in range(4):
            res += np.int64(vs[vn, 4 * e + i]) * np.int64(vs[vm, 4 * lane + i])
        acc[vd, e] = _wrap32(res)


# ============================================================================================
# the NEON panel program
# ============================================================================================
#
# Register allocation:
#   v0        16 activation bytes a[G*g + 4*(q & ~3) ..]       (reloaded when q % 4 == 0)
#   v1        the 16-entry int8 code table (low byte of each ZT0 entry)
#   v2        0x0f in every byte
#   v3        16 panel bytes; v4 lo nibbles; v5 hi nibbles; v6, v7 the zipped/looked-up weights
#   v16..v31  int32x4 accumulators: v(16+j) lanes = channels 4j .. 4j+3 of the super-block


@lazy_njit(_void(_u8_2d, _u8_1d, _i64), cache=True, inline="always")
def nibble_values(V, mem, addr):
    """The 32 nibbles of the 16 bytes at ``addr`` as table values in v6 (lo/hi of bytes 0..7)
    and v7 (bytes 8..15): ld1 v3; and v4, v3, v2; ushr v5, v3, #4; zip1/zip2 v6, v7; tbl {v1}
    (v1 the table, v2 #0x0f; shared with the compact records' NEON path)."""
    ld1_16b(V, 3, mem, addr)
    and_16b(V, 4, 3, 2)
    ushr_16b(V, 5, 3, 4)
    zip1_16b(V, 6, 4, 5)
    zip2_16b(V, 7, 4, 5)
    tbl1_16b(V, 6, 1, 6)
    tbl1_16b(V, 7, 1, 7)


@lazy_njit()
def _panel_step(V, panels, sb, g, q, ng, qn, lane, nibble, unused):
    """Kg-block ``q`` of group ``g`` of super-block ``sb`` into the accumulators (the ``step``
    of :func:`neon_run` on panel64's panels): nibble panels through the table, 8 x 2 SDOTs; int8
    panels as they are, 16 SDOTs."""
    blk = ((sb * ng + g) * qn + q) * (NIBBLE_BLOCK if nibble else INT8_BLOCK)
    if nibble:
        for r in range(8):
            nibble_values(V, panels, blk + Q * r)
            sdot_4s_elem(V, 16 + 2 * r, 6, 0, lane)
            sdot_4s_elem(V, 17 + 2 * r, 7, 0, lane)
    else:
        for r in range(16):
            ld1_16b(V, 3, panels, blk + Q * r)
            sdot_4s_elem(V, 16 + r, 3, 0, lane)


@lazy_njit()
def _no_setup(V, consts, f0, f1):
    """Panel64's NEON path needs no register beyond v1 (the table) and v2 (#0x0f)."""


@closable_inline
def neon_run(step, setup, panels, table16, consts, acts, m_rows, n, k, G, f0, f1, sbs, out, V):
    """The NEON program above for any weight form: ``setup(V, consts, f0, f1)`` once after v1
    and v2, and ``step(V, panels, sb, g, q, ng, qn, lane, f0, f1)`` adds kg-block ``q`` of
    group ``g`` of super-block ``sb`` into v16..v31 by SDOT lane ``lane`` of v0 (panel64:
    ``f0`` = nibble; the compact records, verify/compact_leaves.py: ``f0, f1`` = base bits,
    bit planes, ``consts`` their constant pool)."""
    ng = k // G
    qn = G // 4
    nsel = sbs.shape[0]
    ld1_16b(V, 1, table16, 0)
    movi_16b(V, 2, 0x0F)
    setup(V, consts, f0, f1)
    for row in range(m_rows):
        arow = row * k
        for si in range(nsel):
            sb = sbs[si]
            for g in range(ng):
                for j in range(16):
                    movi_16b(V, 16 + j, 0)
                for q in range(qn):
                    if q % 4 == 0:
                        ld1_16b(V, 0, acts, arow + G * g + 4 * q)
                    step(V, panels, sb, g, q, ng, qn, q % 4, f0, f1)
                base = (((row * nsel) + si) * ng + g) * CHANNELS
                for j in range(16):
                    # whole vectors of pad channels are skipped; a partial one is stored
                    # (its pad lanes are exactly 0) and dropped by the wrapper
                    if sb * CHANNELS + 4 * j < n:
                        st1_4s(V, 16 + j, out, (base + 4 * j) * 4)


@lazy_njit(_void(_u8_1d, _u8_1d, _u8_1d, _i64, _i64, _i64, _i64, _i64, _i64_1d, _u8_1d, _u8_2d),
    cache=True,
)
def neon_program(panels, table16, acts, m_rows, n, k, G, nibble, sbs, out, V):
    """Run the NEON panel path on ``m_rows`` activation rows; ``out`` as the SME2 leaves:
    int32 bytes ``[m_rows][len(sbs)][ng][64]``. ``table16`` is the 16-byte code table."""
    neon_run(_panel_step, _no_setup, panels, table16, table16, acts, m_rows, n, k, G, nibble, 0, sbs, out, V)


def neon_leaf(panels, zt0, a, n: int, k: int, G: int, nibble: bool,
              sbs: Optional[Sequence[int]] = None,
              vregs: Optional[np.ndarray] = None) -> np.ndarray:
    """Run the NEON panel path on every activation row; return int32 ``P[M, C, ng]``.

    Same arguments and result as ``leaves.gemv_leaf``. The NEON table is the low byte of each
    of the 16 ZT0 entries (the same manifest table the SME2 path loads into ZT0).
    """
    panels, zt0, a, sbs_arr = check_leaf_inputs(panels, zt0, a, n, k, G, nibble, sbs)
    V = vregs if vregs is not None else new_vregs()
    ng = k // G
    table16 = np.ascontiguousarray(zt0[0::4])
    out = np.zeros(a.shape[0] * len(sbs_arr) * ng * CHANNELS * 4, np.uint8)
    neon_program(panels, table16, np.ascontiguousarray(a).view(np.uint8).reshape(-1), a.shape[0],
                 int(n), int(k), int(G), int(bool(nibble)), sbs_arr, out, V)
    return gather_partials(out, a.shape[0], sbs_arr, int(n), ng)
