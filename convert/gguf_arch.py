"""What the GGUF writer does per architecture: llama.cpp's converter classes, read from the
architecture table.

The facts of each decoder are the table's (``formats/arch``): its tensor roles with their HF and
GGUF names, the transforms llama.cpp's converter applies (``Arch.gguf_transforms``: q/k rows
permuted, Gemma's norms as ``1 + w``, Gemma's embedding cut to the vocabulary), transformers'
config defaults (``Arch.hf_defaults``, the values ``AutoConfig`` gives the converter where a
``config.json`` is silent), the default RoPE bases, and which converter class writes it
(``Arch.gguf_converter``). What a converter class *does* with them is here, one row per class
(:data:`CONVERTERS`): the hyperparameter keys it writes after the common ones
(:func:`base_params`, ``TextModel.set_gguf_parameters``) and in which order, the keys it drops
or adds, its vocabulary (``convert/gguf_vocab.py``), and the tensors it generates (Llama 3's
``rope_freqs.weight``, Phi-3's LongRoPE factors). BERT, the encoder llama.cpp runs for
embeddings, is not a decoder of the table: its names and hooks are the last row here.

:func:`writer_for` gives the writer's view of one checkpoint (:class:`Writer`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import numpy as np

from ..formats import arch
from ..formats.arch import lfm2, transforms
from ..formats.errors import BadInputError, UnsupportedError
from ..formats.gguf_kv import VT, KVList

#: tensors the converter never writes (anywhere in the name)
ALWAYS_SKIPPED = (".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")
#: a multimodal checkpoint's towers, which TextModel.filter_tensors drops (llama.cpp writes them to
#: a separate mmproj file): where a converter class takes the wrapper (Converter.text_tower)
TOWER_TENSORS = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.")


# ---- hyperparameters as the converter reads them -------------------------------------------
def _find(hp: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if k in hp:
            return hp[k]
    return None


def hf_hparams(cfg: Mapping[str, Any], defaults: Mapping[str, Any], rope_default: Mapping[str, Any]) -> dict[str, Any]:
    """config.json as the converter sees it through ``AutoConfig``: transformers' defaults for
    absent keys (``None`` defaults derived as the config classes derive them), the text config
    lifted to the top, and ``rope_parameters`` (flat or per layer kind) filled from the legacy
    top-level keys as ``TextModel.__init__`` fills it."""
    hp = dict(cfg)
    if isinstance(hp.get("text_config"), Mapping):
        hp = {**hp, **hp["text_config"]}
    legacy_rope = any(k in hp for k in ("rope_parameters", "rope_scaling", "rope_theta", "rope_local_base_freq"))
    for k, v in defaults.items():
        if k not in hp:
            hp[k] = v
    if hp.get("num_key_value_heads") is None and "num_key_value_heads" in defaults:
        hp["num_key_value_heads"] = hp.get("num_attention_heads")
    if hp.get("head_dim") is None and "head_dim" in defaults and hp.get("num_attention_heads"):
        hp["head_dim"] = hp["hidden_size"] // hp["num_attention_heads"]
    if not legacy_rope and rope_default:
        hp["rope_parameters"] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in rope_default.items()}
    rope = dict(hp.get("rope_parameters") or hp.get("rope_scaling") or {})
    theta = _find(hp, ("global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"))
    local = _find(hp, ("local_rope_theta", "rope_local_theta", "rope_theta_local", "swa_rope_theta", "rope_local_base_freq"))
    if "full_attention" not in rope and "sliding_attention" not in rope:
        if local is not None:
            rope["sliding_attention"] = {"rope_theta": local}
        if "rope_theta" not in rope and theta is not None:
            rope["rope_theta"] = theta
        if "rope_type" not in rope and rope.get("type") is not None:
            rope["rope_type"] = rope["type"]
        partial = _find(hp, ("partial_rotary_factor", "rope_pct", "rope_percent"))
        if "partial_rotary_factor" not in rope and partial is not None:
            rope["partial_rotary_factor"] = partial
        if "original_max_position_embeddings" not in rope and hp.get("original_max_position_embeddings") is not None:
            rope["original_max_position_embeddings"] = hp["original_max_position_embeddings"]
    hp["_rope"] = rope
    return hp


def base_params(kv: KVList, a: str, hp: Mapping[str, Any], file_type: int) -> None:
    """``TextModel.set_gguf_parameters``: the keys every architecture writes, in order."""
    kv.add(f"{a}.block_count", int(_find(hp, ("n_layers", "num_hidden_layers", "n_layer", "num_layers"))))
    kv_heads = _find(hp, ("num_key_value_heads", "n_kv_heads"))
    if isinstance(kv_heads, (list, tuple)):  # one per layer (LFM2): gguf-py writes an INT32 array
        hp = {k: v for k, v in hp.items() if k not in ("num_key_value_heads", "n_kv_heads")}
    for key, names in ((f"{a}.context_length", ("max_position_embeddings", "n_ctx", "n_positions", "max_length",
                                                "max_sequence_length", "model_max_length")),
                       (f"{a}.embedding_length", ("hidden_size", "n_embd", "dim")),
                       (f"{a}.feed_forward_length", ("prefix_dense_intermediate_size", "dense_intermediate_size",
                                                     "intermediate_size", "n_inner", "hidden_dim")),
                       (f"{a}.attention.head_count", ("num_attention_heads", "n_head", "n_heads")),
                       (f"{a}.attention.head_count_kv", ("num_key_value_heads", "n_kv_heads"))):
        v = _find(hp, names)
        if v is not None:
            kv.add(key, v)
    if isinstance(kv_heads, (list, tuple)):
        kv.add(f"{a}.attention.head_count_kv", [int(x) for x in kv_heads], VT.ARRAY, VT.INT32)
    if hp.get("is_causal") is False:
        kv.add(f"{a}.attention.causal", False)
    rope = hp["_rope"]
    params = rope.get("full_attention", rope)
    rtype = params.get("rope_type")
    if rtype is not None:
        factor = params.get("factor")
        if rtype == "linear" and factor is not None:
            kv.add(f"{a}.rope.scaling.type", "linear")
            kv.add(f"{a}.rope.scaling.factor", factor)
        elif rtype == "yarn" and factor is not None:
            kv.add(f"{a}.rope.scaling.type", "yarn")
            kv.add(f"{a}.rope.scaling.factor", factor)
            kv.add(f"{a}.rope.scaling.original_context_length", params["original_max_position_embeddings"])
            yarn_keys: tuple[tuple[str, tuple[str, ...]], ...] = (
                ("yarn_ext_factor", ("extrapolation_factor",)), ("yarn_attn_factor", ("attention_factor", "attn_factor")),
                ("yarn_beta_fast", ("beta_fast",)), ("yarn_beta_slow", ("beta_slow",)))
            for key, aliases in yarn_keys:
                v = _find(params, aliases)
                if v is not None:
                    kv.add(f"{a}.rope.scaling.{key}", v)
        elif rtype in ("su", "longrope"):
            kv.add(f"{a}.rope.scaling.type", "longrope")
        elif rtype not in ("dynamic", "default") and rtype.lower() != "llama3":
            raise UnsupportedError(f"RoPE type {rtype!r}: panelpack does not know how llama.cpp's converter writes it")
    if "mrope_section" in rope:
        raise UnsupportedError("multimodal RoPE sections (mrope_section) are not supported")
    if params.get("rope_theta") is not None:
        kv.add(f"{a}.rope.freq_base", params["rope_theta"])
    swa = rope.get("sliding_attention", {}).get("rope_theta")
    if swa is not None:
        kv.add(f"{a}.rope.freq_base_swa", swa)
    for key, names in ((f"{a}.attention.layer_norm_rms_epsilon", ("rms_norm_eps", "norm_eps")),
                       (f"{a}.attention.layer_norm_epsilon", ("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"))):
        v = _find(hp, names)
        if v is not None:
            kv.add(key, v)
    if _find(hp, ("num_local_experts", "num_experts", "n_routed_experts")) is not None:
        raise UnsupportedError("mixture-of-experts checkpoints are not supported by the GGUF writer")
    if hp.get("head_dim") is not None:
        kv.add(f"{a}.attention.key_length", hp["head_dim"])
        kv.add(f"{a}.attention.value_length", hp["head_dim"])
    kv.add("general.file_type", file_type)


def pooling_type(folder: Path) -> Optional[int]:
    """``_try_set_pooling_type``: sentence-transformers' pooling (modules.json), as llama.cpp's
    PoolingType (1 mean, 2 cls, 3 last)."""
    modules = folder / "modules.json"
    if not modules.is_file():
        return None
    path = next((m.get("path") for m in json.loads(modules.read_text("utf-8")) if str(m.get("type", "")).endswith("Pooling")),
                None)
    if path is None:
        return None
    cfg = json.loads((folder / path / "config.json").read_text("utf-8"))
    for key, value in (("pooling_mode_mean_tokens", 1), ("pooling_mode_cls_token", 2), ("pooling_mode_lasttoken", 3)):
        if cfg.get(key):
            return value
    mode = {"mean": 1, "cls": 2, "lasttoken": 3}.get(cfg.get("pooling_mode"))
    if mode is None:
        raise UnsupportedError(f"{folder / path}: only mean, cls and last-token pooling are supported (as in llama.cpp)")
    return mode


# ---- the converter classes' own keys ---------------------------------------------------------
Params = Callable[[KVList, str, Mapping[str, Any], Path, int], None]
VocabHook = Callable[[KVList, Path, Mapping[str, Any]], None]


def _llama_params(kv: KVList, a: str, hp: Mapping[str, Any], folder: Path, file_type: int) -> None:
    """LlamaModel: the common keys, then vocab_size and the rotary dimension."""
    base_params(kv, a, hp, file_type)
    kv.add(f"{a}.vocab_size", hp["vocab_size"])
    kv.add(f"{a}.rope.dimension_count", hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"])


def _granite_params(kv: KVList, a: str, hp: Mapping[str, Any], folder: Path, file_type: int) -> None:
    """GraniteModel: LlamaModel without head_dim (dropped before), then the four multipliers."""
    _llama_params(kv, a, {k: v for k, v in hp.items() if k != "head_dim"}, folder, file_type)
    for key, name in (("attention.scale", "attention_multiplier"), ("embedding_scale", "embedding_multiplier"),
                      ("residual_scale", "residual_multiplier"), ("logit_scale", "logits_scaling")):
        if hp.get(name):
            kv.add(f"{a}.{key}", hp[name])


def _qwen_params(kv: KVList, a: str, hp: Mapping[str, Any], folder: Path, file_type: int) -> None:
    base_params(kv, a, hp, file_type)
    _pooling(kv, a, hp, folder)


def _pooling(kv: KVList, a: str, hp: Mapping[str, Any], folder: Path) -> None:
    pool = pooling_type(folder)
    if pool is not None:
        kv.add(f"{a}.pooling_type", pool)
    if hp.get("classifier_pooling") is not None:
        raise UnsupportedError("classifier pooling heads are not supported by the GGUF writer")


def _gemma3_params(kv: KVList, a: str, hp: Mapping[str, Any], folder: Path, file_type: int) -> None:
    """Gemma3Model: the common keys, then several again (gguf-py keeps their first places)."""
    base_params(kv, a, hp, file_type)
    rope = hp["_rope"]
    kv.add(f"{a}.context_length", hp.get("max_position_embeddings", 131072))
    kv.add(f"{a}.attention.head_count", hp.get("num_attention_heads", 8))
    kv.add(f"{a}.attention.layer_norm_rms_epsilon", hp.get("rms_norm_eps", 1e-6))
    kv.add(f"{a}.attention.key_length", hp.get("head_dim", 256))
    kv.add(f"{a}.attention.value_length", hp.get("head_dim", 256))
    kv.add(f"{a}.rope.freq_base", rope.get("full_attention", rope).get("rope_theta", 1_000_000.0))
    if hp.get("attn_logit_softcapping") is not None:
        raise UnsupportedError("Gemma 3 with attn_logit_softcapping: llama.cpp's converter refuses it")
    if hp.get("final_logit_softcapping"):
        kv.add(f"{a}.final_logit_softcapping", hp["final_logit_softcapping"])
    if hp.get("sliding_window_pattern") != 1:
        kv.add(f"{a}.attention.sliding_window", hp["sliding_window"])
    kv.add(f"{a}.attention.head_count_kv", hp.get("num_key_value_heads", 4))


def _gemma4_rope_full(hp: Mapping[str, Any]) -> tuple[Mapping[str, Any], int, int]:
    """The global layers' RoPE parameters, head size and rotated pairs (Gemma4Model asserts a
    ``proportional`` RoPE there and refuses per_layer_config's head sizes here)."""
    if hp.get("per_layer_config") is not None:
        raise UnsupportedError("Gemma 4 per_layer_config is not written by the GGUF writer")
    full = hp["_rope"].get("full_attention") or {}
    if full.get("rope_type") != "proportional":
        raise UnsupportedError("Gemma 4 without proportional RoPE on its global layers: llama.cpp's converter asserts it")
    head_full = int(hp.get("global_head_dim") or hp["head_dim"])
    return full, head_full, int(head_full * full["partial_rotary_factor"] / 2)


