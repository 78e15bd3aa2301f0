"""Phi-3 (Phi-3/3.5-mini, Phi-4-mini): ``phi3``.

q, k and v come from one fused matrix (``qkv_proj``, rows q then k then v) and gate and up from
another (``gate_up_proj``, gate first); llama.cpp's converter keeps both fused (GGUF
``attn_qkv``, and ``ffn_up`` holding gate and up). RoPE rotates halves, optionally of a leading
part of each head (``partial_rotary_factor``: Phi-4-mini's 0.75), with LongRoPE scaling
(``rope_scaling.type`` ``longrope``, older ``su`` or ``yarn``: transformers reads all three as
LongRoPE for Phi-3), which llama.cpp's converter writes as ``rope_factors_long.weight`` /
``rope_factors_short.weight`` and the key ``rope.scaling.attn_factor``. Every layer slides
when ``sliding_window`` is set (transformers); llama.cpp disables Phi-3's window, and so does
the runtime on a GGUF (whose semantics are llama.cpp's).
"""

from __future__ import annotations

from .spec import Arch

PHI3 = Arch(
    "phi3", "phi3", ("phi3",), ("Phi3ForCausalLM",),
    {"embed": "always", "output": "untied", "out_norm": "always",
     "rope_factors_long": "longrope", "rope_factors_short": "longrope",
     "attn_norm": "always", "qkv": "always", "o": "always", "ffn_norm": "always", "gate_up": "always",
     "down": "always"},
    doc="Phi-3, Phi-3.5-mini, Phi-4-mini: fused qkv and gate_up, LongRoPE",
    gguf_names={"gate_up": "blk.{i}.ffn_up.weight"},
    layer_rule="all", rope_aliases={"su": "longrope", "yarn": "longrope"},
    hf_defaults={"vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": None, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                 "attention_dropout": 0.0, "hidden_act": "silu", "max_position_embeddings": 4096,
                 "original_max_position_embeddings": 4096, "initializer_range": 0.02, "rms_norm_eps": 1e-5,
                 "use_cache": True, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 32000,
                 "pad_token_id": 32000, "sliding_window": None},
    gguf_converter="Phi3MiniModel",
    cactus_refusal="cactus-compute 2.2.2's converter has no phi3 family (it falls back to 'qwen' and "
                   "writes the fused qkv_proj/gate_up_proj under names its engine does not read)",
)

ROWS = (PHI3,)
