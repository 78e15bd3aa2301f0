"""Every reach into numba's and CPython's internals, behind one door.

panelpack's start-up speed and its kernels' cache keys lean on a few things numba (and CPython)
do not promise. Each is used through this module only, and each has a canary in
``tests/test_numba_internals.py`` that fails naming the reach, the module that relies on it and
what to do, when a numba or Python upgrade moves it. pyproject.toml caps numba to the releases
the canaries passed on (checked: numba 0.68.1 with llvmlite 0.50 on Python 3.11; the code paths
were written against 0.59 and up).

====  ==============================================================  ==========================
 #    reach                                                           used by
====  ==============================================================  ==========================
1     a code object re-homed into another module (``code.replace``    ``blocks/_codec.type_loop``
      of ``co_filename``/``co_name``/``co_qualname``): numba's cache
      locator and source stamp follow ``co_filename``
2     the cache index file of a function (``FunctionCache(fn)``       ``_jit.cached_on_disk``,
      ``._cache_file._index_path``), named from ``__qualname__``      ``_jit.lazy_njit(tag=)``
3     the cache folder's writability check (``FunctionCache(fn)``     ``verify/precompile.py``
      ``._impl.locator.ensure_cache_path()``)
4     a closure's cells pickled into its cache key                    ``_jit.LazyKernel.__reduce__``
      (``Cache._index_key``), so kernels pickle by name
5     the BLAS probe of ``numba.np.arraymath`` (imports                ``_jit`` (the first kernel)
      ``scipy.linalg.cython_blas`` when loaded)
6     ``CompileResultWAP``, subclassed with its numba type cached     ``verify/compiled.py``
7     a compiled overload's entry addresses                           ``verify/rowvec.py``
      (``numba.experimental.function_type._get_jit_address`` /
      ``_get_wrapper_address``) and the first-class function value's
      fields (``jit_addr``, ``c_addr``, ``py_addr``)
8     compile events (``numba.core.event``, ``"numba:compile"``,      ``formats/compile_meter.py``
      ``event.data["dispatcher"]``)
9     numba's codegen helpers (``numba.core.cgutils``): declaring an  ``_jit.prefetch``,
      LLVM function in a kernel's module (``get_or_insert_function``), ``verify/_simd.py``,
      ``alloca_once``, ``for_range``                                  ``convert/_error_kernels.py``
10    an intrinsic in a closure's cache key: numba pickles it with    ``verify/_simd.py``,
      a uuid drawn per process and its typing function by value;     ``verify/_simd512.py``,
      a keyed intrinsic's class gets a ``__reduce__`` by key          ``verify/compact.py``
11    the counter numba numbers compiled functions from               ``_jit`` (on import)
      (``numba.core.bytecode.FunctionIdentity._unique_ids``), which
      goes into every symbol name: random numbers instead
12    inline assembly in a kernel: numba's JIT assembles it only      ``_jit`` (on import),
      with LLVM's native asm parser, which numba never initialises    ``verify/compact.py``
      (``llvmlite.binding.initialize_native_asmparser``)
====  ==============================================================  ==========================

numba is imported inside the functions, never here: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any, Callable, Iterator

#: what the canaries were last run on (``tests/test_numba_internals.py``; pyproject's cap)
CHECKED_NUMBA = "0.68"


# ---- 1: a code object re-homed into another module ------------------------------------------
def rehome(template: Callable, namespace: dict, name: str) -> types.FunctionType:
    """``template``'s code as the function ``name`` of the module whose globals are
    ``namespace``: its globals are that module's, and its code object says that module's file
    (``co_filename``, which numba's cache locator and source stamp read) and this name
    (``co_name``; ``co_qualname`` from Python 3.11, the function's ``__qualname__`` on every
    version)."""
    qualname: dict[str, Any] = {"co_qualname": name} if sys.version_info >= (3, 11) else {}
    code = template.__code__.replace(co_filename=namespace["__file__"], co_name=name, **qualname)
    fn = types.FunctionType(code, namespace, name)
    fn.__qualname__ = name
    fn.__module__ = namespace["__name__"]
    return fn


# ---- 2, 3: numba's on-disk cache of one function ---------------------------------------------
def _function_cache(fn: Callable) -> Any:
    from numba.core.caching import FunctionCache

    return FunctionCache(fn)


def cache_index_path(fn: Callable) -> str:
    """The path of the index file numba's cache keeps for the Python function ``fn`` (whether or
    not it exists yet). Raises when numba's cache internals cannot be asked."""
    return _function_cache(fn)._cache_file._index_path


