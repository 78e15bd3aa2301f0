"""The cactus tokenizer files against cactus-compute 2.2.2's own tokenizer step (transformers
5.5.4 loads the folder, ``convert_hf_tokenizer`` writes): file for file identical, on folders
covering each tokenizer class of ``cactus_tokenizer.TOKENIZER_CLASSES`` and each way
transformers adds or overrides special tokens (skipped when the oracle is not installed)."""

from __future__ import annotations

import json
import shutil

import pytest
from cactus_tokenizers import build_variants

from panelpack.convert import cactus as target
from panelpack.convert import cactus_tokenizer as ct
from panelpack.formats import arch

import cactus_peer

ENGINE_FILES = ("vocab.txt", "merges.txt", "special_tokens.json", "tokenizer_config.txt", "chat_template.jinja2",
                "tokenizer.json")



#: every test here runs the peer (cactus-compute and transformers) in its own process: the slow tier
pytestmark = pytest.mark.slow

def ours(src, out):
    out.mkdir()
    for name in target.SIDE_FILES:  # as convert_cactus: the side files first
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)
    mt = json.loads((src / "config.json").read_text())["model_type"]
    return ct.write_tokenizer_files(src, out, mt, arch.for_hf_config({"model_type": mt}).cactus_family)


def assert_same_tokenizer_files(theirs, mine):
    """Every file of cactus's folder, ours byte for byte (tokenizer.json: transformers' re-serialised one)."""
    names = {p.name for p in theirs.iterdir()}
    assert names == {p.name for p in mine.iterdir()}
    for name in sorted(names):
        assert (theirs / name).read_bytes() == (mine / name).read_bytes(), name
    assert {n for n in ENGINE_FILES if (theirs / n).exists()} >= {"vocab.txt", "merges.txt", "special_tokens.json",
                                                                   "tokenizer_config.txt"}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    cactus_peer.require()
    d = tmp_path_factory.mktemp("tok")
    v = build_variants(d / "src")
    cactus_peer.run([{"op": "tokenizer", "model": str(p), "out": str(d / "cactus" / name)} for name, p in v.items()], d)
    return d, v


@pytest.mark.parametrize("name", ["llama-config-dicts", "llama-class", "gpt2-class-tools", "fast-backend-map",
                                  "qwen2-class-jinja", "codellama-bytelevel", "qwen2-foreign-class",
                                  "qwen2-added-outside-vocab", "gpt2-defaults", "model-specific-tokens",
                                  "codellama-config-extras", "map-overrides-config", "codellama-specific-override",
                                  "llama3-like"])
@pytest.mark.slow
def test_tokenizer_files_equal_cactus(variants, name, tmp_path):
    d, v = variants
    written = ours(v[name], tmp_path / "ours")
    assert written
    assert_same_tokenizer_files(d / "cactus" / name, tmp_path / "ours")


LLAMA2_CONFIG = {
    "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
    "pad_token": None, "chat_template": "{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}",
    "added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "normalized": not sp, "rstrip": False,
                                      "single_word": False, "special": sp}
                             for i, (c, sp) in enumerate([("<unk>", True), ("<s>", True), ("</s>", True), ("<ctl>", True),
                                                          ("<tool_call>", False)])}}
"""A Llama-2 style tokenizer config (the folder a llama.cpp ``llama``-tokenizer GGUF stands for);
``<ctl>`` (control, id 3) and ``<tool_call>`` (user-defined, id 4) are the trained extra pieces
(SentencePiece puts control symbols before user-defined ones; asserted in the test)."""

CORPUS = "\n".join([f"the quick brown fox jumps over the lazy dog {i} times, said the panel packer" for i in range(200)]
                   + ["hello world tokenizer café naïve 東京 ü"] * 20) + "\n"


