"""Issue 24 regressions: what runs or ships is checked first, extra files are flagged, no local
file leaks into a bundle, hostile names cannot spoof a line, and the crashes that were are
one-line errors. (Signatures: tests/test_signing.py.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tarfile
from pathlib import Path

import numpy as np
import pytest
import zstandard
from click.testing import CliRunner

from panelpack.cli import main
from panelpack.convert import convert
from panelpack.convert.example import write_tiny_llama
from panelpack.formats import archive
from panelpack.formats import bundle as B
from panelpack.formats.errors import BadInputError, FormatError, VerificationError
from panelpack.formats.text import escape, escape_text, table
from panelpack.verify import gate
from panelpack.verify.runtime import Model, evaluate, llama_peer

from builders import build_gguf, random_blocks


def _run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The demo's bundle (the embedded tiny Llama, q4_k in panel64; numpy only: ~2 s)."""
    d = tmp_path_factory.mktemp("trust-demo")
    src = write_tiny_llama(d / "hf")
    return convert(src, d / "tiny.ppk", quant="q4_k").bundle


@pytest.fixture
def damaged(demo, tmp_path) -> Path:
    """A copy with one byte of one tensor file flipped."""
    b = tmp_path / "d.ppk"
    shutil.copytree(demo, b)
    f = sorted((b / "tensors").iterdir())[3]
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    return b


def _one_line_refusal(code: int, out: str, doing: str) -> None:
    assert code == 1, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and f"damaged bundle, not {doing} it" in lines[0] and "does not match" in lines[0], out


# -- item 2: what runs or ships is checked first -------------------------------------------------------
def test_damaged_bundle_is_refused_by_eval_generate_pack(damaged, tmp_path):
    _one_line_refusal(*_run("eval", damaged, "--tokens", "4"), "running")
    _one_line_refusal(*_run("generate", damaged, "--prompt", "a", "-n", "1"), "running")
    _one_line_refusal(*_run("pack", damaged, "-o", tmp_path / "x.ppk.tar.zst"), "packing")
    assert not (tmp_path / "x.ppk.tar.zst").exists()
    with pytest.raises(VerificationError, match="damaged bundle, not running it"):
        Model.open(damaged)


def test_damaged_bundle_is_refused_by_export(tmp_path):
    rng = np.random.default_rng(3)
    build_gguf(tmp_path / "s.gguf", {"blk.0.ffn_up.weight": ("Q4_0", random_blocks("Q4_0", 64, 64, rng))})
    b = convert(tmp_path / "s.gguf", tmp_path / "s.ppk").bundle
    side = b / "source" / "gguf-layout.json"  # still valid JSON: only the bundle's digest says it changed
    side.write_bytes(side.read_bytes().replace(b"{", b"{ ", 1))
    _one_line_refusal(*_run("export", b, "-o", tmp_path / "back.gguf"), "exporting")
    assert not (tmp_path / "back.gguf").exists()


def _reseal_edit(src: Path, dst: Path, fn) -> Path:
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    fn(m)
    (dst / "manifest.json").write_text(B.manifest_text(m))
    return dst


def _panel_entry(m) -> dict:
    return next(t for t in m["tensors"] if t["layout"] == "panel64")


@pytest.mark.parametrize("edit", ["param", "layout", "region-dtype"])
def test_a_broken_layout_contract_is_neither_packed_nor_unpacked(demo, tmp_path, edit):
    """The resealed manifests verify's structure level rejects through the layout contract
    (pack and unpack used to accept them: they checked the files only)."""
    def fn(m):
        t = _panel_entry(m)
        if edit == "param":
            t["params"][next(iter(t["params"]))] = 12345
        elif edit == "layout":
            t["layout"] = "il8-int8"
        else:
            r = next(iter(t["regions"].values()))
            r["dtype"], r["shape"] = "i8", [r["bytes"]]
    b = _reseal_edit(demo, tmp_path / "c.ppk", fn)
    code, out = _run("verify", b, "--level", "structure")
    assert code == 1
    _one_line_refusal_any = _run("pack", b, "-o", tmp_path / "c.ppk.tar.zst")
    assert _one_line_refusal_any[0] == 1 and "damaged bundle, not packing it" in _one_line_refusal_any[1]
    arc = tmp_path / "raw.ppk.tar.zst"  # packed without the layout check, as a hostile packer would
    archive.pack(b, arc, check=lambda bundle: [])
    code, out = _run("unpack", arc, "-o", tmp_path / "u.ppk")
    assert code == 1 and "damaged bundle, not unpacking it" in out and not (tmp_path / "u.ppk").exists()


