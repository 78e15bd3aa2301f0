"""Numba kernels of the panel64-compact planes, both directions, with a numpy reference beside
each (``planes_ref`` / ``int8_ref``): the tests compare them byte for byte.

Both directions convert between a group's int8 panel (panel64's expanded order, ``kq`` kg-blocks
of 256 signed codes ``c``) and the group's compact record (panel64_compact.py draws it)::

    u = (c + code_offset) mod 2^bits          the stored code, 0 .. 2^bits - 1
    base plane   kq x 32*B bytes   B = 4: byte 2ch + j//2 holds u(ch, j) & 15 at bit 4*(j%2)
                                   B = 2: byte ch holds u(ch, j) & 3 at bit 2*j
    bit plane p  kq x 32 bytes     byte L//8 holds bit B+p of u at lane L = 4ch + j, bit L%8

Packing, the stored code is the signed code xor the offset in its low ``bits`` (the offset is
2^(bits-1) or 0, so adding it mod 2^bits flips one bit). The kernels (``pack_records``,
``unpack_records``, one per form, explicit signatures, ``cache=True``) run one kg-block per call
of an intrinsic written in LLVM vector IR (below); measured 0.4 ms per 16 M weights each way in
cache, against 4-5.6 ms for the uint64 SWAR kernels they replaced. ``SPREAD`` (a plane byte back
to 8 byte lanes) is the table the verifier's own SWAR reader uses (verify/compact.py).
"""

from __future__ import annotations

import numpy as np
from numba import config, njit
from numba import types as nt

from ..formats import _jit  # noqa: F401  (numba's symbol names distinct across processes, before any compile)

_BITS = (np.arange(256, dtype=np.uint64)[:, None] >> np.arange(8, dtype=np.uint64)) & np.uint64(1)
#: uint64[256]: bit i of the index -> bit 0 of byte lane i (a plane byte back to 8 lanes)
SPREAD = (_BITS << (np.uint64(8) * np.arange(8, dtype=np.uint64))).sum(axis=1, dtype=np.uint64)

KG_INT8 = 256  # bytes of one int8 kg-block (4 K x 64 channels)
PLANE_KG = 32  # bytes of one 1-bit plane of a kg-block


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


