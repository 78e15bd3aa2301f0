"""``lazy_njit``: numba kernels with explicit signatures, compiled (or loaded from the cache)
on first call instead of at import.

``@numba.njit(signature, cache=True)`` compiles eagerly when the module is imported. With a
few dozen kernels that makes ``import`` (and so every CLI command) pay for kernels it never
calls: tens of seconds on a fresh machine, and a cache load per kernel afterwards. Kernels use
:func:`lazy_njit` instead: same signatures, same cache, compiled the first time they run.

A lazy kernel can be called from another numba kernel too: numba types the global through
the ``typeof`` registered below, which compiles (or loads) the callee's dispatcher at the
moment the caller is compiled.

``kernel.py_func`` is the undecorated Python function (the scalar reference runs it), and
``NUMBA_DISABLE_JIT=1`` makes the kernel plain Python, as with ``numba.njit``.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

from . import _numba_internals, engine

_lock = threading.RLock()  # re-entrant: compiling a kernel may resolve the lazy kernels it calls

#: Called once per process (no arguments) just before the first kernel that is not in numba's
#: cache compiles: the CLI prints "compiling kernels (first run on this machine)" from it.
cold_cache_hooks: list[Callable[[], None]] = engine.cold_cache_hooks  # (filled without importing numba)
_cold_announced = False


def cached_on_disk(fn: Callable) -> bool:
    """Whether numba's on-disk cache has an index for the Python function ``fn`` (a kernel
    compiled with ``cache=True`` in some earlier run), i.e. its first call loads rather than
    compiles. True when numba's cache internals cannot be asked (never a failure)."""
    try:
        import os

        return os.path.exists(_numba_internals.cache_index_path(fn))
    except Exception:  # noqa: BLE001 - a numba internal moved (tests/test_numba_internals.py says which)
        return True


def _announce_if_cold(fn: Callable, options: dict[str, Any]) -> None:
    """Run the hooks if ``fn`` has no entry in numba's on-disk cache (so it will compile)."""
    global _cold_announced
    if _cold_announced or not cold_cache_hooks or not options.get("cache"):
        return
    if not cached_on_disk(fn):
        _cold_announced = True
        for hook in cold_cache_hooks:
            hook()


#: ``"module.qualname"`` of a lazy kernel -> a callable run once, just before that kernel is
#: built: a second process may be compiling it into numba's on-disk cache meanwhile
#: (verify/precompile.py), and the callable waits for it, so the build below loads its result.
before_build: dict[str, Callable[[], None]] = {}

_probe_skipped = False


def _skip_blas_probe() -> None:
    """Spare the first kernel numba's BLAS probe: loading its array-math registry (at the first
    compile or cache load) imports ``scipy.linalg`` when scipy is installed, to set one flag
    (``arraymath._HAVE_BLAS``) that only picks how one inner product inside numba is written
    (0.6 s of every command's start here). The registry is imported once with that probe told
    "no", and the answer is withdrawn at once: BLAS-backed routines still find scipy when they
    run (``numba.np.linalg.ensure_blas`` imports it then), and so does everyone else."""
    global _probe_skipped
    import sys

    if _probe_skipped or _numba_internals.ARRAYMATH_MODULE in sys.modules or "scipy.linalg" in sys.modules:
        _probe_skipped = True
        return
    _probe_skipped = True
    _numba_internals.load_arraymath_without_blas_probe()


class LazyKernel:
    def __init__(self, fn: Callable, signatures: Any, options: dict[str, Any]):
        self.py_func = fn
        self.signatures = signatures
        self.options = options
        self._dispatcher = None
        functools.update_wrapper(self, fn)

    @property
    def dispatcher(self):
        """The numba dispatcher, compiled (or loaded from the cache) on first use."""
        d = self._dispatcher
        if d is None:
            with _lock:
                if self._dispatcher is None:
                    import numba

                    wait = before_build.pop(self.key, None) if before_build else None
                    if wait is not None:
                        wait()
                    _skip_blas_probe()
                    _announce_if_cold(self.py_func, self.options)
                    engine.start_kernels()  # numba's start-up is being paid: kernels from now on

                    if self.signatures is None:
                        self._dispatcher = numba.njit(**self.options)(self.py_func)
                    else:
                        self._dispatcher = numba.njit(self.signatures, **self.options)(self.py_func)
                d = self._dispatcher
        return d

    @property
    def key(self) -> str:
        """``"module.qualname"`` (the name :data:`before_build` is keyed by)."""
        return f"{self.py_func.__module__}.{self.py_func.__qualname__}"

    def __reduce__(self):
        # pickled by name: numba hashes a closure's cells (a kernel built by a factory that
        # closes over this one) into its cache key, which must not change with compile state.
        # A kernel that is itself a factory's closure adds what it closes over, so two closures
        # of one factory (same name, same bytecode) never share a cache entry.
        cells = tuple(c.cell_contents for c in (self.py_func.__closure__ or ()))
        return (_by_name, (self.py_func.__module__, self.py_func.__qualname__, cells))

    def __call__(self, *args, **kwargs):
        return self.dispatcher(*args, **kwargs)

    def __repr__(self) -> str:
        state = "compiled" if self._dispatcher is not None else "not compiled yet"
        return f"<lazy numba kernel {self.py_func.__module__}.{self.py_func.__qualname__} ({state})>"


def _by_name(module: str, qualname: str, cells: tuple = ()) -> "LazyKernel":
    import importlib

    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _register_typeof() -> None:
    import numba
    from numba.extending import typeof_impl

    @typeof_impl.register(LazyKernel)
    def _typeof_lazy(val, c):
        return numba.typeof(val.dispatcher)


_register_typeof()


