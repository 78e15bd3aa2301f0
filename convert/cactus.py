"""The cactus output target: a folder the cactus engine loads, as cactus's own converter
(cactus-compute 2.2.2, ``python -m cactus.convert convert --bits N``) writes it for a
llama-family checkpoint (``llama``, ``qwen2``), without torch.

    from panelpack.convert.cactus import convert_cactus
    result = convert_cactus("SmolLM2-HF/", "smollm2-cactus/", bits=4)

What goes in the folder (the tables below are the facts, read from cactus's converter):

* one tensor file per tensor, named by :data:`NAME_RULES` (``token_embeddings.weights``,
  ``layer_{i}_attn_q.weights``, ..., ``output_weight.weights``); the policy of
  :func:`tensor_policy`: norms and biases FP16; K not a multiple of 128 -> FP16; embedding and
  output head -> orthogonal CQ4 (INTERLEAVED_4ROW when N % 4 == 0 and K % 32 == 0); the rest
  CQn Hadamard, round-to-nearest (no calibration data), INTERLEAVED_4ROW when N % 4 == 0;
  with ``panels`` the CQ4 Hadamard weights are written as ``NAME.cq4p.weights`` instead;
* ``config.txt`` (``key=value`` sorted: the model's HF config as transformers 5.5.4 expands it,
  overlaid with the runtime keys of :func:`runtime_config`) and ``hf_config.json`` (the same
  dict as JSON);
* the source's runtime side files (config.json, tokenizer files, ...: :data:`SIDE_FILES`);
* ``conversion_manifest.json``, ``weights_manifest.json``, ``conversion_summary.json``: cactus's
  reports (its ``qdq`` reader is driven by the first);
* ``manifest.json`` (ours): every file's sha256 and size, and the ledger (per tensor: source
  name and type, what was done, relative RMSE against the source values).

GGUF sources are dequantized to f32 first (the ledger says ``dequantized from``), their names
mapped to Hugging Face names, and llama's q/k rows (stored permuted for pairwise RoPE by
llama.cpp's converter) put back in HF order. The engine's tokenizer files (``vocab.txt``,
``merges.txt``, ``special_tokens.json``, ``tokenizer_config.txt``) are what cactus writes
through transformers, reproduced by ``cactus_tokenizer.py`` from the source's own tokenizer
files (GGUF sources: from the tokenizer metadata, as for the HF folder it stands for), and so
is the ``tokenizer.json`` transformers re-serialises (not for byte-level GGUF tokenizers: their
pre-tokenizer is only named in GGUF). Not reproduced: cactus's ``hessian_metadata.json``
(timings of a calibration that does not run).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..formats import cactus as cfile
from ..formats import cq
from ..formats.atomic import atomic_dir, sha256_file
from ..formats.checkpoint import open_checkpoint
from ..formats.errors import BadInputError, UnsupportedError
from ..formats.safetensors import bf16_to_f32

log = logging.getLogger(__name__)

QUANTS = {"cq1": 1, "cq2": 2, "cq3": 3, "cq4": 4}
FAMILIES = {"llama": "generic", "qwen2": "qwen"}
"""HF ``model_type`` -> cactus's adapter family (also the runtime ``model_type``)."""
TRANSFORMERS_VERSION = "5.5.4"

