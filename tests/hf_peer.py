"""The transformers side of the architecture tests, run in a child interpreter that has torch and
transformers 5.5.4 (the ``oracle-cactus`` extra); panelpack's test process never imports torch.

``python tests/hf_peer.py JOB.json`` runs the job's operations in order, in one process (one
torch import for a whole batch of checkpoints). Operations (``op`` plus arguments):

* ``build`` ``config_class, config (kwargs), folder, seed, std``: the model from transformers'
  own config class, every parameter redrawn from a seeded normal (matrices
  ``N(0, std/sqrt(fan_in))``, norm weights around their neutral value, biases ``N(0, 0.1)``,
  embeddings ``N(0, 0.1)``, Gemma 4's ``layer_scalar`` buffers ``U(0.5, 1.5)``), stored as bf16
  safetensors by ``save_pretrained`` (which writes the
  5.x ``config.json``)
* ``forward`` ``folder, ids, out``: logits f32 ``[len(ids), vocab]`` of the checkpoint loaded
  in f32 (the bf16 values widened exactly) -> ``out`` (.npy)
* ``generate`` ``folder, ids, n, out``: greedy ``generate`` with its KV cache, ``n`` new tokens,
  no stop token -> ``out`` (JSON list)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def _redraw(model, seed: int, std: float) -> None:
    import torch

    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            shape = tuple(p.shape)
            if name.endswith("norm.weight"):  # every RMSNorm weight (input_layernorm, q_norm, norm, ...)
                # Gemma 2/3 multiply by (1 + w): keep w small; the others (Gemma 4 too) by w: around 1
                cls = type(model).__name__.lower()
                neutral = 0.0 if "gemma" in cls and "gemma4" not in cls else 1.0
                v = neutral + rng.normal(0, 0.2, shape)
            elif name.endswith(".bias"):
                v = rng.normal(0, 0.1, shape)
            elif "embed_tokens" in name:
                v = rng.normal(0, 0.1, shape)
            else:
                v = rng.normal(0, std / np.sqrt(shape[-1]), shape)
            p.copy_(torch.from_numpy(v.astype(np.float32)))
        for name, b in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("layer_scalar"):  # Gemma 4's per-layer output multiplier (a saved buffer)
                b.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, tuple(b.shape)).astype(np.float32)))


def main(job_path: str) -> None:
    import torch
    import transformers

    job = json.loads(Path(job_path).read_text())
    torch.set_num_threads(int(job.get("threads", 2)))
    loaded: dict[str, object] = {}

    def load(folder):
        if folder not in loaded:
            loaded[folder] = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        return loaded[folder]

    for op in job["ops"]:
        kind = op["op"]
        if kind == "build":
            cfg = getattr(transformers, op["config_class"])(**op["config"])
            model = transformers.AutoModelForCausalLM.from_config(cfg)
            _redraw(model, op["seed"], op.get("std", 1.0))
            if getattr(cfg, "tie_word_embeddings", False):
                model.tie_weights()
            model.to(torch.bfloat16).save_pretrained(op["folder"], safe_serialization=True)
        elif kind == "forward":
            with torch.no_grad():
                out = load(op["folder"])(torch.tensor([op["ids"]])).logits[0].float().numpy()
            np.save(op["out"], out)
        elif kind == "generate":
            m = load(op["folder"])
            with torch.no_grad():
                seq = m.generate(torch.tensor([op["ids"]]), max_new_tokens=op["n"], do_sample=False,
                                 eos_token_id=None, pad_token_id=0, min_new_tokens=op["n"])
            Path(op["out"]).write_text(json.dumps(seq[0, len(op["ids"]):].tolist()))
        else:
            raise SystemExit(f"unknown op {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1])