def lazy_njit(signatures: Any = None, tag: str | None = None, **options: Any) -> Callable[[Callable], LazyKernel]:
    """Decorator: like ``numba.njit(signatures, **options)`` but compiled on first call.

    ``cache=True`` is the default, and so is ``nogil=True`` for serial kernels: they release
    the GIL while they run, so the hash threads, the writer and a second ``--jobs`` worker keep
    going meanwhile (a kernel never touches Python objects). ``parallel=True`` kernels keep the
    GIL: it is what stops two threads from entering numba's thread pool at once, which its
    default (workqueue) threading layer does not support.
    ``tag``: for kernels a factory makes (one per type), a
    suffix of the function's name, so that each gets its own numba cache index: closures that
    share a name share an index file, whose entry numbering races when several processes
    compile at once (a process can then load another closure's machine code).
    """
    options.setdefault("cache", True)
    if not options.get("parallel"):
        options.setdefault("nogil", True)

    def wrap(fn: Callable) -> LazyKernel:
        if tag:
            fn.__qualname__ = f"{fn.__qualname__}_{tag}"
            fn.__name__ = f"{fn.__name__}_{tag}"
        return LazyKernel(fn, signatures, options)

    return wrap



def inline_jit(fn: Callable) -> Callable:
    """A kernel body numba inlines into each kernel that calls it (``njit(inline="always")``:
    numba's IR inliner, cheap to compile), for the per-block bodies a type module's range
    loop calls once per block, where a call would cost more than the block. A
    :class:`LazyKernel` would stay a call: numba's inliner only sees its own dispatchers. The
    caller must name the body as a module global (a dispatcher in a closure cell would put its
    random uuid into the caller's cache key). ``body.py_func`` is the plain Python function,
    which the scalar references run."""
    import numba

    return numba.njit(inline="always")(fn)


def closable_inline(fn: Callable) -> Callable:
    """``fn`` registered as a body numba inlines into each kernel that calls it (its typed IR:
    ``register_jitable(inline="always")``), returned as the plain function. A kernel that a
    factory makes may close over it: a plain module function pickles by name, so the kernel's
    cache key stays stable (an :func:`inline_jit` dispatcher in a closure cell would not), and
    it is inlined before LLVM sees the loop (a :class:`LazyKernel` stays a call, left to LLVM,
    1.3-3x slower in verify/il8.py's sweeps). ``NUMBA_DISABLE_JIT=1``: the plain function runs.
    Do not store into an array unpacked from a tuple inside such a body: numba's inliner loses
    those stores (hand the arrays as arguments, or to a called kernel; tests/test_jit.py)."""
    from numba.extending import register_jitable

    register_jitable(inline="always")(fn)
    return fn


# ---- the numba signature vocabulary every kernel module shares --------------------------
def readonly(dtype: Any, ndim: int = 1) -> Any:
    """The numba type of a read-only C-contiguous array of ``dtype`` (a numba or numpy dtype):
    what a kernel sees when handed a memory map or a ``np.frombuffer`` view."""
    import numba
    import numpy as np

    if not isinstance(dtype, numba.types.Type):
        dtype = numba.from_dtype(np.dtype(dtype))
    return numba.types.Array(dtype, ndim, "C", readonly=True)


#: read-only 1-D arrays, the usual kernel inputs
RO_U8 = readonly("u1")
RO_U16 = readonly("u2")
RO_U32 = readonly("u4")
RO_U64 = readonly("u8")
RO_F32 = readonly("f4")



# imported here, after the registry above, so ``import numba`` stays where it always was
import numba as _numba  # noqa: E402
import numpy as _np  # noqa: E402

# every kernel module imports this one before it compiles anything: from here on the functions
# numba compiles get symbol names no other process's cached kernels share (_numba_internals 11)
_numba_internals.distinct_function_ids()
_numba_internals.allow_inline_asm()  # (12: a kernel's inline assembly, verify/compact.py)

_U64 = _np.uint64


@_numba.njit(inline="always")
def ld64(a8, o):
    """Little-endian 64-bit load from the bytes ``a8`` at any byte offset ``o``."""
    x = _U64(0)
    for j in range(8):
        x |= _U64(a8[o + _U64(j)]) << _U64(8 * j)
    return x


@_numba.njit(inline="always")
def st64(a8, o, x):
    """Little-endian 64-bit store of ``x`` into the bytes ``a8`` at any byte offset ``o``."""
    for j in range(8):
        a8[o + _U64(j)] = _np.uint8((x >> _U64(8 * j)) & _U64(0xFF))


def _build_prefetch(write: int):
    """A prefetch hint for the cache line of ``a[i]`` (LLVM's ``llvm.prefetch``, kept in every
    level; ``write``: 0 read intent, 1 write intent: prefetcht0 / prefetchw on x86, prfm on
    Arm); no effect on any value, and harmless on any address (a prefetch never faults). A no-op
    Python function when numba's JIT is disabled."""
    from llvmlite import ir
    from numba.extending import intrinsic

    if _numba.config.DISABLE_JIT:  # type: ignore[attr-defined]  # (numba.config sets its names at run time)
        def plain(a, i):
            return None

        return plain

    @intrinsic
    def prefetch(typingctx, a, i):
        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            fn = _numba_internals.llvm_function(builder, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                                "llvm.prefetch.p0i8")
            p = builder.bitcast(builder.gep(data, [args[1]]), i8p)
            builder.call(fn, [p, ir.Constant(i32, write), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return _numba.types.void(a, i), codegen

    return prefetch


#: ``prefetch(a, i)``: ``a[i]``'s cache line will be read soon; ``prefetch_w``: written soon
prefetch = _build_prefetch(0)
prefetch_w = _build_prefetch(1)
