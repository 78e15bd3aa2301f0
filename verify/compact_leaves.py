"""The SME2 GEMV and GEMM leaves on ``panel64-compact`` group records, as instruction programs on
the emulator (docs/FORMAT.md §4.2.1; the panel64 leaves they extend: ``verify/leaves.py``).

Only the weight expansion differs from panel64's int8-panel leaves; per kg-block ``q`` of the
group record at ``rec = (sb*ng + g) * GB`` (``BB = 32*B`` base bytes a kg-block)::

    B = 4:  ld1b z16, p0/z, [rec + q*BB]; ld1b z17, p0/z, [rec + q*BB + 64]
            luti4 {z0.b-z1.b}, zt0, z16[0]; luti4 {z2.b-z3.b}, zt0, z17[0]
    B = 2:  ld1b z16, p0/z, [rec + q*BB]
            luti2 {z0.b-z3.b}, zt0, z16[0]
    per bit plane p (splat z(20+p) = 2^(B+p), made once by dup):
        for v = 0..3: ldr p5, [rec + kq*BB + p*kq*32 + q*32 + 8v]
                      add z(v).b, p5/m, z(v).b, z(20+p).b

after which z0..z3 hold exactly the int8 panel of the kg-block (vector v = channels 16v..16v+15
x 4 K) and the SDOT (GEMV) or SMOPA (GEMM) steps are panel64's. ZT0 is the record's base table
(``params["zt0"]``). The predicated ADD takes its governing predicate from p0..p7, so the
plane predicate goes to p6, free in both leaves (GEMV: p0 ptrue, p1..p4 store tails; GEMM: p0
rows, p1 ptrue, p2..p5 channel tails); the GEMM's activations are in z24 (z20.. are splats).
"""

from __future__ import annotations

import numpy as np
from numba import types

from ..formats._jit import lazy_njit
from . import leaves as _leaves
from . import neon as _neon
from .neon import (
    Q,
    add_16b,
    and_16b,
    cmtst_16b,
    ld1_16b,
    ld1r,
    movi_16b,
    nibble_values,
    sdot_4s_elem,
    tbl1_16b,
    ushl_16b,
)
from .sme2 import (
    VL,
    add_b_pred,
    dup_imm_b,
    ld1b,
    ldr_p,
    luti2_x4,
    luti4_x2,
    new_state,
)

CHANNELS = _leaves.CHANNELS
PLANE = 32  # bytes of one bit plane of a kg-block
PRED = 6  # the plane predicate register (p0..p7: ADD's Pg field; p6 is free in both leaves)
SPLAT = 20  # z20 + p: 2^(B+p) in every byte

_u8_1d = types.uint8[::1]
_u8_2d = types.uint8[:, ::1]
_i64_1d = types.int64[::1]
_i64 = types.int64
_void = types.void


@lazy_njit()
def _record_step(Z, ZT0, P, pg, records, sb, g, q, ng, qn, base, nplanes):
    """The kg-block ``q`` of the record of (``sb``, ``g``) into z0..z3 (the module doc's
    sequence; the ``load`` of ``leaves.gemv_run`` and ``leaves.gemm_run``)."""
    bb = 32 * base
    rec = (sb * ng + g) * qn * 32 * (base + nplanes)
    blk = rec + q * bb
    if base == 4:
        ld1b(Z, 16, records, blk, P, pg)
        ld1b(Z, 17, records, blk + VL, P, pg)
        luti4_x2(Z, 0, ZT0, 16, 0, 8)
        luti4_x2(Z, 2, ZT0, 17, 0, 8)
    else:
        ld1b(Z, 16, records, blk, P, pg)
        luti2_x4(Z, 0, ZT0, 16, 0, 8)
    for p in range(nplanes):
        for v in range(4):
            ldr_p(P, PRED, records, rec + qn * bb + p * qn * PLANE + q * PLANE + 8 * v)
            add_b_pred(Z, v, P, PRED, SPLAT + p)


@lazy_njit()
def _splats(Z, base, nplanes):
    """z(20 + p) = 2^(base + p) in every byte, one per bit plane (``dup``)."""
    for p in range(nplanes):
        dup_imm_b(Z, SPLAT + p, 1 << (base + p))


_PROG_SIG = _void(_u8_1d, _u8_1d, _u8_1d, _i64, _i64, _i64, _i64, _i64, _i64, _i64_1d, _u8_1d,
                  _u8_2d, _u8_2d, _u8_1d, _u8_2d)


@lazy_njit(_PROG_SIG, cache=True)
def gemv_program(records, zt0, acts, m_rows, n, k, G, base, nplanes, sbs, out, Z, ZA, ZT0, P):
    """The GEMV leaf (panel64's program, ``leaves.gemv_run``) on group records; ``out`` int32
    bytes ``[m_rows][len(sbs)][ng][64]``, pad channels not written."""
    _leaves.gemv_run(_record_step, _splats, records, zt0, acts, m_rows, n, k, G, base, nplanes, sbs, out,
                     Z, ZA, ZT0, P)


