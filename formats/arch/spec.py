"""One architecture as data: :class:`Arch`, the row of the table (see :mod:`panelpack.formats.arch`).

A row says how the architecture is named (HF ``model_type`` / ``architectures[0]``, llama.cpp's
``general.architecture``), which tensor roles it has and when (:data:`CONDITIONS`), the names
that differ from :data:`~.names.ROLES`, its blocks (activation, norm offset, embedding scale,
q/k permutation in GGUF), how its layers are laid out (sliding windows, layers without RoPE),
its RoPE defaults and the config forms transformers accepts for it, its ``config.json``
defaults (transformers 5.5.4's, the same ``to_dict`` gives), what llama.cpp's converter does
to its tensors on the way to GGUF (:data:`GGUF_TRANSFORMS`) and which of its converter classes
writes it (the GGUF writer's hooks, convert/gguf_arch.py), and its cactus-compute family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .names import ROLES

#: when a role's tensor exists (the flags of :class:`~.hyper.Hyper`)
CONDITIONS = {
    "always": "every checkpoint of the architecture has it",
    "untied": "the output head is not tied to the embedding (tie_word_embeddings false)",
    "attention_bias": "config attention_bias: q, k, v and o projections have biases",
    "mlp_bias": "config mlp_bias: gate, up and down projections have biases",
    "rope_freqs": "GGUF only: Llama 3 RoPE scaling, written by llama.cpp's converter as a tensor",
    "longrope": "GGUF only: LongRoPE factors, written by llama.cpp's converter as tensors",
    "per_layer_input": "config hidden_size_per_layer_input: per-layer input embeddings (Gemma 4)",
    "own_kv": "per layer: the layer computes its keys (not a KV-shared layer; Gemma 4's num_kv_shared_layers)",
    "own_v": "per layer: the layer computes its values (own_kv, and not attention_k_eq_v's global layers)",
}

#: what llama.cpp's ``convert_hf_to_gguf.py`` does to a role's HF tensor (and its inverse)
GGUF_TRANSFORMS = {
    "permute_q": "rows [head][2][d/2] stored as [head][d/2][2] over n_head heads (LlamaModel.permute): "
                 "GGUF rotates adjacent pairs where HF rotates halves",
    "permute_k": "the same over n_head_kv heads",
    "plus_one": "w + 1 stored (HF computes x·(1 + w); Gemma3Model.norm_shift)",
    "vocab_rows": "rows past the tokenizer's vocabulary dropped (Gemma3Model)",
    "squeeze_1": "HF [d, 1, L] stored [d, L]: the unit axis squeezed (LFM2Model.modify_tensors: ggml's "
                 "ssm_conv takes a 2-D kernel)",
}

#: layer-layout rules for configs without ``layer_types`` (see :mod:`.hyper`)
LAYER_RULES = {
    "none": "every layer full attention",
    "all": "every layer sliding when sliding_window is set (Mistral, Phi-3)",
    "qwen": "sliding from layer max_window_layers on, when use_sliding_window (Qwen2/Qwen3)",
    "every_nth": "every swa_pattern-th layer full, the others sliding (Gemma 3's sliding_window_pattern)",
    "nope": "the layers without RoPE sliding, when use_sliding_window (SmolLM3)",
    "conv": "layer_types, else full_attn_idxs: full attention there, short convolution elsewhere (LFM2; "
            "GGUF: head_count_kv 0 marks a convolution layer)",
}


def _frozen(d: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(d or {}))


@dataclass(frozen=True)
class Arch:
    """One architecture (a row of :data:`panelpack.formats.arch.ARCHITECTURES`)."""

    name: str
    gguf_arch: str  # llama.cpp's general.architecture for it
    hf_model_types: tuple[str, ...]
    hf_architectures: tuple[str, ...]
    roles: Mapping[str, str]  # role -> condition (CONDITIONS), in the order a layer runs them
    doc: str = ""
    hf_names: Mapping[str, str] = field(default_factory=dict)  # role -> HF name, where not ROLES'
    gguf_names: Mapping[str, str] = field(default_factory=dict)
    cactus_names: Mapping[str, str] = field(default_factory=dict)
    activation: str = "silu"  # gated FFN activation: silu | gelu_tanh
    hf_norm_offset: float = 0.0  # HF stores w and multiplies by (offset + w)
    gguf_permuted: bool = False  # llama.cpp's converter permutes q/k rows (pairwise RoPE)
    embed_scale_sqrt: bool = False  # embeddings multiplied by sqrt(n_embd)
    layer_rule: str = "none"  # LAYER_RULES
    swa_pattern: int = 0  # every_nth: the default period (HF and llama.cpp)
    nope_interval: int = 0  # every n-th layer without RoPE (HF default; llama.cpp's fixed step)
    layer_kinds: tuple[str, ...] = ("full_attention", "sliding_attention")  # the kinds its layers may be
    hf_n_ff: Callable[[Mapping[str, Any]], int] | None = None  # the FFN width from config.json, where derived
    hf_layers: Callable[..., Any] | None = None  # builds the LayerSpecs itself (Gemma 4: gemma4.hf_layers)
    gguf_layers: Callable[..., Any] | None = None  # the same from GGUF metadata (Gemma 4: gemma4.gguf_layers)
    rope_theta: Mapping[str, float] = field(default_factory=dict)  # layer kind ("*": any) -> default base
    hf_theta_keys: Mapping[str, str] = field(default_factory=dict)  # layer kind -> 4.x top-level key
    rope_scaling_kinds: tuple[str, ...] | None = None  # 4.x rope_scaling applies to these kinds only
    rope_aliases: Mapping[str, str] = field(default_factory=dict)  # rope_type spellings this model maps
    hf_attn_scale: str = "head_dim"  # head_dim | query_pre_attn_scalar | attention_multiplier
    gguf_attn_scale: Callable[[Any], float] | None = None  # llama.cpp's rule where it has its own
    hf_defaults: Mapping[str, Any] = field(default_factory=dict)  # transformers 5.5.4 config defaults
    hf_aliases: Mapping[str, str] = field(default_factory=dict)  # older config key -> the key it sets (it wins)
    gguf_transforms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # role -> GGUF_TRANSFORMS
    gguf_converter: str = "LlamaModel"  # llama.cpp's converter class in convert_hf_to_gguf.py (convert/gguf_arch.py)
    hf_wrapper_types: tuple[str, ...] = ()  # multimodal model types whose text_config is this row (Gemma 4: gemma4)
    hf_text_prefix: str = ""  # their text tower's prefix for HF's "model." (naming "hf_text"; lm_head stays)
    cactus_family: str | None = None  # cactus-compute 2.2.2's adapter family
    cactus_refusal: str = ""  # why the cactus target refuses it (when cactus_family is None)

    def __post_init__(self):
        for attr in ("roles", "hf_names", "gguf_names", "cactus_names", "rope_theta", "hf_theta_keys",
                     "rope_aliases", "hf_defaults", "hf_aliases", "gguf_transforms"):
            object.__setattr__(self, attr, _frozen(getattr(self, attr)))
        unknown = [r for r in self.roles if r not in ROLES] + [c for c in self.roles.values() if c not in CONDITIONS]
        unknown += [t for ts in self.gguf_transforms.values() for t in ts if t not in GGUF_TRANSFORMS]
        if unknown or self.layer_rule not in LAYER_RULES:
            raise ValueError(f"architecture {self.name}: unknown roles, conditions or rules {unknown or self.layer_rule}")

    # -- names ---------------------------------------------------------------------------------
    def hf_name(self, role: str) -> str:
        return self.hf_names.get(role, ROLES[role].hf)

    def gguf_name(self, role: str) -> str:
        return self.gguf_names.get(role, ROLES[role].gguf)

    def cactus_name(self, role: str) -> str | None:
        return self.cactus_names.get(role, ROLES[role].cactus)

    def name_of(self, role: str, naming: str) -> str:
        """The role's name template in ``naming`` (``hf``, ``gguf`` or ``cactus``; ``hf_text``: the
        text tower of a multimodal wrapper's checkpoint, ``model.`` -> :attr:`hf_text_prefix`)."""
        if naming == "hf_text":
            t = self.hf_name(role)
            return self.hf_text_prefix + t[len("model."):] if self.hf_text_prefix and t.startswith("model.") else t
        return {"hf": self.hf_name, "gguf": self.gguf_name, "cactus": self.cactus_name}[naming](role) or ""

    def default_theta(self, kind: str) -> float:
        return float(self.rope_theta.get(kind, self.rope_theta.get("*", 10000.0)))
