"""The Llama family: ``llama`` (Llama 2/3.x, SmolLM2), ``mistral``, ``smollm3``, ``granite``.

All four are llama.cpp's ``LlamaModel`` (or a subclass) in ``convert_hf_to_gguf.py``: q/k rows
permuted for pairwise RoPE, Llama 3.x RoPE scaling written as ``rope_freqs.weight``. Mistral
is written as GGUF ``llama`` (a GGUF cannot tell them apart; llama.cpp runs no sliding window
for it). SmolLM3 leaves RoPE out of every fourth layer (``no_rope_layers``; llama.cpp's fixed
``n_no_rope_layer_step = 4``). Granite scales the embedding, the residual branches, q·k and the
logits (``*_multiplier``, ``logits_scaling``; GGUF ``embedding_scale``, ``residual_scale``,
``attention.scale``, ``logit_scale``).
"""

from __future__ import annotations

from .spec import Arch

#: the roles of a Llama layer, in the order it runs them, with when each exists
LLAMA_ROLES = {
    "embed": "always", "output": "untied", "out_norm": "always", "rope_freqs": "rope_freqs",
    "attn_norm": "always", "q": "always", "k": "always", "v": "always",
    "q_bias": "attention_bias", "k_bias": "attention_bias", "v_bias": "attention_bias",
    "o": "always", "o_bias": "attention_bias", "ffn_norm": "always",
    "gate": "always", "gate_bias": "mlp_bias", "up": "always", "up_bias": "mlp_bias",
    "down": "always", "down_bias": "mlp_bias",
}
PERMUTED = {"q": ("permute_q",), "k": ("permute_k",), "q_bias": ("permute_q",), "k_bias": ("permute_k",)}

#: transformers 5.5.4's LlamaConfig defaults (as to_dict writes them; None: derived)
LLAMA_DEFAULTS = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": None, "head_dim": None, "hidden_act": "silu",
    "max_position_embeddings": 2048, "initializer_range": 0.02, "rms_norm_eps": 1e-6, "pretraining_tp": 1,
    "use_cache": True, "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
}

LLAMA = Arch(
    "llama", "llama", ("llama",), ("LlamaForCausalLM",), LLAMA_ROLES,
    doc="Llama 2/3.x, SmolLM2, TinyLlama, ...",
    gguf_permuted=True, gguf_transforms=PERMUTED, hf_defaults=LLAMA_DEFAULTS,
    cactus_family="generic",
)

MISTRAL = Arch(
    "mistral", "llama", ("mistral",), ("MistralForCausalLM",),
    {r: c for r, c in LLAMA_ROLES.items() if not c.endswith("_bias")},
    doc="Mistral 7B / Ministral: a Llama whose every layer slides when sliding_window is set",
    gguf_permuted=True, gguf_transforms=PERMUTED, layer_rule="all",
    hf_defaults={"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": None, "hidden_act": "silu",
                 "max_position_embeddings": 131072, "initializer_range": 0.02, "rms_norm_eps": 1e-6,
                 "use_cache": True, "sliding_window": 4096, "attention_dropout": 0.0, "bos_token_id": 1,
                 "eos_token_id": 2, "tie_word_embeddings": False},
    cactus_refusal="cactus-compute 2.2.2's converter has no mistral family (it falls back to 'qwen' "
                   "with a warning)",
)

SMOLLM3 = Arch(
    "smollm3", "smollm3", ("smollm3",), ("SmolLM3ForCausalLM",), LLAMA_ROLES,
    doc="SmolLM3: a Llama without RoPE in every fourth layer (no_rope_layers)",
    gguf_permuted=True, gguf_transforms=PERMUTED, layer_rule="nope", nope_interval=4,
    rope_theta={"*": 2000000.0},
    hf_defaults={"vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                 "num_attention_heads": 16, "num_key_value_heads": 4, "hidden_act": "silu",
                 "max_position_embeddings": 32768, "initializer_range": 0.02, "rms_norm_eps": 1e-6,
                 "use_cache": True, "pad_token_id": 128004, "bos_token_id": 128000, "eos_token_id": 128001,
                 "use_sliding_window": False, "sliding_window": None, "no_rope_layer_interval": 4,
                 "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "tie_word_embeddings": True},
    gguf_converter="SmolLM3Model",
    cactus_refusal="cactus-compute 2.2.2's converter has no smollm3 family (it falls back to 'qwen', "
                   "whose engine would rotate the layers SmolLM3 leaves without RoPE)",
)

GRANITE = Arch(
    "granite", "granite", ("granite",), ("GraniteForCausalLM",), LLAMA_ROLES,
    doc="IBM Granite 3.x: a Llama with embedding, residual, attention and logit multipliers",
    gguf_permuted=True, gguf_transforms=PERMUTED, hf_attn_scale="attention_multiplier",
    hf_defaults={"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": None, "hidden_act": "silu",
                 "max_position_embeddings": 2048, "initializer_range": 0.02, "rms_norm_eps": 1e-6,
                 "use_cache": True, "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False,
                 "attention_dropout": 0.0, "mlp_bias": False, "embedding_multiplier": 1.0, "logits_scaling": 1.0,
                 "residual_multiplier": 1.0, "attention_multiplier": 1.0, "tie_word_embeddings": False},
    gguf_converter="GraniteModel",
    cactus_refusal="cactus-compute 2.2.2's converter has no granite family (it falls back to 'qwen', "
                   "which drops Granite's multipliers)",
)

ROWS = (LLAMA, MISTRAL, SMOLLM3, GRANITE)
