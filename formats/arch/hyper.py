"""A model's hyperparameters, read through its architecture row: :class:`Hyper` with one
:class:`LayerSpec` per layer.

:func:`from_hf_config` reads every form transformers writes: 4.x top-level ``rope_theta`` /
``rope_scaling`` / ``rope_local_base_freq`` / ``partial_rotary_factor``, 5.x
``rope_parameters`` flat or per layer type, ``layer_types`` or the older per-family switches
(``use_sliding_window`` + ``max_window_layers``, ``sliding_window_pattern``,
``no_rope_layers``), with transformers 5.5.4's defaults for the model type where a key is
absent. :func:`from_gguf` reads what llama.cpp reads. A setting the runtime does not implement
(a RoPE type, attention-logit softcapping, bidirectional attention, an activation, a layer kind,
MoE experts, a vision or audio tower) raises :class:`~panelpack.formats.errors.UnsupportedError`
naming it; nothing is defaulted that the checkpoint states.

Everything may vary per layer (a :class:`LayerSpec` each: kind, heads, head size, FFN width,
window, RoPE or none, q·k scale): GGUF per-layer arrays (``head_count_kv``,
``feed_forward_length``), RoPE per layer kind. A layer's kind is full or sliding attention, or
LFM2's short convolution (``conv``: no KV heads, no RoPE; ``layer_types`` / ``full_attn_idxs`` in
``config.json``, a zero in GGUF's ``head_count_kv``), among the kinds its row allows
(``Arch.layer_kinds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import BadInputError, UnsupportedError
from . import keys, rope
from .names import ROLES
from .spec import Arch

#: the layer kinds the runtime runs (transformers' layer_types names); a row says which of them
#: its layers may be (``Arch.layer_kinds``)
KINDS = ("full_attention", "sliding_attention", "conv")
#: config.json activation names -> the runtime's
HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh"}
#: the role conditions (spec.CONDITIONS) that hold layer by layer
LAYER_CONDITIONS: dict[str, Callable[["LayerSpec"], bool]] = {
    "own_kv": lambda L: L.kv_from < 0,
    "own_v": lambda L: L.kv_from < 0 and not L.k_eq_v,
}


@dataclass(frozen=True)
class LayerSpec:
    kind: str  # KINDS
    n_head: int
    n_head_kv: int
    head_dim: int
    head_dim_v: int
    n_ff: int
    window: int  # attends to the last `window` positions (itself included); 0: all before it
    rope: rope.Rope | None  # None: this layer has no RoPE
    attn_scale: float  # multiplies q·k
    kv_from: int = -1  # >= 0: the layer reads the keys and values of that earlier layer (Gemma 4's shared KV)
    k_eq_v: bool = False  # the values are the key projection (before its norm and RoPE): attention_k_eq_v

    @property
    def mixer(self) -> str:
        """The block that mixes positions in this layer: ``attention`` or ``conv`` (the
        ``block`` of :class:`~.names.Role`)."""
        return "conv" if self.kind == "conv" else "attention"

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_head_kv * self.head_dim

    @property
    def v_dim(self) -> int:
        return self.n_head_kv * self.head_dim_v

    @property
    def qkv_dim(self) -> int:
        return self.q_dim + self.kv_dim + self.v_dim

    @property
    def ff2(self) -> int:
        return 2 * self.n_ff


@dataclass(frozen=True)
class Hyper:
    """Hyperparameters of one model, whatever the source format."""

    arch: Arch
    naming: str  # "hf", "hf_text" (a multimodal wrapper's text tower) or "gguf": how the checkpoint names its tensors
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ctx: int
    eps: float
    layers: tuple[LayerSpec, ...]
    flags: frozenset[str] = frozenset()  # spec.CONDITIONS that hold ("untied", "attention_bias", ...)
    activation: str = "silu"
    rope_pairs: bool = False  # True: rotate (2i, 2i+1) (GGUF llama family); False: (i, i + d/2)
    norm_offset: float = 0.0  # norms multiply by (norm_offset + w)
    embed_scale: float = 1.0
    residual_scale: float = 1.0  # the attention and FFN outputs are multiplied by it
    logit_scale: float = 1.0  # logits are divided by it
    final_softcap: float = 0.0  # logits -> cap·tanh(logits/cap) (0: none)
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = field(default_factory=tuple)
    conv_l: int = 0  # the short convolution's kernel length (LFM2's conv_L_cache; 0: no convolution layers)
    v_norm: bool = False  # values RMS-normalized per head, without a weight (Gemma 4)
    n_embd_pl: int = 0  # width of each layer's per-layer input (Gemma 4's hidden_size_per_layer_input; 0: none)
    n_vocab_pl: int = 0  # rows of the per-layer input embedding (vocab_size_per_layer_input)
    n_layer_pl: int = 0  # layers the per-layer inputs cover (n_layer; kept when a model is truncated)

    @property
    def tied(self) -> bool:
        return "untied" not in self.flags

    def has(self, role: str) -> bool:
        """Whether this model has the role's tensor(s) (a per-layer condition: in some layer)."""
        cond = self.arch.roles.get(role)
        if cond in LAYER_CONDITIONS:
            return any(LAYER_CONDITIONS[cond](L) for L in self.layers)
        return cond is not None and (cond == "always" or cond in self.flags)

    def has_at(self, role: str, layer: int) -> bool:
        """Whether layer ``layer`` has the role's tensor (a role of one mixer block exists only in
        the layers of that block; a per-layer condition holds in that layer)."""
        block = ROLES[role].block
        L = self.layers[layer]
        cond = self.arch.roles.get(role)
        if cond in LAYER_CONDITIONS and not LAYER_CONDITIONS[cond](L):
            return False
        return self.has(role) and (not block or block == L.mixer)

    def truncated(self, n_layer: int) -> "Hyper":
        return replace(self, n_layer=n_layer, layers=self.layers[:n_layer])

    def dims(self, layer: int | None) -> dict[str, int]:
        """The shape symbols of :mod:`.names` for a layer (None: model-level)."""
        rd = max((L.rope.dim for L in self.layers if L.rope is not None), default=0)
        d = {"n_embd": self.n_embd, "n_vocab": self.n_vocab, "rope_half": rd // 2, "conv_L": self.conv_l,
             "conv3": 3 * self.n_embd, "one": 1, "n_embd_pl": self.n_embd_pl, "n_vocab_pl": self.n_vocab_pl,
             "pl_total": self.n_layer_pl * self.n_embd_pl}
        if layer is not None:
            L = self.layers[layer]
            d.update(q_dim=L.q_dim, kv_dim=L.kv_dim, v_dim=L.v_dim, qkv_dim=L.qkv_dim, head_dim=L.head_dim,
                     n_ff=L.n_ff, ff2=L.ff2)
        return d


