"""llama.cpp's named quantization mixes (``--quant Q4_K_M`` ...): which type each tensor gets.

A pure function of metadata, like the rest of the policy: :func:`choose` walks the tensors in
the order llama.cpp's ``llama_model_quantize`` does (by layer number, then by name) and gives
each one the type llama.cpp's quantizer would write for that file type, with the rule that
chose it in words. The facts come from llama.cpp's ``src/llama-quant.cpp``
(``llama_tensor_get_type``, ``tensor_allows_quantization``, ``tensor_type_fallback``); they
are restated here as tables, in our own terms:

1. *Kept as stored* (never quantized): tensors with fewer than 2 dimensions (trailing size-1
   axes do not count), names not ending in ``weight``, the names in :data:`NEVER_QUANTIZED`
   (norms, MoE routers, positional embeddings, ...), and ``output.weight`` with
   ``--leave-output-tensor``.
2. ``--token-embedding-type`` / ``--output-tensor-type`` win for their tensor, as given.
3. A tensor whose name matches a ``--tensor-type REGEX=TYPE`` (the first that matches,
   searched anywhere in the name) gets that type.
4. Otherwise, unless ``--pure``, the mix's role rules (:data:`ROLE_RULES`, plus the output /
   tied-embedding rule) pick the type, counting attn_v and ffn_down tensors as llama.cpp does
   (``use_more_bits``: the first and last eighth of the layers and every third in between).
5. When K (a row) is not a whole number of the type's blocks: the fallback of
   :data:`FALLBACK` (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0), and F16
   when even that does not fit.

HF checkpoints are named as llama.cpp's converter would name them (the architecture table's
names, :func:`panelpack.formats.arch.gguf_name`: ``model.layers.3.self_attn.v_proj.weight`` is
``blk.3.attn_v.weight``, Phi-3's ``mlp.gate_up_proj`` is ``ffn_up``) before any rule or
``--tensor-type`` pattern is applied; the patterns are also tried on the original name. The
architecture is llama.cpp's (``general.architecture``; an HF checkpoint's through the table),
which the falcon rules and the 70B ``attn_v`` rule read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..formats import arch as _arch
from ..formats import qtypes
from ..formats.common import TensorInfo
from ..formats.errors import BadInputError, UnsupportedError

Q = qtypes.BY_NAME


@dataclass(frozen=True)
class Mix:
    name: str  # llama.cpp's spelling: "Q4_K_M"
    ftype: int  # llama_ftype value (LLAMA_FTYPE_MOSTLY_*)
    default: qtypes.GGMLType  # llama_ftype_get_default_type


#: The file types ``--quant`` accepts as mixes (llama.h's LLAMA_FTYPE_MOSTLY_* values).
MIXES: dict[str, Mix] = {m.name: m for m in (
    Mix("Q4_0", 2, Q["Q4_0"]), Mix("Q4_1", 3, Q["Q4_1"]), Mix("Q8_0", 7, Q["Q8_0"]),
    Mix("Q5_0", 8, Q["Q5_0"]), Mix("Q5_1", 9, Q["Q5_1"]), Mix("Q2_K", 10, Q["Q2_K"]),
    Mix("Q3_K_S", 11, Q["Q3_K"]), Mix("Q3_K_M", 12, Q["Q3_K"]), Mix("Q3_K_L", 13, Q["Q3_K"]),
    Mix("Q4_K_S", 14, Q["Q4_K"]), Mix("Q4_K_M", 15, Q["Q4_K"]), Mix("Q5_K_S", 16, Q["Q5_K"]),
    Mix("Q5_K_M", 17, Q["Q5_K"]), Mix("Q6_K", 18, Q["Q6_K"]),
)}

#: Substrings (anywhere in the name) of tensors llama.cpp never quantizes.
NEVER_QUANTIZED = (
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
    "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
    "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
    "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd",
    "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
    "mm.a.code_embd",
)
#: Whole names llama.cpp never quantizes (its positional-embedding and token-type tables).
NEVER_QUANTIZED_NAMES = ("position_embd.weight", "token_types.weight")

#: The type a K-quant falls back to when K is not a multiple of its 256-element block.
FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}

# llama.cpp's tensor categories, by name (first match wins, as in tensor_get_category)
_CATEGORIES = (
    ("output", lambda s: s == "output.weight"),
    ("token_embd", lambda s: s in ("token_embd.weight", "per_layer_token_embd.weight")),
    ("attn_qkv", lambda s: "attn_qkv.weight" in s),
    ("attn_kv_b", lambda s: "attn_kv_b.weight" in s),
    ("attn_v", lambda s: "attn_v.weight" in s),
    ("attn_k", lambda s: "attn_k.weight" in s),
    ("attn_q", lambda s: "attn_q.weight" in s),
    ("attn_output", lambda s: "attn_output.weight" in s),
    ("ffn_up", lambda s: "ffn_up" in s),
    ("ffn_gate", lambda s: "ffn_gate" in s),
    ("ffn_down", lambda s: "ffn_down" in s),
)
_ATTN_V_LIKE = ("attn_v", "attn_qkv", "attn_kv_b")


def category(llama: str) -> str:
    """llama.cpp's broad category of a (llama.cpp-named) tensor, or ``"other"``."""
    for cat, match in _CATEGORIES:
        if match(llama):
            return cat
    return "other"


