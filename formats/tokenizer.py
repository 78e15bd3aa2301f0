"""Tokenizers read from a model's own vocabulary: GGUF ``tokenizer.ggml.*`` metadata or an HF
``tokenizer.json``. Token ids follow llama.cpp's tokenizer (``src/llama-vocab.cpp``), which the
tests compare against on a shipped corpus.

Three models, one registry (:data:`MODELS`, keyed by ``tokenizer.ggml.model``):

* ``gpt2``: byte-level BPE. Text is split at special tokens, each remaining fragment is split
  by the pre-tokenizer that ``tokenizer.ggml.pre`` names (:data:`PRE_TOKENIZERS`: a list of
  regular expressions applied in turn, each splitting the pieces of the one before; what a
  regex does not match stays a piece of its own), every piece is mapped byte -> printable
  character (GPT-2's byte table) and merged pair by pair, lowest merge rank first (leftmost on
  ties). A final symbol outside the vocabulary falls back to one token per byte.
* ``llama``: SentencePiece-style. Spaces become ``▁`` (plus one in front when
  ``add_space_prefix``), the characters are merged pair by pair, highest vocabulary score first
  (leftmost on ties), while the merged text is a token; a symbol that is no token is split back
  along its merges, and what is left becomes ``<0xXX>`` byte tokens.
* ``gemma4``: Gemma 4's BPE over SentencePiece text. Spaces become ``▁`` (no prefix), the
  whole fragment (no pre-split, no byte mapping) is merged pair by pair, lowest merge rank
  first; a symbol outside the vocabulary becomes ``<0xXX>`` byte tokens (llama.cpp's own
  vocabulary test of the real vocabulary passes: tests/test_tokenizer.py).

Special tokens: control tokens (type 3) are recognised in the text only with
``parse_special=True``; user-defined tokens (type 4) always, as llama.cpp does; longest first.
The Unicode classes ``\\p{L}``/``\\p{N}`` need the ``regex`` package (``re`` lacks them).
"""

from __future__ import annotations

import heapq
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .errors import BadInputError, FormatError, UnsupportedError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

#: tokenizer.ggml.pre -> the regular expressions llama.cpp applies, in order
PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "gpt2": (_GPT2,), "default": (_GPT2,), "mpt": (_GPT2,), "olmo": (_GPT2,),
    "smollm": (r"\p{N}", _GPT2), "starcoder": (r"\p{N}", _GPT2), "refact": (r"\p{N}", _GPT2),
    "codeshell": (r"\p{N}", _GPT2), "command-r": (r"\p{N}", _GPT2),
    "llama3": (_LLAMA3,), "llama-bpe": (_LLAMA3,), "dbrx": (_LLAMA3,), "smaug-bpe": (_LLAMA3,), "lfm2": (_LLAMA3,),
    "qwen2": (_QWEN2,), "stablelm2": (_QWEN2,),
}

#: token texts llama.cpp takes for end-of-generation markers; it types them CONTROL whatever the
#: vocabulary says, so they are recognised in text only with parse_special (Gemma's "</s>")
EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
})
#: vocabularies holding one of these have an ordinary "</s>" (llama.cpp leaves it NORMAL)
_NORMAL_S_MARKERS = frozenset({"<|tool_response>", "<|plamo:eos|>"})

#: pre-tokenizers whose words that are whole tokens skip the merges (llama.cpp ``ignore_merges``)
IGNORE_MERGES = frozenset({"llama3", "llama-bpe", "dbrx", "smaug-bpe", "lfm2"})
#: pre-tokenizers llama.cpp adds BOS for when the GGUF has no tokenizer.ggml.add_bos_token
#: (``llama_vocab::impl::load``; its llama-bpe family sets it too, not reproduced here yet)
ADD_BOS_BY_DEFAULT = frozenset({"lfm2"})