def test_the_front_door_ships_through_the_gate(damaged, tmp_path):
    import panelpack

    assert panelpack.pack is gate.pack and panelpack.unpack is gate.unpack and panelpack.sign is gate.sign
    with pytest.raises(VerificationError, match="not packing it"):
        panelpack.pack(damaged, tmp_path / "x.ppk.tar.zst")


def test_the_gate_is_verifys_structure_level(demo, damaged):
    assert gate.structure_problems(B.Bundle(demo)) == []
    assert gate.structure_problems(B.Bundle(damaged))


# -- item 3: completeness against the model ------------------------------------------------------------------
def _forge_deleted_tensor(demo: Path, dst: Path, name_part: str) -> Path:
    """The consistent forgery: a tensor deleted, its file removed, the source tensor list fixed up
    (count and sha256) and the manifest resealed: every file matches its manifest."""
    def fn(m):
        gone = next(t for t in m["tensors"] if name_part in t["name"])
        m["tensors"].remove(gone)
        listed = m["source"]["tensor_list"]
        listed["tensors"] = [t for t in listed["tensors"] if t["name"] != gone["name"]]
        listed["count"] = len(listed["tensors"])
        listed["sha256"] = B.sha256_bytes(B._canonical(listed["tensors"]))
        fn.file = gone["file"]
    b = _reseal_edit(demo, dst, fn)
    (b / fn.file).unlink()
    return b


def test_a_deleted_tensor_with_a_fixed_up_list_fails(demo, tmp_path):
    b = _forge_deleted_tensor(demo, tmp_path / "f.ppk", "layers.1.mlp.up_proj")
    assert B.Bundle(b).check_structure() == []  # the files agree with the manifest
    code, out = _run("verify", b, "--level", "structure")
    assert code == 1 and "PROBLEM model: llama: model.layers.1.mlp.up_proj.weight is missing" in out, out
    _one_line_refusal_any = _run("pack", b, "-o", tmp_path / "f.tar.zst")
    assert _one_line_refusal_any[0] == 1


def test_hyperparameters_that_disagree_with_the_source_fail(demo, tmp_path):
    b = _reseal_edit(demo, tmp_path / "h.ppk", lambda m: m["model"].update(n_ff=512))
    code, out = _run("verify", b, "--level", "structure")
    assert code == 1 and "n_ff is 512 in the manifest, [736, 736] in the source's hyperparameters" in out, out


def test_a_tensor_of_the_wrong_shape_for_the_model_fails(demo, tmp_path):
    """config.json edited (and its digest recorded, the manifest resealed) to a model the tensors are not."""
    def fn(m):
        cfg = json.loads((demo / "source" / "config.json").read_text())
        cfg["intermediate_size"] = 512
        data = (json.dumps(cfg) + "\n").encode()
        fn.data = data
        for s in m["source_files"]:
            if s["file"] == "source/config.json":
                s["sha256"], s["bytes"] = B.sha256_bytes(data), len(data)
    b = _reseal_edit(demo, tmp_path / "s.ppk", fn)
    (b / "source" / "config.json").write_bytes(fn.data)
    code, out = _run("verify", b, "--level", "structure")
    assert code == 1 and "the hyperparameters imply (512, 256)" in out, out


