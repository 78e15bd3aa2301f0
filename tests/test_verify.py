"""``panelpack verify``: every level, the dispatch ledger, and one negative test per failure class."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from panelpack.cli import main
from panelpack.convert import convert
from panelpack.formats import archive
from panelpack.formats.bundle import manifest_text
from panelpack.formats.errors import BadInputError, FormatError
from panelpack.verify import _simd, bundle_check

from builders import rehash_entry, tiny_llama_gguf


@pytest.fixture(scope="module")
def gguf_bundle(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("vb")
    tiny_llama_gguf(d / "tiny.gguf")
    # panel64's int8 panels (Q5_x, Q6_K), which these tests read; the compact default: test_verify_compact
    return convert(d / "tiny.gguf", d / "tiny.ppk", layout="panel64:int8").bundle


@pytest.fixture
def bundle(tmp_path, gguf_bundle) -> Path:
    """A private copy each test may damage."""
    dst = tmp_path / "copy.ppk"
    shutil.copytree(gguf_bundle, dst)
    return dst


def _manifest(b: Path) -> dict:
    return json.loads((b / "manifest.json").read_text())


def _write_manifest(b: Path, m: dict) -> None:
    """Write an edited manifest sealed with a valid checksum, as a buggy writer would."""
    (b / "manifest.json").write_text(manifest_text(m))


def _entry(m: dict, name: str) -> dict:
    return next(t for t in m["tensors"] if t["name"] == name)


def _rehash(b: Path, name: str) -> None:
    """Recompute a tensor's file and region hashes, as a buggy packer would have written them."""
    m = _manifest(b)
    t = _entry(m, name)
    rehash_entry(m, t, (b / t["file"]).read_bytes())
    _write_manifest(b, m)


def _patch(b: Path, name: str, region: str, fn) -> None:
    t = _entry(_manifest(b), name)
    r = t["regions"][region]
    path = b / t["file"]
    data = bytearray(path.read_bytes())
    fn(data, r["offset"], r["bytes"])
    path.write_bytes(bytes(data))


def _verdict(rep, name):
    return next(t for t in rep.tensors if t.name == name)


Q4_0 = "blk.0.attn_q.weight"  # Q4_0 matrix in panel64
Q6_K = "blk.1.attn_v.weight"  # Q6_K: int8 panels, 16-groups
Q4_K = "blk.0.ffn_gate.weight"


# -- a good bundle --------------------------------------------------------------------------
def test_good_bundle_agrees_on_every_path(gguf_bundle):
    rep = bundle_check.verify(gguf_bundle, level="all", seed=3)
    assert rep.ok, rep.render()
    v = _verdict(rep, Q4_0)
    assert v.verdict == "AGREE"
    compiled_path = "compiled.panel64.avx2" if _simd.AVAILABLE else "compiled.panel64"  # Q4_0: nibble panels
    assert v.paths == ["standard", compiled_path, "sme2.gemv.luti4_sdot", "neon.panel", "sme2.gemm.luti4_smopa"]
    assert v.levels == {"structure": "ok", "lossless": "ok", "agreement": "ok"}
    assert 0 < v.max_error < 0.05
    assert "sme2.gemm.ld1b_smopa" in _verdict(rep, Q6_K).paths
    out = _verdict(rep, "output.weight")  # N = 100: a padded tail super-block
    assert out.verdict == "AGREE"
    norm = _verdict(rep, "blk.0.attn_norm.weight")
    assert norm.verdict.startswith("FALLBACK(1-D tensor") and norm.ok
    # 15 matrices, of which layer 1's F16 ffn_gate and BF16 ffn_up stay rowmajor (no --requant)
    assert rep.counts()["AGREE"] == 13
    assert _verdict(rep, "blk.1.ffn_gate.weight").verdict.startswith("FALLBACK(F16 matrix")


