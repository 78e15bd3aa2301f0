"""numba or numpy: which engine a process runs its codecs, packers and error sums on.

numba costs a fixed price per process before its first kernel returns: its typing set-up
(~0.6 s even when every kernel is in the on-disk cache) and, on a machine whose cache is
empty, seconds of compilation per kernel (the demo's Q4_K quantizer and panel64 packer ~9 s
together). The numpy references produce the same bytes (the tests compare them), slower per
byte. So a job small enough for numpy never starts numba, and a big one starts it once and
runs every kernel. The decision is per process, made up front by the job (:func:`expect`,
from everything it will do) or call by call (:func:`prefer_kernels`, from one call's size);
once a kernel has run (numba's price is paid), kernels are used for everything.

This module imports nothing heavy: the decision must not load what it decides about.
"""

from __future__ import annotations

from typing import Callable

#: Bytes per kind of work below which the numpy references beat numba's start-up (~0.5-1 s
#: from a warm cache, seconds per kernel on a cold one). ``quantize``: f32 input (the numpy
#: Q4_K quantizer runs ~6 MB/s, Q4_0/Q5_x/Q8_0 ~100 MB/s: 8 MiB is at most ~1.5 s; types
#: whose reference is a Python loop over blocks always compile). ``dequantize``: f32 output of
#: block types (130-340 MB/s; F16/BF16 widen at 1-6 GB/s and are not counted). ``repack``:
#: blocks for a numpy packer (~2 ns per byte slower than the kernels); ``repack_ref``: blocks
#: only a layout's field-by-field reference packer takes in numpy. Figures: docs/BENCHMARKS.md
#: ("Layouts", "Cold start").
NUMPY_BUDGET_BYTES: dict[str, int] = {
    "quantize": 8 << 20,
    "dequantize": 128 << 20,
    "repack": 256 << 20,
    "repack_ref": 16 << 20,  # a layout's field-by-field reference packer (~15-20 MB/s)
}

_kernels = False

#: ``formats._jit.cold_cache_hooks`` (the same list), here so that the CLI can register its
#: "compiling kernels" notice without importing numba: a command that builds no kernel (verify
#: --level structure, inspect) then never pays numba's import.
cold_cache_hooks: list[Callable[[], None]] = []


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask; the machine's count elsewhere)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def kernels_started() -> bool:
    """Whether this process runs numba kernels (one has been built, or a job asked for them)."""
    return _kernels


def start_kernels() -> None:
    """From now on every choice is a kernel (called when the first kernel is built)."""
    global _kernels
    _kernels = True


def prefer_kernels(kind: str, nbytes: int) -> bool:
    """Run a numba kernel rather than its numpy reference for one call of ``nbytes`` of ``kind``?"""
    return _kernels or nbytes >= NUMPY_BUDGET_BYTES[kind]


def numpy_share(**nbytes_by_kind: int) -> float:
    """The work given, as a fraction of what numpy does in the time numba takes to start."""
    return sum(n / NUMPY_BUDGET_BYTES[kind] for kind, n in nbytes_by_kind.items())


def expect(must_compile: bool = False, **nbytes_by_kind: int) -> bool:
    """Tell the engine what a job will do (``quantize=``, ``dequantize=``, ``repack=`` bytes);
    ``must_compile``: some of it has no numpy reference. Starts the kernels when the job is big
    enough (or needs them), so every call of the job takes the same engine. Returns whether
    kernels will run."""
    if must_compile or numpy_share(**nbytes_by_kind) >= 1.0:
        start_kernels()
    return _kernels
