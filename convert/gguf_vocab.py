"""The tokenizer as llama.cpp stores it (``tokenizer.ggml.*``), written from a Hugging Face folder
the way llama.cpp's ``convert_hf_to_gguf.py`` writes it, without transformers.

Three vocabularies (:data:`VOCABS`), each the pairs the converter adds, in its order:

* ``spm`` (``_set_vocab_sentencepiece``): ``tokenizer.model``'s pieces (formats/sentencepiece.py)
  padded to the config's ``vocab_size`` with ``[PAD<i>]`` (score -10000, UNUSED); pieces typed
  UNKNOWN / CONTROL / UNUSED / BYTE as SentencePiece types them and every other one NORMAL (a
  USER_DEFINED piece too); then ``added_tokens.json`` (USER_DEFINED, score -1000) and
  ``tokenizer_config.json``'s ``added_tokens_decoder`` (CONTROL when special or when it looks
  special, else USER_DEFINED with ``▁`` written as a space; score -1000). Model ``llama``, pre
  ``default``.
* ``gpt2`` (``_set_vocab_gpt2``): ``tokenizer.json``'s vocabulary with its added tokens, padded
  to ``vocab_size``; pre-tokenizer named by the check-text hash (convert/gguf_pre.py); merges.
* ``bert`` (``BertModel.set_vocab``): as ``gpt2``, then every token that is not CONTROL written
  in "phantom space" form (``##x`` -> ``x``, ``x`` -> ``▁x``); ``token_type_count`` first.

Then the special tokens (gguf-py's ``SpecialVocab``, :class:`SpecialVocab` here): ids named by
``tokenizer_config.json`` (looked up among ``tokenizer.json``'s added tokens) and by
``config.json``'s ``<type>_token_id``, the first one found per type kept; ``add_bos/eos/sep``
from the post-processor (a ``TemplateProcessing`` read as the converter reads it) and from
``tokenizer_config.json``; the chat template (``tokenizer_config.json``, else
``chat_template.jinja`` with ``additional_chat_templates/``, else ``chat_template.json``); the
normalizer's lowercase / strip-accents flags.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import string
from pathlib import Path
from typing import Any, Mapping, Optional

from ..formats import sentencepiece
from ..formats.errors import BadInputError, FormatError
from ..formats.gguf_kv import KVList
from ..formats.hf_tokenizer import HFTokenizer
from ..formats.tokenizer import BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED
from .gguf_pre import pre_name

log = logging.getLogger(__name__)

#: the special-token types SpecialVocab looks for, in its order
SPECIAL_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
#: special-token type -> GGUF key of its id (types without a key, e.g. cls, are not written)
ID_KEYS = {"bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id",
           "unk": "tokenizer.ggml.unknown_token_id", "sep": "tokenizer.ggml.seperator_token_id",
           "pad": "tokenizer.ggml.padding_token_id", "mask": "tokenizer.ggml.mask_token_id",
           "eot": "tokenizer.ggml.eot_token_id", "eom": "tokenizer.ggml.eom_token_id",
           "prefix": "tokenizer.ggml.prefix_token_id", "suffix": "tokenizer.ggml.suffix_token_id",
           "middle": "tokenizer.ggml.middle_token_id"}
#: special-token type -> GGUF key of its add-flag
ADD_KEYS = {"bos": "tokenizer.ggml.add_bos_token", "eos": "tokenizer.ggml.add_eos_token",
            "sep": "tokenizer.ggml.add_sep_token"}


def read_json(path: Path) -> Optional[Any]:
    """A JSON file of the folder, parsed once per version of the file (a vocabulary's
    ``tokenizer.json`` is read by several steps); callers never modify what they get."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not os.path.isfile(path):
        return None
    return _parsed(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _parsed(path: str, mtime_ns: int, size: int) -> Any:
    try:
        return json.loads(Path(path).read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"not a JSON document ({e})", path=path) from None


def looks_special(token: str) -> bool:
    """Added tokens the converter types CONTROL although the tokenizer does not say special."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<\uff5c") and token.endswith("\uff5c>"))
            or (token.startswith("<unused") and token.endswith(">")))


# ---- the special tokens ----------------------------------------------------------------------
class SpecialVocab:
    """What gguf-py's ``SpecialVocab`` reads from a folder and adds to a GGUF."""

    def __init__(self, folder: Path, n_vocab: Optional[int] = None, load_merges: bool = False,
                 types: tuple[str, ...] = SPECIAL_TYPES):
        self.folder, self.n_vocab, self.load_merges = folder, n_vocab, load_merges
        self.types = list(types)
        self.ids: dict[str, int] = {}
        self.add_flags: dict[str, bool] = {}
        self.merges: list[str] = []
        self.chat_template: Any = None
        self.lowercase: Optional[bool] = None
        self.strip_accents: Optional[bool] = None
        self._from_tokenizer_files()
        self._from_config()
        if load_merges and not self.merges:
            self._merges_txt()

    def set_id(self, typ: str, tid: Any) -> None:
        if not isinstance(tid, int):
            return
        if tid < 0:
            raise BadInputError(f"special token {typ} has the id {tid}", path=self.folder)
        if self.n_vocab is None or tid < self.n_vocab:
            self.ids.setdefault(typ, tid)
        else:
            log.warning("special token %s id %d is past the vocabulary (%d): skipped", typ, tid, self.n_vocab)

    def _normalizer(self, spec: Any) -> None:
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if kind == "Lowercase":
            self.lowercase = True
        elif kind == "StripAccents":
            self.strip_accents = True
        elif kind == "BertNormalizer":
            if "lowercase" in spec:
                self.lowercase = spec["lowercase"]
            if "strip_accents" in spec:
                self.strip_accents = spec["strip_accents"]
        elif kind == "Sequence":
            for n in spec.get("normalizers", []):
                self._normalizer(n)

    def _merges_from(self, merges: Any) -> None:
        if not isinstance(merges, list) or not merges:
            return
        if isinstance(merges[0], str):
            self.merges = list(merges)
        elif isinstance(merges[0], list) and len(merges[0]) == 2 and isinstance(merges[0][0], str):
            # pairs (tokenizers >= 0.20): a space inside a part is written as U+0120, as the converter does
            self.merges = [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair)
                           for pair in merges]
        else:
            raise FormatError("tokenizer.json: unknown merges format", path=self.folder / "tokenizer.json")

    def _from_tokenizer_files(self) -> None:
        tj = read_json(self.folder / "tokenizer.json")
        tc = read_json(self.folder / "tokenizer_config.json")
        tc = dict(tc) if isinstance(tc, dict) else None  # gguf-py fills in names as it reads: on a copy
        added: list = []
        if isinstance(tj, dict):
            if self.load_merges:
                self._merges_from((tj.get("model") or {}).get("merges"))
            if tj.get("normalizer"):
                self._normalizer(tj["normalizer"])
            added = tj.get("added_tokens") or []
            self._post_processor(tj, tc)
        if not tc:
            return
        self._chat_template(tc)
        for typ in self.types:
            flag = tc.get(f"add_{typ}_token")
            if isinstance(flag, bool):
                if typ not in self.add_flags:
                    self.add_flags[typ] = flag
                elif self.add_flags[typ] != flag:
                    log.warning("tokenizer_config add_%s_token=%s disagrees with the post-processor: kept %s",
                                typ, flag, self.add_flags[typ])
            entry = tc.get(f"{typ}_token")
            content = entry.get("content") if isinstance(entry, dict) else entry
            if not isinstance(content, str):
                continue
            self.set_id(typ, next((a.get("id") for a in added if a.get("content") == content), None))

    def _post_processor(self, tj: dict, tc: Optional[dict]) -> None:
        """add_bos / add_eos / add_sep (and bos/eos/cls/sep names) from the post-processor, read
        as gguf-py reads it: only simple templates are understood."""
        cfg = tc or {}
        bos, cls, eos, sep = cfg.get("bos_token"), cfg.get("cls_token"), cfg.get("eos_token"), cfg.get("sep_token")
        if not bos and cls and tc:
            tc["bos_token"] = bos = cls
        if not eos and sep and tc:
            tc["eos_token"] = eos = sep
        post = tj.get("post_processor")
        if not post:
            return
        for proc in post.get("processors", [post]):
            kind = proc.get("type")
            if kind == "ByteLevel":
                self.add_flags.setdefault("bos", False)
                self.add_flags.setdefault("eos", False)
            elif kind == "RobertaProcessing":
                self.add_flags.update(bos=True, eos=True, sep=True)
                if not cls and tc:
                    tc["cls_token"] = cls = proc.get("cls", [bos])[0]
                if not sep and tc:
                    tc["sep_token"] = sep = proc.get("sep", [eos])[0]
            elif kind == "TemplateProcessing":
                bos, cls, eos, sep = self._template(proc, tc, bos, cls, eos, sep)

    def _template(self, proc: dict, tc: Optional[dict], bos: Any, cls: Any, eos: Any, sep: Any) -> tuple:
        single, pair = proc.get("single", []), proc.get("pair", [])

        def special(item: dict) -> Any:
            return item.get("SpecialToken", {}).get("id")

        first = last = None
        if len(single) > 1:
            first = special(single[0])
            if first:
                if not tc:
                    bos = first
                elif first not in (bos, cls):
                    if not bos:
                        tc["bos_token"] = bos = first
                    if not cls:
                        tc["cls_token"] = cls = first
                self.add_flags["bos"] = first in (bos, cls)
            last = special(single[-1])
            if last:
                if not tc:
                    eos = last
                elif last != eos:
                    for extra in ("eot", "eom"):
                        if extra not in self.types:
                            self.types.append(extra)
                            tc[f"{extra}_token"] = eos
                            break
                    tc["eos_token"] = eos = last
                self.add_flags["eos"] = last == eos
        if pair:
            start = 1 if first and special(pair[0]) == first else 0
            stop = -1 if last and special(pair[-1]) == last else None
            middle = pair[start:stop]
            if middle and middle[0].get("Sequence", {}).get("id") == "A" and middle[-1].get("Sequence", {}).get("id") == "B":
                middle = middle[1:-1]
                if middle:
                    add_sep = False
                    entry = special(middle[0])
                    if entry and entry in (sep, eos) and not last:
                        add_sep = True
                    if len(middle) == 2:
                        entry2 = special(middle[1])
                        if entry2 and entry2 in (sep, eos):
                            add_sep = True
                    self.add_flags["sep"] = add_sep
                    if add_sep and not sep and tc:
                        tc["sep_token"] = eos
        return bos, cls, eos, sep

    def _chat_template(self, tc: dict) -> None:
        alt: Any = None
        jinja, as_json = self.folder / "chat_template.jinja", self.folder / "chat_template.json"
        if jinja.is_file():
            alt = jinja.read_text("utf-8")
            extra = sorted((self.folder / "additional_chat_templates").glob("*.jinja"))
            if extra:
                alt = [{"name": "default", "template": alt}] + [{"name": p.stem, "template": p.read_text("utf-8")}
                                                                for p in extra]
        elif as_json.is_file():
            doc = read_json(as_json)
            alt = doc.get("chat_template") if isinstance(doc, dict) else None
        tmpl = tc.get("chat_template", alt)
        if tmpl is None or isinstance(tmpl, (str, list)):
            self.chat_template = tmpl
        else:
            log.warning("tokenizer_config.json: chat_template of type %s ignored", type(tmpl).__name__)

    def _from_config(self) -> None:
        cfg = read_json(self.folder / "config.json")
        if not isinstance(cfg, dict):
            return
        for typ in self.types:
            tid = cfg.get(f"{typ}_token_id")
            if tid is None and isinstance(cfg.get("text_config"), dict):
                tid = cfg["text_config"].get(f"{typ}_token_id")
            self.set_id(typ, tid)

    def _merges_txt(self) -> None:
        path = self.folder / "merges.txt"
        if not path.is_file():
            return
        lines = path.read_text("utf-8").split("\n")
        if lines and lines[0].strip().startswith("#"):
            lines = lines[1:]
        merges = []
        for line in lines:
            parts = line.strip().split(None, 3)
            if len(parts) == 2:
                merges.append(f"{parts[0]} {parts[1]}")
            elif parts:
                log.warning("merges.txt: malformed line %r ignored", line)
        self.merges = merges

    def add_to(self, kv: KVList) -> None:
        """The pairs, in gguf-py's ``SpecialVocab.add_to_gguf`` order."""
        if self.merges:
            kv.add("tokenizer.ggml.merges", self.merges)
        for typ, tid in self.ids.items():
            if typ in ID_KEYS:
                kv.add(ID_KEYS[typ], tid)
        for typ, flag in self.add_flags.items():
            if typ in ADD_KEYS:
                kv.add(ADD_KEYS[typ], flag)
        if self.chat_template is not None:
            add_chat_template(kv, self.chat_template)
        if self.lowercase is not None:
            kv.add("tokenizer.ggml.normalizer.lowercase", bool(self.lowercase))
        if self.strip_accents is not None:
            kv.add("tokenizer.ggml.normalizer.strip_accents", bool(self.strip_accents))


