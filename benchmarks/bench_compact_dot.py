"""The group dots of panel64-compact's AVX2 tiles alone, against the int8 panels' group dots in
the same run: nanoseconds per 64 weights with the records in L1 (what a dot costs in arithmetic,
without the tile's memory stream and rescale).

    python benchmarks/bench_compact_dot.py                 # every AVX2 compact form, 16 groups
    python benchmarks/bench_compact_dot.py --groups 64 --reps 5000

One activation row (the single-row dot: its activation row with the tables appended,
verify/_act_tables.py); each form's dot is compiled into a loop over ``--groups`` group records
repeated ``--reps`` times, best of ``--runs``; the baseline is ``_simd.int8_group_dot16`` (the
int8 panels of the G = 16 K-quants) and ``_simd.int8_group_dot`` (G = 32), timed the same way.
One thread; the host's clock and neighbours move the absolute numbers, the ratios less.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _timer(dot, gb: int, kq: int, groups: int, rng, row_of):
    from numba import njit

    w = rng.integers(0, 256, groups * gb + 64).astype(np.uint8)
    a = rng.integers(-128, 128, (1, 4 * kq * groups)).astype(np.int8)
    row = row_of(a)
    acc = np.zeros(64, np.int32)

    @njit
    def loop(w, a, acc, reps, groups, gb, g_k):
        for _ in range(reps):
            for g in range(groups):
                dot(w, g * gb, a, g * g_k, acc)

    loop(w, row, acc, 1, groups, gb, 4 * kq)  # compile

    def timed(reps: int) -> float:
        t = time.perf_counter()
        loop(w, row, acc, reps, groups, gb, 4 * kq)
        return time.perf_counter() - t

    return timed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=16, help="group records the loop cycles through (default 16)")
    ap.add_argument("--reps", type=int, default=20000, help="passes over them per run (default 20000)")
    ap.add_argument("--runs", type=int, default=5, help="runs, the best reported (default 5)")
    args = ap.parse_args(argv)

    from panelpack.repack import panel64_compact as pc
    from panelpack.verify import _simd, compact

    if not _simd.AVAILABLE:
        print("numba does not target AVX2 here: nothing to measure")
        return 0
    rng = np.random.default_rng(0)

    def per_64(timed, kq: int) -> float:
        best = min(timed(args.reps) for _ in range(args.runs))
        return best / (args.reps * args.groups * kq * 4) * 1e9  # 4 slices of 64 weights a kg-block

    base = {}
    for name, dot, kq in (("int8 G=16", _simd.int8_group_dot16, 4), ("int8 G=32", _simd.int8_group_dot, 8)):
        base[kq] = per_64(_timer(dot, kq * 256, kq, args.groups, rng, lambda a: a[0]), kq)
        print(f"{name:10s} {base[kq]:6.2f} ns / 64 weights")
    for t in sorted(pc.COMPACT_TYPES, key=lambda t: t.name):
        f = pc.form(t)
        dot = compact._planes_intrinsics(f.base_bits, f.planes, f.kq)[0]
        recipe = compact.activation_recipe(f.base_bits, f.planes, t.code_offset)
        gb = f.kq * (32 * f.base_bits + 32 * f.planes)
        ns = per_64(_timer(dot, gb, f.kq, args.groups, rng, lambda a, r=recipe: r(a)[0]), f.kq)
        print(f"{t.name:10s} {ns:6.2f} ns / 64 weights   {ns / base[f.kq]:5.2f}x the int8 dot of its group size")
    return 0


if __name__ == "__main__":
    sys.exit(main())