#: The per-layer tensors of a llama-family model, one row each: the GGUF name after
#: ``blk.{i}.``, the HF name after ``model.layers.{i}.``, the cactus file after ``layer_{i}_``.
LAYER_TENSORS: tuple[tuple[str, str, str], ...] = (
    ("attn_norm.weight", "input_layernorm.weight", "input_norm.weights"),
    ("ffn_norm.weight", "post_attention_layernorm.weight", "post_attn_norm.weights"),
    ("attn_q.weight", "self_attn.q_proj.weight", "attn_q.weights"),
    ("attn_k.weight", "self_attn.k_proj.weight", "attn_k.weights"),
    ("attn_v.weight", "self_attn.v_proj.weight", "attn_v.weights"),
    ("attn_output.weight", "self_attn.o_proj.weight", "attn_output.weights"),
    ("ffn_gate.weight", "mlp.gate_proj.weight", "ffn_gate.weights"),
    ("ffn_up.weight", "mlp.up_proj.weight", "ffn_up.weights"),
    ("ffn_down.weight", "mlp.down_proj.weight", "ffn_down.weights"),
)
#: The model-level tensors: GGUF name, HF name, cactus file, cactus component.
MODEL_TENSORS: tuple[tuple[str, str, str, str], ...] = (
    ("token_embd.weight", "model.embed_tokens.weight", "token_embeddings.weights", "embedding"),
    ("output.weight", "lm_head.weight", "output_weight.weights", "embedding"),
    ("output_norm.weight", "model.norm.weight", "output_norm.weights", "language"),
)

# HF name -> (cactus file name, component); {i} is the layer index, {p} q, k or v.
NAME_RULES: tuple[tuple[str, str, str], ...] = (
    *((re.escape(hf), cactus, comp) for _, hf, cactus, comp in MODEL_TENSORS),
    *((r"model\.layers\.(\d+)\." + re.escape(hf), "layer_{i}_" + cactus, "language") for _, hf, cactus in LAYER_TENSORS),
    (r"model\.layers\.(\d+)\.self_attn\.(q|k|v)_proj\.bias", "layer_{i}_self_attn_{p}_proj.bias", "language"),
)
_COMPILED = tuple((re.compile(p), o, c) for p, o, c in NAME_RULES)

# GGUF llama-family name -> HF name ({i}: layer); the inverse of llama.cpp's tensor map.
GGUF_NAMES: tuple[tuple[str, str], ...] = (
    *((re.escape(gguf), hf) for gguf, hf, _, _ in MODEL_TENSORS),
    *((r"blk\.(\d+)\." + re.escape(gguf), "model.layers.{i}." + hf) for gguf, hf, _ in LAYER_TENSORS),
    (r"blk\.(\d+)\.attn_(q|k|v)\.bias", "model.layers.{i}.self_attn.{p}_proj.bias"),
)
_GGUF_COMPILED = tuple((re.compile(p), o) for p, o in GGUF_NAMES)
GGUF_ARCH = {"llama": ("llama", "LlamaForCausalLM"), "qwen2": ("qwen2", "Qwen2ForCausalLM")}
GGUF_ROPE_PERMUTED = {"llama"}
"""GGUF architectures whose q/k rows llama.cpp's converter stores permuted for pairwise RoPE."""

SIDE_FILES = ("config.json", "vocab.json", "merges.txt", "tokenizer.json", "tokenizer.model", "vocab.txt",
              "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.json",
              "chat_template.jinja", "generation_config.json", "preprocessor_config.json",
              "image_processor_config.json", "video_preprocessor_config.json", "processor_config.json")
"""The runtime files cactus's converter copies from the source folder, in its order."""

TORCH_DTYPES = {"BF16": "torch.bfloat16", "F16": "torch.float16", "F32": "torch.float32"}
ROTARY_BUFFERS = ("model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq")
"""transformers' rotary buffers, which cactus's manifest lists as ignored rows (f32, head_dim/2)."""

# transformers 5.5.4's expansion of a config.json (``PretrainedConfig.to_dict``): common keys,
# then each model type's defaults. Values given in config.json win.
COMMON_DEFAULTS: dict[str, Any] = {
    "chunk_size_feed_forward": 0, "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "is_encoder_decoder": False,
    "label2id": {"LABEL_0": 0, "LABEL_1": 1}, "output_attentions": False, "output_hidden_states": False,
    "pad_token_id": None, "problem_type": None, "return_dict": True, "transformers_version": TRANSFORMERS_VERSION,
    "dtype": None, "tie_word_embeddings": False,
}
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "hidden_act": "silu", "max_position_embeddings": 2048,
              "initializer_range": 0.02, "rms_norm_eps": 1e-6, "pretraining_tp": 1, "use_cache": True,
              "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
              "bos_token_id": 1, "eos_token_id": 2},
    "qwen2": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "hidden_act": "silu", "max_position_embeddings": 32768,
              "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True, "use_sliding_window": False,
              "sliding_window": 4096, "max_window_layers": 28, "attention_dropout": 0.0,
              "bos_token_id": None, "eos_token_id": None},
}


