"""The cactus folder's ``config.txt`` / ``hf_config.json``, and what each cactus family does to
tensors: the facts of cactus-compute 2.2.2's converter that are about its adapter families
(``cactus/convert/model_adapters``), keyed by family; the architecture facts come from
:mod:`panelpack.formats.arch`.

``config.txt`` is ``{**transformers' config dict, **the runtime keys, model_type=<family>}``,
``key=value`` sorted (scalars and lists only). transformers 5.5.4's dict is the config.json
overlaid on :data:`COMMON_DEFAULTS` and the row's ``hf_defaults``, with the keys its config
class derives (:func:`hf_config_dict`): ``num_key_value_heads``, ``head_dim``, ``layer_types``,
``rope_parameters`` (one dict, or one per layer type for Gemma 3), Gemma 3's
``_sliding_window_pattern``. Not reproduced: transformers' stray top-level ``rope_type`` /
``rope_theta`` in a Gemma 3 ``rope_parameters`` when its layers are all of one kind.

Family transforms (:data:`FAMILY_SCALES`, :func:`fp16_values`): the ``gemma3`` adapter keeps the
engine's f16 activations in range by moving a factor 16 between tensors: CQ norms of
``ffn_gate``/``ffn_up`` x16 and of ``token_embeddings`` /16 (the file's ``scale_factor``); FP16
fallbacks: the layer norms ``(w + 1)/16 - 1``, ``output_norm`` ``(w + 1)·16 - 1``, ``ffn_gate``/
``ffn_up`` x16, ``token_embeddings`` /16 (``save_tensor_with_header``).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from ..formats import arch as _arch
from . import cactus_towers as towers

TRANSFORMERS_VERSION = "5.5.4"

# transformers 5.5.4's expansion of a config.json (``PretrainedConfig.to_dict``): these common
# keys, then each model type's defaults (the architecture row's hf_defaults). config.json wins.
COMMON_DEFAULTS: dict[str, Any] = {
    "chunk_size_feed_forward": 0, "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "is_encoder_decoder": False,
    "label2id": {"LABEL_0": 0, "LABEL_1": 1}, "output_attentions": False, "output_hidden_states": False,
    "pad_token_id": None, "problem_type": None, "return_dict": True, "transformers_version": TRANSFORMERS_VERSION,
    "dtype": None, "tie_word_embeddings": False,
}

_GEMMA_SCALE = 16.0
_GEMMA_LAYER_NORMS = ("input_norm", "post_attn_norm", "pre_ffn_norm", "post_ffn_norm")


def _base_name(out: str) -> str:
    base = out.removesuffix(".weights").removesuffix(".bias")
    parts = base.split("_", 2)
    return parts[2] if len(parts) == 3 and parts[0] == "layer" and parts[1].isdigit() else base


def _gemma3_scale(out: str) -> float:
    base = _base_name(out)
    return _GEMMA_SCALE if base in ("ffn_gate", "ffn_up") else 1.0 / _GEMMA_SCALE if base == "token_embeddings" else 1.0


_GEMMA4_MULT = ("ffn_gate", "ffn_up", "per_layer_gate", "moe_gate_proj", "moe_up_proj")
_GEMMA4_DIV = ("token_embeddings", "output_weight", "embed_vision_proj", "embed_audio_proj")
_GEMMA4_NORMS = ("input_norm", "post_attn_norm", "pre_ffn_norm", "post_ffn_norm", "post_per_layer_norm", "post_proj_norm")


def _gemma4_scale(out: str) -> float:
    """cactus's ``gemma4_scale_factor`` (its norms are ``x·w``: the factor multiplies every value)."""
    base = _base_name(out)
    if base in _GEMMA4_MULT:
        return _GEMMA_SCALE
    if base in _GEMMA4_DIV or any(x in out for x in _GEMMA4_NORMS) or "router_scale" in out:
        return 1.0 / _GEMMA_SCALE
    return _GEMMA_SCALE if out == "output_norm.weights" else 1.0


