"""The ``tokenizer.json`` transformers 5.5.4 saves into cactus's output folder (its
``save_pretrained`` step), for a tokenizer :mod:`.cactus_tokenizer` has resolved.

``tokenizers`` serializes its ``Tokenizer`` as JSON with two-space indentation, UTF-8 unescaped,
keys in struct order (``version``, ``truncation``, ``padding``, ``added_tokens``, ``normalizer``,
``pre_tokenizer``, ``post_processor``, ``decoder``, ``model``); the BPE vocabulary by id, merges
as pairs; added tokens by id with their five flags. That is ``json.dumps(doc, indent=2,
ensure_ascii=False)`` of the document built here.

The components: a class that rebuilds its backend (:data:`REBUILT`) sets normalizer,
pre-tokenizer, decoder and the BPE model's options itself (from its ``__init__``, reading the
tokenizer config's ``add_prefix_space`` and ``legacy``); the plain backend keeps the source's
components as parsed (re-serialized, so a source written by ``tokenizers`` comes back the same).
The post-processor: the source's, unless the class passes ``add_bos_token`` explicitly
(CodeLlama) or the source has none (or, without a ``tokenizer.json``, the config sets
``add_bos_token``/``add_eos_token``): then transformers' ``update_post_processor`` template
(``bos:0 $A:0 eos:0``, pair ``... bos:1 $B:1 eos:1``, each part present when added).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from .cactus_tokenizer_types import FLAG_KEYS, Resolved, TokenizerSpec

QWEN2_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
"""Qwen2Tokenizer's split pattern (transformers' ``PRETOKENIZE_REGEX``)."""


def _byte_level(prefix: bool, trim: bool = True, regex: bool = True) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": trim, "use_regex": regex}


def _metaspace(scheme: str) -> dict:
    return {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": False}


def _llama_decoder(strip: bool) -> dict:
    parts: list[dict] = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
                         {"type": "Fuse"}]
    if strip:
        parts.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {"type": "Sequence", "decoders": parts}


def _model(r: Resolved, unk: Optional[str], prefix: Optional[str], suffix: Optional[str], fuse: bool,
           fallback: bool, dropout: Any = None, ignore: bool = False) -> dict:
    return {"type": "BPE", "dropout": dropout, "unk_token": unk, "continuing_subword_prefix": prefix,
            "end_of_word_suffix": suffix, "fuse_unk": fuse, "byte_fallback": fallback, "ignore_merges": ignore,
            "vocab": dict(sorted(r.vocab.items(), key=lambda kv: kv[1])), "merges": [list(m) for m in r.merges]}


def _prefix_space(tc: dict, default: bool) -> bool:
    v = tc.get("add_prefix_space")
    return default if v is None else bool(v)


def _code_llama(spec: TokenizerSpec, r: Resolved) -> dict:
    aps = _prefix_space(spec.config, True)
    unk = r.specials.get("unk_token")
    return {"normalizer": None, "pre_tokenizer": _metaspace("first" if aps else "never"),
            "decoder": _llama_decoder(True), "model": _model(r, str(unk), None, None, True, True),
            "explicit_bos": True, "add_bos": True}


def _llama(spec: TokenizerSpec, r: Resolved) -> dict:
    aps = _prefix_space(spec.config, True)
    scheme = ("always" if spec.config.get("legacy", False) else "first") if aps else "never"
    return {"normalizer": None, "pre_tokenizer": _metaspace(scheme), "decoder": _llama_decoder(aps),
            "model": _model(r, None, None, None, True, True)}


def _qwen2(spec: TokenizerSpec, r: Resolved) -> dict:
    split = {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False}
    return {"normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                split, _byte_level(_prefix_space(spec.config, False), True, False)]},
            "decoder": _byte_level(True), "model": _model(r, None, "", "", False, False)}


def _gpt2(spec: TokenizerSpec, r: Resolved) -> dict:
    return {"normalizer": None, "pre_tokenizer": _byte_level(_prefix_space(spec.config, False)),
            "decoder": _byte_level(True), "model": _model(r, None, "", "", False, False)}


REBUILT: dict[str, Callable[[TokenizerSpec, Resolved], dict]] = {
    "CodeLlamaTokenizer": _code_llama, "LlamaTokenizer": _llama, "Qwen2Tokenizer": _qwen2, "GPT2Tokenizer": _gpt2,
}
"""Class name -> its rebuilt backend (normalizer, pre-tokenizer, decoder, BPE model; CodeLlama
also passes ``add_bos_token`` = True explicitly). Keys: the classes of ``TOKENIZER_CLASSES``
with a ``backend``."""


def _as_is(spec: TokenizerSpec, r: Resolved) -> dict:
    tj = spec.source_json or {}
    m = tj.get("model") or {}
    return {"normalizer": tj.get("normalizer"), "pre_tokenizer": tj.get("pre_tokenizer"), "decoder": tj.get("decoder"),
            "model": _model(r, m.get("unk_token"), m.get("continuing_subword_prefix"), m.get("end_of_word_suffix"),
                            bool(m.get("fuse_unk", False)), bool(m.get("byte_fallback", False)), m.get("dropout"),
                            bool(m.get("ignore_merges", False)))}


def _template(r: Resolved, add_bos: bool, add_eos: bool) -> dict:
    bos, eos = r.specials.get("bos_token"), r.specials.get("eos_token")
    add_bos, add_eos = add_bos and bos is not None, add_eos and eos is not None

    def special(tok: str, type_id: int) -> dict:
        return {"SpecialToken": {"id": tok, "type_id": type_id}}

    def seq(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    first = bos if add_bos else None
    last = eos if add_eos else None

    def around(tok: str | None, type_id: int) -> list[dict]:
        return [] if tok is None else [special(tok, type_id)]

    single = around(first, 0) + [seq("A", 0)] + around(last, 0)
    pair = single + around(first, 1) + [seq("B", 1)] + around(last, 1)
    toks = [t for t in (first, last) if t is not None]
    specials = {t: {"id": t, "ids": [r.token_id(t)], "tokens": [t]} for t in sorted(set(toks))}
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}


def gguf_source_json(pre: str, vocab: dict[str, int], merges: list[tuple[str, str]],
                     added: list[tuple[int, str]], flags: dict[int, dict]) -> Optional[dict]:
    """The byte-level BPE ``tokenizer.json`` of the HF folder a ``gpt2``-tokenizer GGUF stands
    for; None when its ``tokenizer.ggml.pre`` is not in the runtime's table.

    The pre-tokenizer is the regex list the runtime applies for ``pre``
    (``formats.tokenizer.PRE_TOKENIZERS``): one ``Split`` per regex (``Isolated``: what does not
    match stays a piece, as llama.cpp splits), then ``ByteLevel`` without its own regex, the way
    Llama 3 and Qwen2 folders spell theirs; ``ignore_merges`` where the runtime has it
    (``IGNORE_MERGES``). No normalizer (GGUF records none); ``ByteLevel`` decoder and
    post-processor, as GPT-2-style folders have them."""
    from ..formats.tokenizer import IGNORE_MERGES, PRE_TOKENIZERS

    if pre not in PRE_TOKENIZERS:
        return None
    splits = [{"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False}
              for rx in PRE_TOKENIZERS[pre]]
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": t, **{k: flags[i][k] for k in FLAG_KEYS}} for i, t in added],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [*splits, _byte_level(False, True, False)]},
            "post_processor": _byte_level(True, False), "decoder": _byte_level(True),
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": pre in IGNORE_MERGES, "vocab": dict(vocab), "merges": [list(m) for m in merges]}}


def saved_tokenizer_json(spec: TokenizerSpec, r: Resolved) -> str:
    """The text of the ``tokenizer.json`` transformers' ``save_pretrained`` writes."""
    parts = REBUILT[r.class_name](spec, r) if r.class_name in REBUILT else _as_is(spec, r)
    tc = spec.config
    from_file = spec.source_json is not None  # then transformers drops the config's add_bos/eos_token
    add_bos = bool(tc.get("add_bos_token", parts.get("add_bos", False))) if not from_file else parts.get("add_bos", False)
    add_eos = bool(tc.get("add_eos_token", False)) if not from_file else False
    explicit = parts.get("explicit_bos", False) or (not from_file and ("add_bos_token" in tc or "add_eos_token" in tc))
    post = (spec.source_json or {}).get("post_processor")
    if explicit or post is None:
        post = _template(r, add_bos, add_eos)
    tj = spec.source_json or {}
    doc = {"version": "1.0", "truncation": tj.get("truncation"), "padding": tj.get("padding"),
           "added_tokens": [{"id": i, "content": t, **{k: r.flags[i][k] for k in FLAG_KEYS}} for i, t in r.added.items()],
           "normalizer": parts["normalizer"], "pre_tokenizer": parts["pre_tokenizer"], "post_processor": post,
           "decoder": parts["decoder"], "model": parts["model"]}
    return json.dumps(doc, indent=2, ensure_ascii=False)