def add_chat_template(kv: KVList, value: Any) -> None:
    """A template string, or named templates (``default`` and the others by name)."""
    if isinstance(value, str):
        kv.add("tokenizer.chat_template", value)
        return
    default, names = None, []
    allowed = set(string.ascii_letters + string.digits)
    for choice in value:
        name = "".join(c if c in allowed else "_" for c in str(choice.get("name", "")))
        tmpl = choice.get("template")
        if name and tmpl is not None:
            if name == "default":
                default = tmpl
            else:
                if name not in names:
                    names.append(name)
                kv.add(f"tokenizer.chat_template.{name}", tmpl)
    if names:
        kv.add("tokenizer.chat_templates", names)
    if default is not None:
        kv.add("tokenizer.chat_template", default)


# ---- the vocabularies ------------------------------------------------------------------------
def spm_vocab(folder: Path, vocab_size: Optional[int], phi3: bool = False) -> tuple[list[str], list[float], list[int]]:
    """tokens, scores, types of ``tokenizer.model`` (``_create_vocab_sentencepiece``; with
    ``phi3``, Phi3MiniModel's own reading: its added tokens keep their text and are CONTROL only
    when special, and ``tokenizer.json``'s added tokens count too)."""
    path = folder / "tokenizer.model"
    pieces = sentencepiece.read_pieces(path)
    n = vocab_size or len(pieces)
    tokens = [f"[PAD{i}]" for i in range(n)]
    scores = [-10000.0] * n
    types = [UNUSED] * n
    kinds = {UNKNOWN: UNKNOWN, CONTROL: CONTROL, UNUSED: UNUSED, BYTE: BYTE}
    for i, p in enumerate(pieces[:n]):
        tokens[i], scores[i], types[i] = p.piece, p.score, kinds.get(p.type, NORMAL)
    if len(pieces) > n:
        if phi3:
            raise BadInputError(f"{len(pieces)} pieces for a vocabulary of {n}: llama.cpp's converter fails on it", path=path)
        log.warning("%s: pieces from id %d on are past vocab_size %d: ignored", path, n, n)
    added = read_json(folder / "added_tokens.json")
    if isinstance(added, dict):
        for text, tid in added.items():
            if isinstance(tid, int) and 0 <= tid < n:
                tokens[tid], scores[tid], types[tid] = text, -1000.0, USER_DEFINED
    tc = read_json(folder / "tokenizer_config.json")
    decoder = tc.get("added_tokens_decoder", {}) if isinstance(tc, dict) else {}
    added = [(int(key), data) for key, data in decoder.items()]
    if phi3:
        tj = read_json(folder / "tokenizer.json")
        added += [(int(a["id"]), a) for a in (tj.get("added_tokens") or [] if isinstance(tj, dict) else [])]
    for tid, data in added:
        if not 0 <= tid < n:
            if phi3:
                raise BadInputError(f"added token id {tid} is past the vocabulary ({n}): llama.cpp's converter "
                                    "fails on it", path=folder)
            continue
        text = data["content"]
        if phi3:
            types[tid] = CONTROL if data.get("special") else USER_DEFINED
        elif data.get("special") or looks_special(text):
            types[tid] = CONTROL
        else:
            text = text.replace("\u2581", " ")
            types[tid] = USER_DEFINED
        tokens[tid], scores[tid] = text, -1000.0
    return tokens, scores, types


