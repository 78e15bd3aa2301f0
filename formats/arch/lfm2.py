"""LFM2 (Liquid AI's LFM2 350M, 700M, 1.2B, 2.6B): ``lfm2``.

A hybrid: most layers mix tokens with a gated short convolution, a few with grouped-query
attention (``layer_types``, or the older ``full_attn_idxs``: the attention layers' indices).
Every layer is ``x += mixer(RMSNorm(x)·operator_norm)``, ``x += FFN(RMSNorm(x)·ffn_norm)``,
the FFN a SiLU-gated one (``w1`` gate, ``w3`` up, ``w2`` down) whose width transformers
derives from ``intermediate_size`` (:func:`hf_n_ff`); the final norm is ``embedding_norm``
(llama.cpp's ``token_embd_norm``, which it runs as the output norm). The attention layers
normalize each q and k head (``q_layernorm`` / ``k_layernorm``) and rotate halves (NeoX RoPE,
llama.cpp's converter does not permute them). The convolution layer::

    B, C, x = split₃(in_proj · h)             in_proj [3d, d]: rows B, then C, then x
    y[t]    = Σ_j w[:, j] ⊙ (B ⊙ x)[t − (L−1) + j]     depthwise, causal, j = 0 .. L−1
    out     = out_proj · (C ⊙ y)

with ``L = conv_L_cache`` (3) and the last ``L − 1`` rows of ``B ⊙ x`` kept between calls
(the runtime's convolution state; zeros before the first token). The kernel ``w`` is HF's
``Conv1d`` weight ``[d, 1, L]``; llama.cpp's converter squeezes it to ``[d, L]`` and keeps it
F32 at every ``--outtype`` (and ``llama_model_quantize`` never quantizes it). In GGUF the
layer pattern is the per-layer ``head_count_kv`` array: 0 marks a convolution layer.
``conv_bias`` (biases on the three convolution tensors, false in every released model) is
refused by name, as are ``lfm2_moe`` and the vision-language ``lfm2_vl``.

cactus-compute's ``lfm2`` family names the convolution tensors ``layer_{i}_conv_in_proj``,
``layer_{i}_conv_depthwise`` and ``layer_{i}_conv_out_proj``, and writes the kernel as INT8
with one f16 scale per channel (``formats/cactus.depthwise_int8_file_bytes``).
"""

from __future__ import annotations

from typing import Any, Mapping

from .spec import Arch


def adjusted_ff(ff: int, c: Mapping[str, Any], round_without_multiplier: bool) -> int:
    """LFM2's FFN width from the configured ``ff``: two thirds, times ``block_ffn_dim_multiplier``,
    rounded up to ``block_multiple_of``. transformers 5.5.4 rounds up only when a multiplier is
    given; llama.cpp's converter whenever it adjusts (``round_without_multiplier``)."""
    if c.get("block_auto_adjust_ff_dim", True):
        ff = int(2 * ff / 3)
        mult = c.get("block_ffn_dim_multiplier", 1.0)
        if mult is not None:
            ff = int(mult * ff)
        if mult is not None or round_without_multiplier:
            step = int(c.get("block_multiple_of", 256))
            ff = step * ((ff + step - 1) // step)
    return ff


def hf_n_ff(c: Mapping[str, Any]) -> int:
    """The FFN width transformers 5.5.4's ``Lfm2MLP`` builds from the config."""
    return adjusted_ff(int(c["intermediate_size"]), c, round_without_multiplier=False)


LFM2 = Arch(
    "lfm2", "lfm2", ("lfm2",), ("Lfm2ForCausalLM", "LFM2ForCausalLM"),
    {"embed": "always", "output": "untied", "out_norm": "always", "attn_norm": "always",
     "q": "always", "k": "always", "v": "always", "q_norm": "always", "k_norm": "always", "o": "always",
     "conv_in": "always", "conv": "always", "conv_out": "always",
     "ffn_norm": "always", "gate": "always", "up": "always", "down": "always"},
    doc="LFM2 (350M, 700M, 1.2B, 2.6B): gated short-convolution layers and GQA layers with q/k norms",
    hf_names={"out_norm": "model.embedding_norm.weight", "attn_norm": "model.layers.{i}.operator_norm.weight",
              "q_norm": "model.layers.{i}.self_attn.q_layernorm.weight",
              "k_norm": "model.layers.{i}.self_attn.k_layernorm.weight",
              "o": "model.layers.{i}.self_attn.out_proj.weight", "ffn_norm": "model.layers.{i}.ffn_norm.weight",
              "gate": "model.layers.{i}.feed_forward.w1.weight", "up": "model.layers.{i}.feed_forward.w3.weight",
              "down": "model.layers.{i}.feed_forward.w2.weight"},
    gguf_names={"out_norm": "token_embd_norm.weight"},
    layer_rule="conv", layer_kinds=("full_attention", "conv"), hf_n_ff=hf_n_ff,
    rope_theta={"*": 1000000.0},
    hf_aliases={"tie_embedding": "tie_word_embeddings", "block_ff_dim": "intermediate_size"},
    hf_defaults={"vocab_size": 65536, "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 128000,
                 "initializer_range": 0.02, "norm_eps": 1e-5, "use_cache": True, "pad_token_id": 0,
                 "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True, "conv_bias": False,
                 "conv_L_cache": 3, "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0,
                 "block_auto_adjust_ff_dim": True, "full_attn_idxs": None, "layer_types": None},
    gguf_transforms={"conv": ("squeeze_1",)},
    gguf_converter="LFM2Model", cactus_family="lfm2",
)

ROWS = (LFM2,)
