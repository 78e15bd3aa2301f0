"""The ``panelpack`` process: run the CLI, then end without the interpreter's teardown.

When a command has finished, everything it writes is written (bundles are committed, files
closed, output flushed); what remains of a normal exit is the interpreter freeing every module
and object one by one. After a conversion that is numba's compiled-kernel libraries, typing
registries and a few hundred thousand objects: 0.3-0.4 s of a 2.6 s ``convert --quant Q4_K_M``
of SmolLM2 (docs/BENCHMARKS.md, "Quantization speed (helper q12p)"), more than the planning.
:func:`main` does the part of a normal exit that can have an effect outside the process, in
the interpreter's own order, and then ends it (``os._exit``):

1. ``threading._shutdown()``: the thread-exit hooks (``concurrent.futures`` joins its
   workers) and a join of every non-daemon thread, as ``Py_FinalizeEx`` starts;
2. the ``atexit`` handlers (``logging.shutdown``, coverage's data file, ...);
3. stdout and stderr flushed.

The process also collects cyclic garbage less often (:data:`GC_THRESHOLD`): numba's kernel
loading allocates a few hundred thousand objects that live until the end, and the default
threshold (700) ran ~260 collections during that conversion, 0.17 s with the GIL held, against
one at 100 000 (0.05 s). The memory it can leave uncollected is a few MB at most.

``PANELPACK_FULL_EXIT=1`` keeps the normal exit (for a tool that inspects the interpreter's
teardown). In-process callers (click's ``CliRunner``, the tests) call ``cli.main`` and never
come here.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import Any, Callable, NoReturn

#: ``gc.set_threshold`` of the ``panelpack`` process (the first generation's; the others as Python's).
GC_THRESHOLD = 100_000


def exit_code(code: Any) -> int:
    """The status ``sys.exit(code)`` would end the process with (None 0, an int itself, anything
    else printed to stderr and 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code % 256
    print(code, file=sys.stderr)
    return 1


def finish(code: Any) -> NoReturn:
    """End the process with ``code`` after the steps of a normal exit that reach outside it."""
    if os.environ.get("PANELPACK_FULL_EXIT"):
        sys.exit(code)
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:  # an interpreter without the hook: the normal exit
        sys.exit(code)
    status = exit_code(code)
    shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe (`panelpack inspect x | head`) or stream
            pass
    os._exit(status)


def main(command: Callable[[], Any] | None = None) -> NoReturn:
    """Run the CLI (``cli.main``, or ``command``) as this process's command and end the process."""
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    if command is None:
        from panelpack.cli import main as command
    try:
        command()  # click's standalone mode ends in SystemExit
        code: Any = 0
    except SystemExit as e:
        code = e.code
    finish(code)
