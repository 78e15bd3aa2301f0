"""Hand-placed x86 SIMD for the hottest compiled kernel: panel64 nibble partials (AVX2).

numba's auto-vectoriser turns the portable panel64 nibble loop (``compiled._tile_panel64_nibble``)
into ``vpmullw`` on int16 lanes: about 15 instructions per 64 multiply-adds. x86 has a
byte-level multiply-add, ``vpmaddubsw`` (unsigned byte x signed byte, adjacent pairs summed to
int16), that does the same work in about 8, but LLVM only finds it in loop shapes our kernel
cannot take. :func:`nibble_group_dot` writes the one group's loop directly in LLVM IR (a numba
``@intrinsic``), so it is inlined into the compiled tile function like any other code.

What one call computes (``G = 32``: every nibble type of panel64, Q4_0, Q4_1 and Q4_K)::

    acc[c] = Σ_{kk < 32} u(c, kk) · a[aoff + kk]        c < 64 channels, u the raw 4-bit code

from the group's 8 kg-blocks of 128 bytes at ``w[woff:]`` (the panel64 nibble layout, see
``repack/panel64.py``)::

    kg-block q (K = 4q .. 4q+3), 32-byte slice s (channels 16s .. 16s+15):
      byte 2c'   = u(k0) | u(k1) << 4          c' = c - 16s,  k0..k3 = 4q .. 4q+3
      byte 2c'+1 = u(k2) | u(k3) << 4

      x      = 32 bytes                 [ k1|k0 , k3|k2 , k1|k0 , k3|k2 , ... ]  (high|low)
      lo     = x & 0x0F                 [   k0  ,   k2  ,   k0  ,   k2  , ... ]
      hi     = (x >> 4) & 0x0F          [   k1  ,   k3  ,   k1  ,   k3  , ... ]
      pat_lo = (a[k0], a[k2]) x 16      pat_hi = (a[k1], a[k3]) x 16   (pair_order: 2-byte loads)
      vpmaddubsw(lo, pat_lo) + vpmaddubsw(hi, pat_hi) = 16 int16 lanes: Σ_{j<4} u(kj)·a[kj]

Exactness: one ``vpmaddubsw`` lane is at most 2·15·128 = 3840 in magnitude (never saturates);
four kg-blocks summed in int16 stay within 4·2·3840 = 30720 <= 32767; the two halves of the
group are widened to int32 before they are added. So ``acc`` is the exact int32 sum, whatever
the int8 activations (including -128). :func:`nibble_group_dot_ref` is the numpy statement of
the same sum; the tests compare them, and the kernels built on both.

:data:`AVAILABLE` says whether numba compiles for a CPU with AVX2 (the host, or
``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` when they are set); elsewhere (Arm, old x86, the JIT
disabled) the portable kernel runs, with the same results.
"""

from __future__ import annotations

import functools

import numpy as np

from ..formats import _numba_internals
from ..repack import panel64 as _panel64

GROUP = 32  # K per call: the scale group of every panel64 nibble type
# panel64's geometry, read from the layout module (never restated here)
KG_BLOCKS = GROUP // _panel64.KG
KG_BYTES = _panel64.NIBBLE_KG_BYTES  # one kg-block: 4 K x 64 channels of 4 bits
CHANNELS = _panel64.CHANNELS


@functools.cache  # (read at import by several predicates here and in _simd512; numba's target is fixed)
def target_cpu() -> tuple[str, frozenset[str]]:
    """(LLVM CPU name, features) of numba's compile target: ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES``
    when set (an explicit target, portable caches: trust only its feature string), else the host's."""
    from numba import config

    if config.CPU_NAME:
        return config.CPU_NAME, frozenset(f[1:] for f in (config.CPU_FEATURES or "").split(",") if f.startswith("+"))
    import llvmlite.binding as ll

    return ll.get_host_cpu_name(), frozenset(f for f, on in ll.get_host_cpu_features().items() if on)


def _target_has_avx2() -> bool:
    from numba import config

    return not config.DISABLE_JIT and "avx2" in target_cpu()[1]


AVAILABLE: bool = _target_has_avx2()


