"""Whole-file ``--quant MIX`` of an F16 GGUF: panelpack (a process running ``panelpack
convert --layout rowmajor``) vs llama.cpp's ``llama_model_quantize`` (a process calling
llama-cpp-python), same thread count, and the bytes compared tensor by tensor.

    python benchmarks/bench_mixes.py [--model smollm2|gemma] [--mix Q4_K_M] [--threads 2] [--runs 3]
                                     [--layers N] [--vocab N]

The F16 input is derived from the real checkpoint (tests/llama_ref.py ``f16_gguf``; all its
layers and its whole vocabulary unless ``--layers``/``--vocab`` cut them). Each figure is the
median of ``--runs`` whole-process wall times after one warm-up (numba's cache warm), each run
writing a fresh output (the previous one removed beforehand, untimed). Python's bytecode
cache is warm too, as after a ``pip install``: the children run without
``PYTHONDONTWRITEBYTECODE`` and keep their ``.pyc`` files in the run's temporary folder
(``PYTHONPYCACHEPREFIX``), not in the source tree; a source checkout with that variable set
compiles all of panelpack it imports at every start (0.2 s; ``--no-bytecode-cache`` measures that).
The floor line times a process that only starts panelpack's kernels (``FLOOR``): what any
whole-file run pays before its work. Needs the ``oracle-llama`` extra. The numbers move with machine load: run it alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import checkpoints  # noqa: E402
import children  # noqa: E402
import llama_ref  # noqa: E402

LLAMA = """
import sys
sys.path.insert(0, {tests!r})
import llama_ref
llama_ref.quantize({src!r}, {dst!r}, {mix!r}, threads={threads})
"""

#: The least any panelpack process that quantizes pays before its first tensor: the
#: interpreter, numpy, panelpack's codecs, numba's import and typing set-up, and one cached
#: kernel (Q4_K on one block). A whole-file run cannot take less than this plus its work.
FLOOR = """
import numpy as np
from panelpack.formats import blocks, engine, qtypes
engine.start_kernels()
blocks.quantize(np.ones((1, 256), np.float32), qtypes.get("Q4_K"))
"""


def timed(cmd: list[str], env: dict, output: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of ``cmd`` (``children.timed``); the previous run's ``output`` is
    removed first, untimed (``children.clear``)."""
    children.clear(output)
    return children.timed(cmd, env)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2", choices=("smollm2", "gemma"))
    ap.add_argument("--mix", default="Q4_K_M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=None)
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="keep the caller's PYTHONDONTWRITEBYTECODE (a checkout then compiles its sources every run)")
    a = ap.parse_args()
    src = checkpoints.smollm2_path() if a.model == "smollm2" else checkpoints.gemma_path()
    if src is None or not llama_ref.available():
        sys.exit("needs the real checkpoint and llama-cpp-python (oracle-llama)")
    work = Path(tempfile.mkdtemp(prefix="bench-mixes-"))
    try:
        report(a, src, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(a, src: Path, work: Path) -> None:
    """Time both tools on ``src``'s F16 derivative in ``work`` and print the comparison."""
    f16 = llama_ref.f16_gguf(src, work / "f16.gguf", n_layer=a.layers, n_vocab=a.vocab)
    env = dict(os.environ, NUMBA_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads))
    if not a.no_bytecode_cache:  # as installed: compiled once (by the warm-up run), then read
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    ours = [sys.executable, "-m", "panelpack", "convert", str(f16), "--quant", a.mix, "--layout", "rowmajor",
            "-o", str(work / "out.ppk"), "--force", "--no-progress", "-j", str(a.threads)]
    theirs = [sys.executable, "-c", LLAMA.format(tests=str(HERE.parent / "tests"), src=str(f16),
                                                 dst=str(work / "llama.gguf"), mix=a.mix, threads=a.threads)]
    t_ours = [timed(ours, env, work / "out.ppk") for _ in range(a.runs + 1)][1:]
    t_llama = [timed(theirs, env, work / "llama.gguf") for _ in range(a.runs + 1)][1:]
    t_floor = [timed([sys.executable, "-c", FLOOR], env, work / "floor") for _ in range(a.runs + 1)][1:]
    from panelpack import repack
    from panelpack.formats.bundle import Bundle

    want = llama_ref.tensors(work / "llama.gguf")
    b = Bundle(work / "out.ppk")
    same = 0
    for t in b.tensors:
        n, k = t.nk
        raw = repack.get("rowmajor").unpack(b.regions(t), n, k, t.qtype).tobytes()
        same += int(want[t.name] == (t.type, raw))
    mo, ml = (statistics.median(w for w, _ in t) for t in (t_ours, t_llama))
    co, cl = (statistics.median(c for _, c in t) for t in (t_ours, t_llama))
    print(f"{a.model} F16 ({f16.stat().st_size / 2**20:.1f} MiB) --quant {a.mix}, {a.threads} threads, "
          f"median of {a.runs}: panelpack {mo:.2f} s, llama_model_quantize {ml:.2f} s, ratio {ml / mo:.2f}x; "
          f"{same}/{len(b.tensors)} tensors identical")
    print(f"  wall runs: panelpack {' '.join(f'{w:.2f}' for w, _ in t_ours)}, llama {' '.join(f'{w:.2f}' for w, _ in t_llama)}; "
          f"CPU (user+sys) medians: panelpack {co:.2f} s, llama {cl:.2f} s; load {os.getloadavg()[0]:.2f}")
    mf = statistics.median(w for w, _ in t_floor)
    print(f"  floor (a process that loads one cached kernel, no file): {mf:.2f} s "
          f"(runs {' '.join(f'{w:.2f}' for w, _ in t_floor)}); half of llama's time: {ml / 2:.2f} s")


if __name__ == "__main__":
    main()
