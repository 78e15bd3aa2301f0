"""How much of a run went to numba compiling kernels (a cold on-disk cache), as a number to report.

numba fires its ``numba:compile`` event only when it really compiles a function: a kernel
loaded from the on-disk cache (``cache=True``) fires none. :class:`CompileMeter` listens to it
while a job runs and keeps

* ``kernels``: the panelpack kernels compiled (numba's own helpers that get compiled along,
  such as the ``np.empty`` of one array type, are not counted),
* ``seconds``: the wall time of the outermost compilations (a kernel that compiles the kernels
  it calls counts once, with them),
* ``names``: the qualified names of the kernels compiled, in order.

So ``verify`` can say "compiled 23 kernels in 9.8 s" on a machine's first run and nothing on the
next. numba is imported only when the meter starts; with numba's event API missing (a future
release) the meter stays at zero, never a failure.
"""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

from . import _numba_internals

_OURS = __name__.split(".")[0] + "."  # "panelpack."


class CompileMeter:
    """Context manager: counts numba's compilations while active (see the module docstring)."""

    def __init__(self) -> None:
        self.kernels = 0
        self.seconds = 0.0
        self.names: list[str] = []
        self._depth = 0
        self._t0 = 0.0
        self._stack = ExitStack()
        self._lock = threading.Lock()

    def on_start(self, event) -> None:
        with self._lock:
            if self._depth == 0:
                self._t0 = time.perf_counter()
            self._depth += 1

    def on_end(self, event) -> None:
        with self._lock:
            disp = _numba_internals.compiled_dispatcher(event)
            fn = getattr(disp, "py_func", None)
            module = getattr(fn, "__module__", "") or ""
            if fn is not None and module.startswith(_OURS):
                self.kernels += 1
                self.names.append(f"{module}.{fn.__qualname__}")
            self._depth = max(self._depth - 1, 0)
            if self._depth == 0:
                self.seconds += time.perf_counter() - self._t0

    def __enter__(self) -> "CompileMeter":
        self._stack.enter_context(_numba_internals.compile_listener(self.on_start, self.on_end))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def summary(self) -> str:
        """One line for a log or a report ("" when nothing was compiled)."""
        if not self.kernels:
            return ""
        return (f"first run on this numba cache: compiled {self.kernels} kernel(s) in {self.seconds:.1f} s "
                f"(numba's cache keeps them for the next run)")
