"""The text-to-words half of a Hugging Face tokenizer (formats/hf_tokenizer.py draws the whole
pipeline): the Unicode classes as Rust has them, the normalizers (:data:`NORMALIZERS`), the
splitting behaviors, and the pre-tokenizers (:data:`PRE_TOKENIZERS`)."""

from __future__ import annotations

import unicodedata
from typing import Any, Callable, Mapping, TypeVar

from .errors import UnsupportedError
from .tokenizer import BYTE_TO_CHAR, _regex

T = TypeVar("T")

#: Unicode White_Space (Rust's ``char::is_whitespace``; Python's ``str.isspace`` differs)
WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                        + "".join(chr(c) for c in range(0x2000, 0x200B)))
_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def is_whitespace(c: str) -> bool:
    return c in WHITE_SPACE


def is_numeric(c: str) -> bool:
    """Rust's ``char::is_numeric`` (its std tables: Unicode 16): Python's N* and the digits since."""
    return unicodedata.category(c)[0] == "N" or ord(c) in _NUMERIC_EXTRA


def is_punctuation(c: str) -> bool:
    """BERT's punctuation: ASCII punctuation and P* of tokenizers' tables (Unicode 8.0)."""
    o = ord(c)
    return c in _ASCII_PUNCT or o in _PUNCT_EXTRA or (unicodedata.category(c)[0] == "P" and o not in _PUNCT_EXCEPT)


def _is_control(c: str) -> bool:
    """``BertNormalizer``'s clean-up drops Cc, Cf and Co of tokenizers' tables (Unicode 8.0;
    unassigned code points stay), tab, newline and carriage return excepted."""
    return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf", "Co") and ord(c) not in _CONTROL_EXCEPT


def _is_chinese(c: str) -> bool:
    o = ord(c)
    return (0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0x20000 <= o <= 0x2A6DF or 0x2A700 <= o <= 0x2B73F
            or 0x2B740 <= o <= 0x2B81F or 0x2B920 <= o <= 0x2CEAF or 0xF900 <= o <= 0xFAFF
            or 0x2F800 <= o <= 0x2FA1F)


# tokenizers reads Unicode tables older (and one newer) than Python's, measured for every code point
# against tokenizers 0.22: ``StripAccents`` removes the marks (Mn, Mc, Me) of Unicode 9.0;
# ``BertNormalizer`` the nonspacing marks (Mn) of Unicode 8.0, and its clean-up Cc, Cf, Co of 8.0;
# BERT's punctuation is P* of 8.0; ``Digits`` uses Rust's ``is_numeric`` (Unicode 16). Each table
# is Python's category minus what Unicode added or re-classified since (through 15.1), plus what
# belonged then (or belongs since, for the digits: those since Unicode 13.0, Python 3.10's). The
# five predicates agree for every code point on Python 3.10 to 3.13 (Unicode 13.0 to 15.1).
_STRIP_NOT = """
7FD 898-89F 8CA-8D3 9FE AFA-AFF B55 C04 C3C CF3 D00 D3B-D3C D81 EBA ECE 1715 180F 1ABF-1ACE 1CF7 1DF6-1DFA
A82C A8FF 10D24-10D27 10EAB-10EAC 10EFD-10EFF 10F46-10F50 10F82-10F85 11070 11073-11074 110C2 11145-11146
111C9 111CE-111CF 11241 1133B 1145E 1182C-1183A 11930-11935 11937-11938 1193B-1193E 11940 11942-11943
119D1-119D7 119DA-119E0 119E4 11A01-11A0A 11A33-11A39 11A3B-11A3E 11A47 11A51-11A5B 11A8A-11A99 11D31-11D36
11D3A 11D3C-11D3D 11D3F-11D45 11D47 11D8A-11D8E 11D90-11D91 11D93-11D97 11EF3-11EF6 11F00-11F01 11F03
11F34-11F3A 11F3E-11F42 13440 13447-13455 16F4F 16F7F-16F87 16FE4 16FF0-16FF1 1CF00-1CF2D 1CF30-1CF46 1E08F
1E130-1E136 1E2AE 1E2EC-1E2EF 1E4EC-1E4EF"""
_STRIP_ALSO = "1CF2-1CF3"
_BERT_NOT = """
7FD 898-89F 8CA-8E1 9FE AFA-AFF B55 C04 C3C CF3 D00 D3B-D3C D81 EBA ECE 180F 1885-1886 1ABF-1ACE 1DF6-1DFB
A82C A8C5 A8FF A9BD 10D24-10D27 10EAB-10EAC 10EFD-10EFF 10F46-10F50 10F82-10F85 11070 11073-11074 110C2 111C9
111CF 1123E 11241 1133B 11438-1143F 11442-11444 11446 1145E 1182F-11837 11839-1183A 1193B-1193C 1193E 11943
119D4-119D7 119DA-119DB 119E0 11A01-11A0A 11A33-11A38 11A3B-11A3E 11A47 11A51-11A56 11A59-11A5B 11A8A-11A96
11A98-11A99 11C30-11C36 11C38-11C3D 11C3F 11C92-11CA7 11CAA-11CB0 11CB2-11CB3 11CB5-11CB6 11D31-11D36 11D3A
11D3C-11D3D 11D3F-11D45 11D47 11D90-11D91 11D95 11D97 11EF3-11EF4 11F00-11F01 11F03 11F34-11F3A 11F3E-11F42
13440 13447-13455 16F4F 16FE4 1CF00-1CF2D 1CF30-1CF46 1E000-1E006 1E008-1E018 1E01B-1E021 1E023-1E024
1E026-1E02A 1E08F 1E130-1E136 1E2AE 1E2EC-1E2EF 1E4EC-1E4EF 1E944-1E94A"""
_BERT_ALSO = "1734"
_PUNCT_NOT = """
61D 9FD A76 C77 C84 1B7D-1B7E 2E43-2E4F 2E52-2E5D 10EAD 10F55-10F59 10F86-10F89 11B00-11B09 1144B-1144F
1145A-1145B 1145D 11660-1166C 116B9 1183B 11944-11946 119E2 11A3F-11A46 11A9A-11A9C 11A9E-11AA2 11C41-11C45
11C70-11C71 11EF7-11EF8 11F43-11F4F 11FFF 12FF1-12FF2 16E97-16E9A 16FE2 1E95E-1E95F"""
_PUNCT_ALSO = "166D 111C9"
_CONTROL_NOT = "890-891 8E2 110CD 13430-1343F"
_NUMERIC_ALSO = """
10D40-10D49 116D0-116E3 11BF0-11BF9 11DE0-11DE9 11F50-11F59 16130-16139 16AC0-16AC9 16D70-16D79 16FF4-16FF6
1CCF0-1CCF9 1D2C0-1D2D3 1E4F0-1E4F9 1E5F1-1E5FA"""