#: family -> the factor a CQ file's norms are multiplied by, from its file name (cactus's
#: adapter ``scale_factor``; 1.0 for the families without one)
FAMILY_SCALES = {"gemma3": _gemma3_scale, "gemma4": _gemma4_scale}


def scale_factor(family: str, out: str) -> float:
    f = FAMILY_SCALES.get(family)
    return f(out) if f else 1.0


def fp16_values(family: str, out: str, w: np.ndarray) -> np.ndarray:
    """The values an FP16 fallback file of ``family`` stores for ``w`` (f32)."""
    if family == "gemma4":  # save_tensor_with_header: data * gemma4_scale_factor(name)
        f = _gemma4_scale(out)
        return w * np.float32(f) if f != 1.0 else w
    if family != "gemma3":
        return w
    one, s = np.float32(1.0), np.float32(_GEMMA_SCALE)
    if any(x in out for x in _GEMMA_LAYER_NORMS):
        return (w + one) / s - one
    if out == "output_norm.weights":
        return (w + one) * s - one
    if any(x in out for x in ("ffn_gate", "ffn_up")):
        return w * s
    if out == "token_embeddings.weights":
        return w / s
    return w


_WRAPPER_COMMON = ("chunk_size_feed_forward", "id2label", "is_encoder_decoder", "label2id", "output_attentions",
                   "output_hidden_states", "problem_type", "return_dict")


def _wrapper_config_dict(config: dict[str, Any], source: str, row: _arch.Arch) -> dict[str, Any]:
    """transformers 5.5.4's dict of a multimodal wrapper's config.json (Gemma4Config): its own
    keys over the common ones (no pad_token_id), ``text_config`` the text config's dict (its
    ``_name_or_path`` empty, ``architectures`` and ``dtype`` null)."""
    common = {k: COMMON_DEFAULTS[k] for k in _WRAPPER_COMMON}
    tc = {("dtype" if k == "torch_dtype" else k): v for k, v in config["text_config"].items()}
    text = {"_name_or_path": "", **common, "architectures": None, "dtype": None, **row.hf_defaults, **tc}
    outer = {"_name_or_path": source, **common, **{("dtype" if k == "torch_dtype" else k): v
                                                   for k, v in config.items() if k != "text_config"}}
    outer["text_config"] = text
    for name in towers.TOWER_CONFIGS if row.cactus_family in towers.TOWER_FAMILIES else ():
        if isinstance(config.get(name), dict):  # the towers the cactus target passes through
            outer[name] = towers.expanded_config(name, config[name], str(row.cactus_family), common)
    return outer


