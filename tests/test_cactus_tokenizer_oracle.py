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
