"""The embedded default checkpoint: a tiny Llama-shaped HF model, generated deterministically.

``write_tiny_llama(folder)`` writes ``config.json``, ``generation_config.json``, a minimal
``tokenizer.json`` and ``model.safetensors`` (bf16, ~3.6 MB) whose shapes exercise every
branch of the converter:

* hidden size 256 (K = 256 takes Q4_K), intermediate size 736 (``down_proj`` has K = 736,
  not a multiple of 256, so Q4_K falls back to Q8_0; ``gate/up_proj`` have N = 736, not a
  multiple of 64, so panels pad the last super-block);
* vocabulary 500 with an untied ``lm_head`` (N = 500: panel padding, and not a multiple of 8,
  so the 8-row layouts refuse it);
* an embedding lookup and RMS norms (kept as stored, recorded in the ledger).

The values are seeded random normals (std 0.02), rounded to bf16 with round-to-nearest-even,
so the same bytes come out on every machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..formats.safetensors import save_file

CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 736,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 500,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
SEED = 20261129


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round f32 to bf16 (nearest, ties to even), returned as raw uint16 bits."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def tiny_llama_tensors(config: dict = CONFIG, seed: int = SEED) -> dict[str, np.ndarray]:
    """Name -> bf16 bits (uint16) in HF order, shapes [N, K] as torch stores them."""
    rng = np.random.default_rng(seed)
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    hd = config.get("head_dim", h // config["num_attention_heads"])
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd

    def w(*shape):
        return f32_to_bf16_bits(rng.normal(0.0, 0.02, size=shape).astype(np.float32))

    def norm(n):
        return f32_to_bf16_bits(1.0 + rng.normal(0.0, 0.05, size=(n,)).astype(np.float32))

    out = {"model.embed_tokens.weight": w(v, h)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = norm(h)
        out[p + "self_attn.q_proj.weight"] = w(q, h)
        out[p + "self_attn.k_proj.weight"] = w(kv, h)
        out[p + "self_attn.v_proj.weight"] = w(kv, h)
        out[p + "self_attn.o_proj.weight"] = w(h, q)
        out[p + "post_attention_layernorm.weight"] = norm(h)
        out[p + "mlp.gate_proj.weight"] = w(f, h)
        out[p + "mlp.up_proj.weight"] = w(f, h)
        out[p + "mlp.down_proj.weight"] = w(h, f)
    out["model.norm.weight"] = norm(h)
    out["lm_head.weight"] = w(v, h)
    return out


def _tokenizer(vocab_size: int) -> dict:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, vocab_size):
        vocab[f"<0x{i:02X}>" if i < 259 else f"tok{i}"] = i
    return {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": c, "special": True} for c, i in list(vocab.items())[:3]],
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
    }


def write_tiny_llama(folder: str | os.PathLike) -> Path:
    """Write the embedded default HF checkpoint into ``folder`` (created if needed)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
        (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}, indent=2) + "\n")
        (folder / "tokenizer.json").write_text(json.dumps(_tokenizer(CONFIG["vocab_size"])) + "\n")
    except OSError as e:  # a read-only or missing folder: one line, not a traceback
        from ..formats.atomic import output_error

        raise output_error(e, folder, "cannot write the demo checkpoint") from None
    tensors = tiny_llama_tensors()
    save_file({name: ("BF16", bits) for name, bits in tensors.items()}, folder / "model.safetensors",
              metadata={"format": "pt", "generator": "panelpack tiny-llama"})
    return folder