def test_excluded_tensors_are_not_missing(tmp_path):
    src = write_tiny_llama(tmp_path / "hf")
    b = convert(src, tmp_path / "x.ppk", quant="q4_k", exclude=["*.mlp.up_proj.*"]).bundle
    assert gate.model_problems(B.Bundle(b)) == []


# -- item 2: extra files -------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", ["notes.txt", ".DS_Store", "tensors/99999-stray.bin", "source/extra.json",
                                   "junk/deep/file", "empty-folder/"])
def test_extra_files_fail_verify_and_are_never_packed(demo, tmp_path, extra):
    b = tmp_path / "x.ppk"
    shutil.copytree(demo, b)
    p = b / extra.rstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    if extra.endswith("/"):
        p.mkdir()
    else:
        p.write_text("x")
    first = extra.split("/")[0] + "/" if extra.count("/") > 1 or extra.endswith("/") else extra
    code, out = _run("verify", b, "--level", "structure")
    assert code == 1 and f"PROBLEM {first}: not listed in the manifest" in out, out
    code, out = _run("verify", b, "--level", "structure", "--allow-extra")
    assert code == 0 and f"WARNING {first}: not listed in the manifest" in out, out
    code, out = _run("pack", b, "-o", tmp_path / "x.tar.zst")
    assert code == 1 and "not listed in the manifest" in out
    code, out = _run("pack", b, "-o", tmp_path / "x.tar.zst", "--allow-extra")
    assert code == 0, out
    with open(tmp_path / "x.tar.zst", "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zr:
        names = [m.name for m in tarfile.open(fileobj=zr, mode="r|")]
    assert not any(n == first.rstrip("/") or n.startswith(first) for n in names), names
    assert "manifest.json" in names


def test_pack_of_a_clean_bundle_is_unchanged_by_the_listing(demo, tmp_path):
    """pack lists only the manifest's files; for a bundle without extras that is every file."""
    a, b = tmp_path / "a.tar.zst", tmp_path / "b.tar.zst"
    gate.pack(demo, a)
    archive.pack(demo, b, check=lambda bundle: [])
    assert a.read_bytes() == b.read_bytes()


# -- item 4: no file from outside the checkpoint ---------------------------------------------------------
@pytest.mark.parametrize("side", ["tokenizer.json", "config.json", "model.safetensors", "extra/template.jinja"])
def test_a_side_file_linked_outside_the_checkpoint_is_refused_by_name(tmp_path, side):
    src = write_tiny_llama(tmp_path / "hf")
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    link = src / side
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.exists():
        link.unlink()
    link.symlink_to(secret)
    code, out = _run("convert", src, "-o", tmp_path / "o.ppk", "--quant", "q8_0")
    assert code == 2 and f"{side} resolves to {secret}, outside the checkpoint folder" in out, out
    assert not (tmp_path / "o.ppk").exists()
    code, out = _run("inspect", src)
    assert code == 2 and "outside the checkpoint folder" in out


def test_etc_passwd_link_is_refused(tmp_path):
    src = write_tiny_llama(tmp_path / "hf")
    (src / "tokenizer.json").unlink()
    (src / "tokenizer.json").symlink_to("/etc/passwd")
    with pytest.raises(FormatError, match="tokenizer.json resolves to /etc/passwd"):
        convert(src, tmp_path / "o.ppk", quant="q8_0")


def test_a_link_inside_the_checkpoint_is_read(tmp_path):
    src = write_tiny_llama(tmp_path / "hf")
    (src / "orig").mkdir()
    shutil.move(str(src / "tokenizer.json"), str(src / "orig" / "tokenizer.json"))
    (src / "tokenizer.json").symlink_to(Path("orig") / "tokenizer.json")
    res = convert(src, tmp_path / "o.ppk", quant="q8_0")
    assert (res.bundle / "source" / "tokenizer.json").is_file()


# -- item 5: clean edges --------------------------------------------------------------------------------------
def test_a_spoofing_tensor_name_is_escaped(tmp_path):
    rng = np.random.default_rng(5)
    evil = "blk.0.ffn_up.weight\nverify OK: 1 tensors; levels all\x1b[2J"
    build_gguf(tmp_path / "e.gguf", {evil: ("Q8_0", random_blocks("Q8_0", 64, 32, rng))})
    for args in (["inspect", tmp_path / "e.gguf"], ["convert", tmp_path / "e.gguf", "-o", tmp_path / "e.ppk"],
                 ["verify", tmp_path / "e.ppk", "--level", "structure"], ["inspect", tmp_path / "e.ppk"]):
        code, out = _run(*args)
        assert code == 0, (args, out)
        assert "\x1b" not in out and not any(ln.startswith("verify OK: 1 tensors; levels all") for ln in out.splitlines())
        assert "\\nverify OK" in out and "\\x1b[2J" in out, (args, out)


def test_escape_helpers():
    assert escape("a\nb\r\x1b[31m\u202e\udcff") == "a\\nb\\r\\x1b[31m\\u202e\\udcff"
    assert escape_text("line 1\nline\t2\x07") == "line 1\nline\t2\\x07"
    assert "\\n" in table([("x\ny",)], ("name",))


def test_problem_lines_escape_names(tmp_path):
    assert "\n" not in B.damage_message("b\nfake", "packing", [("t\nverify OK", "bad\x1b")])


@pytest.mark.parametrize("args, words", [
    (["--temp", "nan"], "temperature must be a finite number"),
    (["--seed", "-1"], "--seed"),
    (["--prompt", "caf\udce9"], "not valid UTF-8"),
])
def test_generate_bad_options_are_exit_2_one_line(demo, args, words):
    base = ["generate", demo, "-n", "1"] + ([] if "--prompt" in args else ["--prompt", "a"])
    code, out = _run(*base, *args)
    assert code == 2 and words in out, out
    assert "Traceback" not in out


def test_demo_source_that_cannot_be_written_is_exit_2(tmp_path):
    (tmp_path / "file").write_text("x")
    code, out = _run("demo", "-o", tmp_path / "d.ppk", "--source", tmp_path / "file" / "src", "--no-verify")
    assert code == 2 and "cannot write the demo checkpoint" in out and len(out.strip().splitlines()) == 1, out


def test_verify_json_refuses_to_overwrite_without_force(demo, tmp_path):
    report = tmp_path / "r.json"
    report.write_text("keep me")
    code, out = _run("verify", demo, "--level", "structure", "--json", report)
    assert code == 2 and "already exists" in out and report.read_text() == "keep me"
    code, out = _run("verify", demo, "--level", "structure", "--json", report, "--force")
    assert code == 0 and json.loads(report.read_text())["ok"] is True


# -- item 5: llama.cpp in a child process ---------------------------------------------------------------
@pytest.fixture
def fake_llama(monkeypatch, tmp_path) -> Path:
    """A GGUF path that exists, and llama-cpp-python taken as installed: the children below stand in for it."""
    monkeypatch.setattr(llama_peer, "installed", lambda: True)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    return tmp_path / "m.gguf"


def test_llama_cpp_crash_is_a_one_line_error(monkeypatch, fake_llama):
    monkeypatch.setattr(llama_peer, "_CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    monkeypatch.setenv(llama_peer.ENV, "1")
    with pytest.raises(llama_peer.PeerError, match="crashed in its process: SIGSEGV") as e:
        llama_peer.logits(fake_llama, [1, 2, 3])
    assert e.value.signal == signal.SIGSEGV and "\n" not in str(e.value)


def test_llama_cpp_crash_with_extra_buffers_is_retried_without(monkeypatch, fake_llama):
    """The child dies when extra buffer types are on (as llama.cpp does with AMX in a VM) and
    works with them off: the run is retried once with them off."""
    code = ("import json, sys, os, signal, numpy as np\n"
            "job = json.load(open(sys.argv[2]))\n"
            "if job['extra_bufts']: os.kill(os.getpid(), signal.SIGSEGV)\n"
            "np.save(sys.argv[3], np.ones((len(job['ids']), 4), np.float32))\n")
    monkeypatch.setattr(llama_peer, "_CHILD", code)
    monkeypatch.setenv(llama_peer.ENV, "1")
    assert llama_peer.logits(fake_llama, [1, 2]).shape == (2, 4)


def test_llama_cpp_child_error_and_missing_package(monkeypatch, fake_llama):
    monkeypatch.setattr(llama_peer, "_CHILD", "import sys; sys.stderr.write('boom\\nValueError: bad model\\n'); sys.exit(1)")
    with pytest.raises(llama_peer.PeerError, match="exit 1.*ValueError: bad model"):
        llama_peer.logits(fake_llama, [1])
    monkeypatch.setattr(llama_peer, "_CHILD", f"import sys; sys.exit({llama_peer._MISSING})")
    with pytest.raises(BadInputError, match="needs llama-cpp-python"):
        llama_peer.logits(fake_llama, [1])
    with pytest.raises(BadInputError, match="no such GGUF file"):
        llama_peer.logits(fake_llama.parent / "absent.gguf", [1])


@pytest.mark.parametrize("flags, env, safe", [
    ("fpu sse2 avx2", None, True),
    ("fpu avx512f amx_tile amx_int8 hypervisor", None, False),
    ("fpu avx512f amx_tile amx_int8", None, True),  # bare metal: AMX works
    ("fpu amx_tile hypervisor", "1", True),
    ("fpu avx2", "0", False),
])
def test_extra_buffer_types_off_where_they_crash(monkeypatch, flags, env, safe):
    if env is None:
        monkeypatch.delenv(llama_peer.ENV, raising=False)
    else:
        monkeypatch.setenv(llama_peer.ENV, env)
    assert llama_peer.extra_bufts_safe(f"processor\t: 0\nflags\t\t: {flags}\n") is safe


# -- item 6: eval on the demo's bundle ----------------------------------------------------------------------
def test_eval_text_longer_than_the_context_runs_its_first_n_ctx_tokens():
    """The default text (768 tokens of the demo's tokenizer) on a 512-token model: the first 512."""
    from types import SimpleNamespace

    model = SimpleNamespace(hp=SimpleNamespace(n_ctx=8), tokenizer=None)
    ids, note = evaluate._ids_for(model, None, None, ids=list(range(20)))
    assert ids.tolist() == list(range(8)) and note == "the first 8 of the text's 20 tokens (the model's context)"
    ids, note = evaluate._ids_for(model, None, 5, ids=list(range(20)))
    assert ids.size == 5 and note == ""
    with pytest.raises(BadInputError, match="--tokens 9 exceeds the model's context of 8"):
        evaluate._ids_for(model, None, 9, ids=list(range(20)))


def test_eval_reports_progress(demo):
    calls = []
    rep = evaluate.evaluate(demo, tokens=6, kernels="standard", chunk=4, n_layer=1,
                            progress=lambda d, t: calls.append((d, t)))
    assert rep.ok and rep.tokens == 6 and calls == [(4, 6), (6, 6)]


@pytest.mark.slow
def test_the_demos_suggestions_work_as_printed(tmp_path, monkeypatch):
    """Every command the demo prints runs as printed (exit 0)."""
    monkeypatch.chdir(tmp_path)
    code, out = _run("demo")
    assert code == 0, out
    suggested = []
    for line in out.splitlines():
        if line.startswith(("next: ", "also: ")):
            for part in line.split(": ", 1)[1].split("  (")[0].split(" run the model")[0].split(" / "):
                suggested.append(part.strip())
    assert len(suggested) == 3, suggested
    for cmd in suggested:
        words = cmd.split()
        assert words[0] == "panelpack"
        code, out = _run(*words[1:])
        assert code == 0, (cmd, out)


def test_clean_bundle_runs(demo):
    code, out = _run("generate", demo, "--prompt", "hello", "-n", "2", "--kernels", "standard")
    assert code == 0, out
    assert os.fspath(demo)  # (the bundle stays as it was)
    assert gate.structure_problems(B.Bundle(demo)) == []
