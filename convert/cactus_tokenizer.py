"""The tokenizer files the cactus engine reads, as cactus-compute 2.2.2's converter writes them,
without transformers.

cactus's converter loads the source's tokenizer with transformers 5.5.4 (``AutoProcessor``,
else ``AutoTokenizer``), lets it ``save_pretrained`` into the output folder (a re-serialised
``tokenizer.json``; the saved ``tokenizer_config.json``, ``special_tokens_map.json``,
``added_tokens.json`` and ``chat_template.jinja`` are deleted again), then
``convert_hf_tokenizer`` writes, from that tokenizer object and the saved ``tokenizer.json``:

* ``vocab.txt``: ``id<TAB>token`` per line, ids ascending, the model vocabulary overlaid with
  the special and added tokens (empty slots skipped);
* ``merges.txt``: ``#version: 0.2`` then one ``a b`` merge per line;
* ``special_tokens.json``: the eos/pad/bos/unk ids (those set, in that order), ``vocab_size``,
  ``model_max_length``, ``special_tokens`` (id -> token, insertion order), the
  ``additional_special_tokens`` list, ``chat_template`` if any (``json.dump``, indent 2, UTF-8);
* ``tokenizer_config.txt``: ``key=value`` lines (vocab size, the special ids, model type, max
  length, tokenizer type, vocab format, normalizer, decoder, byte fallback, chat template and
  tool-token flags);
* ``chat_template.jinja2`` when the tokenizer has a chat template.

What transformers adds is reproduced by :data:`TOKENIZER_CLASSES`, the one table of the
tokenizer classes it picks for the llama family (keyed by class name; which class is picked:
:func:`tokenizer_class`): each class's default special tokens, its extra default tokens
(CodeLlama's five infill tokens: a ``llama`` config without a ``tokenizer_class`` gets
``CodeLlamaTokenizer``), and, for classes that rebuild the backend from the vocabulary and
merges, the normalizer, decoder and byte fallback they rebuild it with (those decide
``tokenizer_config.txt``'s ``normalizer``/``decoder``/``byte_fallback``). Special tokens not in
the vocabulary are appended with new ids as the ``tokenizers`` library assigns them
(:func:`_resolve`). The re-serialised ``tokenizer.json`` is :mod:`.cactus_tokenizer_json`'s.
Sources transformers (hence cactus) cannot load get no tokenizer files, as from cactus's
converter; the reason is logged.

Sources: an HF folder (:func:`spec_from_hf`) with a BPE ``tokenizer.json``, or with only a
SentencePiece ``tokenizer.model`` (``formats/sentencepiece.py`` reads its pieces; transformers'
``SentencePieceExtractor`` re-expresses it as BPE: the pieces as vocabulary, merges generated
from it by :func:`generate_merges`, the control and user-defined pieces as additional special
tokens, then the class rebuilds its backend as above; a class without a rebuilt backend is not
reproduced). Note that cactus-compute 2.2.2 on its pinned stack (protobuf < 7, whose
sentencepiece 0.2.3 proto module needs protobuf >= 7) cannot read a ``tokenizer.model`` at all
and writes no tokenizer files for such a source; what is written here is what it writes where
that extraction works.
"""

from __future__ import annotations

import json
import logging
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, cast

from .cactus_tokenizer_types import FLAG_KEYS, Resolved, TokenizerSpec  # noqa: F401  (FLAG_KEYS: re-exported)

log = logging.getLogger(__name__)

VERY_LARGE_INTEGER = 1000000000000000019884624838656
"""transformers' ``model_max_length`` when the tokenizer config sets none (``int(1e30)``)."""
SPECIAL_ATTRIBUTES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""transformers' named special tokens, in the order it adds the missing ones."""
CACTUS_SPECIAL_IDS = ("eos", "pad", "bos", "unk")
"""The ids cactus records, in its order."""
CORE_FALLBACKS = {"pad_token_id": "<pad>", "eos_token_id": "<eos>", "bos_token_id": "<bos>", "unk_token_id": "<unk>"}
TOOL_TOKENS = frozenset({
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>", "<think>",
    "</think>", "<start_function_declaration>", "<end_function_declaration>", "<start_function_call>",
    "<end_function_call>", "<start_function_response>", "<end_function_response>", "<escape>"})
