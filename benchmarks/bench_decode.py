"""The runtime's own decode speed, ms per token (wall and process CPU), for before/after runs.

    PYTHONPATH=OLD python benchmarks/bench_decode.py smol-p64.ppk 3
    PYTHONPATH=NEW python benchmarks/bench_decode.py smol-p64.ppk 3     # interleave the two

After a warm-up, ``runs`` times: a 256-token prefill of the shipped text, then 64 tokens decoded
one at a time (greedy), on 2 numba threads. Prints the median (min, max) of the runs.
Same-minute pairs of trees are the figure to compare on a shared host (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import statistics
import sys
import time


def main() -> None:
    import numba

    import panelpack
    from panelpack.verify.runtime import Model
    from panelpack.verify.runtime.evaluate import default_text

    numba.set_num_threads(2)
    model = Model.open(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    ids = model.tokenizer.encode(default_text())[:256]
    walls, cpus = [], []
    for r in range(runs + 1):
        model.reset()
        tok = int(model.forward(ids, last_only=True)[-1].argmax())
        t, c = time.perf_counter(), time.process_time()
        for _ in range(64):
            tok = int(model.forward([tok])[-1].argmax())
        if r:  # run 0 is the warm-up
            walls.append((time.perf_counter() - t) / 64e-3)
            cpus.append((time.process_time() - c) / 64e-3)
    print(f"{panelpack.__file__}: wall ms/token median {statistics.median(walls):.1f} "
          f"(min {min(walls):.1f}, max {max(walls):.1f}); CPU ms/token median {statistics.median(cpus):.1f}")


if __name__ == "__main__":
    main()
