"""The architecture table (formats/arch): rows well formed, names HF <-> GGUF <-> cactus, every
config form transformers writes, refusals by name, RoPE frequencies against independent
formulas, the tensors a model implies. Fast tier (no torch)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from panelpack.formats import arch
from panelpack.formats.arch import rope
from panelpack.formats.errors import BadInputError, UnsupportedError

import decoder_ref as ref

SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, vocab_size=128,
             num_hidden_layers=4)


def cfg(model_type, **kw):
    return dict(SMALL, model_type=model_type, **kw)


# ---- the rows --------------------------------------------------------------------------------------
def test_rows_names_unique_and_round_trip():
    for a in arch.ARCHITECTURES.values():
        for naming in ("hf", "gguf", "cactus"):
            names = [a.name_of(r, naming) for r in a.roles if a.name_of(r, naming)]
            assert len(names) == len(set(names)), (a.name, naming)
        for role in a.roles:
            layer = 3 if arch.ROLES[role].per_layer else None
            g = arch.tensor_name(a, role, layer, "gguf")
            h = arch.tensor_name(a, role, layer, "hf")
            assert arch.role_of(a, g, "gguf") == (role, layer)
            if h:
                assert arch.translate_name(a, h, "hf", "gguf") == g and arch.translate_name(a, g, "gguf", "hf") == h
        assert a.cactus_family or a.cactus_refusal, a.name


def test_every_row_reads_its_transformers_defaults():
    """A config with only the required keys reads for every row (the row's defaults fill it)."""
    for a in arch.ARCHITECTURES.values():
        hp = arch.from_hf_config(cfg(a.hf_model_types[0]))
        assert hp.arch is a and hp.n_layer == 4 and all(L.head_dim > 0 for L in hp.layers)


def test_register_refuses_a_clash():
    row = arch.get("llama")
    with pytest.raises(ValueError, match="already belong to llama"):
        arch.register(arch.Arch("llama2", "llama", row.hf_model_types, (), row.roles))


# ---- config forms ------------------------------------------------------------------------------------
def _freqs(hp):
    return [None if L.rope is None else (L.rope.dim, np.round(np.asarray(L.rope.inv_freq), 12).tolist(),
                                          L.rope.attn_factor) for L in hp.layers]


@pytest.mark.parametrize("model_type,old,new", [
    ("llama", dict(rope_theta=5e5, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
     dict(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    ("qwen3", dict(rope_theta=1e6, rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
     dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                           "original_max_position_embeddings": 32})),
    ("gemma3_text", dict(rope_theta=1e6, rope_local_base_freq=1e4, rope_scaling={"rope_type": "linear", "factor": 8.0}),
     dict(rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})),
    ("phi3", dict(rope_theta=1e4, partial_rotary_factor=0.5, original_max_position_embeddings=32,
                  rope_scaling={"type": "su", "short_factor": [1, 2, 3, 4], "long_factor": [1, 1, 1, 1]}),
     dict(original_max_position_embeddings=32, rope_parameters={
         "rope_type": "longrope", "rope_theta": 1e4, "partial_rotary_factor": 0.5, "short_factor": [1, 2, 3, 4],
         "long_factor": [1, 1, 1, 1], "original_max_position_embeddings": 32})),
])
def test_4x_and_5x_config_forms_read_the_same(model_type, old, new):
    a = arch.from_hf_config(cfg(model_type, max_position_embeddings=128, **old))
    b = arch.from_hf_config(cfg(model_type, max_position_embeddings=128, **new))
    assert _freqs(a) == _freqs(b)
    assert all(L.rope.label != "default" for L in a.layers if L.rope is not None)


def test_layer_layouts():
    g = arch.from_hf_config(cfg("gemma3_text", num_hidden_layers=12, sliding_window=8))
    assert [L.kind for L in g.layers] == (["sliding_attention"] * 5 + ["full_attention"]) * 2
    assert g.layers[0].rope.base == pytest.approx(1e4) and g.layers[5].rope.base == pytest.approx(1e6)
    g2 = arch.from_hf_config(cfg("gemma3_text", sliding_window=8, sliding_window_pattern=2))
    assert [L.window for L in g2.layers] == [8, 0, 8, 0]
    q = arch.from_hf_config(cfg("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=2))
    assert [L.window for L in q.layers] == [0, 0, 8, 8]
    q_off = arch.from_hf_config(cfg("qwen2", use_sliding_window=False, sliding_window=8, max_window_layers=2))
    assert [L.window for L in q_off.layers] == [0, 0, 0, 0]
    m = arch.from_hf_config(cfg("mistral", sliding_window=8))
    assert [L.window for L in m.layers] == [8] * 4
    assert [L.window for L in arch.from_hf_config(cfg("mistral")).layers] == [4096] * 4  # transformers' default
    s = arch.from_hf_config(cfg("smollm3", num_hidden_layers=8))
    assert [L.rope is None for L in s.layers] == [False, False, False, True] * 2
    assert s.layers[0].rope.base == pytest.approx(2e6)  # SmolLM3's default theta
    s2 = arch.from_hf_config(cfg("smollm3", no_rope_layers=[1, 0, 1, 1], use_sliding_window=True, sliding_window=8))
    assert [L.rope is None for L in s2.layers] == [False, True, False, False]
    assert [L.window for L in s2.layers] == [0, 8, 0, 0]  # its NoPE layer slides


def test_lfm2_layer_pattern_ffn_width_and_aliases():
    """LFM2: layer_types, or full_attn_idxs (4.x configs), or every layer attention; the FFN width
    transformers derives (2/3, the multiplier, up to block_multiple_of); norm_eps; the older
    tie_embedding / block_ff_dim keys; convolution layers have no KV heads and no RoPE."""
    a = arch.from_hf_config(cfg("lfm2", full_attn_idxs=[1, 3], intermediate_size=1024))
    b = arch.from_hf_config(cfg("lfm2", layer_types=["conv", "full_attention", "conv", "full_attention"],
                                intermediate_size=1024))
    assert [L.kind for L in a.layers] == [L.kind for L in b.layers] == ["conv", "full_attention"] * 2
    assert [L.n_head_kv for L in a.layers] == [0, 2, 0, 2] and a.layers[0].rope is None and a.layers[1].rope.base == pytest.approx(1e6)
    assert a.layers[0].n_ff == 768 and a.conv_l == 3 and a.eps == 1e-5  # int(2·1024/3) = 682 -> 768
    assert arch.from_hf_config(cfg("lfm2", intermediate_size=1024, block_ffn_dim_multiplier=None)).layers[0].n_ff == 682
    assert arch.from_hf_config(cfg("lfm2", intermediate_size=1024, block_auto_adjust_ff_dim=False)).layers[0].n_ff == 1024
    assert [L.kind for L in arch.from_hf_config(cfg("lfm2")).layers] == ["full_attention"] * 4
    old = arch.from_hf_config(cfg("lfm2", full_attn_idxs=[2], tie_embedding=False, block_ff_dim=96, norm_eps=1e-4,
                                  conv_L_cache=4, block_auto_adjust_ff_dim=False))
    assert not old.tied and old.layers[0].n_ff == 96 and old.eps == 1e-4 and old.conv_l == 4
    assert [L.mixer for L in old.layers] == ["conv", "conv", "attention", "conv"]


def test_lfm2_tensors_per_layer_kind_and_gguf_reading():
    hp = arch.from_hf_config(cfg("lfm2", full_attn_idxs=[1], num_hidden_layers=2))
    hf, gg = arch.expected_tensors(hp), arch.expected_tensors(hp, "gguf")
    assert hf["model.layers.0.conv.conv.weight"][0] == (64, 1, 3) and gg["blk.0.shortconv.conv.weight"][0] == (64, 3)
    assert hf["model.layers.0.conv.in_proj.weight"][0] == (192, 64) and "model.layers.0.self_attn.q_proj.weight" not in hf
    assert hf["model.layers.1.self_attn.out_proj.weight"][0] == (64, 64) and "blk.1.shortconv.in_proj.weight" not in gg
    assert hf["model.layers.1.self_attn.q_layernorm.weight"][0] == (16,) and "token_embd_norm.weight" in gg
    assert hf["model.layers.1.feed_forward.w1.weight"][1] == "gate" and "model.embedding_norm.weight" in hf
    meta = {"general.architecture": "lfm2", "lfm2.block_count": 3, "lfm2.embedding_length": 64,
            "lfm2.attention.head_count": 4, "lfm2.attention.head_count_kv": [0, 2, 0], "lfm2.feed_forward_length": 96,
            "lfm2.shortconv.l_cache": 3, "lfm2.rope.freq_base": 1e6, "lfm2.attention.layer_norm_rms_epsilon": 1e-5}
    g = arch.from_gguf(meta, 100, [], None)
    assert [L.kind for L in g.layers] == ["conv", "full_attention", "conv"] and g.conv_l == 3 and not g.rope_pairs
    assert g.layers[1].rope.base == pytest.approx(1e6) and g.layers[0].rope is None
    with pytest.raises(BadInputError, match="shortconv.l_cache"):
        arch.from_gguf({k: v for k, v in meta.items() if "l_cache" not in k}, 100, [], None)
    with pytest.raises(UnsupportedError, match="sliding window"):
        arch.from_gguf(dict(meta, **{"lfm2.attention.sliding_window": 8}), 100, [], None)
    with pytest.raises(UnsupportedError, match="mixture-of-experts"):
        arch.from_gguf(dict(meta, **{"general.architecture": "lfm2moe"}), 100, [], None)
    with pytest.raises(UnsupportedError, match="without attention heads"):  # a llama has no convolution layers
        arch.from_gguf({"general.architecture": "llama", "llama.block_count": 1, "llama.embedding_length": 64,
                        "llama.attention.head_count": 4, "llama.attention.head_count_kv": [0],
                        "llama.feed_forward_length": 96}, 100, [], None)


def test_lfm2_convolution_kernel_kept_as_stored_by_the_policy():
    """The short-convolution kernel (HF 3-D, GGUF 2-D of a few taps) is a ``kernel``: copied
    as stored, row-major, whatever the quantization asked; its neighbours are matrices."""
    from panelpack.convert import policy
    from panelpack.formats import qtypes
    from panelpack.formats.common import TensorInfo

    def info(name, shape, t):
        return TensorInfo(name, shape, t, 0, int(np.prod(shape)) * 4, "x")

    for name, shape, kind, t in (("model.layers.0.conv.conv.weight", (384, 1, 3), "hf", qtypes.BF16),
                                 ("blk.0.shortconv.conv.weight", (384, 3), "gguf", qtypes.F32)):
        d = policy.decide(info(name, shape, t), kind, "panel64", qtypes.Q8_0, qtypes.Q8_0)
        assert (d.role, d.action, d.layout, d.target_type) == ("kernel", "copy", "rowmajor", t), name
        assert "convolution kernel" in d.reason
    d = policy.decide(info("blk.0.shortconv.in_proj.weight", (1152, 384), qtypes.F32), "gguf", "panel64", None,
                      qtypes.Q8_0)
    assert (d.role, d.action, d.layout) == ("matmul", "quantize", "panel64")


G4_LAYERS = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention",
             "sliding_attention"]


def test_gemma4_layers_shared_kv_heads_and_per_layer_inputs():
    """Gemma 4 (transformers 5.5.4's Gemma4TextConfig fields): global layers with their own head
    size, KV heads (attention_k_eq_v) and proportional RoPE; the last num_kv_shared_layers read
    the last earlier layer of their kind and have no k/v/k_norm (and, double-wide, twice the FFN);
    the last layer forced global as transformers does; per-layer inputs; q.k unscaled."""
    c = cfg("gemma4_text", num_hidden_layers=6, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
            attention_k_eq_v=True, num_kv_shared_layers=3, use_double_wide_mlp=True, hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=100, sliding_window=5, final_logit_softcapping=30.0, layer_types=G4_LAYERS)
    hp = arch.from_hf_config(c)
    assert hp.arch.name == "gemma4" and hp.v_norm and hp.norm_offset == 0.0 and hp.final_softcap == 30.0
    assert [L.kind for L in hp.layers] == G4_LAYERS[:-1] + ["full_attention"]
    assert [L.kv_from for L in hp.layers] == [-1, -1, -1, 2, 1, 1]
    assert [(L.head_dim, L.n_head_kv, L.k_eq_v) for L in hp.layers[:2]] == [(16, 2, False), (32, 1, True)]
    assert [L.n_ff for L in hp.layers] == [96, 96, 96, 192, 192, 192]
    assert [L.window for L in hp.layers] == [5, 0, 5, 5, 0, 0] and {L.attn_scale for L in hp.layers} == {1.0}
    assert (hp.n_embd_pl, hp.n_vocab_pl, hp.n_layer_pl, hp.embed_scale) == (8, 100, 6, 8.0)
    # proportional RoPE: all 16 pairs of the 32-wide head, the first int(0.25*32//2) = 4 rotating
    g = hp.layers[1].rope
    assert g.dim == 32 and len(g.inv_freq) == 16
    np.testing.assert_allclose(g.inv_freq[:4], 1e6 ** (-np.arange(0, 8, 2) / 32.0))
    assert not any(g.inv_freq[4:])
    assert hp.layers[0].rope.dim == 16 and hp.layers[0].rope.inv_freq[1] == pytest.approx(1e4 ** (-2 / 16))
    want = arch.expected_tensors(hp)
    assert "model.layers.0.self_attn.v_proj.weight" in want and "model.layers.1.self_attn.v_proj.weight" not in want
    assert "model.layers.1.self_attn.k_proj.weight" in want and "model.layers.3.self_attn.k_proj.weight" not in want
    assert "model.layers.3.self_attn.k_norm.weight" not in want and "model.layers.3.self_attn.q_norm.weight" in want
    assert want["model.embed_tokens_per_layer.weight"] == ((100, 48), "pl_embed")
    assert want["model.per_layer_model_projection.weight"] == ((48, 64), "pl_model_proj")
    assert want["model.layers.5.per_layer_input_gate.weight"] == ((8, 64), "pl_gate")
    assert want["model.layers.5.layer_scalar"] == ((1,), "layer_scalar")
    assert want["model.layers.4.mlp.up_proj.weight"] == ((192, 64), "up")
    assert arch.hf_derived_hparams(c) == {"n_head_kv": [2, 1, 2, 2, 1, 1], "n_ff": [96, 96, 96, 192, 192, 192]}
    # the text tower of a gemma4 checkpoint without towers is the same model
    wrap = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "text_config": c}
    assert arch.from_hf_config(wrap).layers == hp.layers
    # "vision": bidirectional among image tokens only, text causal (transformers' mask): read
    assert arch.from_hf_config(dict(c, use_bidirectional_attention="vision")).layers == hp.layers
    # without per-layer inputs or sharing
    hp = arch.from_hf_config(cfg("gemma4_text", hidden_size_per_layer_input=0, num_kv_shared_layers=0))
    assert not hp.has("pl_embed") and all(L.kv_from < 0 for L in hp.layers)
    with pytest.raises(BadInputError, match="shares the KV"):  # no full layer before the shared ones
        arch.from_hf_config(cfg("gemma4_text", num_kv_shared_layers=1, layer_types=["sliding_attention"] * 4))


def test_gemma4_gguf_reading():
    """Gemma 4 as llama.cpp's Gemma4Model writes it: head sizes key_length / key_length_swa, KV
    heads per layer, shared_kv_layers, the global layers' proportional RoPE as rope_freqs
    divisors (1, then 1e30), no attn_v where K = V."""
    a = "gemma4"
    meta = {"general.architecture": a, f"{a}.block_count": 4, f"{a}.embedding_length": 64,
            f"{a}.attention.head_count": 4, f"{a}.attention.head_count_kv": [2, 1, 2, 1],
            f"{a}.feed_forward_length": [96, 96, 192, 192], f"{a}.attention.key_length": 32,
            f"{a}.attention.value_length": 32, f"{a}.attention.key_length_swa": 16,
            f"{a}.attention.value_length_swa": 16, f"{a}.rope.dimension_count": 32, f"{a}.rope.dimension_count_swa": 16,
            f"{a}.rope.freq_base": 1e6, f"{a}.rope.freq_base_swa": 1e4, f"{a}.attention.sliding_window": 8,
            f"{a}.attention.sliding_window_pattern": [True, False, True, False], f"{a}.attention.shared_kv_layers": 2,
            f"{a}.embedding_length_per_layer_input": 8, f"{a}.final_logit_softcapping": 30.0}
    ff = np.array([1.0] * 4 + [1e30] * 12, np.float32)
    names = ["rope_freqs.weight", "per_layer_token_embd.weight", "blk.0.attn_v.weight"]
    hp = arch.from_gguf(meta, 100, names, lambda n: ff)
    assert [(L.kind, L.head_dim, L.n_head_kv, L.kv_from, L.k_eq_v) for L in hp.layers] == [
        ("sliding_attention", 16, 2, -1, False), ("full_attention", 32, 1, -1, True),
        ("sliding_attention", 16, 2, 0, False), ("full_attention", 32, 1, 1, False)]
    assert [L.window for L in hp.layers] == [8, 0, 8, 0] and {L.attn_scale for L in hp.layers} == {1.0}
    g = hp.layers[1].rope
    np.testing.assert_allclose(g.inv_freq[:4], 1e6 ** (-np.arange(0, 8, 2) / 32.0))
    assert max(g.inv_freq[4:]) < 1e-29 and hp.layers[0].rope.dim == 16
    assert hp.v_norm and hp.n_embd_pl == 8 and hp.final_softcap == 30.0 and hp.norm_offset == 0.0
    want = arch.expected_tensors(hp)
    assert "blk.1.attn_v.weight" not in want and "blk.2.attn_k.weight" not in want and "blk.0.attn_v.weight" in want
    assert want["per_layer_token_embd.weight"] == ((100, 32), "pl_embed") and "rope_freqs.weight" in want


def test_gguf_reading():
    meta = {"general.architecture": "phi3", "phi3.block_count": 2, "phi3.embedding_length": 64,
            "phi3.attention.head_count": 4, "phi3.attention.head_count_kv": [2, 1], "phi3.feed_forward_length": 96,
            "phi3.rope.dimension_count": 8,  # llama.cpp's converter writes no rope.scaling.type for Phi-3
            "phi3.rope.scaling.original_context_length": 32, "phi3.rope.scaling.attn_factor": 1.2,
            "phi3.attention.sliding_window": 8, "phi3.context_length": 128}
    short = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    names = ["rope_factors_short.weight", "rope_factors_long.weight", "output.weight"]
    hp = arch.from_gguf(meta, 100, names, lambda n: short if "short" in n else short * 0 + 9)
    assert [L.n_head_kv for L in hp.layers] == [2, 1] and hp.layers[0].rope.dim == 8
    np.testing.assert_allclose(hp.layers[0].rope.inv_freq, ref.inv_freq(1e4, 8) / short)
    assert hp.layers[0].rope.attn_factor == pytest.approx(1.2) and hp.layers[0].rope.max_positions == 32
    assert [L.window for L in hp.layers] == [0, 0]  # llama.cpp disables Phi-3's window; so does the runtime
    assert not hp.tied and "longrope" in hp.flags
    llama = {"general.architecture": "llama", "llama.block_count": 1, "llama.embedding_length": 64,
             "llama.attention.head_count": 4, "llama.feed_forward_length": 96, "llama.rope.freq_base": 5e5}
    div = ref.llama3_divisors(5e5, 16, 8.0, 1.0, 4.0, 64)
    hp = arch.from_gguf(llama, 100, ["rope_freqs.weight"], lambda n: div.astype(np.float32))
    np.testing.assert_allclose(hp.layers[0].rope.inv_freq, ref.inv_freq(5e5, 16) / div.astype(np.float32))
    assert hp.rope_pairs and hp.tied and hp.layers[0].n_head_kv == 4


# ---- refusals ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("config,words", [
    (cfg("llama", rope_parameters={"rope_type": "ntk_alpha", "rope_theta": 1e4}), "RoPE type 'ntk_alpha'"),
    (cfg("qwen3", rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [8, 8, 8]}), "mrope"),
    (cfg("gemma3_text", attn_logit_softcapping=50.0), "attention-logit softcapping"),
    (cfg("gemma3_text", use_bidirectional_attention=True), "bidirectional attention"),
    (cfg("llama", hidden_act="gelu"), "activation 'gelu'"),
    (cfg("qwen3", num_experts=8), "mixture-of-experts"),
    (cfg("qwen3_moe"), "mixture-of-experts"),
    (cfg("lfm2_moe"), "mixture-of-experts"),
    (cfg("lfm2", conv_bias=True), "biases on the short convolution"),
    (cfg("lfm2", layer_types=["conv", "sliding_attention", "conv", "full_attention"]), "layer 1 is 'sliding_attention'"),
    ({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": cfg("gemma3_text"),
      "vision_config": {"hidden_size": 8}}, "vision tower"),
    (cfg("qwen2", layer_types=["full_attention", "conv", "full_attention", "full_attention"]), "layer 1 is 'conv'"),
    (cfg("phi3", partial_rotary_factor=0.01), "partial_rotary_factor"),
    (cfg("gemma4_text", enable_moe_block=True), "mixture-of-experts blocks"),
    (cfg("gemma4_text", num_experts=8, enable_moe_block=True), "mixture-of-experts"),
    (cfg("gemma4_text", attention_bias=True), "attention biases"),
    (cfg("gemma4_text", use_bidirectional_attention="all"), "bidirectional attention"),
    (cfg("gemma4_text", global_head_dim=128, head_dim=64,
         rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}), "proportional RoPE there"),
    ({"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "text_config": cfg("gemma4_text"),
      "audio_config": {"hidden_size": 8}}, "audio tower"),
])
def test_unsupported_settings_refused_by_name(config, words):
    with pytest.raises(UnsupportedError, match=words):
        arch.from_hf_config(config)


