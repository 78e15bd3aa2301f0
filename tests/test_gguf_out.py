"""GGUF out (convert/gguf_out.py, convert/gguf_export.py): tiny numpy-built HF folders written as
GGUF and read back, checked against hand computations (names, shapes, the converter's types,
llama's q/k permutation, Gemma's shifted norms, the mix's types and order, the tokenizer pairs),
every export path against the direct one, and the refusals. The comparisons with llama.cpp's own
converter and quantizer are in test_gguf_reference.py (slow tier)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from panelpack.cli import main
from panelpack.convert import convert, gguf_out, to_gguf
from panelpack.formats import arch, blocks, qtypes
from panelpack.formats.arch import transforms
from panelpack.formats.errors import BadInputError, OutputError, UnsupportedError
from panelpack.formats.gguf import GGUFFile

import gguf_tiny


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return gguf_tiny.folder(tmp_path_factory.mktemp("hf") / "tiny-llama", "llama")


def values(g: GGUFFile, name: str) -> np.ndarray:
    info = g.tensor(name)
    return blocks.dequantize(np.asarray(g.raw(name)), info.type, info.n, info.k).reshape(info.shape)


def test_llama_f32_names_types_permutation_and_tokenizer(llama, tmp_path):
    res = to_gguf(llama, tmp_path / "m.gguf", outtype="f32")
    g = GGUFFile(res.path)
    m = g.metadata
    keys = list(g.kv_infos)
    assert keys[:3] == ["general.architecture", "general.type", "general.name"]
    assert m["general.architecture"] == "llama" and m["general.file_type"] == 0
    assert keys.index("llama.block_count") < keys.index("general.file_type") < keys.index("llama.vocab_size")
    assert keys.index("general.quantization_version") < keys.index("tokenizer.ggml.model")
    assert (m["llama.block_count"], m["llama.embedding_length"], m["llama.attention.head_count_kv"]) == (2, 64, 2)
    assert m["llama.rope.dimension_count"] == 16 and m["llama.attention.key_length"] == 16
    names = [t.name for t in g.tensors]  # generated first, then by HF name
    assert names[:4] == ["rope_freqs.weight", "output.weight", "token_embd.weight", "blk.0.attn_norm.weight"]
    factors = values(g, "rope_freqs.weight")  # Llama 3 RoPE: 1 for short wavelengths, the factor for long ones
    from panelpack.formats.arch import rope

    assert factors.shape == (8,) and factors[0] == 1.0 and factors[-1] == 8.0
    assert np.allclose(factors, rope.llama3_factors(500000.0, 16, 8.0, 1.0, 4.0, 64), rtol=1e-6)
    assert {t.type.name for t in g.tensors} == {"F32"}
    # q/k rows permuted for llama.cpp's pairwise rotary, v untouched
    q = gguf_tiny.hf_values(llama, "model.layers.1.self_attn.q_proj.weight")
    k = gguf_tiny.hf_values(llama, "model.layers.1.self_attn.k_proj.weight")
    assert np.array_equal(values(g, "blk.1.attn_q.weight"), transforms.permute_rows(q, 4))
    assert np.array_equal(values(g, "blk.1.attn_k.weight"), transforms.permute_rows(k, 2))
    head = transforms.permute_rows(np.arange(16), 1)
    assert head.tolist() == [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    assert np.array_equal(values(g, "blk.1.attn_v.weight"),
                          gguf_tiny.hf_values(llama, "model.layers.1.self_attn.v_proj.weight"))
    # the tokenizer as the converter stores a SentencePiece model
    tokens, types, scores = (m[k].tolist() for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                                      "tokenizer.ggml.scores"))
    assert m["tokenizer.ggml.model"] == "llama" and m["tokenizer.ggml.pre"] == "default"
    assert len(tokens) == 300 and tokens[:3] == ["<unk>", "<s>", "</s>"] and types[:4] == [2, 3, 3, 6]
    assert tokens[296:] == ["[PAD296]", "[PAD297]", "<|im_start|>", "<tool>"]
    assert types[296:] == [5, 5, 3, 4] and scores[296:] == [-10000.0, -10000.0, -1000.0, -1000.0]
    assert (m["tokenizer.ggml.bos_token_id"], m["tokenizer.ggml.eos_token_id"]) == (1, 2)
    assert m["tokenizer.ggml.add_bos_token"] is True and m["tokenizer.ggml.add_eos_token"] is False
    assert m["tokenizer.chat_template"].startswith("{% for m in messages")


@pytest.mark.parametrize("outtype, matrix", [("f16", "F16"), ("bf16", "BF16"), ("q8_0", "Q8_0"), ("auto", "BF16")])
def test_outtypes(llama, tmp_path, outtype, matrix):
    g = GGUFFile(to_gguf(llama, tmp_path / "m.gguf", outtype=outtype).path)
    types = {t.name: t.type.name for t in g.tensors}
    assert types["blk.0.attn_q.weight"] == matrix == types["token_embd.weight"]
    assert types["blk.0.attn_norm.weight"] == "F32"
    assert g.metadata["general.file_type"] == {"F16": 1, "BF16": 32, "Q8_0": 7}[matrix]


def test_converter_types():
    assert gguf_out.converter_type("blk.0.attn_q.weight", (64, 100), qtypes.Q8_0)[0] == qtypes.F16
    assert gguf_out.converter_type("position_embd.weight", (512, 64), qtypes.F16)[0] == qtypes.F32
    assert gguf_out.converter_type("blk.0.attn_q.bias", (64,), qtypes.F16)[0] == qtypes.F32
    assert gguf_out.converter_type("blk.0.attn_q_norm.weight", (2, 64), qtypes.F16)[0] == qtypes.F32
    assert gguf_out.converter_type("output.weight", (300, 64), qtypes.BF16)[0] == qtypes.BF16
    assert [gguf_out.size_label(n) for n in (22_565_376, 999, 1_234_567_890, 5_500_000)] == ["23M", "1.0K", "1.2B", "5.5M"]


def test_gemma_norms_are_one_plus_w_and_f16_arithmetic(tmp_path):
    src = gguf_tiny.folder(tmp_path / "g", "gemma3", dtype="F16", tied=True)
    g = GGUFFile(to_gguf(src, tmp_path / "g.gguf", outtype="f32").path)
    w = gguf_tiny.hf_values(src, "model.layers.0.self_attn.q_norm.weight").astype(np.float16)
    assert np.array_equal(values(g, "blk.0.attn_q_norm.weight"), (w + np.float16(1)).astype(np.float32))
    names = {t.name for t in g.tensors}
    assert {"blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight", "blk.0.ffn_norm.weight"} <= names
    assert "output.weight" not in names
    m = g.metadata
    assert m["gemma3.attention.sliding_window"] == 8 and m["gemma3.rope.freq_base"] == 1e6
    assert m["gemma3.rope.freq_base_swa"] == 1e4 and m["tokenizer.ggml.add_space_prefix"] is False
    # Gemma3Model adds head_count_kv again after the common keys: gguf-py keeps its first place
    assert list(g.kv_infos).index("gemma3.attention.head_count_kv") < list(g.kv_infos).index("general.file_type")


def test_mix_types_order_and_bytes(llama, tmp_path):
    res = to_gguf(llama, tmp_path / "m.gguf", quant="Q4_K_M")
    g = GGUFFile(res.path)
    keys = list(g.kv_infos)
    assert keys[-2:] == ["general.quantization_version", "general.file_type"] and g.metadata["general.file_type"] == 15
    names = [t.name for t in g.tensors]
    assert names == [t.name for t in gguf_out.quantizer_order(res.plan.tensors)]
    assert names[:4] == ["output.weight", "output_norm.weight", "rope_freqs.weight", "token_embd.weight"]
    types = {t.name: t.type.name for t in g.tensors}
    # K = 64 is no multiple of 256: Q4_K falls back to Q5_0, Q6_K to Q8_0 (llama.cpp's fallbacks)
    assert types["blk.0.attn_q.weight"] == "Q5_0" and types["blk.1.attn_v.weight"] == "Q8_0"
    assert types["output.weight"] == "Q8_0" and types["blk.0.attn_norm.weight"] == "F32"
    q = gguf_tiny.hf_values(llama, "model.layers.0.self_attn.q_proj.weight")
    want = blocks.quantize(transforms.permute_rows(q, 4), qtypes.Q5_0)
    assert np.asarray(g.raw("blk.0.attn_q.weight")).tobytes() == want.tobytes()
    row = {r["name"]: r for r in res.ledger}["blk.0.attn_q.weight"]
    assert "(llama.cpp fallback)" in row["rule"] and "permuted" in row["reason"] and row["action"] == "quantize"


def test_export_of_hf_bundles_equals_the_direct_file(llama, tmp_path):
    direct = to_gguf(llama, tmp_path / "direct.gguf", quant="Q4_K_M").path.read_bytes()
    b = convert(llama, tmp_path / "panel64.ppk", layout="panel64", quant="Q4_K_M")  # panels undone on export
    r = CliRunner().invoke(main, ["export", str(b.bundle), "-o", str(tmp_path / "panel64.gguf")])
    assert r.exit_code == 0, r.output
    assert "as llama_model_quantize writes the Q4_K_M mix" in r.output
    assert (tmp_path / "panel64.gguf").read_bytes() == direct


def test_gguf_source_requantized_and_its_bundle_exported(llama, tmp_path):
    f32 = to_gguf(llama, tmp_path / "f32.gguf", outtype="f32").path
    direct = to_gguf(f32, tmp_path / "q.gguf", quant="Q5_K_M").path.read_bytes()
    b = convert(f32, tmp_path / "q.ppk", quant="Q5_K_M")
    from panelpack.convert import export

    res = export(b.bundle, tmp_path / "back.gguf")
    assert res.plan is not None and (tmp_path / "back.gguf").read_bytes() == direct
    g = GGUFFile(tmp_path / "q.gguf")
    assert g.metadata["general.file_type"] == 17 and list(g.kv_infos)[-1] == "general.file_type"
    # an unchanged GGUF-sourced bundle still comes back byte for byte
    b2 = convert(f32, tmp_path / "same.ppk", layout="rowmajor")
    assert export(b2.bundle, tmp_path / "same.gguf").identical


def test_non_invertible_layout_and_missing_tensors_refused(tmp_path):
    src = gguf_tiny.folder(tmp_path / "wide", "llama", hidden=256)
    b = convert(src, tmp_path / "il8.ppk", layout="il8-nibble", quant="q4_k")
    with pytest.raises(BadInputError, match=r"12 tensor.*q_proj.weight: layout il8-nibble is not invertible for Q4_K"):
        gguf_out_export(b.bundle, tmp_path / "x.gguf")
    part = convert(src, tmp_path / "part.ppk", layout="rowmajor", exclude=["lm_head.weight"])
    with pytest.raises(BadInputError, match=r"lm_head.weight: not in the bundle"):
        gguf_out_export(part.bundle, tmp_path / "y.gguf")
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "y.gguf").exists()


def gguf_out_export(bundle, out):
    from panelpack.convert.gguf_export import export_gguf

    return export_gguf(bundle, out)


def test_one_command_cli_and_refusals(llama, tmp_path):
    run = CliRunner().invoke
    out = tmp_path / "m.gguf"
    r = run(main, ["convert", str(llama), "-o", str(out), "--quant", "Q4_K_M"])
    assert r.exit_code == 0, r.output
    assert "wrote" in r.output and "(mix Q4_K_M)" in r.output and "blk.0.attn_q.weight" in r.output
    r = run(main, ["convert", str(llama), "-o", str(out), "--quant", "Q4_K_M"])
    assert r.exit_code == 2 and "already exists" in r.output
    r = run(main, ["convert", str(llama), "-o", str(out), "--layout", "rowmajor", "--force"])
    assert r.exit_code == 2 and "GGUF output does not take --layout" in r.output
    r = run(main, ["convert", str(llama), "-o", str(tmp_path / "b.ppk"), "--outtype", "f16"])
    assert r.exit_code == 2 and "--outtype is for GGUF output" in r.output
    r = run(main, ["convert", str(llama), "-o", str(tmp_path / "d.gguf"), "--dry-run", "--json"])
    assert r.exit_code == 0 and not (tmp_path / "d.gguf").exists() and '"gguf": null' in r.output
    r = run(main, ["convert", str(llama), "-o", str(tmp_path / "e.gguf"), "--quant", "q4_k"])
    assert r.exit_code == 2 and "llama.cpp file type" in r.output


def test_refusals(tmp_path, llama):
    bad = gguf_tiny.folder(tmp_path / "bad", "llama")
    cfg = (bad / "config.json").read_text().replace("LlamaForCausalLM", "FalconForCausalLM")
    (bad / "config.json").write_text(cfg)
    with pytest.raises(UnsupportedError, match="architecture 'FalconForCausalLM'"):
        to_gguf(bad, tmp_path / "x.gguf")
    notok = gguf_tiny.folder(tmp_path / "notok", "llama")
    (notok / "tokenizer.model").unlink()
    with pytest.raises(BadInputError, match="no tokenizer.json"):
        to_gguf(notok, tmp_path / "y.gguf")
    f32 = to_gguf(llama, tmp_path / "f.gguf", outtype="f32").path
    with pytest.raises(BadInputError, match="--outtype applies to HF sources"):
        to_gguf(f32, tmp_path / "z.gguf", outtype="f16", quant="Q4_0")
    with pytest.raises(BadInputError, match="needs a llama.cpp mix"):
        to_gguf(f32, tmp_path / "z.gguf")
    with pytest.raises(OutputError, match="already exists"):
        to_gguf(llama, f32)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporaries left behind


@pytest.mark.parametrize("name", sorted(arch.ARCHITECTURES))
def test_every_row_of_the_table_is_written_and_exported(tmp_path, name, monkeypatch):
    """Each row's tiny checkpoint: the GGUF architecture, every tensor the table expects under its
    GGUF name (and the ones llama.cpp's converter generates), and a Q4_K_M bundle's export equal
    to the direct file. (LFM2Model reads a byte-level BPE tokenizer.json: these folders give the
    tokenizer.model, as tests/llama_convert.py's reference converter reads it.)"""
    from dataclasses import replace

    from panelpack.convert import gguf_arch

    import llama_convert

    src = gguf_tiny.folder(tmp_path / name, name)
    row = arch.get(name)
    if row.gguf_converter in llama_convert.WRITER_VOCAB:
        conv = replace(gguf_arch.CONVERTERS[row.gguf_converter], vocab=llama_convert.WRITER_VOCAB[row.gguf_converter])
        monkeypatch.setitem(gguf_arch.CONVERTERS, row.gguf_converter, conv)
    g = GGUFFile(to_gguf(src, tmp_path / "f32.gguf", outtype="f32").path)
    a = row.gguf_arch
    assert g.metadata["general.architecture"] == a
    cfg = json.loads((src / "config.json").read_text())
    assert g.metadata[f"{a}.block_count"] == cfg["num_hidden_layers"] and g.metadata[f"{a}.embedding_length"] == 64
    want = set(arch.expected_tensors(arch.from_hf_config(json.loads((src / "config.json").read_text())), "gguf"))
    names = {t.name for t in g.tensors}
    assert want <= names and names - want <= {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"}
    direct = to_gguf(src, tmp_path / "q.gguf", quant="Q4_K_M").path.read_bytes()
    b = convert(src, tmp_path / "b.ppk", quant="Q4_K_M")
    assert gguf_out_export(b.bundle, tmp_path / "x.gguf").path.read_bytes() == direct


def test_lfm2_gguf_out_keys_kernel_and_runtime(tmp_path, monkeypatch):
    """LFM2 written as LFM2Model writes it: head_count_kv per layer (0 in the convolution layer),
    shortconv.l_cache, llama.cpp's FFN width rule, the [d, 1, L] kernel as F32 [d, L]; the runtime
    gives the same logits from the GGUF as from the HF folder."""
    from dataclasses import replace

    from panelpack.convert import gguf_arch
    from panelpack.verify.runtime import Model

    import llama_convert

    monkeypatch.setitem(gguf_arch.CONVERTERS, "LFM2Model",
                        replace(gguf_arch.CONVERTERS["LFM2Model"], vocab=llama_convert.WRITER_VOCAB["LFM2Model"]))
    src = gguf_tiny.folder(tmp_path / "lfm2", "lfm2")
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(dict(cfg, block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=None,
                                                     block_multiple_of=48)))
    g = GGUFFile(to_gguf(src, tmp_path / "f32.gguf", outtype="f32").path)
    md = g.metadata
    assert list(md["lfm2.attention.head_count_kv"]) == [0, 2] and md["lfm2.shortconv.l_cache"] == 3
    assert md["lfm2.feed_forward_length"] == 96  # llama.cpp: int(2·96/3) = 64 up to 48s even without a multiplier
    kern = g.tensor("blk.0.shortconv.conv.weight")
    assert tuple(kern.shape) == (64, 3) and kern.type.name == "F32"
    assert "blk.0.attn_q.weight" not in {t.name for t in g.tensors} and "blk.1.shortconv.in_proj.weight" not in {
        t.name for t in g.tensors}
    g.close()
    ids = [1, 5, 9, 40, 7, 3, 2, 11, 60, 8]
    (src / "config.json").write_text(json.dumps(cfg))  # transformers' width (no multiplier: no round-up) = the GGUF's
    a = Model.open(src, "f32").logits(ids)
    to_gguf(src, tmp_path / "same.gguf", outtype="f32")
    b = Model.open(tmp_path / "same.gguf", "f32").logits(ids)
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-5 * np.abs(a).max())
