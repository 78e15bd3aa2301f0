"""The row decoders of the compiled kernels (:mod:`._compiled_kernels`): per type, the signed codes
of one row of a rowmajor tile, read from the standard GGUF blocks (docs/FORMAT.md §2)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..formats import qtypes
from ..formats._jit import lazy_njit
from ..formats.blocks import q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0

# =============================================================================================
# row decoders (rowmajor = the standard GGUF blocks, docs/FORMAT.md §2): signed codes c of row r of the
# tile; wt = [rows, blocks, type_size] (a _tile_view), out = [TILE, blocks, block_size]. The byte
# offsets are the codecs' (``AT``, formats/blocks/<type>.py), the code offsets the type table's:
# numba reads these module globals as compile-time constants.
# =============================================================================================
_A40, _A41, _A50, _A51, _A80, _A2K, _A3K, _A4K, _A5K, _A6K = (
    m.AT for m in (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k))
_OFF40, _OFF50, _OFF2K, _OFF3K, _OFF6K = (t.code_offset for t in (qtypes.Q4_0, qtypes.Q5_0, qtypes.Q2_K, qtypes.Q3_K,
                                                                  qtypes.Q6_K))


@lazy_njit(inline="always")
def _row_q4_0(wt, r, out):
    # [d f16][qs 16]: element i < 16 low nibble of qs[i], i >= 16 high nibble of qs[i-16]; c = u - 8
    for b in range(wt.shape[1]):
        for i in range(16):
            v = np.int16(wt[r, b, _A40.qs + i])
            out[r, b, i] = (v & 15) - _OFF40
            out[r, b, 16 + i] = (v >> 4) - _OFF40


@lazy_njit(inline="always")
def _row_q4_1(wt, r, out):
    # [d f16][m f16][qs 16]: nibbles as Q4_0; c = u
    for b in range(wt.shape[1]):
        for i in range(16):
            v = np.int16(wt[r, b, _A41.qs + i])
            out[r, b, i] = v & 15
            out[r, b, 16 + i] = v >> 4


@njit(inline="always")
def _u32(wt, r, b, at):
    return (np.int64(wt[r, b, at]) | (np.int64(wt[r, b, at + 1]) << 8) | (np.int64(wt[r, b, at + 2]) << 16)
            | (np.int64(wt[r, b, at + 3]) << 24))


@lazy_njit(inline="always")
def _row_q5_0(wt, r, out):
    # [d f16][qh u32][qs 16]: low 4 bits as Q4_0, bit 4 of element e = (qh >> e) & 1; c = q - 16
    for b in range(wt.shape[1]):
        qh = _u32(wt, r, b, _A50.qh)
        for i in range(16):
            v = np.int16(wt[r, b, _A50.qs + i])
            out[r, b, i] = ((v & 15) | np.int16(((qh >> i) & 1) << 4)) - _OFF50
            out[r, b, 16 + i] = ((v >> 4) | np.int16(((qh >> (i + 16)) & 1) << 4)) - _OFF50


@lazy_njit(inline="always")
def _row_q5_1(wt, r, out):
    # [d f16][m f16][qh u32][qs 16]: as Q5_0; c = q
    for b in range(wt.shape[1]):
        qh = _u32(wt, r, b, _A51.qh)
        for i in range(16):
            v = np.int16(wt[r, b, _A51.qs + i])
            out[r, b, i] = (v & 15) | np.int16(((qh >> i) & 1) << 4)
            out[r, b, 16 + i] = (v >> 4) | np.int16(((qh >> (i + 16)) & 1) << 4)


@lazy_njit(inline="always")
def _row_q8_0(wt, r, out):
    # [d f16][qs i8 32]; c = q
    for b in range(wt.shape[1]):
        for i in range(32):
            out[r, b, i] = np.int8(wt[r, b, _A80.qs + i])


@lazy_njit(inline="always")
def _row_q4_k(wt, r, out):
    # [d][dmin][scales 12][qs 128]: element 64c + l (l < 32) low nibble of qs[32c + l],
    # 64c + 32 + l the high nibble; c = q
    for j in range(wt.shape[1]):
        for c in range(4):
            for i in range(32):
                v = np.int16(wt[r, j, _A4K.qs + 32 * c + i])
                out[r, j, 64 * c + i] = v & 15
                out[r, j, 64 * c + 32 + i] = v >> 4


@lazy_njit(inline="always")
def _row_q5_k(wt, r, out):
    # [d][dmin][scales 12][qh 32][qs 128]: element e = 32s + l: low 4 bits nibble s%2 of
    # qs[32(s//2) + l], bit 4 = (qh[l] >> s) & 1; c = q
    for j in range(wt.shape[1]):
        for c in range(4):
            for i in range(32):
                v = np.int16(wt[r, j, _A5K.qs + 32 * c + i])
                hb = np.int16(wt[r, j, _A5K.qh + i])
                out[r, j, 64 * c + i] = (v & 15) | (((hb >> (2 * c)) & 1) << 4)
                out[r, j, 64 * c + 32 + i] = (v >> 4) | (((hb >> (2 * c + 1)) & 1) << 4)


@lazy_njit(inline="always")
def _row_q6_k(wt, r, out):
    # [ql 128][qh 64][scales i8 16][d f16]: e = 128h + 32g + l: low 4 bits nibble g//2 of
    # ql[64h + 32(g%2) + l], high 2 bits (qh[32h + l] >> 2g) & 3; c = q - 32
    for j in range(wt.shape[1]):
        for h in range(2):
            for i in range(32):
                l0 = np.int16(wt[r, j, _A6K.ql + 64 * h + i])
                l1 = np.int16(wt[r, j, _A6K.ql + 64 * h + 32 + i])
                hb = np.int16(wt[r, j, _A6K.qh + 32 * h + i])
                out[r, j, 128 * h + i] = ((l0 & 15) | ((hb & 3) << 4)) - _OFF6K
                out[r, j, 128 * h + 32 + i] = ((l1 & 15) | (((hb >> 2) & 3) << 4)) - _OFF6K
                out[r, j, 128 * h + 64 + i] = ((l0 >> 4) | (((hb >> 4) & 3) << 4)) - _OFF6K
                out[r, j, 128 * h + 96 + i] = ((l1 >> 4) | (((hb >> 6) & 3) << 4)) - _OFF6K


@lazy_njit(inline="always")
def _row_k_2bit(wt, r, out, o_qs, o_hm, bias):
    # Q2_K (o_hm < 0) and Q3_K: element e = 128h + 32j + l holds u = (qs[o_qs + 32h + l] >> 2j)
    # & 3, for Q3_K | ((hmask[o_hm + l] >> (4h + j)) & 1) << 2; c = u - bias
    for b in range(wt.shape[1]):
        blk = wt[r, b]
        ob = out[r, b]
        for e in range(256):
            h, j, l = e >> 7, (e >> 5) & 3, e & 31
            u = (np.int16(blk[o_qs + 32 * h + l]) >> (2 * j)) & 3
            if o_hm >= 0:
                u |= ((np.int16(blk[o_hm + l]) >> (4 * h + j)) & 1) << 2
            ob[e] = u - bias


@lazy_njit(inline="always")
def _row_q2_k(wt, r, out):
    # [scales 16][qs 64][d f16][dmin f16]; c = q
    _row_k_2bit(wt, r, out, _A2K.qs, -1, _OFF2K)


@lazy_njit(inline="always")
def _row_q3_k(wt, r, out):
    # [hmask 32][qs 64][scales 12][d f16]; c = u - 4
    _row_k_2bit(wt, r, out, _A3K.qs, _A3K.hmask, _OFF3K)