@lazy_njit(_PROG_SIG, cache=True)
def gemm_program(records, zt0, apk, m_rows, n, k, G, base, nplanes, sbs, out, Z, ZA, ZT0, P):
    """The GEMM leaf (``leaves.gemm_run``, activations in z24: z20.. are splats) on group records."""
    _leaves.gemm_run(_record_step, _splats, 24, records, zt0, apk, m_rows, n, k, G, base, nplanes, sbs, out,
                     Z, ZA, ZT0, P)


def _args(records, zt0, n, k, G, base, nplanes, sbs):
    recs = np.array(records, copy=True).reshape(-1).view(np.uint8)  # the emulated memory (writable)
    ng = k // G
    nsb = -(-n // CHANNELS)
    if recs.size != nsb * ng * (G // 4) * 32 * (base + nplanes):
        raise ValueError(f"compact records: {recs.size} bytes, expected {nsb * ng * (G // 4) * 32 * (base + nplanes)}")
    sbs_arr = np.arange(nsb, dtype=np.int64) if sbs is None else np.asarray(list(sbs), np.int64)
    return recs, np.array(zt0, np.uint8, copy=True).reshape(64), sbs_arr


def gemv_leaf(records, zt0, a, n: int, k: int, G: int, base: int, nplanes: int, sbs=None, state=None) -> np.ndarray:
    """The GEMV leaf on each activation row: int32 ``P[M, C, ng]`` (``C``: the real channels of ``sbs``)."""
    recs, z, sbs_arr = _args(records, zt0, n, k, G, base, nplanes, sbs)
    a = np.ascontiguousarray(np.atleast_2d(a), np.int8)
    st = state if state is not None else new_state()
    ng = k // G
    out = np.zeros(a.shape[0] * len(sbs_arr) * ng * CHANNELS * 4, np.uint8)
    gemv_program(recs, z, a.view(np.uint8).reshape(-1), a.shape[0], n, k, G, base, nplanes, sbs_arr, out,
                 st.Z, st.ZA, st.ZT0, st.P)
    return _leaves.gather_partials(out, a.shape[0], sbs_arr, n, ng)


def gemm_leaf(records, zt0, a, n: int, k: int, G: int, base: int, nplanes: int, sbs=None, state=None) -> np.ndarray:
    """The GEMM leaf (16-row M-tiles, M tail predicated off): int32 ``P[M, C, ng]``."""
    recs, z, sbs_arr = _args(records, zt0, n, k, G, base, nplanes, sbs)
    a = np.ascontiguousarray(np.atleast_2d(a), np.int8)
    st = state if state is not None else new_state()
    ng = k // G
    apk = _leaves.pack_activations_ref(a, G).reshape(-1)
    out = np.zeros(a.shape[0] * len(sbs_arr) * ng * CHANNELS * 4, np.uint8)
    gemm_program(recs, z, apk, a.shape[0], n, k, G, base, nplanes, sbs_arr, out, st.Z, st.ZA, st.ZT0, st.P)
    return _leaves.gather_partials(out, a.shape[0], sbs_arr, n, ng)


# ============================================================================================
# the NEON path on the same records (128-bit Advanced SIMD, no LUTI, no predicates)
# ============================================================================================
#
# An int8 register R (0..15) of a kg-block = bytes 16R .. 16R+15 of its int8 panel = channels
# 4R .. 4R+3 x 4 K (lane L = 16R + e). Its codes come from the record as follows:
#
#   base B = 4: panel64's nibble path (neon.py): ld1 16 bytes at base + 16r (r = R // 2), and/ushr/
#               zip1/zip2 -> the nibbles of registers 2r, 2r+1, tbl {v1} -> base values
#   base B = 2: ld1r .4s the 4 bytes at base + 4R (one a channel), tbl by v8 (byte c -> lanes
#               4c .. 4c+3), ushl by v9 (0, -2, -4, -6: crumb j to bits 0..1), and v10 (#3),
#               tbl {v1} -> base values
#   bit plane p: ld1r .8h the 2 plane bytes at plane + 2R (bits of lanes 16R .. 16R+15), tbl by
#               v11 (byte 0 -> lanes 0..7, byte 1 -> lanes 8..15), cmtst with v12 (1, 2, .., 128
#               twice), and with v(13+p) (2^(B+p)), add to the values
#
# then sdot v(16+R).4s, values.16b, v0.4b[q % 4], as on int8 panels.
#
# Registers: v0 activations, v1 base table (byte i = low byte of ZT0 entry i), v2 #0x0f, v3..v7
# scratch, v8..v12 the constants above, v13, v14 plane splats, v15 plane scratch, v16..v31 sums.

#: the constant vectors v8, v9, v11, v12 (loaded with ld1 from this literal pool)
NEON_CONSTS = np.concatenate([
    np.repeat(np.arange(4), 4),  # v8: byte c -> lanes 4c .. 4c+3
    np.tile(np.array([0, -2, -4, -6]) & 0xFF, 4),  # v9: crumb j -> bits 0..1
    np.repeat(np.arange(2), 8),  # v11: plane byte 0 -> lanes 0..7, byte 1 -> lanes 8..15
    np.tile(1 << np.arange(8), 2),  # v12: the lane's bit
]).astype(np.uint8)


@lazy_njit(_void(_u8_2d, _i64, _i64, _u8_1d, _i64, _i64, _i64), cache=True, inline="always")
def _neon_planes(V, vr, R, recs, plane0, nplanes, qn):
    """Add the bit planes of int8 register ``R`` to the values in ``vr`` (the module text)."""
    for p in range(nplanes):
        ld1r(V, 15, recs, plane0 + p * qn * PLANE + 2 * R, 2)
        tbl1_16b(V, 15, 15, 11)
        cmtst_16b(V, 15, 15, 12)
        and_16b(V, 15, 15, 13 + p)
        add_16b(V, vr, vr, 15)


@lazy_njit()
def _neon_setup(V, consts, base, nplanes):
    """v8..v12: the constants above (v10 #3), v(13 + p): the plane splats 2^(B+p)."""
    ld1_16b(V, 8, consts, 0)
    ld1_16b(V, 9, consts, Q)
    movi_16b(V, 10, 0x03)
    ld1_16b(V, 11, consts, 2 * Q)
    ld1_16b(V, 12, consts, 3 * Q)
    for p in range(nplanes):
        movi_16b(V, 13 + p, 1 << (base + p))


@lazy_njit()
def _neon_step(V, records, sb, g, q, ng, qn, lane, base, nplanes):
    """Kg-block ``q`` of the record of (``sb``, ``g``) into the accumulators (the module text;
    the ``step`` of ``neon.neon_run``)."""
    bb = 32 * base
    rec = (sb * ng + g) * qn * 32 * (base + nplanes)
    blk = rec + q * bb
    plane0 = rec + qn * bb + q * PLANE
    if base == 4:
        for r in range(8):
            nibble_values(V, records, blk + Q * r)
            _neon_planes(V, 6, 2 * r, records, plane0, nplanes, qn)
            _neon_planes(V, 7, 2 * r + 1, records, plane0, nplanes, qn)
            sdot_4s_elem(V, 16 + 2 * r, 6, 0, lane)
            sdot_4s_elem(V, 17 + 2 * r, 7, 0, lane)
    else:
        for r in range(16):
            ld1r(V, 3, records, blk + 4 * r, 4)
            tbl1_16b(V, 3, 3, 8)
            ushl_16b(V, 3, 3, 9)
            and_16b(V, 3, 3, 10)
            tbl1_16b(V, 6, 1, 3)
            _neon_planes(V, 6, r, records, plane0, nplanes, qn)
            sdot_4s_elem(V, 16 + r, 6, 0, lane)


@lazy_njit(_void(_u8_1d, _u8_1d, _u8_1d, _u8_1d, _i64, _i64, _i64, _i64, _i64, _i64, _i64_1d, _u8_1d, _u8_2d),
           cache=True)
def neon_program(records, table16, consts, acts, m_rows, n, k, G, base, nplanes, sbs, out, V):
    """The NEON path (``neon.neon_run``) on group records for ``m_rows`` activation rows; ``out``
    as the SME2 leaves: int32 bytes ``[m_rows][len(sbs)][ng][64]``."""
    _neon.neon_run(_neon_step, _neon_setup, records, table16, consts, acts, m_rows, n, k, G, base, nplanes, sbs,
                   out, V)


def neon_leaf(records, zt0, a, n: int, k: int, G: int, base: int, nplanes: int, sbs=None, vregs=None) -> np.ndarray:
    """The NEON path on every activation row: int32 ``P[M, C, ng]`` (the table: the low byte of
    each ZT0 entry, as for panel64's nibble panels)."""
    from .neon import new_vregs

    recs, z, sbs_arr = _args(records, zt0, n, k, G, base, nplanes, sbs)
    a = np.ascontiguousarray(np.atleast_2d(a), np.int8)
    V = vregs if vregs is not None else new_vregs()
    ng = k // G
    out = np.zeros(a.shape[0] * len(sbs_arr) * ng * CHANNELS * 4, np.uint8)
    neon_program(recs, np.ascontiguousarray(z[0::4]), NEON_CONSTS, a.view(np.uint8).reshape(-1), a.shape[0],
                 n, k, G, base, nplanes, sbs_arr, out, V)
    return _leaves.gather_partials(out, a.shape[0], sbs_arr, n, ng)