def cactus_name(hf_name: str) -> tuple[Optional[str], str, bool]:
    """``(file name or None, component, recognized)`` of an HF tensor name."""
    for rx, out, comp in _COMPILED:
        m = rx.fullmatch(hf_name)
        if m:
            g = m.groups()
            return out.format(i=g[0] if g else "", p=g[1] if len(g) > 1 else ""), comp, True
    return None, "language", False


@dataclass(frozen=True)
class Policy:
    action: str            # convert | fallback | ignored
    precision: str         # CQn | FP16 | none
    bits: Optional[int]
    rotation: str          # hadamard | orthogonal | none
    interleaved: bool
    use_gptq: bool
    reason: Optional[str]


def tensor_policy(out: Optional[str], component: str, shape: tuple[int, ...], bits: int) -> Policy:
    """cactus's per-tensor rule for the llama family (its ``policy_for_tensor``)."""
    if out is None:
        return Policy("ignored", "none", None, "none", False, False, "no output filename")
    if "norm" in out.lower():
        return Policy("fallback", "FP16", None, "none", False, False, "norm tensor")
    if out.endswith(".bias") or ".bias." in out:
        return Policy("fallback", "FP16", None, "none", False, False, "bias tensor")
    if len(shape) != 2:
        return Policy("fallback", "FP16", None, "none", False, False, "non-2d tensor")
    head = out in {"token_embeddings.weights", "output_weight.weights"}
    if component != "embedding" and not head and shape[1] % cq.GROUP:
        return Policy("fallback", "FP16", None, "none", False, False,
                      f"input width is not aligned to CQ group size {cq.GROUP}")
    if component == "embedding" or head:
        il = head and shape[0] % 4 == 0 and shape[1] % 32 == 0
        return Policy("convert", "CQ4", 4, "orthogonal", il, False, None)
    return Policy("convert", f"CQ{bits}", bits, "hadamard", False, True, None)


# ---- config.txt ------------------------------------------------------------------------------

def hf_config_dict(config: dict[str, Any], source: str) -> dict[str, Any]:
    """The config dict transformers 5.5.4 produces for a llama/qwen2 ``config.json``."""
    mt = str(config.get("model_type", "")).lower()
    d: dict[str, Any] = {"_name_or_path": source}
    d.update(COMMON_DEFAULTS)
    d.update(MODEL_DEFAULTS.get(mt, {}))
    rope = {"rope_theta": 10000.0, "rope_type": "default"}
    for k, v in config.items():
        if k == "torch_dtype":
            d["dtype"] = v
        elif k == "rope_theta":
            rope["rope_theta"] = v
        elif k == "rope_scaling" and isinstance(v, dict):
            rope.update({("rope_type" if kk == "type" else kk): vv for kk, vv in v.items()})
        elif k == "rope_parameters" and isinstance(v, dict):
            rope.update(v)
        else:
            d[k] = v
    d["rope_parameters"] = rope
    if d.get("num_key_value_heads") is None:
        d["num_key_value_heads"] = d.get("num_attention_heads")
    if d.get("head_dim") is None:
        d["head_dim"] = int(d["hidden_size"]) // int(d["num_attention_heads"])
    if mt == "qwen2":
        if not d.get("use_sliding_window"):
            d["sliding_window"] = None
        if d.get("layer_types") is None:
            sw, mwl = d.get("sliding_window"), int(d.get("max_window_layers", 28))
            d["layer_types"] = ["sliding_attention" if sw is not None and i >= mwl else "full_attention"
                                for i in range(int(d["num_hidden_layers"]))]
    return d


