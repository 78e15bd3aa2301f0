"""Gemma 4's text decoder: ``gemma4`` (``gemma4_text``, and the text tower of ``gemma4`` checkpoints).

Gemma 3's layer (norms before and after attention and FFN, GELU-tanh gated FFN, q/k RMSNorm,
``√n_embd`` embedding scale, final logit softcap) with, per transformers 5.5.4's
``Gemma4TextModel``:

* norms are ``x·w`` (no ``1 + w``; llama.cpp's converter keeps ``w``), values are RMS-normalized
  per head without a weight (``v_norm``), and q·k is not scaled (the q/k norms do it);
* sliding and global (``full_attention``) layers differ: a global layer's heads are
  ``global_head_dim`` wide, and with ``attention_k_eq_v`` it has ``num_global_key_value_heads``
  KV heads and no ``v_proj`` (the values are the key projection before ``k_norm`` and RoPE);
* RoPE per layer kind (``rope_parameters``): ``proportional`` on the global layers (every pair
  of the head rotates by halves, the leading ``partial_rotary_factor`` share with non-zero
  frequencies: :func:`~.rope._proportional`);
* KV sharing: the last ``num_kv_shared_layers`` layers compute no keys or values; each reads
  those of the last earlier non-shared layer of its kind (no ``k_proj``/``v_proj``/``k_norm``);
  with ``use_double_wide_mlp`` their FFN is twice as wide;
* per-layer inputs (``hidden_size_per_layer_input`` = P): a second embedding
  ``embed_tokens_per_layer`` ``[vocab_size_per_layer_input, n_layer·P]`` (scaled by √P) and a
  projection of the scaled embedding (``per_layer_model_projection``, times ``n_embd^-1/2``,
  RMSNorm ``per_layer_projection_norm`` per layer) give each layer ``pl_i = (proj_i + emb_i)/√2``;
  after its FFN a layer adds ``RMSNorm(W_proj·(gelu(W_gate·x) ⊙ pl_i))·w_post`` to ``x``;
* every layer's output is multiplied by its ``layer_scalar``.

Refused by name: MoE blocks (``enable_moe_block``, ``num_experts``), attention biases,
bidirectional attention, a ``per_layer_config``. The vision and audio towers of ``gemma4``
checkpoints (:data:`TOWER_DEFAULTS`; their tensors: :func:`panelpack.formats.arch.is_tower`) are never run: plain repacking passes
them through as tensors, the cactus target writes them as cactus's ``gemma4`` adapter does
(convert/cactus_towers.py), GGUF output drops them as llama.cpp's converter does (its mmproj file
holds them), and the runtime refuses them by name (:func:`.hyper.hf_arch`); a ``gemma4`` checkpoint
without them (``Gemma4ForConditionalGeneration``,
``text_config``) names its tensors ``model.language_model.*`` (naming ``hf_text``), as do the
ones cactus-compute's ``gemma4`` adapter reads.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from ..errors import BadInputError, UnsupportedError
from . import rope
from .spec import Arch

_ATTN = {"q": "always", "q_norm": "always", "k": "own_kv", "k_norm": "own_kv", "v": "own_v"}
ROLES = {
    "embed": "always", "output": "untied", "out_norm": "always", "rope_freqs": "rope_freqs",
    "pl_embed": "per_layer_input", "pl_model_proj": "per_layer_input", "pl_proj_norm": "per_layer_input",
    "attn_norm": "always", **_ATTN, "o": "always", "post_attn_norm": "always",
    "ffn_norm": "always", "gate": "always", "up": "always", "down": "always", "post_ffn_norm": "always",
    "pl_gate": "per_layer_input", "pl_proj": "per_layer_input", "pl_post_norm": "per_layer_input",
    "layer_scalar": "always",
}

#: config keys this row does not run, with the reason (refused when set)
REFUSED_KEYS = {
    "enable_moe_block": "mixture-of-experts blocks",
    "attention_bias": "attention biases",
    "per_layer_config": "per-layer configuration overrides",
}


def _int(v: Any, what: str, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise BadInputError(f"gemma4: config.json {what} must be an integer >= {minimum}, got {v!r}")
    return v


def kv_sources(kinds: Sequence[str], n_shared: int) -> list[int]:
    """For each layer, the layer whose keys and values it reads (-1: its own): the last
    ``n_shared`` layers read the last layer before them of the same kind (transformers'
    ``kv_shared_layer_index``)."""
    n = len(kinds)
    first = n - n_shared
    out = []
    for i, k in enumerate(kinds):
        if not (0 < first <= i):
            out.append(-1)
            continue
        before = [j for j in range(first) if kinds[j] == k]
        if not before:
            raise BadInputError(f"gemma4: layer {i} ({k}) shares the KV of an earlier {k} layer, and the "
                                f"{first} layers before num_kv_shared_layers have none")
        out.append(before[-1])
    return out


def hf_layers(c: Mapping[str, Any], base: Sequence[Any], params: Mapping[str, Mapping[str, Any]],
              n_ctx: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The layers of a Gemma 4 text config (``base``: the generic reading, for the kinds,
    windows and widths) and the :class:`~.hyper.Hyper` fields of its per-layer inputs."""
    for key, why in REFUSED_KEYS.items():
        if c.get(key):
            raise UnsupportedError(f"gemma4: {why} ({key}={c[key]!r}) are not run by the runtime")
    kinds = [L.kind for L in base]
    if kinds and kinds[-1] != "full_attention":  # transformers forces it (with a warning)
        g = next((L for L in base if L.kind == "full_attention"), None)
        base = [*base[:-1], replace(base[-1], kind="full_attention", window=0,
                                    rope=g.rope if g is not None else base[-1].rope)]
        kinds[-1] = "full_attention"
    head_dim = base[0].head_dim
    n_kv = base[0].n_head_kv
    g_head = _int(c.get("global_head_dim") or head_dim, "global_head_dim", 1)
    k_eq_v = bool(c.get("attention_k_eq_v"))
    g_kv = _int(c.get("num_global_key_value_heads") or n_kv, "num_global_key_value_heads", 1) if k_eq_v else n_kv
    src = kv_sources(kinds, _int(c.get("num_kv_shared_layers") or 0, "num_kv_shared_layers"))
    wide = bool(c.get("use_double_wide_mlp"))
    ropes = {}
    if set(kinds) - set(params):
        from .hyper import hf_rope_parameters

        params = hf_rope_parameters(c, GEMMA4, kinds)
    for kind in set(kinds):
        p = dict(params[kind])
        hd = g_head if kind == "full_attention" else head_dim
        if hd != head_dim and p.get("rope_type") != "proportional":
            # transformers builds these frequencies over head_dim, not the layer's heads
            raise UnsupportedError(f"gemma4: {kind} layers of {hd}-wide heads with RoPE type {p.get('rope_type')!r} "
                                   f"(transformers sizes it by head_dim {head_dim}); the runtime runs proportional RoPE there")
        ropes[kind] = rope.from_hf(p, hd, n_ctx, f"gemma4 {kind}")
    layers = []
    for i, L in enumerate(base):
        full = L.kind == "full_attention"
        hd = g_head if full else head_dim
        layers.append(replace(L, head_dim=hd, head_dim_v=hd, n_head_kv=g_kv if full and k_eq_v else n_kv,
                              n_ff=L.n_ff * 2 if wide and src[i] >= 0 else L.n_ff, rope=ropes[L.kind],
                              attn_scale=1.0, kv_from=src[i], k_eq_v=full and k_eq_v))
    pl = _int(c.get("hidden_size_per_layer_input") or 0, "hidden_size_per_layer_input")
    extra: dict[str, Any] = {"v_norm": True}
    if pl:
        extra.update(n_embd_pl=pl, n_layer_pl=len(layers), flags={"per_layer_input"},
                     n_vocab_pl=_int(c.get("vocab_size_per_layer_input") or c["vocab_size"],
                                     "vocab_size_per_layer_input", 1))
    return tuple(layers), extra


