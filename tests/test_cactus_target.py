"""``panelpack convert --target cactus`` without the peer: folder structure, our manifest and
its checksums, every file readable, GGUF sources (dequantized, q/k back in HF order), panels,
CLI exit codes. (File-by-file comparison with cactus's converter: test_cactus_oracle_convert.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from panelpack.convert import cactus as target
from panelpack.formats import cactus, cq
from panelpack.formats.arch import transforms
from panelpack.formats.checkpoint import open_checkpoint
from panelpack.formats.errors import BadInputError
from panelpack.repack import cq4_panel

from builders import tiny_llama_gguf
from cactus_models import build_hf


@pytest.fixture(scope="module")
def llama_hf(tmp_path_factory):
    return build_hf(tmp_path_factory.mktemp("hf") / "llama", "llama")


def test_folder_structure_and_manifest(llama_hf, tmp_path):
    out = tmp_path / "out"
    r = target.convert_cactus(llama_hf, out, bits=3)
    names = {p.name for p in out.iterdir()}
    assert {"config.txt", "hf_config.json", "config.json", "tokenizer.json", "conversion_manifest.json",
            "weights_manifest.json", "conversion_summary.json", "manifest.json", "token_embeddings.weights",
            "output_weight.weights", "output_norm.weights", "layer_1_ffn_down.weights"} <= names
    assert target.check_folder(out) == []
    cfg = dict(line.split("=", 1) for line in (out / "config.txt").read_text().splitlines())
    assert cfg["hidden_dim"] == "256" and cfg["model_type"] == "generic" and cfg["attention_kv_heads"] == "2"
    assert cfg["ffn_intermediate_dim"] == "768" and cfg["rope_theta"] == "10000.0" and cfg["layer_norm_eps"] == "1e-05"
    f = cactus.read(out / "layer_0_attn_q.weights")
    assert f.bits == 3 and f.interleaved and not f.orthogonal
    e = cactus.read(out / "token_embeddings.weights")
    assert e.orthogonal and e.interleaved and e.bits == 4
    assert cactus.read(out / "output_norm.weights").kind == "fp16"
    led = {row["name"]: row for row in r.ledger}
    assert led["model.layers.0.mlp.up_proj.weight"]["relative_rmse"] < 0.25
    assert led["model.norm.weight"]["status"] == "fallback"
    # a corrupted file is found by the checksum check
    p = out / "layer_0_attn_k.weights"
    b = bytearray(p.read_bytes())
    b[-1] ^= 1
    p.write_bytes(bytes(b))
    assert target.check_folder(out) == ["layer_0_attn_k.weights: size or sha256 differs from the manifest"]


def test_dequantization_tracks_source(llama_hf, tmp_path):
    out = tmp_path / "out"
    target.convert_cactus(llama_hf, out, bits=4)
    with open_checkpoint(llama_hf) as ck:
        from panelpack.formats.safetensors import bf16_to_f32

        w = bf16_to_f32(np.asarray(ck.array("model.layers.1.mlp.down_proj.weight")))
    d = cactus.read(out / "layer_1_ffn_down.weights").dequantize()
    assert cq.relative_rmse(w, d) < 0.12


def test_panels_write_cq4p_only_and_match_legacy(llama_hf, tmp_path):
    legacy, panel = tmp_path / "legacy", tmp_path / "panel"
    target.convert_cactus(llama_hf, legacy, bits=4)
    target.convert_cactus(llama_hf, panel, bits=4, panels=True)
    assert not (panel / "layer_0_attn_q.weights").exists()
    assert (panel / "token_embeddings.weights").exists()  # orthogonal tables stay legacy
    for stem in ("layer_0_attn_q", "layer_1_ffn_down", "layer_0_attn_k"):
        p = cactus.read(panel / f"{stem}.cq4p.weights")
        lg = cactus.read(legacy / f"{stem}.weights")
        assert p.lineage == cactus.LINEAGE_PANEL and lg.lineage == cactus.LINEAGE_LEGACY
        n, kp = p.shape
        nib = cq4_panel.unpack(p.data, n, kp)
        mp, ml = p.metadata(), lg.metadata()
        assert np.array_equal(cactus.panel_nibbles(mp["codebook"]), np.arange(16))
        assert np.array_equal(nib, lg.indices())
        assert np.array_equal(mp["norms"], ml["norms"]) and np.array_equal(mp["codebook"], ml["codebook"])
        assert np.array_equal(p.dequantize(nib), lg.dequantize())
        fold = mp["folded_norms"]
        assert np.array_equal(fold.transpose(0, 2, 1).reshape(-1, kp // 128)[:n], ml["norms"].astype(np.float32))
    assert target.check_folder(panel) == []


def test_cq4_panel_pack_matches_closed_form(rng):
    for n, kp in ((64, 128), (70, 256), (5, 384)):
        idx = rng.integers(0, 16, size=(n, kp), dtype=np.uint8)
        p = cq4_panel.pack(idx)
        assert np.array_equal(p, cq4_panel.pack_ref(idx))
        assert np.array_equal(cq4_panel.unpack(p, n, kp), idx)
        sb = -(-n // 64)
        pad = p.reshape(sb, kp // 4, 64, 2)[-1, :, n - 64 * (sb - 1):]
        assert not pad.any()  # padded channels hold index 0


def _permute(w, n_head):  # llama.cpp's converter (LlamaModel.permute): HF rows -> GGUF rows
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_gguf_source_dequantized_and_unpermuted(tmp_path):
    g = tiny_llama_gguf(tmp_path / "t.gguf", n_vocab=128)
    out = tmp_path / "out"
    r = target.convert_cactus(g.path, out, bits=4)
    assert target.check_folder(out) == []
    led = {row["name"]: row for row in r.ledger}
    assert led["model.layers.0.self_attn.q_proj.weight"]["note"].startswith("dequantized from")
    assert "HF order" in led["model.layers.0.self_attn.k_proj.weight"]["note"]
    from panelpack.formats import blocks

    with open_checkpoint(g.path) as ck:
        info = ck.tensor("blk.0.attn_q.weight")
        gg = blocks.dequantize(ck.raw(info.name), info.type, info.n, info.k).reshape(info.shape)
    q = transforms.unpermute_rows(gg, 4)
    assert np.array_equal(_permute(q, 4), gg)
    d = cactus.read(out / "layer_0_attn_q.weights").dequantize()
    assert cq.relative_rmse(q, d) < 0.12
    cfg = (out / "config.txt").read_text()
    assert "hidden_dim=256\n" in cfg and "model_type=generic\n" in cfg
    assert (out / "vocab.txt").is_file() and (out / "special_tokens.json").is_file()  # from the GGUF metadata
    assert json.loads((out / "config.json").read_text())["num_key_value_heads"] == 2


def test_cli_exit_codes(llama_hf, tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "panelpack", "convert", *map(str, args)], capture_output=True, text=True)

    ok = run(llama_hf, "-o", tmp_path / "c", "--quant", "cq2", "--target", "cactus", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["bits"] == 2
    again = run(llama_hf, "-o", tmp_path / "c", "--quant", "cq2")
    assert again.returncode == 2 and "already exists" in again.stderr
    bad = run(llama_hf, "-o", tmp_path / "d", "--quant", "cq7")
    assert bad.returncode == 2
    missing = run(tmp_path / "nope", "-o", tmp_path / "e", "--quant", "cq4")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_rejects_unsupported_family(tmp_path):
    folder = build_hf(tmp_path / "m", "llama")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BadInputError, match="'gpt2' is not supported"):
        target.convert_cactus(folder, tmp_path / "o")


@pytest.mark.slow
@pytest.mark.real
def test_smollm2_gguf_to_cactus_panels_verifies(smollm2, tmp_path):
    """The real SmolLM2 Q4_1 GGUF: dequantized, named, K = 576 matmuls fall back to FP16 as
    cactus's policy says, down_proj (K = 1536) becomes CQ4 panels that verify."""
    from panelpack.verify.bundle_check import verify

    out = tmp_path / "smol"
    r = target.convert_cactus(smollm2, out, bits=4, panels=True)
    led = {row["name"]: row for row in r.ledger}
    assert led["model.layers.0.mlp.down_proj.weight"]["precision"] == "CQ4"
    assert led["model.layers.0.self_attn.q_proj.weight"]["precision"] == "FP16"
    assert led["model.embed_tokens.weight"]["precision"] == "CQ4"  # orthogonal, full width
    assert (out / "layer_29_ffn_down.cq4p.weights").is_file() and not (out / "output_weight.weights").exists()
    # the tokenizer files from the GGUF metadata (equal to cactus's: test_cactus_tokenizer_oracle.py)
    tcfg = (out / "tokenizer_config.txt").read_text().splitlines()
    assert tcfg[:5] == ["vocab_size=49152", "eos_token_id=2", "pad_token_id=2", "bos_token_id=1", "unk_token_id=0"]
    assert len((out / "merges.txt").read_text(encoding="utf-8").splitlines()) == 48901
    assert target.check_folder(out) == []
    assert led["model.layers.0.mlp.down_proj.weight"]["relative_rmse"] < 0.2
    rep = verify(out, "all", sample=1, names=["layer_0_ffn_down.cq4p.weights", "token_embeddings.weights"])
    assert rep.ok, rep.render()


