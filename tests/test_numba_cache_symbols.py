"""Kernels that numba's on-disk cache gives back to one process keep their own code.

numba numbers the functions it compiles per process, and the number goes into each symbol's name;
two closures of one factory (one qualified name, one signature) compiled in two processes after the
same compilations shared a symbol name, and a third process that loaded both from the cache ran one
kernel's code for both (numba/numba#10486: here panel64's Q6_K tile ran the compact Q6_K tile's group
loop and returned wrong numbers). ``formats/_numba_internals.distinct_function_ids`` (installed when
``formats/_jit`` is imported) numbers from a random start per process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import panelpack

FACTORY = textwrap.dedent('''
    import numpy as np
    from numba import njit

    from panelpack.formats._jit import lazy_njit


    def make(k):
        """A cached kernel around an uncached closure, as the SIMD tiles are built (int8_group_tile)."""

        @lazy_njit(cache=False)
        def inner(a):
            s = 0
            for i in range(a.shape[0]):
                for j in range(a.shape[0]):
                    s += (a[i] * k) ^ (a[j] + i)
            return s

        def outer(x):
            a = np.arange(x)
            return inner(a) + inner(a[::2])

        return njit(cache=True)(outer)


    def expected(k, x):
        a = list(range(x))
        inner = lambda v: sum((p * k) ^ (q + i) for i, p in enumerate(v) for q in v)  # noqa: E731
        return inner(a) + inner(a[::2])
''')

RUN = textwrap.dedent('''
    import sys
    import factory_mod
    ks = [int(v) for v in sys.argv[1].split(",")]
    got = [factory_mod.make(k)(12) for k in ks]
    want = [factory_mod.expected(k, 12) for k in ks]
    print("got", got, "want", want)
    sys.exit(0 if got == want else 1)
''')


def _run(tmp_path: Path, ks: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(Path(panelpack.__file__).parent.parent)]))
    return subprocess.run([sys.executable, str(tmp_path / "run.py"), ks], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_two_closures_cached_by_two_processes_keep_their_code_in_a_third(tmp_path):
    (tmp_path / "factory_mod.py").write_text(FACTORY)
    (tmp_path / "run.py").write_text(RUN)
    for ks in ("2", "3"):  # each process compiles one closure after the same compilations
        done = _run(tmp_path, ks)
        assert done.returncode == 0, done.stdout + done.stderr
    def entries():
        return sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "numba-cache").rglob("*.nb[ci]"))

    cached = entries()
    assert sum(name.endswith(".nbc") for name, _ in cached) == 2, cached
    for ks in ("2,3", "3,2"):  # both loaded from the cache into one process
        done = _run(tmp_path, ks)
        assert done.returncode == 0, f"kernels loaded from numba's cache ran each other's code: {done.stdout}"
        assert entries() == cached, "the third process compiled again instead of loading both kernels"


def test_every_module_that_compiles_with_numba_imports_jit_first():
    """A module that builds kernels with numba's own ``njit`` (not ``lazy_njit``) must import
    ``formats/_jit`` itself, so the random function ids are in force before its first
    compile whatever the process imported before it."""
    root = Path(panelpack.__file__).parent
    missing = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in ("tests", "benchmarks", "examples", "build") or rel == Path("formats/_jit.py"):
            continue
        text = path.read_text(encoding="utf-8")
        if not re.search(r"(?<!lazy_)\bnjit\(|numba\.jit\(|@jit\b", text):
            continue
        if not re.search(r"^\s*(from \S*formats import _jit\b|from \S*formats\._jit import|from \.(_jit)? import _jit\b|"
                         r"from \._jit import|import panelpack\.formats\._jit)", text, re.M):
            missing.append(str(rel))
    assert not missing, f"modules compiling with numba.njit without importing formats/_jit first: {missing}"
