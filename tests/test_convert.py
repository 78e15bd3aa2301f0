"""The converter end to end: plans, ledgers, bundles, export, atomicity, bad input, the CLI."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from panelpack import repack
from panelpack.cli import main
from panelpack.convert import convert, mixes, plan
from panelpack.convert.example import CONFIG, write_tiny_llama
from panelpack.convert.gguf_export import export_gguf
from panelpack.formats import blocks as codecs
from panelpack.formats import engine, qtypes
from panelpack.formats.bundle import Bundle
from panelpack.formats.errors import BadInputError, FormatError, OutputError, UnsupportedError

from builders import build_gguf, random_blocks


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _ledger(result) -> dict[str, dict]:
    return {row["name"]: row for row in result.ledger}


# -- the embedded default -----------------------------------------------------------------
def test_example_checkpoint_is_deterministic_and_small(tmp_path, tiny_hf):
    again = write_tiny_llama(tmp_path / "again")
    assert sha(again / "model.safetensors") == sha(tiny_hf / "model.safetensors")
    assert (tiny_hf / "model.safetensors").stat().st_size < 5_000_000


def test_hf_q4k_panel64_ledger(tmp_path, tiny_hf):
    res = convert(tiny_hf, tmp_path / "t.ppk", layout="panel64", quant="q4_k")
    led = _ledger(res)
    q = led["model.layers.0.self_attn.q_proj.weight"]
    assert (q["type"], q["written"], q["reason"]) == ("Q4_K", "panel64", None)
    down = led["model.layers.0.mlp.down_proj.weight"]
    assert down["type"] == "Q8_0" and down["written"] == "panel64"
    assert "K=736 is not a multiple of 256" in down["reason"]
    emb = led["model.embed_tokens.weight"]
    assert (emb["type"], emb["written"]) == ("BF16", "rowmajor") and "embedding lookup" in emb["reason"]
    norm = led["model.norm.weight"]
    assert norm["written"] == "rowmajor" and "1-D" in norm["reason"]
    head = led["lm_head.weight"]
    assert (head["type"], head["written"]) == ("Q4_K", "panel64")
    # Nothing falls back silently: every tensor not in the requested layout has a reason.
    assert all(r["reason"] for r in res.ledger if r["written"] != "panel64")

    b = Bundle(res.bundle)
    assert b.check_structure() == []
    assert b.manifest["target"] == {"isa": "sme2", "svl_bits": 512}
    assert b.manifest["model"]["n_embd"] == CONFIG["hidden_size"]
    assert {s["file"] for s in b.manifest["source_files"]} >= {"source/config.json", "source/tokenizer.json"}
    t = b.tensor("lm_head.weight")
    assert t.params["padded_n"] == 512 and all(r.offset % 64 == 0 for r in t.regions.values())


def test_hf_quantized_values_match_the_codec(tmp_path, tiny_hf):
    """Every quantized matmul in the bundle dequantizes to quantize(source) exactly."""
    from panelpack.formats.checkpoint import open_checkpoint

    res = convert(tiny_hf, tmp_path / "t.ppk", layout="panel64", quant="q4_0")
    b = Bundle(res.bundle)
    with open_checkpoint(tiny_hf) as ck:
        for t in b.tensors:
            if t.action != "quantize":
                continue
            n, k = t.shape
            x = codecs.dequantize(ck.raw(t.name), qtypes.BF16, n, k).reshape(n, k)
            want = codecs.dequantize(codecs.quantize(x, t.qtype), t.type, n, k).reshape(n, k)
            got = repack.get(t.layout).dequantize(b.regions(t), n, k, t.qtype)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), t.name
            assert t.ledger["error"]["rel_rms"] < 0.2


@pytest.mark.parametrize("layout", ["ggml-x8", "il8-nibble", "il8-int8", "rowmajor"])
def test_hf_other_layouts_refuse_with_reasons(tmp_path, tiny_hf, layout):
    # --pure: every matrix Q4_0 (the Q4_0 mix itself would give lm_head Q6_K, see test_mixes.py)
    res = convert(tiny_hf, tmp_path / "t.ppk", layout=layout, quant="q4_0", mix_options=mixes.Options(pure=True))
    led = _ledger(res)
    head = led["lm_head.weight"]
    if layout == "rowmajor":
        assert head["written"] == "rowmajor" and head["reason"] is None
    else:
        assert head["written"] == "rowmajor" and "N=500 is not a multiple of 8" in head["reason"]
        assert led["model.layers.0.self_attn.q_proj.weight"]["written"] == layout
    assert Bundle(res.bundle).check_structure() == []


# -- GGUF sources -------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["panel64", "ggml-x8", "il8-int8", "rowmajor"])
def test_gguf_round_trip_byte_exact(tmp_path, tiny_gguf, layout):
    res = convert(tiny_gguf, tmp_path / "t.ppk", layout=layout)
    out = export_gguf(res.bundle, tmp_path / "back.gguf")
    assert out.identical and sha(tmp_path / "back.gguf") == sha(tiny_gguf)


def test_gguf_requant_reports_error_and_exports_the_blocks_it_holds(tmp_path, tiny_gguf):
    res = convert(tiny_gguf, tmp_path / "t.ppk", layout="ggml-x8", requant="q4_0")
    led = _ledger(res)
    k = led["blk.0.attn_k.weight"]  # Q4_1: ggml-x8 does not take it
    assert (k["source_type"], k["type"], k["written"]) == ("Q4_1", "Q4_0", "ggml-x8")
    assert "re-quantized Q4_1 -> Q4_0" in k["reason"] and 0 < k["error"]["rel_rms"] < 0.5
    out = export_gguf(res.bundle, tmp_path / "back.gguf")  # the GGUF of the blocks the bundle holds
    assert not out.identical and out.plan is not None
    row = {r["name"]: r for r in out.plan.ledger()}["blk.0.attn_k.weight"]
    assert (row["source_type"], row["type"], row["action"]) == ("Q4_1", "Q4_0", "requantize")
    from panelpack.formats.gguf import GGUFFile

    src, back = GGUFFile(tiny_gguf), GGUFFile(tmp_path / "back.gguf")
    assert [t.name for t in back.tensors] == [t.name for t in src.tensors]  # the source's order (no mix)
    assert back.tensor("blk.0.attn_k.weight").type.name == "Q4_0"
    assert list(back.kv_infos) == list(src.kv_infos)


def test_nonrestorable_layout_is_named(tmp_path, tiny_gguf):
    res = convert(tiny_gguf, tmp_path / "t.ppk", layout="il8-nibble")
    assert _ledger(res)["blk.0.ffn_gate.weight"]["written"] == "il8-nibble"  # Q4_K
    with pytest.raises(BadInputError, match="blk.0.ffn_gate.weight: layout il8-nibble is not invertible for Q4_K"):
        export_gguf(res.bundle, tmp_path / "back.gguf")


def _digests(manifest: dict) -> list:
    """Every tensor's region digests (a version 2 file is its regions and zero padding)."""
    return [{n: r[manifest["digest"]] for n, r in t["regions"].items()} for t in manifest["tensors"]]


