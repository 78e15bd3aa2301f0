"""Activation tables for the AVX2 dots of ``panel64-compact`` (verify/compact.py): a row's
activations, once a call, turned into the 16-entry sums the dots look up by ``vpshufb``.

A bit-plane word holds one nibble a channel per kg-block (bit ``j`` = K ``4q + j``), so the plane's
share of the channel's dot is ``P[n] = Σ_j bit_j(n)·x[4q + j]``: one 16-entry table per kg-block,
the same for every channel (and every 64-channel tile) of the product. A LUTI2 form's crumb byte
``y = c0 | c1 << 2 | c2 << 4 | c3 << 6`` is two such nibbles, ``c0 | c1 << 2`` and
``c2 | c3 << 2``: two more tables. Built in the dot, a table costs a dozen vector operations per
kg-block and tile; built here, once per activation row, it is two loads. Layout of the kernel's
activation row (``M = 1``; for more rows the tiles expand each group's codes once and read the
activations only)::

    [ x: K activations (pair order for the LUTI4 forms) ][ kg-block 0 ][ kg-block 1 ] ... [ K/4 - 1 ]
    kg-block q: its tables, 32 bytes each: the 16 entries' low bytes, then their high bytes (int16)
        crumbs (LUTI2 forms):  C01[n] = (n & 3)·x[4q] + (n >> 2)·x[4q + 1]
                               C23[n] = (n & 3)·x[4q + 2] + (n >> 2)·x[4q + 3]
        planes, one table each (f1, f0 the table's factors, 1 <= f1 <= 4, 0 <= f0 <= f1):
                               P[n] = Σ_j (f1·bit_j(n) - f0)·x[4q + j]     (|P| <= 4·4·128)
            SPLIT mode (the LUTI4 forms' planes): instead of P's low and high bytes, the 16
            entries of P mod 32 (0 .. 31), then of P >> 5 (floor(P / 32), |.| <= 64): bytes a dot
            adds across planes and kg-blocks with no carry, then joins as (P mod 32) + 32·(P >> 5)
    (x natural order in the sums)

so with ``B`` table bytes a kg-block the row has ``K·(1 + B/4)`` bytes and a dot handed the row
and the offset ``p`` of its group's first activation finds kg-block ``q'``'s tables at
``K + (B/4)·p + B·q'``. ``f1`` is the plane's weight in the code (relative to the nibbles' for the
LUTI4 forms, whose planes are summed apart and scaled by 2^4 as they widen), and ``f0`` folds a
type's code offset into the top plane's table (Q6_K: ``u - 32 = n + 16·(b4 + 2·(b5 - 1))``), so
the one-row dot is ``Σ (u - offset)·x`` with no ``offset·A`` left to subtract.

:func:`tables_ref` is the numpy statement, :func:`fill_scalar` the compiled scalar one, and
:func:`fill` the row builder the kernels' rows come from (the decode path's prologue calls it,
verify/rowvec.py): where numba targets AVX2 it writes each table with ``vpmaddubsw`` of the
entries' factors against the activation pairs (:func:`_build_entries`: two for the factors'
positive parts, two for their negative ones; a 4096-wide row's tables in ~7-9 us, where the
scalar loop took 35-80 us).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import types

from ..formats._jit import lazy_njit
from . import _simd

#: bytes of one 16-entry int16 table (low bytes, high bytes)
TABLE_BYTES = 32

#: bits of a :func:`fill` mode: pair order (_simd.pair_order) for the first K bytes, the crumb
#: tables, the plane tables split as (P mod 32, P >> 5) instead of (low byte, high byte); from bit
#: PLANE_SHIFT on, 16 bits a plane table (:data:`MAX_PLANES` at most): its ``f1`` in the low byte,
#: its ``f0`` in the high one (module docstring)
PAIR, CRUMBS, SPLIT = 1, 2, 4
PLANE_SHIFT, MAX_PLANES = 8, 2
#: a SPLIT plane table's entry: ``P = low + SPLIT_UNIT·high`` (low in 0 .. SPLIT_UNIT - 1)
SPLIT_UNIT, SPLIT_SHIFT = 32, 5


def plane_mode(planes) -> int:
    """The mode bits of the plane tables ``[(f1, f0), ...]``."""
    if len(planes) > MAX_PLANES or not all(1 <= f1 <= 4 and 0 <= f0 <= f1 for f1, f0 in planes):
        raise ValueError(f"plane tables {planes!r}: at most {MAX_PLANES}, 1 <= f1 <= 4, 0 <= f0 <= f1")
    return sum((f1 | f0 << 8) << (PLANE_SHIFT + 16 * i) for i, (f1, f0) in enumerate(planes))


def plane_tables(mode: int) -> list[tuple[int, int]]:
    """The ``(f1, f0)`` of each plane table of ``mode``."""
    specs, m = [], mode >> PLANE_SHIFT
    while m:
        specs.append((m & 0xFF, m >> 8 & 0xFF))
        m >>= 16
    return specs


def table_bytes(mode: int) -> int:
    """Table bytes per kg-block of a :func:`fill` mode."""
    return TABLE_BYTES * (2 * bool(mode & CRUMBS) + len(plane_tables(mode)))


@lazy_njit(inline="always")
def _plane_count(mode):
    """``len(plane_tables(mode))`` in nopython code."""
    count, spec = 0, mode >> PLANE_SHIFT
    while spec:
        count += 1
        spec >>= 16
    return count


@lazy_njit(inline="always")
def _table_bytes(mode):
    """:func:`table_bytes` in nopython code."""
    return TABLE_BYTES * (2 * ((mode & CRUMBS) != 0) + _plane_count(mode))


@lazy_njit(inline="always")
def _signed_byte(v):
    """The low byte of the integer ``v`` as int8 (two's complement), the same with or without the JIT."""
    return ((v & 0xFF) ^ 0x80) - 0x80


_FILL_SIG = types.void(types.Array(types.int8, 2, "C", readonly=True), types.int64, types.int8[:, ::1])


@lazy_njit(inline="always")
def _order(a, mode, out):
    """The first K bytes of the row: ``a[0]``, in pair order where ``mode & PAIR``."""
    k = a.shape[1]
    if mode & PAIR:
        for q in range(0, k, 4):
            out[0, q], out[0, q + 1], out[0, q + 2], out[0, q + 3] = a[0, q], a[0, q + 2], a[0, q + 1], a[0, q + 3]
    else:
        for i in range(k):
            out[0, i] = a[0, i]


@lazy_njit(_FILL_SIG, cache=True)
def fill_scalar(a, mode, out):
    """``out[0]`` = the kernel's activation row for ``a[0]`` (int8, natural order): the K
    activations (pair order where ``mode & PAIR``), then the tables ``mode`` asks for (module
    docstring): ``out`` has ``K + K/4·table_bytes(mode)`` columns. The scalar statement (and the
    row builder without AVX2); :func:`fill` is the one the kernels' rows come from."""
    k = a.shape[1]
    _order(a, mode, out)
    crumbs = mode & CRUMBS
    tb = _table_bytes(mode)
    for q in range(k // 4 if tb else 0):
        x0, x1, x2, x3 = np.int64(a[0, 4 * q]), np.int64(a[0, 4 * q + 1]), np.int64(a[0, 4 * q + 2]), \
            np.int64(a[0, 4 * q + 3])
        at = k + tb * q
        if crumbs:
            for n in range(16):
                lo, hi = (n & 3) * x0 + (n >> 2) * x1, (n & 3) * x2 + (n >> 2) * x3
                out[0, at + n], out[0, at + 16 + n] = _signed_byte(lo), _signed_byte(lo >> 8)
                out[0, at + 32 + n], out[0, at + 48 + n] = _signed_byte(hi), _signed_byte(hi >> 8)
            at += 2 * TABLE_BYTES
        spec, shift = mode >> PLANE_SHIFT, SPLIT_SHIFT if mode & SPLIT else 8
        while spec:
            f1, f0 = spec & 0xFF, spec >> 8 & 0xFF
            for n in range(16):
                v = ((f1 * (n & 1) - f0) * x0 + (f1 * (n >> 1 & 1) - f0) * x1 + (f1 * (n >> 2 & 1) - f0) * x2
                     + (f1 * (n >> 3 & 1) - f0) * x3)
                out[0, at + n], out[0, at + 16 + n] = _signed_byte(v & ((1 << shift) - 1)), _signed_byte(v >> shift)
            at += TABLE_BYTES
            spec >>= 16


def _build_entries(split: bool = False):
    """The AVX2 table writer: ``entries(row, i, bits, t, out, o)`` stores at ``out[o:o + 32]`` the
    16 int16 entries ``E[n] = F[n]·(row[i], row[i+1], row[i+2], row[i+3])`` of the factors
    ``F = bits[t, 0:64] - bits[t, 64:128]`` (``F[n] = (b[2n], b[2n+1], b[32+2n], b[32+2n+1])``;
    the factors' positive and negative parts, unsigned) as their low bytes then their high bytes
    (``split``: as ``E mod 32`` then ``E >> 5``, the SPLIT tables: ``E' = (E >> 5) << 8 | E & 31``
    before the same byte shuffle)::

        E = vpmaddubsw(b[0:32], (row[i], row[i+1]) x 16) + vpmaddubsw(b[32:64], (row[i+2], row[i+3]) x 16)
            - the same of b[64:128]
            int16 lane n = entry n: lanes 0-7 in the low 128 bits, 8-15 in the high
        out = bytes [E0.lo .. E15.lo | E0.hi .. E15.hi]     (one byte shuffle and a 64-bit permute)

    Exact: a part is at most 4, the activations int8, so a vpmaddubsw lane is at most 2·4·128,
    a part's entry 4·4·128 and ``E`` (one part of each factor is 0) 4·4·128 in magnitude."""
    from llvmlite import ir
    from numba.extending import intrinsic

    from ..formats import _numba_internals

    i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
    v32i8, v16i16 = ir.VectorType(i8, 32), ir.VectorType(i16, 16)
    #: output byte b: the low (b < 16) or high byte of entry b % 16 (lane (b % 16) // 8, int16 b % 8)
    gather = ir.Constant(ir.VectorType(i32, 32), [16 * (b % 16 // 8) + 2 * (b % 8) + b // 16 for b in range(32)])

    @intrinsic
    def entries(typingctx, row, i, bits, t, out, o):
        sig = types.void(row, i, bits, t, out, o)

        def codegen(context, builder, signature, args):
            def data(n):
                return context.make_array(signature.args[n])(context, builder, args[n]).data

            def at(ptr, off, ty):
                return builder.bitcast(builder.gep(ptr, [off]), ty.as_pointer())

            rp = builder.gep(data(0), [args[1]])
            bp = builder.gep(data(2), [builder.mul(args[3], ir.Constant(i64, 128))])
            pmadd = _numba_internals.llvm_function(builder, ir.FunctionType(v16i16, [v32i8, v32i8]),
                                                   "llvm.x86.avx2.pmadd.ub.sw")
            e = None
            for h in range(2):
                pair = builder.load(at(rp, ir.Constant(i64, 2 * h), i16), align=1)
                pairs = builder.shuffle_vector(builder.insert_element(ir.Constant(v16i16, None), pair, ir.Constant(i32, 0)),
                                               ir.Constant(v16i16, None), ir.Constant(ir.VectorType(i32, 16), [0] * 16))
                for sign in range(2):
                    bv = builder.load(at(bp, ir.Constant(i64, 64 * sign + 32 * h), v32i8), align=1)
                    m = builder.call(pmadd, [bv, builder.bitcast(pairs, v32i8)])
                    e = m if e is None else (builder.sub(e, m) if sign else builder.add(e, m))
            if split:
                sixteen = ir.VectorType(i16, 16)
                e = builder.or_(builder.shl(builder.ashr(e, ir.Constant(sixteen, [SPLIT_SHIFT] * 16)),
                                            ir.Constant(sixteen, [8] * 16)),
                                builder.and_(e, ir.Constant(sixteen, [SPLIT_UNIT - 1] * 16)))
            eb = builder.bitcast(e, v32i8)
            builder.store(builder.shuffle_vector(eb, ir.Constant(v32i8, None), gather),
                          at(builder.gep(data(4), [args[5]]), ir.Constant(i64, 0), v32i8), align=1)
            return context.get_dummy_value()

        return sig, codegen

    # (keyed: fill's cache key holds it, and an intrinsic otherwise pickles with a per-process uuid)
    return _numba_internals.keyed_intrinsic(entries, f"{__name__}.entries" + ("_split" if split else ""))


@lazy_njit(inline="always")
def _table_bits(mode):
    """``[2 + MAX_PLANES, 128]`` uint8: the factors :func:`_build_entries`'s ``bits[t]`` takes for
    the crumb tables C01 (t = 0), C23 (t = 1) and the plane tables (t = 2, 3) of ``mode``: a
    plane factor ``f1·bit - f0`` as its positive part (bytes 0-63) and its negative one (64-127)."""
    bits = np.zeros((2 + MAX_PLANES, 128), np.uint8)
    for n in range(16):
        bits[0, 2 * n], bits[0, 2 * n + 1] = n & 3, n >> 2
        bits[1, 32 + 2 * n], bits[1, 32 + 2 * n + 1] = n & 3, n >> 2
    spec, t = mode >> PLANE_SHIFT, 2
    while spec:
        f1, f0 = spec & 0xFF, spec >> 8 & 0xFF
        for n in range(16):
            for j in range(4):
                f = f1 * (n >> j & 1) - f0
                at = 32 * (j >> 1) + 2 * n + (j & 1)
                bits[t, at], bits[t, 64 + at] = max(f, 0), max(-f, 0)
        spec >>= 16
        t += 1
    return bits


def _fill_simd_of(entries, entries_split):
    @lazy_njit(_FILL_SIG, cache=True)
    def fill_simd(a, mode, out):
        k = a.shape[1]
        _order(a, mode, out)
        tb = _table_bytes(mode)
        if not tb:  # pair order only (the nibble tiles): no factors to build
            return
        crumbs, planes, split = mode & CRUMBS, _plane_count(mode), mode & SPLIT
        bits = _table_bits(mode)
        row, dst = a[0], out[0]
        for q in range(k // 4):
            at = k + tb * q
            if crumbs:
                entries(row, 4 * q, bits, 0, dst, at)
                entries(row, 4 * q, bits, 1, dst, at + TABLE_BYTES)
                at += 2 * TABLE_BYTES
            for p in range(planes):
                if split:
                    entries_split(row, 4 * q, bits, 2 + p, dst, at + TABLE_BYTES * p)
                else:
                    entries(row, 4 * q, bits, 2 + p, dst, at + TABLE_BYTES * p)

    return fill_simd


def _choose_fill():
    return _fill_simd_of(_build_entries(), _build_entries(split=True)) if _simd.AVAILABLE else fill_scalar


#: the row builder the kernels use: :func:`fill_scalar`'s row, its tables written 32 bytes at a
#: time by vpmaddubsw where numba targets AVX2 (the only tiles that read tables)
fill = _choose_fill()


def tables_ref(a: np.ndarray, mode: int) -> np.ndarray:
    """int8 ``[K/4, table_bytes(mode)]``: the tables of one natural-order activation row ``a [K]`` (numpy)."""
    x = np.asarray(a, np.int64).reshape(-1, 4)
    n = np.arange(16)
    tabs = []
    if mode & CRUMBS:
        tabs += [x[:, 2 * h:2 * h + 1] * (n & 3) + x[:, 2 * h + 1:2 * h + 2] * (n >> 2) for h in range(2)]
    shift = [8] * len(tabs)
    for f1, f0 in plane_tables(mode):
        tabs.append(x @ (f1 * ((n[:, None] >> np.arange(4)) & 1) - f0).T)
        shift.append(SPLIT_SHIFT if mode & SPLIT else 8)
    parts = [p for t, sh in zip(tabs, shift) for p in (t & ((1 << sh) - 1), (t >> sh) & 0xFF)]
    return np.concatenate(parts, axis=1).astype(np.uint8).view(np.int8) if parts else np.zeros((len(x), 0), np.int8)


@dataclass(frozen=True)
class Recipe:
    """``KernelSpec.activations`` of an AVX2 tile: ``a [M, K]`` -> the rows its kernel reads (pair
    order for the nibble tiles and the LUTI4 compact forms; one row: its tables appended)."""

    pair: bool
    crumbs: bool  # the LUTI2 forms' crumb tables
    planes: tuple[tuple[int, int], ...] = ()  # a plane table's (f1, f0) each (module docstring)
    split: bool = False  # the plane tables as (P mod 32, P >> 5) bytes (SPLIT)

    @property
    def mode(self) -> int:
        """The :func:`fill` mode of one row."""
        return ((PAIR if self.pair else 0) | (CRUMBS if self.crumbs else 0) | (SPLIT if self.split else 0)
                | plane_mode(self.planes))

    def width(self, k: int) -> int:
        """Columns of the one-row activations the kernel reads."""
        return k + k // 4 * table_bytes(self.mode)

    def __call__(self, a: np.ndarray) -> np.ndarray:
        m, k = a.shape
        if m != 1:  # several rows: the expanded-codes dot reads the activations only
            return _simd.pair_order(a) if self.pair else a
        out = np.empty((1, self.width(k)), np.int8)
        fill(np.ascontiguousarray(a, np.int8), self.mode, out)
        return out


#: the activations of the AVX2 nibble tiles (panel64, rowmajor): pair order, no tables
PAIR_ORDER = Recipe(pair=True, crumbs=False)