def _code_points(table: str) -> frozenset[int]:
    out: set[int] = set()
    for part in table.split():
        a, _, b = part.partition("-")
        out.update(range(int(a, 16), int(b or a, 16) + 1))
    return frozenset(out)


_STRIP_EXCEPT, _STRIP_EXTRA = _code_points(_STRIP_NOT), _code_points(_STRIP_ALSO)
_BERT_EXCEPT, _BERT_EXTRA = _code_points(_BERT_NOT), _code_points(_BERT_ALSO)
_PUNCT_EXCEPT, _PUNCT_EXTRA = _code_points(_PUNCT_NOT), _code_points(_PUNCT_ALSO)
_CONTROL_EXCEPT, _NUMERIC_EXTRA = _code_points(_CONTROL_NOT), _code_points(_NUMERIC_ALSO)


def is_stripped_mark(c: str) -> bool:
    """A mark ``StripAccents`` removes (its tables: every mark of Unicode 9.0)."""
    o = ord(c)
    return o in _STRIP_EXTRA or (unicodedata.category(c)[0] == "M" and o not in _STRIP_EXCEPT)


def is_bert_accent(c: str) -> bool:
    """A mark ``BertNormalizer``'s accent stripping removes (its tables: Mn of Unicode 8.0)."""
    o = ord(c)
    return o in _BERT_EXTRA or (unicodedata.category(c) == "Mn" and o not in _BERT_EXCEPT)


def _lower(s: str) -> str:
    return "".join(c.lower() for c in s)  # char by char, as Rust's (no final-sigma context)


