"""Small llama- and qwen2-shaped HF checkpoints whose dims are multiples of 128 (every matmul
weight takes CQ), built from ``convert.example``'s seeded generator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from panelpack.convert.example import CONFIG, _tokenizer, f32_to_bf16_bits, tiny_llama_tensors
from panelpack.formats.safetensors import save_file


def build_hf_config(arch: str = "llama") -> dict:
    cfg = dict(CONFIG)
    cfg.update(intermediate_size=768, vocab_size=512)
    if arch == "qwen2":
        cfg.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", tie_word_embeddings=True)
    return cfg


def build_hf(folder: Path, arch: str = "llama", seed: int = 5) -> Path:
    cfg = build_hf_config(arch)
    t = tiny_llama_tensors(cfg)
    if arch == "qwen2":
        rng = np.random.default_rng(seed)
        del t["lm_head.weight"]
        hd = cfg["head_dim"]
        for i in range(cfg["num_hidden_layers"]):
            for p, n in (("q", cfg["num_attention_heads"] * hd), ("k", cfg["num_key_value_heads"] * hd),
                         ("v", cfg["num_key_value_heads"] * hd)):
                t[f"model.layers.{i}.self_attn.{p}_proj.bias"] = f32_to_bf16_bits(
                    rng.normal(0, 0.02, n).astype(np.float32))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (folder / "tokenizer.json").write_text(json.dumps(_tokenizer(cfg["vocab_size"])) + "\n")
    save_file({k: ("BF16", v) for k, v in t.items()}, folder / "model.safetensors", metadata={"format": "pt"})
    return folder
