"""How the verifier reads ``panel64-compact`` (docs/FORMAT.md §4.2.1): the compiled column tile
on the bit-plane group records, the closed-form integer reader, and the factories the verifier
registry names. Types ``panel64-compact`` keeps in panel64's forms (Q4_x nibble, Q8_0 int8) go
to panel64's own kernel and leaves: their bytes are the same.

The column tile (:func:`_unpack_compact`) reads group ``g`` of a 64-channel tile straight from
its record, by the closed forms of the layout (never through ``repack``'s pack/unpack), and
writes the stored codes ``u`` into ``buf[G][64]``; the shared column-tile loop then subtracts
``code_offset * A`` (exact in int32) and rescales as every other kernel does.
"""

from __future__ import annotations

import numpy as np

from ..formats import _numba_internals
from ..formats._jit import closable_inline, lazy_njit
from ..repack import panel64 as _panel64
from ..repack import panel64_compact as _compact
from . import _act_tables, _simd, _simd512
from . import compiled as _compiled
from ._compiled_kernels import TILE, _column_tile, _tile_view, int8_group_tile
from .registry import PathResult, Sample

_PLANE = _compact.PLANE_KG_BYTES


@lazy_njit(inline="always")
def _unpack_compact(wt, g, buf, tw):
    # wt = [1, ng, GB]: the tile's group records; G = buf.shape[0], kq = G/4, bits = GB/(32 kq)
    kq = buf.shape[0] // 4
    bits = wt.shape[2] // (32 * kq)
    base = 4 if bits >= 4 else 2
    bb = 32 * base
    for q in range(kq):
        for ch in range(TILE):
            for j in range(4):
                if base == 4:
                    u = (wt[0, g, q * bb + 2 * ch + j // 2] >> (4 * (j % 2))) & 15
                else:
                    u = (wt[0, g, q * bb + ch] >> (2 * j)) & 3
                lane = 4 * ch + j
                for p in range(bits - base):
                    pb = wt[0, g, kq * bb + p * kq * _PLANE + q * _PLANE + lane // 8]
                    u |= ((pb >> (lane % 8)) & 1) << (base + p)
                buf[4 * q + j, ch] = np.int8(u)


def _record_view(bits: int):
    """The tile view of ``bits``-bit group records: ``G/4 * 32 * bits = 8 * bits * G`` bytes a
    group, the factor a constant of each kernel (one view per code width, as the column tile
    wants: :func:`._compiled_kernels._column_tile`)."""
    unit = 8 * bits

    @lazy_njit(inline="always", tag=f"bits{bits}")
    def view(w, t, tw, ng, group):
        return _tile_view(w, t, 1, ng, group * unit)

    return view


#: code bits -> the column tile of that record size
_TILES = {bits: _column_tile(_record_view(bits), _unpack_compact) for bits in (2, 3, 5, 6)}


# ---- the planes dot (every form where numba targets AVX2): no int8 expansion. A LUTI4
# ---- form's base plane is panel64's nibble panel, so the group dot is _simd.nibble_group_dot's on the
# ---- raw stored codes u (0 .. 2^bits-1, activations in pair order); a LUTI2 form's crumb bytes and
# ---- every bit plane go through the activation row's 16-entry tables (verify/_act_tables.py, one
# ---- row, the code offset folded into the top plane's table); with several rows the planes are OR-ed
# ---- into the code bytes once a group, and the tile subtracts code_offset * A as the nibble tiles do.
def _planes_intrinsics(base: int, nplanes: int, kq: int):
    """(dot, expand, scratch dot) of a LUTI4 form (``base`` 4), or of a LUTI2 one (``base`` 2).
    ``dot``: ``acc[0:64] = Σ_kk (u(c, kk) - offset)·x[kk]`` (int32; the offset the row's tables hold,
    :func:`activation_recipe`) for the group record at byte ``woff`` of
    ``w`` (base plane: kq kg-blocks of 128 nibble bytes or 64 crumb bytes; plane p: kq x 32 bytes
    after it), ``a`` the activation row of :func:`activation_recipe` and ``aoff`` the group's
    first activation in it (one row: its tables follow the K activations). Per kg-block q::

        LUTI4, 32 nibble bytes x (channels 16s .. 16s+15):
            vpmaddubsw(x & 15, (a0, a2)) + vpmaddubsw(x >> 4 & 15, (a1, a3))     (pair order)
        LUTI2, 32 crumb bytes y (slices s, s + 1):
            C01[y & 15] + C23[y >> 4]        (vpshufb of the tables' low and high bytes, unpacked)
        plane p (nibble c of its word = channel c's 4 bits): P_p[nibble], its own table's entry
            LUTI4: Σ (2^p·bit - f0)·x from its SPLIT tables (P mod 32, P >> 5: 32 plane bytes, the
                   four slices, a vpshufb of each), the planes' bytes added over kg-blocks, joined
                   by vpmaddubsw((1, 32), ·), summed apart, x 2^4 when widened
            LUTI2: Σ (2^(2+p)·bit - f0)·x (16 plane bytes, slices s, s + 1; vpshufb of the
                   table's low and high bytes, unpacked), added to the crumbs' sums

    ``expand`` stores a group's code bytes with the planes merged (u_lo/u_hi, kq x 256 bytes;
    LUTI2: crumbs paired in natural order, :func:`crumb_lohi`) and ``scratch dot`` is
    vpmaddubsw on them (``Σ u·x``: no offset): with several activation rows the planes are merged
    once a group, not once a row.

    Exactness: every sum is an integer sum of u·a with u <= 2^bits - 1 <= 63 and |a| <= 128, so
    a kg-block's int16 lanes hold at most 4·63·128 = 32256 (Q6_K; 5 bits: 15872, two kg-blocks
    summed: 31744; 3 bits: 3584, four summed) < 32767, widened to int32 after that (two sums at a
    time, :func:`dot_of`); the table dot's LUTI4 nibbles alone 4·15·128 = 7680 (four summed:
    30720) and its planes apart (1 + 2)·512 a kg-block (the offset in: |2^p·bit - f0| <= 2^p;
    a group: 6144), widened x 2^4, their SPLIT bytes at most 127 (:data:`split_run`); its LUTI2
    sums |u - offset| <= 7, 4·7·128 a kg-block; one vpmaddubsw lane is at most 2·63·128 and a
    table entry 4·4·128 in magnitude."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
    v32i8, v8i8, v16i16 = ir.VectorType(i8, 32), ir.VectorType(i8, 8), ir.VectorType(i16, 16)
    bits = base + nplanes
    run = max(1, 32767 // (4 * ((1 << bits) - 1) * 128))  # kg-blocks summed in int16
    run_apart = 32767 // (4 * 15 * 128)  # ... the nibbles alone (the planes summed apart: <= 3·512·kq)
    pb = kq * 32 * base  # the first plane byte

    def const(v, ty=v32i8):
        return ir.Constant(ty, [v] * ty.count if isinstance(v, int) else v)

    spread = const([i >> 2 for i in range(32)], ir.VectorType(i32, 32))
    bit_lo = const([1 << (2 * (i % 4)) for i in range(32)])
    bit_hi = const([2 << (2 * (i % 4)) for i in range(32)])
    zero = const(0)

    def at(builder, p, o, ty):
        return builder.bitcast(builder.gep(p, [ir.Constant(i64, o)]), ty.as_pointer())

    def data(context, builder, signature, args, i):
        return context.make_array(signature.args[i])(context, builder, args[i]).data

    def record_lohi(builder, wp, q, s, planes=nplanes):
        """(u_lo, u_hi) of kg-block q, channels 16s .. 16s+15, from the record at ``wp`` (its
        first ``planes`` bit planes OR-ed in)::

            lo = x & 15 (K 0, 2 of each channel), hi = x >> 4 & 15 (K 1, 3)
            plane word = the 64 bits of lanes 4c + j (c = 16s ..): lo byte i takes bit 2i, hi byte i
                         bit 2i + 1 (the word's byte i // 4 in byte i, tested against its bit)
            u = lo | 2^(4+p) where set (hi likewise)
        """
        x = builder.load(at(builder, wp, q * 128 + 32 * s, v32i8), align=1)
        lo = builder.and_(x, const(15))
        hi = builder.and_(builder.lshr(x, const(4)), const(15))
        for p in range(planes):
            word = builder.load(at(builder, wp, pb + (p * kq + q) * 32 + 8 * s, v8i8), align=1)
            bb = builder.shuffle_vector(word, ir.Constant(v8i8, None), spread)
            add = const(1 << (4 + p))
            lo = builder.select(builder.icmp_unsigned("!=", builder.and_(bb, bit_lo), zero), builder.or_(lo, add), lo)
            hi = builder.select(builder.icmp_unsigned("!=", builder.and_(bb, bit_hi), zero), builder.or_(hi, add), hi)
        return lo, hi

    v16i8, v2i64, v4i64 = ir.VectorType(i8, 16), ir.VectorType(i64, 2), ir.VectorType(i64, 4)
    #: a 16-byte load in both 128-bit lanes (one vbroadcasti128)
    both_lanes = const(list(range(16)) * 2, ir.VectorType(i32, 32))
    lut_lo = const([16 * (i & 1) + 32 * (i >> 2 & 1) for i in range(16)] * 2)
    lut_hi = const([16 * (i >> 1 & 1) + 32 * (i >> 3 & 1) for i in range(16)] * 2)
    interleave = const([t // 2 + 16 * (t % 2) for t in range(32)], ir.VectorType(i32, 32))

    def two_planes_lohi(builder, wp, q, s):
        """(u_lo, u_hi) of a two-plane form (Q6_K) by crumbs: crumb i of a plane word is lo byte
        i's bit (its low bit) and hi byte i's (its high bit), so pdep puts the two planes' crumbs
        i side by side in nibble i, ``n = c4 | c5 << 2``, and one vpshufb of a 16-entry table per
        half gives the byte to OR in (lo: 16·n0 + 32·n2; hi: 16·n1 + 32·n3)."""
        x = builder.load(at(builder, wp, q * 128 + 32 * s, v32i8), align=1)
        lo = builder.and_(x, const(15))
        hi = builder.and_(builder.lshr(x, const(4)), const(15))
        i64t = ir.FunctionType(i64, [i64, i64])
        pdep = _numba_internals.llvm_function(builder, i64t, "llvm.x86.bmi.pdep.64")
        pshufb = _numba_internals.llvm_function(builder, ir.FunctionType(v32i8, [v32i8, v32i8]),
                                                "llvm.x86.avx2.pshuf.b")
        words = [builder.load(at(builder, wp, pb + (p * kq + q) * 32 + 8 * s, i64), align=1) for p in range(2)]
        halves = []
        for h in range(2):  # crumbs 16h .. 16h+15 of both planes -> 16 nibbles
            c4, c5 = (builder.lshr(wd, ir.Constant(i64, 32 * h)) if h else wd for wd in words)
            halves.append(builder.or_(builder.call(pdep, [c4, ir.Constant(i64, 0x3333333333333333)]),
                                      builder.call(pdep, [c5, ir.Constant(i64, -0x3333333333333334)])))
        y = builder.insert_element(builder.insert_element(ir.Constant(v2i64, None), halves[0], ir.Constant(i32, 0)),
                                   halves[1], ir.Constant(i32, 1))
        y = builder.bitcast(y, v16i8)
        n_even = builder.and_(y, const(15, v16i8))
        n_odd = builder.and_(builder.lshr(y, const(4, v16i8)), const(15, v16i8))
        idx = builder.shuffle_vector(n_even, n_odd, interleave)
        return (builder.or_(lo, builder.call(pshufb, [lut_lo, idx])),
                builder.or_(hi, builder.call(pshufb, [lut_hi, idx])))

    def byte_shuffle(builder, table, idx):
        """vpshufb, kept as it is written (LLVM rewrites a constant one, often into a lane-crossing
        vpermq and an unpack)."""
        fnty = ir.FunctionType(v32i8, [v32i8, v32i8])
        return builder.asm(fnty, "vpshufb $2, $1, $0", "=x,x,x", [table, idx], False)

    #: byte i <- byte i // 2 of the slice's 16 crumb bytes (one per channel), in both 128-bit lanes
    twice = const([i // 2 for i in range(32)])
    #: byte i <- byte i // 4 of the slice's 8 plane bytes (two channels a byte, a nibble each)
    fourfold = const([i // 4 for i in range(32)])
    #: the plane bit of byte i of u01 (channel c = i // 2, lane 4c + i % 2), of u23 (lane 4c + 2 + i % 2)
    bit01 = const([1 << (4 * (i // 2 % 2) + i % 2) for i in range(32)])
    bit23 = const([1 << (4 * (i // 2 % 2) + 2 + i % 2) for i in range(32)])

    def crumb_lohi(builder, wp, q, s):
        """(u01, u23) of a LUTI2 form (Q2_K, Q3_K), kg-block q, channels 16s .. 16s+15: byte 2c of
        u01 is u(c, k0), byte 2c+1 u(c, k1) (u23: k2, k3), so the activations pair in natural
        order. A channel's crumb byte y = u0 | u1 << 2 | u2 << 4 | u3 << 6 (16 bytes a slice), each
        doubled into the 16-bit lane of its channel (one vpshufb), then word shifts and masks::

            D = y | y << 8                          (lane c, 16 channels a vector)
            u01 = D & 0x0003 | (D >> 2) & 0x0300    u23 = (D >> 4) & 0x0003 | (D >> 6) & 0x0300
            plane (Q3_K): byte b of the slice's 64-bit word holds channels 2b (bits 0-3) and 2b + 1
                (bits 4-7), bit j = lane 4c + j; repeated x 4 (one vpshufb), masked per byte:
                u01 |= 4 where (P & bit01) != 0;    u23 |= min(P & bit23, 4)  (bit23 >= 4)
        """
        y = builder.load(at(builder, wp, q * 64 + 16 * s, v16i8), align=1)
        pshufb = _numba_internals.llvm_function(builder, ir.FunctionType(v32i8, [v32i8, v32i8]),
                                                "llvm.x86.avx2.pshuf.b")
        both = builder.shuffle_vector(y, ir.Constant(v16i8, None), both_lanes)
        d = builder.bitcast(byte_shuffle(builder, both, twice), v16i16)

        def crumbs(shift):
            lo = builder.and_(builder.lshr(d, const(shift, v16i16)) if shift else d, const(0x0003, v16i16))
            return builder.bitcast(builder.or_(lo, builder.and_(builder.lshr(d, const(shift + 2, v16i16)), const(0x0300, v16i16))),
                                   v32i8)

        u01, u23 = crumbs(0), crumbs(4)
        if nplanes:
            word = builder.load(at(builder, wp, pb + q * 32 + 8 * s, i64), align=1)
            x4 = builder.shuffle_vector(builder.insert_element(ir.Constant(v4i64, None), word, ir.Constant(i32, 0)),
                                        ir.Constant(v4i64, None), const(0, ir.VectorType(i32, 4)))
            p = builder.call(pshufb, [builder.bitcast(x4, v32i8), fourfold])
            four = const(4)
            b01 = builder.and_(p, bit01)
            u01 = builder.or_(u01, builder.select(builder.icmp_unsigned("!=", b01, zero), four, zero))
            b23 = builder.and_(p, bit23)
            u23 = builder.or_(u23, builder.select(builder.icmp_unsigned("<", b23, four), b23, four))
        return u01, u23

    if base == 2:
        in_record = crumb_lohi
    else:  # (where pdep is microcoded, _simd.SLOW_PDEP: Zen 1/2, Q6_K's planes bit by bit)
        in_record = two_planes_lohi if nplanes == 2 and _simd.FAST_PDEP else record_lohi

    def scratch_lohi(builder, sp, q, s):
        """(u_lo, u_hi) as :func:`expand` stored them (64 bytes per kg-block and channel slice)."""
        return tuple(builder.load(at(builder, sp, (4 * q + s) * 64 + 32 * h, v32i8), align=1) for h in range(2))

    v8i32 = ir.VectorType(i32, 8)

    # ---- the single-row dot through activation tables (verify/_act_tables.py): a plane word's
    # ---- nibble c is channel c's bits for the kg-block's K 0..3 (bit j = lane 4c + j), so its share
    # ---- of the dot is P[n] = Σ_j bit_j(n)·x[kj], a 16-entry table a kg-block and plane (built
    # ---- once a call, the plane's weight and the top plane's share of the code offset in it),
    # ---- looked up by vpshufb, 32 channels a lookup (LUTI4: as bytes P mod 32 and P >> 5, added
    # ---- up over planes and kg-blocks, joined, then summed apart and times 2^4 when widened; LUTI2:
    # ---- its low and high bytes, unpacked, added to the crumbs' sums). On AVX2 a byte shuffle,
    # ---- shift or unpack issues on two of the four vector pipes: no lane-crossing ones.
    #: byte i <- the plane byte of its channel, in the crumb tables' order (lane 0: slice s ch 0-15;
    #: lane 1: slice s + 1), twice
    nibble_bytes = const([8 * (i // 16) + i % 16 // 2 for i in range(32)])
    unpack_lo = const([16 * (i // 16) + i % 16 // 2 + 32 * (i % 2) for i in range(32)], ir.VectorType(i32, 32))
    unpack_hi = const([16 * (i // 16) + 8 + i % 16 // 2 + 32 * (i % 2) for i in range(32)], ir.VectorType(i32, 32))

    recipe = activation_recipe(base, nplanes, 0)  # the row's tables: their bytes and plane weights (any offset)
    tb = _act_tables.table_bytes(recipe.mode)  # table bytes a kg-block

    def lookup(builder, tables, n):
        """Table ``tables`` (low bytes, high bytes) at the nibbles ``n`` (32 bytes): the entries as
        int16, unpacklo(L, H) then unpackhi(L, H) of ``L, H = vpshufb(low, n), vpshufb(high, n)``."""
        lows, highs = (byte_shuffle(builder, table, n) for table in tables)
        return tuple(builder.bitcast(builder.shuffle_vector(lows, highs, m), v16i16) for m in (unpack_lo, unpack_hi))

    def row_tables(builder, tp, q, i):
        """Kg-block q's table ``i`` (low bytes, high bytes), each in both 128-bit lanes, from the
        activation row's tables (verify/_act_tables.py) at ``tp``."""
        return tuple(builder.shuffle_vector(builder.load(at(builder, tp, tb * q + 32 * i + 16 * h, v16i8), align=1),
                                            ir.Constant(v16i8, None), both_lanes) for h in range(2))

    def plane_lookups(builder, wp, p, q, s, tables):
        """A LUTI2 form's plane p, kg-block q, slices s and s + 1 (s even): two int16 vectors in
        the crumb sums' order, from their 16 plane bytes W (W[0:8] slice s, W[8:16] slice s + 1;
        byte b: channels 2b, 2b + 1)::

            [W | W] (one load)  ->  byte pairs (b, b): lane 0 slice s ch 0-15, lane 1 slice s + 1
            n = b & 0x0F in the low byte, b >> 4 in the high byte   (16-bit lanes)
            L, H = vpshufb(low bytes, n), vpshufb(high bytes, n)
            unpacklo(L, H) = ch 0-7 of s | of s + 1,  unpackhi(L, H) = ch 8-15 of s | of s + 1
        """
        word = builder.load(at(builder, wp, pb + (p * kq + q) * 32 + 8 * s, v16i8), align=1)
        pairs = byte_shuffle(builder, builder.shuffle_vector(word, ir.Constant(v16i8, None), both_lanes), nibble_bytes)
        d = builder.bitcast(pairs, v16i16)
        n = builder.or_(builder.and_(d, const(0x000F, v16i16)), builder.and_(builder.lshr(d, const(4, v16i16)),
                                                                          const(0x0F00, v16i16)))
        return lookup(builder, tables, builder.bitcast(n, v32i8))

    #: the LUTI4 planes' split table entries summed in bytes over this many kg-blocks: a kg-block
    #: adds at most 31 a plane to the mod-32 bytes and 4·128·f1 / 32 to the >> 5 bytes (any f0 <= f1)
    unit = _act_tables.SPLIT_UNIT
    split_run = min(127 // max((unit - 1) * nplanes, 1), 127 // max(sum(4 * 128 * f1 // unit for f1, _ in recipe.planes), 1))
    #: (P mod 32, P >> 5) -> P: vpmaddubsw's unsigned factors of an interleaved pair
    join = const([1, _act_tables.SPLIT_UNIT] * 16)

    def split_lookups(builder, wp, q, tables, state):
        """A LUTI4 form's planes, kg-block q, through their SPLIT tables (verify/_act_tables.py):
        a plane's 32 bytes W (W[8s : 8s+8] slice s, byte b: channels 2b, 2b + 1) give the even
        channels' nibbles W & 0x0F and the odd ones' (W >> 4) & 0x0F; each indexes the plane's
        two byte tables (P mod 32, P >> 5), and the looked-up bytes of every plane add up in
        ``state`` over :data:`split_run` kg-blocks (no carry: at most 127). Then, and at the
        group's last kg-block, the four int16 sums of 32 channels each::

            byte lanes: [ slice 0 | slice 1 ] [ slice 2 | slice 3 ]   (8 channels a slice, even or odd)
            unpacklo(mod, hi) = [ s0 | s2 ],  unpackhi(mod, hi) = [ s1 | s3 ]   (byte pairs)
            vpmaddubsw((1, 32), pair) = mod + 32·hi                         (int16, one a channel)
            returned: [ even s0|s2, even s1|s3, odd s0|s2, odd s1|s3 ]     (:func:`apart_slice` orders them)

        else None."""
        for p in range(nplanes):
            w = builder.load(at(builder, wp, pb + (p * kq + q) * 32, v32i8), align=1)
            for e, n in enumerate((builder.and_(w, const(15)), builder.and_(builder.lshr(w, const(4)), const(15)))):
                for part in range(2):
                    v = byte_shuffle(builder, tables[p][part], n)
                    state[e, part] = v if (e, part) not in state else builder.add(state[e, part], v)
        if (q + 1) % split_run and q != kq - 1:
            return None
        pmadd = _numba_internals.llvm_function(builder, ir.FunctionType(v16i16, [v32i8, v32i8]),
                                               "llvm.x86.avx2.pmadd.ub.sw")
        sums = [builder.call(pmadd, [join, builder.shuffle_vector(state[e, 0], state[e, 1], m)])
                for e in range(2) for m in (unpack_lo, unpack_hi)]
        state.clear()
        return sums

    def apart_slice(builder, apart, s):
        """Slice s's 16 channels, in order, of :func:`split_lookups`' four sums."""
        lane = s // 2
        return builder.shuffle_vector(apart[s % 2], apart[2 + s % 2],
                                      const([8 * lane + i // 2 + 16 * (i % 2) for i in range(16)], ir.VectorType(i32, 16)))

    def kg_tables(builder, wp, q, plo, phi, pmadd, tp, state):
        """The four int16 sums of kg-block q (16 channels each, :data:`sum_channels`) and the
        planes' sums apart (LUTI4: :func:`split_lookups`' four, every :data:`split_run` kg-blocks,
        else None; None for LUTI2): a LUTI4 form's nibbles by vpmaddubsw, a LUTI2 form's crumb
        bytes y by their two tables (indices y & 15, y >> 4: 32 channels a lookup) and its plane
        by its table, added in."""
        ts = []
        if base == 4:
            for s in range(4):
                lo, hi = record_lohi(builder, wp, q, s, planes=0)
                ts.append(builder.add(builder.call(pmadd, [lo, plo]), builder.call(pmadd, [hi, phi])))
            if not nplanes:
                return ts, None
            return ts, split_lookups(builder, wp, q, [row_tables(builder, tp, q, p) for p in range(nplanes)], state)
        c01, c23 = row_tables(builder, tp, q, 0), row_tables(builder, tp, q, 1)
        for s in (0, 2):  # lane 0: slice s's 16 crumb bytes, lane 1: slice s + 1's
            y = builder.load(at(builder, wp, q * 64 + 16 * s, v32i8), align=1)
            n01, n23 = builder.and_(y, const(15)), builder.and_(builder.lshr(y, const(4)), const(15))
            ts += [builder.add(u, v) for u, v in zip(lookup(builder, c01, n01), lookup(builder, c23, n23))]
        for p in range(nplanes):
            tables = row_tables(builder, tp, q, 2 + p)
            for s in (0, 2):
                for h, v in enumerate(plane_lookups(builder, wp, p, q, s, tables)):
                    ts[s + h] = builder.add(ts[s + h], v)
        return ts, None

    #: the channels of the 16 int16 lanes of kg_tables' sums: slice s's 16 in order (LUTI4), or
    #: (LUTI2, s = 2 sp + h) channels 8h .. 8h+7 of slice 2 sp, then of slice 2 sp + 1
    sum_channels = [[16 * s + i for i in range(16)] if base == 4 else
                    [16 * (2 * (s // 2) + i // 8) + 8 * (s % 2) + i % 8 for i in range(16)] for s in range(4)]

    def kg_codes(lohi):
        """The four slices' int16 sums of kg-block q from ``lohi``'s code bytes (planes merged),
        channels in order."""
        def kg(builder, wp, q, plo, phi, pmadd, tp, state):
            return [builder.add(builder.call(pmadd, [lo, plo]), builder.call(pmadd, [hi, phi]))
                    for lo, hi in (lohi(builder, wp, q, s) for s in range(4))], None
        return kg

    #: unpacklo / unpackhi of two int16 vectors (x, y): the pairs (x_i, y_i) of lanes 0-3 | 8-11, of 4-7 | 12-15
    zip16 = [const([i + j * 16 for r in (4 * h, 8 + 4 * h) for i in range(r, r + 4) for j in range(2)],
                   ir.VectorType(i32, 16)) for h in range(2)]
    #: lanes 8r .. 8r+7 of a sum from its two widened halves (lanes 0-3 | 8-11, 4-7 | 12-15)
    halves = [const([4 * r + i for i in range(4)] + [8 + 4 * r + i for i in range(4)], ir.VectorType(i32, 8)) for r in range(2)]
    def dot_of(kg_block, tables=False, channels=None):
        """The dot over ``kg_block``'s sums, whose lanes hold ``channels`` (16 a sum; default in
        order), read from the activation row's tables where ``tables``. A slice's int16 sums (each
        run of kg-blocks, the planes apart) are widened two at a time: ``vpmaddwd(unpack(x, y),
        (wx, wy))`` is ``wx·x + wy·y`` in int32 (lanes 0-3 | 8-11, then 4-7 | 12-15: the shuffle
        pipes see two unpacks, the multiply pipes the rest), stored 8 channels a store."""
        channels = channels or [[16 * s + i for i in range(16)] for s in range(4)]
        assert all(ch[r + i] == ch[r] + i for ch in channels for r in (0, 8) for i in range(8))  # runs of 8

        @intrinsic
        def dot(typingctx, w, woff, a, aoff, acc):
            sig = types.void(w, woff, a, aoff, acc)

            def codegen(context, builder, signature, args):
                wp = builder.gep(data(context, builder, signature, args, 0), [args[1]])
                ap = builder.gep(data(context, builder, signature, args, 2), [args[3]])
                cd = data(context, builder, signature, args, 4)
                pmadd = _numba_internals.llvm_function(builder, ir.FunctionType(v16i16, [v32i8, v32i8]),
                                                       "llvm.x86.avx2.pmadd.ub.sw")
                tp = None
                if tables:  # the group's first table: K + (tb/4)·aoff into the row of K·(1 + tb/4) bytes
                    row = context.make_array(signature.args[2])(context, builder, args[2])
                    k = builder.udiv(cgutils.unpack_tuple(builder, row.shape)[0], ir.Constant(i64, 1 + tb // 4))
                    tp = builder.gep(row.data, [builder.add(k, builder.mul(args[3], ir.Constant(i64, tb // 4)))])

                def pair(o):  # the 2 activation bytes at ap + o, repeated x 16
                    v = builder.insert_element(ir.Constant(v16i16, None), builder.load(at(builder, ap, o, i16), align=1),
                                               ir.Constant(i32, 0))
                    return builder.bitcast(builder.shuffle_vector(v, ir.Constant(v16i16, None),
                                                                  const(0, ir.VectorType(i32, 16))), v32i8)

                pmaddwd = _numba_internals.llvm_function(builder, ir.FunctionType(v8i32, [v16i16, v16i16]),
                                                         "llvm.x86.avx2.pmadd.wd")
                wide: list = [[None, None] for _ in range(4)]  # slice s: int32 lanes 0-3 | 8-11, 4-7 | 12-15
                waiting: list = [[] for _ in range(4)]  # slice s: (int16 sum, weight) not yet widened

                def widen(s, last=False):
                    while len(waiting[s]) >= 2 or (last and waiting[s]):
                        (x, wx), (y, wy) = waiting[s][0], (waiting[s][1] if len(waiting[s]) > 1 else (waiting[s][0][0], 0))
                        del waiting[s][:2]
                        weights = const([wx, wy] * 8, v16i16)
                        for h in range(2):
                            t = builder.call(pmaddwd, [builder.shuffle_vector(x, y, zip16[h]), weights])
                            wide[s][h] = t if wide[s][h] is None else builder.add(wide[s][h], t)

                part: list = [None] * 4
                apart: list = [None] * 4  # the planes summed apart (LUTI4 tables): split_lookups' order
                state: dict = {}  # kg_block's sums carried from one kg-block to the next
                steps = run_apart if tables and base == 4 and nplanes else run
                for q in range(kq):  # kg-block outer: its two activation patterns built once
                    plo, phi = pair(4 * q), pair(4 * q + 2)
                    ts, planes = kg_block(builder, wp, q, plo, phi, pmadd, tp, state)
                    for s, t in enumerate(planes or ()):
                        apart[s] = t if apart[s] is None else builder.add(apart[s], t)
                    for s, t in enumerate(ts):
                        part[s] = t if part[s] is None else builder.add(part[s], t)
                        if (q + 1) % steps == 0 or q == kq - 1:
                            waiting[s].append((part[s], 1))
                            part[s] = None
                            widen(s)
                for s in range(4):  # + 2^base x the planes, in channel order
                    if apart[s] is not None:
                        waiting[s].append((apart_slice(builder, apart, s), 1 << base))
                    widen(s, last=True)
                    for r in range(2):  # the channels of lanes 8r .. 8r+7: one run, one store
                        eight = builder.shuffle_vector(wide[s][0], wide[s][1], halves[r])
                        builder.store(eight, at(builder, cd, channels[s][8 * r], v8i32), align=4)
                return context.get_dummy_value()

            return sig, codegen

        return dot

    @intrinsic
    def expand(typingctx, w, woff, out):
        """The record's u_lo/u_hi bytes into ``out[0 : kq*256]`` (for several activation rows)."""
        sig = types.void(w, woff, out)

        def codegen(context, builder, signature, args):
            wp = builder.gep(data(context, builder, signature, args, 0), [args[1]])
            op = data(context, builder, signature, args, 2)
            for q in range(kq):
                for s in range(4):
                    for h, v in enumerate(in_record(builder, wp, q, s)):
                        builder.store(v, at(builder, op, (4 * q + s) * 64 + 32 * h, v32i8), align=1)
            return context.get_dummy_value()

        return sig, codegen

    key = f"{__name__}.planes_intrinsics({base}, {nplanes}, {kq}, {in_record.__name__})"
    tables = (_act_tables.__name__,)  # the table bytes the dot reads are _act_tables' (its digest in the key)
    return (_numba_internals.keyed_intrinsic(dot_of(kg_tables, True, sum_channels), f"{key}.dot", tables),
            _numba_internals.keyed_intrinsic(expand, f"{key}.expand"),
            _numba_internals.keyed_intrinsic(dot_of(kg_codes(scratch_lohi)), f"{key}.scratch_dot"))


def _avx2_planes_tile(base: int, nplanes: int, kq: int):
    """The AVX2 tile of a planes-dot form: one activation row, the group records read in place by
    the planes dot; several, each group's u bytes expanded once, then the scratch dot per row."""
    dot, expand, scratch_dot = _planes_intrinsics(base, nplanes, kq)
    bitwise = nplanes == 2 and not _simd.FAST_PDEP  # several rows: Q6_K's planes bit by bit (its own cache index)
    return _records_tile(f"compact_avx2_{base}_{nplanes}_{kq}" + ("_bitwise" if bitwise else ""),
                         kq * (32 * base + _PLANE * nplanes), kq, dot, expand, scratch_dot, single_raw=False)


def _records_tile(name: str, gb: int, kq: int, dot, expand, scratch_dot, single_raw: bool = True):
    """The column tile over group records of ``gb`` bytes that ``dot`` reads in place (one
    activation row), or that ``expand`` turns into ``kq·256`` bytes of raw u for ``scratch_dot``
    (several rows; the planes merged once a group, not once a row). ``single_raw``: the one-row
    dot's sums are of raw codes (the tile subtracts ``offset·A``); False where its activation
    tables fold the offset in (the AVX2 planes dot, :func:`activation_recipe`)."""

    @closable_inline  # (not a dispatcher: the tile's cache key would change with every process)
    def in_place(w, t, g, ng, group, geom, scratch):
        return w, (t * ng + g) * gb

    @closable_inline
    def expanded(w, t, g, ng, group, geom, scratch):
        expand(w, (t * ng + g) * gb, scratch)
        return scratch, 0

    return int8_group_tile(name, scratch_dot, expanded, kq * 256, raw=True, single=(dot, in_place), stride=gb,
                           single_raw=single_raw)


def activation_recipe(base: int, nplanes: int, offset: int) -> _act_tables.Recipe:
    """The activations of a form's AVX2 tile (``KernelSpec.activations``), one row with its
    tables appended: pair order (nibble pairs k0, k2 | k1, k3) and a table per plane for the
    LUTI4 forms (plane p: 2^p·P; the dot sums the planes apart and scales them by 2^base when it
    widens), the crumb tables and a table per plane, 2^(base+p)·P, for the LUTI2 ones (added to
    the crumbs' sums). The code ``offset`` goes into the top plane's table (``f0``): the one-row
    dot is then ``Σ (u - offset)·a`` (the several-row one still subtracts ``offset·A``)."""
    unit = 1 << base if base == 4 else 1  # a table entry's weight in the code
    planes = [(1 << (p + (0 if base == 4 else base)), 0) for p in range(nplanes)]
    if offset:
        if not planes or offset % unit or offset // unit > planes[-1][0]:
            raise ValueError(f"code offset {offset} does not fold into the planes of a {base}+{nplanes}-bit form")
        planes[-1] = (planes[-1][0], offset // unit)
    return _act_tables.Recipe(pair=base == 4, crumbs=base == 2, planes=tuple(planes), split=base == 4 and bool(planes))


# ---- where numba targets AVX-512 VNNI (_simd512), every form: the record read in place into the
# ---- int8 panel's lane order (channel-major, 4 K a dword), one vpdpbusd per 64 weights.
#: the GF(2) matrix of ``(x >> 4) & 0x0F`` for :meth:`_simd512.Lanes.affine`: result bit k is x's bit k + 4
_HIGH_NIBBLE = sum(1 << (k + 4) << 8 * (7 - k) for k in range(4))


def _vnni_intrinsics(base: int, nplanes: int, kq: int):
    """(dot, expand) of one compact form on AVX-512. ``dot``: ``acc[0:64] = Σ_kk u(c, kk)·a[kk]``
    (int32, raw codes u, ``a[aoff:]`` the group's 4·kq activations in natural order) for the group
    record at byte ``woff`` of ``w``; ``expand``: the record's u bytes in panel64's int8 panel
    order (byte ``256q + 4c + j``) into ``out[0 : kq*256]``, for :data:`_simd512.raw_group_dot`
    with several activation rows. Per kg-block q and slice s (channels 16s .. 16s+15, lanes
    ``4c' + j``, the order of the plane words' bits)::

        nibbles (base 4): a slice's 32 bytes x, byte 2c'+h = u(k 2h) | u(k 2h+1) << 4
            X = one 64-byte load: slices 2r, 2r+1      [ X0 X1 ... X63 ]
            lo = X & 0x0F (vpandq), hi = (X >> 4) & 0x0F (vgf2p8affineqb by _HIGH_NIBBLE)
            u(slice 2r+i) = vpermt2b(lo, hi)           [ lo(X32i) hi(X32i) | lo(X32i+1) hi(X32i+1) | ... ]
                                                       = c'0: k0 k1 | k2 k3 | c'1: ...
        crumbs (base 2): 16 bytes y, byte c' = u(k0) | u(k1) << 2 | u(k2) << 4 | u(k3) << 6
            qword i of the vector = source qword i // 4 (channels 2i, 2i+1 are in it)
            u = vpmultishiftqb(bit 16(i % 4) + 8(b // 4) + 2(b % 4) for byte b of qword i) & 3
        plane p: its 64-bit word at lanes 64s .. 64s+63 is the byte mask: u += 2^(base+p) where set
        acc[s] = vpdpbusd(acc[s], u, a[4q .. 4q+3] x 16)

    Exactness: u <= 63, so one dword adds at most 4·63·128 and a group 8 times that (int32)."""
    from numba import types
    from numba.extending import intrinsic

    first_plane = kq * 32 * base

    def kg_block(L, wp, q):
        """The u bytes of kg-block ``q``'s four slices, planes added."""
        b, ir = L.b, L.ir
        us = []
        if base == 4:
            for h in range(2):  # slices 2h, 2h+1: one 64-byte load
                x = L.load(wp, 128 * q + 64 * h, L.v64i8)
                lo, hi = b.and_(x, L.const(0x0F, L.v64i8)), L.affine(x, _HIGH_NIBBLE)
                for s in range(2):
                    us.append(b.shuffle_vector(lo, hi, L.const([32 * s + i // 2 + 64 * (i % 2) for i in range(64)],
                                                               ir.VectorType(L.i32, 64))))
        else:
            v2i64 = ir.VectorType(L.i64, 2)
            ctrl = L.const([16 * (i // 8 % 4) + 8 * (i % 8 // 4) + 2 * (i % 4) for i in range(64)], L.v64i8)
            for s in range(4):
                y = L.load(wp, 64 * q + 16 * s, v2i64)
                rep = b.bitcast(b.shuffle_vector(y, ir.Constant(v2i64, None), L.const([i // 4 for i in range(8)],
                                                                                      ir.VectorType(L.i32, 8))), L.v64i8)
                us.append(b.and_(L.multishift(ctrl, rep), L.const(3, L.v64i8)))
        for s in range(4):
            for p in range(nplanes):
                word = L.load(wp, first_plane + (p * kq + q) * _PLANE + 8 * s, L.i64)
                mask = b.bitcast(word, ir.VectorType(ir.IntType(1), 64))
                us[s] = b.select(mask, b.add(us[s], L.const(1 << (base + p), L.v64i8)), us[s])
        return us

    @intrinsic
    def dot(typingctx, w, woff, a, aoff, acc):
        sig = types.void(w, woff, a, aoff, acc)

        def codegen(context, builder, signature, args):
            wp, ap, cd = _simd512.pointers(context, builder, signature, args)
            L = _simd512.Lanes(builder)
            accs = [L.zero()] * 4
            for q in range(kq):
                p = L.broadcast4(ap, 4 * q)
                for s, u in enumerate(kg_block(L, wp, q)):
                    accs[s] = L.dpbusd(accs[s], u, p)
            L.store_acc(cd, accs)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def expand(typingctx, w, woff, out):
        sig = types.void(w, woff, out)

        def codegen(context, builder, signature, args):
            wp = builder.gep(context.make_array(signature.args[0])(context, builder, args[0]).data, [args[1]])
            op = context.make_array(signature.args[2])(context, builder, args[2]).data
            L = _simd512.Lanes(builder)
            for q in range(kq):
                for s, u in enumerate(kg_block(L, wp, q)):
                    builder.store(u, L.ptr(op, 256 * q + 64 * s, L.v64i8), align=1)
            return context.get_dummy_value()

        return sig, codegen

    key = f"{__name__}.vnni_intrinsics({base}, {nplanes}, {kq})"
    return tuple(_numba_internals.keyed_intrinsic(fn, f"{key}.{name}", (_simd512.__name__,))
                 for name, fn in (("dot", dot), ("expand", expand)))


def record_group_dot_ref(w: np.ndarray, woff: int, a: np.ndarray, aoff: int, base: int, nplanes: int,
                         kq: int) -> np.ndarray:
    """int64 [64]: ``Σ_kk u(c, kk)·a[kk]`` over the group record at ``w[woff:]`` (numpy, from the
    record's closed forms, any base), ``a[aoff:aoff + 4·kq]`` in natural order: what the planes dot
    and the VNNI dot compute."""
    rec = np.asarray(w[woff:woff + kq * (32 * base + _PLANE * nplanes)], np.uint8)
    if base == 4:
        nib = rec[:kq * 128].reshape(kq, 64, 2).astype(np.int64)
        u = np.stack([nib[..., 0] & 15, nib[..., 0] >> 4, nib[..., 1] & 15, nib[..., 1] >> 4], axis=-1)
    else:
        crumbs = rec[:kq * 64].reshape(kq, 64, 1).astype(np.int64)
        u = (crumbs >> np.arange(0, 8, 2)) & 3
    first = kq * 32 * base
    for p in range(nplanes):
        plane = rec[first + p * kq * _PLANE:first + (p + 1) * kq * _PLANE].reshape(kq, _PLANE)
        u = u + (np.unpackbits(plane, axis=-1, bitorder="little").reshape(kq, 64, 4).astype(np.int64) << (base + p))
    return np.einsum("qcj,qj->c", u, np.asarray(a[aoff:aoff + 4 * kq], np.int64).reshape(kq, 4))


def _avx512_tile(base: int, nplanes: int, kq: int):
    """The AVX-512 tile of one compact form: one activation row, the records read in place by the
    VNNI dot; several, each group's u bytes expanded once, then _simd512's raw dot per row."""
    dot, expand = _vnni_intrinsics(base, nplanes, kq)
    raw = _simd512.raw_group_dot if kq == 8 else _simd512.raw_group_dot16
    return _records_tile(f"compact_avx512_{base}_{nplanes}_{kq}", kq * (32 * base + _PLANE * nplanes), kq, dot, expand,
                         raw)


#: code bits -> the AVX-512 tile of that form (None where numba does not target AVX-512 VNNI)
_AVX512_TILES = {f.bits: _avx512_tile(f.base_bits, f.planes, f.kq) for f in map(_compact.form, _compact.COMPACT_TYPES)
                 } if _simd512.AVAILABLE else {}

#: code bits -> the AVX2 tile of that form (None where numba does not target AVX2)
_AVX2_TILES = {f.bits: _avx2_planes_tile(f.base_bits, f.planes, f.kq) for f in map(_compact.form, _compact.COMPACT_TYPES)
               } if _simd.AVAILABLE else {}


def compact_code_bytes(t, regions, n, k, layout=_compact.NAME):
    """The group records (the first region of panel64-compact's plan) as flat uint8."""
    codes = _compact.plan(t, n, k)[0]
    return _compiled._region(regions, layout, t.name, codes.name, codes.nbytes)


def panel64_compact_kernel(layout: str, t) -> _compiled.KernelSpec | None:
    """The compiled kernel of ``(panel64-compact, t)``: the record tile of a compact type, else
    panel64's kernel (the same bytes). The scale regions are panel64's."""
    f = _compact.form(t)
    if f is None:
        return _compiled.panel64_kernel(layout, t)
    if t.scheme is None:
        return None
    offset = lambda t_, n, k: np.array([t_.code_offset], np.int64)  # noqa: E731
    fast = _AVX512_TILES.get(f.bits)
    if fast is not None:  # raw u, natural order, the tile subtracts off·A
        return _compiled.KernelSpec(layout, t.name, fast, compact_code_bytes, _compiled.panel64_scale_arrays, offset,
                                    (1 << f.bits) - 1, variant="avx512")
    fast = _AVX2_TILES.get(f.bits)
    if fast is not None:  # one row: the offset in the tables; several: raw u, the tile subtracts off·A
        return _compiled.KernelSpec(layout, t.name, fast, compact_code_bytes, _compiled.panel64_scale_arrays, offset,
                                    (1 << f.bits) - 1, activations=activation_recipe(f.base_bits, f.planes, t.code_offset),
                                    variant="avx2")
    return _compiled.KernelSpec(layout, t.name, _TILES[f.bits], compact_code_bytes, _compiled.panel64_scale_arrays,
                                offset, (1 << f.bits) - 1)


# ---- the runners the registry lists for panel64-compact -------------------------------------
def integer_form_reader(s: Sample) -> list[PathResult]:
    """The closed-form reader (``panel64_compact.signed_codes``: every weight's base byte and
    shift, plane bytes and bits, ZT0 value) on the sampled super-blocks, then the standard
    partials and rescale."""
    from . import dispatch, leaves

    t = s.qtype
    part, rows = leaves.sb_regions(s.regions, s.sbs), s.rows.size
    c = _compact.signed_codes(part["panels"], rows, s.k, t)
    sc, of = _compiled.panel64_scale_arrays(t, part, rows, s.k, s.layout)
    P = dispatch.partials_from_codes(c, s.a, int(t.group))
    y = dispatch.rescale(P, s.A, sc, of, s.da, t)
    return [(f"reader.{s.layout}.closed_form", P, y, s.rows)]


def leaves_runner(s: Sample) -> list[PathResult]:
    """The emulated SME2 leaves on the sampled super-blocks' records (verify/compact_leaves.py):
    GEMV (LUTI + predicated ADD + SDOT) and the NEON path (TBL/USHL/CMTST + SDOT) at M = 1,
    GEMM (... + SMOPA) for more rows."""
    from . import compact_leaves, dispatch, leaves

    t = s.qtype
    f = _compact.form(t)
    assert f is not None, t.name
    part, rows = leaves.sb_regions(s.regions, s.sbs), s.rows.size
    recs = compact_code_bytes(t, part, rows, s.k, s.layout)
    sc, of = _compiled.panel64_scale_arrays(t, part, rows, s.k, s.layout)
    zt0 = np.asarray(s.params.get("zt0", list(_compact.zt0_table(t))), np.uint8)
    expand = "luti4" if f.base_bits == 4 else "luti2"
    args = (recs, zt0, s.a, rows, s.k, int(t.group), f.base_bits, f.planes)
    if s.a.shape[0] == 1:
        runs = [(f"sme2.gemv.{expand}_planes_sdot", compact_leaves.gemv_leaf(*args)),
                ("neon.compact", compact_leaves.neon_leaf(*args))]
    else:
        runs = [(f"sme2.gemm.{expand}_planes_smopa", compact_leaves.gemm_leaf(*args))]
    return [(path, P, dispatch.rescale(P, s.A, sc, of, s.da, t), s.rows) for path, P in runs]


assert _panel64.CHANNELS == TILE
