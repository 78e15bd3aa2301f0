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


# ---- closable_inline: the patterns the kernels that share a walk rely on ---------------------
def _store_direct(out, i, v):
    out[i] = v


def _store_through_tuple(out, i, v, pair):
    src, dst = pair  # arrays unpacked from a tuple: handed on to a kernel (never stored into here)
    _put(dst, i, src[i] + v)


def _walk(out, n, step, arg):
    for i in range(n):
        step(out, i, arg)


def _plus(out, i, arg):
    out[i] += arg


def _put_py(dst, i, v):
    dst[i] = v


_put = None  # _put_py as the njit kernel _store_through_tuple calls (built in the test)


def test_closable_inline_bodies_store_what_they_are_given():
    """The walks in repack/ and verify/ (il8 partials, x8 and panel64 sweeps, the emulated
    leaves) inline plain functions into kernels and pass them steps: stores through array
    arguments, through a called kernel on arrays unpacked from a tuple, and a step handed in as
    an argument all land. (An array unpacked from a tuple and stored into inside the inlined
    body itself loses the store in numba 0.6x: no kernel does that; see closable_inline.)"""
    global _put
    import numba
    import numpy as np

    from panelpack.formats._jit import closable_inline

    _put = numba.njit(_put_py)
    for fn in (_store_direct, _store_through_tuple, _walk, _plus):
        closable_inline(fn)

    @numba.njit
    def kernel(out, src, dst, n):
        for i in range(n):
            _store_direct(out, i, 7)
            _store_through_tuple(out, i, 5, (src, dst))
        _walk(src, n, _plus, 1)

    out, src, dst = np.zeros(4, np.int64), np.arange(4, dtype=np.int64), np.zeros(4, np.int64)
    kernel(out, src, dst, 4)
    assert out.tolist() == [7] * 4 and dst.tolist() == [5, 6, 7, 8] and src.tolist() == [1, 2, 3, 4]