def test_tokenizer_files_from_the_source(tmp_path):
    src = build_hf(tmp_path / "hf", "llama")
    (src / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>"}, "unk_token": "<unk>",
        "model_max_length": 2048,
        "chat_template": "{{ messages }}"}))
    out = tmp_path / "out"
    target.convert_cactus(src, out)
    cfg = (out / "tokenizer_config.txt").read_text().splitlines()
    # no tokenizer_class with a llama config: transformers' CodeLlamaTokenizer, 5 infill tokens appended
    assert cfg[:4] == ["vocab_size=517", "eos_token_id=2", "bos_token_id=1", "unk_token_id=0"]
    assert "model_type=generic" in cfg and "has_chat_template=true" in cfg and "model_max_length=2048" in cfg
    assert "byte_fallback=true" in cfg and "decoder=replace_metaspace" in cfg  # the class's rebuilt backend
    sp = json.loads((out / "special_tokens.json").read_text())
    assert sp["special_tokens"]["2"] == "</s>" and sp["chat_template"] == "{{ messages }}"
    vocab = (out / "vocab.txt").read_text().splitlines()
    assert len(vocab) == 517 and vocab[1] == "1\t<s>" and vocab[300] == "300\ttok300"
    assert vocab[512:] == ["512\t\u2581<PRE>", "513\t\u2581<MID>", "514\t\u2581<SUF>", "515\t\u2581<EOT>", "516\t<FILL_ME>"]
    assert not (out / "tokenizer_config.json").exists()  # cactus deletes the copied config
    assert (out / "merges.txt").read_text() == "#version: 0.2\n"
    assert (out / "chat_template.jinja2").read_text() == "{{ messages }}"


