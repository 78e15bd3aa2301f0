"""The C reference kernels (verify/native) against the standard dispatch: int32 partials P and
f32 outputs y identical, for every panel64 type under QEMU's SME2 (GEMV, GEMM, the NEON panel
path) and every interleaved form (AVX2 natively, NEON dot-product and i8mm under QEMU), at
M = 1, 16, 17 and N not a multiple of 64; negative tests (a flipped panel byte, a wrong ZT0 table,
a 256-bit streaming vector length) that the native path catches; the CLI's --native.

QEMU tests are slow except one cheap GEMV; all skip with the reason when a tool is absent
(.ci/run installs them).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from panelpack import repack
from panelpack.cli import main
from panelpack.formats import blocks, qtypes
from panelpack.formats.errors import UnsupportedError
from panelpack.verify import dispatch
from panelpack.verify.native import KERNELS, Session, not_requested
from panelpack.verify.native import toolchain as tc

from native_tools import require_build, require_qemu

PANEL_TYPES = sorted((t.name for t in repack.panel64.SOURCE_TYPES), key=lambda n: qtypes.get(n).id)
IL8 = [(lay, t.name) for lay in ("il8-nibble", "il8-int8", "ggml-x8") for t in sorted(repack.get(lay).SOURCE_TYPES, key=lambda t: t.id)]


def _tensor(layout: str, tname: str, n: int, k: int, seed: int = 0):
    t = qtypes.get(tname)
    x = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32)
    blk = blocks.quantize(x, t)
    lay = repack.get(layout)
    return t, blk, lay.pack(blk, n, k, t), lay.params(t, n, k)


def _standard(blk, n, k, t, m, seed=1):
    a, da = dispatch.quantize_activations(np.random.default_rng(seed).standard_normal((m, k)).astype(np.float32))
    c, s, o = dispatch.integer_form(blk, n, k, t)
    P = dispatch.partials_from_codes(c, a, t.group)
    return a, da, P, dispatch.rescale(P, dispatch.group_sums(a, t.group), s, o, da, t)


def _agree(results, P, y):
    assert results, "no native kernel ran"
    for path, Pn, yn in results:
        assert np.array_equal(Pn, P), f"{path}: P differs at {np.argwhere(Pn != P)[:1].tolist()}"
        assert np.array_equal(yn.view(np.uint32), y.view(np.uint32)), f"{path}: y differs"


@pytest.fixture(scope="module")
def qemu_session():
    require_qemu()
    require_build("aarch64")
    with Session("qemu") as s:
        yield s


# ---- fast tier ------------------------------------------------------------------------------
def test_the_build_tables_name_real_files():
    for target, sources in tc.TARGETS.items():
        for src in sources:
            assert (tc.SOURCE_DIR / src.name).is_file(), (target, src.name)
    assert (tc.SOURCE_DIR / "panelpack.h").is_file()
    for layout in KERNELS:
        repack.get(layout)  # every layout the native table names exists


def test_missing_tools_say_how_to_get_them(monkeypatch, tmp_path):
    monkeypatch.setenv("PANELPACK_QEMU", str(tmp_path / "no-qemu"))
    monkeypatch.setenv("PANELPACK_CLANG", str(tmp_path / "no-clang"))
    with pytest.raises(UnsupportedError, match="apt-get install clang-19") as e:
        Session("qemu")
    assert e.value.exit_code == 2
    line = not_requested()
    assert line.startswith("SKIPPED(") and "trixie-backports" in line and "clang-19" in line


def test_cheap_sme2_gemv_under_qemu(qemu_session):
    t, blk, reg, params = _tensor("panel64", "Q4_0", 70, 256)
    a, da, P, y = _standard(blk, 70, 256, t, 1)
    got = qemu_session.run("panel64", reg, 70, 256, t, params, a, da)
    assert [p for p, _, _ in got] == [f"native.sme2.gemv@{tc.qemu_label(tc.find_qemu())}",
                                      f"native.neon.panel@{tc.qemu_label(tc.find_qemu())}"]
    _agree(got, P, y)


def _leaves_agree_at_every_m(session, layout: str, tname: str) -> None:
    """The SME2 leaf (GEMV at M = 1, GEMM at 16 and 17) and the NEON path on a ``layout`` tensor
    of two super-blocks, the second 36 channels of padding: the standard partials and outputs."""
    n, k = 100, 512
    t, blk, reg, params = _tensor(layout, tname, n, k)
    for m in (1, 16, 17):
        a, da, P, y = _standard(blk, n, k, t, m, seed=m)
        got = session.run(layout, reg, n, k, t, params, a, da)
        want = {"native.sme2.gemv" if m == 1 else "native.sme2.gemm", "native.neon.panel"}
        assert {p.split("@")[0] for p, _, _ in got} == want
        _agree(got, P, y)


# ---- slow tier ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("tname", PANEL_TYPES)
def test_panel_leaves_every_type(qemu_session, tname):
    _leaves_agree_at_every_m(qemu_session, "panel64", tname)


@pytest.mark.slow
@pytest.mark.parametrize("layout,tname", IL8)
def test_interleaved_kernels_neon_i8mm_under_qemu(qemu_session, layout, tname):
    n, k = 24, 512
    t, blk, reg, _ = _tensor(layout, tname, n, k)
    for m in (1, 16, 17):
        a, da, P, y = _standard(blk, n, k, t, m, seed=m)
        got = qemu_session.run(layout, reg, n, k, t, {}, a, da)
        assert {p.split(".")[1] for p, _, _ in got} == {"neon", "i8mm"}
        _agree(got, P, y)


@pytest.mark.slow
@pytest.mark.skipif(tc.host_arch() != "x86_64", reason="the AVX2 kernels run on an x86_64 host")
@pytest.mark.parametrize("layout,tname", IL8)
def test_interleaved_kernels_avx2_on_the_host(layout, tname):
    require_build("x86_64")
    n, k = 40, 768
    t, blk, reg, _ = _tensor(layout, tname, n, k)
    with Session("host") as s:
        if not s.servers["host"].caps["avx2"]:
            pytest.skip("this CPU has no AVX2")
        for m in (1, 16, 17):
            a, da, P, y = _standard(blk, n, k, t, m, seed=m)
            got = s.run(layout, reg, n, k, t, {}, a, da)
            assert [p for p, _, _ in got] == [f"native.avx2.{'x8' if layout == 'ggml-x8' else 'il8'}@host"]
            _agree(got, P, y)


def _run_corrupted(session, layout: str, tname: str, n: int, k: int, corrupt):
    """The native paths of ``layout`` on a copy of a tensor's regions that ``corrupt(regions,
    qtype)`` changed in place: ``(standard P, the session's results)`` for M = 1 and 17."""
    t, blk, reg, params = _tensor(layout, tname, n, k)
    bad = {name: r.copy() for name, r in reg.items()}
    corrupt(bad, t)
    out = []
    for m in (1, 17):
        a, da, P, _ = _standard(blk, n, k, t, m)
        out.append((P, session.run(layout, bad, n, k, t, params, a, da)))
    return out


@pytest.mark.slow
def test_a_flipped_panel_byte_is_caught(qemu_session):
    def flip(regions, t):
        regions["panels"].reshape(-1).view(np.uint8)[777] ^= 0x10

    for tname in ("Q4_K", "Q6_K"):  # a nibble and an int8 panel
        for P, got in _run_corrupted(qemu_session, "panel64", tname, 64, 256, flip):
            for path, Pn, _ in got:
                assert not np.array_equal(Pn, P), f"{tname} {path} missed the flipped byte"


@pytest.mark.slow
def test_a_wrong_zt0_table_is_caught(qemu_session):
    n, k = 64, 256
    t, blk, reg, params = _tensor("panel64", "Q4_0", n, k)
    wrong = dict(params, zt0=list(repack.panel64.zt0_table(qtypes.Q4_1)))  # Q4_1's table: u, not u - 8
    for m in (1, 16):
        a, da, P, _ = _standard(blk, n, k, t, m)
        got = qemu_session.run("panel64", reg, n, k, t, wrong, a, da)
        assert got and all(not np.array_equal(Pn, P) for _, Pn, _ in got)


@pytest.mark.slow
def test_a_256_bit_streaming_vector_length_is_caught():
    require_qemu()
    require_build("aarch64")
    n, k = 64, 256
    t, blk, reg, params = _tensor("panel64", "Q4_K", n, k)
    a, da, P, y = _standard(blk, n, k, t, 1)
    with Session("qemu", qemu_cpu="max,sme256=on") as s:  # the gate: NEON runs, the ledger says why
        got = s.run("panel64", reg, n, k, t, params, a, da)
        assert [p.split("@")[0] for p, _, _ in got] == ["native.neon.panel"]
        _agree(got, P, y)
        assert "streaming vector length is 256 bits" in s.summary()
    with Session("qemu", qemu_cpu="max,sme256=on", env={"PPK_ANY_SVL": "1"}) as s:  # forced: wrong partials
        got = s.run("panel64", reg, n, k, t, params, a, da)
        sme = [Pn for p, Pn, _ in got if "sme2" in p]
        assert sme and not np.array_equal(sme[0], P)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["panel64", "il8-nibble"])