def ensure_cache_path(fn: Callable) -> None:
    """numba's own check that ``fn``'s cache folder is writable: makes the folder and a temporary
    file in it; raises if it cannot (or if numba's internals moved)."""
    _function_cache(fn)._impl.locator.ensure_cache_path()


# ---- 5: the BLAS probe -----------------------------------------------------------------------
#: the numba module whose import probes for BLAS, and the module that probe imports
ARRAYMATH_MODULE = "numba.np.arraymath"
BLAS_PROBE_MODULE = "scipy.linalg.cython_blas"


def load_arraymath_without_blas_probe() -> None:
    """Import numba's array-math registry with its BLAS probe answered "no" (its import of
    :data:`BLAS_PROBE_MODULE` raises ImportError), then withdraw the answer, so whoever asks
    later (numba's ``ensure_blas`` when a BLAS routine runs, anyone else) imports scipy as
    usual. Never a failure: if numba's module moved, numba loads what it needs itself."""
    sys.modules[BLAS_PROBE_MODULE] = None  # type: ignore[assignment]  # "import ..." raises ImportError
    try:
        __import__(ARRAYMATH_MODULE)
    except Exception:  # noqa: BLE001 - a numba internal moved: numba loads it itself, as before
        pass
    finally:
        if BLAS_PROBE_MODULE in sys.modules and sys.modules[BLAS_PROBE_MODULE] is None:
            del sys.modules[BLAS_PROBE_MODULE]


# ---- 6: CompileResultWAP with its type computed once -----------------------------------------
_WAP_CLASS: list = []


def typed_wap_class() -> Any:
    """numba's ``CompileResultWAP`` (the wrapper-address protocol of a compiled overload) with
    its numba type computed once and registered with ``typeof``, or None if numba lacks it.

    A dispatcher types every argument on every call; for a ``CompileResultWAP`` that means
    rebuilding its signature and FunctionType, about 25 us a call (measured), more than a small
    tile's work."""
    if not _WAP_CLASS:
        try:
            from numba.core.types.function_type import CompileResultWAP
        except ImportError:  # pragma: no cover - depends on the numba release
            _WAP_CLASS.append(None)
        else:
            from numba import types as nbt
            from numba.extending import typeof_impl

            class TypedWAP(CompileResultWAP):
                def __init__(self, cres):
                    super().__init__(cres)
                    self.numba_type = nbt.FunctionType(self.signature())

            typeof_impl.register(TypedWAP)(lambda val, c: val.numba_type)
            _WAP_CLASS.append(TypedWAP)
    return _WAP_CLASS[0]


# ---- 7: a compiled overload's addresses, and the first-class function value ------------------
#: the fields of numba's first-class function value (its data model), set by ``function_value``
FUNCTION_FIELDS = ("jit_addr", "c_addr", "py_addr")


def overload_addresses(dispatcher: Any, sig: Any) -> tuple[int, int]:
    """``(numba-convention entry, C wrapper)`` addresses of ``dispatcher``'s overload for
    ``sig`` (compiled; the caller keeps the dispatcher alive)."""
    from numba.experimental.function_type import _get_jit_address, _get_wrapper_address

    return _get_jit_address(dispatcher, sig), _get_wrapper_address(dispatcher, sig)


