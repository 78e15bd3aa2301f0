"""panelpack's cactus CQ path against cactus-compute 2.2.2's own, in the same run.

    python benchmarks/bench_cactus.py [--n 4096] [--k 4096] [--runs 5] [--threads 2]
                                      [--skip-convert] [--layers 8]

1. CQ4 quantization of an ``n x k`` f32 matrix (seeded gaussian): panelpack's
   ``formats.cq.quantize_hadamard`` (numba, ``--threads`` threads) vs cactus's
   ``quantize_hadamard`` (numpy + torch, ``--threads`` BLAS/torch threads) in the oracle
   interpreter (``tests/cactus_peer.py`` finds it). Phases alternate ours / theirs / ours so a
   load change shows; each side's figure is the median of its runs after a warm-up, measured
   inside its own process (imports excluded). Throughput in MB/s of f32 input.
2. A whole ``--target cactus`` conversion of a llama-shaped HF checkpoint (hidden 1024,
   intermediate 2816, ``--layers`` layers, vocab 16384, bf16: ~120 M parameters), whole
   process wall time: ``python -m panelpack convert SRC -o OUT --quant cq4`` vs
   ``cactus.convert.cli.main(["convert", "--model", SRC, "--out", OUT, "--bits", "4", "--device", "cpu"])``,
   alternating ours / theirs / ours.

The machine is shared: the ratios are same-run, the absolute figures move with load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import cactus_peer  # noqa: E402


def ours_quantize(n: int, k: int, runs: int) -> list[float]:
    from panelpack.formats import cq

    w = np.random.default_rng(0).standard_normal((n, k)).astype(np.float32)
    cq.quantize_hadamard(w, 4)  # warm-up: JIT cache load, first touch
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        cq.quantize_hadamard(w, 4)
        out.append(time.perf_counter() - t0)
    return out


def theirs_quantize(n: int, k: int, runs: int, threads: int, folder: Path) -> list[float]:
    ops = [{"op": "time_quantize", "n": n, "k": k, "bits": 4, "out": str(folder / f"t{i}.txt")}
           for i in range(runs + 1)]
    cactus_peer.run(ops, folder, threads=threads, timeout=3600)
    return [float((folder / f"t{i}.txt").read_text()) for i in range(1, runs + 1)]


def build_checkpoint(folder: Path, layers: int) -> Path:

    from panelpack.convert.example import CONFIG, _tokenizer, tiny_llama_tensors  # the tests' generator
    from panelpack.formats.safetensors import save_file

    cfg = dict(CONFIG)
    cfg.update(hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers, num_attention_heads=16,
               num_key_value_heads=4, head_dim=64, vocab_size=16384, max_position_embeddings=2048)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (folder / "tokenizer.json").write_text(json.dumps(_tokenizer(cfg["vocab_size"])) + "\n")
    save_file({k: ("BF16", v) for k, v in tiny_llama_tensors(cfg).items()}, folder / "model.safetensors")
    return folder


def run_wall(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--skip-convert", action="store_true")
    args = ap.parse_args()
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)
    if cactus_peer.python() is None:
        raise SystemExit("cactus-compute oracle not found (PANELPACK_CACTUS_PYTHON or the oracle-cactus extra)")
    mb = args.n * args.k * 4 / 1e6
    with tempfile.TemporaryDirectory() as td:
        td = Path(td)
        a = ours_quantize(args.n, args.k, args.runs)
        b = theirs_quantize(args.n, args.k, args.runs, args.threads, td)
        c = ours_quantize(args.n, args.k, args.runs)
        ours, theirs = statistics.median(a + c), statistics.median(b)
        print(f"CQ4 quantize {args.n}x{args.k} f32 ({mb:.0f} MB), {args.threads} threads, median of {args.runs}:")
        print(f"  panelpack  {ours:8.3f} s  {mb / ours:8.1f} MB/s   (phases {statistics.median(a):.3f} / {statistics.median(c):.3f} s)")
        print(f"  cactus     {theirs:8.3f} s  {mb / theirs:8.1f} MB/s")
        print(f"  ratio      {theirs / ours:8.2f} x")
        if args.skip_convert:
            return
        src = build_checkpoint(td / "hf", args.layers)
        size = sum(p.stat().st_size for p in src.iterdir()) / 1e6
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), NUMBA_NUM_THREADS=str(args.threads))
        env_theirs = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        mine_cmd = lambda o: [sys.executable, "-m", "panelpack", "convert", str(src), "-o", str(o), "--quant", "cq4"]  # noqa: E731
        their_cmd = lambda o: [cactus_peer.python(), "-c", "import sys; from cactus.convert.cli import main; main(sys.argv[1:])",  # noqa: E731
                               "convert", "--model", str(src), "--out", str(o), "--bits", "4", "--device", "cpu"]
        t_ours, t_theirs = [], []
        for i in range(2):
            t_ours.append(run_wall(mine_cmd(td / f"o{i}"), env))
            shutil.rmtree(td / f"o{i}")
            if i == 0:
                t_theirs.append(run_wall(their_cmd(td / "c0"), env_theirs))
                shutil.rmtree(td / "c0")
        print(f"whole --target cactus conversion, {size:.0f} MB bf16 checkpoint ({args.layers} layers), whole process:")
        print(f"  panelpack  {statistics.median(t_ours):8.2f} s   (runs {', '.join(f'{t:.2f}' for t in t_ours)})")
        print(f"  cactus     {t_theirs[0]:8.2f} s")
        print(f"  ratio      {t_theirs[0] / statistics.median(t_ours):8.2f} x")


if __name__ == "__main__":
    main()