def _strip_accents(s: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", s) if not is_bert_accent(c))


# ---- normalizers: spec -> (str -> str) ------------------------------------------------------
def _bert_normalizer(spec: Mapping[str, Any]) -> Callable[[str], str]:
    clean, chinese = spec.get("clean_text", True), spec.get("handle_chinese_chars", True)
    lower = spec.get("lowercase", True)
    strip = spec.get("strip_accents")
    strip = lower if strip is None else strip

    def run(s: str) -> str:
        if clean:
            s = "".join(" " if is_whitespace(c) else c for c in s
                        if not (c in "\x00\ufffd" or _is_control(c)))
        if chinese:
            s = "".join(f" {c} " if _is_chinese(c) else c for c in s)
        if strip:
            s = _strip_accents(s)
        return _lower(s) if lower else s
    return run


def _replace_normalizer(spec: Mapping[str, Any]) -> Callable[[str], str]:
    pat, content = spec.get("pattern") or {}, spec.get("content", "")
    if "String" in pat:
        lit = pat["String"]
        return lambda s: s.replace(lit, content) if lit else s
    if "Regex" in pat:
        rx = _regex().compile(pat["Regex"])
        return lambda s: rx.sub(lambda m: content, s)
    raise UnsupportedError(f"tokenizer.json Replace normalizer pattern {pat!r}")


def _strip_normalizer(spec: Mapping[str, Any]) -> Callable[[str], str]:
    left, right = spec.get("strip_left", True), spec.get("strip_right", True)

    def run(s: str) -> str:
        i, j = 0, len(s)
        while left and i < j and is_whitespace(s[i]):
            i += 1
        while right and j > i and is_whitespace(s[j - 1]):
            j -= 1
        return s[i:j]
    return run


def chain(steps: list[Callable[[T], T]]) -> Callable[[T], T]:
    """A ``Sequence`` component of any kind (normalizer, pre-tokenizer, post-processor,
    decoder): its steps applied in order, each to what the one before returned."""

    def run(x: T) -> T:
        for step in steps:
            x = step(x)
        return x
    return run


def _sequence_normalizer(spec: Mapping[str, Any]) -> Callable[[str], str]:
    return chain([normalizer(n) for n in spec.get("normalizers") or []])


NORMALIZERS: dict[str, Callable[[Mapping[str, Any]], Callable[[str], str]]] = {
    "BertNormalizer": _bert_normalizer,
    "Lowercase": lambda spec: _lower,
    "StripAccents": lambda spec: lambda s: "".join(c for c in s if not is_stripped_mark(c)),
    "NFC": lambda spec: lambda s: unicodedata.normalize("NFC", s),
    "NFD": lambda spec: lambda s: unicodedata.normalize("NFD", s),
    "NFKC": lambda spec: lambda s: unicodedata.normalize("NFKC", s),
    "NFKD": lambda spec: lambda s: unicodedata.normalize("NFKD", s),
    "Replace": _replace_normalizer,
    "Prepend": lambda spec: lambda s: (spec.get("prepend", "") + s) if s else s,
    "Strip": _strip_normalizer,
    "Sequence": _sequence_normalizer,
    "ByteLevel": lambda spec: lambda s: "".join(BYTE_TO_CHAR[b] for b in s.encode("utf-8")),
}


def normalizer(spec: Mapping[str, Any] | None) -> Callable[[str], str]:
    if not spec:
        return lambda s: s
    return _component(NORMALIZERS, spec, "normalizer")(spec)


def _component(table: Mapping[str, Any], spec: Mapping[str, Any], what: str) -> Any:
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    made = table.get(kind)  # type: ignore[arg-type]
    if made is None:
        raise UnsupportedError(f"tokenizer.json {what} {kind!r} is not supported "
                               f"(supported: {', '.join(sorted(table))})")
    return made


# ---- splitting: spans and behaviors ---------------------------------------------------------
Spans = list[tuple[int, int, bool]]  # (start, end, is_match) covering the text in order


def _char_spans(s: str, pred: Callable[[str], bool]) -> Spans:
    out: Spans = []
    last = 0
    for i, c in enumerate(s):
        if pred(c):
            if last < i:
                out.append((last, i, False))
            out.append((i, i + 1, True))
            last = i + 1
    if last < len(s):
        out.append((last, len(s), False))
    return out


def _regex_spans(s: str, rx: Any) -> Spans:
    out: Spans = []
    prev = 0
    for m in rx.finditer(s):
        if prev != m.start():
            out.append((prev, m.start(), False))
        out.append((m.start(), m.end(), True))
        prev = m.end()
    if prev != len(s):
        out.append((prev, len(s), False))
    return out


def _merge(spans: Spans) -> list[tuple[int, int, bool]]:
    acc: list[list[Any]] = []
    prev_match = False
    for a, b, m in spans:
        if m and not prev_match and acc:
            acc[-1][1] = b
        else:
            acc.append([a, b, False])
        prev_match = m
    return [(a, b, r) for a, b, r in acc]


def _behave(spans: Spans, behavior: str) -> list[tuple[int, int, bool]]:
    """``(start, end, remove)`` per piece for a split ``behavior`` (tokenizers' normalizer.rs)."""
    if behavior == "Removed":
        return spans
    if behavior == "Isolated":
        return [(a, b, False) for a, b, _ in spans]
    if behavior == "Contiguous":
        acc: list[list[Any]] = []
        prev_match = False
        for a, b, m in spans:
            if m == prev_match and acc:
                acc[-1][1] = b
            else:
                acc.append([a, b, False])
            prev_match = m
        return [(a, b, r) for a, b, r in acc]
    if behavior == "MergedWithPrevious":
        return _merge(spans)
    if behavior == "MergedWithNext":
        rev = [(-b, -a, m) for a, b, m in reversed(spans)]
        return [(-b, -a, r) for a, b, r in reversed(_merge(rev))]
    raise UnsupportedError(f"tokenizer.json split behavior {behavior!r}")


def _split(s: str, spans: Spans, behavior: str) -> list[str]:
    return [s[a:b] for a, b, remove in _behave(spans, behavior) if not remove and b > a]


# ---- pre-tokenizers: spec -> (list of (piece, first?) -> list of pieces) ---------------------
Piece = tuple[str, bool]  # (text, starts at offset 0 of the sequence)
PreTok = Callable[[list[Piece]], list[Piece]]


def _each(fn: Callable[[str, bool], list[str]]) -> PreTok:
    def run(pieces: list[Piece]) -> list[Piece]:
        out: list[Piece] = []
        for text, first in pieces:
            for j, p in enumerate(fn(text, first)):
                if p:
                    out.append((p, first and j == 0))
        return out
    return run


def _pattern_spans(pattern: Mapping[str, Any], invert: bool) -> Callable[[str], Spans]:
    if "Regex" in pattern:
        rx = _regex().compile(pattern["Regex"])
    elif "String" in pattern:
        rx = _regex().compile(_regex().escape(pattern["String"])) if pattern["String"] else None
    else:
        raise UnsupportedError(f"tokenizer.json split pattern {pattern!r}")

    def spans(s: str) -> Spans:
        found = _regex_spans(s, rx) if rx is not None else ([(0, len(s), False)] if s else [])
        return [(a, b, m != invert) for a, b, m in found]
    return spans


def _split_pre(spec: Mapping[str, Any]) -> PreTok:
    spans = _pattern_spans(spec.get("pattern") or {}, bool(spec.get("invert", False)))
    behavior = spec.get("behavior", "Isolated")
    return _each(lambda s, first: _split(s, spans(s), behavior))


def _byte_level_pre(spec: Mapping[str, Any]) -> PreTok:
    prefix, use_regex = spec.get("add_prefix_space", True), spec.get("use_regex", True)
    rx = _regex().compile(GPT2_SPLIT)

    def one(s: str, first: bool) -> list[str]:
        if prefix and not s.startswith(" "):
            s = " " + s
        parts = _split(s, _regex_spans(s, rx), "Isolated") if use_regex else [s]
        return ["".join(BYTE_TO_CHAR[b] for b in p.encode("utf-8")) for p in parts]
    return _each(one)


def _metaspace_pre(spec: Mapping[str, Any]) -> PreTok:
    rep = spec.get("replacement", "\u2581")
    scheme = spec.get("prepend_scheme") or ("always" if spec.get("add_prefix_space", True) else "never")
    do_split = spec.get("split", True)

    def one(s: str, first: bool) -> list[str]:
        s = s.replace(" ", rep)
        if not s.startswith(rep) and (scheme == "always" or (scheme == "first" and first)):
            s = rep + s
        return _split(s, _char_spans(s, lambda c: c == rep), "MergedWithNext") if do_split else [s]
    return _each(one)


def _sequence_pre(spec: Mapping[str, Any]) -> PreTok:
    return chain([pre_tokenizer(p) for p in spec.get("pretokenizers") or []])


def _bert_pre(spec: Mapping[str, Any]) -> PreTok:
    def one(s: str, first: bool) -> list[str]:
        out = []
        for w in _split(s, _char_spans(s, is_whitespace), "Removed"):
            out.extend(_split(w, _char_spans(w, is_punctuation), "Isolated"))
        return out
    return _each(one)


def _whitespace_pre(spec: Mapping[str, Any]) -> PreTok:
    rx = _regex().compile(r"\w+|[^\w\s]+")
    return _each(lambda s, first: _split(s, [(a, b, not m) for a, b, m in _regex_spans(s, rx)], "Removed"))


PRE_TOKENIZERS: dict[str, Callable[[Mapping[str, Any]], PreTok]] = {
    "ByteLevel": _byte_level_pre,
    "Split": _split_pre,
    "Digits": lambda spec: _each(lambda s, first: _split(
        s, _char_spans(s, is_numeric), "Isolated" if spec.get("individual_digits") else "Contiguous")),
    "Punctuation": lambda spec: _each(lambda s, first: _split(
        s, _char_spans(s, is_punctuation), spec.get("behavior", "Isolated"))),
    "Whitespace": _whitespace_pre,
    "WhitespaceSplit": lambda spec: _each(lambda s, first: _split(s, _char_spans(s, is_whitespace), "Removed")),
    "CharDelimiterSplit": lambda spec: _each(lambda s, first: _split(
        s, _char_spans(s, lambda c: c == spec.get("delimiter")), "Removed")),
    "BertPreTokenizer": _bert_pre,
    "Metaspace": _metaspace_pre,
    "Sequence": _sequence_pre,
}


def pre_tokenizer(spec: Mapping[str, Any] | None) -> PreTok:
    if not spec:
        return lambda pieces: pieces
    return _component(PRE_TOKENIZERS, spec, "pre_tokenizer")(spec)
