"""The vision and audio towers of a ``gemma4`` checkpoint in the cactus target: what
cactus-compute 2.2.2's ``gemma4`` adapter writes for them (read from its converter; panelpack
never runs a tower, it passes the tensors through as that converter does).

* **Names.** An audio tensor's name is first respelled as cactus's adapter spells it
  (:data:`AUDIO_KEY_RULES`: ``layers.`` -> ``conformer.``, ``feed_forward1`` ->
  ``ffw_layer_start``, ``self_attn.q_proj`` -> ``attention.attn.q_proj``, ...; the manifest's
  ``adapter_name``). The embedders' projections have fixed names (:data:`GLOBAL_NAMES`:
  ``embed_vision_proj.weights``, ``embed_audio_proj.weights``); every other tensor under
  ``model.vision_tower.`` / ``model.audio_tower.`` is ``vision_`` / ``audio_`` + the rest of its
  (respelled) name, a trailing ``.linear`` / ``_linear`` dropped, dots as underscores, ``.weight``
  -> ``.weights``, ``.bias`` -> ``.bias`` (the clipped linears' ``input_min`` ... buffers,
  stored in the checkpoint: ``..._input_min.weights``).
* **Precision.** Every tower tensor is an FP16 file (no CQ: cactus keeps the media towers at
  f16 "for accuracy"), with the first reason of :func:`fp16_reason` in the manifest; the two
  embedder projections carry the family's factor 1/16 (``embed_vision_proj``/``embed_audio_proj``
  in cactus_config's gemma4 factors), every other tower file factor 1. No transposes: an FP16
  file keeps the tensor's shape (up to 4-D: the subsampling convolutions ``[C, C', 3, 3]``; a
  scalar, such as a clipping bound, as one value).
* **Buffers.** The non-persistent buffers transformers computes, written as FP16 files named
  ``<adapter name with _>.weights`` (:func:`buffers`): the vision rotary frequencies
  (``inv_freq``, ``original_inv_freq``; f32), the audio relative-position timescales
  (``rel_pos_enc.inv_timescales`` ``[1, 1, hidden/2]``; f16, as the model loads) and each audio
  layer's attention ``softcap`` (f16 scalar).
* **config.txt.** The keys cactus's ``extract_vision_config`` and ``extract_audio_config``
  derive (:func:`runtime_keys`), with their quirks kept: they read some keys under names the
  transformers 5.5.4 configs do not have (``conf_num_attention_heads``, ``sscp_conv_channel_size``,
  ...) and so write cactus's defaults for them (``audio_num_heads=8``, ``audio_num_layers=12``).
  ``hf_config.json`` holds the tower configs as transformers expands them
  (:func:`expanded_config`, ``formats/arch/gemma4.TOWER_DEFAULTS``).
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Optional

import numpy as np

from ..formats import arch as _arch
from ..formats import cq
from ..formats.arch import gemma4 as _gemma4
from ..formats.errors import UnsupportedError

#: the families whose cactus adapter writes a checkpoint's towers, with the towers' defaults
TOWER_FAMILIES: dict[str, Mapping[str, Mapping[str, Any]]] = {"gemma4": _gemma4.TOWER_DEFAULTS}
TOWER_CONFIGS = ("vision_config", "audio_config")

#: cactus's respelling of an audio tower key (its ``remap_gemma4_audio_key``), applied in order
AUDIO_KEY_RULES: tuple[tuple[str, str], ...] = (
    (r"subsample_conv_projection\.layer(\d+)\.", r"subsample_conv_projection.conv_\1."),
    (r"audio_tower\.layers\.", "audio_tower.conformer."),
    (r"\.feed_forward1\.", ".ffw_layer_start."),
    (r"\.feed_forward2\.", ".ffw_layer_end."),
    (r"\.self_attn\.(q_proj|k_proj|v_proj)\.", r".attention.attn.\1."),
    (r"\.self_attn\.per_dim_scale", ".attention.attn.per_dim_scale"),
    (r"\.self_attn\.relative_k_proj\.", ".attention.attn.relative_position_embedding.pos_proj."),
    (r"\.self_attn\.post\.", ".attention.post."),
    (r"\.norm_pre_attn\.", ".attention.pre_attn_norm."),
    (r"\.norm_post_attn\.", ".attention.post_norm."),
    (r"\.norm_out\.", ".norm."),
)

#: tower tensors with a fixed file name (cactus's ``GEMMA4_GLOBAL_WEIGHTS``, its tower entries)
GLOBAL_NAMES = {
    "model.embed_vision.embedding.weight": "embed_vision_embedding.weights",
    "model.embed_vision.embedding_projection.weight": "embed_vision_proj.weights",
    "model.embed_audio.embedding.weight": "embed_audio_embedding.weights",
    "model.embed_audio.embedding_projection.weight": "embed_audio_proj.weights",
}

#: tower prefix -> the file-name prefix of its tensors
FILE_PREFIXES = {"model.vision_tower.": "vision_", "model.audio_tower.": "audio_"}


def has_towers(config: Mapping[str, Any]) -> bool:
    return any(isinstance(config.get(k), Mapping) for k in TOWER_CONFIGS)


def is_tower(hf_name: str) -> bool:
    """A tower tensor: :func:`panelpack.formats.arch.is_tower`, the one rule every path reads."""
    return _arch.is_tower(hf_name)


def adapter_key(hf_name: str) -> str:
    """The name cactus's gemma4 adapter gives a tensor (audio keys respelled)."""
    if "audio_tower" not in hf_name:
        return hf_name
    for rx, to in AUDIO_KEY_RULES:
        hf_name = re.sub(rx, to, hf_name)
    return hf_name


