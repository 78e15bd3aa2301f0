"""Small HF tokenizer folders (config.json + tokenizer files, no weights) covering the ways
transformers 5.5.4 resolves a llama-family tokenizer: no tokenizer config (CodeLlama's class by
the llama config), explicit classes (Llama, GPT2, the plain backend, Qwen2), a class the qwen2
mapping overrides, AddedToken dicts, ``added_tokens_decoder`` with tool tokens,
``special_tokens_map.json``, a ``chat_template.jinja`` file, and special tokens that are not in
the vocabulary. ``cactus_models.build_hf`` gives the base config and vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

from panelpack.convert.example import _tokenizer

from cactus_models import build_hf_config


def _added(i: int, content: str, special: bool = True) -> dict:
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def bytelevel_tokenizer(added: list[tuple[str, bool]], in_vocab: bool = True) -> tuple[dict, int]:
    """A GPT-2 style byte-level BPE ``tokenizer.json`` with merges; ``added`` tokens after the
    vocabulary (also in the model vocabulary when ``in_vocab``). Returns it and the first added id."""
    chars = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a"]
    vocab = {c: i for i, c in enumerate(chars)}
    merges = [["\u0120", "t"], ["h", "e"], ["\u0120t", "he"], ["i", "n"], ["\u0120", "a"]]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    base = len(vocab)
    toks = [_added(base + i, c, sp) for i, (c, sp) in enumerate(added)]
    if in_vocab:
        vocab.update({t["content"]: t["id"] for t in toks})
    bl = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": toks, "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", **bl}, "post_processor": {"type": "ByteLevel", **bl},
            "decoder": {"type": "ByteLevel", **bl},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}, base


def _write(folder: Path, arch: str, tj: dict, tc: dict | None = None, stm: dict | None = None,
           jinja: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(build_hf_config(arch), indent=2) + "\n")
    (folder / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    if tc is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(tc, ensure_ascii=False))
    if stm is not None:
        (folder / "special_tokens_map.json").write_text(json.dumps(stm))
    if jinja is not None:
        (folder / "chat_template.jinja").write_text(jinja)
    return folder


def _added_token(content: str) -> dict:
    return {"__type": "AddedToken", "content": content, "lstrip": False, "rstrip": False, "normalized": False,
            "single_word": False, "special": True}


CHAT = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<tool_call>", True),
         ("</tool_call>", True), ("<extra>", False)]


def _llama3_json() -> dict:
    """Llama-3 style: byte-level BPE, special tokens outside the model vocabulary, a
    TemplateProcessing post-processor that adds ``<|begin_of_text|>``."""
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>"]
    tj, base = bytelevel_tokenizer([(n, True) for n in names], in_vocab=False)
    bos = {"id": "<|begin_of_text|>", "ids": [base], "tokens": ["<|begin_of_text|>"]}
    tj["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": bos}}]}
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    return tj


def build_variants(root: Path) -> dict[str, Path]:
    """name -> folder; every one loads in transformers 5.5.4 (and so in cactus's converter)."""
    sp = _tokenizer(512)
    bl, base = bytelevel_tokenizer(ADDED)
    bl_out, _ = bytelevel_tokenizer(ADDED, in_vocab=False)
    atd = {str(base + i): {k: v for k, v in _added(base + i, c, s).items() if k != "id"} for i, (c, s) in enumerate(ADDED)}
    v = {
        "llama-config-dicts": _write(root / "b", "llama", sp, {
            "bos_token": "<s>", "eos_token": _added_token("</s>"), "unk_token": "<unk>", "model_max_length": 2048,
            "chat_template": "{{ messages }}"}),
        "llama-class": _write(root / "c", "llama", sp, {
            "tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
            "pad_token": None}),
        "gpt2-class-tools": _write(root / "d", "llama", bl, {
            "tokenizer_class": "GPT2Tokenizer", "added_tokens_decoder": atd,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>", "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>",
            "model_max_length": 8192, "chat_template": CHAT}),
        "fast-backend-map": _write(root / "e", "llama", bl, {
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
            stm={"additional_special_tokens": ["<tool_call>"], "pad_token": "<|endoftext|>"}),
        "qwen2-class-jinja": _write(root / "f", "qwen2", bl, {
            "tokenizer_class": "Qwen2Tokenizer", "added_tokens_decoder": atd, "bos_token": None,
            "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 32768,
            "errors": "replace"}, jinja=CHAT),
        "codellama-bytelevel": _write(root / "g", "llama", bl),
        "qwen2-foreign-class": _write(root / "h", "qwen2", bl, {"tokenizer_class": "GPT2Tokenizer"}),
        "qwen2-added-outside-vocab": _write(root / "i", "qwen2", bl_out, {
            "tokenizer_class": "Qwen2TokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
            "bos_token": None}),
        "gpt2-defaults": _write(root / "j", "llama", bl_out, {"tokenizer_class": "GPT2TokenizerFast"}),
        "model-specific-tokens": _write(root / "k", "llama", bl, {
            "tokenizer_class": "GPT2Tokenizer", "eos_token": "<|im_end|>", "image_token": "<image>",
            "additional_special_tokens": ["<|im_start|>", "<new_extra>"]}),
        "codellama-config-extras": _write(root / "l", "llama", sp, {
            "additional_special_tokens": ["<tok300>", "tok301"], "eos_token": "</s>"}),
        "codellama-specific-override": _write(root / "n", "llama", sp, {
            "prefix_token": None, "suffix_token": "<suf2>", "eot_token": _added_token("tok400")}),
        "llama3-like": _write(root / "o", "llama", _llama3_json(), {
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
            "model_max_length": 131072, "chat_template": CHAT, "clean_up_tokenization_spaces": True,
            "added_tokens_decoder": {str(i): {k: v for k, v in a.items() if k != "id"}
                                     for a in _llama3_json()["added_tokens"] for i in [a["id"]]}}),
        "map-overrides-config": _write(root / "m", "llama", bl, {
            "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": "<|im_start|>"},
            stm={"eos_token": "<|im_end|>", "unk_token": {"content": "<|endoftext|>", "lstrip": False}}),
    }
    return v