def runtime_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The runtime keys cactus's converter derives (its ``extract_base_config``)."""
    def get(*keys, default=None):
        for k in keys:
            if cfg.get(k) is not None:
                return cfg[k]
        return default

    rope = cfg.get("rope_parameters") or {}
    rope_theta = cfg.get("rope_theta", rope.get("rope_theta") if isinstance(rope, dict) else None)
    if rope_theta is None:
        rope_theta = 10000.0
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
    lt = cfg.get("layer_types")
    if isinstance(lt, (list, tuple)) and lt:
        out["layer_types"] = list(lt)
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


# ---- sources ---------------------------------------------------------------------------------

@dataclass
class SourceTensor:
    hf_name: str
    shape: tuple[int, ...]
    dtype: str            # the torch dtype string cactus's manifest records
    source_type: str      # our type name of the stored data
    load: Any             # () -> f32 ndarray
    note: Optional[str] = None


def _hf_sources(ckpt) -> tuple[list[SourceTensor], dict[str, Any]]:
    config = dict(getattr(ckpt, "config", {}) or {})
    shards = getattr(ckpt, "shards", None) or [ckpt]
    out = []
    for shard in sorted(shards, key=lambda s: os.path.basename(s.path)):
        for info in sorted(shard.tensors, key=lambda t: t.name):
            t = info.type.name
            if t not in TORCH_DTYPES:
                raise UnsupportedError(f"{info.name}: stored as {t}; the cactus target reads BF16/F16/F32 HF tensors")

            def load(name=info.name, t=t):
                a = np.asarray(ckpt.array(name))
                return bf16_to_f32(a) if t == "BF16" else a.astype(np.float32)

            out.append(SourceTensor(info.name, tuple(info.shape), TORCH_DTYPES[t], t, load))
    return out, config