def _gemma4_params(kv: KVList, a: str, hp: Mapping[str, Any], folder: Path, file_type: int) -> None:
    """Gemma4Model: Gemma3Model's keys (the global layers' proportional RoPE written as
    rope_freqs.weight, not as a scaling type), then KV sharing, the per-layer input width, the
    sliding pattern, head sizes and rotated dims per layer kind, the per-layer FFN widths
    (double-wide) and KV heads (num_global_key_value_heads)."""
    full, head_full, _ = _gemma4_rope_full(hp)
    rope = {**hp["_rope"], "full_attention": {**full, "rope_type": "default"}}
    _gemma3_params(kv, a, {**hp, "_rope": rope}, folder, file_type)
    n = int(hp["num_hidden_layers"])
    n_shared = int(hp["num_kv_shared_layers"])
    kv.add(f"{a}.attention.shared_kv_layers", n_shared)
    kv.add(f"{a}.embedding_length_per_layer_input", hp.get("hidden_size_per_layer_input") or 0)
    swa = [t == "sliding_attention" for t in hp["layer_types"]]
    kv.add(f"{a}.attention.sliding_window_pattern", swa, VT.ARRAY, VT.BOOL)
    head_swa = int(hp["head_dim"])
    kv.add(f"{a}.attention.key_length", head_full)
    kv.add(f"{a}.attention.value_length", head_full)
    kv.add(f"{a}.attention.key_length_swa", head_swa)
    kv.add(f"{a}.attention.value_length_swa", head_swa)
    if hp.get("use_double_wide_mlp"):
        ff = int(hp["intermediate_size"])
        kv.add(f"{a}.feed_forward_length", [ff if i < n - n_shared else 2 * ff for i in range(n)], VT.ARRAY, VT.INT32)
    g_kv, s_kv = hp.get("num_global_key_value_heads"), hp.get("num_key_value_heads")
    if g_kv is not None and s_kv is not None:
        kv.add(f"{a}.attention.head_count_kv", [int(s_kv if w else g_kv) for w in swa], VT.ARRAY, VT.INT32)
    kv.add(f"{a}.rope.dimension_count", head_full)
    kv.add(f"{a}.rope.dimension_count_swa", head_swa)  # rope_parameters' top level has no partial factor