def component(hf_name: str) -> str:
    """cactus's component of a tower tensor (``audio`` is tested first, as cactus does)."""
    return "audio" if "audio" in hf_name else "vision"


def file_name(hf_name: str) -> Optional[str]:
    """The file cactus writes for a tower tensor (None: not a tower tensor)."""
    key = adapter_key(hf_name)
    if key in GLOBAL_NAMES:
        return GLOBAL_NAMES[key]
    for prefix, out in FILE_PREFIXES.items():
        if key.startswith(prefix):
            rest, ext = key[len(prefix):], ".weights"
            if rest.endswith(".weight"):
                rest = rest[: -len(".weight")]
            elif rest.endswith(".bias"):
                rest, ext = rest[: -len(".bias")], ".bias"
            for tail in (".linear", "_linear"):
                if rest.endswith(tail):
                    rest = rest[: -len(tail)]
                    break
            return out + rest.replace(".", "_") + ext
    return None


#: why a tower tensor is an FP16 file, the first rule that holds (cactus's ``policy_for_tensor``
#: order for the ``gemma4`` family): ``(hf name, file name, shape) -> reason or None``
FP16_RULES = (
    lambda n, o, s: "norm tensor" if "norm" in o.lower() else None,
    lambda n, o, s: ("vision embedding projection scale-sensitive"
                     if n == "model.embed_vision.embedding_projection.weight" else None),
    lambda n, o, s: ("audio bias tensor" if component(n) == "audio" and (n.endswith(".bias") or o.endswith(".bias")
                                                                          or ".bias." in o) else None),
    lambda n, o, s: "bias tensor" if n.endswith(".bias") or o.endswith(".bias") or ".bias." in o else None,
    lambda n, o, s: "non-2d tensor" if len(s) != 2 else None,
    lambda n, o, s: ("position embedding tensor"
                     if any(w in o.lower() for w in ("position_embedding", "pos_embed", "embed_positions")) else None),
    lambda n, o, s: f"input width is not aligned to CQ group size {cq.GROUP}" if s[1] % cq.GROUP else None,
)