@pytest.mark.parametrize("layout", ["ggml-x8", "il8-nibble", "il8-int8", "rowmajor"])
def test_other_layouts_agree(tmp_path, gguf_bundle, layout):
    src = tmp_path / "tiny.gguf"
    tiny_llama_gguf(src)
    b = convert(src, tmp_path / f"{layout}.ppk", layout=layout).bundle
    rep = bundle_check.verify(b, level="all")
    assert rep.ok, rep.render()
    if layout != "rowmajor":
        v = _verdict(rep, Q4_0)
        assert v.layout == layout and "il8.gemm" in v.paths and f"compiled.{layout}" in v.paths
    if layout == "il8-nibble":  # Q4_K baked products: not invertible, still checked numerically
        v = _verdict(rep, Q4_K)
        assert v.verdict == "AGREE" and v.levels["lossless"].startswith("skipped")


def test_archive_is_verified_too(tmp_path, gguf_bundle):
    arc = archive.pack(gguf_bundle, tmp_path / "t.ppk.tar.zst").path
    assert bundle_check.verify(arc, level="structure").ok


def test_levels_and_json(tmp_path, gguf_bundle):
    rep = bundle_check.verify(gguf_bundle, level="structure")
    assert rep.ok and rep.levels == ("structure",)
    assert _verdict(rep, Q4_0).verdict == "PASSED(structure)"  # what was checked, not SKIPPED
    doc = rep.to_json()
    assert doc["ok"] and doc["tensors"][0]["verdict"]
    with pytest.raises(BadInputError, match="unknown level"):
        bundle_check.verify(gguf_bundle, level="everything")


# -- one failure per class --------------------------------------------------------------------
def test_flipped_panel_byte_fails_structure_and_names_the_region(bundle):
    _patch(bundle, Q4_0, "panels", lambda d, o, n: d.__setitem__(o + 77, d[o + 77] ^ 0x10))
    rep = bundle_check.verify(bundle, level="structure")
    v = _verdict(rep, Q4_0)
    assert not rep.ok and v.verdict == "MISMATCH"
    assert "blake3 of " in v.problems[0] and "damaged region: panels" in v.problems[0]


def test_flipped_panel_byte_with_consistent_hashes_fails_lossless(bundle):
    _patch(bundle, Q4_0, "panels", lambda d, o, n: d.__setitem__(o + 77, d[o + 77] ^ 0x10))
    _rehash(bundle, Q4_0)
    rep = bundle_check.verify(bundle, level="lossless")
    v = _verdict(rep, Q4_0)
    assert not rep.ok and "lossless: blocks restored from panel64 differ" in v.problems[0]


def test_swapped_scale_bytes_fail(bundle):
    def swap(d, o, n):
        d[o + 0], d[o + 3] = d[o + 3], d[o + 0]

    _patch(bundle, Q4_0, "d", swap)
    _rehash(bundle, Q4_0)
    rep = bundle_check.verify(bundle, level="all")
    v = _verdict(rep, Q4_0)
    assert not rep.ok and v.verdict == "MISMATCH" and "lossless" in v.problems[0]


def test_wrong_layout_name_in_manifest_fails(bundle):
    m = _manifest(bundle)
    _entry(m, Q4_0)["layout"] = "il8-nibble"
    _entry(m, Q4_0)["ledger"]["written"] = "il8-nibble"
    _write_manifest(bundle, m)
    rep = bundle_check.verify(bundle, level="all")
    v = _verdict(rep, Q4_0)
    assert not rep.ok and "are not what layout il8-nibble writes" in v.problems[0]


def test_wrong_zt0_table_fails(bundle):
    m = _manifest(bundle)
    _entry(m, Q4_0)["params"]["zt0"][0] = 7
    _write_manifest(bundle, m)
    rep = bundle_check.verify(bundle, level="structure")
    assert "param 'zt0'" in _verdict(rep, Q4_0).problems[0]


