"""The ledger's error sums, compiled: ``(Σ d², Σ ref², max |d|)`` with ``d = f64(new) - f64(ref)``.

Both kernels keep 8 f64 lanes per sum: element ``i`` of the flat arrays goes to lane ``i % 8``
(the ``n % 8`` tail to lane 0, after the rest), each lane summed in element order, and the 8
lanes added in lane order at the end (``lanes.sum()``: 0 + l0 + l1 + ... + l7). That order is
the ledger's definition (convert/quality.py); any code that keeps it gives the same bits:

* :func:`error_sums_scalar`: the lanes as three 8-element arrays, one element at a time (the
  reference, and what runs where the vector body cannot: ``NUMBA_DISABLE_JIT``);
* :func:`error_sums`: the lanes as LLVM vectors (``<8 x double>``; AVX2 runs them as two
  ymm registers, other targets as what they have), one 8-element row per step, written in
  LLVM IR (:func:`lane_sums`): numba runs no SLP vectorizer, and its loop vectorizer does not
  touch a reduction of floats without reassociating it (measured 1.6 ns per element scalar,
  2 cores' worth of the ledger's time on Gemma 3's 268 M weights). Per lane the operations
  are the scalar kernel's, IEEE, no fast-math flags, so no fused multiply-add and no reordering:
  ``sd += d * d``, ``sr += r * r``, ``mx = |d| > mx ? |d| : mx`` (a NaN never replaces ``mx``).

    row i (8 floats) ──fpext──> r, n (<8 x double>) ── d = n - r
      sd ← sd + d·d        sr ← sr + r·r        mx ← select(|d| > mx, |d|, mx)

tests/test_quality.py compares the two on random, tailed, non-finite and empty inputs.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import config

from ..formats import _numba_internals
from ..formats._jit import RO_F32, inline_jit, lazy_njit

LANES = 8

_F8 = numba.float64
_SUMS = numba.types.UniTuple(_F8, 3)(RO_F32, RO_F32)


@inline_jit
def _tail_and_total(x_new, x_ref, m, sd, sr, mx):
    """Both kernels' end: elements ``m ..`` (the ``n % 8`` tail) into lane 0, then the lanes
    added in lane order (``sum``: 0 + l0 + ... + l7) and their maximum."""
    for i in range(m, x_new.size):
        r = np.float64(x_ref[i])
        d = np.float64(x_new[i]) - r
        sd[0] += d * d
        sr[0] += r * r
        a = abs(d)
        mx[0] = a if a > mx[0] else mx[0]
    return sd.sum(), sr.sum(), mx.max()


@lazy_njit(_SUMS, cache=True, error_model="numpy")
def error_sums_scalar(x_new, x_ref):
    """The reference: the 8 lanes as arrays, element by element (no branch in the body)."""
    sd = np.zeros(8)
    sr = np.zeros(8)
    mx = np.zeros(8)
    n = x_new.size
    m = n - n % 8
    for i in range(0, m, 8):
        for j in range(8):
            r = np.float64(x_ref[i + j])
            d = np.float64(x_new[i + j]) - r
            sd[j] += d * d
            sr[j] += r * r
            a = abs(d)
            mx[j] = a if a > mx[j] else mx[j]
    return _tail_and_total(x_new, x_ref, m, sd, sr, mx)


def _build_lane_sums():
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    cgutils = _numba_internals.cgutils()

    f32, f64, i64 = ir.FloatType(), ir.DoubleType(), ir.IntType(64)
    v8f, v8d = ir.VectorType(f32, LANES), ir.VectorType(f64, LANES)

    @intrinsic
    def lane_sums(typingctx, x_new, x_ref, rows, acc):
        """``acc[0:8] += Σ d²``, ``acc[8:16] += Σ r²``, ``acc[16:24] = max(acc, |d|)`` over the
        first ``rows`` rows of 8 elements of ``x_new``/``x_ref`` (f32, 1-D, C order), lane by
        lane (``acc`` f64, 24 elements). No bounds checks: the caller guarantees ``8·rows <=``
        both sizes and ``len(acc) >= 24``."""
        sig = types.void(x_new, x_ref, rows, acc)

        def codegen(context, builder, signature, args):
            def data(i):
                return context.make_array(signature.args[i])(context, builder, args[i]).data

            pn, pr, pa = data(0), data(1), data(3)
            pav = builder.bitcast(pa, v8d.as_pointer())
            fabs = _numba_internals.llvm_function(builder, ir.FunctionType(v8d, [v8d]), "llvm.fabs.v8f64")
            slots = []
            for s in range(3):  # the accumulators live in registers for the loop (mem2reg)
                slot = cgutils.alloca_once(builder, v8d)
                builder.store(builder.load(builder.gep(pav, [ir.Constant(i64, s)]), align=8), slot)
                slots.append(slot)
            with cgutils.for_range(builder, args[2]) as loop:
                off = builder.mul(loop.index, ir.Constant(i64, LANES))
                vn = builder.load(builder.bitcast(builder.gep(pn, [off]), v8f.as_pointer()), align=4)
                vr = builder.load(builder.bitcast(builder.gep(pr, [off]), v8f.as_pointer()), align=4)
                r = builder.fpext(vr, v8d)
                d = builder.fsub(builder.fpext(vn, v8d), r)
                builder.store(builder.fadd(builder.load(slots[0]), builder.fmul(d, d)), slots[0])
                builder.store(builder.fadd(builder.load(slots[1]), builder.fmul(r, r)), slots[1])
                a = builder.call(fabs, [d])
                mx = builder.load(slots[2])
                builder.store(builder.select(builder.fcmp_ordered(">", a, mx), a, mx), slots[2])
            for s in range(3):
                builder.store(builder.load(slots[s]), builder.gep(pav, [ir.Constant(i64, s)]), align=8)
            return context.get_dummy_value()

        return sig, codegen

    return lane_sums


#: the vector body (callable from numba code only), or None where it cannot run (JIT disabled)
lane_sums = None if config.DISABLE_JIT else _build_lane_sums()  # type: ignore[attr-defined]  # (numba.config sets its names at run time)


@lazy_njit(_SUMS, cache=True, error_model="numpy")
def _error_sums_vector(x_new, x_ref):
    acc = np.zeros(3 * 8)
    n = x_new.size
    m = n - n % 8
    lane_sums(x_new, x_ref, m // 8, acc)
    sd = acc[0:8]
    sr = acc[8:16]
    mx = acc[16:24]
    return _tail_and_total(x_new, x_ref, m, sd, sr, mx)


#: the kernel the ledger runs: the vector one, or the scalar one where the vector body cannot run
error_sums = error_sums_scalar if lane_sums is None else _error_sums_vector
