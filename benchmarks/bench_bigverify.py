"""``panelpack verify`` of a big bundle against reading its bytes once, optionally beside an
older panelpack tree, interleaved.

    python benchmarks/bench_bigverify.py --bundle B.ppk --runs 2 --levels structure lossless all \\
        --baseline /tmp/base        # /tmp/base/panelpack = `git archive <commit>` of the old tree
    python benchmarks/bench_bigverify.py --gguf SRC.gguf          # converts SRC to panel64 first

Contenders, run ``--runs`` times in a rotating order after one untimed warm-up each (numba's
cache, the page cache): ``xargs cat`` of the bundle's files to /dev/null, and
``python -m panelpack verify B --level L`` for each level (and each with ``PYTHONPATH`` =
``--baseline``). Each process runs under bench_convert's launcher: wall, CPU (user + sys) and
the peaks of ``/proc/PID/smaps_rollup`` (Rss / Anonymous / Private / Shared, MB).

``hash bundle once`` is the floor of any check that reads every byte: a Python process that
BLAKE3-hashes each file on two threads and does nothing else. ``--cold`` drops the bundle's
files from the page cache before every run (``posix_fadvise(DONTNEED)`` after ``sync``, no
root needed), so that every contender, ``cat`` included, reads the disk.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_bigconvert import interleave, mem, run, spread  # noqa: E402
from bench_convert import loadavg, machine_line, table  # noqa: E402

HASH_ONCE = """
import sys
from concurrent.futures import ThreadPoolExecutor
from blake3 import blake3

def one(path):
    h = blake3()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()

with ThreadPoolExecutor(2) as pool:
    list(pool.map(one, open(sys.argv[1]).read().split()))
"""


def evict(files: list[str]) -> None:
    """Drop ``files`` from the page cache (written back first), so the next read is from disk."""
    os.sync()
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--bundle", type=Path, help="an existing bundle directory")
    src.add_argument("--gguf", type=Path, help="convert this GGUF to panel64 first (next to it, as .ppk)")
    ap.add_argument("--levels", nargs="+", default=["structure", "lossless", "all"])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--cold", action="store_true", help="evict the bundle from the page cache before every run")
    ap.add_argument("--baseline", metavar="PYTHONPATH", default=None,
                    help="also run each level with this PYTHONPATH (e.g. an older panelpack tree)")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    py = [sys.executable, "-m", "panelpack"]
    bundle = args.bundle
    if bundle is None:
        bundle = args.gguf.with_suffix(".ppk")
        if not bundle.exists():
            run(py + ["convert", args.gguf, "-o", bundle, "--no-progress", "--layout", "panel64"], env)
    files = [str(p) for p in sorted(bundle.rglob("*")) if p.is_file()]
    size = sum(os.path.getsize(p) for p in files)
    listing = bundle.parent / (bundle.name + ".files.txt")
    listing.write_text("\n".join(files) + "\n")
    print(machine_line(), flush=True)
    vc = {"read bundle once (cat)": lambda: run(["sh", "-c", f"xargs cat < {listing} > /dev/null"], env),
          "hash bundle once (BLAKE3, 2 threads)": lambda: run([sys.executable, "-c", HASH_ONCE, listing], env)}
    for level in args.levels:
        vc[f"verify --level {level}"] = lambda level=level: run(py + ["verify", bundle, "--level", level], env)
        if args.baseline:
            benv = dict(env, PYTHONPATH=args.baseline)
            vc[f"verify --level {level} (baseline)"] = (
                lambda level=level, benv=benv: run(py + ["verify", bundle, "--level", level], benv))
    if args.cold:
        vc = {name: (lambda fn=fn: (evict(files), fn())[1]) for name, fn in vc.items()}
    t0 = time.time()
    res = interleave(vc, args.runs)
    base = statistics.median(r.wall for r in res["read bundle once (cat)"])
    rows = [[name, spread([r.wall for r in rs]), f"{statistics.median(r.wall for r in rs) / base:.2f}",
             f"{statistics.median(r.cpu for r in rs):.2f}", mem(max(rs, key=lambda r: r.anon))]
            for name, rs in res.items()]
    caches = "bundle evicted from the page cache before each run" if args.cold else "warm caches"
    print(f"verify of {bundle} ({size / 1e9:.3f} GB, {caches}); {args.runs} interleaved runs, "
          f"load average {loadavg()} ({time.time() - t0:.0f} s)\n")
    print(table(rows, ["whole process", "wall s median (min-max)", "x read once", "CPU s",
                       "peak MB: Rss / Anon / Private / Shared"]))
    listing.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