"""Contents cactus counts as tool tokens when the tokenizer config's ``added_tokens_decoder`` has them."""
REMOVED_SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja")
"""Copied side files cactus deletes again after ``save_pretrained``."""

_LLAMA_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


@dataclass(frozen=True)
class Backend:
    """What a class's rebuilt ``tokenizers`` backend holds that cactus reads."""

    normalizer: Any
    decoder: Any
    byte_fallback: bool


@dataclass(frozen=True)
class TokenizerClass:
    defaults: dict[str, str] = field(default_factory=dict)
    """Default named special tokens (``bos_token`` ...) the config does not override."""
    specific: dict[str, str] = field(default_factory=dict)
    """Model-specific named special tokens, parameters of the class (``prefix_token`` ...). The
    class adds them after the standard ones and also lists them as its additional special tokens
    (used when the config gives none). A config ``*_token`` key overrides one: ``null`` removes
    it from both, an ``AddedToken`` replaces it in both, a string replaces only the named one
    (transformers moves string values aside before the class sees its parameter)."""
    backend: Optional[Backend] = None
    """None: the source ``tokenizer.json`` is used as it is; else the class rebuilds it."""
    readds_specials: bool = False
    """The class adds all its special tokens again, as plain special tokens, after init (Qwen2)."""


_LLAMA_SPECIALS = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
_ENDOFTEXT = "<|endoftext|>"
TOKENIZER_CLASSES: dict[str, TokenizerClass] = {
    # transformers 5.5.4, models/<name>/tokenization_<name>.py, each class's __init__ defaults
    "TokenizersBackend": TokenizerClass(),
    "PreTrainedTokenizer": TokenizerClass(),  # PreTrainedTokenizerFast: the backend itself
    "LlamaTokenizer": TokenizerClass(_LLAMA_SPECIALS, {}, Backend(None, _LLAMA_DECODER, True)),
    "CodeLlamaTokenizer": TokenizerClass(_LLAMA_SPECIALS, {
        "prefix_token": "\u2581<PRE>", "middle_token": "\u2581<MID>", "suffix_token": "\u2581<SUF>",
        "eot_token": "\u2581<EOT>", "fill_token": "<FILL_ME>"}, Backend(None, _LLAMA_DECODER, True)),
    "Qwen2Tokenizer": TokenizerClass({"unk_token": _ENDOFTEXT, "eos_token": _ENDOFTEXT, "pad_token": _ENDOFTEXT}, {},
                                     Backend({"type": "NFC"}, {"type": "ByteLevel"}, False), readds_specials=True),
    "GPT2Tokenizer": TokenizerClass({"unk_token": _ENDOFTEXT, "bos_token": _ENDOFTEXT, "eos_token": _ENDOFTEXT}, {},
                                    Backend(None, {"type": "ByteLevel"}, False)),
}
MODEL_TYPE_CLASSES: dict[str, tuple[str, bool]] = {
    "llama": ("CodeLlamaTokenizer", False),  # through LlamaConfig, the config class of code_llama
    "qwen2": ("Qwen2Tokenizer", True),
}
"""config.json ``model_type`` -> (the class transformers picks without a ``tokenizer_class``,
whether the model type is listed under its own name: then a different ``tokenizer_class`` in
the tokenizer config falls back to the plain backend)."""


class Unloadable(Exception):
    """transformers would refuse this tokenizer (so cactus writes no tokenizer files)."""


