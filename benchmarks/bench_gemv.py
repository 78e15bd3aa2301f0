"""GEMV/GEMM speed of the compiled kernels (verify/compiled.py) against same-run baselines.

    python benchmarks/bench_gemv.py                      # Q4_0 4096 x 4096, M = 1, 2 threads
    python benchmarks/bench_gemv.py --threads 1 --m 1 16 64
    python benchmarks/bench_gemv.py --type q4_k --rounds 8 --repeats 30
    python benchmarks/bench_gemv.py --type q5_k --threads 1 --cpu-time --settle 0   # one thread's CPU time
    python benchmarks/bench_gemv.py --type q5_k --row          # through RowProduct, as a decoded token
    python benchmarks/bench_gemv.py --type q5_k --row --working-set 256   # weights streamed from memory
    python benchmarks/bench_gemv.py --type q5_k --row --working-set 256 --pairs 400   # compact vs int8, paired

Each round runs a block of ``--repeats`` consecutive calls per contender, the block order
rotating from round to round (load from other processes hits every contender alike). Before
each block the process idles ``--settle`` seconds: OpenBLAS workers spin for a while after a
call, and without the pause they steal the second vCPU from whichever contender runs next. The table reports the
median, minimum and 90th percentile over all timed calls, and ratios of medians. Contenders,
all with their weights prepared beforehand:

* ``numpy f32``: ``W @ x`` on the dequantized f32 matrix (BLAS; moves 8x the bytes of Q4_0);
* ``panel64``:   ``compiled.Prepared.matmul`` on the panel64 bytes (activation quantization,
  integer partials and the docs/FORMAT.md §3 rescale, all included);
* ``rowmajor``:  the same on the standard GGUF blocks (the standard dispatch, compiled);
* ``compact``:   for Q5_0/Q5_1/Q5_K/Q6_K/Q2_K/Q3_K, the same on ``panel64-compact``'s bit-plane
  records (issue 26 target: no slower than ``panel64``'s int8 panels at M = 1, 2 threads).

The outputs of panel64 and rowmajor are checked to be bit-identical before timing. Note that
rowmajor's exact per-group int32 partials need one horizontal reduction per 32 weights of a row,
which these numba kernels do poorly; the rowmajor/panel64 ratio therefore overstates what the
layout alone buys (llama.cpp's row-major kernels avoid the reduction by summing floats per block,
which is not bit-exact with the standard dispatch).

The environment is pinned before numpy/numba load: BLAS and numba both get ``--threads``;
``--omp-wait`` sets ``OMP_WAIT_POLICY`` for numba's ``omp`` workers (``active`` workers spin and
steal the CPU from BLAS; ``passive`` ones sleep at once and pay a wake-up per call; unset (the
default), GOMP spins briefly, then sleeps).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import platform
import sys
import time
from functools import partial
from pathlib import Path


def _args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--type", default="q4_0", help="weight type (default q4_0)")
    p.add_argument("--n", type=int, default=4096, help="output channels N")
    p.add_argument("--k", type=int, default=4096, help="inputs K")
    p.add_argument("--m", type=int, nargs="+", default=[1], help="activation rows M (several allowed)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5, help="rounds; each runs every contender's block once")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per block")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--settle", type=float, default=0.3,
                   help="seconds of idle before each block (OpenBLAS workers spin ~0.1 s after a call)")
    p.add_argument("--cpu-time", action="store_true",
                   help="time with the calling thread's CPU time (steadier on a shared host; needs --threads 1, "
                        "where it is all the work)")
    p.add_argument("--row", action="store_true",
                   help="at M = 1, time panel64/rowmajor/compact through verify/rowvec.RowProduct (what a decoded "
                        "token runs: the per-call Python planned away) instead of Prepared.matmul")
    p.add_argument("--working-set", type=float, default=0, metavar="MIB",
                   help="give panel64, rowmajor and compact copies of their prepared tensor (weights and factors) "
                        "totalling at least MIB each, and rotate the calls through them, so each call streams its "
                        "weights from memory as a decoded token's products do (a model is larger than the caches); "
                        "0 (default): one tensor, warm in the last-level cache after the first call")
    p.add_argument("--pairs", type=int, default=0, metavar="N",
                   help="also time panel64 and compact alternately, call by call, N pairs, and report the median of "
                        "the per-pair ratios (both calls of a pair see the same host state: the steady measure on a "
                        "shared machine)")
    p.add_argument("--block", type=int, default=1, metavar="B",
                   help="with --pairs: each pair is B timed calls of one kernel, then B of the other (each after one "
                        "untimed call), its ratio that of the two blocks' medians: B > 1 keeps each kernel on its "
                        "own warm data, where single alternating calls evict each other's from a shared cache "
                        "(default 1)")
    p.add_argument("--omp-wait", choices=["passive", "active", "default"], default="default",
                   help="OMP_WAIT_POLICY for numba's omp workers; default = unset (GOMP spins briefly, "
                        "then sleeps)")
    return p.parse_args()


ARGS = _args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)
if ARGS.omp_wait != "default":
    os.environ["OMP_WAIT_POLICY"] = ARGS.omp_wait

import numba  # noqa: E402
import numpy as np  # noqa: E402
from gguf import GGMLQuantizationType  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402
from gguf.quants import quantize as gguf_quantize  # noqa: E402

from panelpack.formats import qtypes  # noqa: E402
from panelpack.formats.errors import BadInputError  # noqa: E402
from panelpack.verify import compiled as C  # noqa: E402
from panelpack.verify.rowvec import RowProduct  # noqa: E402


def weights(t, n, k, rng):
    """Realistic blocks: random normal weights through a reference quantizer."""
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.02
    mod = t.codec_module
    if hasattr(mod, "quantize"):
        return np.asarray(mod.quantize(w), np.uint8).reshape(n, t.row_bytes(k))
    return gguf_quantize(w, GGMLQuantizationType(t.id)).reshape(n, t.row_bytes(k))


def panel64_regions(blocks, n, k, t):
    from panelpack import repack

    get = getattr(repack, "get", None)
    mod = None
    if get is not None:
        try:
            mod = get("panel64")
        except (KeyError, BadInputError) as e:  # UnsupportedError is a BadInputError
            print(f"# repack has no panel64 yet ({e}); using the test packer")
    if mod is not None:
        return mod.pack(blocks, n, k, t), "repack.panel64"
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_compiled import ref_pack_panel64

    return ref_pack_panel64(blocks, n, k, t), "tests.ref_pack_panel64"


def paired_ratios(first, second, pairs: int, clock, block: int = 1) -> np.ndarray:
    """``second``'s time over ``first``'s: ``pairs`` pairs, the order inside a pair alternating (so
    neither always runs right after the other's threads went idle). ``block`` 1: one call each;
    more: an untimed call, then ``block`` timed calls of each, compared by their medians."""
    out = np.empty(pairs)
    for i in range(pairs):
        spent = []
        for fn in ((first, second) if i % 2 == 0 else (second, first)):
            if block > 1:
                fn()
            calls = []
            for _ in range(block):
                s = clock()
                fn()
                calls.append(clock() - s)
            spent.append(float(np.median(calls)))
        out[i] = spent[1] / spent[0] if i % 2 == 0 else spent[0] / spent[1]
    return out


def factor_bytes(prep) -> int:
    """The bytes of a prepared tensor's f32 factors (``o_t`` is ``s_t`` for scale-only types)."""
    return sum({id(v): v.nbytes for v in (prep.s_t, prep.o_t)}.values())


def copies(prep) -> list:
    """``prep`` and enough copies of it (weights, factors) to fill ``--working-set`` MiB."""
    count = max(1, math.ceil(ARGS.working_set * 2**20 / (prep.weights.nbytes + factor_bytes(prep))))
    out = [prep]
    for _ in range(count - 1):
        s_t = prep.s_t.copy()
        o_t = s_t if prep.o_t is prep.s_t else prep.o_t.copy()
        out.append(dataclasses.replace(prep, weights=prep.weights.copy(), s_t=s_t, o_t=o_t))
    return out


def main():
    if ARGS.cpu_time and ARGS.threads != 1:
        raise SystemExit("--cpu-time measures the calling thread only: use it with --threads 1")
    numba.set_num_threads(ARGS.threads)
    clock = time.thread_time if ARGS.cpu_time else time.perf_counter
    t = qtypes.get(ARGS.type)
    n, k = ARGS.n, ARGS.k
    rng = np.random.default_rng(ARGS.seed)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numba {numba.__version__},"
          f" numpy {np.__version__}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    print(f"# {t.name} N={n} K={k}, threads={ARGS.threads}, {ARGS.rounds} rounds x {ARGS.repeats} calls,"
          f" {'RowProduct' if ARGS.row else 'Prepared.matmul'}"
          + (f", rotating copies of >= {ARGS.working_set:g} MiB each" if ARGS.working_set else ""))

    t0 = time.perf_counter()
    blocks = weights(t, n, k, rng)
    wf = gguf_dequantize(blocks, GGMLQuantizationType(t.id)).reshape(n, k).astype(np.float32)
    regions, packer = panel64_regions(blocks, n, k, t)
    print(f"# weights built in {time.perf_counter() - t0:.1f} s; panel64 packed by {packer}")

    t0 = time.perf_counter()
    prep_p = C.prepare("panel64", regions, n, k, t)
    t1 = time.perf_counter()
    prep_r = C.prepare("rowmajor", {"blocks": blocks}, n, k, t)
    t2 = time.perf_counter()
    print(f"# prepare: panel64 {1e3 * (t1 - t0):.1f} ms, rowmajor {1e3 * (t2 - t1):.1f} ms (once per tensor)")
    from panelpack.repack import panel64_compact

    prep_c = None
    if panel64_compact.form(t) is not None:
        prep_c = C.prepare(panel64_compact.NAME, panel64_compact.pack(blocks, n, k, t), n, k, t)

    # --working-set: the copies made once, for every M
    sets = {id(p): copies(p) for p in (prep_p, prep_r, prep_c) if p is not None}
    for m in ARGS.m:
        x = rng.standard_normal((m, k)).astype(np.float32)
        xv = x[0] if m == 1 else x

        def product(prep):
            fns = [RowProduct(p).__call__ if ARGS.row and m == 1 else p.matmul for p in sets[id(prep)]]
            if len(fns) == 1:
                return fns[0]
            turn = itertools.cycle(fns)
            return lambda v: next(turn)(v)

        contenders = {
            "numpy f32": (lambda: wf @ xv) if m == 1 else (lambda: x @ wf.T),
            "panel64": partial(product(prep_p), xv),
            "rowmajor": partial(product(prep_r), xv),
        }
        if prep_c is not None:
            contenders["compact"] = partial(product(prep_c), xv)
        yp, yr = contenders["panel64"](), contenders["rowmajor"]()  # also compiles / warms up
        if not np.array_equal(np.asarray(yp).view(np.uint32), np.asarray(yr).view(np.uint32)):
            raise SystemExit("panel64 and rowmajor outputs differ: not benchmarking a wrong kernel")
        if prep_c is not None and not np.array_equal(np.asarray(contenders["compact"]()).view(np.uint32),
                                                     np.asarray(yp).view(np.uint32)):
            raise SystemExit("panel64-compact and panel64 outputs differ: not benchmarking a wrong kernel")
        contenders["numpy f32"]()
        times = {name: [] for name in contenders}
        names = list(contenders)
        for rnd in range(ARGS.rounds):
            # blocks of consecutive calls per contender (so one's idle worker threads do not
            # compete with the other's), block order rotated every round
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                fn = contenders[name]
                time.sleep(ARGS.settle)  # let the previous contender's spinning workers go idle
                fn()  # wake the thread pool
                for _ in range(ARGS.repeats):
                    s = clock()
                    fn()
                    times[name].append(clock() - s)
        med = {name: float(np.median(v)) for name, v in times.items()}
        print(f"\nM={m}  (ms)        median      min     p90")
        for name, v in times.items():
            print(f"  {name:<12} {1e3 * med[name]:9.3f} {1e3 * min(v):8.3f} {1e3 * np.percentile(v, 90):7.3f}")
        gemv_q4_0 = m == 1 and t.name == "Q4_0"
        print(f"  numpy f32 / panel64 = {med['numpy f32'] / med['panel64']:.2f}x"
              + ("   (target >= 2x)" if gemv_q4_0 else ""))
        print(f"  rowmajor / panel64  = {med['rowmajor'] / med['panel64']:.2f}x"
              + ("   (target >= 0.8x)" if gemv_q4_0 else ""))
        if prep_c is not None:
            print(f"  compact / panel64   = {med['compact'] / med['panel64']:.2f}x time"
                  + ("   (target <= 1x)" if m == 1 else "")
                  + f"; compact reads {prep_c.weights.nbytes / 2**20:.1f} MiB of codes")
        if prep_c is not None and ARGS.pairs:
            pairs = paired_ratios(contenders["panel64"], contenders["compact"], ARGS.pairs, clock, ARGS.block)
            q1, q2, q3 = np.percentile(pairs, [25, 50, 75])
            unit = "alternating pairs" if ARGS.block == 1 else f"pairs of {ARGS.block}-call blocks"
            print(f"  compact / panel64, {ARGS.pairs} {unit}: median {q2:.2f}x (quartiles {q1:.2f}-{q3:.2f})"
                  + ("   (target <= 1x)" if m == 1 else ""))
        print(f"  panel64 weight bytes read: {prep_p.weights.nbytes / 2**20:.1f} MiB"
              f" (+ f32 factors {factor_bytes(prep_p) / 2**20:.1f} MiB);"
              f" numpy reads {wf.nbytes / 2**20:.1f} MiB")
    print(f"\n# numba threading layer: {numba.threading_layer()}")


if __name__ == "__main__":
    main()