# ---- the same conversion in LLVM vector IR (one kg-block of 256 lanes per call) ---------------
# Generic LLVM vector operations only (no target intrinsic), so it compiles wherever numba does;
# on x86 the sign-bit gather becomes vpmovmskb and the even/odd byte picks pshufb. Per 32 lanes:
#   u = (c ^ offset) & mask;  base: B = 4 even | odd << 4 (16 bytes), B = 2 the four crumbs of
#   each 4 lanes (8 bytes);  plane p: the sign bits of u << (7 - B - p) (one i32, lane i = bit i).
# Unpacking runs it backwards (interleave, zext of the plane bits, u - offset in i8 lanes).
def _build_simd():
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    v32i8, v16i8, v8i8, v32i1 = (ir.VectorType(i8, 32), ir.VectorType(i8, 16), ir.VectorType(i8, 8),
                                 ir.VectorType(ir.IntType(1), 32))

    def splat(v, ty=v32i8):
        return ir.Constant(ty, [v] * ty.count)

    def ptr(context, builder, signature, args, i, off):
        data = context.make_array(signature.args[i])(context, builder, args[i]).data
        return builder.gep(data, [off])

    def at(builder, base, offset, ty):
        return builder.bitcast(builder.gep(base, [ir.Constant(i64, offset)]), ty.as_pointer())

    def pick(builder, x, idx):
        return builder.shuffle_vector(x, ir.Constant(x.type, None), ir.Constant(ir.VectorType(i32, len(idx)), idx))

    def pack_kg(base: int, nplanes: int, kq: int):
        @intrinsic
        def kg(typingctx, src, soff, dst, doff, poff, xor, mask):
            """int8 kg-block at ``src[soff:soff+256]`` -> its base bytes at ``dst[doff:]`` and plane
            words at ``dst[poff + p*kq*32:]`` (no bounds checks: the caller's geometry)."""
            sig = types.void(src, soff, dst, doff, poff, xor, mask)

            def codegen(context, builder, signature, args):
                sp = ptr(context, builder, signature, args, 0, args[1])
                dp = ptr(context, builder, signature, args, 2, args[3])
                pp = ptr(context, builder, signature, args, 2, args[4])
                xb = builder.trunc(args[5], i8)
                mb = builder.trunc(args[6], i8)
                xs = builder.insert_element(ir.Constant(v32i8, None), xb, ir.Constant(i32, 0))
                xs = builder.shuffle_vector(xs, ir.Constant(v32i8, None), ir.Constant(ir.VectorType(i32, 32), [0] * 32))
                ms = builder.insert_element(ir.Constant(v32i8, None), mb, ir.Constant(i32, 0))
                ms = builder.shuffle_vector(ms, ir.Constant(v32i8, None), ir.Constant(ir.VectorType(i32, 32), [0] * 32))
                for c in range(8):
                    x = builder.load(at(builder, sp, 32 * c, v32i8), align=1)
                    u = builder.and_(builder.xor(x, xs), ms)
                    if base == 4:
                        lo = builder.and_(u, splat(15))
                        b = builder.or_(pick(builder, lo, list(range(0, 32, 2))),
                                        builder.shl(pick(builder, lo, list(range(1, 32, 2))), splat(4, v16i8)))
                        builder.store(b, at(builder, dp, 16 * c, v16i8), align=1)
                    else:
                        lo = builder.and_(u, splat(3))
                        b = pick(builder, lo, list(range(0, 32, 4)))
                        for j in range(1, 4):
                            b = builder.or_(b, builder.shl(pick(builder, lo, list(range(j, 32, 4))), splat(2 * j, v8i8)))
                        builder.store(b, at(builder, dp, 8 * c, v8i8), align=1)
                    for p in range(nplanes):
                        top = builder.shl(u, splat(7 - base - p))
                        bits = builder.bitcast(builder.icmp_signed("<", top, splat(0)), i32)
                        builder.store(bits, at(builder, pp, p * kq * 32 + 4 * c, i32), align=1)
                return context.get_dummy_value()

            return sig, codegen

        return kg

    def unpack_kg(base: int, nplanes: int, kq: int):
        @intrinsic
        def kg(typingctx, src, soff, poff, dst, doff, off):
            """The base bytes at ``src[soff:]`` and plane words at ``src[poff + p*kq*32:]`` ->
            the int8 kg-block at ``dst[doff:doff+256]``."""
            sig = types.void(src, soff, poff, dst, doff, off)

            def codegen(context, builder, signature, args):
                sp = ptr(context, builder, signature, args, 0, args[1])
                pp = ptr(context, builder, signature, args, 0, args[2])
                dp = ptr(context, builder, signature, args, 3, args[4])
                ob = builder.trunc(args[5], i8)
                os_ = builder.insert_element(ir.Constant(v32i8, None), ob, ir.Constant(i32, 0))
                os_ = builder.shuffle_vector(os_, ir.Constant(v32i8, None), ir.Constant(ir.VectorType(i32, 32), [0] * 32))
                for c in range(8):
                    if base == 4:
                        b = builder.load(at(builder, sp, 16 * c, v16i8), align=1)
                        lo = builder.and_(b, splat(15, v16i8))
                        hi = builder.lshr(b, splat(4, v16i8))
                        inter = [v for i in range(16) for v in (i, 16 + i)]
                        u = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(i32, 32), inter))
                    else:
                        b = builder.load(at(builder, sp, 8 * c, v8i8), align=1)
                        rep = builder.shuffle_vector(b, ir.Constant(v8i8, None),
                                                     ir.Constant(ir.VectorType(i32, 32), [i // 4 for i in range(32)]))
                        sh = ir.Constant(v32i8, [2 * (i % 4) for i in range(32)])
                        u = builder.and_(builder.lshr(rep, sh), splat(3))
                    for p in range(nplanes):
                        w = builder.load(at(builder, pp, p * kq * 32 + 4 * c, i32), align=1)
                        bits = builder.zext(builder.bitcast(w, v32i1), v32i8)
                        u = builder.or_(u, builder.shl(bits, splat(base + p)))
                    builder.store(builder.sub(u, os_), at(builder, dp, 32 * c, v32i8), align=1)
                return context.get_dummy_value()

            return sig, codegen

        return kg

    return pack_kg, unpack_kg


_PACK_KG, _UNPACK_KG = _build_simd()


_VSIG_PACK = nt.void(nt.Array(nt.uint8, 1, "C", readonly=True), nt.int64, nt.int64, nt.int64, nt.uint8[::1])
_VSIG_UNPACK = nt.void(nt.Array(nt.uint8, 1, "C", readonly=True), nt.int64, nt.int64, nt.uint8[::1])


def _vpack_kernel(base: int, nplanes: int, kq: int):
    kg = _PACK_KG(base, nplanes, kq)
    bb = 32 * base
    gb = kq * (bb + PLANE_KG * nplanes)

    @njit(_VSIG_PACK, cache=True, nogil=True, boundscheck=False)
    def pack(src, ngroups, xor, mask, dst):
        for gi in range(ngroups):
            for q in range(kq):
                kg(src, (gi * kq + q) * KG_INT8, dst, gi * gb + q * bb, gi * gb + kq * bb + q * PLANE_KG, xor, mask)

    return pack


def _vunpack_kernel(base: int, nplanes: int, kq: int):
    kg = _UNPACK_KG(base, nplanes, kq)
    bb = 32 * base
    gb = kq * (bb + PLANE_KG * nplanes)

    @njit(_VSIG_UNPACK, cache=True, nogil=True, boundscheck=False)
    def unpack(src, ngroups, off, dst):
        for gi in range(ngroups):
            for q in range(kq):
                kg(src, gi * gb + q * bb, gi * gb + kq * bb + q * PLANE_KG, dst, (gi * kq + q) * KG_INT8, off)

    return unpack


_VPACK: dict = {}
_VUNPACK: dict = {}


def pack_records(src, ngroups, kq, base, nplanes, offset, bits, dst) -> None:
    """int8 panels (uint8 bytes, ``ngroups * kq * 256``) -> compact group records (uint8 bytes),
    through the vector-IR kernels (compiled on first use, one per form)."""
    if config.DISABLE_JIT:  # type: ignore[attr-defined]  # an intrinsic has no Python body: the reference instead
        c = np.asarray(src).view(np.int8).reshape(ngroups, kq, KG_INT8)
        dst[...] = planes_ref(c, kq, base, nplanes, offset, bits).reshape(-1)
        return
    key = (base, nplanes, kq)
    if key not in _VPACK:
        _VPACK[key] = _vpack_kernel(*key)
    _VPACK[key](src, ngroups, offset, (1 << bits) - 1, dst)


def unpack_records(src, ngroups, kq, base, nplanes, offset, dst) -> None:
    """Compact group records (uint8 bytes) -> int8 panels (uint8 bytes), vector-IR kernels."""
    if config.DISABLE_JIT:  # type: ignore[attr-defined]  # (numba.config sets its names at run time)
        rec = np.asarray(src).reshape(ngroups, -1)
        dst[...] = int8_ref(rec, kq, base, nplanes, offset, base + nplanes).view(np.uint8).reshape(-1)
        return
    key = (base, nplanes, kq)
    if key not in _VUNPACK:
        _VUNPACK[key] = _vunpack_kernel(*key)
    _VUNPACK[key](src, ngroups, offset, dst)
