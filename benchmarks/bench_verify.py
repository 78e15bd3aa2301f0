"""``panelpack verify`` of whole bundles: process wall time against the 60 s target.

    python benchmarks/bench_verify.py                        # Gemma 3 270M, --level all, 3 runs
    python benchmarks/bench_verify.py --models gemma smollm2 --levels structure lossless all
    python benchmarks/bench_verify.py --bundle existing.ppk --runs 5

For each model (``--models``: ``gemma`` = Gemma 3 270M Q4_K_M, ``smollm2`` = SmolLM2-135M Q4_1)
the script converts the GGUF to a panel64 bundle once (``panelpack convert``, not timed here:
see bench_convert.py), then times ``python -m panelpack verify BUNDLE --level L --json REPORT``
as a whole process for each ``--levels`` value: one untimed warm-up run (page cache and numba
cache warm), then ``--runs`` timed runs, interleaved across levels. ``--level all`` proves every
tensor: structure and checksums, lossless round trip, and agreement (sampled 64-row super-blocks
through the emulated SME2/NEON/int8 leaves, ``--sample`` per tensor; every row through the
compiled kernels). Each run's JSON report must say ``ok``; its own ``seconds`` (the library
call without interpreter start-up and imports) is shown beside the process wall time.

Target: ``--level all`` of the Gemma bundle in <= 60 s (whole process, median, warm cache).

Processes run under bench_convert.py's launcher (wall time fork to reap, CPU time, peak RSS of
the command alone). The warm numba cache is ``$NUMBA_CACHE_DIR`` when set, else
``<workdir>/numba-cache``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_convert import MB, fmt_s, gemma_path, loadavg, machine_line, rmtree, run_process, scratch, smollm2_path, table, warm_page_cache  # noqa: E402

TARGET_S = 60.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", choices=["gemma", "smollm2"], default=["gemma"])
    ap.add_argument("--bundle", type=Path, default=None, help="verify this bundle instead of converting --models")
    ap.add_argument("--levels", nargs="+", choices=["structure", "lossless", "agreement", "all"], default=["all"])
    ap.add_argument("--runs", type=int, default=3, help="timed runs per level (after one warm-up)")
    ap.add_argument("--sample", type=int, default=None, help="pass --sample N to verify (default: verify's own)")
    ap.add_argument("--layout", default="panel64")
    ap.add_argument("--smollm2", type=Path, default=None)
    ap.add_argument("--gemma", type=Path, default=None)
    ap.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args()

    tmp, workdir, env = scratch(args.workdir, "verify")
    py = sys.executable
    print(machine_line())
    print(f"numba cache: {env['NUMBA_CACHE_DIR']}")
    try:
        targets: list[tuple[str, Path]] = []
        if args.bundle is not None:
            targets.append((args.bundle.name, args.bundle))
        else:
            for m in args.models:
                src = (args.gemma or gemma_path()) if m == "gemma" else (args.smollm2 or smollm2_path())
                if src is None:
                    print(f"\n{m}: skipped (checkpoint not installed)")
                    continue
                warm_page_cache(Path(src))
                out = workdir / f"{m}.ppk"
                rmtree(out)
                r = run_process([py, "-m", "panelpack", "convert", str(src), "-o", str(out), "--force",
                                 "--no-progress", "--layout", args.layout], env=env).check("panelpack convert")
                print(f"\nconverted {Path(src).name} -> {out.name} in {r.wall:.1f} s (setup, not part of the benchmark)")
                targets.append((m, out))
        for name, bundle in targets:
            print(verify_table(name, bundle, args, env, py, workdir), flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(f"\nload average at the end: {loadavg()}")


def verify_table(name: str, bundle: Path, args, env: dict, py: str, workdir: Path) -> str:
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    report = workdir / "verify-report.json"
    load0 = loadavg()
    runs: dict[str, list] = {lv: [] for lv in args.levels}
    info: dict[str, dict] = {}
    for r in range(-1, args.runs):
        k = max(r, 0) % len(args.levels)
        for lv in args.levels[k:] + args.levels[:k]:
            argv = [py, "-m", "panelpack", "verify", str(bundle), "--level", lv, "--json", str(report)]
            if args.sample is not None:
                argv += ["--sample", str(args.sample)]
            rmtree(report)
            p = run_process(argv, env=env)
            doc = json.loads(report.read_text()) if report.exists() else {}
            if p.rc != 0 or not doc.get("ok"):
                raise SystemExit(f"bench_verify: verify --level {lv} of {bundle} failed (exit {p.rc}):\n{p.log[-3000:]}")
            if r >= 0:
                runs[lv].append((p, doc["seconds"]))
            info[lv] = doc
    load1 = loadavg()
    rows = []
    for lv in args.levels:
        wall = [p.wall for p, _ in runs[lv]]
        rows.append((f"verify --level {lv}", fmt_s(statistics.median(wall)), fmt_s(min(wall)), fmt_s(max(wall)),
                     fmt_s(statistics.median(s for _, s in runs[lv])), fmt_s(statistics.median(p.cpu for p, _ in runs[lv])),
                     f"{max(p.maxrss for p, _ in runs[lv]) / MB:.0f}"))
    doc = info[args.levels[-1]]
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(doc.get("counts", {}).items()))
    lines = [f"\n## verify {name}: {bundle} ({len(doc.get('tensors', []))} tensors, {size / MB:.1f} MB)",
             f"runs: {args.runs} per level (+1 warm-up), interleaved; sample {doc.get('sample')}; "
             f"load average {load0} -> {load1}",
             table(rows, ("command", "median wall s", "min", "max", "report seconds", "cpu s", "peak RSS MB")),
             f"verdicts ({args.levels[-1]}): {counts}"]
    if "all" in runs:
        med = statistics.median(p.wall for p, _ in runs["all"])
        lines.append(f"target (verify --level all <= {TARGET_S:.0f} s, whole process): {med:.1f} s "
                     f"({'meets' if med <= TARGET_S else 'misses'})")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