def _layer(llama: str) -> int:
    m = re.match(r"blk\.(-?\d+)\.", llama)
    return int(m.group(1)) if m else -1


def n_dims(shape: Sequence[int]) -> int:
    """ggml_n_dims: the axes up to the last one longer than 1 (at least 1)."""
    dims = list(reversed(shape))  # ggml's ne order: innermost first
    for i in range(len(dims) - 1, 0, -1):
        if dims[i] > 1:
            return i + 1
    return 1


# ---- the model facts the rules read ------------------------------------------------------
@dataclass(frozen=True)
class Model:
    arch: str  # llama.cpp's architecture name
    n_layer: int
    n_head: int
    n_head_kv: int
    n_expert: int
    has_imatrix: bool = False
    row: Optional[_arch.Arch] = None  # the architecture table's row, when it has one

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @property
    def is_70b(self) -> bool:
        """llama.cpp's LLM_TYPE_70B, which its attn_v rule reads: an 80-layer llama with GQA, or
        an 80-layer qwen2 (``load_arch_hparams`` of each)."""
        return self.n_layer == 80 and (self.arch == "qwen2" or (self.arch == "llama" and self.n_head != self.n_head_kv))


def llama_name(name: str, source_kind: str, model: Optional[Model] = None) -> str:
    """The name llama.cpp gives the tensor (GGUF sources: the name itself)."""
    return _arch.gguf_name(name, source_kind, model.row if model is not None else None)


def _first(v: Any, default: int = 0) -> int:
    if isinstance(v, (list, tuple)):
        v = v[0] if v else None
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def model_facts(ckpt) -> Model:
    """arch, layers, heads and experts of a checkpoint (GGUF metadata or HF config)."""
    hp = ckpt.hyperparameters()
    row = None
    if ckpt.kind == "gguf":
        arch = (ckpt.architecture or "").lower()
        n_expert = _first(ckpt.metadata.get(_arch.keys.gguf_key("n_expert", ckpt.architecture or "")))
        row = _arch.ARCHITECTURES.get(arch)
    else:
        cfg = _arch.text_config(getattr(ckpt, "config", None) or {})
        n_expert = _first(_arch.keys.hf_get(cfg, "n_expert"))
        try:
            row = _arch.for_hf_config(cfg)
        except BadInputError:  # outside the table (or refused by it): generic names, its own arch string
            row = None
        arch = row.gguf_arch if row is not None else (ckpt.architecture or "").lower()
    n_head = _first(hp.get("n_head"))
    return Model(arch, _first(hp.get("n_layer")), n_head, _first(hp.get("n_head_kv"), n_head), n_expert, row=row)


# ---- the role rules of llama_tensor_get_type_impl, as tables -----------------------------
def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth, and every third layer between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


_MORE_BITS = "in the first or last eighth of layers or every third between (use_more_bits)"