def _gemma4_generated(a: str, hp: Mapping[str, Any]) -> Generated:
    """Gemma4Model.generate_extra_tensors: the global layers' proportional RoPE as divisors, 1 on
    the rotated pairs and 1e30 on the others (ggml's NeoX RoPE rotates the leading pairs only)."""
    _, head_full, rot = _gemma4_rope_full(hp)
    values = np.asarray([1.0] * rot + [1e30] * (head_full // 2 - rot), np.float32)
    return [("rope_freqs.weight", values, "Gemma 4 proportional RoPE divisors (llama.cpp's converter)")], []


def _phi3_rope(hp: Mapping[str, Any]) -> tuple[Mapping[str, Any], int, int, int]:
    rope = hp["_rope"]
    n_embd, n_head = hp["hidden_size"], hp["num_attention_heads"]
    if "original_max_position_embeddings" not in rope:
        raise BadInputError("Phi-3 config without original_max_position_embeddings (llama.cpp's converter needs it)")
    rope_dims = int(rope.get("partial_rotary_factor", 1.0) * n_embd) // n_head
    return rope, rope_dims, _find(hp, ("n_positions", "max_position_embeddings")), rope["original_max_position_embeddings"]


def _phi3_params(kv: KVList, a: str, hp: Mapping[str, Any], folder: Path, file_type: int) -> None:
    """Phi3MiniModel writes its own keys, not the common ones."""
    rope, rope_dims, n_ctx, orig = _phi3_rope(hp)
    kv.add(f"{a}.context_length", n_ctx)
    kv.add(f"{a}.rope.scaling.original_context_length", orig)
    kv.add(f"{a}.embedding_length", hp["hidden_size"])
    kv.add(f"{a}.feed_forward_length", hp["intermediate_size"])
    kv.add(f"{a}.block_count", int(_find(hp, ("n_layers", "num_hidden_layers", "n_layer", "num_layers"))))
    kv.add(f"{a}.attention.head_count", hp["num_attention_heads"])
    kv.add(f"{a}.attention.head_count_kv", _find(hp, ("num_key_value_heads", "n_head_kv")))
    kv.add(f"{a}.attention.layer_norm_rms_epsilon", hp["rms_norm_eps"])
    kv.add(f"{a}.rope.dimension_count", rope_dims)
    kv.add(f"{a}.rope.freq_base", rope.get("full_attention", rope)["rope_theta"])
    kv.add("general.file_type", file_type)
    kv.add(f"{a}.attention.sliding_window", hp.get("sliding_window") or 0)


def lfm2_layer_types(hp: Mapping[str, Any]) -> list[str]:
    """LFM2's layer pattern as AutoConfig gives it: ``layer_types``, else from ``full_attn_idxs``."""
    lt = hp.get("layer_types")
    if isinstance(lt, list):
        return lt
    n = int(hp["num_hidden_layers"])
    idxs = hp.get("full_attn_idxs")
    idxs = list(range(n)) if idxs is None else idxs
    return ["full_attention" if i in idxs else "conv" for i in range(n)]


def lfm2_ff_dim(hp: Mapping[str, Any]) -> int:
    """LFM2Model._add_feed_forward_length: llama.cpp's rule (the round-up to block_multiple_of
    whenever it adjusts; transformers rounds up only with a multiplier: formats/arch/lfm2.py)."""
    return lfm2.adjusted_ff(int(_find(hp, ("block_ff_dim", "intermediate_size"))), hp, round_without_multiplier=True)


def _lfm2_params(kv: KVList, a: str, hp: Mapping[str, Any], folder: Path, file_type: int) -> None:
    """LFM2Model: KV heads per layer (0 in a convolution layer), the common keys, then
    vocab_size, shortconv.l_cache, norm_eps again and its FFN width (keys keep their places)."""
    n_kv = hp.get("num_key_value_heads", 8)
    per_layer = [n_kv if t != "conv" else 0 for t in lfm2_layer_types(hp)]
    base_params(kv, a, {**hp, "num_key_value_heads": per_layer}, file_type)
    kv.add(f"{a}.vocab_size", hp["vocab_size"])
    kv.add(f"{a}.shortconv.l_cache", hp["conv_L_cache"])
    kv.add(f"{a}.attention.layer_norm_rms_epsilon", hp["norm_eps"])
    kv.add(f"{a}.feed_forward_length", lfm2_ff_dim(hp))


def _bert_params(kv: KVList, a: str, hp: Mapping[str, Any], folder: Path, file_type: int) -> None:
    base_params(kv, a, hp, file_type)
    kv.add(f"{a}.attention.causal", False)
    _pooling(kv, a, hp, folder)
    labels = hp.get("id2label")
    if labels and not (len(labels) == 2 and labels.get("0", labels.get(0)) == "LABEL_0"):
        raise UnsupportedError("BERT classifier heads (id2label) are not supported by the GGUF writer")


def _llama_vocab_prefix(kv: KVList, folder: Path, hp: Mapping[str, Any]) -> None:
    """LlamaModel.set_vocab: tokenizer_config's add_prefix_space, written before the vocabulary."""
    tc = folder / "tokenizer_config.json"
    if tc.is_file():
        cfg = json.loads(tc.read_text("utf-8"))
        if isinstance(cfg, dict) and cfg.get("add_prefix_space") is not None:
            kv.add("tokenizer.ggml.add_space_prefix", bool(cfg["add_prefix_space"]))


def _llama_vocab_suffix(kv: KVList, folder: Path, hp: Mapping[str, Any]) -> None:
    if hp.get("vocab_size", 32000) == 32016:
        raise UnsupportedError("CodeLlama's infill tokens are not written by the GGUF writer")
    if hp.get("vocab_size", 32000) == 49152:  # the converter's rule for small Granite vocabularies
        kv.add("tokenizer.ggml.add_bos_token", False)


def _gemma3_vocab_suffix(kv: KVList, folder: Path, hp: Mapping[str, Any]) -> None:
    if (folder / "tokenizer.model").is_file():
        kv.add("tokenizer.ggml.add_space_prefix", False)


# ---- generated tensors -------------------------------------------------------------------------
#: (GGUF name, f32 values, what it is) of a tensor the converter computes, and early pairs
Generated = tuple[list[tuple[str, np.ndarray, str]], list[tuple[str, Any]]]


def llama3_rope_factors(hp: Mapping[str, Any]) -> Optional[np.ndarray]:
    """``rope_freqs.weight`` of a Llama 3 RoPE (LlamaModel.generate_extra_tensors), else None."""
    rope = hp["_rope"]
    params = rope.get("full_attention", rope)
    if str(params.get("rope_type", "")).lower() != "llama3":
        return None
    base = params.get("rope_theta", 10000.0)
    dim = hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"]
    # in f32 as torch computes them: 1 / base ** (arange(0, dim, 2) / dim). torch's f32 pow is
    # SIMD (SLEEF, within 1 ulp); this one is correctly rounded (f64, then f32), so a factor in
    # the smooth band may differ from llama.cpp's converter by 1 ulp (docs/CONVERT.md)
    exps = (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)).astype(np.float32)
    powers = np.power(np.float64(np.float32(base)), exps.astype(np.float64)).astype(np.float32)
    freqs = (np.float32(1.0) / powers).astype(np.float32)
    factor = params.get("factor", 8.0)
    low, high = params.get("low_freq_factor", 1.0), params.get("high_freq_factor", 4.0)
    old = params.get("original_max_position_embeddings", 8192)
    low_wl, high_wl = old / low, old / high
    f32 = np.float32
    out = []
    for f in freqs:  # torch's arithmetic: a Python number meeting an f32 tensor is taken as f32
        wl = f32(2 * math.pi) / f
        if wl < f32(high_wl):
            out.append(f32(1.0))
        elif wl > f32(low_wl):
            out.append(f32(factor))
        else:
            smooth = (f32(old) / wl - f32(low)) / f32(high - low)
            out.append(f32(1) / ((f32(1) - smooth) / f32(factor) + smooth))
    return np.asarray(out, np.float32)


def _llama_generated(a: str, hp: Mapping[str, Any]) -> Generated:
    f = llama3_rope_factors(hp)
    return ([("rope_freqs.weight", f, "Llama 3 RoPE scaling factors (llama.cpp's converter)")] if f is not None
            else []), []


def _phi3_generated(a: str, hp: Mapping[str, Any]) -> Generated:
    """Phi3MiniModel.generate_extra_tensors: LongRoPE factors as tensors, and the attention
    factor as a key (added before the other keys: the converter makes tensors first)."""
    rope, rope_dims, n_ctx, orig = _phi3_rope(hp)
    long, short = rope.get("long_factor"), rope.get("short_factor")
    if not long:
        return [], []
    scale = n_ctx / orig
    kind = str(rope.get("rope_type", "")).lower()
    if kind in ("su", "longrope"):
        attn = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0
    elif kind == "yarn":
        attn = 0.1 * math.log(scale) + 1.0 if scale > 1.0 else 1.0
    else:
        raise UnsupportedError(f"Phi-3 RoPE scaling {kind!r}: llama.cpp's converter supports longrope, su and yarn")
    if short is None or len(long) != len(short) or len(long) != rope_dims / 2:
        raise BadInputError(f"Phi-3 LongRoPE factors must be {rope_dims // 2} long and short values")
    return ([("rope_factors_long.weight", np.asarray(long, np.float32), "LongRoPE long factors (llama.cpp's converter)"),
             ("rope_factors_short.weight", np.asarray(short, np.float32), "LongRoPE short factors")],
            [(f"{a}.rope.scaling.attn_factor", attn)])


def _none_generated(a: str, hp: Mapping[str, Any]) -> Generated:
    return [], []


@dataclass(frozen=True)
class Converter:
    """One of llama.cpp's converter classes, as the writer reproduces it."""

    params: Params  # every key it writes between general.* and general.quantization_version
    vocab: tuple[str, ...]  # vocabulary kinds it tries, in order (gguf_vocab.VOCABS; "spm" needs tokenizer.model)
    generated: Callable[[str, Mapping[str, Any]], Generated] = _none_generated
    vocab_before: Optional[VocabHook] = None
    vocab_after: Optional[VocabHook] = None
    text_tower: bool = False  # writes the text model of a checkpoint with vision/audio towers (TOWER_TENSORS dropped)


_LLAMA = Converter(_llama_params, ("spm", "gpt2"), _llama_generated, _llama_vocab_prefix, _llama_vocab_suffix)
#: llama.cpp's converter class -> what it does (the table's rows name their class: Arch.gguf_converter)
CONVERTERS: dict[str, Converter] = {
    "LlamaModel": _LLAMA, "SmolLM3Model": _LLAMA,
    "GraniteModel": Converter(_granite_params, ("spm", "gpt2"), _llama_generated, _llama_vocab_prefix, _llama_vocab_suffix),
    "Qwen2Model": Converter(_qwen_params, ("spm", "gpt2")),
    "Qwen3Model": Converter(_qwen_params, ("spm", "gpt2")),
    "Gemma3Model": Converter(_gemma3_params, ("spm", "gpt2"), vocab_after=_gemma3_vocab_suffix),
    "Phi3MiniModel": Converter(_phi3_params, ("phi3",), _phi3_generated),
    # its vocabulary: gguf-py's LlamaHfVocab (tokenizer model "gemma4"), not reproduced: the
    # SentencePiece reading where a tokenizer.model is given
    "Gemma4Model": Converter(_gemma4_params, ("spm",), _gemma4_generated, text_tower=True),
    "LFM2Model": Converter(_lfm2_params, ("gpt2",)),
    "BertModel": Converter(_bert_params, ("bert",)),
}


# ---- BERT, outside the decoder table -----------------------------------------------------------
_B = r"encoder\.layer\.(\d+)\."
#: (HF regex, GGUF template) of BERT (the names of formats/arch/names.py's BERT tables); ``{i}`` the
#: layer, ``{s}`` weight or bias (the embeddings: weight only)
BERT_NAMES: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p), g + ".{s}") for p, g in (
    *((r"embeddings\." + re.escape(hf) + r"\.(weight)", g) for hf, g in arch.names.BERT_EMBEDDINGS),
    *(((_B if "{i}" in g else "") + re.escape(hf) + r"\.(weight|bias)", g)
      for hf, g in arch.names.BERT_LAYER + arch.names.BERT_NORMS),
))
BERT_ARCHITECTURES = ("BertModel", "BertForMaskedLM")
#: transformers 5.5.4's BertConfig defaults the converter can read
BERT_DEFAULTS = {"max_position_embeddings": 512, "layer_norm_eps": 1e-12, "type_vocab_size": 2}


