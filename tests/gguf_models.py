"""Tokenizer variants for the GGUF-out tests, on top of tests/hf_models.py's checkpoints.

* :func:`bpe_tokenizer` rebuilds a real byte-level BPE tokenizer (Llama 3's, Qwen2's, GPT-2's) as
  ``tokenizer.json`` from llama.cpp's vocabulary-only ``ggml-vocab-*.gguf`` (the sdist's
  ``models/``): vocabulary, merges and added tokens from the GGUF, the pre-tokenizer,
  normalizer and post-processor of the family's real ``tokenizer.json`` (:data:`BPE_FAMILIES`);
* :func:`with_bpe_tokenizer` swaps it into a checkpoint folder (its SentencePiece model removed);
* :func:`with_tokenizer_config` gives a SentencePiece checkpoint a ``tokenizer_config.json``
  (special tokens, added tokens, a chat template) and a ``generation_config.json`` (sampling).

:data:`CORPUS` is a varied text (ASCII, code, digits, whitespace runs, accents, CJK, emoji,
special tokens) for the tokenization comparisons.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

#: a varied text: ASCII, code, digits, whitespace runs, accents, CJK, emoji
CORPUS = [
    "The quick brown fox jumps over the lazy dog. 12345 67890 3.14159",
    "def main(argv):\n    return {'a': [1, 2, 3], \"b\": None}  # comment\n\tif x == y: pass",
    "Zoë's café naïve façade — résumé; Ångström, Øresund, São Paulo, Łódź, İstanbul",
    "我想在apple工作 日本語のテキスト 한국어 텍스트 нещо на Български Ελληνικά",
    "emoji 🚀 🦙🦙 😶\u200d🌫️ ✅  multiple   spaces\n\n\nnew lines\r\nwindows",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhi there<|im_end|>",
    "SELECT * FROM t WHERE id = 42; -- sql\n<html><body class=\"x\">&amp;</body></html>",
]

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def with_tokenizer_config(src: Path, out: Path) -> Path:
    """A copy of the checkpoint folder ``src`` with a ``tokenizer_config.json`` (BOS/EOS/UNK by
    name, add-bos/eos, a chat template, two added tokens over pieces 3 and 4, one of them not
    special) and a ``generation_config.json`` with sampling settings."""
    shutil.copytree(src, out, dirs_exist_ok=True)
    (out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {"3": {"content": "<|im_start|>", "special": True},
                                 "4": {"content": "<tool\u2581call>", "special": False}}}, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2, "do_sample": True,
                                                            "temperature": 0.7, "top_k": 20, "top_p": 0.8,
                                                            "repetition_penalty": 1.05}))
    return out


def with_bpe_tokenizer(src: Path, tokenizer: Path, out: Path) -> Path:
    """A copy of the checkpoint folder ``src`` whose tokenizer is the folder ``tokenizer``'s."""
    shutil.copytree(src, out, dirs_exist_ok=True)
    (out / "tokenizer.model").unlink(missing_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / name, out / name)
    return out


# ---- real BPE vocabularies, rebuilt as tokenizer.json from llama.cpp's vocabulary GGUFs ---------
_L3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_Q2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def _byte_level(prefix: bool, trim: bool, regex: bool) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": trim, "use_regex": regex}


def _split_then_bytes(rx: str, trim: bool) -> dict:
    return {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated",
                                                   "invert": False}, _byte_level(False, trim, False)]}


#: family -> (pre_tokenizer, normalizer, BOS added by the post-processor, ignore_merges, config.json
#: architecture): the tokenizer.json pieces the real models ship (Llama 3, Qwen2, GPT-2)
BPE_FAMILIES = {
    "llama-bpe": (_split_then_bytes(_L3, True), None, "<|begin_of_text|>", True, "llama"),
    "qwen2": (_split_then_bytes(_Q2, False), {"type": "NFC"}, None, False, "qwen2"),
    "gpt-2": (_byte_level(False, True, True), None, None, False, "llama"),
}


def bpe_tokenizer(vocab_gguf: str | Path, family: str, out: str | Path) -> Path:
    """A folder with the ``tokenizer.json`` (and ``tokenizer_config.json``) of ``family`` holding the
    vocabulary, merges and added tokens of one of llama.cpp's ``ggml-vocab-*.gguf`` files."""
    from panelpack.formats.gguf import GGUFFile

    pre, norm, bos, ignore, _ = BPE_FAMILIES[family]
    g = GGUFFile(vocab_gguf)
    m = g.metadata
    tokens, types = list(m["tokenizer.ggml.tokens"]), list(m["tokenizer.ggml.token_type"])
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (3, 4):  # CONTROL, USER_DEFINED
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": ty == 4, "special": ty == 3})
        else:
            vocab.setdefault(t, i)
    post: dict = _byte_level(True, False, True)
    if bos:
        tid = tokens.index(bos)
        post = {"type": "Sequence", "processors": [post, {
            "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [tid], "tokens": [bos]}}}]}
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": norm,
           "pre_tokenizer": pre, "post_processor": post, "decoder": _byte_level(True, True, True),
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore,
                     "vocab": vocab, "merges": list(m["tokenizer.ggml.merges"])}}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    eos = tokens[m["tokenizer.ggml.eos_token_id"]] if "tokenizer.ggml.eos_token_id" in m else None
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                           "bos_token": bos, "eos_token": eos,
                                                           "chat_template": CHAT_TEMPLATE}))
    return out
