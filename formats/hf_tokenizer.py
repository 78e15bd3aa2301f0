"""Hugging Face ``tokenizer.json``, encoded as the ``tokenizers`` library encodes it.

``formats/tokenizer.py`` tokenizes as llama.cpp does from GGUF metadata. This module answers
another question: which ids does the *Hugging Face* tokenizer of a folder give a text? llama.cpp's
converter asks it to name the pre-tokenizer (``tokenizer.ggml.pre``: the sha256 of the ids of a
check text, looked up in a table, see ``convert/gguf_vocab.py``), and panelpack must answer it
without ``transformers``. The pipeline, as ``tokenizers`` runs it (``Tokenizer::encode``):

1. **added tokens** are cut out of the raw text first: those with ``normalized: false``
   matched on the raw text, leftmost-longest; then every other piece is normalized and the
   ``normalized: true`` tokens are matched on it (``single_word``, ``lstrip``, ``rstrip`` as
   the token says);
2. **normalizer** (:data:`NORMALIZERS`) on each remaining piece;
3. **pre-tokenizer** (:data:`PRE_TOKENIZERS`) splits a piece into words: every splitter yields
   match / non-match spans and a *behavior* says what becomes of a match (``Removed``,
   ``Isolated``, ``MergedWithPrevious``, ``MergedWithNext``, ``Contiguous``); empty words go;
4. **model** (:data:`MODELS`: BPE, WordPiece, WordLevel) maps each word to ids;
5. **post-processor** (:data:`POST_PROCESSORS`) adds the special tokens (``[CLS] A [SEP]``,
   ``<|begin_of_text|> A``) when ``add_special_tokens``.

Steps 2 and 3 (the Unicode classes, normalizers, splitting, pre-tokenizers) are
``formats/hf_pretokenizer.py``, their public names importable here. Each component is a small
function in a table keyed by its ``type``; a component that is not in
a table is refused by name (:class:`UnsupportedError`), never approximated. The Unicode classes
follow Rust's (``char::is_whitespace`` is the White_Space property, ``is_numeric`` the N*
categories, punctuation the P* categories plus ASCII punctuation, control the C* categories).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import BadInputError, FormatError, UnsupportedError
from .hf_pretokenizer import (
    GPT2_SPLIT,
    NORMALIZERS,
    PRE_TOKENIZERS,
    WHITE_SPACE,
    Piece,
    PreTok,
    Spans,
    _component,
    _replace_normalizer,
    chain,
    is_bert_accent,
    is_numeric,
    is_punctuation,
    is_stripped_mark,
    is_whitespace,
    normalizer,
    pre_tokenizer,
)
from .tokenizer import CHAR_TO_BYTE, _regex

#: Unicode White_Space (Rust's ``char::is_whitespace``; Python's ``str.isspace`` differs)

# ---- models: spec -> (word -> ids) -----------------------------------------------------------
def bpe_merge(symbols: list[int], ranks: Mapping[tuple[int, int], tuple[int, int]]) -> list[int]:
    """Apply BPE merges to a word's symbol ids: the pair of lowest rank first, the leftmost
    among equals (tokenizers' ``Word::merge_all``); ``ranks[(a, b)] = (rank, merged id)``."""
    syms = list(symbols)
    while len(syms) > 1:
        best, at = None, -1
        for j in range(len(syms) - 1):
            r = ranks.get((syms[j], syms[j + 1]))
            if r is not None and (best is None or r[0] < best[0]):
                best, at = r, j
        if best is None:
            break
        syms[at:at + 2] = [best[1]]
    return syms


def _vocab(spec: Mapping[str, Any]) -> dict[str, int]:
    v = spec.get("vocab") or {}
    if not isinstance(v, Mapping) or not all(type(k) is str and type(i) is int for k, i in v.items()):
        raise FormatError("tokenizer.json: the model's vocab is not a mapping of strings to ids")
    return dict(v)


def _bpe_model(spec: Mapping[str, Any]) -> Callable[[str], list[int]]:
    vocab = _vocab(spec)
    prefix, suffix = spec.get("continuing_subword_prefix") or "", spec.get("end_of_word_suffix") or ""
    unk = spec.get("unk_token")
    fuse, byte_fallback, ignore = spec.get("fuse_unk", False), spec.get("byte_fallback", False), spec.get("ignore_merges", False)
    if spec.get("dropout") not in (None, 0, 0.0):
        raise UnsupportedError("tokenizer.json BPE dropout (random merges) cannot be reproduced")
    ranks: dict[tuple[int, int], tuple[int, int]] = {}
    get = vocab.get
    for r, mg in enumerate(spec.get("merges") or []):
        a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
        ia, ib = get(a), get(b)
        merged = get(a + b[len(prefix):] if prefix and b.startswith(prefix) else a + b)
        if ia is None or ib is None or merged is None:
            raise FormatError(f"tokenizer.json: merge {a!r} {b!r} names a token outside the vocabulary")
        ranks[(ia, ib)] = (r, merged)  # a merge listed twice: the later rank (a Rust HashMap insert)

    def word(w: str) -> list[int]:
        if ignore and w in vocab:
            return [vocab[w]]
        out: list[int] = []
        pending_unk = 0
        for i, c in enumerate(w):
            s = (prefix if i else "") + c + (suffix if i == len(w) - 1 else "")
            tid = vocab.get(s)
            if tid is not None:
                pending_unk = _flush_unk(out, pending_unk, vocab, unk)
                out.append(tid)
                continue
            if byte_fallback:
                codes = [vocab.get(f"<0x{b:02X}>") for b in s.encode("utf-8")]
                if all(x is not None for x in codes):
                    out.extend(int(x) for x in codes if x is not None)
                    continue
            if unk is not None:
                if pending_unk and not fuse:
                    pending_unk = _flush_unk(out, pending_unk, vocab, unk)
                pending_unk += 1
        _flush_unk(out, pending_unk, vocab, unk)
        return bpe_merge(out, ranks)
    return word


def _flush_unk(out: list[int], pending: int, vocab: Mapping[str, int], unk: str | None) -> int:
    if pending:
        if unk not in vocab:
            raise FormatError(f"tokenizer.json: unk_token {unk!r} is not in the vocabulary")
        out.append(vocab[unk])  # type: ignore[index]
    return 0


def _wordpiece_model(spec: Mapping[str, Any]) -> Callable[[str], list[int]]:
    vocab = _vocab(spec)
    prefix = spec.get("continuing_subword_prefix", "##")
    limit = int(spec.get("max_input_chars_per_word", 100))
    unk = spec.get("unk_token", "[UNK]")

    def word(w: str) -> list[int]:
        if unk not in vocab:
            raise FormatError(f"tokenizer.json: unk_token {unk!r} is not in the vocabulary")
        if len(w) > limit:
            return [vocab[unk]]
        out, start = [], 0
        while start < len(w):
            end = len(w)
            while end > start:
                sub = (prefix if start else "") + w[start:end]
                if sub in vocab:
                    out.append(vocab[sub])
                    break
                end -= 1
            if end == start:
                return [vocab[unk]]
            start = end
        return out
    return word


def _wordlevel_model(spec: Mapping[str, Any]) -> Callable[[str], list[int]]:
    vocab = _vocab(spec)
    unk = spec.get("unk_token")

    def word(w: str) -> list[int]:
        if w in vocab:
            return [vocab[w]]
        if unk in vocab:
            return [vocab[unk]]
        raise BadInputError(f"tokenizer.json WordLevel: {w!r} is not in the vocabulary and there is no unk_token")
    return word


MODELS: dict[str, Callable[[Mapping[str, Any]], Callable[[str], list[int]]]] = {
    "BPE": _bpe_model, "WordPiece": _wordpiece_model, "WordLevel": _wordlevel_model,
}


# ---- post-processors: spec -> (ids -> ids) ---------------------------------------------------
def _template(spec: Mapping[str, Any]) -> Callable[[list[int]], list[int]]:
    special = {k: [int(i) for i in v.get("ids", [])] for k, v in (spec.get("special_tokens") or {}).items()}

    def run(ids: list[int]) -> list[int]:
        out: list[int] = []
        for item in spec.get("single") or []:
            if "Sequence" in item:
                out.extend(ids)
            elif "SpecialToken" in item:
                name = item["SpecialToken"].get("id")
                if name not in special:
                    raise FormatError(f"tokenizer.json TemplateProcessing names {name!r} without its ids")
                out.extend(special[name])
        return out
    return run


def _cls_sep(spec: Mapping[str, Any]) -> Callable[[list[int]], list[int]]:
    cls, sep = spec.get("cls") or [None, None], spec.get("sep") or [None, None]
    return lambda ids: [int(cls[1])] + ids + [int(sep[1])]


def _sequence_post(spec: Mapping[str, Any]) -> Callable[[list[int]], list[int]]:
    return chain([post_processor(p) for p in spec.get("processors") or []])


POST_PROCESSORS: dict[str, Callable[[Mapping[str, Any]], Callable[[list[int]], list[int]]]] = {
    "TemplateProcessing": _template, "BertProcessing": _cls_sep, "RobertaProcessing": _cls_sep,
    "ByteLevel": lambda spec: lambda ids: ids, "Sequence": _sequence_post,
}


def post_processor(spec: Mapping[str, Any] | None) -> Callable[[list[int]], list[int]]:
    if not spec:
        return lambda ids: ids
    return _component(POST_PROCESSORS, spec, "post_processor")(spec)


# ---- decoders: spec -> (tokens -> pieces), tokenizers' ``decode_chain`` ----------------------
Decoder = Callable[[list[str]], list[str]]
_CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def cleanup(s: str) -> str:
    """The English detokenization cleanup of WordPiece decoders and transformers' ``decode``."""
    for a, b in _CLEANUPS:
        s = s.replace(a, b)
    return s


def _byte_level_decode(spec: Mapping[str, Any]) -> Decoder:
    def run(tokens: list[str]) -> list[str]:
        out = bytearray()
        for t in tokens:
            raw = [CHAR_TO_BYTE.get(c) for c in t]
            out += bytes(b for b in raw if b is not None) if all(b is not None for b in raw) else t.encode("utf-8")
        return [out.decode("utf-8", "replace")]
    return run


def _wordpiece_decode(spec: Mapping[str, Any]) -> Decoder:
    prefix, clean = spec.get("prefix", "##"), spec.get("cleanup", True)

    def run(tokens: list[str]) -> list[str]:
        out = []
        for i, t in enumerate(tokens):
            if i:
                t = t[len(prefix):] if t.startswith(prefix) else " " + t
            out.append(cleanup(t) if clean else t)
        return out
    return run


def _metaspace_decode(spec: Mapping[str, Any]) -> Decoder:
    rep = spec.get("replacement", "\u2581")
    scheme = spec.get("prepend_scheme") or ("always" if spec.get("add_prefix_space", True) else "never")

    def run(tokens: list[str]) -> list[str]:
        out = []
        for i, t in enumerate(tokens):
            s = "".join(" " if c == rep else c for c in t)
            if i == 0 and scheme != "never" and t.startswith(rep):
                s = s[1:]
            out.append(s)
        return out
    return run


def _byte_fallback_decode(spec: Mapping[str, Any]) -> Decoder:
    def run(tokens: list[str]) -> list[str]:
        out: list[str] = []
        pending = bytearray()
        for t in tokens:
            if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                try:
                    pending.append(int(t[3:5], 16))
                    continue
                except ValueError:
                    pass
            if pending:
                out.append(pending.decode("utf-8", "replace"))
                pending = bytearray()
            out.append(t)
        if pending:
            out.append(pending.decode("utf-8", "replace"))
        return out
    return run


def _strip_decode(spec: Mapping[str, Any]) -> Decoder:
    content, start, stop = spec.get("content", " "), int(spec.get("start", 0)), int(spec.get("stop", 0))

    def one(t: str) -> str:
        for _ in range(start):
            if t.startswith(content):
                t = t[len(content):]
        for _ in range(stop):
            if t.endswith(content) and content:
                t = t[:-len(content)]
        return t
    return lambda tokens: [one(t) for t in tokens]


def _sequence_decode(spec: Mapping[str, Any]) -> Decoder:
    return chain([decoder(d) for d in spec.get("decoders") or []])


DECODERS: dict[str, Callable[[Mapping[str, Any]], Decoder]] = {
    "ByteLevel": _byte_level_decode, "WordPiece": _wordpiece_decode, "Metaspace": _metaspace_decode,
    "ByteFallback": _byte_fallback_decode, "Fuse": lambda spec: lambda tokens: ["".join(tokens)],
    "Strip": _strip_decode, "Sequence": _sequence_decode,
    "Replace": lambda spec: (lambda f: lambda tokens: [f(t) for t in tokens])(_replace_normalizer(spec)),
    "BPEDecoder": lambda spec: lambda tokens: [t.replace(spec.get("suffix", "</w>"), " ") if i < len(tokens) - 1
                                              else t.replace(spec.get("suffix", "</w>"), "")
                                              for i, t in enumerate(tokens)],
}


def decoder(spec: Mapping[str, Any] | None) -> Decoder:
    if not spec:
        return lambda tokens: [" ".join(tokens)]
    return _component(DECODERS, spec, "decoder")(spec)


# ---- the added tokens --------------------------------------------------------------------------
@dataclass(frozen=True)
class AddedToken:
    id: int
    content: str
    special: bool = False
    normalized: bool = True
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "AddedToken":
        special = bool(d.get("special", False))
        return cls(int(d["id"]), str(d["content"]), special, bool(d.get("normalized", not special)),
                   bool(d.get("lstrip", False)), bool(d.get("rstrip", False)), bool(d.get("single_word", False)))


class _Matcher:
    """Leftmost-longest matching of added tokens in a text (tokenizers' ``find_matches``)."""

    def __init__(self, tokens: list[tuple[str, AddedToken]]):
        self.by_text: dict[str, AddedToken] = {}
        for text, t in tokens:
            if text:
                self.by_text.setdefault(text, t)
        rx = _regex()
        alts = sorted(self.by_text, key=lambda s: -len(s))
        self.rx = rx.compile("|".join(rx.escape(a) for a in alts)) if alts else None
        self.word = rx.compile(r"\w")

    def split(self, s: str) -> list[tuple[str, int | None, int]]:
        """``(text, token id or None, start offset)`` pieces covering ``s``."""
        if self.rx is None or not s:
            return [(s, None, 0)]
        out: list[tuple[str, int | None, int]] = []
        at = 0
        for m in self.rx.finditer(s):
            start, stop = m.start(), m.end()
            t = self.by_text[m.group()]
            if t.single_word and ((start > 0 and self.word.match(s[start - 1])) or
                                  (stop < len(s) and self.word.match(s[stop]))):
                continue
            if t.lstrip:
                while start > at and is_whitespace(s[start - 1]):
                    start -= 1
            if t.rstrip:
                while stop < len(s) and is_whitespace(s[stop]):
                    stop += 1
            if at < start:
                out.append((s[at:start], None, at))
            out.append((s[start:stop], t.id, start))
            at = stop
        if at < len(s):
            out.append((s[at:], None, at))
        return out


class HFTokenizer:
    """One ``tokenizer.json``: :meth:`encode` gives the ids ``tokenizers`` gives."""

    def __init__(self, doc: Mapping[str, Any]):
        if not isinstance(doc, Mapping) or not isinstance(doc.get("model"), Mapping):
            raise FormatError("tokenizer.json has no model")
        self.doc = doc
        model = doc["model"]
        self.model_type = model.get("type") or ("BPE" if "merges" in model else None)
        spec = dict(model, type=self.model_type)
        self._word = _component(MODELS, spec, "model")(spec)
        self.normalize = normalizer(doc.get("normalizer"))
        self._pre = pre_tokenizer(doc.get("pre_tokenizer"))
        self._post = post_processor(doc.get("post_processor"))
        self._decoder = doc.get("decoder")
        self.added = [AddedToken.from_json(a) for a in doc.get("added_tokens") or []]
        self._raw = _Matcher([(t.content, t) for t in self.added if not t.normalized])
        self._norm = _Matcher([(self.normalize(t.content), t) for t in self.added if t.normalized])
        self.vocab: dict[str, int] = _vocab(model) if isinstance(model.get("vocab"), Mapping) else {}
        for t in self.added:
            self.vocab[t.content] = t.id

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = []
        for piece, tid, start in self._raw.split(text):
            if tid is not None:
                ids.append(tid)
                continue
            norm = self.normalize(piece)
            for sub, tid2, start2 in self._norm.split(norm):
                if tid2 is not None:
                    ids.append(tid2)
                    continue
                for word, _ in self._pre([(sub, start == 0 and start2 == 0)]):
                    ids.extend(self._word(word))
        return self._post(ids) if add_special_tokens else ids


    def decode(self, ids: list[int], clean_up_spaces: bool = False) -> str:
        """The text of ``ids`` as ``tokenizers`` decodes it (special tokens kept), with
        transformers' ``clean_up_tokenization_spaces`` when asked."""
        by_id = {i: t for t, i in self.vocab.items()}
        tokens = [by_id[i] for i in ids if i in by_id]
        text = "".join(decoder(self._decoder)(tokens))
        return cleanup(text) if clean_up_spaces else text


def load(folder: str | os.PathLike) -> HFTokenizer:
    """The ``tokenizer.json`` of an HF folder."""
    path = Path(folder) / "tokenizer.json"
    try:
        doc = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise BadInputError("no tokenizer.json", path=folder) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"not a JSON document ({e})", path=path) from None
    return HFTokenizer(doc)


__all__ = ["HFTokenizer", "AddedToken", "load", "bpe_merge", "NORMALIZERS", "PRE_TOKENIZERS", "MODELS",
           "POST_PROCESSORS", "DECODERS", "WHITE_SPACE", "cleanup",
           # hf_pretokenizer's public names, this module's before it was split
           "GPT2_SPLIT", "is_whitespace", "is_numeric", "is_punctuation", "is_stripped_mark", "is_bert_accent",
           "normalizer", "pre_tokenizer", "Spans", "Piece", "PreTok"]