def _bert_name(hf: str) -> Optional[str]:
    """BertModel.filter_tensors (prefix, legacy names, dropped heads), then its names."""
    name = hf[5:] if hf.startswith("bert.") else hf
    if name.endswith(".gamma"):
        name = name[:-6] + ".weight"
    if name.endswith(".beta"):
        name = name[:-5] + ".bias"
    if name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias") \
            or name.startswith(("cls.predictions", "cls.seq_relationship")):
        return None
    for rx, tmpl in BERT_NAMES:
        m = rx.fullmatch(name)
        if m:
            g = m.groups()
            return tmpl.format(i=g[0], s=g[-1]) if len(g) > 1 else tmpl.format(s=g[0])
    return ""


# ---- one checkpoint ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Transform:
    """What the converter does to one HF tensor on its way into the GGUF."""

    permute: int = 0  # llama's q/k rows: the head count of the permutation (0: none)
    shift: float = 0.0  # Gemma's norms: written as shift + w
    rows: Optional[int] = None  # Gemma's token_embd: the rows kept (the tokenizer's vocabulary)
    squeeze: bool = False  # LFM2's convolution kernel: [d, 1, L] written [d, L] (the same bytes)

    @property
    def identity(self) -> bool:
        """Whether the bytes pass unchanged (a squeezed axis changes the shape only)."""
        return not self.permute and not self.shift and self.rows is None

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.squeeze:
            shape = (shape[0], shape[-1])
        return shape if self.rows is None else (self.rows,) + shape[1:]

    def notes(self) -> list[str]:
        out = []
        if self.permute:
            out.append(f"rows permuted for llama.cpp's rotary ({self.permute} heads)")
        if self.shift:
            out.append(f"stored as {self.shift:g} + w (Gemma norms)")
        if self.rows is not None:
            out.append(f"rows past the tokenizer's {self.rows} tokens dropped")
        if self.squeeze:
            out.append("[d, 1, L] convolution kernel written [d, L] (LFM2Model)")
        return out

    def rows_of(self, x: np.ndarray) -> np.ndarray:
        """The row transforms (cut, permutation) on values or on blocks ([n, row_bytes])."""
        if self.rows is not None:
            x = x[:self.rows]
        return transforms.permute_rows(x, self.permute) if self.permute else x

    def values(self, x: np.ndarray) -> np.ndarray:
        if self.squeeze:
            x = transforms.squeeze_1(x)
        x = self.rows_of(x)
        return x + x.dtype.type(self.shift) if self.shift else x


