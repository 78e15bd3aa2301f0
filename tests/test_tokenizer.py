"""Tokenizers from model metadata (formats/tokenizer.py): ids identical to llama.cpp's on a
shipped corpus (tests/data/tokenizer_corpus.json; skipped without llama-cpp-python), round
trips, and the merge rules on small hand-made vocabularies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from panelpack.formats import gguf
from panelpack.formats import tokenizer as T
from panelpack.formats.errors import UnsupportedError

CORPUS = json.loads((Path(__file__).parent / "data" / "tokenizer_corpus.json").read_text("utf-8"))
WHOLE = "\n".join(CORPUS)


@pytest.fixture(scope="module")
def vocabs(smollm2, gemma):
    out = {}
    for name, path in (("smollm2", smollm2), ("gemma", gemma)):
        with gguf.open_file(path) as f:
            out[name] = (path, T.from_gguf_metadata(f.metadata))
    return out


@pytest.mark.real
@pytest.mark.parametrize("name", ["smollm2", "gemma"])
def test_round_trip(vocabs, name):
    _, tok = vocabs[name]
    for text in CORPUS + [WHOLE]:
        ids = tok.encode(text, add_special=False)
        assert tok.decode(ids) == text, (name, text)


@pytest.mark.slow
@pytest.mark.real
@pytest.mark.parametrize("name", ["smollm2", "gemma"])
@pytest.mark.parametrize("special", [False, True])
def test_ids_identical_to_llama_cpp(vocabs, name, special):
    import llama_proc

    llama_proc.require()  # llama.cpp in its own process (see tests/llama_proc.py)

    path, tok = vocabs[name]
    texts = CORPUS + [WHOLE]
    for text, want in zip(texts, llama_proc.tokenize(path, texts, special)):
        assert tok.encode(text, add_special=True, parse_special=special) == want, (name, text)


def _gpt2(tokens, merges, pre="gpt2"):
    return T.Tokenizer("gpt2", tokens, [T.NORMAL] * len(tokens),
                       merges={tuple(m.split(" ")): r for r, m in enumerate(merges)}, pre=pre)


def test_bpe_merges_lowest_rank_first():
    toks = ["a", "b", "c", "ab", "bc", "abc"]
    # "bc" ranks before "ab": a|bc, then no "a bc" merge -> [a, bc]
    assert _gpt2(toks, ["b c", "a b"]).encode("abc") == [0, 4]
    assert _gpt2(toks, ["a b", "b c", "ab c"]).encode("abc") == [5]


def test_bpe_byte_fallback_and_digit_split():
    toks = [T.BYTE_TO_CHAR[b] for b in range(256)] + ["12"]
    tk = _gpt2(toks, ["1 2"], pre="smollm")  # smollm splits every digit first
    assert tk.encode("12") == [ord("1"), ord("2")]
    assert _gpt2(toks, ["1 2"]).encode("12") == [256]
    assert tk.encode("é") == list("é".encode())  # bytes map through GPT-2's byte table


def test_spm_merges_highest_score_first_and_byte_tokens():
    toks = ["<unk>", "a", "b", "ab", "\u2581", "\u2581a"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [T.UNKNOWN] + [T.NORMAL] * 5 + [T.BYTE] * 256
    tk = T.Tokenizer("llama", toks, types, scores=[0, -1, -1, -2, -1, -0.5] + [0] * 256, unk_id=0)
    assert tk.encode(" ab") == [5, 2]  # "▁a" (-0.5) beats "ab" (-2)
    assert tk.encode("é") == [6 + 0xC3, 6 + 0xA9]
    assert tk.decode(tk.encode(" ab")) == " ab"


def test_special_tokens_control_only_when_parsed():
    toks = ["<ctl>", "<usr>"] + [T.BYTE_TO_CHAR[b] for b in range(256)]
    tk = T.Tokenizer("gpt2", toks, [T.CONTROL, T.USER_DEFINED] + [T.NORMAL] * 256, pre="gpt2")
    assert tk.encode("<usr>") == [1]  # user-defined: always
    assert tk.encode("<ctl>", parse_special=True) == [0]
    assert 0 not in tk.encode("<ctl>")


def test_unknown_models_refused():
    with pytest.raises(UnsupportedError, match="tokenizer model 'rwkv'"):
        T.Tokenizer("rwkv", ["a"], [1])
    with pytest.raises(UnsupportedError, match="pre-tokenizer 'mystery'"):
        T.Tokenizer("gpt2", ["a"], [1], pre="mystery")


def test_lfm2_pre_tokenizer_is_llama3s_with_bos():
    """llama.cpp runs tokenizer.ggml.pre "lfm2" as its llama3 pre-tokenizer (ignore_merges) and
    adds BOS when the GGUF does not say (llama_vocab::impl::load)."""
    toks = [T.BYTE_TO_CHAR[b] for b in range(256)] + ["12", "123", "<s>"]
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": toks,
            "tokenizer.ggml.token_type": [T.NORMAL] * 258 + [T.CONTROL], "tokenizer.ggml.merges": ["1 2"],
            "tokenizer.ggml.bos_token_id": 258}
    lfm2 = T.from_gguf_metadata(dict(meta, **{"tokenizer.ggml.pre": "lfm2"}))
    llama3 = T.from_gguf_metadata(dict(meta, **{"tokenizer.ggml.pre": "llama-bpe"}))
    text = "1234 12 123"  # llama3's regex takes digits three at a time; "123" is a token: no merge needed
    assert lfm2.encode(text, add_special=False) == llama3.encode(text, add_special=False)
    assert 257 in lfm2.encode(text, add_special=False)
    assert lfm2.encode(text)[0] == 258 and llama3.encode(text)[0] != 258
    no_bos = T.from_gguf_metadata(dict(meta, **{"tokenizer.ggml.pre": "lfm2", "tokenizer.ggml.add_bos_token": False}))
    assert no_bos.encode(text)[0] != 258


def test_gemma4_tokenizer_equals_llama_cpps_vocabulary_tests():
    """Gemma 4's ``tokenizer.ggml.model`` ``gemma4`` (BPE by merge rank over the ``▁`` text, no
    byte mapping, byte tokens as fallback) on llama.cpp's own vocabulary test of the real
    vocabulary (``models/ggml-vocab-gemma-4.gguf`` with its ``.inp``/``.out``, beside the
    reference converter): every case's ids, and the text back from them."""
    import llama_convert

    d = llama_convert.vocab_dir()
    if d is None or not (d / "ggml-vocab-gemma-4.gguf.out").is_file():
        pytest.skip("llama.cpp's vocabulary tests are not unpacked (tests/llama_convert.py)")
    with gguf.open_file(d / "ggml-vocab-gemma-4.gguf") as f:
        tok = T.from_gguf_metadata(f.metadata)
    cases = (d / "ggml-vocab-gemma-4.gguf.inp").read_text("utf-8").split("\n__ggml_vocab_test__\n")
    outs = (d / "ggml-vocab-gemma-4.gguf.out").read_text("utf-8").split("\n")
    assert len(cases) >= 40 and tok.add_bos and not tok.add_space_prefix
    for text, want in zip(cases, outs):
        ids = tok.encode(text, add_special=False)
        assert ids == [int(x) for x in want.split()], text
        assert tok.decode(ids) == text, text


