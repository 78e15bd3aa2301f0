"""AVX-512 VNNI for the int8-operand compiled kernels: one ``vpdpbusd`` per 64 weights.

``vpdpbusd`` (AVX512_VNNI) multiplies unsigned bytes by signed bytes and adds each run of four
products into an int32 lane, with no int16 step in between. panel64's int8 panels keep the four
K of a channel in four consecutive bytes (byte ``256q + 4c + j`` = channel ``c`` at K ``4q + j``),
so one 64-byte load of a kg-block is 16 channels' dwords, taken against the kg-block's four
activations broadcast to every dword::

    kg-block q, slice s (channels 16s .. 16s+15):
      x = 64 bytes                 [ c0:k0 k1 k2 k3 | c1:k0 k1 k2 k3 | ... | c15:k0 .. k3 ]
      p = a[4q .. 4q+3] x 16       [    a0 a1 a2 a3 |    a0 a1 a2 a3 | ... ]
      raw codes u (0 .. 255):      acc[s] += vpdpbusd(u, p)                 = Σ_j u·a
      signed codes c (int8):       acc[s] += vpdpbusd(c ^ 0x80, p)          = Σ_j (c + 128)·a
                                   then, once a group, acc -= 128 · Σ_kk a   (the same for every lane)

Exactness: a product is at most 255·128 = 32640 in magnitude, a dword's four at most 130560, a
group of ``kg_blocks <= 8`` kg-blocks at most 1 044 480: nothing saturates or wraps in int32,
whatever the codes and activations (-128 included on both sides, which ``vpsignb``, the AVX2
kernels' trick, cannot take). The numpy statements the tests hold these to are
``_simd.int8_group_dot_ref`` and, for raw codes, the same sum over ``u``.

:data:`AVAILABLE` says whether numba compiles for a CPU with AVX512BW, AVX512_VNNI,
AVX512_VBMI (``vpmultishiftqb`` and ``vpermt2b``, which panel64-compact's records use) and GFNI
(``vgf2p8affineqb``, their high nibbles): Zen 4, Ice Lake and later (every CPU with both VNNI and
VBMI has GFNI); elsewhere the AVX2 kernels run, with the same results. ``PANELPACK_SIMD=avx2`` in the
environment keeps the AVX2 kernels on such a CPU too (read once, at import).
"""

from __future__ import annotations

import os

from ..formats import _numba_internals
from . import _simd

#: CPU features the kernels of this module need (LLVM's names)
FEATURES = ("avx512f", "avx512bw", "avx512vnni", "avx512vbmi", "gfni")


def _target_has_avx512() -> bool:
    from numba import config

    if config.DISABLE_JIT or os.environ.get("PANELPACK_SIMD", "").lower() == "avx2":
        return False
    return set(FEATURES) <= _simd.target_cpu()[1]


AVAILABLE: bool = _target_has_avx512()


