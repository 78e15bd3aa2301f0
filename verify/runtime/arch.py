"""The decoder architectures the reference runtime runs, and their hyperparameters.

One row of :data:`ARCHITECTURES` per architecture: how its hyperparameters are named in GGUF
metadata (``<arch>.<key>``) and in an HF ``config.json``, which optional blocks it has (q/k/v
biases, q/k norms, post-attention/post-FFN norms), its FFN activation, its embedding scale and
its attention pattern. Anything outside the table is refused by name
(:class:`~panelpack.formats.errors.UnsupportedError`), never guessed.

RoPE conventions. HF checkpoints and the NeoX-style GGUF architectures (``qwen2``, ``gemma3``)
rotate the two *halves* of each head (``x[i]`` with ``x[i + d/2]``). llama.cpp's converter
permutes the q/k rows of ``llama`` checkpoints so that GGUF ``llama`` rotates adjacent *pairs*
(``x[2i]`` with ``x[2i + 1]``): :attr:`Hyper.rope_pairs` says which applies to the weights
at hand. Gemma norms: HF stores ``w`` and multiplies by ``1 + w``; llama.cpp's converter stores
``1 + w`` in the GGUF, so ``norm_offset`` is 1 for HF Gemma and 0 for GGUF Gemma.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...formats.errors import BadInputError, UnsupportedError

#: HF ``model_type`` / ``architectures[0]`` -> our (GGUF) architecture name
HF_MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "gemma3_text": "gemma3", "gemma3": "gemma3",
                  "LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                  "Gemma3ForCausalLM": "gemma3"}


@dataclass(frozen=True)
class ArchSpec:
    """What distinguishes one supported architecture from another."""

    name: str
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False  # post-attention and post-FFN RMSNorms (Gemma 3)
    activation: str = "silu"  # gated FFN activation: silu | gelu_tanh
    embed_scale_sqrt: bool = False  # multiply embeddings by sqrt(n_embd)
    gguf_rope_pairs: bool = False  # GGUF q/k rows permuted for pairwise rotation
    swa_pattern: int = 0  # every swa_pattern-th layer global, the others sliding (0: all global)
    swa_rope_base: float = 0.0  # RoPE base of the sliding layers (0: the global base)
    hf_norm_offset: float = 0.0  # HF stores w, the model multiplies by (hf_norm_offset + w)


#: the one table of supported architectures
ARCHITECTURES: dict[str, ArchSpec] = {a.name: a for a in (
    ArchSpec("llama", gguf_rope_pairs=True),
    ArchSpec("qwen2", qkv_bias=True),
    ArchSpec("gemma3", qk_norm=True, post_norms=True, activation="gelu_tanh", embed_scale_sqrt=True,
             swa_pattern=6, swa_rope_base=10000.0, hf_norm_offset=1.0),
)}


@dataclass(frozen=True)
class Hyper:
    """Hyperparameters of one model, whatever the source format."""

    arch: ArchSpec
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx: int
    eps: float
    rope_base: float
    rope_pairs: bool  # True: rotate (2i, 2i+1); False: rotate (i, i + d/2)
    norm_offset: float = 0.0
    attn_scale: float = 0.0  # multiplies q·k (1/sqrt(head_dim) unless the model says otherwise)
    sliding_window: int = 0
    swa_rope_base: float = 0.0
    tied_embeddings: bool = True
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = field(default_factory=tuple)

    def is_sliding(self, layer: int) -> bool:
        p = self.arch.swa_pattern
        return bool(p and self.sliding_window and (layer + 1) % p != 0)

    def layer_rope_base(self, layer: int) -> float:
        if self.is_sliding(layer) and self.swa_rope_base:
            return self.swa_rope_base
        return self.rope_base


def spec(name: str) -> ArchSpec:
    a = ARCHITECTURES.get(name)
    if a is None:
        raise UnsupportedError(f"architecture {name!r} is not supported by the runtime "
                               f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    return a


def _int(v, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < 0:
        raise BadInputError(f"hyperparameter {what} must be a non-negative integer, got {v!r}")
    return int(v)


def from_gguf(meta: Mapping[str, Any], n_vocab: int) -> Hyper:
    """Hyperparameters from GGUF key/values (``meta[key]`` is the decoded value)."""
    name = meta.get("general.architecture")
    if not isinstance(name, str):
        raise BadInputError("GGUF metadata has no general.architecture")
    a = spec(name)

    def get(key, default=None, required=True):
        full = f"{name}.{key}"
        if full in meta:
            return meta[full]
        if required and default is None:
            raise BadInputError(f"GGUF metadata lacks {full}")
        return default

    n_embd = _int(get("embedding_length"), "embedding_length")
    n_head = _int(get("attention.head_count"), "head_count")
    n_head_kv = get("attention.head_count_kv", n_head)
    head_dim = _int(get("attention.key_length", n_embd // max(n_head, 1)), "key_length")
    if _int(get("attention.value_length", head_dim), "value_length") != head_dim:
        raise UnsupportedError(f"{name}: key and value head sizes differ")
    if get("rope.scaling.type", "none") not in ("none", "linear") or float(get("rope.scaling.factor", 1.0)) != 1.0:
        raise UnsupportedError(f"{name}: RoPE scaling {get('rope.scaling.type')!r} is not supported by the runtime")
    eos = meta.get("tokenizer.ggml.eos_token_id")
    eot = meta.get("tokenizer.ggml.eot_token_id")
    return Hyper(
        arch=a, n_layer=_int(get("block_count"), "block_count"), n_embd=n_embd, n_head=n_head,
        n_head_kv=_int(n_head_kv, "head_count_kv"), head_dim=head_dim,
        n_ff=_int(get("feed_forward_length"), "feed_forward_length"), n_vocab=n_vocab,
        n_ctx=_int(get("context_length", 2048), "context_length"),
        eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_base=float(get("rope.freq_base", 10000.0)), rope_pairs=a.gguf_rope_pairs,
        norm_offset=0.0, attn_scale=1.0 / math.sqrt(head_dim),
        sliding_window=_int(get("attention.sliding_window", 0, required=False), "sliding_window"),
        swa_rope_base=float(get("rope.freq_base_swa", a.swa_rope_base, required=False) or 0.0),
        bos_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_ids=tuple(int(x) for x in (eos, eot) if isinstance(x, int)),
    )


def from_hf_config(cfg: Mapping[str, Any]) -> Hyper:
    """Hyperparameters from an HF ``config.json``."""
    cfg = dict(cfg.get("text_config") or {}, **{k: v for k, v in cfg.items() if k != "text_config"}) \
        if "hidden_size" not in cfg else cfg
    mt = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    name = HF_MODEL_TYPES.get(mt) or (HF_MODEL_TYPES.get(archs[0]) if archs else None)
    if name is None:
        raise UnsupportedError(f"architecture {mt or archs!r} is not supported by the runtime "
                               f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    a = spec(name)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        if key not in cfg:
            raise BadInputError(f"config.json lacks {key}")
    rs = cfg.get("rope_scaling")
    if rs and (rs.get("rope_type") or rs.get("type")) not in (None, "default") and float(rs.get("factor", 1.0)) != 1.0:
        raise UnsupportedError(f"{name}: RoPE scaling {rs!r} is not supported by the runtime")
    n_embd = _int(cfg["hidden_size"], "hidden_size")
    n_head = _int(cfg["num_attention_heads"], "num_attention_heads")
    head_dim = _int(cfg.get("head_dim") or n_embd // n_head, "head_dim")
    qpas = cfg.get("query_pre_attn_scalar")
    eos = cfg.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if isinstance(eos, int) else ())
    return Hyper(
        arch=a, n_layer=_int(cfg["num_hidden_layers"], "num_hidden_layers"), n_embd=n_embd, n_head=n_head,
        n_head_kv=_int(cfg.get("num_key_value_heads", n_head), "num_key_value_heads"), head_dim=head_dim,
        n_ff=_int(cfg["intermediate_size"], "intermediate_size"), n_vocab=_int(cfg["vocab_size"], "vocab_size"),
        n_ctx=_int(cfg.get("max_position_embeddings", 2048), "max_position_embeddings"),
        eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_base=float(cfg.get("rope_theta", 10000.0)),
        rope_pairs=False, norm_offset=a.hf_norm_offset,
        attn_scale=1.0 / math.sqrt(float(qpas) if qpas else head_dim),
        sliding_window=_int(cfg.get("sliding_window") or 0, "sliding_window") if a.swa_pattern else 0,
        swa_rope_base=float(cfg.get("rope_local_base_freq", a.swa_rope_base) or 0.0),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        bos_id=cfg.get("bos_token_id"), eos_ids=tuple(int(x) for x in eos_ids),
    )


# ---------------------------------------------------------------------------------------------
# tensor names: role -> (GGUF name, HF name); "{i}" is the layer
# ---------------------------------------------------------------------------------------------
_NAMES: dict[str, tuple[str, str]] = {
    "embed": ("token_embd.weight", "model.embed_tokens.weight"),
    "out_norm": ("output_norm.weight", "model.norm.weight"),
    "output": ("output.weight", "lm_head.weight"),
    "attn_norm": ("blk.{i}.attn_norm.weight", "model.layers.{i}.input_layernorm.weight"),
    "q": ("blk.{i}.attn_q.weight", "model.layers.{i}.self_attn.q_proj.weight"),
    "k": ("blk.{i}.attn_k.weight", "model.layers.{i}.self_attn.k_proj.weight"),
    "v": ("blk.{i}.attn_v.weight", "model.layers.{i}.self_attn.v_proj.weight"),
    "o": ("blk.{i}.attn_output.weight", "model.layers.{i}.self_attn.o_proj.weight"),
    "q_bias": ("blk.{i}.attn_q.bias", "model.layers.{i}.self_attn.q_proj.bias"),
    "k_bias": ("blk.{i}.attn_k.bias", "model.layers.{i}.self_attn.k_proj.bias"),
    "v_bias": ("blk.{i}.attn_v.bias", "model.layers.{i}.self_attn.v_proj.bias"),
    "q_norm": ("blk.{i}.attn_q_norm.weight", "model.layers.{i}.self_attn.q_norm.weight"),
    "k_norm": ("blk.{i}.attn_k_norm.weight", "model.layers.{i}.self_attn.k_norm.weight"),
    "post_attn_norm": ("blk.{i}.post_attention_norm.weight", "model.layers.{i}.post_attention_layernorm.weight"),
    "ffn_norm": ("blk.{i}.ffn_norm.weight", "model.layers.{i}.post_attention_layernorm.weight"),
    "post_ffn_norm": ("blk.{i}.post_ffw_norm.weight", "model.layers.{i}.post_feedforward_layernorm.weight"),
    "gate": ("blk.{i}.ffn_gate.weight", "model.layers.{i}.mlp.gate_proj.weight"),
    "up": ("blk.{i}.ffn_up.weight", "model.layers.{i}.mlp.up_proj.weight"),
    "down": ("blk.{i}.ffn_down.weight", "model.layers.{i}.mlp.down_proj.weight"),
}
#: HF names that differ by architecture (Gemma's FFN pre-norm has its own name)
_HF_OVERRIDES: dict[tuple[str, str], str] = {
    ("gemma3", "ffn_norm"): "model.layers.{i}.pre_feedforward_layernorm.weight",
}


def tensor_name(role: str, layer: int | None, hf: bool, arch: str) -> str:
    g, h = _NAMES[role]
    name = _HF_OVERRIDES.get((arch, role), h) if hf else g
    return name.format(i=layer) if layer is not None else name
