"""formats/inspect.py, formats/checkpoint.py and the ``panelpack inspect`` command.

Synthetic safetensors files and folders are built here; the real GGUFs are checked against
counts computed with gguf-py's GGUFReader (slow on a 262k vocabulary, so those comparisons are
marked ``slow``; the counts themselves are also asserted directly).
"""

from __future__ import annotations

import collections
import json
import re
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors import safe_open
from safetensors.numpy import save_file
from test_safetensors import LLAMA_CONFIG, make_sharded, random_array, save_bf16

from panelpack.cli import main
from panelpack.formats import describe
from panelpack.formats.checkpoint import open_checkpoint
from panelpack.formats.errors import BadInputError, FormatError, UnsupportedError
from panelpack.formats.safetensors import HFCheckpoint, SafetensorsFile

SMOLLM2_TYPES = {"Q4_1": 210, "F32": 61, "Q8_0": 1}
GEMMA_TYPES = {"F32": 109, "Q5_0": 81, "Q4_K": 27, "Q8_0": 10, "Q6_K": 9}


def _counts(doc) -> dict[str, int]:
    return {h["type"]: h["count"] for h in doc["types"]}


def check_doc_invariants(doc) -> None:
    """What every inspect document must satisfy, whatever the source."""
    json.loads(json.dumps(doc))  # JSON-serialisable
    assert doc["format"] == "panelpack.inspect" and doc["version"] == 1
    assert doc["shape_order"] == "outermost-first"
    tensors, types_, totals = doc["tensors"], doc["types"], doc["totals"]
    assert totals["tensors"] == len(tensors) == sum(h["count"] for h in types_)
    assert totals["bytes"] == sum(t["bytes"] for t in tensors) == sum(h["bytes"] for h in types_)
    assert totals["elements"] == sum(h["elements"] for h in types_)
    assert totals["elements"] == sum(int(np.prod(t["shape"], dtype=object)) for t in tensors)
    if totals["bytes"]:
        assert abs(sum(h["share"] for h in types_) - 1.0) < 1e-9
        assert totals["bits_per_weight"] == round(8 * totals["bytes"] / totals["elements"], 4)
    by_bytes = [h["bytes"] for h in types_]
    assert by_bytes == sorted(by_bytes, reverse=True)
    per_type = collections.Counter(t["type"] for t in tensors)
    assert per_type == _counts(doc)
    assert doc["source"]["bytes"] == sum(f["bytes"] for f in doc["source"]["files"])
    assert doc["source"]["bytes"] >= totals["bytes"]


def check_render(doc) -> str:
    text = describe.render(doc)
    lines = text.splitlines()
    assert lines[0].startswith("source") and doc["source"]["kind"] in lines[0]
    # the histogram is listed largest first, then a total row
    i = lines.index("types (largest first)")
    hist = lines[i + 2 : i + 2 + len(doc["types"])]
    assert [ln.split()[0] for ln in hist] == [h["type"] for h in doc["types"]]
    assert lines[i + 2 + len(doc["types"])].split()[0] == "total"
    # the tensor table: every tensor once, columns aligned (each column starts at one offset)
    j = next(k for k, ln in enumerate(lines) if ln.startswith("tensors ("))
    assert "N x K" in lines[j]
    header, rows = lines[j + 1], lines[j + 2 :]
    assert len(rows) == len(doc["tensors"])
    type_col = header.index("type")
    for row, t in zip(rows, doc["tensors"]):
        assert row.split()[0] == t["name"]
        assert row[type_col:].split()[0] == t["type"]
        end = header.index("bytes") + len("bytes")  # sizes are right-aligned under "bytes"
        assert row[end - 1] != " " and row[end:end + 1] in ("", " ")
        assert row[:end].split()[-1] in ("B", "KiB", "MiB", "GiB", "TiB")
    return text


# -- synthetic safetensors ----------------------------------------------------------------------


