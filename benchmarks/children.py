"""What the whole-process benchmarks share: timing a child process and clearing its output.

Imported by the scripts beside it (``python benchmarks/bench_X.py`` puts this folder on
``sys.path``); standard library only.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import time
from pathlib import Path


def clear(*paths: Path) -> None:
    """Remove each output (a folder or a file), then ``sync``: untimed work before a timed run
    (deleting a fsynced folder costs ~1 s on a disk mounted with ``discard``)."""
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    subprocess.run(["sync"], check=False)


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of ``cmd`` (CPU: the child's user + system time, which a host shared
    with other work inflates less than the wall time)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