def pair_order(a: np.ndarray) -> np.ndarray:
    """int8 [M, K] activations with each run of 4 reordered (x0, x2, x1, x3): the byte pairs
    that multiply a kg-block's low nibbles (k0, k2) and high nibbles (k1, k3), so each pattern
    register is one 2-byte broadcast load."""
    m, k = a.shape
    src = a.reshape(m, k // 4, 4)
    out = np.empty_like(src)
    out[:, :, 0], out[:, :, 1], out[:, :, 2], out[:, :, 3] = src[:, :, 0], src[:, :, 2], src[:, :, 1], src[:, :, 3]
    return out.reshape(m, k)


def nibble_group_dot_ref(w: np.ndarray, woff: int, a: np.ndarray, aoff: int) -> np.ndarray:
    """int64 [64]: ``Σ_kk u(c, kk)·a[aoff + kk]`` over one group's 1024 panel bytes (numpy)."""
    g = np.asarray(w[woff:woff + KG_BLOCKS * KG_BYTES], np.uint8).reshape(KG_BLOCKS, CHANNELS, 2)
    u = np.empty((KG_BLOCKS, CHANNELS, 4), np.int64)
    u[..., 0], u[..., 1] = g[..., 0] & 15, g[..., 0] >> 4
    u[..., 2], u[..., 3] = g[..., 1] & 15, g[..., 1] >> 4
    av = np.asarray(a[aoff:aoff + GROUP], np.int64).reshape(KG_BLOCKS, 4)
    return np.einsum("qcj,qj->c", u, av)


# ---- int8 codes x int8 activations (rowmajor Q8_0 rows, via a scratch tile) ------------------
#: bytes of one group of a 64-channel int8 scratch tile (:func:`int8_group_dot`)
INT8_GROUP_BYTES = GROUP * CHANNELS


def int8_group_dot_ref(w: np.ndarray, woff: int, a: np.ndarray, aoff: int, group: int = GROUP) -> np.ndarray:
    """int64 [64]: ``Σ_kk w(c, kk)·a[aoff + kk]`` over one int8 group of ``group`` K (numpy)."""
    kg = group // 4
    g = np.asarray(w[woff:woff + group * CHANNELS], np.uint8).view(np.int8).astype(np.int64)
    codes = g.reshape(kg, CHANNELS, 4)  # [q][c][j] = w(c, 4q + j)
    av = np.asarray(a[aoff:aoff + group], np.int64).reshape(kg, 4)
    return np.einsum("qcj,qj->c", codes, av)


# ---- Q6_K super-blocks read in place (rowmajor Q6_K rows, M < 4) -----------------------------
Q6_K_BLOCK = 210  # ggml's block_q6_K: ql[128] qh[64] scales i8[16] d f16


def q6_k_block_dot_ref(w: np.ndarray, woff: int, a: np.ndarray, aoff: int) -> np.ndarray:
    """int64 [16]: the group sums of :func:`q6_k_block_dot` (numpy, from ggml's element order)."""
    blk = np.asarray(w[woff:woff + 192], np.uint8).astype(np.int64)
    ql, qh = blk[:128], blk[128:192]
    q = np.empty(256, np.int64)
    for h in range(2):
        for g in range(4):
            lo = ql[64 * h + 32 * (g % 2):64 * h + 32 * (g % 2) + 32]
            lo = lo & 15 if g < 2 else lo >> 4
            q[128 * h + 32 * g:128 * h + 32 * g + 32] = lo | (((qh[32 * h:32 * h + 32] >> (2 * g)) & 3) << 4)
    return (q * np.asarray(a[aoff:aoff + 256], np.int64)).reshape(16, 16).sum(axis=1)


# ---- int8 rows x int8 activations (rowmajor Q8_0 rows read in place, M < 4) ------------------
ROWS = 8  # rows per call of :func:`int8_rows_dot`


def int8_rows_dot_ref(w: np.ndarray, woff: int, stride: int, a: np.ndarray, aoff: int) -> np.ndarray:
    """int64 [8]: ``Σ_kk w(r, kk)·a[aoff + kk]`` for ``r < 8``, where row ``r``'s 32 int8 codes
    are the bytes at ``woff + r·stride`` of ``w`` (numpy)."""
    rows = np.stack([np.asarray(w[woff + r * stride:woff + r * stride + GROUP], np.uint8) for r in range(ROWS)])
    codes = rows.view(np.int8).astype(np.int64)
    return codes @ np.asarray(a[aoff:aoff + GROUP], np.int64)


def _build():
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
    v32i8, v16i16, v16i32 = ir.VectorType(i8, 32), ir.VectorType(i16, 16), ir.VectorType(i32, 16)
    v8i32 = ir.VectorType(i32, 8)

    def pointers(context, builder, signature, args, at=(0, 1, 2, 3, 4)):
        """The intrinsics' arguments (w, woff, a, aoff, acc), at positions ``at`` of ``args``, as
        ``(w + woff, a + aoff, acc)`` data pointers."""
        iw, iwo, ia, iao, iacc = at

        def data(i):
            return context.make_array(signature.args[i])(context, builder, args[i]).data

        return builder.gep(data(iw), [args[iwo]]), builder.gep(data(ia), [args[iao]]), data(iacc)

    def llvm_fn(builder, ret, params, name):
        return _numba_internals.llvm_function(builder, ir.FunctionType(ret, params), name)

    def madd4(builder):
        """``dot(u, s)``: ``vpmaddubsw(u, s)`` (unsigned x signed bytes, adjacent pairs summed into
        int16) then ``vpmaddwd`` with 1: four adjacent products in each int32 lane (v32i8 -> v8i32)."""
        maddubs = llvm_fn(builder, v16i16, [v32i8, v32i8], "llvm.x86.avx2.pmadd.ub.sw")
        maddwd = llvm_fn(builder, v8i32, [v16i16, v16i16], "llvm.x86.avx2.pmadd.wd")
        ones = ir.Constant(v16i16, [1] * 16)
        return lambda u, s: builder.call(maddwd, [builder.call(maddubs, [u, s]), ones])

    def psign_fn(builder):
        return llvm_fn(builder, v32i8, [v32i8, v32i8], "llvm.x86.avx2.psign.b")

    def phadd_fn(builder):
        return llvm_fn(builder, v8i32, [v8i32, v8i32], "llvm.x86.avx2.phadd.d")

    @intrinsic
    def nibble_group_dot(typingctx, w, woff, a, aoff, acc):
        """``acc[0:64] = Σ_kk u(c, kk)·x[kk]`` (int32) for the group at byte ``woff`` of ``w``
        (uint8, 1-D), where ``a[aoff:aoff + 32]`` (int8, 1-D) holds the group's activations ``x``
        in pair order (:func:`pair_order`). No bounds checks: the caller's geometry guarantees
        ``woff + 1024 <= len(w)``, ``aoff + 32 <= len(a)``, ``len(acc) >= 64``."""
        sig = types.void(w, woff, a, aoff, acc)

        def codegen(context, builder, signature, args):
            wbase, abase, cd = pointers(context, builder, signature, args)
            pmadd = llvm_fn(builder, v16i16, [v32i8, v32i8], "llvm.x86.avx2.pmadd.ub.sw")
            low4 = ir.Constant(v32i8, [15] * 32)
            four = ir.Constant(v32i8, [4] * 32)
            splat = ir.Constant(ir.VectorType(i32, 16), [0] * 16)

            def pair(at):  # the 2 bytes at abase + at, repeated x 16 (one vpbroadcastw)
                p = builder.bitcast(builder.gep(abase, [ir.Constant(i64, at)]), i16.as_pointer())
                vec = builder.insert_element(ir.Constant(v16i16, None), builder.load(p, align=1), ir.Constant(i32, 0))
                return builder.bitcast(builder.shuffle_vector(vec, ir.Constant(v16i16, None), splat), v32i8)

            pats = [(pair(4 * q), pair(4 * q + 2)) for q in range(KG_BLOCKS)]
            for s in range(CHANNELS // 16):
                halves = []
                for half in range(2):
                    total = None
                    for q in range(4 * half, 4 * half + 4):
                        p = builder.gep(wbase, [ir.Constant(i64, q * KG_BYTES + 32 * s)])
                        x = builder.load(builder.bitcast(p, v32i8.as_pointer()), align=1)
                        lo = builder.and_(x, low4)
                        hi = builder.and_(builder.lshr(x, four), low4)
                        t = builder.add(builder.call(pmadd, [lo, pats[q][0]]), builder.call(pmadd, [hi, pats[q][1]]))
                        total = t if total is None else builder.add(total, t)
                    halves.append(builder.sext(total, v16i32))
                dst = builder.bitcast(builder.gep(cd, [ir.Constant(i64, 16 * s)]), v16i32.as_pointer())
                builder.store(builder.add(halves[0], halves[1]), dst, align=4)
            return context.get_dummy_value()

        return sig, codegen

    def int8_group_dot_of(kg_blocks: int):
        """The int8 group dot for groups of ``4·kg_blocks`` K (8: G = 32, the Q8_0 scratch and the
        G = 32 int8 panels; 4: G = 16, Q6_K, Q2_K and Q3_K panels)."""

        @intrinsic
        def int8_group_dot(typingctx, w, woff, a, aoff, acc):
            """``acc[0:64] = Σ_kk w(c, kk)·a[aoff + kk]`` (int32) for the int8 group at byte
            ``woff`` of ``w`` (uint8, 1-D; byte ``256q + 4c + j`` = code of channel ``c`` at K
            offset ``4q + j``: the panel64 int8 layout, and the rowmajor Q8_0 scratch tile) against
            ``a`` (int8, 1-D, natural order). Per kg-block ``q`` and 8 channels::

                x   = 32 code bytes (8 channels x 4 K)     p = a[4q .. 4q+3] x 8 (one 4-byte broadcast)
                |p| · sign(x, p)  by vpmaddubsw  -> 16 int16 pair sums;  vpmaddwd with 1 -> 8 int32

            Exactness: needs no code equal to -128 (the caller checks; vpsignb cannot negate it).
            Then |sign(x, p)| <= 127 and |p| <= 128, so a pair sum is at most 2·128·127 = 32512 and
            vpmaddubsw never saturates; the int32 sums are exact. No bounds checks: the caller's
            geometry guarantees ``woff + 256·kg_blocks <= len(w)``, ``aoff + 4·kg_blocks <= len(a)``,
            ``len(acc) >= 64``."""
            sig = types.void(w, woff, a, aoff, acc)

            def codegen(context, builder, signature, args):
                wbase, abase, cd = pointers(context, builder, signature, args)
                dot4 = madd4(builder)
                psign = psign_fn(builder)
                splat = ir.Constant(v8i32, [0] * 8)
                accs = [None] * (CHANNELS // 8)
                for q in range(kg_blocks):
                    p4 = builder.bitcast(builder.gep(abase, [ir.Constant(i64, 4 * q)]), i32.as_pointer())
                    vec = builder.insert_element(ir.Constant(v8i32, None), builder.load(p4, align=1),
                                                 ir.Constant(i32, 0))
                    pat = builder.bitcast(builder.shuffle_vector(vec, ir.Constant(v8i32, None), splat), v32i8)
                    absp = builder.call(psign, [pat, pat])  # |p| (as unsigned bytes: -128 -> 128)
                    for s in range(CHANNELS // 8):
                        at = builder.gep(wbase, [ir.Constant(i64, q * 4 * CHANNELS + 32 * s)])
                        x = builder.load(builder.bitcast(at, v32i8.as_pointer()), align=1)
                        t = dot4(absp, builder.call(psign, [x, pat]))
                        accs[s] = t if accs[s] is None else builder.add(accs[s], t)
                for s in range(CHANNELS // 8):
                    dst = builder.bitcast(builder.gep(cd, [ir.Constant(i64, 8 * s)]), v8i32.as_pointer())
                    builder.store(accs[s], dst, align=4)
                return context.get_dummy_value()

            return sig, codegen

        return int8_group_dot

    int8_group_dot = int8_group_dot_of(KG_BLOCKS)
    int8_group_dot16 = int8_group_dot_of(KG_BLOCKS // 2)

    @intrinsic
    def q6_k_block_dot(typingctx, w, woff, a, aoff, acc):
        """``acc[0:16] = Σ_{i<16} q(16j + i)·a[aoff + 16j + i]`` (int32) for ``j < 16``: the 16
        group sums of one Q6_K super-block's raw 6-bit codes ``q`` (0..63; the signed code is
        ``q - 32``), read in place from the block at byte ``woff`` of ``w`` (uint8, 1-D; ggml's
        ``block_q6_K``: ``ql[128] qh[64] scales[16] d``), against ``a`` (int8, 1-D, natural
        order). Per half ``h`` and quarter ``g`` (32 elements ``128h + 32g + l``, the two groups
        ``8h + 2g`` and ``8h + 2g + 1``)::

            ql0 = ql[64h ..], ql1 = ql[64h + 32 ..], qh = qh[32h ..]        (32 bytes each)
            q   = (ql0 & 15 | ql1 & 15 | ql0 >> 4 | ql1 >> 4)[g] | ((qh >> 2g) & 3) << 4
            vpmaddubsw(q, a[128h + 32g ..]) -> 16 int16;  vpmaddwd with 1 -> 8 int32
                (lanes 0-3: group 8h + 2g, lanes 4-7: group 8h + 2g + 1)
            two levels of vphaddd over g = 0..3, then lanes (0 4 1 5 2 6 3 7) -> groups 8h .. 8h+7

        Exactness: a pair sum is at most 2·63·128 = 16128 (vpmaddubsw never saturates, whatever
        the activations, -128 included); the int32 sums are exact. No bounds checks: the caller
        guarantees ``woff + 192 <= len(w)``, ``aoff + 256 <= len(a)``, ``len(acc) >= 16``."""
        sig = types.void(w, woff, a, aoff, acc)

        def codegen(context, builder, signature, args):
            wbase, abase, cd = pointers(context, builder, signature, args)
            dot4 = madd4(builder)
            phadd = phadd_fn(builder)
            low4, three = ir.Constant(v32i8, [15] * 32), ir.Constant(v32i8, [3] * 32)

            def load(base, at):
                return builder.load(builder.bitcast(builder.gep(base, [ir.Constant(i64, at)]), v32i8.as_pointer()),
                                    align=1)

            def shift(x, by, op):
                return x if by == 0 else op(x, ir.Constant(v32i8, [by] * 32))

            for h in range(2):
                ql0, ql1, qh = load(wbase, 64 * h), load(wbase, 64 * h + 32), load(wbase, 128 + 32 * h)
                sums = []
                for g in range(4):
                    ql = ql0 if g % 2 == 0 else ql1
                    lo = builder.and_(ql, low4) if g < 2 else shift(ql, 4, builder.lshr)
                    hi = shift(builder.and_(shift(qh, 2 * g, builder.lshr), three), 4, builder.shl)
                    q = builder.or_(lo, hi)
                    sums.append(dot4(q, load(abase, 128 * h + 32 * g)))
                quad = builder.call(phadd, [builder.call(phadd, [sums[0], sums[1]]),
                                            builder.call(phadd, [sums[2], sums[3]])])
                out = builder.shuffle_vector(quad, ir.Constant(v8i32, None), ir.Constant(v8i32, [0, 4, 1, 5, 2, 6, 3, 7]))
                dst = builder.bitcast(builder.gep(cd, [ir.Constant(i64, 8 * h)]), v8i32.as_pointer())
                builder.store(out, dst, align=4)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def int8_rows_dot(typingctx, w, woff, stride, a, aoff, acc):
        """``acc[0:8] = Σ_kk w(r, kk)·a[aoff + kk]`` (int32): one block of 32 int8 codes in each of
        8 rows, row ``r``'s at byte ``woff + r·stride`` of ``w`` (uint8, 1-D; a Q8_0 block's
        ``qs``, read where the standard blocks keep it), against ``a`` (int8, 1-D)::

            x_r = 32 code bytes of row r              p = a[aoff .. aoff+31]  (one load)
            |x_r| · sign(p, x_r)  by vpmaddubsw -> 16 int16 pair sums;  vpmaddwd with 1 -> 8 int32
            3 levels of vphaddd + one cross-lane add: the 8 rows' 8 lanes -> acc[0..7]

        Exactness: needs no activation equal to -128 (the caller checks; vpsignb cannot negate
        it); a code of -128 is fine (``|x|`` is read unsigned: 128). Then a pair sum is at most
        2·128·127 = 32512, vpmaddubsw never saturates and the int32 sums are exact. No bounds
        checks: the caller guarantees ``woff + 7·stride + 32 <= len(w)``, ``aoff + 32 <= len(a)``,
        ``len(acc) >= 8``."""
        sig = types.void(w, woff, stride, a, aoff, acc)

        def codegen(context, builder, signature, args):
            wbase, abase, cd = pointers(context, builder, signature, args, at=(0, 1, 3, 4, 5))
            w_stride = args[2]
            dot4 = madd4(builder)
            psign = psign_fn(builder)
            phadd = phadd_fn(builder)
            p = builder.load(builder.bitcast(abase, v32i8.as_pointer()), align=1)
            sums = []
            for r in range(ROWS):
                at = builder.gep(wbase, [builder.mul(w_stride, ir.Constant(i64, r))])
                x = builder.load(builder.bitcast(at, v32i8.as_pointer()), align=1)
                sums.append(dot4(builder.call(psign, [x, x]), builder.call(psign, [p, x])))
            # vphaddd works within 128-bit halves: after two levels, h0 = [rows 0-3 of lanes 0-3 |
            # rows 0-3 of lanes 4-7], h1 the same for rows 4-7; the last step adds the halves
            quads = [builder.call(phadd, [sums[i], sums[i + 1]]) for i in range(0, ROWS, 2)]
            h0 = builder.call(phadd, [quads[0], quads[1]])
            h1 = builder.call(phadd, [quads[2], quads[3]])
            lo = builder.shuffle_vector(h0, h1, ir.Constant(v8i32, [0, 1, 2, 3, 8, 9, 10, 11]))
            hi = builder.shuffle_vector(h0, h1, ir.Constant(v8i32, [4, 5, 6, 7, 12, 13, 14, 15]))
            builder.store(builder.add(lo, hi), builder.bitcast(cd, v8i32.as_pointer()), align=4)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def f16_lanes(typingctx, h, hoff, out):
        """``out[0:64] = f32(h[hoff:hoff + 64])``: 64 f16 values (``h`` uint16 bits, 1-D) widened
        to f32, 8 at a time (``fpext half -> float``: vcvtph2ps with F16C; exact for every f16,
        so a factor stored as f16 reads back as the f32 it came from). No bounds checks: the
        caller guarantees ``hoff + 64 <= len(h)``, ``len(out) >= 64``."""
        sig = types.void(h, hoff, out)

        def codegen(context, builder, signature, args):
            hd = context.make_array(signature.args[0])(context, builder, args[0]).data
            od = context.make_array(signature.args[2])(context, builder, args[2]).data
            base = builder.gep(hd, [args[1]])
            v8h, v8f = ir.VectorType(ir.HalfType(), 8), ir.VectorType(ir.FloatType(), 8)
            for j in range(0, CHANNELS, 8):
                src = builder.bitcast(builder.gep(base, [ir.Constant(i64, j)]), v8h.as_pointer())
                dst = builder.bitcast(builder.gep(od, [ir.Constant(i64, j)]), v8f.as_pointer())
                builder.store(builder.fpext(builder.load(src, align=2), v8f), dst, align=4)
            return context.get_dummy_value()

        return sig, codegen

    built = {"nibble_group_dot": nibble_group_dot, "int8_group_dot": int8_group_dot,
             "int8_group_dot16": int8_group_dot16, "q6_k_block_dot": q6_k_block_dot,
             "int8_rows_dot": int8_rows_dot, "f16_lanes": f16_lanes}
    # fixed identities: the tiles that close over them keep one numba cache key across processes
    return tuple(_numba_internals.keyed_intrinsic(fn, f"{__name__}.{name}") for name, fn in built.items())


#: the intrinsics (callable from numba code only), or None where they cannot run
(nibble_group_dot, int8_group_dot, int8_group_dot16, q6_k_block_dot, int8_rows_dot,
 f16_lanes) = _build() if AVAILABLE else (None,) * 6
#: f16_lanes compiles to vcvtph2ps (F16C; every AVX2 CPU we know has it, checked anyway)
F16_LANES = AVAILABLE and "f16c" in target_cpu()[1]


#: CPUs (LLVM's names) whose ``pdep`` is microcoded: tens to hundreds of cycles where others take
#: one (AMD before Zen 3), so the kernels that deposit bits with it keep another sequence there
SLOW_PDEP = ("bdver4", "znver1", "znver2")


#: whether the AVX2 kernels may use BMI2's ``pdep`` (verify/compact.py's Q6_K planes dot)
FAST_PDEP = AVAILABLE and "bmi2" in target_cpu()[1] and target_cpu()[0] not in SLOW_PDEP
