"""The runtime's architecture blocks against an independent f64 numpy decoder (tests/decoder_ref.py),
one tiny numpy-built checkpoint per family, fast tier: Llama 3 RoPE scaling read from a 5.x
``rope_parameters`` (the silent-wrong-logits bug), Gemma 3's per-layer-type RoPE and final
softcap in both config forms, Phi-3's fused projections with partial rotary, LongRoPE and a
window, Qwen3's q/k norms, SmolLM3's layers without RoPE, Granite's multipliers, Mistral's
window on every layer, LFM2's short-convolution layers between its attention layers (the
convolution state carried across chunks), Gemma 4's shared-KV, global (K = V, proportional RoPE)
and sliding layers with per-layer inputs (decoder_ref.gemma4_forward); the decode kernel
bit-identical with the prefill path on each."""

from __future__ import annotations

import math

import numpy as np
import pytest

from panelpack.convert import convert
from panelpack.formats.errors import UnsupportedError
from panelpack.verify.runtime import Model

import decoder_ref as ref
from decoder_ref import RefLayer, RefSpec

IDS = [1, 17, 40, 3, 88, 5, 63, 7, 8, 90, 12, 33, 71, 2, 50, 9, 44, 21, 60, 11]  # 20 > every window
H, NH, NKV, D, FF, V = 64, 4, 2, 16, 96, 96
BASE = dict(hidden_size=H, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=D, intermediate_size=FF,
            vocab_size=V, rms_norm_eps=1e-6, max_position_embeddings=256)


def _spec(layers, **kw) -> RefSpec:
    return RefSpec(H, NH, NKV, D, FF, V, layers, **kw)


def _check(tmp_path, spec: RefSpec, config: dict, rtol: float = 3e-5, name: str = "m") -> Model:
    w = ref.write(tmp_path / name, spec, config)
    want = ref.forward(spec, w, IDS)
    m = Model.open(tmp_path / name, "f32")
    got = m.logits(IDS, chunk=7)
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * np.abs(want).max())
    return m


def test_llama3_rope_scaling_from_5x_rope_parameters(tmp_path):
    """A transformers 5 config has no rope_theta: RoPE lives in rope_parameters. The runtime
    once assumed base 10000 and no scaling here (silently wrong logits)."""
    rp = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    inv = ref.inv_freq(5e5, D) / ref.llama3_divisors(5e5, D, 32.0, 1.0, 4.0, 64)
    layers = [RefLayer(inv, scale=D ** -0.5) for _ in range(2)]
    cfg = dict(BASE, model_type="llama", num_hidden_layers=2, tie_word_embeddings=True, rope_parameters=rp)
    m = _check(tmp_path, _spec(layers), cfg)
    assert "llama3" in m.hp.layers[0].rope.label


@pytest.mark.parametrize("form", ["5.x", "4.x"])
def test_gemma3_rope_per_layer_type_and_softcap(tmp_path, form):
    """Gemma 3 in both config forms: 5.x rope_parameters per layer type (linear scaling on the
    full layers), 4.x rope_theta + rope_local_base_freq + rope_scaling (which only the full
    layers take); (1 + w) norms, sqrt(n_embd) embedding scale, query_pre_attn_scalar, windows,
    final_logit_softcapping."""
    full, slide = ref.inv_freq(1e6, D) / 4.0, ref.inv_freq(1e4, D)
    pattern = [True, False, True]  # sliding, full, sliding
    layers = [RefLayer(slide if s else full, window=4 if s else 0, scale=8 ** -0.5) for s in pattern]
    spec = _spec(layers, norm_offset=1.0, act="gelu_tanh", qk_norm=True, post_norms=True,
                 ffn_norm_name="pre_feedforward_layernorm", embed_scale=math.sqrt(H), softcap=5.0)
    cfg = dict(BASE, model_type="gemma3_text", num_hidden_layers=3, query_pre_attn_scalar=8, sliding_window=4,
               final_logit_softcapping=5.0, layer_types=["sliding_attention" if s else "full_attention" for s in pattern])
    if form == "5.x":
        cfg["rope_parameters"] = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    else:
        cfg.update(rope_theta=1e6, rope_local_base_freq=1e4, rope_scaling={"rope_type": "linear", "factor": 4.0})
    _check(tmp_path, spec, cfg)


