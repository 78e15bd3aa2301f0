"""Gemma 3 (text): ``gemma3``.

Norms are ``x·(1 + w)`` (HF stores ``w``; llama.cpp's converter stores ``1 + w``), the
embedding is scaled by ``sqrt(n_embd)``, q and k are RMS-normalized per head, the attention
output and the FFN output have their own RMSNorm, the FFN is GELU-tanh gated, q·k is scaled
by ``query_pre_attn_scalar^-1/2``. Five of every six layers slide (``sliding_window_pattern``,
or ``layer_types``) and rotate with their own base (``rope_local_base_freq``, 5.x
``rope_parameters["sliding_attention"]``); RoPE scaling in 4.x configs (``rope_scaling``)
applies to the full-attention layers only. llama.cpp's converter drops embedding rows past
the tokenizer's vocabulary. The multimodal ``Gemma3ForConditionalGeneration`` (a vision
tower) is refused by the runtime and the cactus target; its text model is this row.
"""

from __future__ import annotations

import math

from .spec import Arch

ROLES = {
    "embed": "always", "output": "untied", "out_norm": "always", "attn_norm": "always",
    "q": "always", "k": "always", "v": "always",
    "q_bias": "attention_bias", "k_bias": "attention_bias", "v_bias": "attention_bias",
    "q_norm": "always", "k_norm": "always", "o": "always", "o_bias": "attention_bias",
    "post_attn_norm": "always", "ffn_norm": "always", "gate": "always", "up": "always", "down": "always",
    "post_ffn_norm": "always",
}
_NORMS = ("attn_norm", "q_norm", "k_norm", "post_attn_norm", "ffn_norm", "post_ffn_norm", "out_norm")


def _gguf_attn_scale(hp) -> float:
    """llama.cpp's Gemma 3 q·k scale: 1/sqrt(n_embd / n_head) for the 62-layer 27B (its
    query_pre_attn_scalar), 1/sqrt(head_dim) otherwise (llama_model_gemma3::load_arch_hparams)."""
    layer = hp["layer"]
    if hp["n_layer"] == 62:
        return 1.0 / math.sqrt(hp["n_embd"] / layer["n_head"])
    return 1.0 / math.sqrt(layer["head_dim"])


GEMMA3 = Arch(
    "gemma3", "gemma3", ("gemma3_text",), ("Gemma3ForCausalLM",), ROLES,
    doc="Gemma 3 text models (270M, 1B; the text tower of 4B+)",
    hf_names={"ffn_norm": "model.layers.{i}.pre_feedforward_layernorm.weight"},
    cactus_names={"ffn_norm": "layer_{i}_pre_ffn_norm.weights"},
    activation="gelu_tanh", hf_norm_offset=1.0, embed_scale_sqrt=True,
    layer_rule="every_nth", swa_pattern=6,
    rope_theta={"full_attention": 1000000.0, "sliding_attention": 10000.0},
    hf_theta_keys={"sliding_attention": "rope_local_base_freq"}, rope_scaling_kinds=("full_attention",),
    hf_attn_scale="query_pre_attn_scalar", gguf_attn_scale=_gguf_attn_scale,
    hf_defaults={"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                 "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
                 "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True, "pad_token_id": 0,
                 "eos_token_id": 1, "bos_token_id": 2, "tie_word_embeddings": True, "attention_bias": False,
                 "attention_dropout": 0.0, "query_pre_attn_scalar": 256, "sliding_window": 4096,
                 "final_logit_softcapping": None, "attn_logit_softcapping": None,
                 "use_bidirectional_attention": False},
    gguf_transforms={**{n: ("plus_one",) for n in _NORMS}, "embed": ("vocab_rows",)},
    gguf_converter="Gemma3Model", cactus_family="gemma3",
)

ROWS = (GEMMA3,)