@pytest.mark.slow  # ~3 s: the 262144-token vocabulary read twice
def test_gemma4_vocabulary_as_tokenizer_json_gives_the_same_ids():
    """The same vocabulary as an HF tokenizer.json (BPE, byte fallback, spaces replaced by ▁:
    Gemma's form) reads as the SentencePiece-style model, merge ranks as scores: llama.cpp's ids
    on every case of its vocabulary test."""
    import llama_convert

    d = llama_convert.vocab_dir()
    if d is None or not (d / "ggml-vocab-gemma-4.gguf.out").is_file():
        pytest.skip("llama.cpp's vocabulary tests are not unpacked (tests/llama_convert.py)")
    cases = (d / "ggml-vocab-gemma-4.gguf.inp").read_text("utf-8").split("\n__ggml_vocab_test__\n")
    outs = (d / "ggml-vocab-gemma-4.gguf.out").read_text("utf-8").split("\n")
    with gguf.open_file(d / "ggml-vocab-gemma-4.gguf") as f:
        md = f.metadata
        toks, types = [str(t) for t in md["tokenizer.ggml.tokens"]], list(md["tokenizer.ggml.token_type"])
        merges = [str(m) for m in md["tokenizer.ggml.merges"]]
    doc = {"model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>",
                     "vocab": {t: i for i, t in enumerate(toks) if types[i] not in (3, 4)},
                     "merges": merges},
           "added_tokens": [{"id": i, "content": toks[i], "special": types[i] == 3}
                            for i in range(len(toks)) if types[i] in (3, 4)],
           "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}, "pre_tokenizer": None}
    hf = T.from_tokenizer_json(doc, {"bos_token_id": 2, "eos_token_id": 1})
    for text, want in zip(cases, outs):
        assert hf.encode(text, add_special=False) == [int(x) for x in want.split()], text
