"""Conversion and verification of big synthetic GGUFs against copying the same bytes with dd.

    python benchmarks/bench_bigconvert.py                          # 1.2 GiB, 3 runs
    python benchmarks/bench_bigconvert.py --sizes 1.2G 4G --runs 3
    python benchmarks/bench_bigconvert.py --sizes 1.2G --layouts panel64 --jobs 1 2 --no-verify
    python benchmarks/bench_bigconvert.py --requant                # + --requant q4_0 --layout ggml-x8

For each size, ``make_gguf.py`` writes a llama-shaped GGUF (``--types``, default Q4_K and Q8_0
matrices taken in turn; d = 4096, ffn = 11008, vocab 32000; the layer count chosen for the
size) under ``--workdir`` (default /tmp/ppk-bigconvert, removed afterwards unless ``--keep``).
The page cache is warmed by reading the file once; numba's cache by one untimed run of each
contender. Then, ``--runs`` times and interleaved with a rotating order so load from other
processes hits every contender alike:

* ``dd if=SRC of=COPY bs=16M conv=fsync``: read + write + fsync of the same bytes, the floor
  a conversion is judged against (target: whole-process convert <= 2x dd);
* ``python -m panelpack convert SRC -o OUT --force --no-progress --layout L --jobs J`` for each
  layout and jobs value (and the re-quantizing conversion with ``--requant``).

Each run writes a freshly deleted output (deletion not timed). Verification (unless
``--no-verify``) times ``panelpack verify B --level structure`` and ``--level all`` of the
panel64 bundle against reading the bundle's files once (``cat`` to /dev/null, warm cache).

Every process runs under a small launcher that reports wall time (fork to reap), CPU time
(user + sys) and memory sampled every 100 ms from ``/proc/PID/smaps_rollup`` (reading it
walks the process's mappings: at 20 ms the sampling itself took ~40 % of a vCPU): peak ``Rss``,
peak ``Anonymous`` (memory the process allocated: not the page cache of mapped files) and,
at the Rss peak, ``Private`` (Private_Clean + Private_Dirty) and ``Shared`` (Shared_Clean +
Shared_Dirty). File-backed pages mapped by this process alone count as Private_Clean, so the
bound of issue 14 (3 x largest tensor's f32 size + 300 MB) is judged on ``Anonymous``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_convert import ProcRun, loadavg, machine_line, rmtree, run_process, table, warm_page_cache  # noqa: E402

MB = 1_000_000

Run = ProcRun


def run(argv, env=None) -> Run:
    """``argv`` under bench_convert's launcher, its memory sampled; exits when it fails."""
    return run_process([str(a) for a in argv], env, sample=True).check(" ".join(map(str, argv)))


def spread(xs) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def mem(r: Run) -> str:
    return f"{r.rss / MB:.0f} / {r.anon / MB:.0f} / {r.private / MB:.0f} / {r.shared / MB:.0f}"


def largest_f32(path: Path) -> int:
    from panelpack.formats.checkpoint import open_checkpoint

    with open_checkpoint(path) as c:
        return max(4 * (t.n * t.k if len(t.shape) == 2 else t.shape[0]) for t in c.tensors)


def interleave(contenders: dict, runs: int) -> dict[str, list[Run]]:
    names = list(contenders)
    for name in names:  # warm-up: numba cache, page cache of the outputs' folder
        contenders[name]()
    out: dict[str, list[Run]] = {n: [] for n in names}
    for i in range(runs):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            out[name].append(contenders[name]())
    return out


