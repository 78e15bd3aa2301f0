"""Throughput of the layout packers and unpackers, against np.copyto of the same bytes.

    python benchmarks/bench_repack.py [--n 4096 --k 4096 --repeat 9]

Every case runs single-threaded (numba kernels are serial) on random blocks; outputs are
preallocated and reused (``out=``), as the converter writes into the bundle's file. Each
repeat measures ``np.copyto`` of the source bytes and the operation back to back, so a noisy
machine disturbs both; the table shows medians of wall time (GB/s of *source* bytes) and the
median of the per-repeat ratios (operation speed / copy speed). ``--engine jit`` (default)
measures the numba kernels, as a big conversion runs them; ``--engine numpy`` the numpy
packers that jobs under ``repack.JIT_PAYOFF_BYTES`` use instead (panel64 Q4_0/Q4_1/Q8_0 pack;
the other cases have no numpy packer and run their kernels either way). Targets:
Q4_0 -> panel64 and -> ggml-x8 >= 4 GB/s (>= 0.35x copy), unpack at least as fast;
Q4_K -> panel64 >= 2 GB/s (issue 3); every nibble form >= 4 GB/s and every int8 form (the int8
panels of Q8_0, Q5_x, Q6_K, Q2_K, Q3_K; il8-int8) >= 2 GB/s, both ways (issue 14); every
panel64-compact bit-plane form >= 2 GB/s, both ways (issue 26).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from panelpack import repack
from panelpack.formats import qtypes

CASES = [
    ("panel64", "Q4_0"), ("ggml-x8", "Q4_0"), ("panel64", "Q4_K"), ("ggml-x8", "Q4_K"),
    ("panel64", "Q4_1"), ("panel64", "Q8_0"), ("il8-nibble", "Q4_0"), ("il8-int8", "Q4_0"),
    ("il8-nibble", "Q4_K"), ("panel64", "Q6_K"),
    ("panel64", "Q5_0"), ("panel64", "Q5_1"), ("panel64", "Q5_K"), ("panel64", "Q2_K"), ("panel64", "Q3_K"),
    *(("panel64-compact", q) for q in ("Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q2_K", "Q3_K")),
]


def random_blocks(t, n, k, rng):
    """Random bytes with finite f16 scales (the kernels never look at the values)."""
    return rng.integers(0, 256, (n, t.row_bytes(k)), dtype=np.uint8)


CLOCK = time.perf_counter


def measure(op, baseline, repeat):
    op()
    baseline()  # warm up (compile, page in)
    t_op, t_base, ratios = [], [], []
    for _ in range(repeat):
        t0 = CLOCK()
        baseline()
        t1 = CLOCK()
        op()
        t2 = CLOCK()
        t_base.append(t1 - t0)
        t_op.append(t2 - t1)
        ratios.append((t1 - t0) / (t2 - t1))
    return float(np.median(t_op)), float(np.median(t_base)), float(np.median(ratios))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--cases", default="", help="comma-separated layout:type, e.g. panel64:Q4_0")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with this thread's CPU time instead of wall time (steadier on a shared machine)")
    ap.add_argument("--engine", choices=["jit", "numpy"], default="jit",
                    help="numba kernels, or the numpy packers small jobs use (see the module docstring)")
    args = ap.parse_args(argv)
    if args.engine == "jit":
        from panelpack.formats import engine

        engine.start_kernels()  # every packer runs its kernel
    else:
        from panelpack.repack import _common

        _common.prefer_jit = lambda nbytes, kind="repack": False
    global CLOCK
    CLOCK = time.thread_time if args.cpu_time else time.perf_counter
    cases = [tuple(c.split(":")) for c in args.cases.split(",")] if args.cases else CASES
    rng = np.random.default_rng(0)
    n, k = args.n, args.k
    clock = "thread CPU time" if args.cpu_time else "wall time"
    print(f"[{n}, {k}] random blocks, {args.repeat} repeats, {clock}, engine {args.engine},"
          f" load average {os.getloadavg()[0]:.2f}")
    print(f"{'layout':<15} {'type':<5} {'MB':>7} {'copy GB/s':>10} {'pack GB/s':>10} {'x copy':>7} "
          f"{'unpack GB/s':>12} {'x copy':>7}")
    for layout, qname in cases:
        mod = repack.get(layout)
        t = qtypes.get(qname)
        if mod.refuse(t, n, k):
            print(f"{layout:<15} {qname:<5} refused: {mod.refuse(t, n, k)}")
            continue
        raw = random_blocks(t, n, k, rng)
        dst = np.empty_like(raw)
        out = {r.name: np.empty(r.shape, r.np_dtype) for r in mod.plan(t, n, k)}
        gb = raw.nbytes / 1e9
        tp, tc, rp = measure(lambda: mod.pack(raw, n, k, t, out=out), lambda: np.copyto(dst, raw), args.repeat)
        line = f"{layout:<15} {qname:<5} {raw.nbytes / 1e6:7.1f} {gb / tc:10.2f} {gb / tp:10.2f} {rp:7.2f} "
        if mod.invertible(t):
            back = np.empty_like(raw)
            tu, tc2, ru = measure(lambda: mod.unpack(out, n, k, t, out=back), lambda: np.copyto(dst, raw), args.repeat)
            assert np.array_equal(back, raw)
            line += f"{gb / tu:12.2f} {ru:7.2f}"
        else:
            line += f"{'(not invertible)':>20}"
        print(line)


if __name__ == "__main__":
    main()