def hf_config_dict(config: dict[str, Any], source: str, row: _arch.Arch) -> dict[str, Any]:
    """The config dict transformers 5.5.4 produces for a ``config.json`` of ``row``."""
    if config.get("model_type") in row.hf_wrapper_types and isinstance(config.get("text_config"), dict):
        return _wrapper_config_dict(config, source, row)
    raw = {("dtype" if k == "torch_dtype" else k): v for k, v in config.items()}
    for old, new in row.hf_aliases.items():  # transformers pops the older key (LFM2's tie_embedding)
        if old in raw:
            raw[new] = raw.pop(old)
    d: dict[str, Any] = {"_name_or_path": source, **COMMON_DEFAULTS, **row.hf_defaults}
    rope_keys = {"rope_theta", "rope_scaling", "rope_parameters", *row.hf_theta_keys.values()}
    d.update({k: v for k, v in raw.items() if k not in rope_keys})
    if d.get("num_key_value_heads") is None:
        d["num_key_value_heads"] = d.get("num_attention_heads")
    if d.get("head_dim") is None and "head_dim" in row.hf_defaults:
        d["head_dim"] = int(d["hidden_size"]) // int(d["num_attention_heads"])
    n = int(d["num_hidden_layers"])
    if row.layer_rule == "qwen":
        if not d.get("use_sliding_window"):
            d["sliding_window"] = None
        if d.get("layer_types") is None:
            sw, mwl = d.get("sliding_window"), int(d.get("max_window_layers", 28))
            d["layer_types"] = ["sliding_attention" if sw is not None and i >= mwl else "full_attention" for i in range(n)]
    elif row.layer_rule == "every_nth":
        pattern = raw.get("sliding_window_pattern", row.swa_pattern)
        d["_sliding_window_pattern"] = raw.get("_sliding_window_pattern", pattern)
        if d.get("layer_types") is None:
            d["layer_types"] = ["sliding_attention" if (i + 1) % int(pattern) else "full_attention" for i in range(n)]
    elif row.layer_rule == "conv" and d.get("layer_types") is None:  # LFM2 (Lfm2Config.__post_init__)
        idxs = d.get("full_attn_idxs")
        d["full_attn_idxs"] = idxs = list(range(n)) if idxs is None else idxs
        d["layer_types"] = ["full_attention" if i in idxs else "conv" for i in range(n)]
    kinds = [k for k in d.get("layer_types") or ["full_attention"] if k != "conv"] or ["full_attention"]
    per = _arch.hf_rope_parameters({**d, **raw}, row, kinds)
    d["rope_parameters"] = per if row.rope_scaling_kinds is not None else next(iter(per.values()))
    return d


def _lfm2_runtime(cfg: dict[str, Any]) -> dict[str, Any]:
    """cactus's ``extract_lfm2_config`` (its MoE keys at their dense values for ``lfm2``)."""
    return {"layer_types": list(cfg.get("layer_types") or []), "conv_L_cache": cfg.get("conv_L_cache", 0),
            "moe_intermediate_size": int(cfg.get("moe_intermediate_size", 0)),
            "num_dense_layers": int(cfg.get("num_dense_layers", 0)),
            "num_experts_per_tok": int(cfg.get("num_experts_per_tok", 0) or 0),
            "norm_topk_prob": bool(cfg.get("norm_topk_prob", False)),
            "use_expert_bias": bool(cfg.get("use_expert_bias", False)),
            "routed_scaling_factor": float(cfg.get("routed_scaling_factor", 1.0))}