def test_single_file_mixed_dtypes(tmp_path, rng):
    path = tmp_path / "m.safetensors"
    save_file(
        {
            "w32": random_array(rng, np.float32, (64, 32)),
            "w16": random_array(rng, np.float16, (16, 32)),
            "b16": random_array(rng, np.float16, (16,)),
            "ids": random_array(rng, np.int64, (1, 8)),
            "mask": random_array(rng, np.bool_, (3,)),
        },
        str(path),
        metadata={"format": "pt"},
    )
    doc = describe.describe(path)
    check_doc_invariants(doc)
    assert doc["source"]["kind"] == "safetensors" and doc["source"]["path"] == str(path)
    assert doc["source"]["files"] == [{"path": str(path), "bytes": path.stat().st_size}]
    assert doc["architecture"] is None and doc["hyperparameters"] == {}
    assert doc["metadata"] == {"count": 1, "values": {"format": "pt"}}
    assert _counts(doc) == {"F32": 1, "F16": 2, "I64": 1, "BOOL": 1}
    total = 8192 + 1024 + 32 + 64 + 3
    assert doc["types"][0] == {"type": "F32", "count": 1, "elements": 2048, "bytes": 8192, "share": 8192 / total}
    rows = {t["name"]: t for t in doc["tensors"]}
    assert rows["w32"] == {"name": "w32", "shape": [64, 32], "type": "F32", "bytes": 8192}
    assert rows["mask"] == {"name": "mask", "shape": [3], "type": "BOOL", "bytes": 3}
    assert all("file" not in t for t in doc["tensors"])
    text = check_render(doc)
    assert "64 x 32" in text and "8.0 KiB" in text and "format='pt'" in text


def test_bf16_file(tmp_path, rng):
    path = tmp_path / "bf.safetensors"
    save_bf16(path, {"a": rng.integers(0, 1 << 16, (8, 4), dtype=np.uint16)})
    doc = describe.describe(path)
    check_doc_invariants(doc)
    assert doc["types"] == [{"type": "BF16", "count": 1, "elements": 32, "bytes": 64, "share": 1.0}]
    assert doc["totals"]["bits_per_weight"] == 16.0
    check_render(doc)


def test_sharded_folder(tmp_path, rng):
    folder = tmp_path / "m"
    arrays = make_sharded(folder, rng, n_shards=2, per_shard=2)
    doc = describe.describe(folder)
    check_doc_invariants(doc)
    assert doc["source"]["kind"] == "hf"
    names = [f["path"].rsplit("/", 1)[1] for f in doc["source"]["files"]]
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert names == shards + ["model.safetensors.index.json"]
    assert doc["architecture"] == "LlamaForCausalLM"
    assert doc["hyperparameters"]["n_head_kv"] == 2 and doc["hyperparameters"]["n_layer"] == 2
    assert doc["metadata"]["model_type"] == "llama" and doc["metadata"]["config"] == LLAMA_CONFIG
    assert _counts(doc) == {"F32": len(arrays)}
    assert {t["file"] for t in doc["tensors"]} == set(shards)
    text = check_render(doc)
    assert "LlamaForCausalLM (model_type llama)" in text and "n_head_kv=2" in text


def test_describe_reads_no_tensor_data(tmp_path, rng, monkeypatch):
    """describe() works from headers only: mapping the file would fail here."""
    folder = tmp_path / "m"
    make_sharded(folder, rng, n_shards=2)

    def no_memmap(*a, **k):
        raise AssertionError("describe() must not map tensor data")

    monkeypatch.setattr(np, "memmap", no_memmap)
    doc = describe.describe(folder)
    assert doc["totals"]["tensors"] == 6
    with pytest.raises(AssertionError, match="must not map"):  # the guard is live
        with HFCheckpoint(folder) as ck:
            ck.raw(ck.names[0])


def test_human_bytes():
    h = describe.human_bytes
    assert [h(0), h(1023), h(1024), h(1536), h(90868376), h(3 << 30), h(5 << 40)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "86.7 MiB",
        "3.0 GiB",
        "5.0 TiB",
    ]


# -- real checkpoints ---------------------------------------------------------------------------