def gguf_layers(get: Any, names: set[str], base: Sequence[Any], vector: Any,
                n_vocab: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The layers of a GGUF that llama.cpp's ``Gemma4Model`` wrote: head sizes ``key_length``
    (global) and ``key_length_swa``, KV heads per layer, RoPE per kind (the global layers'
    proportional rotation as ``rope_freqs.weight``: divisors 1, then 1e30 for the pairs that do
    not rotate), ``shared_kv_layers``, no ``attn_v`` in a global layer where K = V."""
    from ..errors import BadInputError as _Bad

    kinds = [L.kind for L in base]
    hd = {"full_attention": int(get("head_dim", base[0].head_dim)),
          "sliding_attention": int(get("head_dim_swa", get("head_dim", base[0].head_dim)))}
    rd = {"full_attention": int(get("rope_dim", hd["full_attention"])),
          "sliding_attention": int(get("rope_dim_swa", hd["sliding_attention"]))}
    ff = None
    if "rope_freqs.weight" in names:
        ff = vector("rope_freqs.weight") if vector else None
        if ff is None:
            raise _Bad("rope_freqs.weight: the RoPE factors cannot be read")
    ropes = {"full_attention": rope.from_gguf(float(get("rope_theta", 1e6)), rd["full_attention"], hd["full_attention"],
                                              "none", 1.0, 0, 1.0, ff, "gemma4 rope (global layers)"),
             "sliding_attention": rope.from_gguf(float(get("rope_theta_swa", 1e4)), rd["sliding_attention"],
                                                 hd["sliding_attention"], "none", 1.0, 0, 1.0, None,
                                                 "gemma4 rope (sliding layers)")}
    src = kv_sources(kinds, int(get("n_kv_shared", 0) or 0))
    layers = []
    for i, L in enumerate(base):
        k_eq_v = src[i] < 0 and f"blk.{i}.attn_v.weight" not in names
        layers.append(replace(L, head_dim=hd[L.kind], head_dim_v=hd[L.kind], rope=ropes[L.kind], attn_scale=1.0,
                              kv_from=src[i], k_eq_v=k_eq_v))
    pl = int(get("n_embd_pl", 0) or 0)
    extra: dict[str, Any] = {"v_norm": True}
    if pl and "per_layer_token_embd.weight" in names:
        extra.update(n_embd_pl=pl, n_layer_pl=len(layers), n_vocab_pl=n_vocab, flags={"per_layer_input"})
    return tuple(layers), extra


GEMMA4 = Arch(
    "gemma4", "gemma4", ("gemma4_text",), ("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"), ROLES,
    doc="Gemma 4 text decoder (E2B, E4B: per-layer inputs, shared KV, global layers of their own head size)",
    hf_names={"ffn_norm": "model.layers.{i}.pre_feedforward_layernorm.weight"},
    cactus_names={"ffn_norm": "layer_{i}_pre_ffn_norm.weights"},
    activation="gelu_tanh", hf_norm_offset=0.0, embed_scale_sqrt=True,
    layer_rule="every_nth", swa_pattern=6, hf_layers=hf_layers, gguf_layers=gguf_layers,
    rope_theta={"full_attention": 1000000.0, "sliding_attention": 10000.0}, rope_scaling_kinds=("full_attention",),
    hf_defaults={"vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                 "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
                 "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True, "pad_token_id": 0,
                 "eos_token_id": 1, "bos_token_id": 2, "tie_word_embeddings": True, "attention_bias": False,
                 "attention_dropout": 0.0, "sliding_window": 512, "final_logit_softcapping": None,
                 "use_bidirectional_attention": None, "vocab_size_per_layer_input": 262144,
                 "hidden_size_per_layer_input": 256, "num_global_key_value_heads": None, "global_head_dim": 512,
                 "attention_k_eq_v": False, "num_kv_shared_layers": 0, "enable_moe_block": False,
                 "use_double_wide_mlp": False, "num_experts": None, "top_k_experts": None,
                 "moe_intermediate_size": None,
                 "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                     "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                        "rope_theta": 1000000.0}}},
    hf_wrapper_types=("gemma4",), hf_text_prefix="model.language_model.",
    gguf_transforms={"embed": ("vocab_rows",)}, gguf_converter="Gemma4Model",
    cactus_family="gemma4",
)

#: transformers 5.5.4's defaults of a ``gemma4`` checkpoint's tower configs (``Gemma4VisionConfig``,
#: ``Gemma4AudioConfig``, after their ``__post_init__``): what ``config.json``'s ``vision_config`` /
#: ``audio_config`` expand to. The towers are never run; the cactus target writes these dicts
#: (``hf_config.json``) and the runtime keys cactus derives from them (convert/cactus_towers.py).
TOWER_DEFAULTS: dict[str, dict[str, Any]] = {
    "vision_config": {"model_type": "gemma4_vision", "hidden_size": 768, "intermediate_size": 3072,
                      "num_hidden_layers": 16, "num_attention_heads": 12, "num_key_value_heads": 12, "head_dim": 64,
                      "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "max_position_embeddings": 131072,
                      "attention_bias": False, "attention_dropout": 0.0,
                      "rope_parameters": {"rope_type": "default", "rope_theta": 100.0}, "pooling_kernel_size": 3,
                      "patch_size": 16, "position_embedding_size": 10240, "use_clipped_linears": False,
                      "standardize": False, "initializer_range": 0.02},
    "audio_config": {"model_type": "gemma4_audio", "hidden_size": 1024, "num_hidden_layers": 12,
                     "num_attention_heads": 8, "hidden_act": "silu", "subsampling_conv_channels": [128, 32],
                     "conv_kernel_size": 5, "residual_weight": 0.5, "attention_chunk_size": 12,
                     "attention_context_left": 13, "attention_context_right": 0, "attention_logit_cap": 50.0,
                     "attention_invalid_logits_value": -1.0e9, "use_clipped_linears": True, "rms_norm_eps": 1e-6,
                     "gradient_clipping": 1e10, "output_proj_dims": 1536, "initializer_range": 0.02},
}


ROWS = (GEMMA4,)