def test_jobs_give_identical_bundles(tmp_path, tiny_gguf):
    a = convert(tiny_gguf, tmp_path / "a.ppk", jobs=1).bundle
    b = convert(tiny_gguf, tmp_path / "b.ppk", jobs=3).bundle
    ma, mb = Bundle(a).manifest, Bundle(b).manifest
    assert _digests(ma) == _digests(mb)


def test_jobs_default_to_the_cores_for_kernel_jobs(tmp_path, tiny_gguf, monkeypatch, caplog):
    from panelpack.convert import pipeline

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert pipeline.auto_jobs(False) == 1 and pipeline.auto_jobs(True) == pipeline.AUTO_JOBS == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert pipeline.auto_jobs(True) == 1
    monkeypatch.undo()
    with caplog.at_level(logging.DEBUG, logger="panelpack.convert.pipeline"):
        c = convert(tiny_gguf, tmp_path / "c.ppk", jobs=None).bundle
    # one worker if the job stayed in numpy, else as many as auto_jobs gives (kernels already
    # started by an earlier test make every job a kernel job)
    assert f"jobs: {pipeline.auto_jobs(engine.kernels_started())}" in caplog.text
    a = convert(tiny_gguf, tmp_path / "a.ppk", jobs=1).bundle
    assert _digests(Bundle(a).manifest) == _digests(Bundle(c).manifest)


def test_include_exclude(tmp_path, tiny_gguf):
    p = plan(tiny_gguf, include=["blk.0.*"], exclude=["*norm*"])
    assert p.tensors and all(t.name.startswith("blk.0.") and "norm" not in t.name for t in p.tensors)
    with pytest.raises(BadInputError, match="no tensor matches"):
        plan(tiny_gguf, include=["nothing*"])