def function_value(context: Any, builder: Any, fnty: Any, jit_addr: Any, c_addr: Any) -> Any:
    """In an intrinsic's codegen: the first-class function value of type ``fnty`` (a numba
    ``FunctionType``) calling the code at ``jit_addr`` (its C wrapper at ``c_addr``; both LLVM
    integers), without a Python object."""
    from numba import types as nbt
    from numba.core import cgutils

    fn = cgutils.create_struct_proxy(fnty)(context, builder)
    vp = context.get_value_type(nbt.voidptr)
    jit_field, c_field, py_field = FUNCTION_FIELDS
    setattr(fn, jit_field, builder.inttoptr(jit_addr, vp))
    setattr(fn, c_field, builder.inttoptr(c_addr, vp))
    setattr(fn, py_field, vp(None))
    return fn._getvalue()


# ---- 8: compile events -----------------------------------------------------------------------
#: numba's event kind around each compilation
COMPILE_EVENT = "numba:compile"


@contextlib.contextmanager
def compile_listener(on_start: Callable[[Any], None], on_end: Callable[[Any], None]) -> Iterator[bool]:
    """Within the block, ``on_start(event)`` / ``on_end(event)`` around every numba compilation
    in this process (:func:`compiled_dispatcher` names what was compiled). Yields False, and
    listens to nothing, if numba's event API moved (never a failure)."""
    try:
        from numba.core import event

        base: Any = event.Listener
    except Exception:  # noqa: BLE001 - numba's event API moved: nothing to listen to
        yield False
        return

    class _Listener(base):  # numba checks the type of what it is given
        def on_start(self, ev):
            on_start(ev)

        def on_end(self, ev):
            on_end(ev)

    try:
        cm = event.install_listener(COMPILE_EVENT, _Listener())
        cm.__enter__()
    except Exception:  # noqa: BLE001
        yield False
        return
    try:
        yield True
    finally:
        cm.__exit__(None, None, None)


def compiled_dispatcher(event: Any) -> Any:
    """The dispatcher a compile event is about (None if the event does not say)."""
    return (getattr(event, "data", None) or {}).get("dispatcher")


# ---- 9: LLVM functions declared in a kernel's module -----------------------------------------
def cgutils() -> Any:
    """numba's codegen helpers (``numba.core.cgutils``: ``alloca_once``, ``for_range``, ...), for
    an intrinsic's codegen that needs more than :func:`llvm_function`."""
    from numba.core import cgutils as helpers

    return helpers


def llvm_function(builder: Any, fnty: Any, name: str) -> Any:
    """The LLVM function ``name`` of type ``fnty`` (an ``llvmlite.ir.FunctionType``) in the
    module ``builder`` emits into, declared there if it is not yet (an LLVM intrinsic such as
    ``llvm.prefetch.p0i8``, or one of the x86 intrinsics)."""
    from numba.core import cgutils

    return cgutils.get_or_insert_function(builder.module, fnty, name)


# ---- 10: an intrinsic in a closure's cache key -----------------------------------------------
_KEYED: dict[str, Any] = {}
_KEYED_CLASSES: dict[type, type] = {}
_DIGESTS: dict[str, str] = {}


def keyed_intrinsic(fn: Any, key: str, sources: tuple[str, ...] = ()) -> Any:
    """``fn`` (a numba ``@intrinsic``) made to pickle as ``key`` plus a digest of its module's
    source and of ``sources`` (modules its code generation reads), returned.

    numba hashes the pickled cells of a closure into the closure's cache key. An intrinsic
    pickles with a uuid drawn once per process and its typing function by value, whose closure
    holds llvmlite type objects that cache state as the process compiles: so a tile that a
    factory builds around a group dot got a new key in every process, was compiled again each
    time and added an entry to its cache index. Keyed, it pickles the same in every process until
    its source changes (then numba compiles it afresh, as for any edited kernel). ``key`` must name
    the intrinsic uniquely (its factory and the factory's arguments)."""
    base = type(fn)
    cls = _KEYED_CLASSES.get(base)
    if cls is None:
        cls = _KEYED_CLASSES[base] = type(f"Keyed{base.__name__}", (base,), {"__reduce__": _reduce_keyed})
    full = f"{key}@{_sources_digest((fn.__module__, *sources))}"
    fn.__class__ = cls
    fn._panelpack_key = full
    _KEYED[full] = fn
    return fn