#: attn_v (and attn_qkv, attn_kv_b): mix -> [(condition(i, n, model), type, words)], first hit
ATTN_V: dict[str, list[tuple[Callable, str, str]]] = {
    "Q2_K": [(lambda i, n, m: m.n_gqa >= 4, "Q4_K", "with GQA >= 4"), (lambda i, n, m: True, "Q3_K", "")],
    "Q3_K_M": [(lambda i, n, m: i < 2, "Q5_K", "in the first two attn_v"), (lambda i, n, m: True, "Q4_K", "")],
    "Q3_K_L": [(lambda i, n, m: True, "Q5_K", "")],
    "Q4_K_M": [(lambda i, n, m: use_more_bits(i, n), "Q6_K", _MORE_BITS)],
    "Q5_K_M": [(lambda i, n, m: use_more_bits(i, n), "Q6_K", _MORE_BITS)],
    "Q4_K_S": [(lambda i, n, m: i < 4, "Q5_K", "in the first four attn_v")],
}

#: ffn_down: mix -> [(condition(i_layer, n_layer, model), type, words)], first hit
FFN_DOWN: dict[str, list[tuple[Callable, str, str]]] = {
    "Q2_K": [(lambda i, n, m: True, "Q3_K", "")],
    "Q3_K_M": [(lambda i, n, m: i < n // 16, "Q5_K", "in the first sixteenth of layers"),
               (lambda i, n, m: m.arch != "falcon" or use_more_bits(i, n), "Q4_K", ""),
               (lambda i, n, m: True, "Q3_K", "(falcon)")],
    "Q3_K_L": [(lambda i, n, m: m.arch == "falcon", "Q4_K", "(falcon)"), (lambda i, n, m: True, "Q5_K", "")],
    "Q4_K_M": [(lambda i, n, m: m.arch == "falcon" and i < n // 16, "Q6_K", "(falcon) in the first sixteenth"),
               (lambda i, n, m: m.arch == "falcon" and use_more_bits(i, n), "Q5_K", "(falcon) " + _MORE_BITS),
               (lambda i, n, m: m.arch == "falcon", "Q4_K", "(falcon)"),
               (lambda i, n, m: use_more_bits(i, n), "Q6_K", _MORE_BITS)],
    "Q5_K_M": [(lambda i, n, m: use_more_bits(i, n), "Q6_K", _MORE_BITS)],
    "Q4_K_S": [(lambda i, n, m: m.arch != "falcon" and i < n // 8, "Q5_K", "in the first eighth of layers")],
    "Q4_0": [(lambda i, n, m: m.has_imatrix and i < n // 8, "Q4_1", "with an imatrix, in the first eighth of layers")],
    "Q5_0": [(lambda i, n, m: m.has_imatrix and i < n // 8, "Q5_1", "with an imatrix, in the first eighth of layers")],
}

#: attn_output: mix -> [(condition(model), type, words)], first hit
ATTN_OUTPUT: dict[str, list[tuple[Callable, str, str]]] = {
    **{mix: [(lambda m: m.arch != "falcon" and m.n_expert == 8, "Q5_K", "with 8 experts")]
       for mix in ("Q3_K_S", "Q4_K_S", "Q4_K_M")},
    "Q2_K": [(lambda m: m.arch != "falcon" and m.n_expert == 8, "Q5_K", "with 8 experts"),
             (lambda m: m.arch != "falcon", "Q3_K", "")],
    "Q3_K_M": [(lambda m: m.arch != "falcon" and m.n_expert == 8, "Q5_K", "with 8 experts"),
               (lambda m: m.arch != "falcon", "Q4_K", "")],
    "Q3_K_L": [(lambda m: m.arch != "falcon" and m.n_expert != 8, "Q5_K", ""),
               (lambda m: m.arch == "falcon", "Q4_K", "(falcon)")],
}


@dataclass(frozen=True)
class Choice:
    type: Optional[qtypes.GGMLType]  # None: kept as stored (llama.cpp does not quantize it)
    rule: str  # the rule in words


@dataclass
class Options:
    """llama-quantize's per-tensor options."""

    pure: bool = False
    tensor_types: Sequence[tuple[str, str]] = ()  # (regex, type name), first match wins
    output_tensor_type: Optional[str] = None
    token_embedding_type: Optional[str] = None
    leave_output_tensor: bool = False
    imatrix: Optional[str] = None  # --imatrix FILE (legacy binary or GGUF, see formats/imatrix.py)
    _compiled: list = field(default_factory=list, repr=False, compare=False)

    def compiled(self) -> list[tuple[re.Pattern, qtypes.GGMLType, str]]:
        if not self._compiled:
            for pat, tname in self.tensor_types:
                try:
                    rx = re.compile(pat)
                except re.error as e:
                    raise BadInputError(f"--tensor-type {pat}={tname}: bad regular expression ({e})") from None
                self._compiled.append((rx, quantizable(tname, "--tensor-type"), pat))
        return self._compiled


def quantizable(name: str, option: str) -> qtypes.GGMLType:
    """A type panelpack can write for ``option`` (a quantizable type or F32/F16/BF16)."""
    try:
        t = qtypes.get(name)
    except UnsupportedError:
        t = None
    if t is None or not (t.can_quantize or t in (qtypes.F32, qtypes.F16, qtypes.BF16)):
        known = ", ".join(x.lower for x in qtypes.QUANTIZABLE)
        raise UnsupportedError(f"{option} {name}: panelpack writes {known}, f32, f16, bf16")
    return t


def parse_tensor_type(spec: str) -> tuple[str, str]:
    """``REGEX=TYPE`` (llama-quantize's ``--tensor-type``) -> (regex, type)."""
    pat, sep, tname = spec.partition("=")  # llama-quantize splits at the first "="
    if not sep or not pat or not tname:
        raise BadInputError(f"--tensor-type {spec!r}: expected REGEX=TYPE, e.g. attn_v=q8_0")
    quantizable(tname, "--tensor-type")
    return pat, tname


def get_mix(name: str) -> Optional[Mix]:
    """The mix named ``name`` (any case), or None when it is not one."""
    return MIXES.get(name.strip().upper()) if isinstance(name, str) else None


def _first_rule(rules, *args) -> Optional[tuple[str, str]]:
    for cond, tname, words in rules:
        if cond(*args):
            return tname, words
    return None


def _words(role: str, where: str, tname: str, mix: Mix) -> str:
    return f"{role}{' ' + where if where else ''}: {tname} ({mix.name} rule)"


def _role_rule(cat: str, new: str, t: TensorInfo, mix: Mix, model: Model, tied: bool,
               state: dict[str, int], opts: Options) -> tuple[str, str]:
    """llama_tensor_get_type_impl for the mixes we write: (type name, rule in words)."""
    if cat == "output" or (tied and cat == "token_embd"):
        what = "output" if cat == "output" else "token_embd (tied to the output)"
        if opts.output_tensor_type:
            return quantizable(opts.output_tensor_type, "--output-tensor-type").name, f"{what}: --output-tensor-type"
        if model.arch == "falcon" or t.k % qtypes.get(new).block_size:
            why = "falcon" if model.arch == "falcon" else f"K={t.k} not a multiple of {qtypes.get(new).block_size}"
            return "Q8_0", f"{what}: Q8_0 ({why}; {mix.name} rule)"
        if new != "Q8_0":
            return "Q6_K", _words(what, "", "Q6_K", mix)
        return new, f"{what}: {new} ({mix.name} default)"
    if cat == "token_embd":
        if opts.token_embedding_type:
            return quantizable(opts.token_embedding_type, "--token-embedding-type").name, "token_embd: --token-embedding-type"
        return new, f"token_embd: {new} ({mix.name} default)"
    if cat in _ATTN_V_LIKE:
        i = state["attn_v"]
        hit = _first_rule(ATTN_V.get(mix.name, []), i, state["n_attn_v"], model)
        words = f"{cat} #{i} of {state['n_attn_v']}"
        if hit:
            new, where = hit
            words = _words(cat, where, new, mix)
        else:
            words = f"{cat}: {new} ({mix.name} default)"
        if model.is_70b and new in ("Q3_K", "Q4_K"):  # 8 heads share each attn_v row
            new, words = "Q5_K", f"{cat}: Q5_K (70B with GQA; {mix.name} rule)"
        if model.n_expert == 8:
            new, words = "Q8_0", f"{cat}: Q8_0 (8 experts; {mix.name} rule)"
        state["attn_v"] += 1
        return new, words
    if cat == "attn_k" and model.n_expert == 8:
        return "Q8_0", f"attn_k: Q8_0 (8 experts; {mix.name} rule)"
    if cat == "ffn_down":
        i_layer, n_layer = _layer_info(state["ffn_down"], model, t)
        hit = _first_rule(FFN_DOWN.get(mix.name, []), i_layer, n_layer, model)
        state["ffn_down"] += 1
        if hit:
            return hit[0], _words(f"ffn_down of layer {i_layer}", hit[1], hit[0], mix)
        return new, f"ffn_down: {new} ({mix.name} default)"
    if cat == "attn_output":
        hit = _first_rule(ATTN_OUTPUT.get(mix.name, []), model)
        if hit:
            return hit[0], _words("attn_output", hit[1], hit[0], mix)
    if cat in ("ffn_gate", "ffn_up"):
        state[cat] += 1  # counted as llama.cpp counts them (no rule of these mixes reads them)
    return new, f"{cat if cat != 'other' else 'tensor'}: {new} ({mix.name} default)"


def _layer_info(counter: int, model: Model, t: TensorInfo) -> tuple[int, int]:
    if model.n_expert > 1:  # llama.cpp reads the layer from the name for MoE models
        i = _layer(t.llama_name if hasattr(t, "llama_name") else t.name)
        if not 0 <= i < model.n_layer:
            raise BadInputError(f"{t.name}: cannot tell its layer (needed for an MoE model)")
        return i, model.n_layer
    return counter, model.n_layer


def allows_quantization(llama: str, shape: Sequence[int], opts: Options) -> Optional[str]:
    """None when llama.cpp quantizes the tensor, else why it keeps it as stored."""
    if n_dims(shape) < 2:
        return f"{n_dims(shape)}-D tensor: never quantized (llama.cpp)"
    if not llama.endswith("weight"):
        return "not a weight: never quantized (llama.cpp)"
    if llama == "output.weight" and opts.leave_output_tensor:
        return "output: kept as stored (--leave-output-tensor)"
    if llama in NEVER_QUANTIZED_NAMES:
        return f"{llama}: never quantized (llama.cpp)"
    for s in NEVER_QUANTIZED:
        if s in llama:
            return f"'{s}' tensor: never quantized (llama.cpp)"
    return None


def choose(infos: Sequence[TensorInfo], source_kind: str, model: Model, mix: Mix,
           opts: Optional[Options] = None) -> dict[str, Choice]:
    """Each tensor's type under ``mix``, exactly as llama.cpp's quantizer chooses it."""
    opts = opts or Options()
    patterns = opts.compiled()
    named = [(llama_name(t.name, source_kind, model), t) for t in infos]
    order = sorted(named, key=lambda p: (_layer(p[0]), p[0]))
    tied = not any(ln == "output.weight" for ln, _ in named)
    state = {"attn_v": 0, "ffn_down": 0, "ffn_gate": 0, "ffn_up": 0,
             "n_attn_v": sum(category(ln) in _ATTN_V_LIKE for ln, _ in named)}
    out: dict[str, Choice] = {}
    for ln, t in order:
        keep = allows_quantization(ln, t.shape, opts)
        if keep:
            out[t.name] = Choice(None, keep)
            continue
        cat = category(ln)
        if opts.token_embedding_type and cat == "token_embd":
            out[t.name] = Choice(quantizable(opts.token_embedding_type, "--token-embedding-type"),
                                 "token_embd: --token-embedding-type")
            continue
        if opts.output_tensor_type and cat == "output":
            out[t.name] = Choice(quantizable(opts.output_tensor_type, "--output-tensor-type"),
                                 "output: --output-tensor-type")
            continue
        new, rule = mix.default.name, f"{mix.name} default"
        manual = next(((ty, pat) for rx, ty, pat in patterns if rx.search(ln) or rx.search(t.name)), None)
        if manual:
            new, rule = manual[0].name, f"--tensor-type {manual[1]}={manual[0].name}"
        elif opts.pure:
            rule = f"{new} (--pure)"
        else:
            new, rule = _role_rule(cat, new, t, mix, model, tied, state, opts)
        new_t = qtypes.get(new)
        if t.k % new_t.block_size:  # tensor_type_fallback
            fb = qtypes.get(FALLBACK.get(new, new))
            why = f"K={t.k} is not a multiple of {new_t.block_size}"
            if t.k % fb.block_size:
                fb = qtypes.F16
            rule += f"; {why}: {new} -> {fb.name} (llama.cpp fallback)"
            new_t = fb
        out[t.name] = Choice(new_t, rule)
    return out


# ---- from a choice to the policy's decision (type first, then the layout) ------------------
def decide(info: TensorInfo, choice: Choice, layout: str):
    """The :class:`~.policy.Decision` for a tensor whose type the mix chose: the type is
    settled first, then the layout is applied; when the layout refuses the chosen type the
    decision keeps the type, writes ``rowmajor`` and gives the refusal as its reason (the
    rule stays in ``rule``)."""
    from .. import repack
    from .policy import TOWER_KEPT, Decision, role_of

    role = role_of(info)
    st = info.type
    if role == "tower":  # never quantized: panelpack passes the towers through as stored
        return Decision(role, "copy", st, "rowmajor", TOWER_KEPT, rule=choice.rule)
    if choice.type is None or len(info.shape) > 2:
        why = None
        if choice.type is not None:  # llama.cpp quantizes 3-D expert stacks; panelpack keeps them
            why = f"{len(info.shape)}-D tensor: panelpack quantizes 2-D matrices only, kept as stored"
        elif layout != "rowmajor":
            why = choice.rule
        return Decision(role, "copy", st, "rowmajor", why, rule=choice.rule)
    target = choice.type
    if target == st:  # llama.cpp copies a tensor already of the chosen type
        action, lossy = ("repack" if st.quantized else "copy"), None
    elif st.quantized:
        action, lossy = "requantize", f"lossy: re-quantized {st.name} -> {target.name}"
    elif target.quantized or target != st:
        action, lossy = "quantize", None
    if role != "matmul":
        why = None if layout == "rowmajor" else {
            "embedding": "embedding lookup: runtimes gather its rows, kept row-major",
            "vector": "not a matrix: kept row-major", "tensor": "not a matrix: kept row-major",
            "kernel": "convolution kernel, not a matrix: kept row-major"}[role]
        reason = "; ".join(x for x in (lossy, why) if x) or None
        return Decision(role, action, target, "rowmajor", reason, rule=choice.rule)
    refusal = repack.get(layout).refuse(target, info.n, info.k)
    written = layout if refusal is None else "rowmajor"
    if action == "copy" and not target.quantized and refusal is None and layout != "rowmajor":
        written, refusal = "rowmajor", f"{target.name} matrix: kept row-major"
    reason = "; ".join(x for x in (lossy, refusal and f"{layout} refuses {target.name}: {refusal}") if x) or None
    return Decision(role, action, target, written, reason, rule=choice.rule)


def plan_choices(ckpt, infos: Sequence[TensorInfo], mix_name: str, opts: Optional[Options] = None,
                 has_imatrix: bool = False) -> dict[str, Choice]:
    """:func:`choose` for a checkpoint (its model facts read from its metadata)."""
    mix = get_mix(mix_name)
    if mix is None:
        raise UnsupportedError(f"--quant {mix_name}: not a llama.cpp file type ({', '.join(MIXES)})")
    m = model_facts(ckpt)
    if has_imatrix:
        m = Model(m.arch, m.n_layer, m.n_head, m.n_head_kv, m.n_expert, True, m.row)
    return choose(infos, ckpt.kind, m, mix, opts)


def importance(imx, info: TensorInfo, source_kind: str, decision, model: Optional[Model] = None):
    """The imatrix row ``info`` is quantized with (None: none), checked as llama.cpp checks it:
    a missing entry quantizes without one; a size mismatch is an error except for token_embd."""
    from ..formats import blocks

    if imx is None or decision.action not in ("quantize", "requantize"):
        return None
    ln = llama_name(info.name, source_kind, model)
    w = imx.weights.get(ln, imx.weights.get(info.name))
    if w is None:
        return None
    if w.size != info.k:
        if category(ln) == "token_embd":
            return None
        raise BadInputError(f"{imx.path}: imatrix entry {ln} has {w.size} values, {info.name} has rows of {info.k}")
    if not blocks.can_weight(decision.target_type):
        raise UnsupportedError(f"{info.name}: panelpack cannot quantize {decision.target_type.name} with an imatrix")
    return w