def test_tokenizer_transformers_refuses_gets_no_files(tmp_path, caplog):
    """A special token given as a plain dict (no ``__type``): transformers raises, so cactus's
    converter writes no tokenizer files; neither do we, and the reason is logged."""
    src = build_hf(tmp_path / "hf", "llama")
    (src / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "</s>"}}))
    out = tmp_path / "out"
    with caplog.at_level("WARNING"):
        target.convert_cactus(src, out)
    assert not (out / "vocab.txt").exists() and not (out / "special_tokens.json").exists()
    assert "eos_token is dict" in caplog.text


def test_gemma3_family_factors_and_refusals(tmp_path):
    """The gemma3 family moves a factor 16 between tensors (cactus's Gemma3Adapter and
    save_tensor_with_header); architectures cactus has no family for are refused by name."""
    import math

    import decoder_ref as ref

    spec = ref.RefSpec(128, 2, 1, 64, 256, 96, [ref.RefLayer(None)] * 2, norm_offset=1.0, qk_norm=True,
                       post_norms=True, ffn_norm_name="pre_feedforward_layernorm", embed_scale=math.sqrt(128))
    cfg = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "hidden_size": 128,
           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "intermediate_size": 256,
           "vocab_size": 96, "num_hidden_layers": 2, "sliding_window": 8}
    w = ref.write(tmp_path / "g", spec, cfg)
    r = target.convert_cactus(tmp_path / "g", tmp_path / "out", bits=4)
    assert r.family == "gemma3" and target.check_folder(tmp_path / "out") == []
    norm = cactus.read(tmp_path / "out" / "layer_0_input_norm.weights").dequantize()
    src = w["model.layers.0.input_layernorm.weight"].astype(np.float32)
    np.testing.assert_array_equal(norm, ((src + 1) / 16 - 1).astype(np.float16).astype(np.float32))
    out_norm = cactus.read(tmp_path / "out" / "output_norm.weights").dequantize()
    np.testing.assert_array_equal(out_norm, ((w["model.norm.weight"].astype(np.float32) + 1) * 16 - 1)
                                  .astype(np.float16).astype(np.float32))
    qn = cactus.read(tmp_path / "out" / "layer_0_attn_q_norm.weights").dequantize()
    np.testing.assert_array_equal(qn, w["model.layers.0.self_attn.q_norm.weight"].astype(np.float16))
    gate = cactus.read(tmp_path / "out" / "layer_0_ffn_gate.weights").dequantize()
    assert cq.relative_rmse(16 * w["model.layers.0.mlp.gate_proj.weight"], gate) < 0.12
    cfg_txt = (tmp_path / "out" / "config.txt").read_text()
    assert "model_type=gemma3\n" in cfg_txt and "_sliding_window_pattern=6\n" in cfg_txt
    rows = json.loads((tmp_path / "out" / "conversion_manifest.json").read_text())
    assert [r["source_name"] for r in rows if r["output_file"] is None] == [
        "model.embed_tokens.embed_scale", "model.rotary_emb.sliding_attention_inv_freq",
        "model.rotary_emb.sliding_attention_original_inv_freq"]  # two layers: no full-attention layer
    for mt, words in (("phi3", "no phi3 family"), ("mistral", "no mistral family"), ("smollm3", "no smollm3 family"),
                      ("granite", "no granite family")):
        (tmp_path / "g" / "config.json").write_text(json.dumps(dict(cfg, model_type=mt)))
        with pytest.raises(BadInputError, match=words):
            target.convert_cactus(tmp_path / "g", tmp_path / f"o-{mt}")
    (tmp_path / "g" / "config.json").write_text(json.dumps(dict(cfg, model_type="qwen3", num_experts=4)))
    with pytest.raises(BadInputError, match="mixture-of-experts"):
        target.convert_cactus(tmp_path / "g", tmp_path / "o-moe")