@pytest.fixture(scope="module")
def sentencepiece_folders(tmp_path_factory):
    """llama folders with only a SentencePiece ``tokenizer.model`` (BPE and Unigram, byte
    fallback, a user-defined and a control piece), one also with a tokenizer config."""
    cactus_peer.require()
    from cactus_models import build_hf_config

    d = tmp_path_factory.mktemp("spm")
    (d / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    folders = {"spm-bpe": ("bpe", 340, None), "spm-unigram": ("unigram", 320, None),
               "spm-bpe-config": ("bpe", 340, {"tokenizer_class": "LlamaTokenizerFast", "chat_template": "{{ x }}",
                                                "additional_special_tokens": ["<tool_call>"], "pad_token": "<unk>"}),
               "spm-qwen2": ("bpe", 340, None),
               "spm-qwen2-backend": ("bpe", 340, {"tokenizer_class": "GPT2Tokenizer"}),
               "gguf-llama-hf": ("bpe", 330, LLAMA2_CONFIG)}
    ops = []
    for name, (kind, size, tc) in folders.items():
        f = d / "src" / name
        f.mkdir(parents=True)
        (f / "config.json").write_text(json.dumps(build_hf_config("qwen2" if "qwen2" in name else "llama")))
        if tc is not None:
            (f / "tokenizer_config.json").write_text(json.dumps(tc))
        ops.append({"op": "spm_train", "corpus": str(d / "corpus.txt"), "folder": str(f), "model_type": kind,
                    "vocab_size": size, "user_defined": ["<tool_call>"], "control": ["<ctl>"]})
    ops.append({"op": "tokenizer", "model": str(d / "src" / "spm-bpe"), "out": str(d / "cactus" / "unshimmed")})
    ops.append({"op": "spm_pieces", "model": str(d / "src" / "gguf-llama-hf" / "tokenizer.model"),
                "out": str(d / "gguf-llama-pieces.json")})
    for name in folders:  # after the unshimmed run: the shim stays in the oracle process
        ops.append({"op": "tokenizer", "model": str(d / "src" / name), "out": str(d / "cactus" / name),
                    "spm_proto_shim": True})
    cactus_peer.run(ops, d)
    return d


@pytest.mark.slow
@pytest.mark.parametrize("name", ["spm-bpe", "spm-unigram", "spm-bpe-config", "spm-qwen2"])
def test_sentencepiece_tokenizer_files_equal_cactus(sentencepiece_folders, name, tmp_path):
    """What cactus writes where transformers can read the SentencePiece model (see
    cactus_oracle.py's ``spm_proto_shim``): its BPE re-expression, merges generated from the
    vocabulary, the control and user-defined pieces as special tokens, CodeLlama's infill tokens."""
    d = sentencepiece_folders
    assert ours(d / "src" / name, tmp_path / "ours")
    assert_same_tokenizer_files(d / "cactus" / name, tmp_path / "ours")
    assert len((tmp_path / "ours" / "merges.txt").read_text(encoding="utf-8").splitlines()) > 1


def test_sentencepiece_cases_not_reproduced(sentencepiece_folders, tmp_path, caplog):
    """A SentencePiece-only folder whose class is the plain backend (here: a qwen2 config naming
    another class): transformers builds that backend from the proto's normalizer and trainer
    specs, which this converter does not reproduce: no tokenizer files, logged. And cactus's
    pinned stack (protobuf < 7, sentencepiece 0.2.3) cannot read any tokenizer.model: without
    the shim it writes no tokenizer files at all."""
    d = sentencepiece_folders
    with caplog.at_level("WARNING"):
        assert ours(d / "src" / "spm-qwen2-backend", tmp_path / "ours") == []
    assert "builds its backend from the proto" in caplog.text and not (tmp_path / "ours" / "vocab.txt").exists()
    assert (d / "cactus" / "spm-qwen2-backend" / "vocab.txt").exists()  # the case is real: cactus writes them
    assert not (d / "cactus" / "unshimmed" / "vocab.txt").exists()


def _gguf_tokenizer_only(path, meta: dict):
    """A GGUF holding only tokenizer key/values, written by gguf-py (no tensors)."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in meta.items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value[0], str):
            w.add_array(key, value)
        elif isinstance(value[0], float):
            w.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.FLOAT32)
        else:
            w.add_key_value(key, value, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_sentencepiece_tokenizer_equals_cactus_on_its_hf_folder(sentencepiece_folders, tmp_path):
    """A ``llama``-tokenizer GGUF as llama.cpp writes one from a SentencePiece model (pieces,
    scores and types unchanged, special ids from the trainer spec, the chat template), read by
    our GGUF reader: its tokenizer files equal cactus's on the HF folder it came from (the
    tokenizer.model and a Llama-2 style tokenizer config)."""
    from panelpack.formats.checkpoint import open_checkpoint

    d = sentencepiece_folders
    info = json.loads((d / "gguf-llama-pieces.json").read_text(encoding="utf-8"))
    pieces = info["pieces"]
    meta = {"tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": [p[0] for p in pieces], "tokenizer.ggml.scores": [float(p[1]) for p in pieces],
            "tokenizer.ggml.token_type": [int(p[2]) for p in pieces], "tokenizer.ggml.bos_token_id": info["bos"],
            "tokenizer.ggml.eos_token_id": info["eos"], "tokenizer.ggml.unknown_token_id": info["unk"],
            "tokenizer.chat_template": LLAMA2_CONFIG["chat_template"]}
    assert info["pad"] < 0  # no pad: llama.cpp writes no padding id
    assert [p[0] for p in pieces[:5]] == [v["content"] for v in LLAMA2_CONFIG["added_tokens_decoder"].values()]
    g = _gguf_tokenizer_only(tmp_path / "t.gguf", meta)
    out = tmp_path / "ours"
    out.mkdir()
    with open_checkpoint(g) as ck:
        assert ct.write_gguf_tokenizer_files(ck.metadata, out, "llama", "generic")
    assert_same_derived_files(d / "cactus" / "gguf-llama-hf", out)


def assert_same_derived_files(theirs, mine, without=()):
    """The files derived from a GGUF (no side files to copy) against cactus's on the HF folder."""
    names = {p.name for p in mine.iterdir()}
    assert names == {p.name for p in theirs.iterdir()} - {"tokenizer.model", "config.json", *without}
    for name in sorted(names):
        assert (theirs / name).read_bytes() == (mine / name).read_bytes(), name


