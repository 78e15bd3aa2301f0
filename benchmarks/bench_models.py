"""Random checkpoints of real model shapes for the benchmarks, quantized by panelpack (no pytest).

    python benchmarks/bench_models.py qwen3-0.6b --workdir /tmp/ppk-models     # writes and converts
    python benchmarks/bench_models.py phi3-mini-7l --workdir /tmp/ppk-models

:data:`SHAPES` holds the hyperparameters of each shape, as ``config.json`` spells them. The
tensors a shape implies come from the architecture table (``formats.arch.expected_tensors`` of
``from_hf_config``), so any architecture of the table can have a shape here:

* ``qwen3-0.6b``: Qwen3-0.6B's real shape (hidden 1024, FFN 3072, 28 layers, 16 heads over 8 KV
  heads of 128, q/k norms, vocabulary 151936, tied embeddings), 0.60 B parameters;
* ``phi3-mini-7l``: Phi-3-mini-4k's widths (hidden 3072, FFN 8192, 32 heads of 96, fused qkv and
  gate_up, vocabulary 32064, untied output) with 7 of its 32 layers: 0.99 B parameters, the
  Phi-3 family's blocks at the widest matrices a model of at most 1 B parameters can have;
* ``tiny``: a small Qwen3 for checking the scripts.

:func:`write_checkpoint` writes bf16 safetensors of seeded normals (matrices N(0, 0.02), norm
weights 1 + N(0, 0.05)) with numpy, ``config.json`` and a tokenizer: llama.cpp's real Qwen2
vocabulary as ``tokenizer.json`` where the sdist's ``models/`` folder is unpacked
(tests/llama_convert.py) and the shape asks for it, else a SentencePiece model trained on the
shipped text (tests/hf_models.py; the GGUF writer pads the vocabulary with ``[PAD]`` tokens as
llama.cpp's converter does). :func:`quantized` then runs ``panelpack convert SRC -o M.gguf
--quant Q4_K_M`` (the GGUF llama.cpp reads; byte-identical with llama.cpp's own converter and
quantizer, docs/CONVERT.md) and ``panelpack convert M.gguf -o M.ppk --layout panel64`` (the same
blocks, repacked), each once per work folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"


@dataclass(frozen=True)
class Shape:
    config: dict[str, Any]
    tokenizer: str = "spm"  # "qwen2" (llama.cpp's real Qwen2 BPE vocabulary, when unpacked) or "spm"
    note: str = ""


_QWEN3 = dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", max_position_embeddings=40960, rms_norm_eps=1e-6,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True,
              bos_token_id=151643, eos_token_id=151645, hidden_act="silu", attention_bias=False,
              torch_dtype="bfloat16")

SHAPES: dict[str, Shape] = {
    "qwen3-0.6b": Shape(dict(_QWEN3, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                             num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936),
                        "qwen2", "Qwen3-0.6B"),
    "phi3-mini-7l": Shape(dict(architectures=["Phi3ForCausalLM"], model_type="phi3", hidden_size=3072,
                               intermediate_size=8192, num_hidden_layers=7, num_attention_heads=32,
                               num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096,
                               original_max_position_embeddings=4096, sliding_window=2047, rms_norm_eps=1e-5,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                               tie_word_embeddings=False, bos_token_id=1, eos_token_id=32000, pad_token_id=32000,
                               hidden_act="silu", attention_bias=False, torch_dtype="bfloat16"),
                          "spm", "Phi-3-mini-4k widths, 7 of 32 layers"),
    "tiny": Shape(dict(_QWEN3, hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=64, vocab_size=4096), "spm", "a small Qwen3"),
}


def _tests_path() -> None:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))


def tensors_of(config: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor ``config`` implies, ``name -> (shape, role)``, by the architecture table."""
    from panelpack.formats import arch

    return arch.expected_tensors(arch.from_hf_config(config), "hf")


def n_params(config: dict[str, Any]) -> int:
    return sum(int(np.prod(s)) for s, _ in tensors_of(config).values())


def _tokenizer(folder: Path, shape: Shape) -> str:
    """Write the shape's tokenizer into ``folder``; which one it was."""
    _tests_path()
    if shape.tokenizer == "qwen2":
        import llama_convert

        vocab = llama_convert.vocab_dir()
        if vocab is not None:
            import gguf_models

            gguf_models.bpe_tokenizer(vocab / "ggml-vocab-qwen2.gguf", "qwen2", folder)
            return "llama.cpp's Qwen2 BPE vocabulary"
    import shutil

    import hf_models

    tok = hf_models.train_tokenizer(folder / "spm")
    (folder / "tokenizer.model").write_bytes(tok.read_bytes())
    shutil.rmtree(folder / "spm")
    return f"a SentencePiece BPE model of {hf_models.VOCAB} pieces, padded"


def write_checkpoint(folder: Path, name: str, seed: int = 0) -> Path:
    """The shape's random bf16 checkpoint (safetensors, config.json, tokenizer) in ``folder``."""
    from panelpack.convert.example import f32_to_bf16_bits
    from panelpack.formats.safetensors import save_file

    shape = SHAPES[name]
    folder.mkdir(parents=True, exist_ok=True)
    which = _tokenizer(folder, shape)
    (folder / "config.json").write_text(json.dumps(shape.config, indent=1))
    rng = np.random.default_rng(seed)
    out = {}
    for tname, (dims, role) in tensors_of(shape.config).items():
        x = rng.standard_normal(dims, dtype=np.float32)
        if role.endswith("norm"):
            x = 1 + x * np.float32(0.05)
        elif role.endswith("bias"):
            x *= np.float32(0.01)
        else:
            x *= np.float32(0.02)
        out[tname] = ("BF16", f32_to_bf16_bits(x))
    save_file(out, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "bench-shape.json").write_text(json.dumps({"shape": name, "seed": seed, "tokenizer": which}))
    return folder


def _run(argv: list[str]) -> None:
    r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-3000:]}")


def quantized(name: str, workdir: Path, quant: str = "Q4_K_M", layout: str = "panel64",
              seed: int = 0) -> tuple[Path, Path]:
    """``(GGUF, bundle)`` of the shape, quantized ``quant`` by panelpack, the bundle in ``layout``:
    made under ``workdir`` on the first call, reused after."""
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / f"{name}-bf16"
    gguf = workdir / f"{name}-{quant.lower()}.gguf"
    bundle = workdir / f"{name}-{quant.lower()}-{layout}.ppk"
    if not (src / "bench-shape.json").is_file():
        write_checkpoint(src, name, seed)
    if not gguf.is_file():
        tmp = gguf.with_suffix(".tmp.gguf")
        _run(["-m", "panelpack", "convert", str(src), "-o", str(tmp), "--quant", quant, "--no-progress"])
        os.replace(tmp, gguf)
    if not (bundle / "manifest.json").is_file():
        _run(["-m", "panelpack", "convert", str(gguf), "-o", str(bundle), "--layout", layout, "--no-progress"])
    return gguf, bundle


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="+", choices=sorted(SHAPES))
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/ppk-bench-models"))
    ap.add_argument("--quant", default="Q4_K_M")
    ap.add_argument("--layout", default="panel64")
    a = ap.parse_args()
    for name in a.shapes:
        gguf, bundle = quantized(name, a.workdir, a.quant, a.layout)
        print(f"{name}: {n_params(SHAPES[name].config) / 1e9:.2f} B parameters; {gguf} "
              f"({gguf.stat().st_size / 1e6:.0f} MB); {bundle}")


if __name__ == "__main__":
    main()