def test_verify_native_on_a_bundle(tmp_path, layout):
    require_qemu()
    require_build("aarch64")
    runner = CliRunner()
    res = runner.invoke(main, ["demo", "-o", str(tmp_path / "d.ppk"), "--layout", layout, "--verify", "none"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["verify", str(tmp_path / "d.ppk"), "--native", "--json", "-"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    paths = {p for t in rep["tensors"] for p in t["paths"]}
    q = tc.qemu_label(tc.find_qemu())
    want = ({f"native.sme2.gemv@{q}", f"native.sme2.gemm@{q}", f"native.neon.panel@{q}"} if layout == "panel64"
            else {f"native.neon.il8@{q}", f"native.i8mm.il8@{q}"} | ({"native.avx2.il8@host"} if tc.host_arch() == "x86_64" else set()))
    assert want <= paths, sorted(paths)
    assert rep["native"].startswith("ran ") and rep["ok"]


# ---- panel64-compact: the SME2 leaves on the bit-plane records -------------------------------
COMPACT_TYPES = sorted((t.name for t in repack.panel64_compact.COMPACT_TYPES), key=lambda n: qtypes.get(n).id)


def test_cheap_sme2_gemv_on_compact_records_under_qemu(qemu_session):
    t, blk, reg, params = _tensor("panel64-compact", "Q5_0", 70, 256)
    a, da, P, y = _standard(blk, 70, 256, t, 1)
    got = qemu_session.run("panel64-compact", reg, 70, 256, t, params, a, da)
    q = tc.qemu_label(tc.find_qemu())
    assert [p for p, _, _ in got] == [f"native.sme2.gemv@{q}", f"native.neon.panel@{q}"]
    _agree(got, P, y)


@pytest.mark.slow
@pytest.mark.parametrize("tname", COMPACT_TYPES + ["Q4_K", "Q8_0"])
def test_compact_records_every_type(qemu_session, tname):
    _leaves_agree_at_every_m(qemu_session, "panel64-compact", tname)


@pytest.mark.slow
def test_a_flipped_plane_bit_is_caught(qemu_session):
    def flip(regions, t):
        f = repack.panel64_compact.form(t)
        regions["panels"][0, 0, f.kq * 32 * f.base_bits] ^= 1  # plane bit of channel 0, K 0

    for tname in ("Q5_K", "Q3_K"):  # a LUTI4 and a LUTI2 base
        for P, got in _run_corrupted(qemu_session, "panel64-compact", tname, 64, 256, flip):
            assert got
            for path, Pn, _ in got:
                assert not np.array_equal(Pn[:, 0], P[:, 0]) and np.array_equal(Pn[:, 1:], P[:, 1:]), (tname, path)