@pytest.mark.slow
@pytest.mark.real
def test_gguf_bpe_tokenizer_equals_cactus_on_its_hf_folder(smollm2, tmp_path):
    """The real SmolLM2 GGUF (byte-level BPE, 49152 tokens, 48900 merges): its tokenizer files
    equal what cactus writes for the HF folder the GGUF stands for, written here from the GGUF
    (the plain ``PreTrainedTokenizerFast`` backend, so transformers keeps the source's components;
    the pre-tokenizer ``tokenizer.ggml.pre`` names, ``smollm``, as one Split per regex of the
    runtime's table then ByteLevel; the control tokens as special added tokens), tokenizer.json
    included; model_max_length is not in GGUF."""
    cactus_peer.require()
    from panelpack.formats.checkpoint import open_checkpoint

    from cactus_models import build_hf_config

    with open_checkpoint(smollm2) as ck:
        meta = ck.metadata
        tokens = [str(t) for t in meta["tokenizer.ggml.tokens"].tolist()]
        types = [int(t) for t in meta["tokenizer.ggml.token_type"].tolist()]
        merges = [str(m).split(" ") for m in meta["tokenizer.ggml.merges"].tolist()]
        ids = {k: int(meta[f"tokenizer.ggml.{g}_token_id"]) for k, g in
               (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding"))}
        chat = str(meta["tokenizer.chat_template"])
        out = tmp_path / "ours"
        out.mkdir()
        assert ct.write_gguf_tokenizer_files(meta, out, "llama", "generic")
    src = tmp_path / "hf"
    src.mkdir()
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(tokens) if types[i] == 3]
    from panelpack.formats.tokenizer import PRE_TOKENIZERS

    assert str(meta["tokenizer.ggml.pre"]) == "smollm"
    splits = [{"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False}
              for rx in PRE_TOKENIZERS["smollm"]]
    assert len(splits) == 2
    bl = {"add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    (src / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [*splits, {
            "type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", **bl, "trim_offsets": False},
        "decoder": {"type": "ByteLevel", **bl},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}, ensure_ascii=False), encoding="utf-8")
    (src / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", **{f"{k}_token": tokens[i] for k, i in ids.items()}, "chat_template": chat,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}},
        ensure_ascii=False), encoding="utf-8")
    (src / "config.json").write_text(json.dumps(build_hf_config("llama")))
    cactus_peer.run([{"op": "tokenizer", "model": str(src), "out": str(tmp_path / "cactus")}], tmp_path)
    assert (tmp_path / "cactus" / "tokenizer.json").is_file()
    assert_same_derived_files(tmp_path / "cactus", out)
    assert "has_chat_template=true" in (out / "tokenizer_config.txt").read_text()


def _byte_level_meta(pre: str) -> dict:
    tokens = ["<|endoftext|>", "<tool_call>", "a", "b", "ab", "\u0120a"]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [3, 4, 1, 1, 1, 1], "tokenizer.ggml.merges": ["a b", "\u0120 a"],
            "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 0}


@pytest.mark.parametrize("pre", ["llama3", "qwen2", "default"])
def test_gguf_byte_level_tokenizer_json_follows_the_runtime_table(pre, tmp_path):
    """The tokenizer.json of a byte-level GGUF: one Split per regex of the runtime's table for
    ``tokenizer.ggml.pre`` then ByteLevel, ``ignore_merges`` where the runtime ignores merges,
    the control token special and the user-defined one not."""
    from panelpack.formats.tokenizer import IGNORE_MERGES, PRE_TOKENIZERS

    assert "tokenizer.json" in ct.write_gguf_tokenizer_files(_byte_level_meta(pre), tmp_path, "llama", "generic")
    doc = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    parts = doc["pre_tokenizer"]["pretokenizers"]
    assert [p["pattern"]["Regex"] for p in parts[:-1]] == list(PRE_TOKENIZERS[pre])
    assert parts[-1] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    assert doc["model"]["ignore_merges"] == (pre in IGNORE_MERGES) and doc["model"]["merges"] == [["a", "b"], ["\u0120", "a"]]
    assert [(a["content"], a["special"]) for a in doc["added_tokens"]] == [("<|endoftext|>", True), ("<tool_call>", False)]


def test_gguf_unknown_pre_tokenizer_gets_no_tokenizer_json(tmp_path, caplog):
    """A pre-tokenizer the runtime's table lacks: the other tokenizer files, no tokenizer.json, logged."""
    with caplog.at_level("WARNING"):
        written = ct.write_gguf_tokenizer_files(_byte_level_meta("jais"), tmp_path, "llama", "generic")
    assert "tokenizer.json" not in written and not (tmp_path / "tokenizer.json").exists()
    assert "vocab.txt" in written and "'jais'" in caplog.text and "tokenizer.ggml.pre" in caplog.text