def test_lfm2_family_convolution_layers(tmp_path):
    """LFM2 (cactus's lfm2 family): the convolution tensors named layer_{i}_conv_*, the kernel an
    INT8 file with a scale per channel, the final embedding_norm in cactus's embedding
    component, config.txt with the layer pattern and cactus's lfm2 keys."""
    import decoder_ref as ref

    inv = ref.inv_freq(1e6, 64)
    spec = ref.RefSpec(128, 2, 1, 64, 256, 96, [ref.RefLayer(None, conv=3), ref.RefLayer(inv, scale=0.125)],
                       qk_norm=True, lfm2=True)
    cfg = {"model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"], "hidden_size": 128, "num_attention_heads": 2,
           "num_key_value_heads": 1, "intermediate_size": 256, "block_auto_adjust_ff_dim": False, "vocab_size": 96,
           "num_hidden_layers": 2, "full_attn_idxs": [1], "conv_L_cache": 3, "norm_eps": 1e-6}
    w = ref.write(tmp_path / "l", spec, cfg)
    r = target.convert_cactus(tmp_path / "l", tmp_path / "out", bits=4)
    out = tmp_path / "out"
    assert r.family == "lfm2" and target.check_folder(out) == []
    k = cactus.read(out / "layer_0_conv_depthwise.weights")
    src = w["model.layers.0.conv.conv.weight"].astype(np.float32)
    assert k.kind == "int8" and k.shape == (128, 1, 3) and k.header.group_size == 3
    scale = np.abs(src).max(axis=2, keepdims=True) / 127
    assert np.abs(k.array() - src).max() <= (scale * 0.5 + 1e-3 * scale).max()
    for name in ("layer_0_conv_in_proj.weights", "layer_0_conv_out_proj.weights", "layer_1_attn_q_norm.weights"):
        assert (out / name).is_file(), name
    assert not (out / "layer_0_attn_q.weights").exists() and not (out / "layer_1_conv_in_proj.weights").exists()
    txt = (out / "config.txt").read_text()
    for line in ("model_type=lfm2", "layer_types=conv,full_attention", "conv_L_cache=3", "moe_intermediate_size=0",
                 "full_attn_idxs=1", "layer_norm_eps=1e-06"):
        assert f"{line}\n" in txt, line
    rows = {r["output_file"]: r for r in json.loads((out / "conversion_manifest.json").read_text())}
    assert rows["layer_0_conv_depthwise.weights"]["precision"] == "INT8"
    assert rows["layer_0_conv_depthwise.weights"]["fallback_reason"] == "depthwise conv tensor"
    assert rows["output_norm.weights"]["component"] == "embedding"


