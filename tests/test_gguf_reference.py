"""GGUF out against llama.cpp itself (slow tier): the reference pipeline is llama.cpp's own
``convert_hf_to_gguf.py`` (tests/llama_convert.py) with ``--outtype``, then ``llama_model_quantize``
for a mix (tests/llama_ref.py). On MiniLM (real BERT) and the tiny random checkpoint of every
architecture of the table (tests/hf_models.py), panelpack's GGUF must have the same key/value
pairs (only general.* provenance keys may differ), the same tensor table and the same bytes;
llama.cpp must give the same logits (embeddings for MiniLM) and the same tokens on both files;
and a GGUF re-quantized with a mix must be ``llama_model_quantize --allow-requantize``'s. The
tokenizer variants (a tokenizer_config with added tokens and a chat template, real BPE
vocabularies) are tests/gguf_models.py's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from panelpack.convert import convert, export, gguf_pre, to_gguf
from panelpack.formats import hf_tokenizer

import gguf_compare
import gguf_models
import hf_models
import llama_convert
import llama_proc
import llama_ref

pytestmark = pytest.mark.slow

ARCHS = hf_models.ARCHES
OUTTYPES = ("f32", "f16", "bf16", "q8_0")
MIXES = ("Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K")

#: a varied corpus (tokenization and logits): ASCII, code, digits, whitespace runs, accents, CJK,
#: emoji, special tokens
CORPUS = gguf_models.CORPUS + ["   leading and trailing   ", "x" * 40, "3.14159 2.71828 1e-10 0xFF 1,000,000",
                               "Ünïcödé ÀÉÎÕÜ ñ ß ø å", "🦙🚀✅ <s> </s> <unk>", "\t\ttabs\t\n\r\n"]


class Refs:
    """llama.cpp's GGUFs of a checkpoint, made once per session."""

    def __init__(self, folder: Path, tmp: Path):
        self.folder, self.tmp, self.made = folder, tmp, {}

    def outtype(self, t: str) -> Path:
        if t not in self.made:
            self.made[t] = llama_convert.convert(self.folder, self.tmp / f"ref-{t}.gguf", t)
        return self.made[t]

    def mix(self, mix: str, base: str) -> Path:
        key = f"{mix}-{base}"
        if key not in self.made:
            self.made[key] = llama_ref.quantize(self.outtype(base), self.tmp / f"ref-{key}.gguf", mix)
        return self.made[key]


@pytest.fixture(scope="session")
def refs(tmp_path_factory):
    llama_convert.require()
    llama_proc.require()
    cache: dict[str, Refs] = {}

    def get(name: str, folder: Path) -> Refs:
        if name not in cache:
            cache[name] = Refs(folder, tmp_path_factory.mktemp(f"ref-{name}"))
        return cache[name]
    return get


@pytest.fixture(autouse=True)
def _writer_reads_the_reference_vocabulary(monkeypatch):
    """Where the reference converter reads the tiny checkpoints' tokenizer.model in place of its
    class's own vocabulary (llama_convert.VOCAB_OVERRIDES: LFM2), the writer does too."""
    from dataclasses import replace

    from panelpack.convert import gguf_arch

    for cls, vocab in llama_convert.WRITER_VOCAB.items():
        monkeypatch.setitem(gguf_arch.CONVERTERS, cls, replace(gguf_arch.CONVERTERS[cls], vocab=vocab))


@pytest.fixture(scope="session")
def models(hf_models):
    """The table's checkpoints (bf16, a trained SentencePiece tokenizer)."""
    return {a: m.folder for a, m in hf_models.items()}


def _same(ours: Path, ref: Path) -> None:
    diffs = gguf_compare.differences(ours, ref)
    assert not diffs, "\n".join(diffs)


