"""A verification's first run on an empty numba cache (issue 14): what it compiles, where, and
that it says so. Figures are in docs/BENCHMARKS.md ("Issue 14: cold verify"); nothing here
times anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from panelpack import convert
from panelpack.formats import _jit
from panelpack.formats.bundle import Bundle
from panelpack.formats.compile_meter import CompileMeter
from panelpack.verify import bundle_check, precompile
from panelpack.verify import compiled as C
from panelpack.verify import dispatch as D
from panelpack.verify import standard_numpy as SN

from builders import random_blocks, tiny_llama_gguf

TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("cold")
    tiny_llama_gguf(d / "tiny.gguf")
    return convert(d / "tiny.gguf", d / "tiny.ppk", layout="panel64:int8").bundle  # panel64's own panels only


@pytest.mark.parametrize("qname", TYPES)
def test_numpy_standard_is_the_compiled_standard_bit_for_bit(qname, rng):
    n, k = 130, 512
    blocks = random_blocks(qname, n, k, rng)
    ref = SN.NumpyStandard(blocks, n, k, qname)
    fast = C.prepare("rowmajor", {"blocks": blocks}, n, k, qname)
    for m in (1, 17):
        x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
        a, da = D.quantize_activations(x)
        P0, A0, y0 = fast.run(a, da)
        P1, A1, y1 = ref.run(a, da)
        assert np.array_equal(P0, P1) and np.array_equal(A0, A1)
        assert np.array_equal(y0.view(np.uint32), y1.view(np.uint32))
        assert ref.run(a, da, want_p=False)[0] is None


def test_which_jobs_run_the_numpy_standard(tiny):
    tensors = Bundle(tiny).tensors
    assert bundle_check._numpy_standard_job(tensors)  # the tiny Llama: a small job
    assert SN.numpy_job([(64, 32)]) and not SN.numpy_job([(4096, 4096)])
    assert SN.job_work([(10, 32), (20, 64)]) == 65 * (320 + 1280)


def test_verify_agrees_with_either_standard_reference(tiny, monkeypatch):
    """The same verdicts with the numpy reference (a small job) and the compiled one."""
    small = bundle_check.verify(tiny, "all", seed=5)
    monkeypatch.setattr(SN, "NUMPY_STANDARD_WORK", 0)  # as a big job: compiled rowmajor tiles
    assert not bundle_check._numpy_standard_job(Bundle(tiny).tensors)
    big = bundle_check.verify(tiny, "all", seed=5)
    assert small.ok and big.ok, (small.render(), big.render())
    assert [t.to_json() for t in small.tensors] == [t.to_json() for t in big.tensors]


def test_the_kernels_a_panel64_job_hands_to_the_helper(tiny):
    tensors = Bundle(tiny).tensors
    leaves = ["leaves.gemv_program", "neon.neon_program", "leaves.gemm_program"]
    scalar = ["dispatch._partials_kernel", "dispatch._rescale_kernel"]
    assert precompile.wanted(tensors, ("structure", "lossless", "agreement")) == leaves + scalar
    assert precompile.wanted(tensors, ("structure", "lossless")) == []
    rowmajor = [t for t in tensors if t.layout == "rowmajor"]
    assert precompile.wanted(rowmajor, ("agreement",)) == (scalar if any(
        t.qtype.scheme is not None and len(t.shape) == 2 for t in rowmajor) else [])
    assert precompile.wanted([t for t in tensors if len(t.shape) == 1], ("agreement",)) == []
    assert set(precompile.HELPER_SHARE) < set(leaves + scalar) and "neon.neon_program" not in precompile.HELPER_SHARE
    for name in leaves + scalar:
        assert isinstance(precompile.kernel(name), _jit.LazyKernel)
    # this process's own builds: the panel64 tiles of the bundle's types (the standard in
    # numpy), with the compiled standard also the rowmajor tiles; then the serial driver and the
    # kernels it is given (here the NEON program)
    mats = [t for t in tensors if t.qtype.scheme is not None and len(t.shape) == 2]
    panel = {C.spec("panel64", t.type).kernel for t in mats if t.layout == "panel64"}
    rows = {C.spec("rowmajor", t.type).kernel for t in mats}
    rows_own = {C.spec("rowmajor", t.type).kernel for t in mats if t.layout == "rowmajor"}
    assert panel and rows
    assert set(precompile.own_tiles(tensors, True)) == panel | rows_own
    assert set(precompile.own_tiles(tensors, False)) == panel | rows
    assert len(precompile.own_builds(tensors, True, ["neon.neon_program"])) == len(panel | rows_own) + 2


def test_no_helper_when_switched_off_or_warm(monkeypatch):
    monkeypatch.setenv(precompile.SWITCH, "0")
    assert precompile.start(["sme2.ptrue"], share=None) is None
    monkeypatch.delenv(precompile.SWITCH)
    precompile.kernel("sme2.ptrue").dispatcher  # noqa: B018 - built here: nothing left to hand over
    assert precompile.start(["sme2.ptrue"], share=None) is None
    assert precompile.start(["sme2.pfalse"], share=frozenset()) is None  # not the helper's share
    assert precompile.start([]) is None


def test_report_says_what_was_compiled():
    rep = bundle_check.Report("b", ("structure",), 0, 2, [], [], seconds=12.0, compiled_kernels=30,
                              compile_seconds=9.5, helper_kernels=20, helper_seconds=7.0)
    text = rep.render()
    assert "compiled 30 kernel(s), 9.5 s of the 12.0 s; 20 of them in a helper process" in text
    assert text.splitlines()[-1].startswith("verify OK")  # the verdict stays the last line
    assert rep.to_json()["compiled"] == {"kernels": 30, "seconds": 9.5, "helper_kernels": 20, "helper_seconds": 7.0}
    assert "first run" not in bundle_check.Report("b", ("structure",), 0, 2, [], []).render()


def test_parallel_driver_waits_until_it_pays(monkeypatch):
    monkeypatch.setattr(C, "_DRIVER", [])
    monkeypatch.setattr(_jit, "cached_on_disk", lambda fn: False)
    assert not C._parallel_pays(C.SERIAL_WORK - 1)
    assert not C._parallel_pays(C.PARALLEL_COLD_WORK - 1)  # cold: the serial driver
    assert C._parallel_pays(C.PARALLEL_COLD_WORK)
    monkeypatch.setattr(_jit, "cached_on_disk", lambda fn: True)
    assert C._parallel_pays(C.SERIAL_WORK)


# ---- a fresh process on an empty numba cache (cheap kernels only: a few seconds) --------------
_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from panelpack.formats.compile_meter import CompileMeter
    from panelpack.verify import precompile, sme2
    if sys.argv[1] == "fail":
        sys.executable = "/bin/false"  # the helper cannot run: this process compiles
    names = ["sme2.ptrue", "sme2.pfalse", "sme2.zero_za_tiles"]
    with CompileMeter() as meter:
        helper = precompile.start(names, share=None)
        P = np.ones((16, 64), np.uint8)
        sme2.ptrue(P, 3, 4)
        sme2.pfalse(P, 1)
        ZA = np.ones((64, 64), np.uint8)
        sme2.zero_za_tiles(ZA, 0x11)
        if helper is not None:
            helper.close()
    ok = (P[3] == np.tile([1, 0, 0, 0], 16)).all() and not P[1].any() and not ZA[::4].any() and ZA[1].all()
    print(json.dumps({"helper": helper is not None, "helper_kernels": helper.kernels if helper else 0,
                      "here": meter.kernels, "names": meter.names, "ok": bool(ok)}))
""")