def _gemma4_runtime(cfg: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """cactus's ``extract_complex_gemma_config`` of the text config ``cfg`` and the wrapper's
    ``root`` (a key of ``cfg`` wins even when null, as its ``cfg_get`` does)."""
    def get(key, default=None):
        return cfg[key] if key in cfg else root.get(key, default)

    from ..formats.errors import UnsupportedError

    if get("final_logit_softcapping") is None:  # cactus: float(None) fails
        raise UnsupportedError("gemma4: cactus's gemma4 adapter needs final_logit_softcapping (the released models "
                               "set 30.0); this config has none")
    rp = get("rope_parameters", {}) or {}
    full = rp.get("full_attention", {}) if isinstance(rp, dict) else {}
    slide = rp.get("sliding_attention", {}) if isinstance(rp, dict) else {}
    theta = root.get("rope_theta")
    if theta is None:
        theta = cfg.get("rope_theta", 1000000.0)
    if (theta is None or theta == 1000000.0) and isinstance(full, dict) and full.get("rope_theta") is not None:
        theta = float(full["rope_theta"])
    local = float(get("rope_local_base_freq", 10000.0))
    if isinstance(slide, dict) and "rope_theta" in slide:
        local = float(slide["rope_theta"])
    pattern = get("attention_type_pattern") or get("attention_types") or get("layer_types")
    n = int(cfg.get("num_hidden_layers", cfg.get("num_layers", 30)))
    pl = get("hidden_size_per_layer_input")
    out: dict[str, Any] = {
        "altup_num_inputs": int(get("altup_num_inputs", 4)), "laurel_rank": int(get("laurel_rank", 64)),
        "hidden_size_per_layer_input": int(pl) if pl is not None else 0,
        "num_kv_shared_layers": int(get("num_kv_shared_layers", 0)), "sliding_window": int(get("sliding_window", 512)),
        "rope_local_base_freq": local, "rope_theta": float(theta),
        "final_logit_softcapping": float(get("final_logit_softcapping", 30.0)),
        "query_pre_attn_scalar": int(get("query_pre_attn_scalar", 0)),
        "global_partial_rotary_factor": float(get("global_partial_rotary_factor",
                                                  full.get("partial_rotary_factor", 1.0) if isinstance(full, dict) else 1.0)),
        "attention_k_eq_v": bool(get("attention_k_eq_v", False)), "enable_moe_block": bool(get("enable_moe_block", False)),
    }
    top_k = get("top_k_experts")
    if top_k is None:
        top_k = get("num_experts_per_tok")
    if top_k is not None:
        out["num_top_experts"] = out["num_experts_per_tok"] = int(top_k)
    expert_ff = get("expert_intermediate_size")
    if expert_ff is None:
        expert_ff = get("moe_intermediate_size")
    for key, v in (("global_head_dim", get("global_head_dim")), ("num_global_key_value_heads", get("num_global_key_value_heads")),
                   ("expert_intermediate_size", expert_ff), ("vocab_size_per_layer_input", get("vocab_size_per_layer_input")),
                   ("sliding_window_pattern", get("_sliding_window_pattern"))):
        if v is not None:
            out[key] = int(v)
    if pattern:
        kinds = list(pattern) if isinstance(pattern, (list, tuple)) else [str(pattern)]
        out["layer_types"] = ["global" if "global" in str(kinds[i % len(kinds)]).lower()
                              or "full" in str(kinds[i % len(kinds)]).lower() else "sliding" for i in range(n)]
    return out


#: family -> the runtime keys its adapter adds over the base ones (``runtime_config`` overrides):
#: ``(text config, wrapper config) -> keys``
FAMILY_RUNTIME = {"lfm2": lambda cfg, root: _lfm2_runtime(cfg), "gemma4": _gemma4_runtime}
#: families whose adapter reads the runtime keys from a wrapper's ``text_config`` (Gemma4Adapter)
TEXT_CONFIG_FAMILIES = ("gemma4",)


def runtime_config(cfg: dict[str, Any], family: Optional[str] = None) -> dict[str, Any]:
    """The runtime keys cactus's converter derives (its ``extract_base_config``, then the
    family's own: :data:`FAMILY_RUNTIME`)."""
    root = cfg
    if family in TEXT_CONFIG_FAMILIES and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]

    def get(*keys, default=None):
        for k in keys:
            if cfg.get(k) is not None:
                return cfg[k]
        return default

    rope = cfg.get("rope_parameters") or {}
    rope_theta = cfg.get("rope_theta", rope.get("rope_theta") if isinstance(rope, dict) else None)
    if rope_theta is None:
        rope_theta = 10000.0
    partial = cfg.get("partial_rotary_factor", rope.get("partial_rotary_factor") if isinstance(rope, dict) else None)
    topk = get("num_experts_per_tok", "moe_top_k", "num_top_experts", "top_k_experts", default=0) or 0
    dst = get("decoder_start_token_id", "bos_token_id", default=0)
    hidden = get("hidden_size", "hidden_dim", default=0)
    out = {
        "vocab_size": get("vocab_size", default=0),
        "hidden_dim": hidden,
        "num_layers": int(get("num_hidden_layers", "num_layers", default=0) or 0),
        "attention_heads": get("num_attention_heads", default=0),
        "attention_kv_heads": get("num_key_value_heads", "num_attention_heads", default=0),
        "ffn_intermediate_dim": get("intermediate_size", "n_inner", default=0),
        "context_length": get("max_position_embeddings", "max_sequence_length", default=0),
        "rope_theta": rope_theta,
        "attention_head_dim": int(get("head_dim", default=int(hidden) // max(1, int(get("num_attention_heads", default=1))))),
        "layer_norm_eps": get("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps", "norm_eps", default=1e-6),
        "decoder_start_token_id": int(dst or 0),
        "num_experts": get("num_experts", default=0) or 0,
        "num_shared_experts": get("num_shared_experts", default=0),
        "num_top_experts": topk,
        "num_experts_per_tok": topk,
        "moe_every_n_layers": get("moe_every_n_layers", default=0),
    }
    if partial is not None:
        out["partial_rotary_factor"] = float(partial)
    lt = cfg.get("layer_types")
    if isinstance(lt, (list, tuple)) and lt:
        out["layer_types"] = list(lt)
    if cfg.get("conv_L_cache") is not None:
        out["conv_L_cache"] = int(cfg["conv_L_cache"])
    extra = FAMILY_RUNTIME.get(family or "")
    if extra:
        out.update(extra(cfg, root))
    if family in towers.TOWER_FAMILIES:  # the keys of the towers it passes through
        out.update(towers.runtime_keys(root))
    return out


def _torch_inv_freq(base: float, dim: int, angles: int) -> np.ndarray:
    """transformers' ``1 / base^(arange(0, 2·angles, 2) / dim)`` in f32 (its RoPE init functions)."""
    e = np.arange(0, 2 * angles, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (np.float32(1.0) / (np.float32(base) ** e)).astype(np.float32)


def _gemma4_buffers(row: _arch.Arch, hf: dict[str, Any]) -> list[tuple[str, tuple[int, ...], str, np.ndarray]]:
    """Gemma 4's non-persistent buffers, which cactus's gemma4 adapter writes as FP16 files (its
    ``GEMMA4_RUNTIME_BUFFER_SUFFIXES``), in the module's order: the embedding scale (the model
    loaded in f16), the rotary frequencies of each layer type (f32; sorted, see convert/cactus.py),
    the per-layer embedding scale."""
    text = hf["text_config"] if isinstance(hf.get("text_config"), dict) else hf
    pre = "model.language_model."  # cactus loads any gemma4 checkpoint as Gemma4ForConditionalGeneration

    def scale(x: float) -> np.ndarray:
        return np.asarray(np.float32(x)).astype(np.float16)

    out: list[tuple[str, tuple[int, ...], str, np.ndarray]] = [
        (pre + "embed_tokens.embed_scale", (), "torch.float16", scale(math.sqrt(int(text["hidden_size"]))))]
    rp = text.get("rope_parameters") or {}
    for kind in sorted(set(text.get("layer_types") or [])):
        p = rp.get(kind) or {}
        full = kind == "full_attention"
        if p.get("rope_type") == "proportional":
            hd = int(text.get("global_head_dim") or text["head_dim"]) if full else int(text["head_dim"])
            angles = int(float(p.get("partial_rotary_factor", 1.0)) * hd // 2)
            inv = np.concatenate([_torch_inv_freq(float(p["rope_theta"]), hd, angles),
                                  np.zeros(hd // 2 - angles, np.float32)]) / np.float32(p.get("factor", 1.0))
        else:
            hd = int(text["head_dim"])
            inv = _torch_inv_freq(float(p["rope_theta"]), hd, hd // 2)
        inv = inv.astype(np.float32)
        shape = (int(inv.size),)
        out += [(f"{pre}rotary_emb.{kind}_inv_freq", shape, "torch.float32", inv),
                (f"{pre}rotary_emb.{kind}_original_inv_freq", shape, "torch.float32", inv)]
    if text.get("hidden_size_per_layer_input"):
        out.append((pre + "embed_tokens_per_layer.embed_scale", (), "torch.float16",
                    scale(math.sqrt(int(text["hidden_size_per_layer_input"])))))
    return out


#: family -> the model buffers its adapter writes as tensor files ``(name, shape, dtype, values)``
#: (named ``name.replace(".", "_") + ".weights"``); the other families list them as ignored rows
FAMILY_BUFFER_FILES = {"gemma4": _gemma4_buffers}


def buffer_files(row: _arch.Arch, hf: dict[str, Any], family: str) -> list[tuple[str, tuple[int, ...], str, np.ndarray]]:
    """The family's model buffers as files: the text model's, then its towers' (if any)."""
    f = FAMILY_BUFFER_FILES.get(family)
    return (f(row, hf) if f else []) + (towers.buffers(hf) if family in towers.TOWER_FAMILIES else [])


def model_buffers(row: _arch.Arch, hf: dict[str, Any]) -> list[tuple[str, tuple[int, ...], str]]:
    """The transformers model buffers cactus's manifest lists as ignored rows, in its order:
    ``(name, shape, torch dtype)`` (Gemma's embedding scale; the rotary frequencies, one pair
    per layer type where transformers keeps one RoPE per type)."""
    out: list[tuple[str, tuple[int, ...], str]] = []
    if row.cactus_family in FAMILY_BUFFER_FILES:  # written as files instead
        return out
    if row.embed_scale_sqrt:
        out.append(("model.embed_tokens.embed_scale", (), "torch.float16"))  # the model loads in f16
    head_dim = int(hf.get("head_dim") or int(hf["hidden_size"]) // int(hf["num_attention_heads"]))
    rp = hf.get("rope_parameters") or {}
    if row.rope_scaling_kinds is not None:
        for kind in sorted(set(hf.get("layer_types") or [])):
            half = _arch.rope.rotary_dim(head_dim, rp.get(kind, {}).get("partial_rotary_factor"), row.name) // 2
            out += [(f"model.rotary_emb.{kind}_inv_freq", (half,), "torch.float32"),
                    (f"model.rotary_emb.{kind}_original_inv_freq", (half,), "torch.float32")]
    else:
        half = _arch.rope.rotary_dim(head_dim, rp.get("partial_rotary_factor"), row.name) // 2
        out += [("model.rotary_emb.inv_freq", (half,), "torch.float32"),
                ("model.rotary_emb.original_inv_freq", (half,), "torch.float32")]
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def config_txt(config: dict[str, Any]) -> str:
    """``key=value`` lines, keys sorted; only str/int/float/bool/list values (cactus's format)."""
    return "".join(f"{k}={_fmt(config[k])}\n" for k in sorted(config)
                   if isinstance(config[k], (str, int, float, bool, list, tuple)))


def family_of(row: _arch.Arch) -> str:
    """cactus's adapter family for the architecture, or the refusal by name."""
    from ..formats.errors import UnsupportedError

    if row.cactus_family is None:
        supported = sorted(a.name for a in _arch.ARCHITECTURES.values() if a.cactus_family)
        raise UnsupportedError(f"{row.name}: {row.cactus_refusal or 'no cactus family'}; the cactus target takes "
                               f"{', '.join(supported)}")
    return row.cactus_family


#: the words that make a text decoder's tensor cactus's ``embedding`` component, in its HF name or
#: its file name (cactus's ``component_for_name``: LFM2's final ``model.embedding_norm`` is one)
EMBEDDING_WORDS = ("embed", "token_embedding", "lm_head", "output_weight")


def component_of(hf_name: str, out: Optional[str]) -> str:
    """cactus's component of a tensor: a tower's ``vision`` or ``audio``
    (:func:`.cactus_towers.component`), else ``embedding`` or ``language``."""
    if towers.is_tower(hf_name):
        return towers.component(hf_name)
    joined = f"{hf_name} {out or ''}".lower()
    return "embedding" if any(w in joined for w in EMBEDDING_WORDS) else "language"
