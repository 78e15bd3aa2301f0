"""Benchmark: our safetensors reader vs the ``safetensors`` package, and ``inspect`` speed.

    python benchmarks/bench_safetensors.py [--runs 7] [--minilm DIR] [--gguf FILE ...]

Measured in one process, interleaved (ours, theirs, ours, ...), median of ``--runs``:

- open: parse and validate the header, list names/shapes (ours: ``SafetensorsFile``;
  theirs: ``safe_open`` + ``keys()`` + ``get_slice().get_shape()``);
- read: touch every tensor's bytes (ours: ``array()`` views + ``sum``; theirs: ``get_tensor``,
  which copies);
- describe: ``inspect.describe`` on each checkpoint given (GGUF too), headers only.

Ratios are theirs / ours (> 1: ours is faster). Numbers depend on the page cache: the first
run warms it and is dropped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _median_time(fn, runs: int) -> float:
    fn()  # warm-up (page cache, imports)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_file(path: str, runs: int) -> None:
    from panelpack.formats.safetensors import SafetensorsFile

    def ours_open():
        with SafetensorsFile(path) as f:
            return [(t.name, t.shape) for t in f.tensors]

    def theirs_open():
        with safe_open(path, framework="numpy") as f:
            return [(k, f.get_slice(k).get_shape()) for k in f.keys()]

    def ours_read():
        with SafetensorsFile(path) as f:
            return sum(float(np.sum(f.raw(t.name), dtype=np.uint64)) for t in f.tensors)

    def theirs_read():
        with safe_open(path, framework="numpy") as f:
            return sum(float(np.sum(f.get_tensor(k).view(np.uint8), dtype=np.uint64)) for k in f.keys())

    assert ours_read() == theirs_read(), "readers disagree"
    size = os.path.getsize(path)
    print(f"{path} ({size / 2**20:.1f} MiB)")
    for what, ours, theirs in (("open", ours_open, theirs_open), ("read", ours_read, theirs_read)):
        # interleave so drift affects both sides alike
        ours(), theirs()  # warm-up
        to, tt = [], []
        for _ in range(runs):
            for fn, acc in ((ours, to), (theirs, tt)):
                t = time.perf_counter()
                fn()
                acc.append(time.perf_counter() - t)
        mo, mt = statistics.median(to), statistics.median(tt)
        print(f"  {what:5s} ours {mo * 1e3:8.2f} ms   safetensors {mt * 1e3:8.2f} ms   ratio {mt / mo:5.2f}x")


def bench_describe(path: str, runs: int) -> None:
    from panelpack.formats import describe

    t = _median_time(lambda: describe.describe(path), runs)
    doc = describe.describe(path)
    print(f"  describe {path}: {t * 1e3:.1f} ms ({doc['totals']['tensors']} tensors)")


def main() -> None:
    from checkpoints import gemma_path, minilm_dir, smollm2_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--minilm", default=None, help="MiniLM folder (default: the installed package)")
    ap.add_argument("--gguf", nargs="*", default=None, help="GGUF files for describe (default: SmolLM2, Gemma)")
    args = ap.parse_args()

    minilm = Path(args.minilm) if args.minilm else minilm_dir()
    if minilm is None:
        sys.exit("MiniLM not installed; pass --minilm DIR")
    bench_file(str(minilm / "model.safetensors"), args.runs)
    ggufs = args.gguf if args.gguf is not None else [p for p in (smollm2_path(), gemma_path()) if p]
    for p in [str(minilm)] + [str(g) for g in ggufs]:
        bench_describe(p, args.runs)


if __name__ == "__main__":
    main()