def bench_size(size: str, args, env: dict, work: Path) -> str:
    src = work / f"synthetic-{size}.gguf"
    if not src.exists():
        subprocess.run([sys.executable, str(HERE / "make_gguf.py"), str(src), "--size", size, "--types", args.types],
                       env=env, check=True)
    nbytes = src.stat().st_size
    f32 = largest_f32(src)
    bound = 3 * f32 + 300 * MB
    warm_page_cache(src)
    py = [sys.executable, "-m", "panelpack"]

    def fresh(p: Path):
        rmtree(p)
        return p

    def dd():
        copy = fresh(work / "copy.gguf")
        r = run(["dd", f"if={src}", f"of={copy}", "bs=16M", "conv=fsync", "status=none"], env)
        rmtree(copy)
        return r

    contenders = {"dd conv=fsync": dd}
    variants = [(lay, j, []) for lay in args.layouts for j in args.jobs]
    if args.requant:
        variants.append(("ggml-x8", 1, ["--requant", "q4_0"]))
    for lay, j, extra in variants:
        name = f"convert --layout {lay} --jobs {j}" + (" " + " ".join(extra) if extra else "")
        out = work / f"{lay}-{j}{'-rq' if extra else ''}.ppk"

        def conv(out=out, lay=lay, j=j, extra=extra):
            return run(py + ["convert", src, "-o", fresh(out), "--force", "--no-progress", "--layout", lay,
                             "--jobs", str(j), *extra], env)

        contenders[name] = conv
        if args.baseline:  # the same conversion by another panelpack tree, in the same run
            benv = dict(env, PYTHONPATH=args.baseline)

            def conv_base(out=out, lay=lay, j=j, extra=extra, benv=benv):
                return run(py + ["convert", src, "-o", fresh(Path(str(out) + "-base")), "--force", "--no-progress",
                                 "--layout", lay, "--jobs", str(j), *extra], benv)

            contenders[name + " (baseline)"] = conv_base
    t0 = time.time()
    res = interleave(contenders, args.runs)
    dd_med = statistics.median(r.wall for r in res["dd conv=fsync"])
    rows = []
    for name, rs in res.items():
        walls = [r.wall for r in rs]
        per_run = [r.wall / d.wall for r, d in zip(rs, res["dd conv=fsync"])]
        worst = max(rs, key=lambda r: r.anon)
        rows.append([name, spread(walls), f"{statistics.median(walls) / dd_med:.2f}",
                     f"{statistics.median(per_run):.2f}", f"{statistics.median(r.cpu for r in rs):.2f}",
                     f"{nbytes / statistics.median(walls) / 1e9:.2f}", mem(worst)])
    text = [f"### {size}: {src.name}, {nbytes / 1e9:.3f} GB; largest tensor f32 {f32 / MB:.0f} MB, memory bound "
            f"3 x that + 300 MB = {bound / MB:.0f} MB; {args.runs} interleaved runs, load average {loadavg()} "
            f"({time.time() - t0:.0f} s)", "",
            table(rows, ["whole process", "wall s median (min-max)", "x dd (of medians)", "x dd (median per run)",
                         "CPU s", "GB/s", "peak MB: Rss / Anon / Private / Shared"])]
    print("\n".join(text), flush=True)  # the conversion table now: verify takes a while
    text = []
    if args.verify:
        bundle = work / f"{args.layouts[0]}-{args.jobs[0]}.ppk"
        if not bundle.exists():
            run(py + ["convert", src, "-o", bundle, "--force", "--no-progress", "--layout", args.layouts[0]], env)
        files = [str(p) for p in sorted(bundle.rglob("*")) if p.is_file()]
        bsize = sum(os.path.getsize(p) for p in files)
        listing = work / "bundle-files.txt"
        listing.write_text("\n".join(files) + "\n")
        vc = {"read bundle once (cat)": lambda: run(["sh", "-c", f"xargs cat < {listing} > /dev/null"], env)}
        for level in args.levels:
            vc[f"verify --level {level}"] = (lambda level=level: run(py + ["verify", bundle, "--level", level], env))
        vres = interleave(vc, args.runs)
        base = statistics.median(r.wall for r in vres["read bundle once (cat)"])
        vrows = [[name, spread([r.wall for r in rs]), f"{statistics.median(r.wall for r in rs) / base:.2f}",
                  f"{statistics.median(r.cpu for r in rs):.2f}", mem(max(rs, key=lambda r: r.anon))]
                 for name, rs in vres.items()]
        text += ["", f"verify of {bundle.name} ({bsize / 1e9:.3f} GB, warm caches):", "",
                 table(vrows, ["whole process", "wall s median (min-max)", "x read once", "CPU s",
                               "peak MB: Rss / Anon / Private / Shared"])]
    if not args.keep:
        for p in list(work.glob("*.ppk")) + list(work.glob("*.ppk-base")):
            rmtree(p)
    return "\n".join(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["1.2G"])
    ap.add_argument("--types", default="q4_k,q8_0")
    ap.add_argument("--layouts", nargs="+", default=["panel64", "ggml-x8"])
    ap.add_argument("--jobs", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requant", action="store_true", help="add convert --requant q4_0 --layout ggml-x8")
    ap.add_argument("--no-verify", dest="verify", action="store_false")
    ap.add_argument("--levels", nargs="+", default=["structure", "all"])
    ap.add_argument("--workdir", default="/tmp/ppk-bigconvert")
    ap.add_argument("--keep", action="store_true", help="keep the generated GGUFs and bundles")
    ap.add_argument("--baseline", metavar="PYTHONPATH", default=None,
                    help="also run each conversion with this PYTHONPATH (e.g. an older panelpack tree)")
    args = ap.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    print(machine_line(), flush=True)
    print(f"disk: {shutil.disk_usage(work).free / 1e9:.0f} GB free in {work}", flush=True)
    try:
        for size in args.sizes:
            print(bench_size(size, args, env, work), flush=True)
            print(flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