def _same_tensor_files(tmp_path, hf, g, family: str) -> tuple[list[str], str]:
    """``convert_cactus`` of an HF folder and of its GGUF ``g`` (into from-hf, from-gguf): the
    same ``.weights`` files byte for byte, both of ``family``, the GGUF's folder checked; the
    file names and the GGUF folder's config.txt."""
    a = target.convert_cactus(hf, tmp_path / "from-hf", bits=4)
    b = target.convert_cactus(g, tmp_path / "from-gguf", bits=4)
    files = sorted(p.name for p in (tmp_path / "from-hf").iterdir() if p.name.endswith(".weights"))
    assert files == sorted(p.name for p in (tmp_path / "from-gguf").iterdir() if p.name.endswith(".weights"))
    for n in files:
        assert (tmp_path / "from-hf" / n).read_bytes() == (tmp_path / "from-gguf" / n).read_bytes(), n
    assert a.family == b.family == family and target.check_folder(tmp_path / "from-gguf") == []
    return files, (tmp_path / "from-gguf" / "config.txt").read_text()


def test_lfm2_from_gguf_writes_the_hf_routes_tensor_files(tmp_path, monkeypatch):
    """An LFM2 GGUF (the F32 file LFM2Model writes: the kernel squeezed to [d, L]) gives the same
    tensor files as its HF folder: the kernel back to [d, 1, L], every name and policy the same."""
    from dataclasses import replace

    from panelpack.convert import gguf_arch, to_gguf

    import gguf_tiny
    import llama_convert

    monkeypatch.setitem(gguf_arch.CONVERTERS, "LFM2Model",
                        replace(gguf_arch.CONVERTERS["LFM2Model"], vocab=llama_convert.WRITER_VOCAB["LFM2Model"]))
    hf = gguf_tiny.folder(tmp_path / "hf", "lfm2", hidden=128)
    g = to_gguf(hf, tmp_path / "m.gguf", outtype="f32").path
    files, txt = _same_tensor_files(tmp_path, hf, g, "lfm2")
    assert "layer_0_conv_depthwise.weights" in files and "layer_1_attn_q.weights" in files
    assert "layer_types=conv,full_attention\n" in txt and "conv_L_cache=3\n" in txt