@dataclass
class Writer:
    """The writer's view of one checkpoint: its GGUF architecture, converter, hyperparameters."""

    gguf: str  # general.architecture
    converter: Converter
    hp: dict[str, Any]
    row: Optional[arch.Arch] = None  # the table's row (None: BERT)
    n_vocab_rows: Optional[int] = None  # Gemma: the tokenizer's vocabulary, when the embedding is cut
    _roles: dict[str, str] = field(default_factory=dict)

    @property
    def heads(self) -> tuple[int, int]:
        n = int(self.hp.get("num_attention_heads") or 0)
        return n, int(self.hp.get("num_key_value_heads") or n)

    def gguf_name(self, hf: str) -> Optional[str]:
        """The tensor's GGUF name (None: the converter drops it); an HF name the architecture
        does not have is refused by name."""
        if any(s in hf for s in ALWAYS_SKIPPED) or self.converter.text_tower and hf.startswith(TOWER_TENSORS):
            return None
        if self.row is None:
            out = _bert_name(hf)
        else:
            hit = arch.role_of(self.row, hf, "hf")
            out = arch.tensor_name(self.row, hit[0], hit[1], "gguf") if hit else ""
            if hit:
                self._roles[hf] = hit[0]
        if out == "":
            raise UnsupportedError(f"tensor {hf!r}: no GGUF name for it in the {self.gguf} architecture")
        return out

    def transform(self, hf: str, shape: tuple[int, ...]) -> Transform:
        if self.row is None:
            return Transform()
        role = self._roles.get(hf) or (arch.role_of(self.row, hf, "hf") or ("", None))[0]
        todo = self.row.gguf_transforms.get(role, ())
        n_head, n_kv = self.heads
        permute = n_head if "permute_q" in todo else (n_kv if "permute_k" in todo else 0)
        shift = 1.0 if "plus_one" in todo else 0.0
        cut = self.n_vocab_rows if "vocab_rows" in todo and self.n_vocab_rows is not None \
            and self.n_vocab_rows < shape[0] else None
        return Transform(permute, shift, cut, "squeeze_1" in todo)


