"""Direct panel64-compact kernels of Q2_K and Q3_K: GGUF blocks <-> group records and scale
regions in one pass, without panel64's int8 panels in between.

The general compact packer (panel64_compact.pack) runs panel64's int8 row kernels into scratch,
then the plane kernel; for the two 2-/3-bit types the int8 pass alone ran at 1.8-2.6 GB/s (one
byte written a 2- or 3-bit weight). Here each (64-channel super-block, 256-element block) tile
goes through **channel space** instead:

1. the tile's 64 source blocks (``rb`` = 84 or 110 bytes, one row of blocks apart) are
   transposed into ``cols[byte][channel]`` (uint8 [rb][64], L1): 64 x 8 bytes a step, in LLVM
   vector IR (below); a block's last 8-byte column is read at ``rb - 8`` (overlapping), so
   nothing past a row is read;
2. every output is then one byte a channel, the 64 channels of a value contiguous: one
   <64 x i8> vector operation per value (no gathers, no scattered byte stores).
   With ``C[b]`` = column b (source byte b of each channel), ``m = 4g + q`` (kg-block q of
   group g, the 4 elements 4m..4m+3 of the block), ``h = m // 32``, ``jj = m // 8 % 4``,
   ``l = 4 * (m % 8)``::

       base byte (m, ch)     = sum_i ((C[qs + 32h + l + i] >> 2jj) & 3) << 2i     (crumbs)
       plane nibble (m, ch)  = sum_i ((C[hmask + l + i] >> (4h + jj)) & 1) << i  (Q3_K)
       plane byte (m, i)     = nibble(m, 2i) | nibble(m, 2i + 1) << 4
       Q2_K sc / m (g, ch)   = C[scales + g] & 15 / >> 4;   Q3_K sc: the codec's 6-bit value
       d, dmin (ch)          = C[d], C[d + 1] as the f16's two bytes

   the record bytes of panel64_compact.py's module doc (Q2_K: ``u`` = the crumb, base plane
   only; Q3_K: ``u`` = crumb | hmask bit << 2, the stored 3-bit code itself). Computed per 4
   columns as one 4 x 4 transpose of crumbs (base) and one 8 x 8 bit transpose of the even- and
   odd-channel halves (plane), delta swaps either way (``crumbs_t``, ``bits_t``);
3. unpacking computes the columns back from the records and transposes them into the rows.

A partial last super-block (N % 64) runs through a 64-row copy whose pad rows are the pad
channel's source bytes (``pad_row``: zero codes and scales; Q3_K hmask all ones, u = 4, c = 0).
The reference is panel64_compact.pack_ref / unpack_ref (panel64's reference int8 panels, then
the plane reference); ``cols_ref`` is the numpy statement of step 2 for one tile, and the tests
compare both with these kernels byte for byte.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import config
from numba import types as nt

from ..formats import qtypes
from ..formats._jit import RO_U8, lazy_njit
from ..formats.blocks import q2_k, q3_k

_Q2K, _Q3K = q2_k.AT, q3_k.AT
RB2, RB3 = qtypes.Q2_K.type_size, qtypes.Q3_K.type_size  # 84, 110 source bytes a block
GB2, GB3 = 256, 384  # group record bytes (panel64_compact.form(...).group_bytes)
TILE2, TILE3 = 16 * GB2, 16 * GB3  # record bytes of one 256-element block of 64 channels


def pad_row(qtype) -> np.ndarray:
    """uint8 [block bytes]: the source block of a pad channel (signed codes 0, scales 0)."""
    t = qtypes.get(qtype)
    row = np.zeros(t.type_size, np.uint8)
    if t is qtypes.Q3_K:
        row[_Q3K.hmask:_Q3K.hmask + 32] = 0xFF  # u = 4: crumb 0, plane bit 1
    return row


# ---- the tile steps in LLVM vector IR (generic vector operations, no target intrinsic) -------
# 64 x 8 bytes (columns b..b+7 of the tile's 64 rows) per step of the transposes: 8 vectors of 8
# row words, each vector's 8 x 8 bytes transposed by one shuffle, then the 8 x 8 words across
# the vectors by three rounds of two-vector shuffles (on AVX-512: vpermb, vpermt2q). Channel
# space works on <64 x i8> columns (one byte lane a channel).
def _build_ir():
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    v64, v32, w8 = ir.VectorType(i8, 64), ir.VectorType(i8, 32), ir.VectorType(i64, 8)

    def const(ty, v):
        return ir.Constant(ty, [v] * ty.count)

    def mask(idx):
        return ir.Constant(ir.VectorType(i32, len(idx)), list(idx))

    class B:
        """IR helpers around one builder: array data pointers, loads/stores at byte offsets."""

        def __init__(self, context, builder, signature, args):
            self.b, self.args = builder, args
            self.data = [context.make_array(t)(context, builder, a).data if isinstance(t, types.Array) else None
                         for t, a in zip(signature.args, args)]

        def at(self, i, off, ty):
            o = off if isinstance(off, ir.Value) else ir.Constant(i64, off)
            return self.b.bitcast(self.b.gep(self.data[i], [o]), ty.as_pointer())

        def ld(self, i, off, ty=v64):
            return self.b.load(self.at(i, off, ty), align=1)

        def st(self, v, i, off):
            self.b.store(v, self.at(i, off, v.type), align=1)

        def add(self, x, c):
            return self.b.add(x, ir.Constant(i64, c)) if c else x

        def shr(self, v, s):
            return self.b.lshr(v, const(v.type, s)) if s else v

        def shl(self, v, s):
            return self.b.shl(v, const(v.type, s)) if s else v

        def andc(self, v, m):
            return self.b.and_(v, const(v.type, m))

    byte_t = mask([8 * (j % 8) + j // 8 for j in range(64)])  # 8 x 8 bytes transposed

    def words_t(b, w):
        """8 x 8 words across the 8 <8 x i64> of ``w``: word i of vector k -> word k of vector i."""
        w = list(w)
        for bs in (4, 2, 1):
            lo = mask([i if not i & bs else 8 + i - bs for i in range(8)])
            hi = mask([i + bs if not i & bs else 8 + i for i in range(8)])
            for k in range(8):
                if not k & bs:
                    w[k], w[k + bs] = b.shuffle_vector(w[k], w[k + bs], lo), b.shuffle_vector(w[k], w[k + bs], hi)
        return w

    def col_blocks(rb):
        return [min(b0, rb - 8) for b0 in range(0, rb, 8)]

    def rows_to_cols(rb):
        return intrinsic(lambda typingctx, src, o, stride, cols: _rows_to_cols(rb, src, o, stride, cols))

    def cols_to_rows(rb):
        return intrinsic(lambda typingctx, cols, dst, o, stride: _cols_to_rows(rb, cols, dst, o, stride))

    def _rows_to_cols(rb, src, o, stride, cols):
        """64 rows of ``rb`` bytes at ``src[o + c * stride]`` -> ``cols[b * 64 + c]``."""
        sig = types.void(src, o, stride, cols)

        def codegen(context, builder, signature, args):
            x = B(context, builder, signature, args)
            for b in col_blocks(rb):
                w = []
                for k in range(8):
                    v = ir.Constant(w8, None)
                    for r in range(8):
                        off = builder.add(args[1], builder.add(builder.mul(args[2], ir.Constant(i64, 8 * k + r)),
                                                               ir.Constant(i64, b)))
                        v = builder.insert_element(v, x.ld(0, off, i64), ir.Constant(i32, r))
                    t = builder.shuffle_vector(builder.bitcast(v, v64), ir.Constant(v64, None), byte_t)
                    w.append(builder.bitcast(t, w8))
                for i, col in enumerate(words_t(builder, w)):
                    x.st(builder.bitcast(col, v64), 3, (b + i) * 64)
            return context.get_dummy_value()

        return sig, codegen

    def _cols_to_rows(rb, cols, dst, o, stride):
        """Inverse of _rows_to_cols (the overlapping last column stores the same bytes twice)."""
        sig = types.void(cols, dst, o, stride)

        def codegen(context, builder, signature, args):
            x = B(context, builder, signature, args)
            for b in col_blocks(rb):
                w = words_t(builder, [builder.bitcast(x.ld(0, (b + i) * 64), w8) for i in range(8)])
                for k in range(8):
                    t = builder.bitcast(builder.shuffle_vector(builder.bitcast(w[k], v64), ir.Constant(v64, None),
                                                               byte_t), w8)
                    for r in range(8):
                        off = builder.add(args[2], builder.add(builder.mul(args[3], ir.Constant(i64, 8 * k + r)),
                                                               ir.Constant(i64, b)))
                        x.st(builder.extract_element(t, ir.Constant(i32, r)), 1, off)
            return context.get_dummy_value()

        return sig, codegen

    def m_fields(m):
        return m >> 5, (m >> 3) & 3, 4 * (m & 7)  # h, jj, l0 of kg-block row m = 4g + q

    evens, odds = mask(range(0, 64, 2)), mask(range(1, 64, 2))
    ileave32 = mask([j for i in range(32) for j in (i, 32 + i)])  # even, odd channel bytes back in order
    inter = mask([j for i in range(64) for j in (i, 64 + i)])

    def crumbs_t(x, v):
        """4 x 4 transpose of 2-bit cells across 4 byte vectors (crumb j of v[i] <-> crumb i of
        v[j]): two rounds of delta swaps, 2 x 2 blocks (shift 4) then single cells (shift 2)."""
        v = list(v)
        for d, sh, msk in ((2, 4, 0x0F), (1, 2, 0x33)):
            for i in (0, 1) if d == 2 else (0, 2):
                t = x.andc(x.b.xor(x.shr(v[i], sh), v[i + d]), msk)
                v[i + d] = x.b.xor(v[i + d], t)
                v[i] = x.b.xor(v[i], x.shl(t, sh))
        return v

    def base_at(x, rec, gb, m):
        return x.add(rec, (m >> 2) * gb + (m & 3) * 64)

    # for each h and r < 8: qs columns 32h + 4r + i (i < 4, crumb jj at bits 2jj) <-> base bytes of
    # kg-block rows m = 32h + 8jj + r (crumb i at bits 2i): one crumb transpose, either way
    def crumbs_put(x, cols, qs, out, rec, gb):
        for h in range(2):
            for r in range(8):
                v = crumbs_t(x, [x.ld(cols, (qs + 32 * h + 4 * r + i) * 64) for i in range(4)])
                for jj in range(4):
                    x.st(v[jj], out, base_at(x, rec, gb, 32 * h + 8 * jj + r))

    def crumbs_get(x, src, rec, gb, cols, qs):
        for h in range(2):
            for r in range(8):
                v = crumbs_t(x, [x.ld(src, base_at(x, rec, gb, 32 * h + 8 * jj + r)) for jj in range(4)])
                for i in range(4):
                    x.st(v[i], cols, (qs + 32 * h + 4 * r + i) * 64)

    def bits_t(x, v):
        """8 x 8 bit transpose across 8 byte vectors (bit b of v[k] <-> bit k of v[b]): delta
        swaps of 4-, 2- and 1-bit blocks."""
        v = list(v)
        for d, msk in ((4, 0x0F), (2, 0x33), (1, 0x55)):
            for i in range(8):
                if not i & d:
                    t = x.andc(x.b.xor(x.shr(v[i], d), v[i + d]), msk)
                    v[i + d] = x.b.xor(v[i + d], t)
                    v[i] = x.b.xor(v[i], x.shl(t, d))
        return v

    def plane_at(x, rec, gb, m):
        return x.add(rec, (m >> 2) * gb + 256 + (m & 3) * 32)

    # for each r < 8: the hmask columns 4r + i (i < 4; bit b = 4h + jj) split into even and odd
    # channels are 8 rows of 32 bytes; their bit transpose is, row b, the plane bytes of kg-block
    # row m = 32h + 8jj + r (bits 0-3: the even channel's 4 K, bits 4-7: the odd channel's)
    def plane_put(x, cols, hm, out, rec, gb):
        u = ir.Constant(v64, None)
        for r in range(8):
            hs = [x.ld(cols, (hm + 4 * r + i) * 64) for i in range(4)]
            rows = bits_t(x, [x.b.shuffle_vector(h, u, evens) for h in hs] + [x.b.shuffle_vector(h, u, odds) for h in hs])
            for b in range(8):
                x.st(rows[b], out, plane_at(x, rec, gb, 32 * (b >> 2) + 8 * (b & 3) + r))

    def plane_get(x, src, rec, gb, cols, hm):
        for r in range(8):
            rows = bits_t(x, [x.ld(src, plane_at(x, rec, gb, 32 * (b >> 2) + 8 * (b & 3) + r), v32) for b in range(8)])
            for i in range(4):
                x.st(x.b.shuffle_vector(rows[i], rows[4 + i], ileave32), cols, (hm + 4 * r + i) * 64)

    def f16_put(x, cols, at, out, off):
        x.st(x.b.shuffle_vector(x.ld(cols, at * 64), x.ld(cols, (at + 1) * 64), inter), out, off)

    def f16_get(x, src, off, cols, at):
        v = x.ld(src, off, ir.VectorType(i8, 128))
        u = ir.Constant(v.type, None)
        x.st(x.b.shuffle_vector(v, u, mask(range(0, 128, 2))), cols, at * 64)
        x.st(x.b.shuffle_vector(v, u, mask(range(1, 128, 2))), cols, (at + 1) * 64)

    def typed(body, *a):
        """(signature, codegen) of a tile step ``(cols, arrays..., blk)``: ``body(x, blk)``."""

        def codegen(context, builder, signature, args):
            body(B(context, builder, signature, args), args[-1])
            return context.get_dummy_value()

        return types.void(*a), codegen

    def tile(nargs, body):
        """An intrinsic of ``nargs`` arguments ``(cols, arrays..., blk)`` around ``body``."""
        if nargs == 7:
            return intrinsic(lambda typingctx, a0, a1, a2, a3, a4, a5, a6: typed(body, a0, a1, a2, a3, a4, a5, a6))
        return intrinsic(lambda typingctx, a0, a1, a2, a3, a4: typed(body, a0, a1, a2, a3, a4))

    def mul(x, blk, c):
        return x.b.mul(blk, ir.Constant(i64, c))

    # Q2_K: (cols, codes, sc8, m8, d8, dmin8, blk)
    def q2_put(x, blk):
        crumbs_put(x, 0, _Q2K.qs, 1, mul(x, blk, TILE2), GB2)
        for g in range(16):
            v = x.ld(0, (_Q2K.scales + g) * 64)
            o = x.add(mul(x, blk, 1024), 64 * g)
            x.st(x.andc(v, 15), 2, o)
            x.st(x.shr(v, 4), 3, o)
        f16_put(x, 0, _Q2K.d, 4, mul(x, blk, 128))
        f16_put(x, 0, _Q2K.dmin, 5, mul(x, blk, 128))

    def q2_get(x, blk):
        crumbs_get(x, 1, mul(x, blk, TILE2), GB2, 0, _Q2K.qs)
        for g in range(16):
            o = x.add(mul(x, blk, 1024), 64 * g)
            v = x.b.or_(x.andc(x.ld(2, o), 15), x.shl(x.andc(x.ld(3, o), 15), 4))
            x.st(v, 0, (_Q2K.scales + g) * 64)
        f16_get(x, 4, mul(x, blk, 128), 0, _Q2K.d)
        f16_get(x, 5, mul(x, blk, 128), 0, _Q2K.dmin)

    # Q3_K: (cols, codes, sc8, d8, blk)
    def q3_put(x, blk):
        rec = mul(x, blk, TILE3)
        crumbs_put(x, 0, _Q3K.qs, 1, rec, GB3)
        plane_put(x, 0, _Q3K.hmask, 1, rec, GB3)
        for g in range(16):
            lo = x.andc(x.shr(x.ld(0, (_Q3K.scales + (g & 7)) * 64), 4 * (g >> 3)), 15)
            hi = x.andc(x.shr(x.ld(0, (_Q3K.scales + 8 + (g & 3)) * 64), 2 * (g >> 2)), 3)
            x.st(x.b.or_(lo, x.shl(hi, 4)), 2, x.add(mul(x, blk, 1024), 64 * g))
        f16_put(x, 0, _Q3K.d, 3, mul(x, blk, 128))

    def q3_get(x, blk):
        rec = mul(x, blk, TILE3)
        crumbs_get(x, 1, rec, GB3, 0, _Q3K.qs)
        plane_get(x, 1, rec, GB3, 0, _Q3K.hmask)
        sc = [x.ld(2, x.add(mul(x, blk, 1024), 64 * g)) for g in range(16)]
        for s in range(8):
            x.st(x.b.or_(x.andc(sc[s], 15), x.shl(x.andc(sc[8 + s], 15), 4)), 0, (_Q3K.scales + s) * 64)
        for i in range(4):
            v = None
            for q in range(4):
                c = x.shl(x.andc(x.shr(sc[4 * q + i], 4), 3), 2 * q)
                v = c if v is None else x.b.or_(v, c)
            x.st(v, 0, (_Q3K.scales + 8 + i) * 64)
        f16_get(x, 3, mul(x, blk, 128), 0, _Q3K.d)

    return (rows_to_cols(RB2), cols_to_rows(RB2), rows_to_cols(RB3), cols_to_rows(RB3),
            tile(7, q2_put), tile(7, q2_get), tile(5, q3_put), tile(5, q3_get))


_R2C2, _C2R2, _R2C3, _C2R3, _Q2_PUT, _Q2_GET, _Q3_PUT, _Q3_GET = _build_ir()


# ---- the kernels: every (super-block, block) tile of 64 full rows ----------------------------
_U8 = nt.uint8[::1]


@lazy_njit(nt.void(RO_U8, nt.int64, nt.int64, _U8, _U8, _U8, _U8, _U8), boundscheck=False)
def q2_k_pack(src, nsb, nblk, codes, sc8, m8, d8, dmin8):
    """``nsb`` super-blocks of 64 rows x ``nblk`` Q2_K blocks -> records and scale fields."""
    cols = np.empty(RB2 * 64, np.uint8)
    for sb in range(nsb):
        for b in range(nblk):
            _R2C2(src, (sb * 64 * nblk + b) * RB2, nblk * RB2, cols)
            _Q2_PUT(cols, codes, sc8, m8, d8, dmin8, sb * nblk + b)


@lazy_njit(nt.void(RO_U8, RO_U8, RO_U8, RO_U8, RO_U8, nt.int64, nt.int64, _U8), boundscheck=False)
def q2_k_unpack(codes, sc8, m8, d8, dmin8, nsb, nblk, dst):
    cols = np.empty(RB2 * 64, np.uint8)
    for sb in range(nsb):
        for b in range(nblk):
            _Q2_GET(cols, codes, sc8, m8, d8, dmin8, sb * nblk + b)
            _C2R2(cols, dst, (sb * 64 * nblk + b) * RB2, nblk * RB2)


@lazy_njit(nt.void(RO_U8, nt.int64, nt.int64, _U8, _U8, _U8), boundscheck=False)
def q3_k_pack(src, nsb, nblk, codes, sc8, d8):
    cols = np.empty(RB3 * 64, np.uint8)
    for sb in range(nsb):
        for b in range(nblk):
            _R2C3(src, (sb * 64 * nblk + b) * RB3, nblk * RB3, cols)
            _Q3_PUT(cols, codes, sc8, d8, sb * nblk + b)


@lazy_njit(nt.void(RO_U8, RO_U8, RO_U8, nt.int64, nt.int64, _U8), boundscheck=False)
def q3_k_unpack(codes, sc8, d8, nsb, nblk, dst):
    cols = np.empty(RB3 * 64, np.uint8)
    for sb in range(nsb):
        for b in range(nblk):
            _Q3_GET(cols, codes, sc8, d8, sb * nblk + b)
            _C2R3(cols, dst, (sb * 64 * nblk + b) * RB3, nblk * RB3)


#: type name -> (pack kernel, unpack kernel, its region names in kernel order after "panels")
KERNELS: dict[str, tuple[Any, Any, tuple[str, ...]]] = {qtypes.Q2_K.name: (q2_k_pack, q2_k_unpack, ("sc", "m", "d", "dmin")),
           qtypes.Q3_K.name: (q3_k_pack, q3_k_unpack, ("sc", "d"))}
#: the types panel64_compact.pack/unpack send here; none under NUMBA_DISABLE_JIT (an intrinsic has
#: no Python body: the general path, panel64's int8 kernels as Python, then the plane reference)
TYPES = frozenset(() if config.DISABLE_JIT else KERNELS)  # type: ignore[attr-defined]


def _b(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


def pack(raw: np.ndarray, t, n: int, k: int, regions: dict[str, np.ndarray]) -> None:
    """Blocks uint8 [n, row_bytes] -> ``regions`` (panels, then the type's scale regions), pad
    channels included. ``regions`` C-contiguous (panel64_compact.pack's out_regions)."""
    pk, _, names = KERNELS[t.name]
    nblk = k // t.block_size
    full = n // 64
    rows = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    out = [regions["panels"]] + [regions[x] for x in names]
    if full:
        pk(rows, full, nblk, *(_b(a[:full]) for a in out))
    if n % 64:
        last = np.empty((64, nblk * t.type_size), np.uint8)
        last[:] = np.tile(pad_row(t), nblk)
        last[: n % 64] = rows.reshape(n, -1)[full * 64:]
        part = [np.empty(a[full:].shape, a.dtype) for a in out]
        pk(last.reshape(-1), 1, nblk, *(_b(a) for a in part))
        for a, p in zip(out, part):
            a[full:] = p


def unpack(regions: dict[str, np.ndarray], t, n: int, k: int, raw: np.ndarray) -> None:
    """Inverse of :func:`pack`: every byte of the blocks ``raw`` [n, row_bytes]."""
    _, uk, names = KERNELS[t.name]
    nblk = k // t.block_size
    full = n // 64
    src = [np.ascontiguousarray(regions[x]) for x in ("panels", *names)]
    if full:
        uk(*(_b(a[:full]) for a in src), full, nblk, raw[: full * 64].reshape(-1).view(np.uint8))
    if n % 64:
        last = np.empty(64 * nblk * t.type_size, np.uint8)
        uk(*(_b(np.ascontiguousarray(a[full:])) for a in src), 1, nblk, last)
        raw[full * 64:] = last.reshape(64, -1)[: n % 64]


def cols_ref(cols: np.ndarray, qtype) -> dict[str, np.ndarray]:
    """numpy statement of step 2 for one tile: ``cols`` uint8 [rb][64] (source byte, channel) ->
    {"panels": the tile's 16 group records, then its scale fields [16][64] / d bytes [64][2]}."""
    t = qtypes.get(qtype)
    at = _Q2K if t is qtypes.Q2_K else _Q3K
    c = np.asarray(cols, np.uint8).reshape(t.type_size, 64)
    e = np.arange(256)
    h, jj, l = e // 128, (e // 32) % 4, e % 32
    crumb = (c[at.qs + 32 * h + l] >> (2 * jj)[:, None]) & 3  # [element][channel]
    base = (crumb.reshape(64, 4, 64) << (2 * np.arange(4))[None, :, None]).sum(1).astype(np.uint8)
    recs = [base.reshape(16, 4 * 64)]
    fields: dict[str, np.ndarray] = {}
    if t is qtypes.Q3_K:
        bit = (c[at.hmask + e % 32] >> (e // 32)[:, None]) & 1
        lanes = bit.reshape(64, 4, 64).transpose(0, 2, 1).reshape(64, 256)  # [m][4ch + j]
        recs.append(np.packbits(lanes, axis=-1, bitorder="little").reshape(16, 4 * 32))
        g = np.arange(16)
        low = np.where((g < 8)[:, None], c[at.scales + g % 8] & 15, c[at.scales + g % 8] >> 4)
        fields["sc"] = low | (((c[at.scales + 8 + g % 4] >> (2 * (g // 4))[:, None]) & 3) << 4)
        fields["d"] = c[at.d:at.d + 2].T.copy()
    else:
        fields["sc"], fields["m"] = c[:16] & 15, c[:16] >> 4
        fields["d"], fields["dmin"] = c[at.d:at.d + 2].T.copy(), c[at.dmin:at.dmin + 2].T.copy()
    return {"panels": np.concatenate(recs, axis=1).reshape(-1), **fields}
