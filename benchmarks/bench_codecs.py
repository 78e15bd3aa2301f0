"""Block codec throughput: panelpack's numba kernels vs ggml's C reference and gguf-py.

    python benchmarks/bench_codecs.py [--rows 2048] [--k 4096] [--runs 7] [--skip-gguf-py]

All baselines run in the same process on the same data:

* quantize from f32 (GB/s or MB/s of f32 *input*):
    Q4_0 / Q8_0: panelpack on 1 numba thread and on all threads, ggml's
    ``ggml_quantize_chunk`` (= ``quantize_row_<t>_ref``) on one thread through ctypes
    (libggml-python), gguf-py's numpy ``quantize``;
    Q4_K: panelpack on 1 and 2 threads, ggml's ``quantize_row_q4_K_ref`` on one thread.
  Every panelpack result is checked byte for byte against ggml's before timing.
* dequantize to f32 (GB/s of f32 *output*, into a preallocated array so page faults of a
  fresh allocation are not measured): panelpack on 1 thread and on all threads, gguf-py, and
  ``np.copyto`` of an f32 array of the output's size (the memory-bandwidth yardstick).

Each figure is the median of ``--runs`` timed runs after one warm-up run. Ratios are
against the baseline named in the table. The numbers move with machine load: run it alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from panelpack.formats import (
    blocks,  # noqa: E402
    qtypes,  # noqa: E402
)

import ggml_ref  # noqa: E402  (tests/ggml_ref.py: ctypes access to libggml-base.so)

DEQUANT_TYPES = ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"]


class Timing(float):
    """A wall-clock median (seconds) that also carries the fastest run and the median
    process CPU time."""

    cpu: float
    best: float


def median_time(fn, runs: int) -> Timing:
    fn()  # warm-up (page cache, first-touch of outputs, any lazy init)
    wall, cpu = [], []
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    t = Timing(statistics.median(wall))
    t.cpu = statistics.median(cpu)
    t.best = min(wall)
    return t


def with_threads(n: int, fn):
    def run():
        old = numba.get_num_threads()
        numba.set_num_threads(n)
        try:
            return fn()
        finally:
            numba.set_num_threads(old)

    return run


def fmt_rate(nbytes: int, t: float) -> str:
    r = nbytes / t
    return f"{r / 1e9:.2f} GB/s" if r >= 1e9 else f"{r / 1e6:.0f} MB/s"


def table(title: str, rows: list[tuple[str, Timing]], nbytes: int, base: str) -> None:
    """Wall-clock medians, the rate they give, the ratio to ``base``; the fastest run; and the
    process CPU time (all threads), which a loaded machine inflates less than wall time."""
    tb = dict(rows)[base]
    print(f"\n{title}")
    print(f"| {'what':<28} | {'wall':>9} | {'rate':>11} | {'vs ' + base:>28} | {'best':>9} | {'cpu':>9} |")
    print(f"|{'-' * 30}|{'-' * 11}|{'-' * 13}|{'-' * 30}|{'-' * 11}|{'-' * 11}|")
    for name, t in rows:
        print(f"| {name:<28} | {t * 1e3:>6.1f} ms | {fmt_rate(nbytes, t):>11} | {tb / t:>27.2f}x "
              f"| {t.best * 1e3:>6.1f} ms | {t.cpu * 1e3:>6.1f} ms |")


def bench_quantize(x: np.ndarray, runs: int, skip_gguf_py: bool) -> None:
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize as gguf_quantize

    nthreads = numba.config.NUMBA_NUM_THREADS
    have_ggml = ggml_ref.available()
    for name in ("q4_0", "q8_0", "q4_k"):
        t = qtypes.get(name)
        mod = t.codec_module
        xs = x if name != "q4_k" else x[: max(64, x.shape[0] // 8)]  # Q4_K: ~60 MB/s in C
        if have_ggml:
            assert np.array_equal(mod.quantize(xs), ggml_ref.quantize(xs, name)), f"{name} differs from ggml"
        rows: list[tuple[str, float]] = []
        if have_ggml:
            rows.append(("ggml C ref, 1 thread", median_time(lambda: ggml_ref.quantize(xs, name), runs)))
        rows.append(("panelpack, 1 thread", median_time(with_threads(1, lambda: mod.quantize(xs, parallel=False)), runs)))
        for n in sorted({2, nthreads}):
            if n <= nthreads:
                rows.append((f"panelpack, {n} threads", median_time(with_threads(n, lambda: mod.quantize(xs, parallel=True)), runs)))
        if not skip_gguf_py and name != "q4_k":
            g = GGMLQuantizationType(t.id)
            rows.append(("gguf-py (numpy)", median_time(lambda: gguf_quantize(xs, g), max(1, runs // 2))))
        base = "ggml C ref, 1 thread" if have_ggml else "panelpack, 1 thread"
        table(f"quantize f32 -> {t.name}, [{xs.shape[0]}, {xs.shape[1]}] ({xs.nbytes / 1e6:.0f} MB of f32 input)",
              rows, xs.nbytes, base)


def bench_dequantize(x: np.ndarray, runs: int, skip_gguf_py: bool) -> None:
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize

    nthreads = numba.config.NUMBA_NUM_THREADS
    n, k = x.shape
    out = np.empty_like(x)
    src = x.copy()
    t_copy = median_time(lambda: np.copyto(out, src), runs)
    summary = []
    for name in DEQUANT_TYPES:
        t = qtypes.get(name)
        raw = _encode(x, name)
        rows = [("np.copyto (f32, same size)", t_copy)]
        rows.append(("panelpack, 1 thread", median_time(with_threads(1, lambda: blocks.dequantize(raw, name, n, k, out=out)), runs)))
        fn = with_threads(nthreads, lambda: blocks.dequantize(raw, name, n, k, out=out))
        rows.append((f"panelpack, {nthreads} threads", median_time(fn, runs)))
        if not skip_gguf_py and name != "f32":  # gguf-py's F32 "dequantize" is a view
            g = GGMLQuantizationType(t.id)
            rows.append(("gguf-py (numpy)", median_time(lambda: gguf_dequantize(raw, g), max(1, runs // 2))))
        table(f"dequantize {t.name} -> f32, [{n}, {k}] ({x.nbytes / 1e6:.0f} MB of f32 output)", rows, x.nbytes,
              "np.copyto (f32, same size)")
        summary.append((t.name, dict(rows)))
    print(f"\ndequantize summary (GB/s of f32 output, median [fastest run]; np.copyto "
          f"{x.nbytes / t_copy / 1e9:.2f} GB/s)")
    print(f"| type | 1 thread | {nthreads} threads | gguf-py |")
    print("|------|---------:|---------:|--------:|")
    for tname, r in summary:
        g = r.get("gguf-py (numpy)")
        one, many = r["panelpack, 1 thread"], r[f"panelpack, {nthreads} threads"]
        gp = f"{x.nbytes / g / 1e9:.2f}" if g else ("(a view)" if tname == "F32" and not skip_gguf_py else "-")
        print(f"| {tname} | {x.nbytes / one / 1e9:.2f} [{x.nbytes / one.best / 1e9:.2f}] | "
              f"{x.nbytes / many / 1e9:.2f} [{x.nbytes / many.best / 1e9:.2f}] | {gp} |")


def _encode(x: np.ndarray, name: str) -> np.ndarray:
    """Valid blocks of ``name`` holding (roughly) ``x``: quantized by us where we can, else
    Q8_0-like random fields from tests/builders.py."""
    t = qtypes.get(name)
    if t.can_quantize or not t.quantized:
        return blocks.quantize(x, name)
    from builders import random_blocks

    return random_blocks(name, x.shape[0], x.shape[1], np.random.default_rng(t.id))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--skip-gguf-py", action="store_true")
    ap.add_argument("--only", choices=["quantize", "dequantize"])
    args = ap.parse_args(argv)
    x = np.random.default_rng(0).standard_normal((args.rows, args.k)).astype(np.float32)
    print(f"numba {numba.__version__}, threading layer: {numba.config.THREADING_LAYER}, "
          f"threads: {numba.config.NUMBA_NUM_THREADS}; ggml: {'yes' if ggml_ref.available() else 'not installed'}")
    if args.only != "dequantize":
        bench_quantize(x, args.runs, args.skip_gguf_py)
    if args.only != "quantize":
        bench_dequantize(x, args.runs, args.skip_gguf_py)


if __name__ == "__main__":
    main()
