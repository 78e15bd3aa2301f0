"""The tokenizer files the cactus engine reads, derived from an HF folder's own files
(``tokenizer.json`` with a BPE model, optional ``tokenizer_config.json`` and
``special_tokens_map.json``), without transformers.

Written (the formats of cactus-compute 2.2.2's ``convert_hf_tokenizer``):

* ``vocab.txt``: ``id<TAB>token`` per line, ids ascending, the model vocabulary overlaid with
  the special and added tokens (empty slots skipped);
* ``merges.txt``: ``#version: 0.2`` then one ``a b`` merge per line;
* ``special_tokens.json``: eos/pad/bos/unk ids, ``vocab_size``, ``model_max_length``,
  ``special_tokens`` (id -> token), ``additional_special_tokens``, ``chat_template`` if any;
* ``tokenizer_config.txt``: ``key=value`` lines (vocab size, special ids, model type, max
  length, ``tokenizer_type=bpe``, ``vocab_format=id_tab_token``, normalizer, decoder,
  byte fallback, chat template and tool-token flags);
* ``chat_template.jinja2`` when the tokenizer config has a chat template.

cactus takes the special tokens from a transformers tokenizer object, which adds its class's
defaults where the files declare none (e.g. Qwen2's ``<|endoftext|>``, CodeLlama's infill
tokens for a bare llama ``tokenizer.json``); here they come from the files only. So
``merges.txt`` matches cactus's byte for byte, and the other files match wherever the
source declares its special tokens (real checkpoints do); the differences are counted
by the oracle test. Sources without a BPE ``tokenizer.json`` get none of these files (logged).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger(__name__)

DEFAULT_MAX_LENGTH = 131072
SPECIAL_KEYS = ("eos", "pad", "bos", "unk")
CORE_FALLBACKS = {"pad_token_id": "<pad>", "eos_token_id": "<eos>", "bos_token_id": "<bos>", "unk_token_id": "<unk>"}
TOOL_TOKENS = frozenset({"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>",
                         "</tools>", "<think>", "</think>"})


def _load(path: Path) -> Optional[dict]:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def _content(tok: Any) -> Optional[str]:
    if isinstance(tok, str):
        return tok
    if isinstance(tok, dict) and isinstance(tok.get("content"), str):
        return tok["content"]
    return None


def _is_metaspace_normalizer(n: Any) -> bool:
    return (isinstance(n, dict) and n.get("type") == "Replace" and n.get("pattern", {}).get("String") == " "
            and n.get("content") == "\u2581")


def _decoder_has(d: Any, kind: str) -> bool:
    if not isinstance(d, dict):
        return False
    return d.get("type") == kind or (d.get("type") == "Sequence" and any(_decoder_has(x, kind) for x in d.get("decoders", [])))


def _replace_metaspace_decoder(d: Any) -> bool:
    if not isinstance(d, dict):
        return False
    if d.get("type") == "Replace":
        return d.get("pattern", {}).get("String") == "\u2581" and d.get("content") == " "
    return d.get("type") == "Sequence" and any(_replace_metaspace_decoder(x) for x in d.get("decoders", []))


def write_tokenizer_files(src: Path, out: Path, model_type: str) -> list[str]:
    """Write the engine's tokenizer files into ``out`` from the HF folder ``src``; returns the
    names written (empty when the source has no BPE ``tokenizer.json``)."""
    tj = _load(src / "tokenizer.json")
    model = (tj or {}).get("model") or {}
    if not tj or str(model.get("type", "")).upper() != "BPE" or not isinstance(model.get("vocab"), dict):
        log.info("%s: no BPE tokenizer.json; the cactus tokenizer files are not written", src)
        return []
    tc = _load(src / "tokenizer_config.json") or {}
    vocab: dict[str, int] = model["vocab"]
    size = max(vocab.values()) + 1
    id_to_token = [""] * size
    for t, i in vocab.items():
        if 0 <= i < size:
            id_to_token[i] = t
    added = [a for a in tj.get("added_tokens") or [] if isinstance(a, dict)]
    lookup = {t: i for t, i in vocab.items()}
    lookup.update({a["content"]: int(a["id"]) for a in added if "content" in a and "id" in a})

    with (out / "merges.txt").open("w", encoding="utf-8", newline="") as f:
        f.write("#version: 0.2\n")
        for m in model.get("merges") or []:
            f.write(f"{' '.join(m) if isinstance(m, (list, tuple)) else m}\n")

    ids: dict[str, int] = {}
    special: dict[int, str] = {}
    for key in SPECIAL_KEYS:
        tok = _content(tc.get(f"{key}_token"))
        if tok is not None and tok in lookup:
            ids[f"{key}_token_id"] = lookup[tok]
            special[lookup[tok]] = tok
    for key, tok in CORE_FALLBACKS.items():
        if key not in ids and tok in vocab:
            ids[key] = vocab[tok]
            special[vocab[tok]] = tok
    extra: list[dict[str, Any]] = []
    for a in added:
        if a.get("content") is None or a.get("id") is None:
            continue
        special[int(a["id"])] = a["content"]
        if not any(x["token"] == a["content"] and x["id"] == int(a["id"]) for x in extra):
            extra.append({"token": a["content"], "id": int(a["id"])})
    tools = {}
    for tid, info in (tc.get("added_tokens_decoder") or {}).items():
        c = info.get("content", "") if isinstance(info, dict) else ""
        if c in TOOL_TOKENS:
            tools[int(tid)] = c
            special[int(tid)] = c
    for tok in tc.get("additional_special_tokens") or []:
        tok = _content(tok)
        if tok in lookup:
            special[lookup[tok]] = tok
            if not any(x["token"] == tok and x["id"] == lookup[tok] for x in extra):
                extra.append({"token": tok, "id": lookup[tok]})
    if special and max(special) >= len(id_to_token):
        id_to_token.extend([""] * (max(special) - len(id_to_token) + 1))
    for i, t in special.items():
        id_to_token[i] = t
    written = ["merges.txt", "vocab.txt", "special_tokens.json", "tokenizer_config.txt"]
    with (out / "vocab.txt").open("w", encoding="utf-8") as f:
        for i, t in enumerate(id_to_token):
            if t:
                f.write(f"{i}\t{t}\n")
    chat = tc.get("chat_template") if isinstance(tc.get("chat_template"), str) else None
    if chat:
        (out / "chat_template.jinja2").write_text(chat, encoding="utf-8")
        written.append("chat_template.jinja2")
    max_len = tc.get("model_max_length", DEFAULT_MAX_LENGTH)
    doc = {**ids, "vocab_size": len(id_to_token), "model_max_length": max_len,
           "special_tokens": {str(k): v for k, v in special.items()}, "additional_special_tokens": extra,
           **({"chat_template": chat} if chat else {})}
    with (out / "special_tokens.json").open("w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
    normalizer = decoder = "none"
    if _is_metaspace_normalizer(tj.get("normalizer")):
        normalizer = "metaspace"
    elif _decoder_has(tj.get("decoder"), "ByteFallback"):
        normalizer = "byte_level"
    if _replace_metaspace_decoder(tj.get("decoder")):
        decoder = "replace_metaspace"
    elif _decoder_has(tj.get("decoder"), "ByteFallback"):
        decoder = "byte_level"
    lines = [f"vocab_size={len(id_to_token)}"] + [f"{k}={v}" for k, v in ids.items()]
    if model_type:
        lines.append(f"model_type={model_type}")
    lines += [f"model_max_length={max_len}", "tokenizer_type=bpe", "vocab_format=id_tab_token",
              f"normalizer={normalizer}", f"decoder={decoder}",
              f"byte_fallback={'true' if model.get('byte_fallback') else 'false'}",
              f"has_chat_template={'true' if chat else 'false'}"]
    if tools:
        lines += ["has_tool_support=true", f"tool_token_count={len(tools)}"]
    (out / "tokenizer_config.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return written
