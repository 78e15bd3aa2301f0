"""The two SME2 panel leaves (GEMV, GEMM) as instruction programs on the emulator (docs/FORMAT.md §4.2).

A leaf here is what a runtime runs in streaming mode on ``panel64`` bytes at SVL = 512: a
sequence of calls into ``verify/sme2.py``, one call per instruction, with the register
allocation written out. It produces the int32 partials ``P[m, n, g] = sum_k c[n,k]·a[m,k]``
over each group ``g`` of ``G`` consecutive K (docs/FORMAT.md §3 step 2); the f32 rescale is not a leaf's
job.

Panel bytes (docs/FORMAT.md §4.2), kg-block = 4 consecutive K x 64 channels, blocks ordered
``[SB][ng][G/4]``::

    nibble panel, 128 B per kg-block            int8 panel, 256 B per kg-block
    byte 2ch   = k0 | k1 << 4                   byte 64v + 4ch + c = int8 code of
    byte 2ch+1 = k2 | k3 << 4   (ch 0..63)      channel 16v + ch, K offset c
    LUTI4 (byte form, 2 x 2 registers) makes    (already the expanded order: 4 vectors
    4 vectors [v][16 ch][4 K]: expanded byte    of [16 ch][4 K])
    e = nibble e -> v = e//64, ch 16v+(e%64)//4,
    K offset e%4; value = low byte of ZT0[e's code]

    nibble (n, k): byte (((n//64)·ng + k//G)·(G/4) + (k%G)//4)·128 + 2·(n%64) + (k%4)//2,
                   shift 4·(k%2)

Output of the kernels: raw int32 partials in a scratch buffer laid out
``[M][len(sbs)][ng][64]`` (channel order within a super-block, so each store is one contiguous
16-lane ``st1w``); pad channels (``>= n``) are never stored. The Python wrappers return
``P[M, C, ng]`` for the real channels ``C`` of the requested super-blocks.

References beside the kernels: ``partials_ref`` (einsum over integer codes), ``panel_bytes_ref``
and ``read_panels_ref`` (the closed-form byte addressing, with ``svl_bits`` so a wrong-geometry
panel can be built and shown to fail), ``pack_activations_ref`` (numpy).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from numba import types

from ..formats._jit import closable_inline, lazy_njit
from ..formats.errors import BadInputError
from ..repack import panel64 as _panel64
from .sme2 import (
    LANES_S,
    VL,
    ld1b,
    ld1rqb,
    ldr_zt0,
    luti4_x2,
    mova_za_to_z_vgx4,
    new_state,
    ptrue,
    sdot_za_vgx4_indexed,
    smopa_s_4way,
    st1w_z,
    st1w_za_h,
    whilelt,
    zero_za_all,
    zero_za_vgx4,
)

# the panel geometry is panel64's own (read, never restated): 64 output channels per
# super-block at SVL 512 (4 vectors x 16 int32 lanes), 128-byte nibble and 256-byte int8 kg-blocks
CHANNELS = _panel64.CHANNELS
NIBBLE_BLOCK = _panel64.NIBBLE_KG_BYTES
INT8_BLOCK = _panel64.INT8_KG_BYTES
ROWS = 16  # activation rows per GEMM M-tile (int32 lanes of a tile)

_u8_1d = types.uint8[::1]
_u8_2d = types.uint8[:, ::1]
_i64_1d = types.int64[::1]
_i64 = types.int64
_void = types.void

# ============================================================================================
# GEMV leaf (M = 1 per activation row)
# ============================================================================================
#
# Register allocation:
#   p0      ptrue .b                          (panel / activation loads)
#   p1..p4  whilelt .s, channel sb*64+16v+e < n (store of vector v)
#   z16,z17 the 128 nibble-panel bytes         (nibble panels)
#   z0..z3  the 4 expanded weight vectors [16 ch][4 K]
#   z12     16 activation bytes, replicated per 128-bit segment (ld1rqb); SDOT's indexed
#           operand must be one of z0..z15 (its Zm field is 4 bits)
#   z8..z11 read-out of the 4 ZA vectors of the slot
#   w8      ZA slot = g % 16  (sdot/zero/mova address vectors slot + 16 v)
#
# Program for one activation row (address arow of a[row, 0]):
#   ldr zt0, [zt0]
#   for each sb: for v: whilelt p(1+v).s, sb*64+16v, n
#     for each g:
#       zero za.d[w8, 0, vgx4]          (FEAT_SME2p1; any other way of zeroing the 4 vectors
#                                       of the slot is numerically the same)
#       for q in 0 .. G/4-1:   (kg-block at ((sb*ng + g)*(G/4) + q)*bytes)
#         nibble: ld1b z16, p0/z, [blk]; ld1b z17, p0/z, [blk+64]
#                 luti4 {z0.b-z1.b}, zt0, z16[0]; luti4 {z2.b-z3.b}, zt0, z17[0]
#         int8:   ld1b z(v), p0/z, [blk + 64v]   v = 0..3
#         if q % 4 == 0: ld1rqb z12.b, p0/z, [arow + G*g + 4*q]   (= 4*(q & ~3))
#         sdot za.s[w8, 0, vgx4], {z0.b-z3.b}, z12.b[q % 4]
#       mova {z8.d-z11.d}, za.d[w8, 0, vgx4]
#       st1w z(8+v).s, p(1+v), [out + ((row, sb_i, g) * 64 + 16 v) * 4]   v = 0..3
#
# Lane e of ZA vector slot+16v then holds sum_q sum_c W[16v+e, 4q+c] * a[G*g + 4q + c]: the
# sdot reads activation bytes 16*(e//4) + 4*(q%4) + c of z12, i.e. offset 4*(q%4) + c of the
# replicated quadword a[G*g + 4*(q & ~3) ...].


@lazy_njit(inline="always")
def load_weights(Z, ZT0, panels, blk, nibble, P, pg):
    """One kg step's weights into z0..z3 ([v][16 ch][4 K] each), both leaves' step: a nibble
    panel's two vectors (z16, z17) through LUTI4, or an int8 panel's four vectors as they are;
    loads governed by predicate ``pg`` (the GEMV's p0, the GEMM's p1)."""
    if nibble:
        ld1b(Z, 16, panels, blk, P, pg)
        ld1b(Z, 17, panels, blk + VL, P, pg)
        luti4_x2(Z, 0, ZT0, 16, 0, 8)
        luti4_x2(Z, 2, ZT0, 17, 0, 8)
    else:
        for v in range(4):
            ld1b(Z, v, panels, blk + VL * v, P, pg)


@lazy_njit()
def _panel_step(Z, ZT0, P, pg, panels, sb, g, q, ng, qn, nibble, unused):
    """:func:`load_weights` of kg-block ``q`` of group ``g`` of super-block ``sb`` (the
    ``load`` of :func:`gemv_run` and :func:`gemm_run` on panel64's panels)."""
    load_weights(Z, ZT0, panels, ((sb * ng + g) * qn + q) * (NIBBLE_BLOCK if nibble else INT8_BLOCK), nibble, P, pg)


@lazy_njit()
def _no_setup(Z, f0, f1):
    """Panel64's leaves need no register set up beyond ZT0."""


@closable_inline
def gemv_run(load, setup, panels, zt0, acts, m_rows, n, k, G, f0, f1, sbs, out, Z, ZA, ZT0, P):
    """The GEMV program above for any weight form: ``setup(Z, f0, f1)`` once after ZT0, and
    ``load(Z, ZT0, P, pg, panels, sb, g, q, ng, qn, f0, f1)`` brings kg-block ``q`` of group
    ``g`` of super-block ``sb`` into z0..z3 (panel64: ``f0`` = nibble; the compact records,
    verify/compact_leaves.py: ``f0, f1`` = base bits, bit planes)."""
    ng = k // G
    qn = G // 4
    nsel = sbs.shape[0]
    ptrue(P, 0, 1)
    ldr_zt0(ZT0, zt0, 0)
    setup(Z, f0, f1)
    for row in range(m_rows):
        arow = row * k
        for si in range(nsel):
            sb = sbs[si]
            for v in range(4):
                whilelt(P, 1 + v, 4, sb * CHANNELS + LANES_S * v, n)
            for g in range(ng):
                slot = g % 16  # w8
                zero_za_vgx4(ZA, slot, 0)
                for q in range(qn):
                    load(Z, ZT0, P, 0, panels, sb, g, q, ng, qn, f0, f1)
                    if q % 4 == 0:
                        ld1rqb(Z, 12, acts, arow + G * g + 4 * q, P, 0)
                    sdot_za_vgx4_indexed(ZA, slot, 0, Z, 0, 12, q % 4)
                mova_za_to_z_vgx4(Z, 8, ZA, slot, 0)
                base = (((row * nsel) + si) * ng + g) * CHANNELS
                for v in range(4):
                    st1w_z(Z, 8 + v, out, (base + LANES_S * v) * 4, P, 1 + v)


@lazy_njit(_void(_u8_1d, _u8_1d, _u8_1d, _i64, _i64, _i64, _i64, _i64, _i64_1d, _u8_1d,
          _u8_2d, _u8_2d, _u8_1d, _u8_2d),
    cache=True,
)
def gemv_program(panels, zt0, acts, m_rows, n, k, G, nibble, sbs, out, Z, ZA, ZT0, P):
    """Run the GEMV leaf for ``m_rows`` activation rows (``acts`` = int8 ``a[m_rows, k]`` as bytes).

    ``out`` receives int32 partials as bytes, layout ``[m_rows][len(sbs)][ng][64]``; entries of
    pad channels are not written. Preconditions (checked by ``gemv_leaf``): sizes consistent,
    ``G % 16 == 0``, ``k % G == 0``, every sb < ceil(n/64).
    """
    gemv_run(_panel_step, _no_setup, panels, zt0, acts, m_rows, n, k, G, nibble, 0, sbs, out, Z, ZA, ZT0, P)


# ============================================================================================
# GEMM leaf (16 activation rows per M-tile)
# ============================================================================================
#
# Packed activations (``pack_activations``), 64 B per kg step::
#
#     apk[mt][g][q][i][c] = a[16*mt + i, G*g + 4*q + c]     (rows >= M are 0)
#     byte  (((mt*ng + g)*(G/4) + q)*16 + i)*4 + c
#
# One kg step is one 64-byte vector: byte 4i + c = row i, K offset c -- the SMOPA first operand
# (``SVLs x 4`` sub-matrix). The expanded weight vector z_t is the second operand
# (``4 x SVLs``: byte 4j + c = channel 16t + j, K offset c).
#
# Register allocation:
#   p0      whilelt .b, 0, 4*rows        (rows of this M-tile; activation load + SMOPA Pn)
#   p1      ptrue .b                      (panel loads)
#   p2..p5  whilelt .b, 0, 4*cnt_t        cnt_t = real channels of tile t (SMOPA Pm; the same
#                                         register governs st1w .s: bit 4j set <=> j < cnt_t)
#   z20     packed activations of the kg step; z16,z17 panel bytes; z0..z3 weights
#
# Program for one M-tile and one sb:
#   for each g:
#     zero {za}
#     for q: ld1b z20, p0/z, [apk + step*64]; (weights into z0..z3 as in the GEMV)
#            smopa za{t}.s, p0/m, p(2+t)/m, z20.b, z{t}.b      t = 0..3
#     for t, for i < rows: st1w za{t}h.s[i], p(2+t), [out + ((m, sb_i, g)*64 + 16t)*4]
#
# ZA_t[i][j] = sum_q sum_c a[16mt+i, G*g+4q+c] * W[sb*64+16t+j, G*g+4q+c].


@closable_inline
def gemm_run(load, setup, areg, panels, zt0, apk, m_rows, n, k, G, f0, f1, sbs, out, Z, ZA, ZT0, P):
    """The GEMM program above for any weight form (``load``, ``setup``, ``f0``, ``f1`` as in
    :func:`gemv_run`), the packed activations in z(``areg``) (panel64: z20)."""
    ng = k // G
    qn = G // 4
    nsel = sbs.shape[0]
    mtiles = (m_rows + ROWS - 1) // ROWS
    ptrue(P, 1, 1)
    ldr_zt0(ZT0, zt0, 0)
    setup(Z, f0, f1)
    for mt in range(mtiles):
        rows = min(ROWS, m_rows - ROWS * mt)
        whilelt(P, 0, 1, 0, 4 * rows)
        for si in range(nsel):
            sb = sbs[si]
            for t in range(4):
                cnt = min(max(n - sb * CHANNELS - LANES_S * t, 0), LANES_S)
                whilelt(P, 2 + t, 1, 0, 4 * cnt)
            for g in range(ng):
                zero_za_all(ZA)
                for q in range(qn):
                    ld1b(Z, areg, apk, ((mt * ng + g) * qn + q) * VL, P, 0)
                    load(Z, ZT0, P, 1, panels, sb, g, q, ng, qn, f0, f1)
                    for t in range(4):
                        smopa_s_4way(ZA, t, Z, areg, t, P, 0, 2 + t)
                for t in range(4):
                    for i in range(rows):
                        m = ROWS * mt + i
                        addr = ((((m * nsel) + si) * ng + g) * CHANNELS + LANES_S * t) * 4
                        st1w_za_h(ZA, t, i, out, addr, P, 2 + t)


@lazy_njit(_void(_u8_1d, _u8_1d, _u8_1d, _i64, _i64, _i64, _i64, _i64, _i64_1d, _u8_1d,
          _u8_2d, _u8_2d, _u8_1d, _u8_2d),
    cache=True,
)
def gemm_program(panels, zt0, apk, m_rows, n, k, G, nibble, sbs, out, Z, ZA, ZT0, P):
    """Run the GEMM leaf over ``ceil(m_rows/16)`` M-tiles of packed activations ``apk``.

    ``out`` receives int32 partials as bytes, layout ``[m_rows][len(sbs)][ng][64]``; rows
    ``>= m_rows`` and pad channels are not written.
    """
    gemm_run(_panel_step, _no_setup, 20, panels, zt0, apk, m_rows, n, k, G, nibble, 0, sbs, out, Z, ZA, ZT0, P)


# ============================================================================================
# activation packer
# ============================================================================================


@lazy_njit(types.uint8[:, :, :, :, ::1](types.int8[:, ::1], _i64), cache=True)
def _pack_activations_kernel(a, G):
    m_rows, k = a.shape
    ng = k // G
    qn = G // 4
    mtiles = (m_rows + ROWS - 1) // ROWS
    out = np.zeros((mtiles, ng, qn, ROWS, 4), np.uint8)
    for m in range(m_rows):
        mt = m // ROWS
        i = m % ROWS
        for kk in range(k):
            g = kk // G
            r = kk % G
            out[mt, g, r // 4, i, r % 4] = np.uint8(np.int64(a[m, kk]) & 0xFF)
    return out


#: activation values up to which the GEMM leaf packs them in numpy (``pack_activations_ref``,
#: the same bytes, tested): a reshape and a transpose, as fast as the kernel at verification's
#: sizes (M <= 64), and a small job's first run then never compiles the packer
NUMPY_PACK_VALUES = 1 << 20


def pack_activations(a: np.ndarray, G: int) -> np.ndarray:
    """Pack int8 activations ``a[M, K]`` for the GEMM leaf: uint8 ``[Mt][ng][G/4][16][4]``."""
    a = _as_int8_2d(a, "activations")
    _check_group(a.shape[1], G)
    return _pack_activations_kernel(a, int(G))


def _pack_for_gemm(a: np.ndarray, G: int) -> np.ndarray:
    """:func:`pack_activations` of checked ``a``: numpy up to :data:`NUMPY_PACK_VALUES`."""
    if a.size <= NUMPY_PACK_VALUES:
        return pack_activations_ref(a, G)
    return _pack_activations_kernel(a, int(G))


def pack_activations_ref(a: np.ndarray, G: int) -> np.ndarray:
    """numpy reference of ``pack_activations``."""
    a = np.asarray(a, dtype=np.int8)
    m, k = a.shape
    mt = -(-m // ROWS)
    pad = np.zeros((mt * ROWS, k), np.int8)
    pad[:m] = a
    x = pad.reshape(mt, ROWS, k // G, G // 4, 4).transpose(0, 2, 3, 1, 4)
    return np.ascontiguousarray(x).view(np.uint8)


# ============================================================================================
# Python wrappers
# ============================================================================================


def sb_channels(sbs: Sequence[int], n: int) -> np.ndarray:
    """The real output channels of super-blocks ``sbs`` in the order the leaves return them."""
    chans = [np.arange(sb * CHANNELS, min((sb + 1) * CHANNELS, n)) for sb in sbs]
    return np.concatenate(chans).astype(np.int64) if chans else np.zeros(0, np.int64)


def sb_regions(regions, sbs: Sequence[int]) -> dict[str, np.ndarray]:
    """A panel64 tensor's regions (each ``[SB, ...]``, super-block major) cut to the
    super-blocks ``sbs``: the regions of a panel64 tensor of ``sb_channels(sbs, n).size`` rows
    (the last, padded super-block last among them), as writable copies of just those bytes."""
    idx = np.asarray(list(sbs), np.int64)
    return {name: np.ascontiguousarray(np.asarray(r)[idx]) for name, r in regions.items()}


def gemv_leaf(panels, zt0, a, n: int, k: int, G: int, nibble: bool,
              sbs: Optional[Sequence[int]] = None, state=None) -> np.ndarray:
    """Run the GEMV leaf on each activation row; return int32 ``P[M, C, ng]``.

    ``a`` is int8 ``[K]`` or ``[M, K]``; ``C`` are the real channels of ``sbs`` (all super-blocks
    when ``sbs`` is None, so ``C = n``), see ``sb_channels``. ``zt0`` is the 64-byte ZT0 image
    (ignored for int8 panels, may be None). ``state`` (an ``sme2.State``) may be passed to
    inspect the registers afterwards.
    """
    panels, zt0, a, sbs_arr = check_leaf_inputs(panels, zt0, a, n, k, G, nibble, sbs)
    st = state if state is not None else new_state()
    ng = k // G
    out = np.zeros(a.shape[0] * len(sbs_arr) * ng * CHANNELS * 4, np.uint8)
    gemv_program(panels, zt0, np.ascontiguousarray(a).view(np.uint8).reshape(-1), a.shape[0],
                 n, k, G, int(bool(nibble)), sbs_arr, out, st.Z, st.ZA, st.ZT0, st.P)
    return gather_partials(out, a.shape[0], sbs_arr, n, ng)


def gemm_leaf(panels, zt0, a, n: int, k: int, G: int, nibble: bool,
              sbs: Optional[Sequence[int]] = None, state=None) -> np.ndarray:
    """Run the GEMM leaf (16-row M-tiles, M tail predicated off); return int32 ``P[M, C, ng]``."""
    panels, zt0, a, sbs_arr = check_leaf_inputs(panels, zt0, a, n, k, G, nibble, sbs)
    st = state if state is not None else new_state()
    ng = k // G
    apk = _pack_for_gemm(a, G).reshape(-1)
    out = np.zeros(a.shape[0] * len(sbs_arr) * ng * CHANNELS * 4, np.uint8)
    gemm_program(panels, zt0, apk, a.shape[0], n, k, G, int(bool(nibble)), sbs_arr, out,
                 st.Z, st.ZA, st.ZT0, st.P)
    return gather_partials(out, a.shape[0], sbs_arr, n, ng)


def gather_partials(out: np.ndarray, m: int, sbs: np.ndarray, n: int, ng: int) -> np.ndarray:
    """Scratch ``[M][nsel][ng][64]`` int32 -> ``P[M, C, ng]`` over the real channels
    (shared with ``verify/neon.py``)."""
    scr = out.view(np.int32).reshape(m, len(sbs), ng, CHANNELS)
    parts = [scr[:, i, :, : min(CHANNELS, n - sb * CHANNELS)].transpose(0, 2, 1)
             for i, sb in enumerate(sbs)]
    if not parts:
        return np.zeros((m, 0, ng), np.int32)
    return np.ascontiguousarray(np.concatenate(parts, axis=1))


def panel_nbytes(n: int, k: int, G: int, nibble: bool, svl_bits: int = 512) -> int:
    """Bytes of a panel for an ``n x k`` matrix (``svl_bits`` sets the channels per super-block)."""
    c = svl_bits // 8
    return -(-n // c) * (k // G) * (G // 4) * (2 * c if nibble else 4 * c)


def _as_int8_2d(a, what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.dtype != np.int8:
        raise BadInputError(f"{what} must be int8 [M, K] (or [K]), got {a.dtype} {a.shape}")
    return np.ascontiguousarray(a)


def _check_group(k: int, G: int) -> None:
    if G <= 0 or G % 16:
        raise BadInputError(f"group size G={G} must be a positive multiple of 16 (ld1rqb reads "
                            f"16 activation bytes per 4 kg-blocks)")
    if k <= 0 or k % G:
        raise BadInputError(f"K={k} is not a positive multiple of the group size G={G}")


def check_leaf_inputs(panels, zt0, a, n, k, G, nibble, sbs):
    """(shared with ``verify/neon.py``) Validate leaf arguments; return contiguous
    ``(panels, zt0, a[M, K] int8, sbs int64[])``. Raises BadInputError naming the problem."""
    n, k, G = int(n), int(k), int(G)
    if n <= 0:
        raise BadInputError(f"N={n} must be positive")
    _check_group(k, G)
    panels = np.asarray(panels)
    if panels.dtype != np.uint8 or panels.ndim != 1:
        raise BadInputError(
            f"panel bytes must be a flat uint8 array, got {panels.dtype} {panels.shape}")
    want = panel_nbytes(n, k, G, nibble)
    if panels.size != want:
        raise BadInputError(f"panel holds {panels.size} bytes, a {n}x{k} G={G} "
                            f"{'nibble' if nibble else 'int8'} panel has {want}")
    if zt0 is None:
        if nibble:
            raise BadInputError("a nibble panel needs its 64-byte ZT0 table")
        zt0 = np.zeros(64, np.uint8)
    zt0 = np.asarray(zt0)
    if zt0.dtype != np.uint8 or zt0.shape != (64,):
        raise BadInputError(f"ZT0 must be uint8[64], got {zt0.dtype} {zt0.shape}")
    a = _as_int8_2d(a, "activations")
    if a.shape[1] != k:
        raise BadInputError(f"activations have K={a.shape[1]}, the panel has K={k}")
    nsb = -(-n // CHANNELS)
    sbs_arr = (np.arange(nsb, dtype=np.int64) if sbs is None
               else np.asarray(list(sbs), dtype=np.int64).reshape(-1))
    if sbs_arr.size and (sbs_arr.min() < 0 or sbs_arr.max() >= nsb):
        raise BadInputError(f"super-block index out of range 0..{nsb - 1}: {sbs_arr.tolist()}")
    # the emulated memory is a plain writable byte array (ld1b's signature); a read-only
    # memory map of a bundle file is copied once
    panels = np.ascontiguousarray(panels) if panels.flags.writeable else np.array(panels, order="C")
    return (panels, np.array(zt0, np.uint8, order="C"), a,
            np.ascontiguousarray(sbs_arr))


# ============================================================================================
# references
# ============================================================================================


def partials_ref(codes: np.ndarray, a: np.ndarray, G: int) -> np.ndarray:
    """``P[m, n, g] = sum_{k in group g} codes[n, k] * a[m, k]`` as int32 (wrapping), einsum."""
    codes = np.asarray(codes).astype(np.int64)
    a = np.asarray(a)
    if a.ndim == 1:
        a = a[None, :]
    a = a.astype(np.int64)
    n, k = codes.shape
    m = a.shape[0]
    ng = k // G
    p = np.einsum("mgk,ngk->mng", a.reshape(m, ng, G), codes.reshape(n, ng, G))
    return p.astype(np.int32)


def _panel_index(n: int, k: int, G: int, nibble: bool, svl_bits: int):
    """Closed-form byte address (and nibble shift) of every weight (n, k): arrays [N, K]."""
    c = svl_bits // 8  # channels per super-block (64 at SVL 512)
    lanes = svl_bits // 32  # int32 lanes per vector (16 at SVL 512)
    ng = k // G
    nn = np.arange(n, dtype=np.int64)[:, None]
    kk = np.arange(k, dtype=np.int64)[None, :]
    blk = ((nn // c) * ng + kk // G) * (G // 4) + (kk % G) // 4
    ch = nn % c
    if nibble:
        byte = blk * (2 * c) + 2 * ch + (kk % 4) // 2
        shift = 4 * (kk % 2)
    else:
        byte = blk * (4 * c) + (c * (ch // lanes)) + 4 * (ch % lanes) + kk % 4
        shift = np.zeros_like(byte)
    return np.broadcast_to(byte, (n, k)), np.broadcast_to(shift, (n, k))


def panel_bytes_ref(codes: np.ndarray, G: int, nibble: bool, pad_code: int = 0,
                    svl_bits: int = 512) -> np.ndarray:
    """Build panel bytes from codes with the closed-form formula of docs/FORMAT.md §4.2 (test/reference helper;
    the real packer is ``repack/panel64.py``).

    ``codes[N, K]``: for nibble panels the raw 4-bit code ``u`` (0..15, the ZT0 index); for int8
    panels the int8 code. Pad channels get ``pad_code`` (nibble; the code whose ZT0 value is 0,
    e.g. 8 for Q4_0) or 0 (int8). ``svl_bits`` != 512 builds the geometry a runtime with that
    vector length would expect (``svl_bits/8`` channels per super-block): not ``panel64``.
    """
    codes = np.asarray(codes)
    n, k = codes.shape
    c = svl_bits // 8
    npad = -(-n // c) * c
    full = np.full((npad, k), pad_code if nibble else 0, dtype=np.int64)
    if nibble:
        if codes.min() < 0 or codes.max() > 15:
            raise ValueError("nibble codes must be in 0..15")
        full[:n] = codes
    else:
        full[:n] = codes.astype(np.int8)
    byte, shift = _panel_index(npad, k, G, nibble, svl_bits)
    out = np.zeros(panel_nbytes(n, k, G, nibble, svl_bits), np.uint8)
    vals = (full & (0x0F if nibble else 0xFF)) << shift
    np.add.at(out, byte.reshape(-1), vals.reshape(-1).astype(np.uint8))  # nibbles never overlap
    return out


def read_panels_ref(panels: np.ndarray, zt0: Optional[np.ndarray], n: int, k: int, G: int,
                    nibble: bool, svl_bits: int = 512) -> np.ndarray:
    """Scalar reader of panel bytes by the closed form: the signed code values ``c[N, K]`` (int16).

    Nibble codes are mapped through the low byte of their ZT0 entry (as LUTI4 .B does).
    Reading a ``panel64`` with ``svl_bits`` != 512 shows what a runtime of that vector length
    would see.
    """
    panels = np.asarray(panels, dtype=np.uint8)
    byte, shift = _panel_index(n, k, G, nibble, svl_bits)
    raw = (panels[byte] >> shift.astype(np.uint8)).astype(np.int64)
    if nibble:
        table = np.asarray(zt0, dtype=np.uint8)[0::4].view(np.int8).astype(np.int16)
        return table[raw & 0x0F]
    return raw.astype(np.uint8).view(np.int8).astype(np.int16)
