"""A cold first ``verify``: compile the emulated leaves in a second process, the rest here.

On an empty numba cache a verification of a small bundle is almost all compilation (the demo:
~20 s of its ~21 s, docs/BENCHMARKS.md "Issue 14: cold verify"), and numba compiles one
function at a time per process (a process-wide compiler lock). About half of it is the
emulator programs the panel64 runners run (``leaves.gemv_program``, ``neon.neon_program``,
``leaves.gemm_program`` with their instruction kernels), which the other half (the layouts'
compiled tiles, the scalar standard dispatch) never calls. So, when those programs are not in
numba's on-disk cache yet, :func:`start` launches ``python -m panelpack.verify.precompile
NAMES...``, which compiles them into the same cache (``NUMBA_CACHE_DIR``, or numba's default
beside the sources) and exits; meanwhile this process builds its own kernels up front
(:func:`prebuild`) and, at the first call of a program the helper owns, waits for the helper
(``formats._jit.before_build``) and then loads the program from the cache. The machine code
is what this process would have compiled itself (same source, same numba, same cache key), so
every result is the same.

Never a failure: without two CPUs, without a writable cache, with ``NUMBA_DISABLE_JIT`` or
``PANELPACK_PRECOMPILE=0``, no helper starts; a helper that cannot start, fails or outlives
:data:`WAIT_SECONDS` is logged and this process compiles what is missing itself, as it always
did. The helper reports its own count and time on stdout (one JSON line), which the report
adds to this process's (``Report.compiled_kernels``, ``compile_seconds``).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterable, Optional

from ..formats import engine

log = logging.getLogger(__name__)

SWITCH = "PANELPACK_PRECOMPILE"  # "0": never start a helper process
#: the scalar standard dispatch every compared matrix runs (the guard's partials, the one
#: rescale the runners' outputs go through)
DISPATCH_KERNELS = ("dispatch._partials_kernel", "dispatch._rescale_kernel")
#: the kernels a helper takes: the two SME2 programs, which share one instruction set (~6-9 s
#: of compiling with it on the demo, cold), and the scalar dispatch (~1 s); the NEON program
#: (~3 s, instructions of its own) stays here with the tiles (~6 s), so both processes finish
#: at about the same time (docs/BENCHMARKS.md, "Issue 14: cold verify")
HELPER_SHARE = frozenset({"leaves.gemv_program", "leaves.gemm_program", *DISPATCH_KERNELS})
WAIT_SECONDS = 600.0  # the longest this process waits for the helper before compiling itself
_PACKAGE = __package__ or "panelpack.verify"  # also when run as ``python -m``


def kernel(name: str):
    """The lazy kernel ``"<verify module>.<name>"`` (as ``registry.Runner.kernels`` names it)."""
    module, attr = name.rsplit(".", 1)
    return getattr(importlib.import_module(f"{_PACKAGE}.{module}"), attr)


def _cold(k) -> bool:
    from ..formats._jit import cached_on_disk

    return k._dispatcher is None and not cached_on_disk(k.py_func)


def _cache_writable(k) -> bool:
    try:
        from ..formats._numba_internals import ensure_cache_path

        # numba's own check: makes the folder and a temporary file in it (raises if it cannot)
        ensure_cache_path(k.py_func)
    except Exception:  # noqa: BLE001 - no writable cache (or numba's internals moved): no helper
        return False
    return True



def _matrices(tensors):
    """``(tensor, its verifier)`` of each quantized matrix the agreement level compares."""
    from .registry import verifier

    for t in tensors:
        if t.qtype.scheme is None or len(t.shape) != 2:
            continue
        try:
            yield t, verifier(t.layout)
        except Exception:  # noqa: BLE001 - an unknown layout fails structure; nothing to compile
            continue


def wanted(tensors, runs: Iterable[str]) -> list[str]:
    """The lazy kernels the agreement level will call on these tensors besides the compiled
    tiles: the runners' (registry order), then the scalar dispatch's."""
    if "agreement" not in runs:
        return []
    names: list[str] = []
    matrices = False
    for t, ver in _matrices(tensors):
        matrices = True
        for r in ver.runners:
            if r.accepts(ver.name, t.qtype):
                names.extend(n for n in r.kernels if n not in names)
    return names + list(DISPATCH_KERNELS) if matrices else names


class Helper:
    """The helper process compiling ``names``, and this process's hooks waiting for it."""

    def __init__(self, names: list[str], proc: subprocess.Popen, out, err):
        self.names = names
        self.proc = proc
        self._out, self._err = out, err
        self.started = time.perf_counter()
        self.done = False
        self.kernels = 0  # what the helper compiled, from its report
        self.seconds = 0.0
        self.waited = 0.0  # how long this process waited for it

    def wait(self) -> None:
        """Block until the helper has ended (or kill it after :data:`WAIT_SECONDS`); drop the
        hooks of every kernel it owned, so the builds here go ahead (loading its results)."""
        if self.done:
            return
        self.done = True
        self._drop_hooks()
        t0 = time.perf_counter()
        try:
            rc = self.proc.wait(timeout=max(1.0, WAIT_SECONDS - (t0 - self.started)))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            log.warning("the kernel compiling helper took over %.0f s: compiling here", WAIT_SECONDS)
            self._close()
            return
        self.waited = waited = time.perf_counter() - t0
        if rc != 0:
            self._err.seek(0)
            tail = self._err.read().decode("utf-8", "replace").strip().splitlines()[-1:]
            log.warning("the kernel compiling helper failed (exit %s%s): compiling here", rc,
                        f": {tail[0]}" if tail else "")
        else:
            self._out.seek(0)
            try:
                got = json.loads(self._out.read().decode("utf-8", "replace").strip().splitlines()[-1])
                self.kernels, self.seconds = int(got["kernels"]), float(got["seconds"])
            except Exception:  # noqa: BLE001 - no report: the kernels are still in the cache
                pass
            log.info("helper process compiled %d kernel(s) in %.1f s (waited %.1f s for it)",
                     self.kernels, self.seconds, waited)
        self._close()

    def close(self) -> None:
        """End of the job (also after an error or an interrupt, even one inside :meth:`wait`): a
        helper still running, whose kernels were never needed, is stopped."""
        self.done = True
        self._drop_hooks()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close()

    def _drop_hooks(self) -> None:
        from ..formats import _jit

        for n in self.names:
            _jit.before_build.pop(kernel(n).key, None)

    def _close(self) -> None:
        for f in (self._out, self._err):
            try:
                f.close()
            except OSError:  # pragma: no cover
                pass


