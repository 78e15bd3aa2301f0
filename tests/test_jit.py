"""formats/_jit.py: what the lazy kernels do to the process around them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="scipy is not installed: there is no probe to skip")
def test_first_kernel_does_not_import_scipy_and_blas_still_works():
    # numba's array-math registry probes for BLAS by importing scipy.linalg (0.6 s) when the
    # first kernel compiles or loads; _jit answers that probe once and withdraws the answer
    code = (
        "import sys, numpy as np\n"
        "from panelpack.formats.blocks import q8_0\n"
        "q8_0.quantize(np.ones((1, 32), np.float32), parallel=False)\n"
        "assert 'numba.np.arraymath' in sys.modules, 'the registry was not loaded'\n"
        "assert 'scipy.linalg' not in sys.modules, 'scipy.linalg was imported'\n"
        "assert 'scipy.linalg.cython_blas' not in sys.modules, 'the probe answer was left behind'\n"
        "import numba\n"
        "f = numba.njit(lambda a: np.dot(a, a))\n"
        "assert f(np.ones(4)) == 4.0\n"  # BLAS-backed numba code still finds scipy
        "import scipy.linalg.cython_blas\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"