def hf_vocab(folder: Path, vocab_size: Optional[int]) -> tuple[list[str], list[int], str]:
    """tokens, types and pre-tokenizer name of ``tokenizer.json`` (``get_vocab_base``)."""
    tj = read_json(folder / "tokenizer.json")
    if not isinstance(tj, dict):
        raise BadInputError("no tokenizer.json (llama.cpp's converter needs it for this model)", path=folder)
    tok = HFTokenizer(tj)
    vocab = tok.vocab
    n = vocab_size if vocab_size is not None else len(vocab)
    top = max(vocab.values(), default=-1)
    if top >= n:
        raise BadInputError(f"tokenizer.json has token id {top}, past the config's vocab_size {n}", path=folder)
    pre = pre_name(tok, str(folder / "tokenizer.json"))
    tc = read_json(folder / "tokenizer_config.json")
    clean = bool(tc.get("clean_up_tokenization_spaces", False)) if isinstance(tc, dict) else False
    added = {t.id: t for t in tok.added}
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(n):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
            continue
        a = added.get(i)
        if a is not None and a.content == text:
            if not a.normalized:  # the converter passes these through the HF tokenizer once
                text = tok.decode(tok.encode(text, add_special_tokens=False), clean)
            if a.special or looks_special(text):
                types.append(CONTROL)
            else:
                text = text.replace("\u2581", " ")
                types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
        tokens.append(text)
    return tokens, types, pre