def _cold_child(tmp_path, mode: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    env.pop(precompile.SWITCH, None)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", _CHILD, mode], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the helper needs two CPUs")
def test_cold_kernels_compile_in_the_helper_and_load_here(tmp_path):
    got = _cold_child(tmp_path, "helper")
    assert got["ok"] and got["helper"]
    assert got["helper_kernels"] == 3 and got["here"] == 0, got  # loaded from the helper's cache entries
    again = _cold_child(tmp_path, "helper")  # warm now: no helper, nothing compiled
    assert again["ok"] and not again["helper"] and again["here"] == 0


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the helper needs two CPUs")
def test_a_failing_helper_falls_back_to_compiling_here(tmp_path):
    got = _cold_child(tmp_path, "fail")
    assert got["ok"] and got["helper"] and got["helper_kernels"] == 0
    assert got["here"] == 3 and "panelpack.verify.sme2.ptrue" in got["names"], got


def test_no_helper_without_a_writable_cache(monkeypatch):
    """numba finds no cache folder it can write (its FunctionCache raises): no helper."""
    import numba.core.caching as caching

    def refuse(fn):
        raise RuntimeError("cannot cache function: no locator available")

    monkeypatch.setattr(caching, "FunctionCache", refuse)
    assert not precompile._cache_writable(precompile.kernel("sme2.pfalse"))
    monkeypatch.setattr(precompile, "_cold", lambda k: True)
    assert precompile.start(["sme2.pfalse"], share=None) is None


def test_compile_meter_counts_only_real_compilations(tmp_path):
    import numba

    with CompileMeter() as meter:
        numba.njit(cache=False)(lambda x: x + 1)(1)  # not ours: numba compiles, the meter does not count it
    assert meter.kernels == 0 and meter.summary() == ""


def _sleeper_helper(names):
    import tempfile

    proc = subprocess.Popen(["sleep", "60"])
    h = precompile.Helper(names, proc, tempfile.TemporaryFile(), tempfile.TemporaryFile())
    for n in names:
        _jit.before_build[precompile.kernel(n).key] = h.wait
    return h, proc


def test_a_helper_never_waited_for_is_stopped_at_the_end():
    h, proc = _sleeper_helper(["sme2.zero_za_vgx4"])
    h.close()
    assert proc.returncode is not None and proc.returncode != 0  # killed
    assert precompile.kernel("sme2.zero_za_vgx4").key not in _jit.before_build


def test_a_helper_that_takes_too_long_is_stopped_and_this_process_compiles(monkeypatch):
    monkeypatch.setattr(precompile, "WAIT_SECONDS", 0.0)  # (waits at least 1 s)
    h, proc = _sleeper_helper(["sme2.mova_tile_to_z_h"])
    h.wait()
    assert proc.returncode is not None and h.kernels == 0
    assert precompile.kernel("sme2.mova_tile_to_z_h").key not in _jit.before_build
    h.close()  # harmless after the wait
