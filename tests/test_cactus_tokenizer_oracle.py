"""The cactus tokenizer files against cactus-compute 2.2.2's own tokenizer step (transformers
5.5.4 loads the folder, ``convert_hf_tokenizer`` writes): file for file identical, on folders
covering each tokenizer class of ``cactus_tokenizer.TOKENIZER_CLASSES`` and each way
transformers adds or overrides special tokens (skipped when the oracle is not installed)."""

from __future__ import annotations

import json
import shutil

import pytest

from panelpack.convert import cactus as target
from panelpack.convert import cactus_tokenizer as ct

import cactus_peer
from cactus_tokenizers import build_variants

ENGINE_FILES = ("vocab.txt", "merges.txt", "special_tokens.json", "tokenizer_config.txt", "chat_template.jinja2")


def ours(src, out):
    out.mkdir()
    for name in target.SIDE_FILES:  # as convert_cactus: the side files first
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)
    mt = json.loads((src / "config.json").read_text())["model_type"]
    return ct.write_tokenizer_files(src, out, mt, target.FAMILIES[mt])


def assert_same_tokenizer_files(theirs, mine):
    """Every file of cactus's folder, ours byte for byte (its re-serialised tokenizer.json aside)."""
    names = {p.name for p in theirs.iterdir()} - {"tokenizer.json"}
    assert names == {p.name for p in mine.iterdir()} - {"tokenizer.json"}
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
                                  "qwen2-added-outside-vocab", "gpt2-defaults"])
def test_tokenizer_files_equal_cactus(variants, name, tmp_path):
    d, v = variants
    written = ours(v[name], tmp_path / "ours")
    assert written
    assert_same_tokenizer_files(d / "cactus" / name, tmp_path / "ours")


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
               "spm-qwen2-backend": ("bpe", 340, {"tokenizer_class": "GPT2Tokenizer"})}
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
    for name in folders:  # after the unshimmed run: the shim stays in the oracle process
        ops.append({"op": "tokenizer", "model": str(d / "src" / name), "out": str(d / "cactus" / name),
                    "spm_proto_shim": True})
    cactus_peer.run(ops, d)
    return d


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