# ---------------------------------------------------------------------------------------------
# which row
# ---------------------------------------------------------------------------------------------
#: model types and architectures panelpack knows and does not run, with the reason
REFUSED = {
    "qwen2_moe": "mixture-of-experts FFN layers", "qwen3_moe": "mixture-of-experts FFN layers",
    "mixtral": "mixture-of-experts FFN layers", "phimoe": "mixture-of-experts FFN layers",
    "granitemoe": "mixture-of-experts FFN layers", "granitemoeshared": "mixture-of-experts FFN layers",
    "olmoe": "mixture-of-experts FFN layers", "llama4": "mixture-of-experts FFN layers and chunked attention",
    "gemma2": "attention-logit softcapping", "gemma3n": "AltUp and per-layer inputs",
    "lfm2_moe": "mixture-of-experts FFN layers",
    "lfm2moe": "mixture-of-experts FFN layers",
    "qwen3_next": "linear-attention layers", "granitemoehybrid": "Mamba layers",
}


def _refuse_unknown(what: str, name: Any, supported: Iterable[str]) -> UnsupportedError:
    reason = REFUSED.get(str(name).lower()) if isinstance(name, str) else None
    if reason:
        return UnsupportedError(f"architecture {name!r}: {reason} are not run by the runtime")
    return UnsupportedError(f"architecture {name!r} is not supported by the runtime "
                            f"(supported: {', '.join(sorted(supported))})")