@pytest.mark.slow  # ~4 s: CQ quantization of every matrix
def test_gemma4_family_text_tower(tmp_path):
    """Gemma 4 (cactus's gemma4 family) from a text-only ``gemma4`` checkpoint (tensors under
    ``model.language_model.``): the per-layer-input files, the x·w norms and the FFN gates moved by
    cactus's factor 16, the per-layer table CQ4 Hadamard, the buffers transformers computes
    (embedding scales, RoPE frequencies: proportional on the global layers) as FP16 files, the
    KV-shared layers without K/V files, config.txt with cactus's gemma4 keys; a config without
    final_logit_softcapping refused by name (cactus's adapter cannot read it)."""
    import gguf_tiny

    text = gguf_tiny.folder(tmp_path / "t", "gemma4", hidden=128)
    tc = json.loads((text / "config.json").read_text())
    tc.update(final_logit_softcapping=30.0, architectures=None)
    src = tmp_path / "g4"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
                                                 "text_config": tc, "vision_config": None, "audio_config": None,
                                                 "tie_word_embeddings": False, "dtype": "bfloat16"}))
    from panelpack.formats.checkpoint import open_checkpoint
    from panelpack.formats.errors import UnsupportedError
    from panelpack.formats.safetensors import bf16_to_f32, save_file

    with open_checkpoint(text) as ck:
        w = {t.name: np.asarray(ck.array(t.name)) for t in ck.tensors}
    renamed = {("lm_head.weight" if n == "lm_head.weight" else "model.language_model." + n[len("model."):]): a
               for n, a in w.items()}
    save_file({n: ("BF16", a) for n, a in renamed.items()}, src / "model.safetensors")
    r = target.convert_cactus(src, tmp_path / "out", bits=4)
    out = tmp_path / "out"
    assert r.family == "gemma4" and target.check_folder(out) == []
    names = {p.name for p in out.iterdir()}
    for n in ("embed_tokens_per_layer.weights", "per_layer_model_proj.weights", "per_layer_proj_norm.weights",
              "layer_2_per_layer_gate.weights", "layer_2_per_layer_proj.weights", "layer_2_post_per_layer_norm.weights",
              "layer_2_layer_scalar.weights", "layer_1_attn_k.weights", "output_weight.weights",
              "model_language_model_embed_tokens_embed_scale.weights",
              "model_language_model_rotary_emb_full_attention_inv_freq.weights",
              "model_language_model_embed_tokens_per_layer_embed_scale.weights"):
        assert n in names, n
    assert "layer_2_attn_k.weights" not in names and "layer_2_attn_k_norm.weights" not in names  # layer 2 shares KV
    norm = cactus.read(out / "layer_0_input_norm.weights").array()
    src_norm = bf16_to_f32(renamed["model.language_model.layers.0.input_layernorm.weight"])
    np.testing.assert_allclose(norm, (src_norm / 16).astype(np.float16).astype(np.float32))
    inv = cactus.read(out / "model_language_model_rotary_emb_full_attention_inv_freq.weights").array()
    assert inv.shape == (16,) and np.count_nonzero(inv) == 4  # 32-wide global heads, 0.25 of them rotated
    rows = {r["output_file"]: r for r in json.loads((out / "conversion_manifest.json").read_text())}
    assert rows["layer_1_ffn_gate.weights"]["scale_factor"] == 16.0
    assert rows["embed_tokens_per_layer.weights"]["precision"] == "CQ4"
    assert rows["embed_tokens_per_layer.weights"]["component"] == "embedding"
    txt = (out / "config.txt").read_text()
    for line in ("model_type=gemma4", "layer_types=sliding,global,global", "global_head_dim=32", "hidden_size_per_layer_input=8",
                 "num_kv_shared_layers=1", "final_logit_softcapping=30.0", "global_partial_rotary_factor=0.25",
                 "rope_theta=1000000.0", "rope_local_base_freq=10000.0"):
        assert f"{line}\n" in txt, line
    cfg = json.loads((src / "config.json").read_text())
    cfg["text_config"]["final_logit_softcapping"] = None
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedError, match="needs final_logit_softcapping"):
        target.convert_cactus(src, tmp_path / "out2", bits=4)


@pytest.mark.slow  # ~6 s: two CQ conversions
def test_gemma4_from_gguf_writes_the_hf_routes_tensor_files(tmp_path):
    """A Gemma 4 GGUF (the F32 file Gemma4Model writes: the global layers' proportional RoPE as
    rope_freqs divisors, head sizes and KV sharing as keys) gives the same tensor files as its HF
    folder: its config rebuilt as the text-only gemma4 config cactus's adapter loads (layer
    pattern, global head size, shared layers, per-layer inputs, partial rotary 0.25)."""
    from panelpack.convert import to_gguf

    import gguf_tiny

    hf = gguf_tiny.folder(tmp_path / "hf", "gemma4", hidden=128)
    cfg = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps(dict(cfg, final_logit_softcapping=30.0)))
    g = to_gguf(hf, tmp_path / "m.gguf", outtype="f32").path
    files, txt = _same_tensor_files(tmp_path, hf, g, "gemma4")
    assert "layer_2_per_layer_gate.weights" in files and "model_language_model_embed_tokens_embed_scale.weights" in files
    for line in ("layer_types=sliding,global,global", "global_head_dim=32", "num_kv_shared_layers=1",
                 "hidden_size_per_layer_input=8", "global_partial_rotary_factor=0.25", "final_logit_softcapping=30.0"):
        assert f"{line}\n" in txt, line