@pytest.mark.real
def test_minilm(minilm):
    doc = describe.describe(minilm)
    check_doc_invariants(doc)
    with safe_open(str(minilm / "model.safetensors"), framework="numpy") as f:
        want = collections.Counter(f.get_slice(k).get_dtype() for k in f.keys())
        shapes = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    assert _counts(doc) == dict(want) == {"F32": 103, "I64": 1}
    assert {t["name"]: t["shape"] for t in doc["tensors"]} == shapes
    assert doc["architecture"] == "BertModel"
    assert doc["hyperparameters"] == {
        "n_layer": 6, "n_embd": 384, "n_head": 12, "n_head_kv": 12, "n_ff": 1536, "n_ctx": 512, "n_vocab": 30522,
    }
    assert doc["source"]["bytes"] == (minilm / "model.safetensors").stat().st_size
    check_render(doc)


@pytest.mark.real
def test_smollm2(smollm2):
    doc = describe.describe(smollm2)
    check_doc_invariants(doc)
    assert doc["source"]["kind"] == "gguf"
    assert doc["totals"]["tensors"] == 272
    assert _counts(doc) == SMOLLM2_TYPES
    assert doc["architecture"] == "llama"
    hp = doc["hyperparameters"]
    assert (hp["n_layer"], hp["n_embd"], hp["n_head"], hp["n_head_kv"], hp["n_vocab"]) == (30, 576, 9, 3, 49152)
    md = doc["metadata"]
    assert md["file_type"] == 3 and md["file_type_name"] == "MOSTLY_Q4_1" and md["quantization_version"] == 2
    assert md["arrays"]["tokenizer.ggml.tokens"] == 49152
    emb = next(t for t in doc["tensors"] if t["name"] == "token_embd.weight")
    assert emb == {"name": "token_embd.weight", "shape": [49152, 576], "type": "Q8_0", "bytes": 49152 * 576 // 32 * 34}
    text = check_render(doc)
    assert "MOSTLY_Q4_1 (3)" in text and "tokenizer.ggml.tokens[49152]" in text


@pytest.mark.real
def test_gemma(gemma):
    doc = describe.describe(gemma)
    check_doc_invariants(doc)
    assert doc["totals"]["tensors"] == sum(GEMMA_TYPES.values()) == 236
    assert _counts(doc) == GEMMA_TYPES
    assert doc["architecture"] == "gemma3"
    assert doc["hyperparameters"]["n_vocab"] == 262144
    assert doc["metadata"]["arrays"]["tokenizer.ggml.tokens"] == 262144
    assert doc["metadata"]["file_type_name"] == "MOSTLY_Q4_K_M"
    check_render(doc)


def _reader_view(path):
    import gguf

    r = gguf.GGUFReader(str(path))
    tensors = [
        {
            "name": t.name,
            "shape": [int(d) for d in reversed(t.shape.tolist())],
            "type": t.tensor_type.name,
            "bytes": int(t.n_bytes),
        }
        for t in r.tensors
    ]
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    return r, tensors, fields


@pytest.mark.slow
@pytest.mark.real
@pytest.mark.parametrize("which", ["smollm2", "gemma"])
def test_gguf_against_gguf_reader(request, which):
    path = request.getfixturevalue(which)
    doc = describe.describe(path)
    _, tensors, fields = _reader_view(path)
    assert doc["tensors"] == tensors  # names, numpy-order shapes, types, bytes, in file order
    assert _counts(doc) == dict(collections.Counter(t["type"] for t in tensors))
    assert _counts(doc) == (SMOLLM2_TYPES if which == "smollm2" else GEMMA_TYPES)
    md = doc["metadata"]
    assert md["count"] == len(fields)
    assert md["name"] == fields["general.name"].contents()
    assert md["file_type"] == fields["general.file_type"].contents()
    assert md["quantization_version"] == fields["general.quantization_version"].contents()
    arrays = {k: len(f.data) for k, f in fields.items() if f.types and f.types[0] == gguf_array_type()}
    assert md["arrays"] == arrays


def gguf_array_type():
    import gguf

    return gguf.GGUFValueType.ARRAY


# -- open_checkpoint ----------------------------------------------------------------------------


def test_open_checkpoint_kinds(tmp_path, rng):
    single = tmp_path / "a.safetensors"
    save_file({"x": random_array(rng, np.float32, (2, 2))}, str(single))
    noext = tmp_path / "weights.dat"
    shutil.copy(single, noext)  # no extension: recognised by its header
    folder = tmp_path / "hf"
    make_sharded(folder, rng, n_shards=2)
    for path, cls in [(single, SafetensorsFile), (noext, SafetensorsFile), (folder, HFCheckpoint)]:
        with open_checkpoint(path) as ck:
            assert type(ck) is cls, path
    # the index file itself opens its folder with that index
    with open_checkpoint(folder / "model.safetensors.index.json") as ck:
        assert type(ck) is HFCheckpoint and ck.index_file.endswith("model.safetensors.index.json")
        assert len(ck) == 6


@pytest.mark.real
def test_open_checkpoint_gguf_by_magic(smollm2, tmp_path):
    link = tmp_path / "model.bin"
    link.symlink_to(smollm2)
    with open_checkpoint(link) as ck:
        assert ck.kind == "gguf" and len(ck) == 272
    with open_checkpoint(smollm2) as ck:
        assert ck.kind == "gguf"


def test_open_checkpoint_errors(tmp_path):
    with pytest.raises(BadInputError, match="no such file or folder") as e:
        open_checkpoint(tmp_path / "missing")
    assert str(tmp_path / "missing") in str(e.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BadInputError, match="no weights found"):
        open_checkpoint(empty)
    z = tmp_path / "model.zip"
    z.write_bytes(b"PK\x03\x04" + bytes(60))
    with pytest.raises(FormatError) as e:
        open_checkpoint(z)
    assert str(e.value) == f"{z}: not a GGUF (magic b'PK\\x03\\x04') or safetensors file"
    g = tmp_path / "fake.gguf"
    g.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(FormatError, match=r"named \.gguf but starts with b'GGML', not the GGUF magic b'GGUF'"):
        open_checkpoint(g)
    e0 = tmp_path / "zero.bin"
    e0.write_bytes(b"")
    with pytest.raises(FormatError, match=r"empty file \(0 bytes\)"):
        open_checkpoint(e0)
    bad = tmp_path / "bad.safetensors"  # named safetensors: the parser's own error
    bad.write_bytes(b"\x01\x02")
    with pytest.raises(FormatError, match="too short for the 8-byte header length"):
        open_checkpoint(bad)
    pt = tmp_path / "pt"
    pt.mkdir()
    (pt / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(UnsupportedError, match="safetensors"):
        open_checkpoint(pt)


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_inspect_text_and_json(tmp_path, rng):
    folder = tmp_path / "m"
    make_sharded(folder, rng, n_shards=2)
    runner = CliRunner()
    r = runner.invoke(main, ["inspect", str(folder)])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("source") and "layers.1.w0.weight" in r.output
    r = runner.invoke(main, ["inspect", str(folder), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == describe.describe(folder)


@pytest.mark.real
def test_cli_inspect_gguf(smollm2):
    r = CliRunner().invoke(main, ["inspect", str(smollm2), "--json"])
    assert r.exit_code == 0
    assert _counts(json.loads(r.stdout)) == SMOLLM2_TYPES


@pytest.mark.parametrize("kind", ["missing", "not_a_model", "hostile"])
def test_cli_inspect_bad_input(tmp_path, kind):
    path = tmp_path / "x.safetensors"
    if kind == "not_a_model":
        path = tmp_path / "notes.txt"
        path.write_text("hello world, not weights")
    elif kind == "hostile":
        path.write_bytes(b"\x10" + bytes(7) + b'{"a": {"dtype": "F32"')
    r = CliRunner().invoke(main, ["inspect", str(path)])
    assert r.exit_code == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and re.match(r"panelpack: error: .+", lines[0]), r.stderr
    assert str(path) in lines[0]
    assert "Traceback" not in r.output and not isinstance(r.exception, (AssertionError, TypeError))