def _int(v: Any, what: str, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < minimum:
        raise BadInputError(f"hyperparameter {what} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def _float(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadInputError(f"hyperparameter {what} must be a number, got {v!r}")
    return float(v)


def _per_layer(v: Any, n: int, what: str) -> list[int]:
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise BadInputError(f"hyperparameter {what} has {len(v)} values for {n} layers")
        return [_int(x, what) for x in v]
    return [_int(v, what)] * n


def text_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The text model's config: a multimodal wrapper's ``text_config`` merged over it (the
    outer ``architectures`` kept, as transformers' own converters read it)."""
    tc = cfg.get("text_config")
    if isinstance(tc, Mapping) and "hidden_size" not in cfg:
        return {**{k: v for k, v in cfg.items() if k != "text_config"}, **tc,
                **({"architectures": cfg["architectures"]} if "architectures" in cfg else {})}
    return dict(cfg)


def hf_arch(cfg: Mapping[str, Any], table: Mapping[str, Arch]) -> Arch:
    """The row of an HF config (``model_type``; ``architectures[0]`` where it has none, as
    transformers' own converters do); the unsupported parts of a known model (experts, towers)
    are refused by name."""
    for tower in ("vision_config", "audio_config"):
        if isinstance(cfg.get(tower), Mapping):
            archs = cfg.get("architectures") or [cfg.get("model_type")]
            raise UnsupportedError(f"{archs[0]}: a {tower.split('_')[0]} tower ({tower}); the runtime runs text "
                                   f"decoders only (plain repacking passes towers through as tensors; a gemma4 "
                                   f"checkpoint's towers: written by --target cactus, dropped from GGUF output)")
    c = text_config(cfg)
    mt = c.get("model_type")
    archs = c.get("architectures") or []
    by_type = {t: a for a in table.values() for t in a.hf_model_types}
    if isinstance(cfg.get("text_config"), Mapping):  # a multimodal wrapper's text tower (Gemma 4's gemma4)
        by_type.update({t: a for a in table.values() for t in a.hf_wrapper_types})
    by_class = {t: a for a in table.values() for t in a.hf_architectures}
    row = by_type.get(mt) if isinstance(mt, str) else None
    if row is None and not mt and archs and isinstance(archs[0], str):  # no model_type: the class decides
        row = by_class.get(archs[0])
    if row is None:
        raise _refuse_unknown("HF", mt or (archs[0] if archs else None), by_type)
    n_exp = keys.hf_get(c, "n_expert", 0)
    if isinstance(n_exp, int) and n_exp > 0:
        raise UnsupportedError(f"{row.name}: mixture-of-experts FFN layers ({n_exp} experts) are not run "
                               f"by the runtime")
    return row


# ---------------------------------------------------------------------------------------------
# config.json
# ---------------------------------------------------------------------------------------------
def _layer_kinds(c: Mapping[str, Any], arch: Arch, n: int) -> list[str]:
    lt = c.get("layer_types")
    if arch.layer_rule in ("qwen", "every_nth", "nope") and isinstance(lt, list):
        if len(lt) < n:
            raise BadInputError(f"config.json layer_types has {len(lt)} entries for {n} layers")
        kinds = list(lt[:n])
    elif arch.layer_rule == "qwen":
        sw, mwl = c.get("sliding_window"), _int(c.get("max_window_layers", n), "max_window_layers")
        on = bool(c.get("use_sliding_window")) and sw is not None
        kinds = ["sliding_attention" if on and i >= mwl else "full_attention" for i in range(n)]
    elif arch.layer_rule == "every_nth":
        p = _int(c.get("sliding_window_pattern", arch.swa_pattern), "sliding_window_pattern", 1)
        kinds = ["sliding_attention" if (i + 1) % p else "full_attention" for i in range(n)]
    elif arch.layer_rule == "nope":
        nope = _nope_layers(c, arch, n)
        on = bool(c.get("use_sliding_window")) and c.get("sliding_window") is not None
        kinds = ["sliding_attention" if on and nope[i] else "full_attention" for i in range(n)]
    elif arch.layer_rule == "all":
        kinds = ["sliding_attention" if c.get("sliding_window") else "full_attention"] * n
    elif arch.layer_rule == "conv":
        kinds = _conv_kinds(c, n)
    else:
        kinds = ["full_attention"] * n
    for i, k in enumerate(kinds):
        if k not in arch.layer_kinds:
            raise UnsupportedError(f"{arch.name}: layer {i} is {k!r}; the runtime runs {' and '.join(arch.layer_kinds)} "
                                   f"layers of {arch.name}")
    return kinds


def _conv_kinds(c: Mapping[str, Any], n: int) -> list[str]:
    """LFM2: ``layer_types``, else the attention layers' indices ``full_attn_idxs`` (convolution
    elsewhere), else every layer attention (transformers' default)."""
    lt = c.get("layer_types")
    if isinstance(lt, list):
        if len(lt) < n:
            raise BadInputError(f"config.json layer_types has {len(lt)} entries for {n} layers")
        return list(lt[:n])
    idxs = c.get("full_attn_idxs")
    if idxs is None:
        return ["full_attention"] * n
    if not isinstance(idxs, list):
        raise BadInputError(f"config.json full_attn_idxs must be a list of layer indices, got {idxs!r}")
    attn = {_int(i, "full_attn_idxs") for i in idxs}
    return ["full_attention" if i in attn else "conv" for i in range(n)]


def _windows(c: Mapping[str, Any], arch: Arch, kinds: Sequence[str]) -> list[int]:
    sw = c.get("sliding_window")
    if arch.layer_rule in ("qwen", "nope") and not c.get("use_sliding_window"):
        sw = None
    w = _int(sw, "sliding_window", 1) if sw is not None else 0
    return [w if k == "sliding_attention" else 0 for k in kinds]


def _nope_layers(c: Mapping[str, Any], arch: Arch, n: int) -> list[bool]:
    """True where a layer runs without RoPE."""
    if not arch.nope_interval:
        return [False] * n
    nr = c.get("no_rope_layers")
    if isinstance(nr, list):
        if len(nr) < n:
            raise BadInputError(f"config.json no_rope_layers has {len(nr)} entries for {n} layers")
        return [not bool(x) for x in nr[:n]]
    step = _int(c.get("no_rope_layer_interval", arch.nope_interval), "no_rope_layer_interval", 1)
    return [(i + 1) % step == 0 for i in range(n)]


def hf_rope_parameters(c: Mapping[str, Any], arch: Arch, kinds: Iterable[str]) -> dict[str, dict[str, Any]]:
    """transformers 5.5.4's normalized ``rope_parameters`` of each layer kind, from any form."""
    kinds = sorted(set(kinds))
    rp = c.get("rope_parameters")
    per: dict[str, dict[str, Any]]
    if isinstance(rp, Mapping) and rp and all(isinstance(v, Mapping) for v in rp.values()):
        per = {k: dict(v) for k, v in rp.items()}  # 5.x, one dict per layer type
    else:
        flat = dict(rp) if isinstance(rp, Mapping) else {}
        rs = c.get("rope_scaling")
        scaling: Mapping[str, Any] = rs if isinstance(rs, Mapping) else {}
        per = {}
        for k in kinds:
            d = dict(flat)
            if arch.rope_scaling_kinds is None or k in arch.rope_scaling_kinds:
                d.update(scaling)
            per[k] = d
    out = {}
    for k in kinds:
        d = dict(per.get(k) or {})
        if "rope_type" not in d:
            d["rope_type"] = d.get("type", "default")
        d["rope_type"] = arch.rope_aliases.get(d["rope_type"], d["rope_type"])
        if d.get("rope_theta") is None:
            key = arch.hf_theta_keys.get(k, "rope_theta")
            d["rope_theta"] = c[key] if c.get(key) is not None else arch.default_theta(k)
        if c.get("partial_rotary_factor") is not None:
            d["partial_rotary_factor"] = c["partial_rotary_factor"]
        if d["rope_type"] in ("llama3", "yarn", "longrope"):
            if c.get("original_max_position_embeddings") is not None:  # transformers gives it priority
                d["original_max_position_embeddings"] = c["original_max_position_embeddings"]
            d.setdefault("original_max_position_embeddings", c.get("max_position_embeddings"))
        out[k] = d
    return out


def _activation(c: Mapping[str, Any], arch: Arch) -> str:
    name = c.get("hidden_activation") or c.get("hidden_act") or arch.activation
    act = HF_ACTIVATIONS.get(name) if isinstance(name, str) else None
    if act is None:
        raise UnsupportedError(f"{arch.name}: activation {name!r} is not implemented by the runtime "
                               f"(it runs {', '.join(sorted(HF_ACTIVATIONS))})")
    return act


def from_hf_config(cfg: Mapping[str, Any], table: Mapping[str, Arch]) -> Hyper:
    """Hyperparameters of an HF ``config.json`` (see the module doc)."""
    arch = hf_arch(cfg, table)
    raw = text_config(cfg)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        if key not in raw:
            raise BadInputError(f"config.json lacks {key}")
    c = {**arch.hf_defaults, **raw}
    for old, new in arch.hf_aliases.items():  # transformers pops the older key over the newer
        if raw.get(old) is not None:
            c[new] = raw[old]
    for key, why in (("attn_logit_softcapping", "attention-logit softcapping"),
                     ("use_bidirectional_attention", "bidirectional attention"),
                     ("conv_bias", "biases on the short convolution")):
        # Gemma 4's "vision": bidirectional among image tokens only, text stays causal
        if c.get(key) and not (key == "use_bidirectional_attention" and c[key] == "vision"):
            raise UnsupportedError(f"{arch.name}: {why} ({key}={c[key]!r}) is not implemented by the runtime")
    n = _int(c["num_hidden_layers"], "num_hidden_layers", 1)
    n_embd = _int(c["hidden_size"], "hidden_size", 1)
    n_head = _int(c["num_attention_heads"], "num_attention_heads", 1)
    n_kv = _int(c.get("num_key_value_heads") or n_head, "num_key_value_heads", 1)
    head_dim = _int(c.get("head_dim") or n_embd // n_head, "head_dim", 1)
    n_ff = _int(arch.hf_n_ff(c) if arch.hf_n_ff else c["intermediate_size"], "intermediate_size", 1)
    n_ctx = _int(c.get("max_position_embeddings") or 2048, "max_position_embeddings", 1)
    kinds = _layer_kinds(c, arch, n)
    windows = _windows(c, arch, kinds)
    nope = _nope_layers(c, arch, n)
    params = hf_rope_parameters(c, arch, kinds)
    ropes = {k: rope.from_hf(p, head_dim, n_ctx, f"{arch.name} {k}") for k, p in params.items()}
    if arch.hf_attn_scale == "query_pre_attn_scalar":
        scale = _float(c.get("query_pre_attn_scalar") or head_dim, "query_pre_attn_scalar") ** -0.5
    elif arch.hf_attn_scale == "attention_multiplier":
        scale = _float(c.get("attention_multiplier", 1.0), "attention_multiplier")
    else:
        scale = 1.0 / math.sqrt(head_dim)
    conv = [k == "conv" for k in kinds]
    layers = tuple(LayerSpec(kinds[i], n_head, 0 if conv[i] else n_kv, head_dim, head_dim, n_ff, windows[i],
                             None if nope[i] or conv[i] else ropes[kinds[i]], scale) for i in range(n))
    conv_l = _int(keys.hf_get(c, "conv_l", 0), "conv_L_cache", 2) if any(conv) else 0
    flags = {f for f, on in (("untied", not c.get("tie_word_embeddings", True)),
                             ("attention_bias", bool(c.get("attention_bias"))),
                             ("mlp_bias", bool(c.get("mlp_bias")))) if on}
    naming = "hf_text" if cfg.get("model_type") in arch.hf_wrapper_types else "hf"  # a wrapper's text tower
    extra: dict[str, Any] = {}
    if arch.hf_layers is not None:  # a row that lays out its layers itself (Gemma 4)
        layers, extra = arch.hf_layers(c, layers, params, n_ctx)
        flags |= set(extra.pop("flags", ()))
    eos = c.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if isinstance(eos, int) else ())
    emb = math.sqrt(n_embd) if arch.embed_scale_sqrt else _float(c.get("embedding_multiplier", 1.0), "embedding_multiplier")
    return Hyper(
        arch=arch, naming=naming, n_layer=n, n_embd=n_embd, n_vocab=_int(c["vocab_size"], "vocab_size", 1),
        n_ctx=n_ctx, eps=_float(keys.hf_get(c, "eps", 1e-6), "rms_norm_eps"), layers=layers,
        flags=frozenset(flags), activation=_activation(c, arch), rope_pairs=False, norm_offset=arch.hf_norm_offset,
        embed_scale=emb, residual_scale=_float(c.get("residual_multiplier", 1.0), "residual_multiplier"),
        logit_scale=_float(c.get("logits_scaling", 1.0), "logits_scaling"),
        final_softcap=_float(c.get("final_logit_softcapping") or 0.0, "final_logit_softcapping"),
        bos_id=c.get("bos_token_id") if isinstance(c.get("bos_token_id"), int) else None,
        eos_ids=tuple(int(x) for x in eos_ids if isinstance(x, int)), conv_l=conv_l, **extra,
    )


# ---------------------------------------------------------------------------------------------
# GGUF
# ---------------------------------------------------------------------------------------------
def gguf_arch(meta: Mapping[str, Any], table: Mapping[str, Arch]) -> Arch:
    name = meta.get("general.architecture")
    if not isinstance(name, str):
        raise BadInputError("GGUF metadata has no general.architecture")
    row = table.get(name)
    if row is None or row.gguf_arch != name:
        row = next((a for a in table.values() if a.gguf_arch == name and a.name == name), None)
    if row is None:
        raise _refuse_unknown("GGUF", name, {a.gguf_arch for a in table.values()})
    return row


def _gguf_kinds(meta: Mapping[str, Any], arch: Arch, n: int, window: int) -> list[str]:
    """llama.cpp runs a window only for the every_nth families (Gemma 3): it disables Phi-3's
    (``llama_model_phi3::load_arch_hparams``) and reads none for the others; so does the runtime
    on a GGUF, whose semantics are llama.cpp's."""
    if not window or arch.layer_rule != "every_nth":
        return ["full_attention"] * n
    pat = keys.gguf_get(meta, "swa_pattern", arch.gguf_arch)
    if isinstance(pat, list):  # one bool per layer, true: sliding (llama.cpp's is_swa array)
        if len(pat) != n:
            raise BadInputError(f"attention.sliding_window_pattern has {len(pat)} values for {n} layers")
        return ["sliding_attention" if x else "full_attention" for x in pat]
    p = _int(arch.swa_pattern if pat is None else pat, "sliding_window_pattern", 0)
    return ["sliding_attention" if p and (i + 1) % p else "full_attention" for i in range(n)]


def from_gguf(meta: Mapping[str, Any], n_vocab: int, names: Iterable[str], table: Mapping[str, Arch],
              vector: Callable[[str], Any] | None = None) -> Hyper:
    """Hyperparameters from GGUF key/values; ``names`` are the file's tensor names and
    ``vector(name)`` reads a 1-D tensor (the RoPE factors llama.cpp's converter writes)."""
    arch = gguf_arch(meta, table)
    a = arch.gguf_arch
    names = set(names)

    def get(name, default=None, required=False):
        v = keys.gguf_get(meta, name, a)
        if v is None:
            if required:
                raise BadInputError(f"GGUF metadata lacks {keys.gguf_key(name, a)}")
            return default
        return v

    if _int(get("n_expert", 0), "expert_count") > 0:
        raise UnsupportedError(f"{a}: mixture-of-experts FFN layers are not run by the runtime")
    if get("attn_softcap"):
        raise UnsupportedError(f"{a}: attention-logit softcapping is not implemented by the runtime")
    n = _int(get("n_layer", required=True), "block_count", 1)
    n_embd = _int(get("n_embd", required=True), "embedding_length", 1)
    heads = _per_layer(get("n_head", required=True), n, "head_count")
    kv = _per_layer(get("n_head_kv", heads), n, "head_count_kv")
    ffs = _per_layer(get("n_ff", required=True), n, "feed_forward_length")
    # a layer without KV heads is a short-convolution layer where the row has them (llama.cpp's
    # is_recr: LFM2's converter writes head_count_kv 0 there)
    conv = [x == 0 and "conv" in arch.layer_kinds for x in kv]
    if min(heads) < 1 or any(x < 1 and not c for x, c in zip(kv, conv)):
        raise UnsupportedError(f"{a}: layers without attention heads are not run by the runtime")
    head_dim = _int(get("head_dim", n_embd // heads[0]), "key_length", 1)
    if _int(get("head_dim_v", head_dim), "value_length") != head_dim or \
            get("head_dim_swa") is not None and get("head_dim_v_swa", get("head_dim_swa")) != get("head_dim_swa"):
        raise UnsupportedError(f"{a}: key and value head sizes differ")
    window = _int(get("sliding_window", 0), "sliding_window")
    if window and "sliding_attention" not in arch.layer_kinds:
        raise UnsupportedError(f"{a}: a sliding window ({window}) on its attention layers is not run by the runtime")
    kinds = ["conv" if c else k for c, k in zip(conv, _gguf_kinds(meta, arch, n, window))]
    conv_l = _int(get("conv_l", required=True), "shortconv.l_cache", 2) if any(conv) else 0
    n_ctx = _int(get("n_ctx", 2048), "context_length", 1)
    scaling = str(get("rope_scaling_type", "none"))
    if get("rope_scaling_type") is None and get("rope_scaling_factor") not in (None, 0, 1):
        scaling = "linear"  # llama.cpp's default type
    orig = _int(get("rope_orig_ctx", n_ctx), "rope.scaling.original_context_length", 1)
    rope_dim = _int(get("rope_dim", head_dim), "rope.dimension_count", 1)
    # llama.cpp reads these tensors whatever the keys say (Phi-3's converter writes LongRoPE as
    # rope_factors_long/short and rope.scaling.attn_factor, no rope.scaling.type)
    ff = None
    factors = "rope_freqs.weight" if "rope_freqs.weight" in names else (
        "rope_factors_short.weight" if "rope_factors_short.weight" in names else None)
    if factors is not None:
        ff = vector(factors) if vector else None
        if ff is None:
            raise BadInputError(f"{factors}: the RoPE factors cannot be read")
        if factors == "rope_factors_short.weight":
            scaling = "longrope"
    if get("yarn_log_multiplier"):
        raise UnsupportedError(f"{a}: YaRN's log multiplier (mscale_all_dim) is not implemented by the runtime")
    factor = float(get("rope_scaling_factor", 1.0) or 1.0)
    attn = float(get("rope_attn_factor", 1.0) or 1.0)
    yarn = {k: float(get(f"yarn_{k}")) for k in ("beta_fast", "beta_slow") if get(f"yarn_{k}") is not None}

    def make(base_key: str, where: str) -> rope.Rope:
        return rope.from_gguf(float(get(base_key, 10000.0)), rope_dim, head_dim, scaling, factor, orig, attn, ff,
                              where, yarn)

    ropes = {"full_attention": make("rope_theta", f"{a} rope"),
             "sliding_attention": make("rope_theta_swa", f"{a} rope (sliding layers)")}
    nope = [bool(arch.nope_interval) and (i + 1) % arch.nope_interval == 0 for i in range(n)]
    layers = []
    for i in range(n):
        lay = {"n_head": heads[i], "head_dim": head_dim}
        if get("attn_scale"):
            scale = float(get("attn_scale"))
        elif arch.gguf_attn_scale is not None:
            scale = arch.gguf_attn_scale({"layer": lay, "n_layer": n, "n_embd": n_embd})
        else:
            scale = 1.0 / math.sqrt(head_dim)
        layers.append(LayerSpec(kinds[i], heads[i], kv[i], head_dim, head_dim, ffs[i],
                                window if kinds[i] == "sliding_attention" else 0,
                                None if nope[i] or conv[i] else ropes[kinds[i]], scale))
    flags = {"untied"} if "output.weight" in names else set()
    if "blk.0.attn_q.bias" in names and arch.roles.get("q_bias") == "attention_bias":
        flags.add("attention_bias")
    if "blk.0.ffn_up.bias" in names and arch.roles.get("up_bias") == "mlp_bias":
        flags.add("mlp_bias")
    if "rope_freqs.weight" in names:
        flags.add("rope_freqs")
    if "rope_factors_long.weight" in names:
        flags.add("longrope")
    extra: dict[str, Any] = {}
    if arch.gguf_layers is not None:  # a row that lays out its layers itself (Gemma 4)
        layers, extra = arch.gguf_layers(get, names, layers, vector, n_vocab)
        flags |= set(extra.pop("flags", ()))
    eos = meta.get("tokenizer.ggml.eos_token_id")
    eot = meta.get("tokenizer.ggml.eot_token_id")
    bos = meta.get("tokenizer.ggml.bos_token_id")
    return Hyper(
        arch=arch, naming="gguf", n_layer=n, n_embd=n_embd, n_vocab=n_vocab, n_ctx=n_ctx,
        eps=_float(get("eps", 1e-5), "layer_norm_rms_epsilon"), layers=tuple(layers), flags=frozenset(flags),
        activation=arch.activation, rope_pairs=arch.gguf_permuted, norm_offset=0.0,
        embed_scale=math.sqrt(n_embd) if arch.embed_scale_sqrt else float(get("embed_scale", 1.0)),
        residual_scale=float(get("residual_scale", 1.0)), logit_scale=float(get("logit_scale", 1.0) or 1.0),
        final_softcap=float(get("final_softcap", 0.0) or 0.0),
        bos_id=bos if isinstance(bos, int) else None,
        eos_ids=tuple(int(x) for x in (eos, eot) if isinstance(x, int)), conv_l=conv_l, **extra,
    )


# ---------------------------------------------------------------------------------------------
# tensors
# ---------------------------------------------------------------------------------------------
def expected_tensors(hp: Hyper, naming: str | None = None) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor this model has, ``name -> (shape, role)``, in ``naming`` (``hf`` or
    ``gguf``; default: the checkpoint's own). Shapes are outermost first."""
    naming = naming or hp.naming
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for role in hp.arch.roles:
        if not hp.has(role):
            continue
        tmpl = hp.arch.name_of(role, naming)
        if not tmpl:  # a GGUF-only tensor, in HF naming
            continue
        r = ROLES[role]
        for layer in (range(hp.n_layer) if r.per_layer else (None,)):
            if layer is not None and not hp.has_at(role, layer):
                continue
            d = hp.dims(layer)
            shape = tuple(d[s] for s in r.shape_in(naming))
            out[tmpl.format(i=layer) if layer is not None else tmpl] = (shape, role)
    return out


def tensor_problems(hp: Hyper, shapes: Mapping[str, Sequence[int]], naming: str | None = None) -> list[str]:
    """What a checkpoint's tensors (``name -> shape``) lack, hold in excess or shape wrongly
    against :func:`expected_tensors`, in words (empty: complete)."""
    want = expected_tensors(hp, naming)
    out = []
    for name, (shape, _) in want.items():
        got = shapes.get(name)
        if got is None:
            out.append(f"{name} is missing")
        elif tuple(int(x) for x in got) != shape:
            out.append(f"{name} has shape {tuple(got)}, the hyperparameters imply {shape}")
    skip = {"output.weight", "lm_head.weight"} if hp.tied else set()
    extra = sorted(n for n in shapes if n not in want and n not in skip)
    if extra:
        more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
        out.append(f"tensors that are not part of {hp.arch.name}: {', '.join(extra[:5])}{more}")
    return out