@pytest.mark.parametrize("hf_name,shape,file,reason", [
    ("model.audio_tower.layers.0.self_attn.relative_k_proj.weight", (32, 32),
     "audio_conformer_0_attention_attn_relative_position_embedding_pos_proj.weights", "position embedding tensor"),
    ("model.audio_tower.subsample_conv_projection.input_proj_linear.weight", (32, 8),
     "audio_subsample_conv_projection_input_proj.weights", "input width is not aligned to CQ group size 128"),
    ("model.audio_tower.subsample_conv_projection.layer1.conv.weight", (4, 8, 3, 3),
     "audio_subsample_conv_projection_conv_1_conv.weights", "non-2d tensor"),
    ("model.audio_tower.layers.3.feed_forward2.ffw_layer_1.input_min", (),
     "audio_conformer_3_ffw_layer_end_ffw_layer_1_input_min.weights", "non-2d tensor"),
    ("model.audio_tower.layers.0.norm_out.weight", (32,), "audio_conformer_0_norm.weights", "norm tensor"),
    ("model.audio_tower.output_proj.bias", (32,), "audio_output_proj.bias", "audio bias tensor"),
    ("model.embed_audio.embedding_projection.weight", (1536, 1536), "embed_audio_proj.weights",
     "gemma4 media tower accuracy"),
    ("model.embed_vision.embedding_projection.weight", (1536, 768), "embed_vision_proj.weights",
     "vision embedding projection scale-sensitive"),
    ("model.vision_tower.encoder.layers.5.mlp.down_proj.linear.weight", (768, 3072),
     "vision_encoder_layers_5_mlp_down_proj.weights", "gemma4 media tower accuracy"),
    ("model.vision_tower.patch_embedder.position_embedding_table", (2, 10240, 768),
     "vision_patch_embedder_position_embedding_table.weights", "non-2d tensor"),
])
def test_gemma4_tower_names_and_precision(hf_name, shape, file, reason):
    """A gemma4 tower tensor's file name and FP16 reason, as cactus's gemma4 adapter writes them
    (names from its output on transformers' Gemma4ForConditionalGeneration)."""
    from panelpack.formats import arch

    row = arch.get("gemma4")
    out, comp, recognized = target.cactus_name(hf_name, row)
    assert (out, comp, recognized) == (file, "audio" if "audio" in hf_name else "vision", True)
    pol = target.tensor_policy(out, comp, shape, 4, hf_name)
    assert (pol.action, pol.precision, pol.reason) == ("fallback", "FP16", reason)


def _wrapper(tmp_path, arch_name, **towers):
    """A tiny multimodal wrapper checkpoint (gemma3/gemma4 text tensors under model.language_model.)
    whose config.json has the given tower configs (no tower tensors: the refusals come first)."""
    from panelpack.formats.safetensors import save_file

    import gguf_tiny

    text = gguf_tiny.folder(tmp_path / "t", arch_name, hidden=128)
    tc = dict(json.loads((text / "config.json").read_text()), final_logit_softcapping=30.0, architectures=None)
    with open_checkpoint(text) as ck:
        w = {t.name: np.asarray(ck.array(t.name)) for t in ck.tensors}
    src = tmp_path / "w"
    src.mkdir()
    cls = {"gemma3_text": "Gemma3ForConditionalGeneration"}.get(tc["model_type"], "Gemma4ForConditionalGeneration")
    mt = {"gemma3_text": "gemma3"}.get(tc["model_type"], "gemma4")
    (src / "config.json").write_text(json.dumps({"model_type": mt, "architectures": [cls], "text_config": tc, **towers}))
    save_file({(n if n == "lm_head.weight" else "model.language_model." + n[len("model."):]): ("BF16", a)
               for n, a in w.items()}, src / "model.safetensors")
    return src