def test_phi3_fused_partial_longrope_window(tmp_path):
    short = [1.0 + 0.25 * i for i in range(6)]  # 12 of 16 dims rotated: 6 pairs
    orig, max_pos = 64, 256
    att = math.sqrt(1 + math.log(max_pos / orig) / math.log(orig))
    layers = [RefLayer(ref.inv_freq(1e4, 12) / np.array(short), window=6, scale=D ** -0.5, attn_factor=att)
              for _ in range(2)]
    rs = {"type": "longrope", "short_factor": short, "long_factor": [2 * x for x in short]}  # 4.x "type" spelling
    cfg = dict(BASE, model_type="phi3", num_hidden_layers=2, tie_word_embeddings=False, sliding_window=6,
               partial_rotary_factor=0.75, rope_theta=1e4, rope_scaling=rs, original_max_position_embeddings=orig)
    m = _check(tmp_path, _spec(layers, fused=True, tied=False), cfg)
    assert m.hp.layers[0].rope.dim == 12 and m.layers[0].q is None and m.layers[0].qkv is not None
    with pytest.raises(UnsupportedError, match="past the 64 positions"):  # the long factors are not run
        m.logits(list(range(1, 70)) + [1], chunk=64)


def test_qwen3_qk_norm_smollm3_nope_granite_multipliers_mistral_window(tmp_path):
    inv = ref.inv_freq(1e6, D)
    scale = D ** -0.5
    cases = {
        "qwen3": (_spec([RefLayer(inv, scale=scale)] * 2, qk_norm=True),
                  dict(model_type="qwen3", num_hidden_layers=2, tie_word_embeddings=True, rope_theta=1e6)),
        "smollm3": (_spec([RefLayer(ref.inv_freq(2e6, D), scale=scale)] * 3 + [RefLayer(None, scale=scale)]),
                    dict(model_type="smollm3", num_hidden_layers=4)),  # default theta 2e6, NoPE every 4th
        "granite": (_spec([RefLayer(inv, scale=0.03)] * 2, embed_scale=12.0, residual_scale=0.22, logit_scale=8.0,
                          tied=False),
                    dict(model_type="granite", num_hidden_layers=2, rope_theta=1e6, embedding_multiplier=12.0,
                         attention_multiplier=0.03, residual_multiplier=0.22, logits_scaling=8.0)),
        "mistral": (_spec([RefLayer(inv, window=5, scale=scale)] * 2, tied=False),
                    dict(model_type="mistral", num_hidden_layers=2, rope_theta=1e6, sliding_window=5)),
        "qwen2": (_spec([RefLayer(inv, window=5, scale=scale), RefLayer(inv, scale=scale)], qkv_bias=True),
                  dict(model_type="qwen2", num_hidden_layers=2, tie_word_embeddings=True, rope_theta=1e6,
                       use_sliding_window=True, sliding_window=5, layer_types=["sliding_attention", "full_attention"])),
    }
    for name, (spec, cfg) in cases.items():
        _check(tmp_path, spec, dict(BASE, **cfg), name=name)