def write_spm(kv: KVList, folder: Path, hp: Mapping[str, Any], phi3: bool = False) -> None:
    tokens, scores, types = spm_vocab(folder, hp.get("vocab_size"), phi3)
    kv.add("tokenizer.ggml.model", "llama")
    kv.add("tokenizer.ggml.pre", "default")
    kv.add("tokenizer.ggml.tokens", tokens)
    kv.add("tokenizer.ggml.scores", scores)
    kv.add("tokenizer.ggml.token_type", types)
    SpecialVocab(folder, n_vocab=len(tokens)).add_to(kv)


def _write_hf(kv: KVList, model: str, pre: str, tokens: list[str], types: list[int], special: SpecialVocab) -> None:
    kv.add("tokenizer.ggml.model", model)
    kv.add("tokenizer.ggml.pre", pre)
    kv.add("tokenizer.ggml.tokens", tokens)
    kv.add("tokenizer.ggml.token_type", types)
    special.add_to(kv)


def write_gpt2(kv: KVList, folder: Path, hp: Mapping[str, Any]) -> None:
    tokens, types, pre = hf_vocab(folder, hp.get("vocab_size"))
    _write_hf(kv, "gpt2", pre, tokens, types, SpecialVocab(folder, load_merges=True))


def write_bert(kv: KVList, folder: Path, hp: Mapping[str, Any]) -> None:
    """BertModel.set_vocab: WordPiece's ``##`` continuations lose it, word starts gain a phantom space."""
    tokens, types, pre = hf_vocab(folder, hp.get("vocab_size"))
    kv.add("tokenizer.ggml.token_type_count", int(hp.get("type_vocab_size", 1)))
    phantom = [t if ty == CONTROL else (t[2:] if t.startswith("##") else "\u2581" + t) for t, ty in zip(tokens, types)]
    _write_hf(kv, "bert", pre, phantom, types, SpecialVocab(folder, n_vocab=len(phantom)))


def write_phi3(kv: KVList, folder: Path, hp: Mapping[str, Any]) -> None:
    """Phi3MiniModel.set_vocab: Phi-4's GPT-2 tokenizer, else its own SentencePiece reading."""
    tc = read_json(folder / "tokenizer_config.json")
    if isinstance(tc, dict):
        if "tokenizer_class" not in tc:
            raise BadInputError("tokenizer_config.json names no tokenizer_class: llama.cpp's converter fails on "
                                "a Phi-3 without it", path=folder)
        if tc["tokenizer_class"] == "GPT2Tokenizer":
            return write_gpt2(kv, folder, hp)
    if not has_spm(folder):
        raise BadInputError("no tokenizer.model (llama.cpp's converter needs it for Phi-3)", path=folder)
    write_spm(kv, folder, hp, phi3=True)


#: vocabulary kind -> writer of its pairs (kv, folder, hyperparameters)
VOCABS = {"spm": write_spm, "gpt2": write_gpt2, "bert": write_bert, "phi3": write_phi3}


def has_spm(folder: Path) -> bool:
    return (folder / "tokenizer.model").is_file()