def test_towers_refused_by_name_where_they_would_run(tmp_path):
    """What still refuses a checkpoint's towers, by name: the runtime (eval, generate) for a gemma4
    checkpoint with towers; the cactus target and GGUF output for a multimodal checkpoint whose
    towers neither cactus's adapter nor llama.cpp's converter take (Gemma 3's)."""
    from panelpack.convert import to_gguf
    from panelpack.formats.errors import UnsupportedError
    from panelpack.verify.runtime import Model

    g4 = _wrapper(tmp_path / "g4", "gemma4", vision_config={"hidden_size": 32}, audio_config={"hidden_size": 32})
    with pytest.raises(UnsupportedError, match=r"a vision tower \(vision_config\); the runtime runs text decoders only"):
        Model.open(g4, "f32")
    g3 = _wrapper(tmp_path / "g3", "gemma3", vision_config={"hidden_size": 32})
    for run in (lambda: target.convert_cactus(g3, tmp_path / "c3"), lambda: to_gguf(g3, tmp_path / "g3.gguf")):
        with pytest.raises(UnsupportedError, match=r"Gemma3ForConditionalGeneration: a vision tower \(vision_config\)"):
            run()
    assert not (tmp_path / "c3").exists()


def test_gemma4_tower_config_keys_and_buffers():
    """config.txt / hf_config.json of a gemma4 checkpoint with towers (no tensors needed): the tower
    configs expanded with transformers 5.5.4's defaults, cactus's vision_*/audio_* keys (those its
    extract_audio_config reads under names transformers does not use hold its defaults, as cactus's
    own output on this config shows: audio_num_heads=8, audio_num_layers=12), and the towers'
    buffers after the text model's."""
    import math

    from panelpack.convert import cactus_config as ccfg
    from panelpack.formats import arch

    text = {"model_type": "gemma4_text", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "global_head_dim": 64,
            "vocab_size": 96, "final_logit_softcapping": 30.0, "hidden_size_per_layer_input": 8,
            "layer_types": ["sliding_attention", "full_attention"]}
    cfg = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "text_config": text,
           "image_token_id": 258880, "audio_token_id": 258881,
           "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                             "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16, "patch_size": 4,
                             "position_embedding_size": 64},
           "audio_config": {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 2,
                            "output_proj_dims": 32, "attention_logit_cap": 40.0}}
    row = arch.get("gemma4")
    hf = ccfg.hf_config_dict(cfg, "src", row)
    assert hf["vision_config"]["rope_parameters"] == {"rope_type": "default", "rope_theta": 100.0}
    assert hf["vision_config"]["_name_or_path"] == "" and hf["vision_config"]["model_type"] == "gemma4_vision"
    assert hf["audio_config"]["subsampling_conv_channels"] == [128, 32] and hf["audio_config"]["conv_kernel_size"] == 5
    txt = ccfg.config_txt({**hf, **ccfg.runtime_config(hf, "gemma4"), "model_type": "gemma4"})
    for line in ("vision_hidden_size=32", "vision_head_dim=16", "vision_patch_size=4", "vision_image_size=0",
                 "vision_position_embedding_size=64", "vision_rope_theta=100.0", "use_image_tokens=true",
                 "image_token_id=258880", "audio_hidden_dim=32", "audio_num_heads=8", "audio_head_dim=4",
                 "audio_num_layers=12", "audio_output_proj_dims=32", "audio_fft_length=512", "audio_token_id=258881",
                 "audio_sscp_conv0_channels=128", "hidden_size_per_layer_input=8", "model_type=gemma4"):
        assert f"{line}\n" in txt, line
    bufs = ccfg.buffer_files(row, hf, "gemma4")
    names = [b[0] for b in bufs]
    assert names[-6:] == ["model.vision_tower.encoder.rotary_emb.inv_freq",
                          "model.vision_tower.encoder.rotary_emb.original_inv_freq",
                          "model.audio_tower.rel_pos_enc.inv_timescales",
                          *(f"model.audio_tower.layers.{i}.self_attn.softcap" for i in range(3))]
    by = {b[0]: b for b in bufs}
    # 16-wide heads: each of the 2 spatial axes rotates 8 dims, 4 frequencies 100^-(0, 2, 4, 6)/8
    np.testing.assert_allclose(by["model.vision_tower.encoder.rotary_emb.inv_freq"][3],
                               100.0 ** -(np.arange(0, 8, 2) / 8), rtol=1e-6)
    _, shape, dtype, ts = by["model.audio_tower.rel_pos_enc.inv_timescales"]
    want = np.exp(-np.arange(16) * math.log(1e4) / 15).astype(np.float16)
    assert shape == (1, 1, 16) and dtype == "torch.float16" and np.array_equal(ts.reshape(-1), want)
    assert float(by["model.audio_tower.layers.2.self_attn.softcap"][3]) == 40.0