@pytest.mark.parametrize("outtype", OUTTYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_outtype_equals_the_converter(refs, models, tmp_path, arch, outtype):
    r = refs(arch, models[arch])
    _same(to_gguf(r.folder, tmp_path / "ours.gguf", outtype=outtype).path, r.outtype(outtype))


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("arch", ARCHS)
def test_mix_equals_converter_then_quantizer(refs, models, tmp_path, arch, mix):
    """The bf16 checkpoints through --outtype bf16 (no rounding before the quantizer), then the mix."""
    r = refs(arch, models[arch])
    _same(to_gguf(r.folder, tmp_path / "ours.gguf", quant=mix).path, r.mix(mix, "bf16"))


@pytest.mark.real
@pytest.mark.parametrize("what", OUTTYPES + MIXES)
def test_minilm_equals_llama_cpp(refs, tmp_path, minilm, what):
    r = refs("minilm", minilm)
    if what in OUTTYPES:
        ours, ref = to_gguf(minilm, tmp_path / "ours.gguf", outtype=what).path, r.outtype(what)
    else:  # MiniLM is f32: through --outtype f32
        ours, ref = to_gguf(minilm, tmp_path / "ours.gguf", quant=what).path, r.mix(what, "f32")
    _same(ours, ref)


@pytest.mark.real
def test_minilm_embeddings_and_tokens_bit_identical(refs, tmp_path, minilm):
    r = refs("minilm", minilm)
    for kind, ref in (("f32", r.outtype("f32")), ("Q4_K_M", r.mix("Q4_K_M", "f32"))):
        ours = to_gguf(minilm, tmp_path / f"{kind}.gguf", **({"outtype": "f32"} if kind == "f32" else {"quant": kind}))
        a, b = llama_proc.embeddings(ours.path, CORPUS), llama_proc.embeddings(ref, CORPUS)
        assert a.shape == (len(CORPUS), 384) and np.array_equal(a, b), kind
        assert llama_proc.tokenize(ours.path, CORPUS, True) == llama_proc.tokenize(ref, CORPUS, True)


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_and_tokens_bit_identical(refs, models, tmp_path, arch):
    r = refs(arch, models[arch])
    for kind, ref in (("f32", r.outtype("f32")), ("Q4_K_M", r.mix("Q4_K_M", "bf16"))):
        ours = to_gguf(r.folder, tmp_path / f"{kind}.gguf", **({"outtype": "f32"} if kind == "f32" else {"quant": kind}))
        for special in (False, True):
            assert llama_proc.tokenize(ours.path, CORPUS, special) == llama_proc.tokenize(ref, CORPUS, special)
        ids = [i for row in llama_proc.tokenize(ref, CORPUS[:4], False) for i in row][:64]
        a, b = llama_proc.logits(ours.path, ids), llama_proc.logits(ref, ids)
        assert np.array_equal(a, b), (arch, kind, float(np.abs(a - b).max()))


@pytest.mark.parametrize("arch", ("llama", "gemma3", "phi3"))
def test_gguf_requantized_equals_llama_quantize_allow_requantize(refs, models, tmp_path, arch):
    """GGUF -> --quant Q4_K_M -> GGUF (directly, and through a bundle's export) is what
    llama_model_quantize --allow-requantize writes from the same Q8_0 source."""
    r = refs(arch, models[arch])
    src = r.outtype("q8_0")
    want = llama_ref.quantize(src, tmp_path / "want.gguf", "Q4_K_M")
    got = to_gguf(src, tmp_path / "got.gguf", quant="Q4_K_M").path
    assert got.read_bytes() == want.read_bytes()
    b = convert(src, tmp_path / "b.ppk", quant="Q4_K_M")
    assert export(b.bundle, tmp_path / "back.gguf").path.read_bytes() == want.read_bytes()


@pytest.mark.parametrize("arch", ARCHS)
def test_hf_bundle_export_equals_the_reference(refs, models, tmp_path, arch):
    r = refs(arch, models[arch])
    b = convert(r.folder, tmp_path / "b.ppk", quant="Q5_K_M")
    _same(export(b.bundle, tmp_path / "x.gguf").path, r.mix("Q5_K_M", "bf16"))


def test_tokenizer_config_and_sampling_equal_the_converter(refs, models, tmp_path_factory, tmp_path):
    """Special tokens named by tokenizer_config.json, added tokens over pieces (one not special,
    written with a space for its ▁), add-bos/eos, a chat template, sampling settings."""
    folder = gguf_models.with_tokenizer_config(models["qwen3"], tmp_path_factory.mktemp("tc") / "qwen3-tc")
    r = refs("qwen3-tc", folder)
    ours = to_gguf(folder, tmp_path / "ours.gguf", outtype="bf16").path
    _same(ours, r.outtype("bf16"))
    assert llama_proc.tokenize(ours, CORPUS, True) == llama_proc.tokenize(r.outtype("bf16"), CORPUS, True)


# ---- BPE tokenizers: real vocabularies rebuilt from llama.cpp's vocabulary GGUFs ----------------
def _vocab(family: str) -> Path:
    d = llama_convert.vocab_dir()
    if d is None:
        pytest.skip("llama.cpp's vocabulary GGUFs are not unpacked (.ci/run unpacks them from the sdist)")
    return d / f"ggml-vocab-{family}.gguf"


@pytest.mark.parametrize("family", sorted(gguf_models.BPE_FAMILIES))
def test_check_text_hash_names_the_real_tokenizers(tmp_path, family):
    """panelpack's encoder gives transformers' ids on the check text of a real vocabulary, so the
    hash lands on the name llama.cpp's table gives that tokenizer."""
    transformers = pytest.importorskip("transformers")
    folder = gguf_models.bpe_tokenizer(_vocab(family), family, tmp_path / family)
    ours = hf_tokenizer.load(folder)
    ref = transformers.AutoTokenizer.from_pretrained(str(folder))
    for text in [gguf_pre.CHECK_TEXT] + CORPUS:
        assert ours.encode(text) == ref.encode(text), text
    assert gguf_pre.pre_name(ours) == family


@pytest.mark.parametrize("family", sorted(gguf_models.BPE_FAMILIES))
def test_bpe_vocabulary_equals_the_converter(refs, tmp_path_factory, tmp_path, family):
    arch = gguf_models.BPE_FAMILIES[family][4]
    root = tmp_path_factory.mktemp(f"bpe-{family}")
    tok = gguf_models.bpe_tokenizer(_vocab(family), family, root / "tokenizer")
    n_vocab = max(hf_tokenizer.load(tok).vocab.values()) + 1
    spec = hf_models.spec(arch, vocab_size=n_vocab, hidden_size=64, intermediate_size=128, num_attention_heads=2,
                          num_key_value_heads=1, **({"head_dim": 32} if "head_dim" in hf_models.SPECS[arch].config else {}))
    built = hf_models.build(root / "ck", [arch], specs={arch: spec}, reference=False)[arch].folder
    folder = gguf_models.with_bpe_tokenizer(built, tok, root / arch)
    r = refs(f"bpe-{family}", folder)
    ours = to_gguf(folder, tmp_path / "ours.gguf", outtype="bf16").path
    _same(ours, r.outtype("bf16"))
    assert llama_proc.tokenize(ours, CORPUS, True) == llama_proc.tokenize(r.outtype("bf16"), CORPUS, True)