def _reduce_keyed(self: Any) -> tuple:
    return (keyed, (self._panelpack_key,))


def keyed(key: str) -> Any:
    """The keyed intrinsic of ``key`` (what one pickles to)."""
    return _KEYED[key]


def _sources_digest(modules: tuple[str, ...]) -> str:
    import hashlib

    out = []
    for name in modules:
        if name not in _DIGESTS:
            path = getattr(sys.modules.get(name), "__file__", None)
            data = open(path, "rb").read() if path else name.encode()
            _DIGESTS[name] = hashlib.sha256(data).hexdigest()[:16]
        out.append(_DIGESTS[name])
    return "+".join(out)


# ---- 11: symbol names distinct across processes ---------------------------------------------
class _RandomIds:
    """An endless iterator of random 63-bit numbers, top bit set (``os.urandom``: a forked child draws its own)."""

    def __iter__(self) -> "_RandomIds":
        return self

    def __next__(self) -> int:
        import secrets

        return secrets.randbits(62) | 1 << 62


_DISTINCT_IDS = _RandomIds()


def distinct_function_ids() -> None:
    """Number the functions numba compiles in this process with random 63-bit numbers instead of
    a counter from 1.

    numba names a compiled function's symbol after its qualified name, its argument types and a
    number from a per-process counter (``FunctionIdentity._unique_ids``). Two closures of one
    factory (one qualified name, the same argument types) compiled in two processes, each after
    the same sequence of compilations, get the same number and so the same symbol with different
    bodies. A process that then loads both from numba's on-disk cache links every call to that
    symbol to whichever library came first: the other kernel runs the wrong code and returns
    wrong numbers, silently (numba/numba#10486; here: panel64's Q6_K tile calling the group
    loop compiled for the compact Q6_K tile, docs/BENCHMARKS.md "Issue 26 on AVX2: fewer
    shuffles"). A random number per function keeps them distinct within a process, across
    processes and across forks (a counter from a random start would be copied into every
    forked child); two of 10^4 functions share one with probability ~10^-11. The cache keys do
    not read the number, so cached kernels still load. Idempotent; call it before the first
    kernel compiles (``_jit`` does on import)."""
    from numba.core import bytecode

    setattr(bytecode.FunctionIdentity, "_unique_ids", _DISTINCT_IDS)  # (any iterator of ints serves)


def function_ids_distinct() -> bool:
    """Whether :func:`distinct_function_ids` is in force in this process."""
    from numba.core import bytecode

    return bytecode.FunctionIdentity._unique_ids is _DISTINCT_IDS


# ---- 12: inline assembly in a kernel ----------------------------------------------------------
_ASM_READY = False


def allow_inline_asm() -> None:
    """Let kernels carry inline assembly (``builder.asm`` in an intrinsic: verify/compact.py
    writes ``vpshufb`` so that LLVM keeps the in-lane byte shuffle it was given instead of a
    lane-crossing ``vpermq`` and an unpack). numba's JIT emits machine code through LLVM's MC
    layer, which needs the host's asm parser to assemble an inline-asm string; numba initialises
    the target and its printer but not the parser, and without it LLVM aborts the process
    ("Inline asm not supported by this streamer"). Idempotent; ``_jit`` calls it on import."""
    global _ASM_READY
    if not _ASM_READY:
        import llvmlite.binding as llvm

        llvm.initialize_native_asmparser()
        _ASM_READY = True