def _load(path: Path) -> Optional[dict]:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def spec_from_hf(src: Path, model_type: str) -> Optional[TokenizerSpec]:
    """The tokenizer of the HF folder ``src``; None (logged) when it has none we can read."""
    tj = _load(src / "tokenizer.json")
    tc = _load(src / "tokenizer_config.json")
    chat = src / "chat_template.jinja"
    common: dict[str, Any] = dict(config=tc or {}, special_map=_load(src / "special_tokens_map.json") or {},
                  chat_file=chat.read_text(encoding="utf-8") if chat.is_file() else None,
                  model_type=model_type, has_config_file=tc is not None)
    if tj is None and (src / "tokenizer.model").is_file():
        return _spec_from_sentencepiece(src / "tokenizer.model", common)
    model = (tj or {}).get("model") or {}
    if not tj or str(model.get("type", "")).upper() != "BPE" or not isinstance(model.get("vocab"), dict):
        kind = model.get("type") if tj else None
        log.warning("%s: %s; the cactus tokenizer files are not written (this converter reproduces BPE "
                    "tokenizer.json files and SentencePiece tokenizer.model files)", src,
                    f"tokenizer.json has a {kind} model" if kind else "no readable tokenizer.json or tokenizer.model")
        return None
    merges = [cast("tuple[str, str]", tuple(m.split(" ")) if isinstance(m, str) else tuple(m))
              for m in model.get("merges") or []]
    entries = [a for a in tj.get("added_tokens") or []
               if isinstance(a, dict) and isinstance(a.get("content"), str) and a.get("id") is not None]
    added = [(int(a["id"]), a["content"]) for a in entries]
    return TokenizerSpec(dict(model["vocab"]), merges, added, tj.get("normalizer"), tj.get("decoder"),
                         bool(model.get("byte_fallback", False)), source_json=tj,
                         added_flags={int(a["id"]): added_token_flags(a) for a in entries}, **common)


GGUF_TOKENIZER_CLASSES = {"gpt2": "PreTrainedTokenizerFast", "llama": "LlamaTokenizer"}
"""GGUF ``tokenizer.ggml.model`` -> the class of the equivalent HF folder's tokenizer config
(``gpt2``: byte-level BPE, taken as it is; ``llama``: a SentencePiece model)."""
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}


