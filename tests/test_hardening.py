"""Issue 10 regressions: each test names its item, fails on the code before the fix and passes after.

Crashes become one-line errors, damaged bundles are refused, inputs are never clobbered,
legitimate inputs (hub-cache symlinks) are read, and the reports say what they checked.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import zstandard
from click.testing import CliRunner

from panelpack.cli import main
from panelpack.convert import convert
from panelpack.convert.example import write_tiny_llama
from panelpack.convert.gguf_export import export_gguf
from panelpack.formats import archive, describe, qtypes
from panelpack.formats import blocks as codecs
from panelpack.formats.bundle import manifest_text
from panelpack.formats.checkpoint import open_checkpoint
from panelpack.formats.errors import BadInputError, FormatError, OutputError, VerificationError
from panelpack.formats.safetensors import save_file
from panelpack.verify import bundle_check

from builders import tiny_llama_gguf

sys.path.insert(0, str(Path(__file__).parent))
import ggml_ref  # noqa: E402


def _strict_json(text: str):
    def no_constants(c):
        raise AssertionError(f"non-JSON constant {c}")

    return json.loads(text, parse_constant=no_constants)


@pytest.fixture(scope="module")
def gguf_src(tmp_path_factory):
    d = tmp_path_factory.mktemp("hard-gguf")
    tiny_llama_gguf(d / "m.gguf", n_layer=2, n_embd=256, n_ff=256, n_vocab=32)
    return d / "m.gguf"


@pytest.fixture(scope="module")
def gguf_bundle(tmp_path_factory, gguf_src):
    out = tmp_path_factory.mktemp("hard-bundle") / "m.ppk"
    convert(gguf_src, out, layout="panel64")
    return out


@pytest.fixture
def bundle(tmp_path, gguf_bundle):
    """A private copy to damage."""
    dst = tmp_path / "b.ppk"
    shutil.copytree(gguf_bundle, dst)
    return dst


def _hf(folder: Path, tensors: dict, config: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config or {"model_type": "llama", "num_hidden_layers": 1}))
    return folder


def _mats(rng, bad=None, at=(5, 17), scale=1.0):
    w = (rng.standard_normal((64, 256)) * scale).astype(np.float32)
    if bad is not None:
        w[at] = bad
    return {"model.layers.0.mlp.up_proj.weight": w,
            "model.layers.0.mlp.down_proj.weight": rng.standard_normal((64, 256)).astype(np.float32)}


# -- item 1: NaN / Inf / f16-overflowing scales ----------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_item1_nonfinite_weight_refused_with_name_and_index(tmp_path, rng, bad):
    src = _hf(tmp_path / "hf", _mats(rng, bad))
    with pytest.raises(BadInputError, match=r"model\.layers\.0\.mlp\.up_proj\.weight.*index \[5, 17\].*--allow-nonfinite"):
        convert(src, tmp_path / "o.ppk", quant="q4_0")
    assert not (tmp_path / "o.ppk").exists() and not list(tmp_path.glob(".o.ppk*"))
    r = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "o.ppk"), "--quant", "q4_0"])
    assert r.exit_code == 2 and "index [5, 17]" in r.output and "Traceback" not in r.output
    # with the flag it converts, and the manifest stays strict JSON with a ledger warning
    res = convert(src, tmp_path / "o.ppk", quant="q4_0", allow_nonfinite=True)
    doc = _strict_json((res.bundle / "manifest.json").read_text())
    led = {t["name"]: t["ledger"] for t in doc["tensors"]}["model.layers.0.mlp.up_proj.weight"]
    assert "non-finite source value" in led["error"]["warning"]


@pytest.mark.parametrize("big", [1e6, 1e10, 3e38])
def test_item1_f16_overflow_converts_as_ggml_and_ledger_says_so(tmp_path, rng, big):
    src = _hf(tmp_path / "hf", _mats(rng, big))
    res = convert(src, tmp_path / "o.ppk", quant="q4_0")
    doc = _strict_json((res.bundle / "manifest.json").read_text())
    t = {t["name"]: t for t in doc["tensors"]}["model.layers.0.mlp.up_proj.weight"]
    assert "f16 scale(s) overflowed" in t["ledger"]["error"]["warning"]
    assert "WARNING" in __import__("panelpack.convert.report", fromlist=["x"]).render_result(res)


@pytest.mark.skipif(not ggml_ref.available(), reason="libggml-python not installed")
@pytest.mark.parametrize("qname", ["q4_0", "q8_0", "q4_k"])
@pytest.mark.parametrize("big", [1e6, 7e4, 1e10, 3e38])
def test_item1_f16_overflow_blocks_match_ggml_reference(rng, qname, big):
    x = rng.standard_normal((4, 512)).astype(np.float32)
    x[0, 3] = big
    x[1, :] = big
    x[2, ::3] = -big
    ours = codecs.quantize(x, qtypes.get(qname))
    assert np.array_equal(ours, ggml_ref.quantize(x, qname))


def test_item1_manifest_writer_never_emits_nan():
    with pytest.raises(BadInputError, match=r"tensors\[1\]\.ledger\.error\.rel_rms is nan"):
        manifest_text({"format": "panelpack.bundle", "tensors": [{"a": 1.0}, {"ledger": {"error": {"rel_rms": float("nan")}}}]})
    with pytest.raises(BadInputError, match=r"model\.x is inf"):
        manifest_text({"model": {"x": float("inf")}})


# -- item 2: deeply nested manifest -------------------------------------------------------------------
def test_item2_deep_manifest_is_a_format_error(tmp_path, bundle):
    m = bundle / "manifest.json"
    text = m.read_text()
    m.write_text(text.replace('"created_by"', '"deep": ' + "[" * 100_000 + "]" * 100_000 + ', "created_by"', 1))
    with pytest.raises(FormatError, match="nested too deeply"):
        bundle_check.verify(bundle, level="structure")
    with pytest.raises(FormatError, match="nested too deeply"):
        export_gguf(bundle, tmp_path / "x.gguf")
    r = CliRunner().invoke(main, ["verify", str(bundle)])
    assert r.exit_code == 2 and "nested too deeply" in r.output


# -- item 4: internal errors have their own exit code ------------------------------------------------------
def test_item4_unexpected_exception_is_exit_3_one_line(monkeypatch, tmp_path):
    def boom(path):
        raise KeyError("surprise")

    monkeypatch.setattr(describe, "describe", boom)
    r = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert r.exit_code == 3
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "internal error, please report" in lines[0] and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["-v", "inspect", str(tmp_path)])
    assert r.exit_code == 3 and "Traceback" in r.output and "internal error, please report" in r.output


def test_item4_verification_failure_stays_exit_1(bundle):
    p = next((bundle / "tensors").iterdir())
    data = bytearray(p.read_bytes())
    data[100] ^= 1
    p.write_bytes(bytes(data))
    assert CliRunner().invoke(main, ["verify", str(bundle), "--level", "structure"]).exit_code == 1


# -- item 7: export refuses a damaged GGUF header ---------------------------------------------------------
def test_item7_export_refuses_damaged_header(tmp_path, bundle):
    h = bundle / "source" / "gguf-header.bin"
    data = bytearray(h.read_bytes())
    data[40] ^= 0x01  # inside the key/values; same length, so only the hash can tell
    h.write_bytes(bytes(data))
    with pytest.raises(VerificationError, match="gguf-header.bin"):
        export_gguf(bundle, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists() and not list(tmp_path.glob(".x.gguf*"))
    r = CliRunner().invoke(main, ["export", str(bundle), "-o", str(tmp_path / "x.gguf")])
    assert r.exit_code == 1 and not (tmp_path / "x.gguf").exists()


def test_item7_export_refuses_a_consistent_but_hostile_layout(tmp_path, bundle):
    import hashlib

    lp = bundle / "source" / "gguf-layout.json"
    doc = json.loads(lp.read_text())
    doc["tensors"][0]["offset"] = "x"
    lp.write_text(json.dumps(doc))
    m = json.loads((bundle / "manifest.json").read_text())
    for s in m["source_files"]:  # the hash updated too: only the schema check can refuse it
        if s["file"] == "source/gguf-layout.json":
            s["sha256"] = hashlib.sha256(lp.read_bytes()).hexdigest()
    (bundle / "manifest.json").write_text(manifest_text(m))  # resealed: only the schema check can refuse it
    with pytest.raises(FormatError, match="not a GGUF layout document"):
        export_gguf(bundle, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_item7_export_of_intact_bundle_is_identical(tmp_path, gguf_bundle, gguf_src):
    res = export_gguf(gguf_bundle, tmp_path / "x.gguf")
    assert res.identical and (tmp_path / "x.gguf").read_bytes() == gguf_src.read_bytes()


# -- item 8: pack checks first, unpack verifies what it wrote, size-bomb rule ------------------------------------
@pytest.mark.parametrize("damage", ["missing", "flip", "region"])
def test_item8_pack_refuses_what_verify_rejects(tmp_path, bundle, damage):
    m = json.loads((bundle / "manifest.json").read_text())
    t = m["tensors"][3]
    if damage == "missing":
        (bundle / t["file"]).unlink()
    elif damage == "flip":
        p = bundle / t["file"]
        d = bytearray(p.read_bytes())
        d[-1] ^= 0x80
        p.write_bytes(bytes(d))
    else:
        r = next(iter(t["regions"].values()))
        r["offset"] += 1
        (bundle / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(VerificationError, match="damaged bundle, not packing it"):
        archive.pack(bundle, tmp_path / "x.ppk.tar.zst")
    assert not (tmp_path / "x.ppk.tar.zst").exists()
    assert CliRunner().invoke(main, ["pack", str(bundle), "-o", str(tmp_path / "x.ppk.tar.zst")]).exit_code == 1


def test_item8_frames_have_checksums(tmp_path, gguf_bundle):
    arc = archive.pack(gguf_bundle, tmp_path / "x.ppk.tar.zst").path
    assert zstandard.get_frame_parameters(arc.read_bytes()[:18]).has_checksum


def _tar_zst(files: dict[str, bytes], declared: dict[str, int] | None = None) -> bytes:
    """A tar.zst of ``files``; ``declared``: members whose header claims a size and whose data
    is absent (a decompression bomb's shape, without writing the bytes)."""
    body = b""
    for name, data in files.items():
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        body += ti.tobuf(tarfile.PAX_FORMAT) + data + bytes(-len(data) % 512)
    for name, size in (declared or {}).items():
        ti = tarfile.TarInfo(name)
        ti.size = size
        body += ti.tobuf(tarfile.PAX_FORMAT)
    body += bytes(1024)
    return zstandard.ZstdCompressor(write_checksum=True).compress(body)


def test_item8_unpack_verifies_and_leaves_nothing(tmp_path, gguf_bundle):
    files = {p.relative_to(gguf_bundle).as_posix(): p.read_bytes()
             for p in sorted(gguf_bundle.rglob("*")) if p.is_file()}
    victim = sorted(k for k in files if k.startswith("tensors/"))[2]
    files[victim] = bytes(len(files[victim]))  # same size, wrong bytes: the manifest's hash catches it
    arc = tmp_path / "bad.ppk.tar.zst"
    arc.write_bytes(_tar_zst(files))
    with pytest.raises(VerificationError, match="damaged bundle, not unpacking it"):
        archive.unpack(arc, tmp_path / "out.ppk")
    assert sorted(os.listdir(tmp_path)) == ["bad.ppk.tar.zst"]


def test_item8_size_bomb_refused_unless_allowed(tmp_path, monkeypatch):
    arc = tmp_path / "bomb.ppk.tar.zst"
    arc.write_bytes(_tar_zst({"manifest.json": b"{}"}, declared={"tensors/zeros.bin": 1 << 30}))
    assert arc.stat().st_size < 64 << 10
    with pytest.raises(FormatError, match="decompression bomb.*--allow-large"):
        archive.unpack(arc, tmp_path / "out.ppk")
    assert sorted(os.listdir(tmp_path)) == ["bomb.ppk.tar.zst"]
    # the rule is a ratio: a real archive of zeros over it is refused too; --allow-large lifts it
    monkeypatch.setattr(archive, "LARGE_FLOOR", 1 << 20)
    zeros = tmp_path / "z.ppk.tar.zst"
    zeros.write_bytes(_tar_zst({"manifest.json": b"{}", "source/zeros.bin": bytes(4 << 20)}))
    with pytest.raises(FormatError, match="decompression bomb"):
        archive.unpack(zeros, tmp_path / "out.ppk")
    with pytest.raises(FormatError, match="field 'format'"):  # past the size rule: the empty manifest is refused
        archive.unpack(zeros, tmp_path / "out.ppk", allow_large=True)
    r = CliRunner().invoke(main, ["unpack", str(arc), "-o", str(tmp_path / "o.ppk")])
    assert r.exit_code == 2 and "--allow-large" in r.output


# -- item 9: no symlinks in bundles ---------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["tensor", "source", "folder"])
def test_item9_symlinks_refused_everywhere_a_bundle_is_read(tmp_path, bundle, where):
    outside = tmp_path / "outside"
    outside.mkdir()
    if where == "tensor":
        p = sorted((bundle / "tensors").iterdir())[1]
    elif where == "source":
        p = bundle / "source" / "gguf-header.bin"
    else:
        p = bundle / "source"
    target = outside / p.name
    shutil.move(str(p), str(target))  # identical content: every hash still matches
    p.symlink_to(target)
    with pytest.raises(FormatError, match="symbolic link"):
        bundle_check.verify(bundle, level="structure")
    with pytest.raises(FormatError, match="symbolic link"):
        export_gguf(bundle, tmp_path / "x.gguf")
    with pytest.raises(BadInputError, match="symbolic link|not a regular file"):
        archive.pack(bundle, tmp_path / "x.ppk.tar.zst")
    with pytest.raises(FormatError, match="symbolic link"):
        describe.describe(bundle)
    assert not (tmp_path / "x.gguf").exists()


# -- item 10: outputs never clobber inputs ------------------------------------------------------------------
def test_item10_convert_output_is_inside_or_contains_the_source(tmp_path):
    src = write_tiny_llama(tmp_path / "hf")
    before = sorted(os.listdir(src))
    for out, force in ((src, True), (src / "sub.ppk", False), (tmp_path, True)):
        with pytest.raises(OutputError, match="is the source|inside the source|contains the source"):
            convert(src, out, quant="q4_0", force=force)
    assert sorted(os.listdir(src)) == before
    r = CliRunner().invoke(main, ["convert", str(src), "-o", str(src), "--quant", "q4_0", "--force"])
    assert r.exit_code == 2 and sorted(os.listdir(src)) == before


def test_item10_force_replaces_only_a_bundle(tmp_path, gguf_src):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "thesis.txt").write_text("precious")
    with pytest.raises(OutputError, match="not a panelpack bundle"):
        convert(gguf_src, folder, force=True)
    r = CliRunner().invoke(main, ["demo", "-o", str(folder), "--verify", "none"])
    assert r.exit_code == 2 and (folder / "thesis.txt").read_text() == "precious"
    convert(gguf_src, tmp_path / "b.ppk")
    convert(gguf_src, tmp_path / "b.ppk", force=True)  # a bundle is still replaced