def _unpermute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's ``permute``: rows ``[head][2][d/2]`` were stored as ``[head][d/2][2]``."""
    n = w.shape[0]
    return np.ascontiguousarray(w.reshape(n_head, n // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def _gguf_sources(ckpt) -> tuple[list[SourceTensor], dict[str, Any]]:
    from ..formats import blocks

    arch = ckpt.architecture or ""
    if arch not in GGUF_ARCH:
        raise UnsupportedError(f"GGUF architecture {arch!r}: the cactus target takes {sorted(GGUF_ARCH)}")
    hp = ckpt.hyperparameters()
    md = ckpt.metadata

    def meta(key, default=None):
        v = md.get(f"{arch}.{key}", default)
        return v.tolist() if hasattr(v, "tolist") and not isinstance(v, (int, float)) else v

    names = set(ckpt.names)
    model_type, archname = GGUF_ARCH[arch]
    config: dict[str, Any] = {
        "architectures": [archname], "model_type": model_type,
        "hidden_size": hp["n_embd"], "intermediate_size": hp["n_ff"], "num_hidden_layers": hp["n_layer"],
        "num_attention_heads": hp["n_head"], "num_key_value_heads": hp["n_head_kv"],
        "head_dim": meta("attention.key_length", hp["n_embd"] // hp["n_head"]),
        "vocab_size": hp["n_vocab"], "max_position_embeddings": hp["n_ctx"],
        "rms_norm_eps": meta("attention.layer_norm_rms_epsilon", 1e-6),
        "rope_theta": float(meta("rope.freq_base", 10000.0)),
        "tie_word_embeddings": "output.weight" not in names, "torch_dtype": "float32",
    }
    for k, key in (("bos_token_id", "tokenizer.ggml.bos_token_id"), ("eos_token_id", "tokenizer.ggml.eos_token_id")):
        if md.get(key) is not None:
            config[k] = int(md.get(key))
    out = []
    for info in ckpt.tensors:
        hf = None
        for rx, tmpl in _GGUF_COMPILED:
            m = rx.fullmatch(info.name)
            if m:
                g = m.groups()
                hf = tmpl.format(i=g[0] if g else "", p=g[1] if len(g) > 1 else "")
                break
        if hf is None:
            log.info("GGUF tensor %s has no Hugging Face name in the llama family; skipped", info.name)
            continue
        heads = (hp["n_head"] if ".q_proj." in hf else hp["n_head_kv"]) if arch in GGUF_ROPE_PERMUTED else 0
        permuted = heads and (".q_proj." in hf or ".k_proj." in hf)

        def load(info=info, heads=heads, permuted=permuted):
            t = info.type
            if t.numpy_dtype is not None and t.name in ("F32", "F16"):
                a = np.asarray(ckpt.array(info.name)).astype(np.float32)
            elif t.name == "BF16":
                a = bf16_to_f32(np.asarray(ckpt.array(info.name)))
            else:
                a = blocks.dequantize(ckpt.raw(info.name), t, info.n, info.k).reshape(info.shape)
            return _unpermute_rope(a, heads) if permuted else a

        note = f"dequantized from {info.type.name}" + (" (q/k rows back in HF order)" if permuted else "")
        out.append(SourceTensor(hf, tuple(info.shape), "torch.float32", info.type.name, load, note))
    out.sort(key=lambda s: s.hf_name)
    return out, config


# ---- the conversion --------------------------------------------------------------------------

@dataclass
class CactusResult:
    out: Path
    family: str
    bits: int
    panels: bool
    seconds: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)

    def render(self) -> str:
        """One line, as ``panelpack convert --target cactus`` prints it."""
        by = Counter(r["status"] for r in self.rows)
        size = sum(r["bytes"] for r in self.rows)
        return (f"wrote {self.out} (cactus {self.family}, CQ{self.bits}{', panels' if self.panels else ''}): "
                f"{by.get('converted', 0)} converted, {by.get('fallback', 0)} fallback, "
                f"{by.get('ignored', 0)} ignored, {size / 1e6:.1f} MB in {self.seconds:.1f} s")

    summary = render

    def to_json(self) -> dict[str, Any]:
        return {"out": str(self.out), "family": self.family, "bits": self.bits, "panels": self.panels,
                "seconds": round(self.seconds, 3), "ledger": self.ledger}


def _write_tensor(path: Path, st: SourceTensor, pol: Policy, panels: bool) -> tuple[str, dict[str, Any]]:
    """Quantize/convert one tensor into ``path``'s folder; returns (file name, ledger extras)."""
    w = st.load()
    extra: dict[str, Any] = {}
    if pol.action == "fallback":
        path.write_bytes(cfile.fp16_file_bytes(w))
        return path.name, extra
    if pol.rotation == "orthogonal":
        t = cq.quantize_orthogonal(w, 4)
        data = cfile.cq_file_bytes(t, pol.interleaved)
        sample = np.unique(np.linspace(0, t.n - 1, min(t.n, 512)).astype(np.int64))
        sub = cq.CQTensor(t.indices[sample], t.norms[sample], t.input_scale, 4, t.group, "orthogonal", t.seed, t.k, t.matrix)
        extra["relative_rmse"] = round(cq.relative_rmse(w[sample], cq.dequantize(sub)), 6)
        extra["rmse_rows"] = int(sample.size)
        extra["rotation"] = "orthogonal (signed permuted DCT-II, f16)"
        name = path.name
    else:
        t = cq.quantize_hadamard(w, pol.bits)
        rr = cq.hadamard_relative_rmse(t) if t.k == t.kp else None
        extra["relative_rmse"] = round(rr if rr is not None else cq.relative_rmse(w, cq.dequantize(t)), 6)
        extra["rotation"] = f"hadamard seed {t.seed}"
        if panels and pol.bits == 4:
            from ..repack import cq4_panel

            cb16, _ = cfile.stored_codebook_and_norms(t, True)
            nib = cfile.panel_nibbles(cb16)[t.indices]
            data = cfile.cq4p_file_bytes(t, cq4_panel.pack(nib))
            name = path.name[: -len(".weights")] + cfile.PANEL_SUFFIX
            path = path.with_name(name)
            extra["layout"] = "cq4p panels"
        else:
            il = cfile.interleave_by_default(t, path.name[: -len(".weights")])
            data = cfile.cq_file_bytes(t, il)
            name = path.name
            extra["layout"] = "interleaved_4row" if il else "row_major"
    path.write_bytes(data)
    return name, extra


def convert_cactus(source: str | os.PathLike, out: str | os.PathLike, bits: int = 4, panels: bool = False,
                   force: bool = False) -> CactusResult:
    """Convert a llama/qwen2 HF folder or GGUF file into a cactus folder at ``out``."""
    if bits not in cq.BITS:
        raise BadInputError(f"cactus CQ bits must be one of {cq.BITS}, got {bits}")
    t0 = time.perf_counter()
    src = os.fspath(source)
    with open_checkpoint(src) as ckpt:
        kind = getattr(ckpt, "kind", "")
        if kind == "gguf":
            tensors, config = _gguf_sources(ckpt)
        elif kind == "hf":
            mt0 = str((getattr(ckpt, "config", None) or {}).get("model_type", "")).lower()
            if mt0 not in FAMILIES:
                raise UnsupportedError(f"{src}: model_type {mt0!r}: the cactus target supports {sorted(FAMILIES)}")
            tensors, config = _hf_sources(ckpt)
        else:
            raise BadInputError(f"{src}: the cactus target converts an HF folder (config.json + safetensors) or a GGUF file")
        mt = str(config.get("model_type", "")).lower()
        if mt not in FAMILIES:
            raise UnsupportedError(f"{src}: model_type {mt!r}: the cactus target supports {sorted(FAMILIES)}")
        family = FAMILIES[mt]
        hf = hf_config_dict(config, src)
        merged = {**hf, **runtime_config(hf), "model_type": family}
        result = CactusResult(Path(out), family, bits, panels)
        with atomic_dir(out, force=force) as tmp:
            top = os.path.abspath(src)
            by_name = {os.path.basename(p): p for p in getattr(ckpt, "side_files", None) or []
                       if os.path.dirname(os.path.abspath(p)) == top}
            for name in SIDE_FILES:
                if name in by_name:
                    shutil.copy2(by_name[name], tmp / name)
            if kind == "gguf":
                from .cactus_tokenizer import write_gguf_tokenizer_files

                (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
                write_gguf_tokenizer_files(ckpt.metadata, tmp, mt, family, str(src))
            else:
                from .cactus_tokenizer import write_tokenizer_files

                write_tokenizer_files(Path(top), tmp, mt, family)
            (tmp / "config.txt").write_text(config_txt(merged), encoding="utf-8")
            (tmp / "hf_config.json").write_text(json.dumps(merged, indent=2, sort_keys=True), encoding="utf-8")
            for st in tensors:
                out_name, comp, recognized = cactus_name(st.hf_name)
                pol = tensor_policy(out_name, comp, st.shape, bits)
                status, fname, extra = "ignored", None, {}
                if pol.action != "ignored" and out_name is not None:
                    ts = time.perf_counter()
                    fname, extra = _write_tensor(tmp / out_name, st, pol, panels)
                    extra["seconds"] = round(time.perf_counter() - ts, 4)
                    status = "converted" if pol.action == "convert" else "fallback"
                    if not recognized:
                        status = "unrecognized"
                result.rows.append(_manifest_row(st, fname, comp, pol, status, recognized, family,
                                                 (tmp / fname).stat().st_size if fname else 0))
                result.ledger.append({"name": st.hf_name, "file": fname, "shape": list(st.shape),
                                      "source_type": st.source_type, "precision": pol.precision,
                                      "status": status, **({"note": st.note} if st.note else {}), **extra})
            for buf in ROTARY_BUFFERS if kind == "hf" else ():
                hd = int(hf["head_dim"])
                result.rows.append(_manifest_row(SourceTensor(buf, (hd // 2,), "torch.float32", "F32", None), None,
                                                 "language", tensor_policy(None, "language", (hd // 2,), bits),
                                                 "ignored", False, family, 0))
            _write_reports(tmp, result.rows)
            result.seconds = time.perf_counter() - t0
            _write_manifest(tmp, src, result)
    log.info("%s", result.summary())
    return result


def _manifest_row(st: SourceTensor, fname: Optional[str], comp: str, pol: Policy, status: str, recognized: bool,
                  family: str, nbytes: int) -> dict[str, Any]:
    return {
        "source_name": st.hf_name, "hf_name": st.hf_name, "adapter_name": st.hf_name, "output_file": fname,
        "shape": list(st.shape), "dtype": st.dtype, "component": comp, "policy": pol.action,
        "precision": pol.precision, "bits": pol.bits, "status": status, "required": pol.action != "ignored",
        "fallback_reason": pol.reason, "hessian_samples": 0, "gptq_used": False, "bytes": nbytes,
        "scale_factor": 1.0, "recognized": recognized, "adapter_family": family, "source_names": [st.hf_name],
        "transform": "none", "qdq_restore": "hf_key",
        "hessian_missing_reason": "expected GPTQ target had zero samples" if pol.action == "convert" and pol.use_gptq else None,
    }


def _write_reports(folder: Path, rows: list[dict[str, Any]]) -> None:
    """cactus's three report files, with its keys and JSON formatting."""
    (folder / "conversion_manifest.json").write_text(json.dumps(rows, indent=2, sort_keys=True), encoding="utf-8")
    weights = [{
        "source_name": r["source_name"], "hf_name": r["hf_name"], "adapter_name": r["adapter_name"],
        "output_name": r["output_file"], "shape": r["shape"], "precision": r["precision"], "status": r["status"],
        "component": r["component"], "scale_factor": r["scale_factor"], "adapter_family": r["adapter_family"],
        "source_names": r["source_names"], "transform": r["transform"], "qdq_restore": r["qdq_restore"],
    } for r in rows if str(r["output_file"] or "").endswith((".weights", ".bias"))]
    (folder / "weights_manifest.json").write_text(json.dumps({"weights": weights}, indent=2, sort_keys=True), encoding="utf-8")
    summary = {
        "total_tensors": len(rows),
        "counts_by_status": dict(Counter(r["status"] for r in rows)),
        "counts_by_component": dict(Counter(r["component"] for r in rows)),
        "counts_by_precision": dict(Counter(r["precision"] for r in rows)),
        "fallback_reasons": dict(Counter(r["fallback_reason"] or "" for r in rows if r["status"] in {"fallback", "unrecognized"})),
        "total_bytes": sum(int(r["bytes"]) for r in rows),
    }
    (folder / "conversion_summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True), encoding="utf-8")


MANIFEST = cfile.FOLDER_MANIFEST
MANIFEST_FORMAT = cfile.FOLDER_MANIFEST_FORMAT


def _write_manifest(folder: Path, source: str, result: CactusResult) -> None:
    files = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.name != MANIFEST:
            files[p.name] = {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
    from .. import __version__

    doc = {"format": MANIFEST_FORMAT, "producer": f"panelpack {__version__}", "target": "cactus",
           "source": os.path.abspath(source), "family": result.family, "bits": result.bits,
           "panels": result.panels, "files": files, "ledger": result.ledger,
           "seconds": round(result.seconds, 3)}
    (folder / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def check_folder(folder: str | os.PathLike) -> list[str]:
    """Structure and checksums of a cactus folder written by :func:`convert_cactus` (every file
    of ``manifest.json`` present with its size and sha256, every tensor file parses). Returns
    the problems found, ``"file: problem"`` (empty: all good)."""
    from ..verify.cq_check import structure_problems

    return [f"{w}: {p}" for w, p in structure_problems(folder)]