def spec_from_gguf(meta: Any, model_type: str, what: str = "GGUF") -> Optional[TokenizerSpec]:
    """The tokenizer of the HF folder a GGUF file's tokenizer metadata stands for (llama.cpp's
    converter keeps the vocabulary, token types, merges, special ids and chat template):

    * ``gpt2``: ``tokenizer.json`` = BPE over ``tokens`` (id = position) with ``merges``, no byte
      fallback, byte-level decoder; added tokens = CONTROL (special) and USER_DEFINED pieces; the
      pre-tokenizer ``tokenizer.ggml.pre`` names (:func:`.cactus_tokenizer_json.gguf_source_json`;
      one the runtime's table lacks: no ``tokenizer.json``, logged);
    * ``llama``: a SentencePiece ``tokenizer.model`` whose pieces and types are ``tokens`` and
      ``token_type`` (llama.cpp writes the SentencePiece types unchanged), no ``tokenizer.json``;
    * ``tokenizer_config.json``: :data:`GGUF_TOKENIZER_CLASSES`' class, bos/eos/unk/pad from the
      ``*_token_id`` keys (explicitly none when absent), ``chat_template``, and
      ``added_tokens_decoder`` for the CONTROL and USER_DEFINED tokens. ``model_max_length`` is
      not recorded in GGUF, so it stays transformers' default.

    None (logged) for other tokenizer models."""
    from ..formats import sentencepiece
    from ..formats.tokenizer import from_gguf_metadata

    model = meta.get("tokenizer.ggml.model")
    if model not in GGUF_TOKENIZER_CLASSES:
        log.warning("%s: tokenizer model %r: the cactus tokenizer files are written for %s only", what, model,
                    sorted(GGUF_TOKENIZER_CLASSES))
        return None
    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    t = from_gguf_metadata({**meta, "tokenizer.ggml.pre": "default"})  # the tokens; `pre` is checked below
    types = list(t.types) + [sentencepiece.NORMAL] * (len(t.tokens) - len(t.types))
    vocab = {tok: i for i, tok in enumerate(t.tokens)}
    added = [(i, tok) for i, tok in enumerate(t.tokens) if types[i] in (sentencepiece.CONTROL, sentencepiece.USER_DEFINED)]
    tc: dict[str, Any] = {"tokenizer_class": GGUF_TOKENIZER_CLASSES[model]}
    for key, gkey in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        i = meta.get(f"tokenizer.ggml.{gkey}_token_id")
        try:
            i = None if isinstance(i, bool) else operator.index(i)
        except TypeError:
            i = None
        tc[f"{key}_token"] = t.tokens[i] if i is not None and 0 <= i < len(t.tokens) else None
    chat = meta.get("tokenizer.chat_template")
    if isinstance(chat, str):
        tc["chat_template"] = chat
    tc["added_tokens_decoder"] = {str(i): {"content": tok, "lstrip": False, "normalized": types[i] != sentencepiece.CONTROL,
                                           "rstrip": False, "single_word": False,
                                           "special": types[i] == sentencepiece.CONTROL} for i, tok in added}
    common: dict[str, Any] = dict(config=tc, model_type=model_type, has_config_file=True)
    if model == "llama":
        merges = sorted(t.merges, key=t.merges.__getitem__) if t.merges else generate_merges(vocab)
        plain = frozenset(tok for i, tok in added if types[i] == sentencepiece.USER_DEFINED)
        return TokenizerSpec(vocab, merges, [], spm_extras=[tok for _, tok in added], spm_plain=plain, **common)
    from .cactus_tokenizer_json import gguf_source_json

    merges = sorted(t.merges, key=t.merges.__getitem__)
    flags = {i: added_token_flags(tc["added_tokens_decoder"][str(i)]) for i, _ in added}
    source = gguf_source_json(pre, vocab, merges, added, flags)
    if source is None:
        log.warning("%s: pre-tokenizer %r (tokenizer.ggml.pre) is not one the runtime knows; no tokenizer.json is "
                    "written (cactus's bundle check asks for one on bpe tokenizers)", what, pre)
    return TokenizerSpec(vocab, merges, added, None, _BYTE_LEVEL, False, source_json=source, added_flags=flags,
                         **common)


def write_gguf_tokenizer_files(meta: Any, out: Path, model_type: str, family: str, what: str = "GGUF") -> list[str]:
    """:func:`write_tokenizer_files` for a GGUF source (see :func:`spec_from_gguf`)."""
    spec = spec_from_gguf(meta, model_type, what)
    return write_spec(spec, out, family, what) if spec is not None else []


def generate_merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """transformers' merges for a vocabulary without any (``generate_merges`` without scores):
    every split of every piece whose halves are both pieces, grouped by piece in vocabulary
    order, each group by (left id, right id), then stably by (piece id, left length, right length)."""
    merges = []
    for piece, pid in vocab.items():
        local = [(piece[:i], piece[i:], pid) for i in range(1, len(piece)) if piece[:i] in vocab and piece[i:] in vocab]
        merges.extend(sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]])))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])))
    return [(a, b) for a, b, _ in merges]


def _spec_from_sentencepiece(path: Path, common: dict) -> TokenizerSpec:
    """A folder with only a SentencePiece ``tokenizer.model``: transformers' ``SentencePieceExtractor``
    for a BPE class gives the vocabulary (piece -> id), merges generated from it, and the control
    and user-defined pieces as additional special tokens (by id)."""
    from ..formats import sentencepiece

    pieces = sentencepiece.read_pieces(path)
    vocab = {p.piece: i for i, p in enumerate(pieces)}
    spm_extras = [p.piece for p in pieces if p.type in (sentencepiece.CONTROL, sentencepiece.USER_DEFINED)]
    plain = frozenset(p.piece for p in pieces if p.type == sentencepiece.USER_DEFINED)
    return TokenizerSpec(vocab, generate_merges(vocab), [], spm_extras=spm_extras, spm_plain=plain, **common)