def test_item10_every_command_refuses_overlap(tmp_path, bundle):
    arc = archive.pack(bundle, tmp_path / "a.ppk.tar.zst").path
    with pytest.raises(OutputError, match="inside the bundle"):
        export_gguf(bundle, bundle / "x.gguf")
    with pytest.raises(OutputError, match="inside the bundle"):
        archive.pack(bundle, bundle / "x.ppk.tar.zst")
    with pytest.raises(OutputError, match="is the archive"):
        archive.unpack(arc, arc, force=True)
    with pytest.raises(OutputError, match="contains the archive"):
        archive.unpack(arc, tmp_path, force=True)
    assert arc.is_file()
    r = CliRunner().invoke(main, ["verify", str(bundle), "--level", "structure", "--json", str(bundle / "r.json")])
    assert r.exit_code == 2 and not (bundle / "r.json").exists()
    from panelpack.formats import guard

    with pytest.raises(OutputError):
        guard.check_disjoint(tmp_path / "a" / "b", tmp_path / "a")


# -- item 13: Hugging Face hub cache (symlinked shards) --------------------------------------------------------
def test_item13_hub_cache_layout_is_read(tmp_path, rng):
    repo = tmp_path / "models--org--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / "0123abcd"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    staging = tmp_path / "staging"
    staging.mkdir()
    w0 = rng.standard_normal((64, 256)).astype(np.float32)
    w1 = rng.standard_normal((64, 256)).astype(np.float32)
    save_file({"model.layers.0.mlp.up_proj.weight": w0}, staging / "model-00001-of-00002.safetensors")
    save_file({"model.layers.1.mlp.up_proj.weight": w1}, staging / "model-00002-of-00002.safetensors")
    (staging / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model.layers.0.mlp.up_proj.weight": "model-00001-of-00002.safetensors",
        "model.layers.1.mlp.up_proj.weight": "model-00002-of-00002.safetensors"}}))
    (staging / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    import hashlib

    for f in staging.iterdir():  # the hub's shape: content-addressed blobs, relative links
        h = hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.move(str(f), str(blobs / h))
        (snap / f.name).symlink_to(Path("..") / ".." / "blobs" / h)
    with open_checkpoint(snap) as ck:
        assert np.array_equal(ck.array("model.layers.1.mlp.up_proj.weight"), w1)
    res = convert(snap, tmp_path / "o.ppk", quant="q8_0")
    assert bundle_check.verify(res.bundle, level="lossless").ok
    assert (res.bundle / "source" / "config.json").is_file() and not (res.bundle / "source" / "config.json").is_symlink()
    # a name that leaves the folder is still refused
    (snap / "model.safetensors.index.json").unlink()
    (snap / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../../blobs/x"}}))
    with pytest.raises(FormatError, match="outside the folder"):
        open_checkpoint(snap)


# -- item 14: quantization-error warning ----------------------------------------------------------------------
def test_item14_all_subnormal_matrix_warns(tmp_path, rng):
    src = _hf(tmp_path / "hf", _mats(rng, scale=1e-40))
    res = convert(src, tmp_path / "o.ppk", quant="q4_0")
    row = {r["name"]: r for r in res.ledger}["model.layers.0.mlp.up_proj.weight"]
    assert row["error"]["rel_rms"] == pytest.approx(1.0) and "above 0.3" in row["error"]["warning"]
    assert "not represent" in row["error"]["warning"]
    from panelpack.convert import report

    text = report.render_result(res)
    assert "WARNING: 1 tensor(s) quantized badly" in text and "model.layers.0.mlp.up_proj.weight" in text
    ok = {r["name"]: r for r in res.ledger}["model.layers.0.mlp.down_proj.weight"]
    assert "warning" not in ok["error"]


# -- item 15: the summary counts fallbacks from the ledger ------------------------------------------------------
def test_item15_requantized_in_layout_is_not_a_fallback(tmp_path, gguf_src):
    from panelpack.convert import report

    res = convert(gguf_src, tmp_path / "o.ppk", layout="ggml-x8", requant="q4_0")
    requant = [r for r in res.ledger if r.get("reason") and r["written"] == "ggml-x8"]
    assert requant, "the fixture must have re-quantized tensors in the requested layout"
    fallbacks = sum(1 for r in res.ledger if r["written"] != r["requested"])
    assert f"{fallbacks} tensor(s) not in the requested layout" in report.render_result(res)
    assert res.plan.to_json()["fallbacks"] == fallbacks


# -- item 16: lossless level shows what passed -----------------------------------------------------------------
def test_item16_lossless_level_says_passed(gguf_bundle):
    rep = bundle_check.verify(gguf_bundle, level="lossless")
    verdicts = {t.verdict for t in rep.tensors}
    assert rep.ok and not any(v.startswith("SKIPPED(level") for v in verdicts)
    assert "PASSED(structure, lossless)" in verdicts
    assert "PASSED" in rep.render() and "SKIPPED(level" not in rep.render()


# -- item 17: progress and the cold-cache notice ----------------------------------------------------------------
def test_item17_verify_reports_progress(gguf_bundle):
    seen = {"start": None, "n": 0}

    class P:
        def start(self, n):
            seen["start"] = n

        def __call__(self, v):
            seen["n"] += 1

    rep = bundle_check.verify(gguf_bundle, level="structure", progress=P())
    assert seen["start"] == len(rep.tensors) == seen["n"]


def test_item17_cold_cache_notice_once(tmp_path, monkeypatch):
    from panelpack.formats import _jit

    mod = tmp_path / "coldmod_harden.py"
    mod.write_text("from panelpack.formats._jit import lazy_njit\n\n"
                   "@lazy_njit('int64(int64)')\ndef plus_one(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_jit, "_cold_announced", False)
    calls = []
    monkeypatch.setattr(_jit, "cold_cache_hooks", [lambda: calls.append(1)])
    import importlib

    m = importlib.import_module("coldmod_harden")
    assert m.plus_one(1) == 2 and calls == [1]
    monkeypatch.setattr(_jit, "_cold_announced", False)
    warm = _jit.LazyKernel(m.plus_one.py_func, "int64(int64)", {"cache": True})
    assert warm(2) == 3 and calls == [1]  # loaded from the cache now: no notice


# -- item 18: inspect describes bundles --------------------------------------------------------------------------
def test_item18_inspect_bundle_and_archive(tmp_path, gguf_bundle):
    doc = describe.describe(gguf_bundle)
    assert doc["format"] == "panelpack.inspect.bundle"
    assert {r["layout"] for r in doc["layouts"]} >= {"panel64", "rowmajor"}
    assert doc["ledger"]["fallbacks"] + doc["ledger"]["in_requested_layout"] == doc["totals"]["tensors"]
    assert doc["source"]["kind"] == "gguf"
    text = describe.render(doc)
    assert "layouts written" in text and "ledger" in text
    assert (doc["bundle"]["format_version"], doc["bundle"]["digest"]) == (2, "blake3")
    assert "version 2, blake3 digests" in text
    arc = archive.pack(gguf_bundle, tmp_path / "a.ppk.tar.zst").path
    assert describe.describe(arc)["bundle"]["archive"] is True
    r = CliRunner().invoke(main, ["inspect", str(gguf_bundle)])
    assert r.exit_code == 0 and "no weights found" not in r.output and "types written" in r.output


# -- item 19: help and messages ------------------------------------------------------------------------------------
def test_item19_help_texts_and_messages(tmp_path):
    r = CliRunner().invoke(main, ["convert", "--help"])
    text = " ".join(r.output.split())
    assert "Required, unless --dry-run" in text and "Helps when cores are idle" in text
    r = CliRunner().invoke(main, ["demo", "--help"])
    text = " ".join(r.output.split())
    # the demo's --layout/--quant have help, and their choices come from the registries (issue 9)
    from panelpack.convert.policy import QUANT_CHOICES

    assert "see `panelpack layouts`" in text and "Quantize the demo's matrices" in text
    assert "|".join(QUANT_CHOICES) in text.replace(" ", "")
    r = CliRunner().invoke(main, ["unpack", str(tmp_path), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "is a folder" in r.output and "no such archive" not in r.output
    r = CliRunner().invoke(main, ["layouts"])
    assert "invertible" in r.output and "unpacks to the source blocks" in r.output and "LUTI4" in r.output


# -- item 20: hostile hyperparameters ----------------------------------------------------------------------------------
@pytest.mark.parametrize("config, words", [
    ({"num_hidden_layers": 1e30, "hidden_size": 256}, ["n_layer", "1e+30"]),
    ({"num_hidden_layers": 1, "hidden_size": -1}, ["n_embd", "-1"]),
    ({"num_hidden_layers": 7}, ["n_layer is 7", "layers 0 .. 0"]),
    ({"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 8}, ["n_head_kv is 8"]),
])
def test_item20_hyperparameters_checked_against_tensors(tmp_path, rng, config, words):
    src = _hf(tmp_path / "hf", _mats(rng), {"model_type": "llama", **config})
    with pytest.raises(BadInputError, match="hyperparameters") as e:
        convert(src, tmp_path / "o.ppk", quant="q4_0")
    assert all(w in str(e.value) for w in words), str(e.value)
    doc = describe.describe(src)
    assert doc["hyperparameter_problems"] and "PROBLEM" in describe.render(doc)


def test_item20_real_configs_are_consistent(smollm2):
    with open_checkpoint(smollm2) as ck:
        from panelpack.formats import hparams

        assert hparams.check_checkpoint(ck) == []