def test_panels_read_at_svl_256_mismatch_and_say_where(gguf_bundle):
    rep = bundle_check.verify(gguf_bundle, level="agreement", svl_bits=256, names=[Q4_0, Q6_K])
    assert not rep.ok
    for name in (Q4_0, Q6_K):
        v = _verdict(rep, name)
        assert v.verdict == "MISMATCH" and "sme2.svl256.ref" in v.paths
        p = next(p for p in v.problems if p.startswith("sme2.svl256.ref P"))
        assert "[m=0, n=" in p and ", g=" in p and "standard" in p  # the first differing (m, n, g), both values


def test_missing_file_fails(bundle):
    m = _manifest(bundle)
    (bundle / _entry(m, Q4_0)["file"]).unlink()
    rep = bundle_check.verify(bundle, level="structure")
    assert not rep.ok and "is missing" in _verdict(rep, Q4_0).problems[0]


def test_unexplained_fallback_fails(bundle):
    m = _manifest(bundle)
    _entry(m, "blk.0.attn_norm.weight")["ledger"]["reason"] = None
    _write_manifest(bundle, m)
    rep = bundle_check.verify(bundle, level="structure")
    v = _verdict(rep, "blk.0.attn_norm.weight")
    assert not rep.ok and v.verdict == "FALLBACK(unexplained)"


def test_bad_input_is_not_a_verification_failure(tmp_path, bundle):
    with pytest.raises(BadInputError):
        bundle_check.verify(tmp_path / "nope")
    (bundle / "manifest.json").write_text("{")
    with pytest.raises(FormatError):
        bundle_check.verify(bundle)


# -- the CLI --------------------------------------------------------------------------------
def test_cli_exit_codes(tmp_path, bundle, gguf_bundle):
    run = CliRunner().invoke
    r = run(main, ["verify", str(gguf_bundle), "--level", "structure", "--json", str(tmp_path / "r.json")])
    assert r.exit_code == 0 and "verify OK" in r.output
    assert json.loads((tmp_path / "r.json").read_text())["ok"] is True
    r = run(main, ["verify", str(gguf_bundle), "--level", "structure", "--json", "-"])
    assert r.exit_code == 0 and json.loads(r.output)["ok"] is True
    _patch(bundle, Q4_0, "panels", lambda d, o, n: d.__setitem__(o, d[o] ^ 1))
    r = run(main, ["verify", str(bundle), "--level", "structure"])
    assert r.exit_code == 1 and f"MISMATCH {Q4_0}" in r.output and "verify FAILED" in r.output
    r = run(main, ["verify", str(tmp_path / "missing.ppk")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    r = run(main, ["verify", str(gguf_bundle), "--svl-bits", "256", "--tensor", Q4_0, "--level", "agreement"])
    assert r.exit_code == 1 and "sme2.svl256.ref P [m=0" in r.output


# -- real checkpoints ---------------------------------------------------------------------
def _verified_real_bundle(request, tmp_path, which: str, **how):
    """A whole real checkpoint (fixture ``which``) converted and verified ``how``; it must pass."""
    b = convert(request.getfixturevalue(which), tmp_path / "r.ppk").bundle
    rep = bundle_check.verify(b, **how)
    assert rep.ok, rep.render()
    return rep


@pytest.mark.slow
@pytest.mark.real
@pytest.mark.parametrize("which", ["smollm2", "gemma"])
def test_real_bundles_agree_sampled(request, tmp_path, which):
    rep = _verified_real_bundle(request, tmp_path, which, level="all", sample=1)
    assert rep.counts()["AGREE"] == {"smollm2": 210, "gemma": 126}[which]


@pytest.mark.real
def test_real_layer_agrees(smollm2, tmp_path):
    """The fast tier's real model on the verify path: SmolLM2's first layer (its seven Q4_1
    matrices in panel64 and its norms), every level."""
    b = convert(smollm2, tmp_path / "r.ppk", include=["blk.0.*"]).bundle
    rep = bundle_check.verify(b, level="all", sample=1)
    assert rep.ok, rep.render()
    assert rep.counts()["AGREE"] == 7


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("which", ["smollm2", "gemma"])
def test_real_bundles_agree_all_rows(request, tmp_path, which):
    _verified_real_bundle(request, tmp_path, which, level="agreement", sample=0, seed=1)