class Lanes:
    """The LLVM IR pieces the AVX-512 kernels share, for one ``builder``: typed loads at byte
    offsets, the dword broadcast of four activations, ``vpdpbusd``, ``vpternlogd``,
    ``vpmultishiftqb`` and ``vgf2p8affineqb``."""

    def __init__(self, builder):
        from llvmlite import ir

        self.ir, self.b = ir, builder
        self.i8, self.i32, self.i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
        self.v64i8, self.v16i32 = ir.VectorType(self.i8, 64), ir.VectorType(self.i32, 16)
        fn = _numba_internals.llvm_function
        # declared with the dword operand types of older LLVM releases, which take it as is; newer
        # ones (byte operands) upgrade the declaration when they parse the module (llvmlite 0.50: LLVM 22)
        self._dp = fn(builder, ir.FunctionType(self.v16i32, [self.v16i32] * 3), "llvm.x86.avx512.vpdpbusd.512")
        self._tern = fn(builder, ir.FunctionType(self.v16i32, [self.v16i32] * 3 + [self.i32]),
                        "llvm.x86.avx512.pternlog.d.512")
        self._mshift = fn(builder, ir.FunctionType(self.v64i8, [self.v64i8, self.v64i8]),
                          "llvm.x86.avx512.pmultishift.qb.512")
        self._affine = fn(builder, ir.FunctionType(self.v64i8, [self.v64i8, self.v64i8, self.i8]),
                          "llvm.x86.vgf2p8affineqb.512")

    def const(self, values, ty):
        return self.ir.Constant(ty, values if isinstance(values, list) else [values] * ty.count)

    def ptr(self, base, offset: int, ty):
        """``base + offset`` (elements of ``base``'s type: bytes for the weights and activations)
        as a pointer to ``ty``."""
        return self.b.bitcast(self.b.gep(base, [self.ir.Constant(self.i64, offset)]), ty.as_pointer())

    def load(self, base, offset: int, ty):
        return self.b.load(self.ptr(base, offset, ty), align=1)

    def zero(self):
        return self.const(0, self.v16i32)

    def broadcast4(self, base, offset: int):
        """The four bytes at ``base + offset``, repeated in every dword of a 64-byte vector."""
        ir, b = self.ir, self.b
        v = b.insert_element(ir.Constant(self.v16i32, None), self.load(base, offset, self.i32), ir.Constant(self.i32, 0))
        return b.bitcast(b.shuffle_vector(v, ir.Constant(self.v16i32, None), self.const(0, self.v16i32)), self.v64i8)

    def dpbusd(self, acc, u, p):
        """``acc + Σ_{4 bytes} u·p`` per dword (u unsigned, p signed)."""
        return self.b.call(self._dp, [acc, self.b.bitcast(u, self.v16i32), self.b.bitcast(p, self.v16i32)])

    def ternlog(self, a, c, d, imm: int):
        """``vpternlogd`` on three 64-byte values (any vector types of 512 bits)."""
        ops = [self.b.bitcast(x, self.v16i32) for x in (a, c, d)]
        return self.b.call(self._tern, ops + [self.ir.Constant(self.i32, imm)])

    def multishift(self, ctrl, x):
        """``vpmultishiftqb``: byte ``i`` = the 8 bits of ``x``'s qword ``i // 8`` from bit ``ctrl[i]``."""
        return self.b.call(self._mshift, [ctrl, x])

    def affine(self, x, rows: int):
        """``vgf2p8affineqb`` (GFNI): every byte of ``x`` times the 8x8 bit matrix ``rows`` (a qword:
        its byte ``7 - k`` selects the bits of ``x`` whose parity is result bit ``k``)."""
        matrix = self.b.bitcast(self.const(rows, self.ir.VectorType(self.i64, 8)), self.v64i8)
        return self.b.call(self._affine, [x, matrix, self.ir.Constant(self.i8, 0)])

    def store_acc(self, cd, accs):
        """``acc[16s : 16s+16] = accs[s]`` (int32)."""
        for s, v in enumerate(accs):
            self.b.store(v, self.ptr(cd, 16 * s, self.v16i32), align=4)


def pointers(context, builder, signature, args):
    """The (w, woff, a, aoff, acc) arguments of a group dot as ``(w + woff, a + aoff, acc)``."""

    def data(i):
        return context.make_array(signature.args[i])(context, builder, args[i]).data

    return builder.gep(data(0), [args[1]]), builder.gep(data(2), [args[3]]), data(4)


def int8_group_dot_of(kg_blocks: int, signed: bool):
    """The int8 group dot over ``kg_blocks`` kg-blocks (8: G = 32; 4: G = 16) of panel64's int8
    panel layout: ``acc[0:64] = Σ_kk x(c, kk)·a[aoff + kk]`` (int32) for the group at byte ``woff``
    of ``w`` (uint8, 1-D), ``a`` int8 in natural order. ``signed``: the bytes are int8 codes
    (panel64's int8 panels); else raw unsigned codes (panel64-compact's expanded records). No
    bounds checks: the caller's geometry guarantees ``woff + 256·kg_blocks <= len(w)``,
    ``aoff + 4·kg_blocks <= len(a)``, ``len(acc) >= 64``."""
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def int8_group_dot(typingctx, w, woff, a, aoff, acc):
        sig = types.void(w, woff, a, aoff, acc)

        def codegen(context, builder, signature, args):
            wp, ap, cd = pointers(context, builder, signature, args)
            L = Lanes(builder)
            x80 = L.const(0x80, L.v64i8)
            accs = [L.zero()] * 4
            bias = L.zero()
            for q in range(kg_blocks):
                p = L.broadcast4(ap, 4 * q)
                if signed:
                    bias = L.dpbusd(bias, x80, p)  # 128·Σ_j a[4q+j] in every lane
                for s in range(4):
                    x = L.load(wp, 256 * q + 64 * s, L.v64i8)
                    accs[s] = L.dpbusd(accs[s], builder.xor(x, x80) if signed else x, p)
            L.store_acc(cd, [builder.sub(v, bias) for v in accs] if signed else accs)
            return context.get_dummy_value()

        return sig, codegen

    return _numba_internals.keyed_intrinsic(int8_group_dot, f"{__name__}.int8_group_dot({kg_blocks}, {signed})")


#: the intrinsics (callable from numba code only), or None where they cannot run
int8_group_dot, int8_group_dot16, raw_group_dot, raw_group_dot16 = (
    (int8_group_dot_of(8, True), int8_group_dot_of(4, True), int8_group_dot_of(8, False), int8_group_dot_of(4, False))
    if AVAILABLE else (None,) * 4)
