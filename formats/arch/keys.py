"""Hyperparameter keys: one row per hyperparameter, its ``config.json`` keys and its GGUF key.

llama.cpp names every hyperparameter ``<general.architecture>.<key>`` in GGUF metadata and
reads the same key for every architecture; ``config.json`` names vary by family (the first key
present wins; the alternatives are GPT-2's, BERT's and T5's spellings, so ``inspect`` and the
hyperparameter checks read those checkpoints too). :data:`HPARAMS` is the one table: the
GGUF readers (:meth:`panelpack.formats.gguf.GGUFFile.hyperparameters`), the HF reader, the
range checks (``formats/hparams.py``), the runtime (:mod:`.hyper`) and a GGUF writer read it.

Keys that hold a per-layer array in GGUF (``head_count``, ``head_count_kv``,
``feed_forward_length``) may be a single value or one value per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class HParam:
    name: str  # our name (llama.cpp's n_* spelling where it has one)
    hf: tuple[str, ...]  # config.json keys, the first present wins
    gguf: str | None  # the GGUF key after "<arch>."; None: not a GGUF key
    doc: str = ""
    per_layer: bool = False  # GGUF may hold one value per layer


#: The one table (the first seven are what ``inspect`` shows, in its order).
HPARAMS: tuple[HParam, ...] = (
    HParam("n_layer", ("num_hidden_layers", "n_layer", "num_layers"), "block_count", "decoder layers"),
    HParam("n_embd", ("hidden_size", "n_embd", "d_model"), "embedding_length", "width of the residual stream"),
    HParam("n_head", ("num_attention_heads", "n_head"), "attention.head_count", "query heads", True),
    HParam("n_head_kv", ("num_key_value_heads",), "attention.head_count_kv", "key/value heads (GQA)", True),
    HParam("n_ff", ("intermediate_size", "n_inner", "ffn_dim"), "feed_forward_length", "FFN width", True),
    HParam("n_ctx", ("max_position_embeddings", "n_positions"), "context_length", "trained context"),
    HParam("n_vocab", ("vocab_size",), "vocab_size", "vocabulary (GGUF: the token list's length)"),
    HParam("head_dim", ("head_dim",), "attention.key_length", "size of a key/query head"),
    HParam("head_dim_v", ("head_dim",), "attention.value_length", "size of a value head"),
    HParam("eps", ("rms_norm_eps", "norm_eps"), "attention.layer_norm_rms_epsilon", "RMSNorm epsilon (LFM2: norm_eps)"),
    HParam("rope_theta", ("rope_theta",), "rope.freq_base", "RoPE base (5.x: rope_parameters)"),
    HParam("rope_theta_swa", ("rope_local_base_freq",), "rope.freq_base_swa", "RoPE base of sliding layers"),
    HParam("rope_dim", (), "rope.dimension_count", "rotated dims per head (HF: head_dim x partial_rotary_factor)"),
    HParam("rope_scaling_type", (), "rope.scaling.type", "none | linear | yarn | longrope (HF: rope_type)"),
    HParam("rope_scaling_factor", (), "rope.scaling.factor", "RoPE scaling factor (HF: rope_parameters.factor)"),
    HParam("rope_orig_ctx", ("original_max_position_embeddings",), "rope.scaling.original_context_length",
           "context the RoPE scaling starts from"),
    HParam("rope_attn_factor", (), "rope.scaling.attn_factor", "cos/sin multiplier (LongRoPE)"),
    HParam("yarn_beta_fast", (), "rope.scaling.yarn_beta_fast", "YaRN beta_fast"),
    HParam("yarn_beta_slow", (), "rope.scaling.yarn_beta_slow", "YaRN beta_slow"),
    HParam("yarn_attn_factor", (), "rope.scaling.yarn_attn_factor", "YaRN attention factor"),
    HParam("yarn_log_multiplier", (), "rope.scaling.yarn_log_multiplier", "YaRN mscale_all_dim (DeepSeek)"),
    HParam("sliding_window", ("sliding_window",), "attention.sliding_window", "window of sliding layers"),
    HParam("swa_pattern", ("sliding_window_pattern",), "attention.sliding_window_pattern",
           "every n-th layer global (int), or one bool per layer (true: sliding)"),
    HParam("attn_scale", ("attention_multiplier",), "attention.scale", "q.k multiplier (Granite)"),
    HParam("query_pre_attn_scalar", ("query_pre_attn_scalar",), None, "Gemma: q.k scaled by its -1/2 power"),
    HParam("embed_scale", ("embedding_multiplier",), "embedding_scale", "embedding multiplier (Granite)"),
    HParam("residual_scale", ("residual_multiplier",), "residual_scale", "residual branch multiplier (Granite)"),
    HParam("logit_scale", ("logits_scaling",), "logit_scale", "logits divided by it (Granite)"),
    HParam("final_softcap", ("final_logit_softcapping",), "final_logit_softcapping", "cap·tanh(logits/cap)"),
    HParam("attn_softcap", ("attn_logit_softcapping",), "attn_logit_softcapping", "cap·tanh(scores/cap)"),
    HParam("conv_l", ("conv_L_cache",), "shortconv.l_cache", "short-convolution kernel length (LFM2)"),
    HParam("head_dim_swa", (), "attention.key_length_swa", "key head size of sliding layers (Gemma 4)"),
    HParam("head_dim_v_swa", (), "attention.value_length_swa", "value head size of sliding layers (Gemma 4)"),
    HParam("rope_dim_swa", (), "rope.dimension_count_swa", "rotated dims of sliding layers (Gemma 4)"),
    HParam("n_kv_shared", ("num_kv_shared_layers",), "attention.shared_kv_layers",
           "last layers reusing an earlier layer's KV (Gemma 4)"),
    HParam("n_embd_pl", ("hidden_size_per_layer_input",), "embedding_length_per_layer_input",
           "per-layer input width (Gemma 4)"),
    HParam("n_expert", ("num_local_experts", "num_experts", "n_routed_experts"), "expert_count", "MoE experts"),
    HParam("n_expert_used", ("num_experts_per_tok",), "expert_used_count", "MoE experts per token"),
)

BY_NAME: dict[str, HParam] = {h.name: h for h in HPARAMS}
#: what ``inspect`` shows, in order
INSPECT = ("n_layer", "n_embd", "n_head", "n_head_kv", "n_ff", "n_ctx", "n_vocab")


def hf_table(names=INSPECT) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(name, config.json keys)`` pairs of the given hyperparameters."""
    return tuple((n, BY_NAME[n].hf) for n in names)


def gguf_key(name: str, arch: str) -> str:
    """The full GGUF key of a hyperparameter (``llama.attention.head_count``)."""
    g = BY_NAME[name].gguf
    if g is None:
        raise KeyError(f"{name} has no GGUF key")
    return f"{arch}.{g}"


def hf_get(config: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """The first ``config.json`` key of ``name`` present (not None), else ``default``."""
    for k in BY_NAME[name].hf:
        v = config.get(k)
        if v is not None:
            return v
    return default


def gguf_get(meta: Mapping[str, Any], name: str, arch: str, default: Any = None) -> Any:
    """``meta[<arch>.<key>]`` (arrays as lists), else ``default``."""
    v = meta.get(gguf_key(name, arch))
    if v is None:
        return default
    return v.tolist() if hasattr(v, "tolist") and not isinstance(v, (int, float, str)) else v
