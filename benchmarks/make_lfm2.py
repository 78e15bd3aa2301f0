"""A random checkpoint of the real LFM2-350M shape, its Q4_K_M GGUF written by panelpack, and the
panel64 bundle of that GGUF: the inputs of the LFM2 runtime benchmark (issue 22, "Performance").

    python benchmarks/make_lfm2.py /tmp/lfm2-350m          # -> hf/, lfm2-q4_k_m.gguf, lfm2.ppk
    python benchmarks/bench_runtime.py --gguf /tmp/lfm2-350m/lfm2-q4_k_m.gguf \\
        --bundle /tmp/lfm2-350m/lfm2.ppk --threads 2 --runs 3

The shape is LiquidAI/LFM2-350M's ``config.json``: hidden 1024, 16 layers of which 6 attend
(``full_attn_idxs`` 2, 5, 8, 10, 12, 14) and 10 convolve (``conv_L_cache`` 3), 16 query / 8 KV
heads, ``intermediate_size`` 6656 (FFN width 4608), vocabulary 65536, tied embedding. Weights
are seeded normals (matrices ``N(0, 1/sqrt(K))``, norms ``1 + N(0, 0.05)``) stored bf16 by
numpy. The vocabulary is a SentencePiece ``tokenizer.model`` of 65536 pieces (the real model's
byte-level BPE ``tokenizer.json`` is not shipped in any package): the GGUF writer is asked to
read it as ``LlamaModel`` does (``gguf_arch.CONVERTERS["LFM2Model"]`` with ``vocab=("spm",)``),
the rest of the file is what ``LFM2Model`` + ``llama_model_quantize`` write. Each step is skipped
when its output exists.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

CONFIG = {
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 1024, "num_hidden_layers": 16,
    "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 6656, "vocab_size": 65536,
    "full_attn_idxs": [2, 5, 8, 10, 12, 14], "conv_L_cache": 3, "norm_eps": 1e-5, "max_position_embeddings": 128000,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "tie_word_embeddings": True,
    "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
}


def make_hf(folder: Path, seed: int = 0) -> Path:
    from panelpack.convert.example import f32_to_bf16_bits
    from panelpack.formats import arch
    from panelpack.formats.safetensors import save_file

    from gguf_tiny import spm_model, spm_pieces

    if (folder / "model.safetensors").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, (shape, role) in arch.expected_tensors(arch.from_hf_config(CONFIG), "hf").items():
        if len(shape) == 1:
            x = np.float32(1) + rng.normal(0, 0.05, shape).astype(np.float32)
        elif role == "embed":
            x = rng.normal(0, 0.1, shape).astype(np.float32)
        else:
            x = (rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(np.prod(shape[1:]))))
        tensors[name] = ("BF16", f32_to_bf16_bits(x))
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=1))
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "tokenizer.model").write_bytes(spm_model(spm_pieces(CONFIG["vocab_size"])))
    return folder


def make_gguf(hf: Path, out: Path) -> Path:
    from panelpack.convert import gguf_arch, to_gguf

    if out.is_file():
        return out
    gguf_arch.CONVERTERS["LFM2Model"] = replace(gguf_arch.CONVERTERS["LFM2Model"], vocab=("spm",))
    return to_gguf(hf, out, quant="Q4_K_M").path


def make_bundle(gguf: Path, out: Path) -> Path:
    from panelpack.convert import convert

    if (out / "manifest.json").is_file():
        return out
    return convert(gguf, out, layout="panel64").bundle


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for what, step in (("hf", lambda: make_hf(a.root / "hf", a.seed)),
                       ("gguf", lambda: make_gguf(a.root / "hf", a.root / "lfm2-q4_k_m.gguf")),
                       ("bundle", lambda: make_bundle(a.root / "lfm2-q4_k_m.gguf", a.root / "lfm2.ppk"))):
        t0 = time.perf_counter()
        path = step()
        print(f"{what}: {path} ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
