"""Canaries for formats/_numba_internals.py: one per reach into numba's or CPython's internals.

Each fails with a message that names the reach, what in panelpack relies on it, and what to do,
so a numba or Python upgrade that moves one is caught here, not as a slow start or a stale
kernel. pyproject.toml caps numba to the releases these passed on.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import textwrap

import numba
import numpy as np
import pytest
from numba import types

from panelpack.formats import _jit
from panelpack.formats import _numba_internals as ni

WHAT_TO_DO = ("update formats/_numba_internals.py for numba {v} (or keep numba below it in pyproject.toml) "
              "and run tests/test_numba_internals.py again")


def moved(reach: str, used_by: str, detail: str) -> str:
    return (f"numba {numba.__version__} / Python {sys.version.split()[0]} moved reach {reach} "
            f"(used by {used_by}): {detail}; " + WHAT_TO_DO.format(v=numba.__version__))


@pytest.fixture
def tmp_module(tmp_path):
    """A real module in a file of its own, ``canary_mod``, with two plain functions."""
    path = tmp_path / "canary_mod.py"
    path.write_text("def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 2\n")
    spec = importlib.util.spec_from_file_location("canary_mod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _template(x):
    return x * 3


def test_1_rehomed_code_is_the_modules_for_numbas_cache(tmp_module):
    fn = ni.rehome(_template, vars(tmp_module), "_tripled")
    assert fn(2) == 6
    code = fn.__code__
    assert (code.co_filename, code.co_name, fn.__qualname__, fn.__module__) == (
        tmp_module.__file__, "_tripled", "_tripled", "canary_mod"), moved(
        1, "formats/blocks/_codec.type_loop", "code.replace(co_filename=, co_name=) no longer re-homes a function")
    if sys.version_info >= (3, 11):
        assert code.co_qualname == "_tripled", moved(1, "blocks/_codec.type_loop", "co_qualname is not set")
    # numba finds a function's source (locator, stamp, index name) through inspect.getfile
    assert inspect.getfile(fn) == tmp_module.__file__, moved(
        1, "blocks/_codec.type_loop", "inspect.getfile ignores co_filename: type loops would cache beside _codec.py")
    index = ni.cache_index_path(fn)
    assert os.path.basename(index).startswith("canary_mod._tripled-"), moved(
        1, "blocks/_codec.type_loop", f"the cache index {index} is not named after the re-homed module and name")


def test_2_cache_index_path_is_per_qualname_and_exists_once_compiled(tmp_module):
    try:
        path = ni.cache_index_path(tmp_module.f)
    except Exception as e:  # noqa: BLE001
        pytest.fail(moved(2, "formats/_jit.cached_on_disk", f"FunctionCache(fn)._cache_file._index_path: {e!r}"))
    assert path.endswith(".nbi") and os.path.basename(path).startswith("canary_mod.f-"), moved(
        2, "formats/_jit.cached_on_disk", f"unexpected index path {path}")
    # lazy_njit(tag=) renames a factory's closures so each gets its own index file
    tmp_module.g.__qualname__ = "g_q4_k"
    tagged = ni.cache_index_path(tmp_module.g)
    assert os.path.basename(tagged).startswith("canary_mod.g_q4_k-"), moved(
        2, "formats/_jit.lazy_njit(tag=)", f"the index is not named after __qualname__: {tagged}")
    assert not _jit.cached_on_disk(tmp_module.f)
    numba.njit(types.int64(types.int64), cache=True)(tmp_module.f)(1)
    assert os.path.exists(path) and _jit.cached_on_disk(tmp_module.f), moved(
        2, "formats/_jit.cached_on_disk", f"compiling with cache=True wrote no index at {path}")


def test_3_cache_folder_check_makes_the_folder(tmp_module):
    try:
        ni.ensure_cache_path(tmp_module.f)
    except Exception as e:  # noqa: BLE001
        pytest.fail(moved(3, "verify/precompile._cache_writable",
                          f"FunctionCache(fn)._impl.locator.ensure_cache_path() failed on a writable cache: {e!r}"))
    assert os.path.isdir(os.path.dirname(ni.cache_index_path(tmp_module.f)))


def test_4_closure_cells_are_pickled_into_the_cache_key_so_lazy_kernels_pickle_by_name():
    from numba.core.caching import FunctionCache
    from numba.core.registry import cpu_target

    from panelpack.formats.blocks import _codec, q8_0

    def factory(cell):
        def body(x):
            return cell(x)

        return body

    sig = (types.int64,)
    codegen = cpu_target.target_context.codegen()

    def key(fn):
        try:
            return FunctionCache(fn)._index_key(sig, codegen)
        except Exception as e:  # noqa: BLE001
            pytest.fail(moved(4, "formats/_jit.LazyKernel.__reduce__", f"Cache._index_key(sig, codegen): {e!r}"))

    a, b, a2 = factory(_codec.block_scratch), factory(q8_0.dequantize), factory(_codec.block_scratch)
    assert key(a) != key(b), moved(4, "formats/_jit.LazyKernel.__reduce__",
                                   "closures over different kernels share a cache key: cells are not in the key")
    assert key(a) == key(a2), moved(4, "formats/_jit.LazyKernel.__reduce__",
                                    "the same closure gets two keys: the cells' pickled form is not stable")
    # ... which holds because a lazy kernel pickles by name, compiled or not
    assert pickle.loads(pickle.dumps(_codec.block_scratch)) is _codec.block_scratch
    assert len(pickle.dumps(_codec.block_scratch)) < 300


def test_5_numba_probes_blas_by_importing_scipys_cython_blas():
    assert importlib.util.find_spec(ni.ARRAYMATH_MODULE) is not None, moved(
        5, "formats/_jit._skip_blas_probe", f"{ni.ARRAYMATH_MODULE} is gone")
    import numba.np.linalg as linalg

    src = inspect.getsource(linalg.ensure_blas)
    assert f"import {ni.BLAS_PROBE_MODULE}" in src, moved(
        5, "formats/_jit._skip_blas_probe", f"numba's ensure_blas no longer imports {ni.BLAS_PROBE_MODULE}")
    arraymath = open(importlib.util.find_spec(ni.ARRAYMATH_MODULE).origin, encoding="utf-8").read()
    assert "_HAVE_BLAS = _check_blas()" in arraymath, moved(
        5, "formats/_jit._skip_blas_probe", f"{ni.ARRAYMATH_MODULE} no longer probes BLAS when imported")


@pytest.fixture(scope="module")
def add1():
    """One tiny compiled function (not cached), for the reaches that need a compiled overload."""
    return numba.njit(types.int64(types.int64))(lambda x: x + 1)


def test_6_typed_compile_result_wap(add1):
    cls = ni.typed_wap_class()
    assert cls is not None, moved(6, "verify/compiled._compiled",
                                  "numba.core.types.function_type.CompileResultWAP is gone")
    sig = (types.int64,)
    wap = cls(add1.overloads[sig])
    assert numba.typeof(wap) is wap.numba_type == types.FunctionType(types.int64(types.int64)), moved(
        6, "verify/compiled._compiled", "typeof of the subclass is not its stored FunctionType")

    @numba.njit
    def call(f, x):
        return f(x)

    assert call(wap, 41) == 42, moved(6, "verify/compiled._compiled", "a CompileResultWAP is no longer callable from numba")


def test_7_a_function_value_from_its_addresses(add1):
    import numba.experimental.function_type  # noqa: F401 - registers the FunctionType data model
    from numba.core.datamodel import default_manager
    from numba.extending import intrinsic

    fnty = types.FunctionType(types.int64(types.int64))
    fields = default_manager.lookup(fnty)._fields
    assert set(fields) == set(ni.FUNCTION_FIELDS), moved(
        7, "verify/rowvec._tile_at", f"the first-class function value's fields are {fields}")
    jit_addr, c_addr = ni.overload_addresses(add1, types.int64(types.int64))
    assert jit_addr and c_addr, moved(7, "verify/rowvec._tile_addresses", "no address for a compiled overload")

    @intrinsic
    def at(typingctx, j, c):
        def codegen(context, builder, sig, args):
            return ni.function_value(context, builder, fnty, args[0], args[1])

        return fnty(types.int64, types.int64), codegen

    @numba.njit
    def call(j, c, x):
        return at(j, c)(x)

    assert call(jit_addr, c_addr, 41) == 42, moved(7, "verify/rowvec", "calling through the addresses gave a wrong value")


def test_8_compile_events_name_the_dispatcher():
    seen = []

    def fresh(x):
        return x - 1

    with ni.compile_listener(lambda ev: None, lambda ev: seen.append(ni.compiled_dispatcher(ev))) as listening:
        numba.njit(types.int64(types.int64))(fresh)
    assert listening, moved(8, "formats/compile_meter", "numba.core.event's Listener / install_listener is gone")
    assert any(getattr(d, "py_func", None) is fresh for d in seen), moved(
        8, "formats/compile_meter", f"no {ni.COMPILE_EVENT!r} event named the dispatcher compiled (saw {seen})")


def test_9_codegen_helpers_declare_an_llvm_function():
    from llvmlite import ir
    from numba.extending import intrinsic

    cg = ni.cgutils()
    for name in ("get_or_insert_function", "alloca_once", "for_range", "create_struct_proxy"):
        assert callable(getattr(cg, name, None)), moved(9, "_jit.prefetch, verify/_simd, convert/_error_kernels",
                                                        f"numba.core.cgutils.{name} is gone")

    @intrinsic
    def fabs(typingctx, x):
        def codegen(context, builder, sig, args):
            d = ir.DoubleType()
            return builder.call(ni.llvm_function(builder, ir.FunctionType(d, [d]), "llvm.fabs.f64"), [args[0]])

        return types.float64(types.float64), codegen

    @numba.njit
    def call(x):
        return fabs(x)

    assert call(np.float64(-2.5)) == 2.5, moved(9, "_jit.prefetch, verify/_simd", "an intrinsic's declared function misbehaves")


def test_10_a_keyed_intrinsic_pickles_by_its_key():
    from numba.core.serialize import dumps
    from numba.extending import intrinsic

    def make():
        @intrinsic
        def ident(typingctx, x):
            def codegen(context, builder, sig, args):
                return args[0]

            return types.int64(types.int64), codegen

        return ident

    try:
        a, b = (ni.keyed_intrinsic(make(), "tests.test_numba_internals.ident") for _ in range(2))
        c = ni.keyed_intrinsic(make(), "tests.test_numba_internals.other")
        blobs = [dumps(x) for x in (a, b, c)]
    except Exception as e:  # noqa: BLE001
        pytest.fail(moved(10, "verify/_simd, _simd512, compact", f"an intrinsic's class or pickling moved: {e!r}"))
    assert blobs[0] == blobs[1] != blobs[2], moved(10, "verify/_simd, _simd512, compact",
                                                   "a keyed intrinsic does not pickle by its key")
    assert pickle.loads(pickle.dumps(a)) is b  # the last one registered under the key

    @numba.njit
    def call(x):
        return a(x) + c(x)

    assert call(7) == 14, moved(10, "verify/_simd, _simd512, compact", "a keyed intrinsic no longer compiles")


def test_11_function_ids_are_random_once_jit_is_imported():
    from numba.core import bytecode

    assert ni.function_ids_distinct(), moved(11, "formats/_jit (on import)",
                                             "FunctionIdentity._unique_ids is not the random ids")
    ids = {bytecode.FunctionIdentity.from_function(_template).unique_id for _ in range(64)}
    assert len(ids) == 64 and min(ids) >= 2**62, moved(
        11, "formats/_jit", f"function ids {sorted(ids)[:3]}... do not come from the random ids")
    ni.distinct_function_ids()  # idempotent
    assert ni.function_ids_distinct()


def test_12_a_kernel_with_inline_asm_compiles_once_jit_is_imported():
    """In a fresh process (the parser is process state): ``_jit``'s import initialises LLVM's asm
    parser, and a kernel whose intrinsic carries inline assembly compiles and runs (without the
    parser LLVM aborts the process)."""
    code = textwrap.dedent("""
        from panelpack.formats import _jit  # noqa: F401
        from llvmlite import ir
        from numba import njit, types
        from numba.extending import intrinsic

        @intrinsic
        def plus_one(typingctx, x):
            def codegen(context, builder, sig, args):
                fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64)])
                return builder.asm(fnty, "leaq 1($1), $0", "=r,r", [args[0]], False)
            return types.int64(types.int64), codegen

        @njit
        def run(x):
            return plus_one(x)

        print(run(41))
    """)
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the canary's assembly is x86's")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NUMBA_CACHE_DIR": tempfile.mkdtemp()})
    assert out.returncode == 0 and out.stdout.strip() == "42", moved(
        12, "formats/_jit (on import)", f"inline asm did not assemble: {out.stderr[-400:]}")


def test_the_cap_in_pyproject_covers_the_numba_checked_here():
    text = open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), encoding="utf-8").read()
    major, minor = (int(p) for p in ni.CHECKED_NUMBA.split("."))
    assert f'"numba>=0.59,<{major}.{minor + 1}"' in text, "pyproject.toml must cap numba just above CHECKED_NUMBA"
    installed = tuple(int(p) for p in numba.__version__.split(".")[:2])
    assert installed <= (major, minor), (
        f"numba {numba.__version__} is newer than the {ni.CHECKED_NUMBA} these canaries were last run on: if they "
        "pass, raise CHECKED_NUMBA and the cap in pyproject.toml")
