"""The first ``panelpack verify DEMO --level all`` on an empty numba cache (issue 14: <= 12 s).

    python benchmarks/bench_coldverify.py --runs 3                  # makes the demo bundle first
    python benchmarks/bench_coldverify.py --bundle B.ppk --baseline /tmp/base   # + an older tree

Contenders, each a whole process on its own empty ``NUMBA_CACHE_DIR``, run ``--runs`` times in a
rotating order: ``cold`` (the helper process of verify/precompile.py compiles the SME2 emulator
programs alongside), ``cold, no helper`` (``PANELPACK_PRECOMPILE=0``), ``warm`` (the cache the
previous cold run left), and with ``--baseline`` the older tree cold (``PYTHONPATH`` = it).
Each line: wall and CPU (user + sys, the helper included: the launcher reaps it through
verify), and what the report says it compiled. On a shared host the helper only helps while a
second core is free: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_convert import loadavg, machine_line, rmtree, run_process, table  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, help="the bundle (default: `panelpack demo` writes one)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", metavar="PYTHONPATH", help="also run this panelpack tree cold")
    args = ap.parse_args(argv)
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="panelpack-coldverify-") as tmp:
        work = Path(tmp)
        env = dict(os.environ)
        bundle = args.bundle
        if bundle is None:
            bundle = work / "demo.ppk"
            run_process([sys.executable, "-m", "panelpack", "demo", "-o", str(bundle), "--no-verify"],
                        dict(env, NUMBA_CACHE_DIR=str(work / "nc-demo"))).check("panelpack demo")
        cmd = [sys.executable, "-m", "panelpack", "verify", str(bundle), "--level", "all"]
        last = {"cache": work / "nc-warm"}

        def contender(extra: dict, cold: bool):
            def go():
                cache = work / f"nc-{len(os.listdir(work))}"
                if cold:
                    rmtree(cache)
                    cache.mkdir()
                    if "PYTHONPATH" not in extra:  # the warm run reuses a cache of this tree
                        last["cache"] = cache
                else:
                    cache = last["cache"]
                e = dict(env, NUMBA_CACHE_DIR=str(cache), **extra)
                l0 = loadavg().split()[0]
                r = run_process(cmd, e).check(" ".join(cmd))
                said = re.search(r"compiled (\d+) kernel\(s\)[^\n]*", r.log)
                return r, l0, loadavg().split()[0], said.group(0) if said else "nothing compiled"
            return go

        contenders = {"cold": contender({}, True),
                      "cold, no helper": contender({"PANELPACK_PRECOMPILE": "0"}, True),
                      "warm": contender({}, False)}
        if args.baseline:
            contenders["cold (baseline)"] = contender({"PYTHONPATH": args.baseline}, True)
        rows, runs = [], {n: [] for n in contenders}
        names = list(contenders)
        for i in range(args.runs):
            for name in names[i % len(names):] + names[:i % len(names)]:
                r, l0, l1, said = contenders[name]()
                runs[name].append(r)
                print(f"{name:18s} wall {r.wall:6.2f} s  CPU {r.cpu:6.2f} s  load {l0}->{l1}  {said}", flush=True)
        for name, rs in runs.items():
            walls, cpus = [r.wall for r in rs], [r.cpu for r in rs]
            rows.append((name, f"{statistics.median(walls):.2f} ({min(walls):.2f}-{max(walls):.2f})",
                         f"{statistics.median(cpus):.2f}"))
        print()
        print(table(rows, ("whole process", "wall s median (min-max)", "CPU s median")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