def writer_for(cfg: Mapping[str, Any]) -> Writer:
    """The writer of an HF ``config.json``: a row of the architecture table (the converter class
    is picked by ``architectures[0]``, as llama.cpp's converter picks it), or BERT."""
    archs = cfg.get("architectures") or []
    tc = cfg.get("text_config")
    if not isinstance(tc, Mapping):
        tc = {}
    name = str((tc.get("architectures") or archs or [""])[0])
    if not name:
        raise BadInputError("config.json names no architectures (llama.cpp's converter needs architectures[0])")
    if name in BERT_ARCHITECTURES:
        return Writer("bert", CONVERTERS["BertModel"], hf_hparams(cfg, BERT_DEFAULTS, {}))
    towers = ("vision_config", "audio_config")
    text_only = {k: v for k, v in cfg.items() if k not in towers}
    row = arch.for_hf_config(text_only)
    if any(isinstance(cfg.get(k), Mapping) for k in towers) and not (
            row.gguf_converter in CONVERTERS and CONVERTERS[row.gguf_converter].text_tower):
        row = arch.for_hf_config(cfg)  # refuses the towers by name
    if name not in row.hf_architectures:
        raise UnsupportedError(f"architecture {name!r} ({row.name}): the GGUF writer writes "
                               f"{', '.join(row.hf_architectures)} (llama.cpp's converter picks its class by it)")
    defaults = {k: v for k, v in row.hf_defaults.items()}
    if row.gguf_converter not in CONVERTERS:
        raise UnsupportedError(f"{row.name}: the GGUF writer does not write it yet (llama.cpp's {row.gguf_converter}); "
                               f"the runtime and plain repacking read the HF checkpoint")
    kinds = [k for k in row.rope_theta if k != "*"]
    rope_default: dict[str, Any] = ({k: {"rope_type": "default", "rope_theta": row.default_theta(k)} for k in kinds}
                                    if kinds else {"rope_type": "default", "rope_theta": row.default_theta("*")})
    return Writer(row.gguf_arch, CONVERTERS[row.gguf_converter], hf_hparams(cfg, defaults, rope_default), row)
