"""Tensor roles: how HF, GGUF (llama.cpp) and cactus name each tensor of a decoder, and its shape.

A *role* is one tensor of the model (``q``, ``ffn_norm``, ``embed``...). :data:`ROLES` gives
each its usual names (``{i}`` is the layer) and its shape as symbols the hyperparameters
resolve (:class:`~.hyper.LayerSpec` and :class:`~.hyper.Hyper` attributes); an architecture
row (:class:`~.spec.Arch`) lists the roles it has and overrides the names that differ in it
(Gemma's FFN pre-norm is ``pre_feedforward_layernorm``; Phi-3's fused gate/up is GGUF
``ffn_up``). Shapes are outermost first, as panelpack's readers give them (a matrix is
``(N, K)`` in both formats: GGUF's ``ne`` reversed).

Shape symbols: ``n_embd``, ``n_vocab``, ``rope_half`` (model); ``q_dim`` (= n_head·head_dim),
``kv_dim`` (n_head_kv·head_dim), ``v_dim`` (n_head_kv·head_dim_v), ``qkv_dim`` (q + k + v),
``head_dim``, ``n_ff``, ``ff2`` (2·n_ff) (layer); ``conv_L`` (the short convolution's length),
``conv3`` (3·n_embd), ``one`` (1) (LFM2's convolution layers); ``n_embd_pl``, ``n_vocab_pl``,
``pl_total`` (n_layer·n_embd_pl) (Gemma 4's per-layer inputs).

A role with a ``block`` exists only in the layers whose mixer is that block (LFM2: q/k/v in
its attention layers, ``conv``/``conv_in``/``conv_out`` in its convolution layers).

Also here, for checkpoints outside the table (plain repacking of BERT, GPT-2, ...): the
embedding-lookup names (:data:`EMBEDDING_PATTERNS`), the layer-index pattern
(:data:`LAYER_INDEX`) and llama.cpp's names for common HF spellings (:data:`GENERIC_HF_NAMES`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Role:
    name: str
    gguf: str  # llama.cpp's name ("blk.{i}." for layer tensors)
    hf: str  # transformers' name in the usual llama layout ("model.layers.{i}.")
    cactus: str | None  # cactus-compute's file name (None: cactus has none)
    shape: tuple[str, ...]  # symbols, outermost first
    doc: str = ""
    hf_shape: tuple[str, ...] | None = None  # the HF tensor's shape where it differs (LFM2's 3-D conv)
    block: str = ""  # "attention" | "conv": only layers of that mixer have it ("": every layer)

    def shape_in(self, naming: str) -> tuple[str, ...]:
        """The shape symbols in ``naming`` (``hf``, ``gguf``, ``cactus``)."""
        return self.hf_shape if naming.startswith("hf") and self.hf_shape is not None else self.shape

    @property
    def per_layer(self) -> bool:
        return "{i}" in self.gguf


_L = "model.layers.{i}."
_B = "blk.{i}."
_C = "layer_{i}_"

#: every role any architecture of the table has
ROLES: dict[str, Role] = {r.name: r for r in (
    Role("embed", "token_embd.weight", "model.embed_tokens.weight", "token_embeddings.weights",
         ("n_vocab", "n_embd"), "token embedding (gathered by id)"),
    Role("output", "output.weight", "lm_head.weight", "output_weight.weights", ("n_vocab", "n_embd"),
         "output head (absent when tied to the embedding)"),
    Role("out_norm", "output_norm.weight", "model.norm.weight", "output_norm.weights", ("n_embd",)),
    Role("rope_freqs", "rope_freqs.weight", "", None, ("rope_half",),
         "GGUF only: Llama 3 RoPE divisors (llama.cpp's converter computes them)"),
    Role("rope_factors_long", "rope_factors_long.weight", "", None, ("rope_half",),
         "GGUF only: LongRoPE long-context factors"),
    Role("rope_factors_short", "rope_factors_short.weight", "", None, ("rope_half",),
         "GGUF only: LongRoPE short-context factors"),
    Role("attn_norm", _B + "attn_norm.weight", _L + "input_layernorm.weight", _C + "input_norm.weights", ("n_embd",)),
    Role("q", _B + "attn_q.weight", _L + "self_attn.q_proj.weight", _C + "attn_q.weights", ("q_dim", "n_embd"), block="attention"),
    Role("k", _B + "attn_k.weight", _L + "self_attn.k_proj.weight", _C + "attn_k.weights", ("kv_dim", "n_embd"), block="attention"),
    Role("v", _B + "attn_v.weight", _L + "self_attn.v_proj.weight", _C + "attn_v.weights", ("v_dim", "n_embd"), block="attention"),
    Role("qkv", _B + "attn_qkv.weight", _L + "self_attn.qkv_proj.weight", _C + "self_attn_qkv_proj.weights",
         ("qkv_dim", "n_embd"), "q, k and v stacked (Phi-3)", block="attention"),
    Role("q_bias", _B + "attn_q.bias", _L + "self_attn.q_proj.bias", _C + "self_attn_q_proj.bias", ("q_dim",), block="attention"),
    Role("k_bias", _B + "attn_k.bias", _L + "self_attn.k_proj.bias", _C + "self_attn_k_proj.bias", ("kv_dim",), block="attention"),
    Role("v_bias", _B + "attn_v.bias", _L + "self_attn.v_proj.bias", _C + "self_attn_v_proj.bias", ("v_dim",), block="attention"),
    Role("q_norm", _B + "attn_q_norm.weight", _L + "self_attn.q_norm.weight", _C + "attn_q_norm.weights",
         ("head_dim",), "RMSNorm of each query head", block="attention"),
    Role("k_norm", _B + "attn_k_norm.weight", _L + "self_attn.k_norm.weight", _C + "attn_k_norm.weights",
         ("head_dim",), "RMSNorm of each key head", block="attention"),
    Role("o", _B + "attn_output.weight", _L + "self_attn.o_proj.weight", _C + "attn_output.weights", ("n_embd", "q_dim"),
         block="attention"),
    Role("o_bias", _B + "attn_output.bias", _L + "self_attn.o_proj.bias", _C + "self_attn_o_proj.bias", ("n_embd",), block="attention"),
    Role("conv_in", _B + "shortconv.in_proj.weight", _L + "conv.in_proj.weight", _C + "conv_in_proj.weights",
         ("conv3", "n_embd"),
         "short convolution's input projection: the streams B, C, x stacked (LFM2)", block="conv"),
    Role("conv", _B + "shortconv.conv.weight", _L + "conv.conv.weight", _C + "conv_depthwise.weights",
         ("n_embd", "conv_L"),
         "short convolution's depthwise causal kernel (LFM2): HF [d, 1, L] (Conv1d), GGUF [d, L]",
         hf_shape=("n_embd", "one", "conv_L"), block="conv"),
    Role("conv_out", _B + "shortconv.out_proj.weight", _L + "conv.out_proj.weight", _C + "conv_out_proj.weights",
         ("n_embd", "n_embd"),
         "short convolution's output projection (LFM2)", block="conv"),
    Role("post_attn_norm", _B + "post_attention_norm.weight", _L + "post_attention_layernorm.weight",
         _C + "post_attn_norm.weights", ("n_embd",), "RMSNorm of the attention output (Gemma)"),
    Role("ffn_norm", _B + "ffn_norm.weight", _L + "post_attention_layernorm.weight", _C + "post_attn_norm.weights",
         ("n_embd",), "RMSNorm before the FFN"),
    Role("gate", _B + "ffn_gate.weight", _L + "mlp.gate_proj.weight", _C + "ffn_gate.weights", ("n_ff", "n_embd")),
    Role("up", _B + "ffn_up.weight", _L + "mlp.up_proj.weight", _C + "ffn_up.weights", ("n_ff", "n_embd")),
    Role("gate_up", _B + "ffn_gate_up.weight", _L + "mlp.gate_up_proj.weight", _C + "mlp_gate_up_proj.weights",
         ("ff2", "n_embd"), "gate and up stacked, gate first (Phi-3)"),
    Role("down", _B + "ffn_down.weight", _L + "mlp.down_proj.weight", _C + "ffn_down.weights", ("n_embd", "n_ff")),
    Role("gate_bias", _B + "ffn_gate.bias", _L + "mlp.gate_proj.bias", _C + "mlp_gate_proj.bias", ("n_ff",)),
    Role("up_bias", _B + "ffn_up.bias", _L + "mlp.up_proj.bias", _C + "mlp_up_proj.bias", ("n_ff",)),
    Role("down_bias", _B + "ffn_down.bias", _L + "mlp.down_proj.bias", _C + "mlp_down_proj.bias", ("n_embd",)),
    Role("post_ffn_norm", _B + "post_ffw_norm.weight", _L + "post_feedforward_layernorm.weight",
         _C + "post_ffn_norm.weights", ("n_embd",), "RMSNorm of the FFN output (Gemma)"),
    Role("pl_embed", "per_layer_token_embd.weight", "model.embed_tokens_per_layer.weight", "embed_tokens_per_layer.weights",
         ("n_vocab_pl", "pl_total"), "per-layer input embeddings: n_layer rows of n_embd_pl per token, gathered "
         "by id (Gemma 4)"),
    Role("pl_model_proj", "per_layer_model_proj.weight", "model.per_layer_model_projection.weight",
         "per_layer_model_proj.weights",
         ("pl_total", "n_embd"), "the embedding's projection to the per-layer inputs (Gemma 4)"),
    Role("pl_proj_norm", "per_layer_proj_norm.weight", "model.per_layer_projection_norm.weight",
         "per_layer_proj_norm.weights",
         ("n_embd_pl",), "RMSNorm of each layer's projected input (Gemma 4)"),
    Role("pl_gate", _B + "inp_gate.weight", _L + "per_layer_input_gate.weight", _C + "per_layer_gate.weights",
         ("n_embd_pl", "n_embd"),
         "a layer's per-layer-input gate (Gemma 4)"),
    Role("pl_proj", _B + "proj.weight", _L + "per_layer_projection.weight", _C + "per_layer_proj.weights",
         ("n_embd", "n_embd_pl"),
         "a layer's per-layer-input projection back to n_embd (Gemma 4)"),
    Role("pl_post_norm", _B + "post_norm.weight", _L + "post_per_layer_input_norm.weight",
         _C + "post_per_layer_norm.weights", ("n_embd",),
         "RMSNorm of the per-layer-input branch (Gemma 4)"),
    Role("layer_scalar", _B + "layer_output_scale.weight", _L + "layer_scalar", _C + "layer_scalar.weights", ("one",),
         "the layer's output multiplier (Gemma 4)"),
)}

#: roles that are 1-D (norm weights, biases, RoPE factors)
VECTOR_ROLES = frozenset(n for n, r in ROLES.items() if len(r.shape) == 1)


def compile_template(template: str) -> re.Pattern:
    """``blk.{i}.attn_q.weight`` -> a regex whose group 1 is the layer."""
    return re.compile(re.escape(template).replace(r"\{i\}", r"(\d+)"))


# ---- names of checkpoints outside the table ---------------------------------------------------
#: embedding lookups (rows gathered by token id, not multiplied), any architecture
EMBEDDING_PATTERNS = tuple(re.compile(p) for p in (
    r"(^|\.)token_embd\.weight$",  # GGUF
    r"(^|\.)(token_types|position_embd|per_layer_token_embd)\.weight$",
    r"(^|\.)embed_tokens(_per_layer)?\.weight$",  # HF llama/qwen/gemma
    r"(^|\.)(word|position|token_type)_embeddings\.weight$",  # HF BERT
    r"(^|\.)wte\.weight$|(^|\.)wpe\.weight$",  # GPT-2
    r"(^|\.)embed_positions\.weight$",
))
#: the tensors of a multimodal checkpoint's vision and audio towers and their projectors into the
#: text model (Gemma 3's ``vision_tower``/``multi_modal_projector``, Gemma 4's ``vision_tower``,
#: ``audio_tower``, ``embed_vision``, ``embed_audio``): passed through as stored, never run
TOWER_PATTERN = re.compile(r"(^|\.)(vision_tower|audio_tower|multi_modal_projector|embed_vision|embed_audio)\.")
#: convolution kernels (per-channel filters, not matrix products), any architecture: LFM2's
#: short convolution (HF ``conv.conv.weight`` [d, 1, L], GGUF ``shortconv.conv.weight`` [d, L])
CONV_KERNEL_PATTERNS = tuple(re.compile(p) for p in (
    r"(^|\.)shortconv\.conv\.weight$",
    r"(^|\.)layers\.\d+\.conv\.conv\.weight$",
))
#: the token embedding (the one whose rows are n_embd wide), any architecture
TOKEN_EMBEDDING = re.compile(r"(?:^|\.)(?:token_embd|embed_tokens|word_embeddings|wte)\.weight$")
#: the layer index in a tensor name (GGUF ``blk.N.``, HF ``layers.N.`` / ``layer.N.`` / ``h.N.``)
LAYER_INDEX = re.compile(r"(?:^|\.)(?:blk|layers|layer|h)\.(\d{1,9})\.")

#: BERT's HF module names -> llama.cpp's (``{i}``: the layer), each with ``.weight`` (and ``.bias``):
#: the embeddings, the per-layer matrices, and the LayerNorms (the converter's own BERT table,
#: convert/gguf_arch.py, reads all three; :data:`GENERIC_HF_NAMES` the first two)
BERT_EMBEDDINGS = (("word_embeddings", "token_embd"), ("position_embeddings", "position_embd"),
                   ("token_type_embeddings", "token_types"))
BERT_LAYER = (("attention.self.query", "blk.{i}.attn_q"), ("attention.self.key", "blk.{i}.attn_k"),
              ("attention.self.value", "blk.{i}.attn_v"), ("attention.output.dense", "blk.{i}.attn_output"),
              ("intermediate.dense", "blk.{i}.ffn_up"), ("output.dense", "blk.{i}.ffn_down"))
BERT_NORMS = (("embeddings.LayerNorm", "token_embd_norm"), ("attention.output.LayerNorm", "blk.{i}.attn_output_norm"),
              ("output.LayerNorm", "blk.{i}.layer_output_norm"))

_LAYER = r"(?:model\.|transformer\.|bert\.|)(?:layers|layer|h|blocks|encoder\.layer)\.(\d+)\."
#: (HF regex, llama.cpp name) for spellings outside the table (BERT, GPT-2, unknown decoders),
#: after the table's own names: what ``convert_hf_to_gguf.py`` would call them
GENERIC_HF_NAMES: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p + r"$"), g) for p, g in (
    (r"(?:model\.)?embed_tokens\.weight", "token_embd.weight"),
    *((r"(?:bert\.)?embeddings\." + re.escape(hf) + r"\.weight", g + ".weight") for hf, g in BERT_EMBEDDINGS),
    (r"(?:transformer\.)?wte\.weight", "token_embd.weight"),
    (r"lm_head\.weight", "output.weight"),
    (_LAYER + r"self_attn\.q_proj\.weight", "blk.{i}.attn_q.weight"),
    (_LAYER + r"self_attn\.k_proj\.weight", "blk.{i}.attn_k.weight"),
    (_LAYER + r"self_attn\.v_proj\.weight", "blk.{i}.attn_v.weight"),
    (_LAYER + r"self_attn\.o_proj\.weight", "blk.{i}.attn_output.weight"),
    (_LAYER + r"self_attn\.qkv_proj\.weight", "blk.{i}.attn_qkv.weight"),
    (_LAYER + r"self_attention\.query_key_value\.weight", "blk.{i}.attn_qkv.weight"),
    (_LAYER + r"mlp\.gate_proj\.weight", "blk.{i}.ffn_gate.weight"),
    (_LAYER + r"mlp\.up_proj\.weight", "blk.{i}.ffn_up.weight"),
    (_LAYER + r"mlp\.down_proj\.weight", "blk.{i}.ffn_down.weight"),
    *((_LAYER + re.escape(hf) + r"\.weight", g + ".weight") for hf, g in BERT_LAYER),
    (_LAYER + r"[a-z_.]*(?:layernorm|layer_norm|norm|LayerNorm)\.weight", "blk.{i}.x_norm.weight"),
    (r"(?:model\.)?norm\.weight", "output_norm.weight"),
))


def generic_gguf_name(hf_name: str) -> str | None:
    """llama.cpp's name for an HF spelling of :data:`GENERIC_HF_NAMES` (None: not one)."""
    for pattern, g in GENERIC_HF_NAMES:
        m = pattern.fullmatch(hf_name)
        if m:
            return g.format(i=m.group(1)) if m.groups() else g
    return None