def test_lfm2_short_convolution_between_attention_layers(tmp_path):
    """LFM2: convolution layers (kernel 3, state carried across the chunks of 7) and attention
    layers with q/k norms, both config forms; the kernel's 3-D HF layout read as [d, L]."""
    inv = ref.inv_freq(1e6, D)
    layers = [RefLayer(None, conv=3), RefLayer(inv, scale=D ** -0.5), RefLayer(None, conv=3), RefLayer(inv, scale=D ** -0.5)]
    spec = _spec(layers, qk_norm=True, lfm2=True)
    base = {k: v for k, v in BASE.items() if k != "rms_norm_eps"}
    cfg = dict(base, model_type="lfm2", num_hidden_layers=4, norm_eps=1e-6, block_auto_adjust_ff_dim=False,
               tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    m = _check(tmp_path, spec, dict(cfg, full_attn_idxs=[1, 3]), name="idxs")
    assert [L.conv is not None for L in m.layers] == [True, False, True, False] and m.layers[0].conv.shape == (3, H)
    _check(tmp_path, spec, dict(cfg, layer_types=["conv", "full_attention", "conv", "full_attention"]), name="types")
    # one token at a time: the convolution state and the KV cache carry the whole history
    steps = m.logits(IDS, chunk=1)
    whole = m.logits(IDS, chunk=len(IDS))
    np.testing.assert_allclose(steps, whole, rtol=0, atol=1e-5 * np.abs(whole).max())


@pytest.mark.parametrize("kind", ["qwen3", "phi3", "smollm3", "lfm2"])
def test_decode_kernel_bit_identical_with_prefill(tmp_path, kind):
    """Decoded tokens take ops.rope_into_cache (q/k norms, partial rotation, NoPE layers in
    one pass); prefill takes the numpy steps: the same bits, on the compiled path."""
    cfg = {"qwen3": dict(model_type="qwen3", num_hidden_layers=2, tie_word_embeddings=True),
           "phi3": dict(model_type="phi3", num_hidden_layers=2, partial_rotary_factor=0.5, tie_word_embeddings=False),
           "smollm3": dict(model_type="smollm3", num_hidden_layers=4),
           "lfm2": dict(model_type="lfm2", num_hidden_layers=2, full_attn_idxs=[0], block_auto_adjust_ff_dim=False)}[kind]
    layers = [RefLayer(None)] * cfg["num_hidden_layers"] if kind != "lfm2" else [RefLayer(None), RefLayer(None, conv=3)]
    spec = RefSpec(H, NH, NKV, 32, FF, V, layers, qk_norm=kind in ("qwen3", "lfm2"), lfm2=kind == "lfm2",
                   fused=kind == "phi3", tied=cfg.get("tie_word_embeddings", True))  # k/v rows: whole panels
    ref.write(tmp_path / kind, spec, dict(BASE, head_dim=32, **cfg))
    b = convert(tmp_path / kind, tmp_path / f"{kind}.ppk", layout="panel64", quant="q8_0").bundle
    m = Model.open(b)
    assert m.layers[0].qkv is not None
    whole = m.logits(IDS, chunk=len(IDS))
    steps = m.logits(IDS, chunk=1)
    assert np.array_equal(whole.view(np.uint32), steps.view(np.uint32))
    if kind != "phi3":  # q, k, v as three products (types that do not stack): the same pass, the same bits
        apart = Model.open(b, fuse=False)
        assert apart.layers[0].qkv is None
        assert np.array_equal(apart.logits(IDS, chunk=1).view(np.uint32), whole.view(np.uint32))


G4 = dict(BASE, model_type="gemma4_text", num_hidden_layers=5, global_head_dim=32, num_global_key_value_heads=1,
          attention_k_eq_v=True, num_kv_shared_layers=2, use_double_wide_mlp=True, hidden_size_per_layer_input=8,
          vocab_size_per_layer_input=V, sliding_window=5, final_logit_softcapping=20.0,
          layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention"])


def _table_checkpoint(folder, config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """A bf16 checkpoint of every tensor the architecture table expects for ``config`` (seeded
    normals, 1-D tensors near 1); returns the weights as f64 (the bf16 values)."""
    from panelpack.formats import arch

    rng = np.random.default_rng(seed)
    bits = {}
    for name, (shape, _) in arch.expected_tensors(arch.from_hf_config(config), "hf").items():
        v = 1.0 + rng.normal(0, 0.2, shape) if len(shape) == 1 else rng.normal(0, 1.0 / np.sqrt(shape[-1]), shape)
        bits[name] = ref.f32_to_bf16_bits(v.astype(np.float32))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(__import__("json").dumps(config))
    ref.save_file({n: ("BF16", b) for n, b in bits.items()}, folder / "model.safetensors")
    return {n: (np.asarray(b, np.uint32) << 16).view(np.float32).astype(np.float64) for n, b in bits.items()}


def test_gemma4_shared_kv_and_per_layer_inputs_through_the_cache(tmp_path):
    """Gemma 4 (shared-KV, sliding and global layers, k = v, per-layer inputs): a token at a
    time through the KV cache gives the whole prompt's logits (the shared layers read the cache
    of layers 1 and 2, allocate none of their own); the layer that owns the shared KV matters
    (another layer's keys change the logits); on a Q8_0 panel64 bundle the decode and prefill
    paths give the same bits (transformers' forward: tests/test_arch_transformers.py, slow)."""
    _table_checkpoint(tmp_path / "g4", G4)
    m = Model.open(tmp_path / "g4", "f32")
    assert [L.spec.kv_from for L in m.layers] == [-1, -1, -1, 2, 1] and m.layers[1].v is None
    whole = m.logits(IDS, chunk=len(IDS))
    steps = m.logits(IDS, chunk=1)
    np.testing.assert_allclose(steps, whole, rtol=0, atol=1e-5 * np.abs(whole).max())
    assert [m.cache.k[i].shape[0] for i in range(5)] == [NKV, 1, NKV, 0, 0]
    assert np.abs(whole).max() <= 20.0  # the final softcap
    from dataclasses import replace

    m.layers[3].spec = replace(m.layers[3].spec, kv_from=0)  # the wrong (earlier) sliding layer
    moved = m.logits(IDS, chunk=len(IDS))
    assert np.abs(moved - whole).max() > 1e-2 * np.abs(whole).max()
    b = convert(tmp_path / "g4", tmp_path / "g4.ppk", layout="panel64", quant="q8_0").bundle
    q = Model.open(b)
    qw = q.logits(IDS, chunk=len(IDS))
    assert np.array_equal(qw.view(np.uint32), q.logits(IDS, chunk=1).view(np.uint32))
    assert np.abs(qw - whole).max() <= 0.35 * np.abs(whole).max()  # see test_arch_transformers.Q8_BOUND


def test_gemma4_blocks_against_the_f64_reference(tmp_path):
    """Gemma 4's blocks against decoder_ref.gemma4_forward (f64, the layers spelled out here, not
    read through the table): 16-wide sliding heads with 2 KV heads and base 1e4, 32-wide global
    heads with 1 KV head, K = V, proportional RoPE (4 of 16 pairs rotating, base 1e6), windows of
    5, the last two layers reading layers 2 and 1, double-wide FFNs there, per-layer inputs of
    8, layer scalars, x·w norms, v norm, softcap 20; prefill in chunks of 7 through the cache."""
    w = _table_checkpoint(tmp_path / "g4", G4)
    for i in range(5):  # layer scalars away from 1 (the table checkpoint draws 1-D tensors near 1)
        w[f"model.layers.{i}.layer_scalar"] = w[f"model.layers.{i}.layer_scalar"] * 0 + (0.6 + 0.2 * i)
    bits = {n: ref.f32_to_bf16_bits(v.astype(np.float32)) for n, v in w.items()}
    ref.save_file({n: ("BF16", b) for n, b in bits.items()}, tmp_path / "g4" / "model.safetensors")
    w = {n: (np.asarray(b, np.uint32) << 16).view(np.float32).astype(np.float64) for n, b in bits.items()}
    slide = ref.inv_freq(1e4, D)
    glob = np.concatenate([1e6 ** (-np.arange(0, 8, 2) / 32.0), np.zeros(12)])
    S, F = ref.G4Layer(D, NKV, slide, window=5), ref.G4Layer(32, 1, glob, k_eq_v=True)
    layers = [S, F, S, ref.G4Layer(D, NKV, slide, window=5, kv_from=2), ref.G4Layer(32, 1, glob, kv_from=1)]
    want = ref.gemma4_forward(layers, NH, 1e-6, 8, 20.0, w, IDS)
    got = Model.open(tmp_path / "g4", "f32").logits(IDS, chunk=7)
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-5 * np.abs(want).max())