def test_bad_values_are_bad_input():
    with pytest.raises(BadInputError, match="num_hidden_layers"):
        arch.from_hf_config(cfg("llama", num_hidden_layers=-1))
    with pytest.raises(BadInputError, match="rope_theta"):
        arch.from_hf_config(cfg("llama", rope_parameters={"rope_type": "default", "rope_theta": "big"}))
    with pytest.raises(BadInputError, match="short_factor"):
        arch.from_hf_config(cfg("phi3", rope_parameters={"rope_type": "longrope", "rope_theta": 1e4,
                                                         "short_factor": [1.0], "long_factor": [1.0]}))


# ---- RoPE -----------------------------------------------------------------------------------------------
def test_rope_frequencies_against_independent_formulas():
    d = 32
    lin = rope.from_hf({"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0}, d, 128, "t")
    np.testing.assert_allclose(lin.inv_freq, ref.inv_freq(1e4, d) / 4)
    l3 = rope.from_hf({"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, d, 128, "t")
    np.testing.assert_allclose(l3.inv_freq, ref.inv_freq(5e5, d) / ref.llama3_divisors(5e5, d, 8.0, 1.0, 4.0, 64))
    # YaRN, the paper's ramp written out (truncated correction range, beta_fast 32, beta_slow 1)
    y = rope.from_hf({"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 64},
                     d, 256, "t")
    lo = math.floor(d * math.log(64 / (32 * 2 * math.pi)) / (2 * math.log(1e4)))
    hi = math.ceil(d * math.log(64 / (1 * 2 * math.pi)) / (2 * math.log(1e4)))
    want = []
    for i, f in enumerate(ref.inv_freq(1e4, d)):
        keep = 1 - min(1.0, max(0.0, (i - max(lo, 0)) / (min(hi, d - 1) - max(lo, 0))))
        want.append(f * keep + f / 4 * (1 - keep))
    np.testing.assert_allclose(y.inv_freq, want)
    assert y.attn_factor == pytest.approx(0.1 * math.log(4) + 1)
    dyn = rope.from_hf({"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, d, 128, "t")
    np.testing.assert_allclose(dyn.inv_freq, ref.inv_freq(1e4, d))  # up to max_position_embeddings
    assert dyn.max_positions == 128


def test_rope_tables_and_partial_rotation():
    r = rope.from_hf({"rope_type": "default", "rope_theta": 100.0, "partial_rotary_factor": 0.5}, 8, 16, "t")
    assert r.dim == 4 and r.base == pytest.approx(100.0)
    cos, sin = r.tables(np.array([0, 3]))
    assert cos.shape == (2, 2) and np.allclose(cos[0], 1) and np.allclose(sin[1], np.sin(3 * ref.inv_freq(100, 4)))


# ---- tensors --------------------------------------------------------------------------------------------
def test_expected_tensors_and_problems():
    hp = arch.from_hf_config(cfg("phi3", num_hidden_layers=2, tie_word_embeddings=False))
    want = arch.expected_tensors(hp)
    assert want["model.layers.1.self_attn.qkv_proj.weight"][0] == (64 + 2 * 32, 64)
    assert want["model.layers.0.mlp.gate_up_proj.weight"][0] == (192, 64) and "lm_head.weight" in want
    gg = arch.expected_tensors(hp, "gguf")
    assert gg["blk.0.ffn_up.weight"][0] == (192, 64) and "rope_factors_long.weight" not in gg
    shapes = {n: s for n, (s, _) in want.items()}
    assert arch.tensor_problems(hp, shapes) == []
    shapes.pop("model.norm.weight")
    shapes["model.layers.0.self_attn.qkv_proj.weight"] = (10, 64)
    shapes["model.layers.0.mlp.experts.0.weight"] = (4, 4)
    probs = arch.tensor_problems(hp, shapes)
    assert any("model.norm.weight is missing" in p for p in probs)
    assert any("qkv_proj.weight has shape (10, 64), the hyperparameters imply (128, 64)" in p for p in probs)
    assert any("not part of phi3: model.layers.0.mlp.experts.0.weight" in p for p in probs)


def test_inspect_shows_the_tables_reading(tmp_path):
    import json

    from panelpack.formats.describe import describe, render
    from panelpack.formats.safetensors import save_file

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg("smollm3", num_hidden_layers=4)))
    save_file({"model.embed_tokens.weight": ("F32", np.zeros((128, 64), np.float32))}, folder / "model.safetensors")
    doc = describe(folder)
    assert doc["model"]["row"] == "smollm3" and doc["model"]["cactus"].startswith("no (")
    assert [g["count"] for g in doc["model"]["layers"]] == [3, 1] and doc["model"]["layers"][1]["rope"] == "none"
    assert "smollm3 (runtime: yes; cactus: no family)" in render(doc)
    (folder / "config.json").write_text(json.dumps(cfg("qwen3", num_experts=8)))
    doc = describe(folder)
    assert doc["model"]["row"] is None and "mixture-of-experts" in doc["model"]["runtime"]
    assert "not run by the runtime: qwen3: mixture-of-experts" in render(doc)


def test_a_new_row_is_enough(tmp_path):
    """A throwaway architecture whose blocks exist (a Llama under another model_type) is one
    register() call: the runtime runs it, inspect reads it, the mixes name its tensors, the
    cactus target refuses it by the row's words. No other edit."""
    from panelpack.convert import cactus as target
    from panelpack.convert import mixes
    from panelpack.formats.describe import describe
    from panelpack.verify.runtime import Model

    llama = arch.get("llama")
    row = arch.Arch("tinyllama", "llama", ("tiny_llama_test",), ("TinyLlamaTestForCausalLM",), llama.roles,
                    gguf_permuted=True, gguf_transforms=llama.gguf_transforms, hf_defaults=llama.hf_defaults,
                    cactus_refusal="a test row has no cactus family")
    arch.register(row)
    try:
        spec = ref.RefSpec(64, 4, 2, 16, 96, 96, [ref.RefLayer(ref.inv_freq(1e4, 16), scale=0.25)] * 2)
        config = dict(SMALL, model_type="tiny_llama_test", num_hidden_layers=2, head_dim=16, vocab_size=96,
                      tie_word_embeddings=True, architectures=["TinyLlamaTestForCausalLM"])
        w = ref.write(tmp_path / "m", spec, config)
        got = Model.open(tmp_path / "m", "f32").logits([1, 5, 9, 2])
        want = ref.forward(spec, w, [1, 5, 9, 2])
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-5 * np.abs(want).max())
        assert describe(tmp_path / "m")["model"]["row"] == "tinyllama"
        from panelpack.formats.checkpoint import open_checkpoint

        with open_checkpoint(tmp_path / "m") as ck:
            facts = mixes.model_facts(ck)
        assert facts.arch == "llama" and mixes.llama_name("model.layers.1.mlp.up_proj.weight", "hf", facts) == \
            "blk.1.ffn_up.weight"
        with pytest.raises(UnsupportedError, match="a test row has no cactus family"):
            target.convert_cactus(tmp_path / "m", tmp_path / "c")
        from dataclasses import replace

        from panelpack.convert import to_gguf

        arch.register(replace(row, gguf_converter="TinyLlamaTestModel"))  # a converter class the writer lacks
        with pytest.raises(UnsupportedError, match="tinyllama: the GGUF writer does not write it yet"):
            to_gguf(tmp_path / "m", tmp_path / "t.gguf", outtype="f32")
    finally:
        arch.unregister("tinyllama")