def fp16_reason(hf_name: str, out: str, shape: tuple[int, ...]) -> str:
    for rule in FP16_RULES:
        why = rule(hf_name, out, shape)
        if why:
            return why
    return "gemma4 media tower accuracy"


def expanded_config(name: str, given: Mapping[str, Any], family: str, common: Mapping[str, Any]) -> dict[str, Any]:
    """transformers 5.5.4's dict of a tower config (``vision_config``/``audio_config``) as the
    wrapper's ``to_dict`` writes it; ``common``: the keys every config has."""
    raw = {("dtype" if k == "torch_dtype" else k): v for k, v in given.items()}
    out = {"_name_or_path": "", **common, "architectures": None, "dtype": None,
           **TOWER_FAMILIES[family][name], **raw}
    if isinstance(out.get("subsampling_conv_channels"), tuple):
        out["subsampling_conv_channels"] = list(out["subsampling_conv_channels"])
    return out


def _vision_keys(root: Mapping[str, Any], v: Mapping[str, Any]) -> dict[str, Any]:
    """cactus's ``extract_vision_config`` of the expanded ``vision_config`` ``v``."""
    hidden, patch, heads = int(v.get("hidden_size", 0)), int(v.get("patch_size", 0)), int(v.get("num_attention_heads", 0))
    size = v.get("size", {})
    image = v.get("image_size", size.get("longest_edge", 0) if isinstance(size, dict) else v.get("image_size", 0))
    shuffle = int(root.get("scale_factor", v.get("scale_factor", 1) or 1))
    out_len = v.get("default_output_length", 280)
    theta = 100.0
    rp = v.get("rope_parameters", {})
    if isinstance(rp, dict):
        theta = next((float(p["rope_theta"]) for p in rp.values() if isinstance(p, dict) and "rope_theta" in p), theta)
    return {
        "vision_hidden_size": hidden, "vision_num_layers": int(v.get("num_hidden_layers", v.get("num_layers", 0) or 0)),
        "vision_image_size": int(image), "vision_patch_size": patch, "vision_attention_heads": heads,
        "vision_embed_dim": hidden, "num_channels": int(v.get("num_channels", 3)),
        "visual_tokens_per_img": (int(image) // patch) ** 2 if patch > 0 and int(image) > 0 else 0,
        "use_pixel_shuffle": shuffle > 1, "pixel_shuffle_factor": shuffle,
        "use_image_tokens": root.get("image_token_id") is not None, "image_token_id": int(root.get("image_token_id", 0)),
        "use_layout_tags": False, "downsample_factor": int(root.get("downsample_factor", 2)),
        "vision_head_dim": int(v.get("head_dim", 64)), "vision_kv_heads": int(v.get("num_key_value_heads", heads)),
        "vision_intermediate_size": int(v.get("intermediate_size", 4 * hidden)),
        "vision_position_embedding_size": int(v.get("position_embedding_size", 10240)),
        "vision_pooling_kernel_size": int(v.get("pooling_kernel_size", 3)),
        "vision_default_output_length": int(out_len[0] if isinstance(out_len, (list, tuple)) else out_len),
        "vision_rope_theta": theta,
    }


def _audio_keys(root: Mapping[str, Any], a: Mapping[str, Any]) -> dict[str, Any]:
    """cactus's ``extract_audio_config`` of the expanded ``audio_config`` ``a`` (the ``conf_*`` /
    ``sscp_*`` keys it reads are not transformers 5.5.4's names: their defaults are written)."""
    hidden, heads = int(a.get("hidden_size", 1024)), int(a.get("conf_num_attention_heads", 8))
    sscp = a.get("sscp_conv_channel_size", [128, 32])
    sscp = sscp if isinstance(sscp, (list, tuple)) else [128, 32]
    frame = int(round(int(a.get("sampling_rate", 16000)) * float(a.get("frame_length_ms", 20.0)) / 1000.0))
    fft = 2 ** math.ceil(math.log2(max(1, frame))) * (2 if a.get("fft_overdrive", False) else 1)
    return {
        "audio_hidden_dim": hidden, "audio_num_layers": int(a.get("conf_num_hidden_layers", 12)),
        "audio_num_heads": heads, "audio_head_dim": hidden // max(1, heads),
        "audio_input_feat_size": int(a.get("input_feat_size", 128)),
        "audio_conf_conv_kernel_size": int(a.get("conf_conv_kernel_size", 5)),
        "audio_chunk_size": int(a.get("conf_attention_chunk_size", 12)),
        "audio_context_left": int(a.get("conf_attention_context_left", 13)),
        "audio_context_right": int(a.get("conf_attention_context_right", 0)),
        "audio_logit_cap": float(a.get("conf_attention_logit_cap", 50.0)),
        "audio_residual_weight": float(a.get("conf_residual_weight", 0.5)),
        "audio_output_proj_dims": int(a.get("output_proj_dims") or 0),
        "audio_vocab_size": int(a.get("vocab_size", 128)), "audio_vocab_offset": int(a.get("vocab_offset", 0)),
        "audio_soft_tokens": int(a.get("audio_soft_tokens_per_image", 188)),
        "audio_sscp_conv0_channels": int(sscp[0]), "audio_sscp_conv1_channels": int(sscp[1]),
        "audio_sscp_conv_eps": float(a.get("sscp_conv_eps", 1e-3)), "audio_rms_norm_eps": float(a.get("rms_norm_eps", 1e-6)),
        "audio_fft_length": fft, "audio_token_id": int(root.get("audio_token_id", 0)),
    }


def runtime_keys(root: Mapping[str, Any]) -> dict[str, Any]:
    """The config.txt keys cactus's gemma4 adapter adds for the towers of the expanded wrapper
    config ``root`` (vision, then audio)."""
    out: dict[str, Any] = {}
    if root.get("vision_config"):
        out.update(_vision_keys(root, root["vision_config"]))
    if root.get("audio_config"):
        out.update(_audio_keys(root, root["audio_config"]))
    return out


def buffers(root: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...], str, np.ndarray]]:
    """The towers' non-persistent buffers cactus writes as FP16 files, after the text model's, in
    the modules' order: ``(hf name, shape, torch dtype, values)``."""
    out: list[tuple[str, tuple[int, ...], str, np.ndarray]] = []
    v = root.get("vision_config")
    if isinstance(v, Mapping):
        rp = v.get("rope_parameters") or {}
        if rp.get("rope_type", "default") != "default":
            raise UnsupportedError(f"gemma4: a vision tower with RoPE type {rp.get('rope_type')!r}; the cactus target "
                                   f"writes the default one's frequencies")
        dim = int(v.get("head_dim") or int(v["hidden_size"]) // int(v["num_attention_heads"])) // 2
        e = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
        inv = (np.float32(1.0) / (np.float32(rp.get("rope_theta", 100.0)) ** e)).astype(np.float32)
        for name in ("inv_freq", "original_inv_freq"):
            out.append((f"model.vision_tower.encoder.rotary_emb.{name}", (int(inv.size),), "torch.float32", inv))
    a = root.get("audio_config")
    if isinstance(a, Mapping):
        n = int(a["hidden_size"]) // 2
        step = np.float32(-math.log(10000.0) / max(n - 1, 1))
        t = np.exp(np.arange(n).astype(np.float32) * step).astype(np.float32).astype(np.float16)
        out.append(("model.audio_tower.rel_pos_enc.inv_timescales", (1, 1, n), "torch.float16", t.reshape(1, 1, n)))
        cap = np.asarray(np.float32(a["attention_logit_cap"])).astype(np.float16)
        out += [(f"model.audio_tower.layers.{i}.self_attn.softcap", (), "torch.float16", cap)
                for i in range(int(a["num_hidden_layers"]))]
    return out