def tokenizer_class(spec: TokenizerSpec) -> str:
    """The class transformers' ``AutoTokenizer`` picks (by name, ``Fast`` removed)."""
    named = spec.config.get("tokenizer_class")
    named = named.removesuffix("Fast") if isinstance(named, str) else None
    own, listed = MODEL_TYPE_CLASSES.get(spec.model_type, ("TokenizersBackend", False))
    if named is None:
        return own
    if listed and named != own:
        return "TokenizersBackend"
    return named


def added_token_flags(d: Optional[dict] = None) -> dict:
    """An ``AddedToken``'s flags from its serialized form (``tokenizers``' defaults where absent:
    ``normalized`` = not ``special``); None: a token transformers adds as special itself."""
    if d is None:
        return {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    special = bool(d.get("special", False))
    return {"single_word": bool(d.get("single_word", False)), "lstrip": bool(d.get("lstrip", False)),
            "rstrip": bool(d.get("rstrip", False)), "normalized": bool(d.get("normalized", not special)),
            "special": special}


def _token(value: Any, key: str) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and value.get("__type") == "AddedToken" and isinstance(value.get("content"), str):
        return value["content"]
    raise Unloadable(f"{key} is {type(value).__name__}, not a string or an AddedToken")


def _resolve(spec: TokenizerSpec) -> Resolved:
    name = tokenizer_class(spec)
    if name not in TOKENIZER_CLASSES:
        raise Unloadable(f"tokenizer class {name!r} is not one this converter reproduces ({sorted(TOKENIZER_CLASSES)})")
    cls = TOKENIZER_CLASSES[name]
    if spec.spm_extras is not None and cls.backend is None:
        raise Unloadable(f"a SentencePiece tokenizer.model without tokenizer.json for {name!r}, which builds its "
                         "backend from the proto (not reproduced here)")
    tc = spec.config
    specials = {k: cls.defaults.get(k) for k in SPECIAL_ATTRIBUTES}
    for k in SPECIAL_ATTRIBUTES:
        if k in tc:
            specials[k] = _token(tc[k], k)
    params = {k: (d if k not in tc or isinstance(tc[k], str) else _token(tc[k], k)) for k, d in cls.specific.items()}
    model_specific = {k: v for k, v in params.items() if v is not None}
    for k, v in tc.items():
        if k.endswith("_token") and k not in SPECIAL_ATTRIBUTES and isinstance(v, str):
            model_specific[k] = v
    declared = sorted(spec.added)
    declared_flags = dict(spec.added_flags)
    if isinstance(tc.get("added_tokens_decoder"), dict):
        good = {int(i): d for i, d in tc["added_tokens_decoder"].items()
                if isinstance(d, dict) and isinstance(d.get("content"), str)}
        declared = sorted((i, d["content"]) for i, d in good.items())
        declared_flags = {i: added_token_flags(d) for i, d in good.items()}
        map_extras = None
    else:  # legacy: special_tokens_map.json overrides the named tokens
        for k, v in spec.special_map.items():
            if k in SPECIAL_ATTRIBUTES:
                specials[k] = v if isinstance(v, str) or v is None else v.get("content") if isinstance(v, dict) else None
        map_extras = spec.special_map.get("additional_special_tokens")
    if spec.spm_extras is not None:  # the extractor's list replaces the map's
        map_extras = [t if t not in spec.spm_plain else {"content": t, "special": False, "normalized": False}
                      for t in spec.spm_extras]
    cfg_extras = tc.get("extra_special_tokens", tc.get("additional_special_tokens"))
    extra_flags: dict[str, dict] = {}
    if cfg_extras is None:
        cfg_extras = list(map_extras or []) + [v for v in params.values() if v is not None]
    extras = []
    for e in cfg_extras:
        if isinstance(e, dict) and isinstance(e.get("content"), str):
            extra_flags[e["content"]] = added_token_flags(e)
            e = e["content"]
        extras.append(e if isinstance(e, str) else None)

    vocab = spec.vocab
    added: dict[int, str] = {} if cls.backend is not None else {i: t for i, t in spec.added}
    flags: dict[int, dict] = {} if cls.backend is not None else {i: spec.added_flags.get(i, added_token_flags())
                                                                  for i in added}
    known = {t: i for i, t in added.items()}
    token_flags: dict[str, dict] = {}
    for k in SPECIAL_ATTRIBUTES:
        if isinstance(tc.get(k), dict):
            token_flags[tc[k]["content"]] = added_token_flags(tc[k])
    for i, t in declared:
        token_flags[t] = declared_flags.get(i, added_token_flags())
    for t, fl in extra_flags.items():
        token_flags.setdefault(t, fl)

    def add(tok: str, redeclared: bool = False) -> None:
        if tok in known:
            if redeclared:  # a declared token added again: tokenizers keeps the last flags
                flags[known[tok]] = token_flags[tok]
            return
        if tok in vocab:
            i = vocab[tok]
        elif added:
            top = max(added)
            i = top + 1 if top >= len(vocab) or not vocab else len(vocab)
        else:
            i = len(vocab)
        added[i] = tok
        known[tok] = i
        flags[i] = token_flags.get(tok, added_token_flags())

    queue = [t for _, t in declared]
    for t in queue:
        add(t, redeclared=True)
    every_special = [t for t in [*specials.values(), *model_specific.values(), *extras] if t]
    for t in every_special:
        if t not in queue:
            queue.append(t)
            add(t)
    if cls.readds_specials:
        for t in every_special:
            flags[known[t]] = added_token_flags()
    if cls.backend is None:
        normalizer, decoder, byte_fallback = spec.normalizer, spec.decoder, spec.byte_fallback
    else:
        normalizer, decoder, byte_fallback = cls.backend.normalizer, cls.backend.decoder, cls.backend.byte_fallback
    chat = spec.chat_file if spec.chat_file is not None else tc.get("chat_template")
    if chat is not None and not isinstance(chat, str):
        raise Unloadable("the chat template is not one string (named templates: cactus's writer fails on them)")
    max_len = tc.get("model_max_length")
    return Resolved(vocab, spec.merges, dict(sorted(added.items())), specials, normalizer, decoder, byte_fallback,
                    VERY_LARGE_INTEGER if max_len is None else max_len, chat or None, name, flags)


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


def write_tokenizer_files(src: Path, out: Path, model_type: str, family: str) -> list[str]:
    """Write the engine's tokenizer files into ``out`` (the folder being built) from the HF
    folder ``src`` whose config has ``model_type``; ``family`` is cactus's family name.
    Returns the names written (empty, logged, when cactus would write none)."""
    spec = spec_from_hf(src, model_type)
    return write_spec(spec, out, family, str(src)) if spec is not None else []


def write_spec(spec: TokenizerSpec, out: Path, family: str, what: str = "source") -> list[str]:
    try:
        r = _resolve(spec)
    except Unloadable as exc:
        log.warning("%s: transformers would not load this tokenizer (%s); as cactus's converter, no tokenizer "
                    "files are written", what, exc)
        return []
    for name in REMOVED_SIDE_FILES:
        (out / name).unlink(missing_ok=True)
    size = max(r.vocab.values()) + 1 if r.vocab else 0
    id_to_token = [""] * size
    for t, i in r.vocab.items():
        if i < size:
            id_to_token[i] = t
    with (out / "merges.txt").open("w", encoding="utf-8", newline="") as f:
        f.write("#version: 0.2\n")
        for m in r.merges:
            f.write(f"{' '.join(m)}\n")

    special: dict[int, str] = {}
    ids: dict[str, int] = {}
    for key in CACTUS_SPECIAL_IDS:
        named = r.specials.get(f"{key}_token")
        tid = r.token_id(named) if named else None
        if named and tid is not None:
            ids[f"{key}_token_id"] = tid
            special[tid] = named
    lookup = {t: i for i, t in enumerate(id_to_token) if t}
    for key, tok in CORE_FALLBACKS.items():
        if key not in ids and tok in lookup:
            ids[key] = lookup[tok]
            special[lookup[tok]] = tok
    extra: list[dict[str, Any]] = []

    def note(tok: str, i: int) -> None:
        special[i] = tok
        if not any(x["token"] == tok and x["id"] == i for x in extra):
            extra.append({"token": tok, "id": i})

    for i, tok in r.added.items():
        note(tok, i)
    unk_token = r.specials.get("unk_token")
    unk = r.token_id(unk_token) if unk_token else None
    tools: dict[int, str] = {}

    def note_additional(tok: Any) -> None:
        if not isinstance(tok, str) or not tok:
            return
        i = r.token_id(tok)
        i = unk if i is None else i
        if i is None or i == unk:
            i = lookup.get(tok)
        if i is not None:
            note(tok, i)

    if spec.has_config_file:
        for tid, info in (spec.config.get("added_tokens_decoder") or {}).items():
            c = info.get("content", "") if isinstance(info, dict) else ""
            if c in TOOL_TOKENS:
                tools[int(tid)] = c
                special[int(tid)] = c
        for tok in spec.config.get("additional_special_tokens", []) or []:
            note_additional(tok)
    for tok in spec.special_map.get("additional_special_tokens", []) or []:
        note_additional(tok)
    if special and max(special) >= len(id_to_token):
        id_to_token.extend([""] * (max(special) - len(id_to_token) + 1))
    for i, t in special.items():
        id_to_token[i] = t
    written = ["merges.txt", "vocab.txt", "special_tokens.json", "tokenizer_config.txt"]
    from .cactus_tokenizer_json import REBUILT, saved_tokenizer_json

    if spec.source_json is not None or r.class_name in REBUILT:
        with (out / "tokenizer.json").open("w", encoding="utf-8", newline="") as f:
            f.write(saved_tokenizer_json(spec, r))
        written.append("tokenizer.json")
    with (out / "vocab.txt").open("w", encoding="utf-8", newline="") as f:
        for i, t in enumerate(id_to_token):
            if t:
                f.write(f"{i}\t{t}\n")
    if r.chat_template:
        with (out / "chat_template.jinja2").open("w", encoding="utf-8", newline="") as f:
            f.write(r.chat_template)
        written.append("chat_template.jinja2")
    doc = {**ids, "vocab_size": len(id_to_token), "model_max_length": r.max_length,
           "special_tokens": {str(k): v for k, v in special.items()}, "additional_special_tokens": extra,
           **({"chat_template": r.chat_template} if r.chat_template else {})}
    with (out / "special_tokens.json").open("w", encoding="utf-8", newline="") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
    normalizer = decoder = "none"
    if _is_metaspace_normalizer(r.normalizer):
        normalizer = "metaspace"
    elif _decoder_has(r.decoder, "ByteFallback"):
        normalizer = "byte_level"
    if _replace_metaspace_decoder(r.decoder):
        decoder = "replace_metaspace"
    elif _decoder_has(r.decoder, "ByteFallback"):
        decoder = "byte_level"
    lines = [f"vocab_size={len(id_to_token)}"] + [f"{k}={v}" for k, v in ids.items()]
    if family:
        lines.append(f"model_type={family}")
    lines += [f"model_max_length={r.max_length}", "tokenizer_type=bpe", "vocab_format=id_tab_token",
              f"normalizer={normalizer}", f"decoder={decoder}",
              f"byte_fallback={'true' if r.byte_fallback else 'false'}",
              f"has_chat_template={'true' if r.chat_template else 'false'}"]
    if tools:
        lines += ["has_tool_support=true", f"tool_token_count={len(tools)}"]
    with (out / "tokenizer_config.txt").open("w", encoding="utf-8", newline="") as f:
        f.write("".join(x + "\n" for x in lines))
    return written
