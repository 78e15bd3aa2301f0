"""The Qwen family: ``qwen2`` (Qwen2, Qwen2.5) and ``qwen3`` (dense Qwen3).

Both rotate halves (NeoX RoPE): llama.cpp's converter stores q/k as HF does. Qwen2 has q/k/v
biases always; Qwen3 drops them (``attention_bias``, default false) and normalizes each q and k
head (RMSNorm of ``head_dim``) before RoPE. Sliding windows: the layers from
``max_window_layers`` on slide when ``use_sliding_window`` (transformers; llama.cpp runs none).
MoE (``qwen2_moe``, ``qwen3_moe``) is refused by name.
"""

from __future__ import annotations

from .spec import Arch

_COMMON = {
    "hidden_act": "silu", "max_position_embeddings": 32768, "initializer_range": 0.02, "rms_norm_eps": 1e-6,
    "use_cache": True, "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28,
    "attention_dropout": 0.0, "bos_token_id": None, "eos_token_id": None, "tie_word_embeddings": False,
    "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": None,
}

QWEN2 = Arch(
    "qwen2", "qwen2", ("qwen2",), ("Qwen2ForCausalLM",),
    {"embed": "always", "output": "untied", "out_norm": "always", "attn_norm": "always",
     "q": "always", "k": "always", "v": "always", "q_bias": "always", "k_bias": "always", "v_bias": "always",
     "o": "always", "ffn_norm": "always", "gate": "always", "up": "always", "down": "always"},
    doc="Qwen2, Qwen2.5: q/k/v biases",
    layer_rule="qwen", hf_defaults=_COMMON, gguf_converter="Qwen2Model", cactus_family="qwen",
)

QWEN3 = Arch(
    "qwen3", "qwen3", ("qwen3",), ("Qwen3ForCausalLM",),
    {"embed": "always", "output": "untied", "out_norm": "always", "attn_norm": "always",
     "q": "always", "k": "always", "v": "always",
     "q_bias": "attention_bias", "k_bias": "attention_bias", "v_bias": "attention_bias",
     "q_norm": "always", "k_norm": "always", "o": "always", "o_bias": "attention_bias",
     "ffn_norm": "always", "gate": "always", "up": "always", "down": "always"},
    doc="Qwen3 (dense): per-head q/k RMSNorm",
    layer_rule="qwen", hf_defaults={**_COMMON, "head_dim": 128, "attention_bias": False}, gguf_converter="Qwen3Model",
    cactus_family="qwen",
)

ROWS = (QWEN2, QWEN3)