def test_dry_run_reads_no_tensor_data(tmp_path, tiny_gguf, tiny_hf, monkeypatch):
    from panelpack.formats import gguf, safetensors

    def boom(self, name):
        raise AssertionError(f"tensor data read: {name}")

    monkeypatch.setattr(gguf.GGUFFile, "raw", boom)
    monkeypatch.setattr(safetensors.SafetensorsFile, "raw", boom)
    monkeypatch.setattr(safetensors.HFCheckpoint, "raw", boom)
    res = convert(tiny_gguf, tmp_path / "x.ppk", dry_run=True)
    assert res.dry_run and len(res.ledger) == len(res.plan.tensors) and not (tmp_path / "x.ppk").exists()
    res = convert(tiny_hf, None, quant="q4_k", dry_run=True)
    assert res.plan.bytes_out > 0 and not list(tmp_path.iterdir())


# -- atomicity ------------------------------------------------------------------------------
def _big_gguf(path: Path, n_tensors: int = 24) -> None:
    rng = np.random.default_rng(1)
    tensors = {f"blk.{i}.w": ("Q4_0", random_blocks("Q4_0", 1024, 4096, rng)) for i in range(n_tensors)}
    build_gguf(path, tensors, {"general.name": "big"})


def _stopped_mid_write(tmp_path: Path, n_tensors: int):
    """A conversion stopped (SIGSTOP) while it writes tensors, and its output path; None when it
    finished before the stop landed (a whole conversion takes ~0.3 s: a loaded machine can
    deschedule this process for longer)."""
    src = tmp_path / f"big{n_tensors}.gguf"
    _big_gguf(src, n_tensors)
    out = tmp_path / f"out{n_tensors}" / "big.ppk"
    out.parent.mkdir()
    # SIGINT as a terminal's Ctrl-C finds it: a shell without job control starts background
    # commands (CI's, this one's parent perhaps) with SIGINT ignored, and Python, like any
    # program, keeps an inherited SIG_IGN: the conversion would rightly run on to its end
    proc = subprocess.Popen([sys.executable, "-m", "panelpack", "convert", str(src), "-o", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until it is writing tensors
        partial = [p for p in out.parent.iterdir() if ".partial-" in p.name]
        if partial and len(list((partial[0] / "tensors").glob("*.bin"))) >= 2:
            break
        if proc.poll() is not None:
            pytest.fail(f"conversion ended before it could be interrupted: {proc.stderr.read().decode()}")
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(0.05)  # the stop is delivered: the process is frozen where it was
    if proc.poll() is None and not out.exists():
        return proc, out
    os.kill(proc.pid, signal.SIGCONT)
    proc.wait(60)
    return None


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_interrupted_conversion_leaves_no_output(tmp_path, sig):
    for n_tensors in (24, 96, 384):  # a larger source when the conversion outran the stop
        stopped = _stopped_mid_write(tmp_path, n_tensors)
        if stopped is not None:
            break
    else:
        pytest.fail("every conversion finished before it could be stopped mid-write")
    proc, out = stopped
    proc.send_signal(sig)
    os.kill(proc.pid, signal.SIGCONT)  # the pending signal is taken as the process resumes
    proc.wait(60)
    assert proc.returncode != 0
    assert not out.exists()
    if sig != signal.SIGKILL:  # a catchable signal cleans up the partial folder too
        assert list(out.parent.iterdir()) == []
        assert b"Traceback" not in proc.stderr.read()


# -- bad input ------------------------------------------------------------------------------
def test_bad_sources(tmp_path, tiny_gguf):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(BadInputError, match="not a GGUF"):
        convert(junk, tmp_path / "o.ppk")
    with pytest.raises(BadInputError):
        convert(tmp_path / "missing.gguf", tmp_path / "o.ppk")
    with pytest.raises(UnsupportedError, match="unknown layout 'panel32'"):
        convert(tiny_gguf, tmp_path / "o.ppk", layout="panel32")
    with pytest.raises(UnsupportedError, match="q4_0"):
        convert(tiny_gguf, tmp_path / "o.ppk", requant="iq2_xxs")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["junk.bin"]


def test_missing_shard(tmp_path, tiny_hf):
    import shutil

    d = tmp_path / "sharded"
    d.mkdir()
    shutil.copy(tiny_hf / "config.json", d)
    shutil.copy(tiny_hf / "model.safetensors", d / "model-00001-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors",
                                            "extra.weight": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FormatError, match="model-00002-of-00002.safetensors"):
        convert(d, tmp_path / "o.ppk", quant="q4_0")
    assert not (tmp_path / "o.ppk").exists()


def test_name_escaping_the_bundle_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    from panelpack.formats.gguf import GGUFStreamWriter

    p = tmp_path / "evil.gguf"
    blocks = random_blocks("Q4_0", 8, 32, rng)
    with GGUFStreamWriter(p, arch="llama") as w:
        w.add_tensor_info("../../evil", (8, 32), "Q4_0")
        w.write_header()
        w.write_tensor_data("../../evil", blocks)
    with pytest.raises(BadInputError, match="escape|path separator"):
        convert(p, tmp_path / "o.ppk")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["evil.gguf"]


def test_existing_output_untouched_without_force(tmp_path, tiny_gguf):
    out = tmp_path / "o.ppk"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputError, match="already exists"):
        convert(tiny_gguf, out)
    assert (out / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("mapped", [True, False])
def test_full_disk_leaves_nothing(tmp_path, tiny_gguf, monkeypatch, mapped):
    # mapped: the tensor files are reserved (posix_fallocate) and packed in place; a full disk
    # fails the reservation. Otherwise (no posix_fallocate, e.g. macOS) the write fails.
    import errno
    import os

    from panelpack.formats import atomic
    from panelpack.formats import bundle as B

    calls = {"n": 0}

    def failing(real):
        def fn(*a, **kw):
            calls["n"] += 1
            if calls["n"] == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(*a, **kw)
        return fn

    if mapped:
        if not B.BundleWriter.MAPS:
            pytest.skip("no posix_fallocate here")
        monkeypatch.setattr(os, "posix_fallocate", failing(os.posix_fallocate))
    else:
        monkeypatch.setattr(B.BundleWriter, "MAPS", False)
        real = B.BundleWriter.write_tensor

        def write_tensor(self, *a, **kw):
            try:
                return failing(real)(self, *a, **kw)
            except OSError as e:
                raise atomic.output_error(e, "tensor") from None

        monkeypatch.setattr(B.BundleWriter, "write_tensor", write_tensor)
    with pytest.raises(OutputError, match="no space left"):
        convert(tiny_gguf, tmp_path / "o.ppk")
    assert calls["n"] == 3
    assert sorted(x.name for x in tmp_path.iterdir()) == []


@pytest.mark.parametrize("unmappable", ["no posix_fallocate", "mmap fails"])
def test_mapped_and_written_tensor_files_are_the_same(tmp_path, tiny_gguf, monkeypatch, unmappable):
    import errno
    import types

    from panelpack.formats import bundle as B
    from panelpack.formats import bundle_writer

    a = Bundle(convert(tiny_gguf, tmp_path / "a.ppk").bundle)
    if unmappable == "mmap fails":  # a file system that cannot map files: the writes take over
        def no_map(*args, **kw):
            raise OSError(errno.ENODEV, "No such device")
        monkeypatch.setattr(bundle_writer, "mmap", types.SimpleNamespace(mmap=no_map))
    else:
        monkeypatch.setattr(B.BundleWriter, "MAPS", False)
    b = Bundle(convert(tiny_gguf, tmp_path / "b.ppk").bundle)
    assert a.manifest["tensors"] == b.manifest["tensors"]
    for t in a.manifest["tensors"]:
        assert (a.path / t["file"]).read_bytes() == (b.path / t["file"]).read_bytes()


def test_verify_structure_does_not_import_numba(tmp_path, tiny_gguf):
    """The structure level hashes and reads manifests only: its process never imports numba
    (~0.4 s of its start-up), the CLI's compile notice included."""
    b = convert(tiny_gguf, tmp_path / "b.ppk").bundle
    code = ("import sys\nfrom panelpack.cli import main\n"
            "try:\n    main(['verify', sys.argv[1], '--level', 'structure'])\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'numba' not in sys.modules, 'numba was imported'\n")
    r = subprocess.run([sys.executable, "-c", code, str(b)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout


# -- the CLI ------------------------------------------------------------------------------
def test_cli_demo_verify_levels(tmp_path):
    out = tmp_path / "d.ppk"
    r = CliRunner().invoke(main, ["demo", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "model.layers.0.self_attn.q_proj.weight" in r.output  # the ledger
    assert "levels structure;" in r.output and f"panelpack verify {out} --level all" in r.output
    r = CliRunner().invoke(main, ["demo", "-o", str(out), "--verify", "lossless"])
    assert r.exit_code == 0 and "levels structure+lossless;" in r.output, r.output
    r = CliRunner().invoke(main, ["demo", "-o", str(out), "--no-verify"])
    assert r.exit_code == 0 and "verify OK" not in r.output
    assert Bundle(out).manifest["tensors"]
    r = CliRunner().invoke(main, ["demo", "-o", str(out), "--verify", "bogus"])
    assert r.exit_code == 2


def test_cli_convert_json_and_exit_codes(tmp_path, tiny_gguf):
    r = CliRunner().invoke(main, ["convert", str(tiny_gguf), "-o", str(tmp_path / "c.ppk"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["bundle"].endswith("c.ppk") and doc["layouts"]["panel64"] > 0 and len(doc["ledger"]) > 0
    r = CliRunner().invoke(main, ["convert", str(tiny_gguf), "-o", str(tmp_path / "c.ppk")])
    assert r.exit_code == 2 and "already exists" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["convert", str(tiny_gguf), "--dry-run"])
    assert r.exit_code == 0 and "dry run" in r.output
    r = CliRunner().invoke(main, ["convert", str(tiny_gguf), "-o", str(tmp_path / "d.ppk"), "--quant", "q4_k"])
    assert r.exit_code == 2 and "--requant" in r.output
    r = CliRunner().invoke(main, ["convert", str(tiny_gguf)])
    assert r.exit_code == 2  # usage: missing -o


def test_cli_pack_unpack_export(tmp_path, tiny_gguf):
    run = CliRunner().invoke
    assert run(main, ["convert", str(tiny_gguf), "-o", str(tmp_path / "c.ppk")]).exit_code == 0
    assert run(main, ["pack", str(tmp_path / "c.ppk"), "-o", str(tmp_path / "c.ppk.tar.zst")]).exit_code == 0
    assert run(main, ["unpack", str(tmp_path / "c.ppk.tar.zst"), "-o", str(tmp_path / "u.ppk")]).exit_code == 0
    for p in (tmp_path / "c.ppk").rglob("*"):
        q = tmp_path / "u.ppk" / p.relative_to(tmp_path / "c.ppk")
        assert p.is_dir() == q.is_dir() and (p.is_dir() or p.read_bytes() == q.read_bytes())
    r = run(main, ["export", str(tmp_path / "u.ppk"), "-o", str(tmp_path / "x.gguf")])
    assert r.exit_code == 0 and "byte-identical" in r.output
    assert sha(tmp_path / "x.gguf") == sha(tiny_gguf)


# -- real checkpoints ---------------------------------------------------------------------
@pytest.mark.real
def test_smollm2_round_trip(tmp_path, smollm2):
    res = convert(smollm2, tmp_path / "s.ppk")
    assert res.plan.layout_counts() == {"panel64": 210, "rowmajor": 62}
    assert export_gguf(res.bundle, tmp_path / "s.gguf").identical


def numpy_job_matches_kernels(src, tmp_path, **options) -> Bundle:
    """Convert ``src`` in a fresh process, which must build no numba kernel (formats/engine.py:
    the job is below every numpy budget), then here with the kernels started: the same tensor
    files, and the same ledger errors up to f64 summation order. Returns the numpy bundle."""
    out = tmp_path / "np.ppk"
    code = ("import sys; from panelpack.convert import convert; from panelpack.formats import engine; "
            f"convert({str(src)!r}, {str(out)!r}, **{options!r}); "
            "sys.exit(3 if engine.kernels_started() else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr or "a numba kernel was built for a small job"
    engine.start_kernels()
    a, b = Bundle(out), Bundle(convert(src, tmp_path / "jit.ppk", **options).bundle)
    assert _digests(a.manifest) == _digests(b.manifest)
    for ta, tb in zip(a.manifest["tensors"], b.manifest["tensors"]):
        ea, eb = ta["ledger"].get("error"), tb["ledger"].get("error")
        assert (ea is None) == (eb is None) and (ea is None or ea == pytest.approx(eb, rel=1e-12)), ta["name"]
    return a


def test_the_demo_job_runs_no_kernel_and_writes_the_kernels_bytes(tmp_path):
    # the embedded demo (quantize to Q4_K/Q8_0, panel64): no compile on a cold cache
    a = numpy_job_matches_kernels(write_tiny_llama(tmp_path / "hf"), tmp_path, quant="q4_k")
    assert {t["type"] for t in a.manifest["tensors"]} >= {"Q4_K", "Q8_0"}


@pytest.mark.real
def test_small_job_stays_in_numpy_and_matches_the_kernels(tmp_path, smollm2):
    # a lossless repack below JIT_PAYOFF_BYTES: the numpy packers
    numpy_job_matches_kernels(smollm2, tmp_path)


@pytest.mark.real
@pytest.mark.slow
def test_gemma_round_trip(tmp_path, gemma):
    res = convert(gemma, tmp_path / "g.ppk", jobs=2)
    counts = res.plan.layout_counts()
    assert counts["panel64-compact"] == 81 + 9  # Q5_0, Q6_K matmuls: compact codes, panel64's default
    assert counts["panel64"] == 27 + 9  # Q4_K, Q8_0 matmuls: nibble and int8 panels (token_embd stays)
    assert plan(gemma, layout="panel64:int8").layout_counts()["panel64"] == 81 + 27 + 9 + 9
    assert export_gguf(res.bundle, tmp_path / "g.gguf").identical


@pytest.mark.real
def test_minilm(tmp_path, minilm):
    res = convert(minilm, tmp_path / "m.ppk", quant="q8_0")
    led = _ledger(res)
    assert led["encoder.layer.0.attention.self.query.weight"]["written"] == "panel64"
    assert led["embeddings.word_embeddings.weight"]["written"] == "rowmajor"
    assert led["embeddings.position_ids"]["written"] == "rowmajor"
    assert Bundle(res.bundle).check_structure() == []


def test_hf_needs_a_quant_choice(tmp_path, tiny_hf):
    with pytest.raises(BadInputError, match="needs --quant"):
        convert(tiny_hf, tmp_path / "o.ppk")
    res = convert(tiny_hf, tmp_path / "o.ppk", layout="rowmajor")
    assert all(r["written"] == "rowmajor" and r["type"] == r["source_type"] for r in res.ledger)


def test_requantize_in_row_chunks_gives_the_same_blocks_and_error(monkeypatch, rng):
    """The pipeline quantizes in steps of rows (bounded memory): same bytes as one call on the
    whole tensor, and the same error figures (up to summation order)."""
    from panelpack.convert import pipeline

    n, k = 37, 512
    src, dst = qtypes.get("Q4_1"), qtypes.get("Q4_0")
    raw = random_blocks(src, n, k, rng)
    x = codecs.dequantize(raw, src, n, k).reshape(n, k)
    whole = codecs.quantize(x, dst)
    back = codecs.dequantize(whole, dst, n, k).reshape(n, k).astype(np.float64)
    diff = back - x
    rel = np.sqrt(np.mean(diff ** 2)) / np.sqrt(np.mean(x.astype(np.float64) ** 2))
    for chunk in (k, 5 * k, 1 << 22):  # one row, 5 rows (uneven last step), everything at once
        monkeypatch.setattr(pipeline, "REQUANT_CHUNK_ELEMENTS", chunk)
        blocks, err = pipeline._quantize_rows(raw.reshape(-1), src, dst, n, k)
        assert np.array_equal(blocks.reshape(-1), np.asarray(whole).reshape(-1))
        assert err["rel_rms"] == pytest.approx(rel, rel=1e-9)
        assert err["max_abs"] == pytest.approx(float(np.max(np.abs(diff))), rel=1e-12)


def test_cli_digest_option(tmp_path, tiny_gguf):
    r = CliRunner().invoke(main, ["convert", str(tiny_gguf), "-o", str(tmp_path / "s.ppk"), "--digest", "SHA256",
                                  "--no-progress"])
    assert r.exit_code == 0, r.output
    b = Bundle(tmp_path / "s.ppk")
    assert b.digest.name == "sha256" and b.check_structure() == []
    a = Bundle(convert(tiny_gguf, tmp_path / "a.ppk").bundle)  # the default: BLAKE3, the same bytes
    assert a.digest.name == "blake3"
    assert [(t.file, t.bytes) for t in a.tensors] == [(t.file, t.bytes) for t in b.tensors]
    r = CliRunner().invoke(main, ["convert", str(tiny_gguf), "-o", str(tmp_path / "x.ppk"), "--digest", "md5"])
    assert r.exit_code == 2 and "md5" in r.output and not (tmp_path / "x.ppk").exists()