def _byte_table() -> dict[int, str]:
    """GPT-2's byte -> printable character map (printable Latin-1 bytes map to themselves)."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


BYTE_TO_CHAR = _byte_table()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def _regex():
    try:
        import regex
    except ImportError:  # pragma: no cover - a declared dependency
        raise UnsupportedError("the BPE pre-tokenizers need the 'regex' package (pip install regex)") from None
    return regex


def _as_list(v) -> list:
    if v is None:
        return []
    if isinstance(v, list):
        return v
    try:
        return list(v)
    except TypeError:
        raise FormatError(f"expected an array, got {type(v).__name__}") from None


def _merge_pairs(syms: list[str], rank: Callable[[str, str], Any]) -> list[str]:
    """Merge adjacent symbols pair by pair, the pair of lowest ``rank(left, right)`` first
    (leftmost on ties; ``None``: never merged), until no pair ranks: the symbols left, in
    order (SentencePiece's and Gemma 4's BPE, on a linked list with a heap of candidates)."""
    n = len(syms)
    if n == 0:
        return []
    prev = list(range(-1, n - 1))
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    alive = [True] * n
    heap: list = []

    def push(left: int, right: int) -> None:
        if left >= 0 and right >= 0:
            r = rank(syms[left], syms[right])
            if r is not None:
                heapq.heappush(heap, (r, left, syms[left], syms[right]))

    for j in range(n - 1):
        push(j, j + 1)
    while heap:
        _, left, a, b = heapq.heappop(heap)
        right = nxt[left]
        if not alive[left] or right < 0 or syms[left] != a or syms[right] != b:
            continue  # a stale candidate: one of its symbols has merged since
        syms[left] = a + b
        alive[right] = False
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        push(prev[left], left)
        push(left, nxt[left])
    out: list[str] = []
    j = 0
    while j >= 0:
        out.append(syms[j])
        j = nxt[j]
    return out


@dataclass
class Tokenizer:
    """Token ids <-> text for one vocabulary."""

    model: str  # "gpt2" | "llama" | "gemma4"
    tokens: list[str]
    types: list[int]
    scores: list[float] = field(default_factory=list)
    merges: dict[tuple[str, str], int] = field(default_factory=dict)
    pre: str = "default"
    bos_id: int | None = None
    eos_id: int | None = None
    unk_id: int | None = None
    add_bos: bool = False
    add_space_prefix: bool = False

    def __post_init__(self):
        if self.model not in MODELS:
            raise UnsupportedError(f"tokenizer model {self.model!r} is not supported "
                                   f"(supported: {', '.join(sorted(MODELS))})")
        self.types = list(self.types) if len(self.types) == len(self.tokens) else [NORMAL] * len(self.tokens)
        self.ids = {}
        for i, t in enumerate(self.tokens):
            self.ids.setdefault(t, i)
        self.eog_ids = set()
        normal_s = any(m in self.ids for m in _NORMAL_S_MARKERS)
        for t in EOG_TEXTS:
            i = self.ids.get(t)
            if i is None:
                continue
            if t == "</s>" and normal_s:
                self.types[i] = NORMAL
                continue
            self.eog_ids.add(i)
            self.types[i] = CONTROL
        self._special = sorted((i for i, ty in enumerate(self.types) if ty in (CONTROL, USER_DEFINED, UNKNOWN)
                                and self.tokens[i]), key=lambda i: (-len(self.tokens[i].encode()), i))
        if self.model == "gpt2":
            exprs = PRE_TOKENIZERS.get(self.pre)
            if exprs is None:
                raise UnsupportedError(f"pre-tokenizer {self.pre!r} (tokenizer.ggml.pre) is not supported "
                                       f"(supported: {', '.join(sorted(PRE_TOKENIZERS))})")
            rx = _regex()
            self._pre = [rx.compile(e) for e in exprs]
        self._byte_ids = {}
        for b in range(256):
            i = self.ids.get(f"<0x{b:02X}>")
            if i is not None:
                self._byte_ids[b] = i

    def __len__(self) -> int:
        return len(self.tokens)

    # -- encoding ----------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text`` (BOS first when the vocabulary asks for it and ``add_special``)."""
        if not isinstance(text, str):
            raise BadInputError(f"text must be a str, got {type(text).__name__}")
        out: list[int] = []
        if add_special and self.add_bos and self.bos_id is not None:
            out.append(self.bos_id)
        first = True
        for piece in self._partition(text, parse_special):
            if isinstance(piece, int):
                out.append(piece)
            else:
                out.extend(MODELS[self.model](self, piece, first))
            first = False
        return out

    def _partition(self, text: str, parse_special: bool) -> list:
        """``text`` split at special tokens: a list of str fragments and int token ids."""
        frags: list = [text]
        for i in self._special:
            if self.types[i] in (CONTROL, UNKNOWN) and not parse_special:
                continue
            tok = self.tokens[i]
            nxt: list = []
            for f in frags:
                if isinstance(f, int) or tok not in f:
                    nxt.append(f)
                    continue
                parts = f.split(tok)
                for j, p in enumerate(parts):
                    if j:
                        nxt.append(i)
                    if p:
                        nxt.append(p)
            frags = nxt
        return frags

    # gpt2 ---------------------------------------------------------------------------------
    def _pre_split(self, text: str) -> list[str]:
        pieces = [text]
        for rx in self._pre:
            nxt = []
            for p in pieces:
                at = 0
                for m in rx.finditer(p):
                    if m.start() > at:
                        nxt.append(p[at:m.start()])
                    if m.end() > m.start():
                        nxt.append(m.group())
                    at = m.end()
                if at < len(p):
                    nxt.append(p[at:])
            pieces = nxt
        return pieces

    def _bpe_word(self, word: str) -> list[int]:
        chars = "".join(BYTE_TO_CHAR[b] for b in word.encode("utf-8"))
        if self.pre in IGNORE_MERGES:  # llama.cpp takes a word that is a token as it is
            whole = self.ids.get(chars)
            if whole is not None:
                return [whole]
        syms = list(chars)
        ranks = self.merges
        while len(syms) > 1:
            best, at = None, -1
            for j in range(len(syms) - 1):
                r = ranks.get((syms[j], syms[j + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, j
            if best is None:
                break
            syms[at:at + 2] = [syms[at] + syms[at + 1]]
        out = []
        for s in syms:
            i = self.ids.get(s)
            if i is not None:
                out.append(i)
            else:
                for ch in s:
                    bi = self.ids.get(ch)
                    if bi is not None:
                        out.append(bi)
                    elif self.unk_id is not None:
                        out.append(self.unk_id)
        return out

    def _encode_gpt2(self, text: str, first: bool) -> list[int]:
        out: list[int] = []
        for w in self._pre_split(text):
            out.extend(self._bpe_word(w))
        return out

    # llama (SentencePiece) -----------------------------------------------------------------
    def _encode_spm(self, text: str, first: bool) -> list[int]:
        if self.add_space_prefix and first:
            text = " " + text
        rev: dict[str, tuple[str, str]] = {}

        def rank(a: str, b: str) -> float | None:
            t = a + b
            i = self.ids.get(t)
            if i is None:
                return None
            rev[t] = (a, b)
            return -self.scores[i] if self.scores else 0.0

        out: list[int] = []
        for sym in _merge_pairs(list(text.replace(" ", "\u2581")), rank):
            self._resegment(sym, rev, out)
        return out

    def _resegment(self, s: str, rev: dict, out: list[int]) -> None:
        i = self.ids.get(s)
        if i is not None:
            out.append(i)
            return
        pair = rev.get(s)
        if pair is not None:
            self._resegment(pair[0], rev, out)
            self._resegment(pair[1], rev, out)
            return
        for b in s.encode("utf-8"):
            bi = self._byte_ids.get(b)
            if bi is not None:
                out.append(bi)
            elif self.unk_id is not None:
                out.append(self.unk_id)

    # gemma4 (Gemma 4's BPE over SentencePiece text) ------------------------------------------
    def _encode_gemma4(self, text: str, first: bool) -> list[int]:
        """Spaces become ``▁`` (no prefix), no byte mapping and no pre-split: the whole fragment
        is merged pair by pair, lowest merge rank first (leftmost on ties); a symbol that is no
        token becomes ``<0xXX>`` byte tokens."""
        ranks = self.merges
        out: list[int] = []
        for sym in _merge_pairs(list(text.replace(" ", "\u2581")), lambda a, b: ranks.get((a, b))):
            self._resegment(sym, {}, out)  # no merge to undo: the token, or its bytes
        return out

    # -- decoding ----------------------------------------------------------------------------
    def token_bytes(self, i: int) -> bytes:
        """The bytes one token stands for (what a streaming printer appends)."""
        t = self.tokens[i]
        ty = self.types[i]
        if ty == CONTROL:
            return b""
        if ty == BYTE or (t.startswith("<0x") and t.endswith(">") and len(t) == 6 and i in self._byte_ids.values()):
            return bytes([int(t[3:5], 16)])
        if self.model == "gpt2":
            if ty == USER_DEFINED:
                return t.encode("utf-8")
            try:
                return bytes(CHAR_TO_BYTE[c] for c in t)
            except KeyError:
                return t.encode("utf-8")
        return t.replace("\u2581", " ").encode("utf-8")

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.token_bytes(int(i)) for i in ids).decode("utf-8", errors="replace")


#: tokenizer.ggml.model -> encoder of one text fragment (the one registry of tokenizer models)
MODELS = {"gpt2": Tokenizer._encode_gpt2, "llama": Tokenizer._encode_spm, "gemma4": Tokenizer._encode_gemma4}


def from_gguf_metadata(meta: Mapping[str, Any]) -> Tokenizer:
    """A tokenizer from GGUF key/values (values decoded; arrays as lists or GGUF arrays)."""
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise BadInputError("the model has no tokenizer (no tokenizer.ggml.model in its metadata)")
    tokens = [str(t) for t in _as_list(meta.get("tokenizer.ggml.tokens"))]
    if not tokens:
        raise BadInputError("tokenizer.ggml.tokens is empty")
    merges: dict[tuple[str, str], int] = {}
    for r, m in enumerate(_as_list(meta.get("tokenizer.ggml.merges"))):
        a, sep, b = str(m).partition(" ")
        if sep:
            merges.setdefault((a, b), r)

    def opt_int(key):
        v = meta.get(key)
        return int(v) if isinstance(v, (int,)) and not isinstance(v, bool) else None

    return Tokenizer(
        model=str(model), tokens=tokens, types=[int(t) for t in _as_list(meta.get("tokenizer.ggml.token_type"))],
        scores=[float(s) for s in _as_list(meta.get("tokenizer.ggml.scores"))], merges=merges,
        pre=str(meta.get("tokenizer.ggml.pre", "default")),
        bos_id=opt_int("tokenizer.ggml.bos_token_id"), eos_id=opt_int("tokenizer.ggml.eos_token_id"),
        unk_id=opt_int("tokenizer.ggml.unknown_token_id"),
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token",
                              model == "llama" or meta.get("tokenizer.ggml.pre") in ADD_BOS_BY_DEFAULT)),
        add_space_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix", model == "llama")),
    )


