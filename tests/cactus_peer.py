"""Find and drive the cactus-compute oracle interpreter (see ``cactus_oracle.py``).

The oracle needs torch, so it runs in its own process: ``PANELPACK_CACTUS_PYTHON`` if set,
else this interpreter when it has ``cactus`` and ``torch`` installed (CI's venv with the
``oracle-cactus`` extra), else ``/work/venv-cactus/bin/python``. Tests skip cleanly when
none of them has cactus-compute.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ORACLE = Path(__file__).with_name("cactus_oracle.py")
CANDIDATES = ("/work/venv-cactus/bin/python",)


@functools.lru_cache(maxsize=1)
def python() -> str | None:
    explicit = os.environ.get("PANELPACK_CACTUS_PYTHON")
    cands = ([explicit] if explicit else [])
    if importlib.util.find_spec("cactus") is not None and importlib.util.find_spec("torch") is not None:
        cands.append(sys.executable)
    cands += [c for c in CANDIDATES if Path(c).is_file()]
    for c in cands:
        try:
            r = subprocess.run([c, "-c", "import cactus.convert.quantization.cq, torch, scipy"],
                               capture_output=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return c
    return None


def require() -> str:
    p = python()
    if p is None:
        pytest.skip("cactus-compute oracle not installed (pip install -e .[oracle-cactus])")
    return p


def run(ops: list[dict], folder: Path, threads: int = 2, timeout: float = 900) -> None:
    """Run the oracle operations ``ops`` in one oracle process (one torch import)."""
    py = require()
    job = folder / "oracle-job.json"
    job.write_text(json.dumps({"threads": threads, "ops": ops}))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)  # the oracle never imports panelpack
    r = subprocess.run([py, str(ORACLE), str(job)], capture_output=True, text=True, timeout=timeout, env=env,
                       cwd=str(folder))
    if r.returncode != 0:
        raise AssertionError(f"cactus oracle failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