def start(names: list[str], share: Optional[frozenset] = HELPER_SHARE) -> Optional[Helper]:
    """Start a helper compiling the cold kernels among ``names`` that ``share`` names (None:
    all of them), or None (see the module docstring)."""
    if not names or os.environ.get(SWITCH, "1") == "0" or engine.usable_cores() < 2:
        return None
    from numba import config

    if config.DISABLE_JIT:
        return None
    from ..formats import _jit

    # (a kernel another helper of this process already compiles is left to that one)
    cold = [n for n in names if (share is None or n in share) and kernel(n).key not in _jit.before_build
            and _cold(kernel(n))]
    if not cold or not all(_cache_writable(kernel(n)) for n in cold):
        return None
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[SWITCH] = "0"
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen([sys.executable, "-m", f"{_PACKAGE}.precompile", *cold], env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err)
    except (OSError, ValueError) as e:
        log.warning("could not start the kernel compiling helper (%s): compiling here", e)
        out.close()
        err.close()
        return None
    helper = Helper(cold, proc, out, err)
    for n in cold:
        _jit.before_build[kernel(n).key] = helper.wait
    log.info("compiling %s in a helper process (pid %d) while this one compiles the rest",
             ", ".join(cold), proc.pid)
    return helper


def own_tiles(tensors, numpy_std: bool) -> list:
    """The compiled tile functions this process's agreement level runs (as
    ``bundle_check._agreement`` picks them): each tensor's layout kernel, and the compiled
    standard reference (rowmajor) where it is not numpy's."""
    from .. import repack
    from .registry import verifier

    tiles: list = []
    for t, ver in _matrices(tensors):
        qt = t.qtype
        specs = []
        if ver.kernel_spec(qt) is not None and not ver.regions_are_blocks:
            specs.append(ver.kernel_spec(qt))
        if not numpy_std or t.layout == repack.rowmajor.NAME:
            specs.append(verifier(repack.rowmajor.NAME).kernel_spec(qt))
        tiles.extend(s.kernel for s in specs if s is not None and s.kernel not in tiles)
    return tiles


def own_builds(tensors, numpy_std: bool, kernels: Iterable[str] = ()) -> list[Callable[[], Any]]:
    """What this process builds while a helper compiles its share, one callable each: the tiles
    of :func:`own_tiles`, the serial driver, and ``kernels`` (those of :func:`wanted` the helper
    does not take)."""
    from . import compiled

    tiles = own_tiles(tensors, numpy_std)
    builds: list[Callable[[], Any]] = [lambda tile=tile: compiled._compiled(tile) for tile in tiles]
    if tiles:
        builds.append(lambda: compiled._driver(serial=True))
    builds.extend((lambda n=n: kernel(n).dispatcher) for n in kernels)
    return builds


def prebuild(builds: Iterable[Callable[[], Any]]) -> None:
    """Build this process's own kernels now (each callable builds one), while the helper
    compiles its own: otherwise the first wait for the helper would come before them."""
    for build in builds:
        build()


def main(argv: list[str]) -> int:
    """The helper: compile (or load) each named lazy kernel, print one JSON line of figures."""
    from ..formats.compile_meter import CompileMeter

    with CompileMeter() as meter:
        for name in argv:
            kernel(name).dispatcher  # noqa: B018 - builds it: compiles into numba's cache
    print(json.dumps({"kernels": meter.kernels, "seconds": round(meter.seconds, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