def from_tokenizer_json(doc: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> Tokenizer:
    """A tokenizer from an HF ``tokenizer.json`` document (BPE models).

    Byte-level BPE (a ``ByteLevel`` pre-tokenizer or decoder) becomes ``gpt2`` with the GPT-2
    split (or Llama 3's when its regex is named); a BPE with ``byte_fallback`` or ``▁`` pieces
    becomes the SentencePiece-style ``llama`` model (merge ranks stand in for scores)."""
    m = doc.get("model") or {}
    if m.get("type") != "BPE":
        raise UnsupportedError(f"tokenizer.json model {m.get('type')!r} is not supported (BPE only)")
    vocab = m.get("vocab") or {}
    size = max([int(i) for i in vocab.values()] + [int(a["id"]) for a in doc.get("added_tokens", [])] + [-1]) + 1
    tokens = [""] * size
    types = [UNUSED] * size
    for t, i in vocab.items():
        tokens[int(i)] = t
        types[int(i)] = BYTE if (t.startswith("<0x") and t.endswith(">") and len(t) == 6) else NORMAL
    for a in doc.get("added_tokens", []):
        tokens[int(a["id"])] = a["content"]
        types[int(a["id"])] = CONTROL if a.get("special") else USER_DEFINED
    merges: dict[tuple[str, str], int] = {}
    for r, mg in enumerate(m.get("merges") or []):
        a, b = (mg.split(" ", 1) if isinstance(mg, str) else mg)
        merges.setdefault((a, b), r)
    text = json.dumps(doc.get("pre_tokenizer")) + json.dumps(doc.get("decoder"))
    byte_level = "ByteLevel" in text
    cfg = config or {}

    def tok_id(key):
        v = cfg.get(key)
        return v if isinstance(v, int) else None

    if byte_level:
        pre = "llama3" if r"\p{N}{1,3}" in text else "gpt2"
        return Tokenizer("gpt2", tokens, types, merges=merges, pre=pre, bos_id=tok_id("bos_token_id"),
                         eos_id=tok_id("eos_token_id"), add_bos=False)
    # SentencePiece-style: merges ranked as scores (earlier merge = higher score)
    scores = [0.0] * size
    for (a, b), r in merges.items():
        i = vocab.get(a + b)
        if i is not None:
            scores[int(i)] = max(scores[int(i)], -float(r)) if scores[int(i)] else -float(r)
    unk = vocab.get(m.get("unk_token") or "<unk>")
    return Tokenizer("llama", tokens, types, scores=scores, bos_id=tok_id("bos_token_id"),
                     eos_id=tok_id("eos_token_id"), unk_id=unk, add_bos=tok_id("bos_token_id") is not None,
                     add_space_prefix="Prepend" in text or '"prepend_scheme": "first"' in text)


def from_hf_folder(folder: str | os.PathLike | None) -> Tokenizer:
    """The tokenizer of an HF folder (its ``tokenizer.json``; ``config.json`` for BOS/EOS)."""
    if folder is None:
        raise BadInputError("the model has no tokenizer files")
    folder = Path(folder)
    tj = folder / "tokenizer.json"
    if not tj.is_file():
        raise BadInputError("no tokenizer.json (the runtime reads HF tokenizers from it)", path=folder)
    try:
        doc = json.loads(tj.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"not a JSON document ({e})", path=tj) from None
    cp = folder / "config.json"
    cfg = json.loads(cp.read_text("utf-8")) if cp.is_file() else {}
    return from_tokenizer_json(doc, cfg)
