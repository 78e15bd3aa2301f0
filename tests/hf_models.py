"""Tiny random HF checkpoints of every architecture in ``formats/arch``, and transformers' own
logits and greedy tokens for them: the reusable builders of the architecture tests.

Each checkpoint (:data:`SPECS`) comes from transformers' own config class with a small
shape: a width not a multiple of 256 (``hidden_size`` 384: Q4_K falls back, CQ's 128-groups
fit), GQA (6 query heads, 2 KV heads), 3 layers (Gemma 3: 6, its sliding pattern; Gemma 4: 6, two of them KV-shared; SmolLM3: 4,
its NoPE layer; LFM2: 4, convolution and attention alternating), the family's own blocks switched on (Llama 3 RoPE scaling, LongRoPE with
partial rotary, sliding windows of 16 positions, Granite's multipliers, Gemma's final
softcap), every parameter redrawn from a seeded normal, stored as bf16 safetensors by
``save_pretrained``, with a SentencePiece ``tokenizer.model`` (:func:`train_tokenizer`,
vocabulary :data:`VOCAB`) that llama.cpp's ``convert_hf_to_gguf.py`` accepts.

Use from a test (torch and transformers run in one child process per batch:
``tests/hf_peer.py``; skipped cleanly when they are absent)::

    import hf_models
    models = hf_models.build(tmp_path, ["qwen3", "phi3"])      # one child process
    m = models["qwen3"]
    m.folder        # the HF folder (config.json, model.safetensors, tokenizer.model)
    m.ids           # TOKENS token ids of a fixed text
    m.logits        # transformers' f32 logits of m.ids, [TOKENS, VOCAB]
    m.generated     # transformers' greedy continuation of m.ids[:PROMPT], GENERATE tokens

The session fixture ``hf_models`` (tests/conftest.py) builds all of :data:`SPECS` once per
test session; tests that need other shapes call :func:`build` with ``specs=`` of their own
(:func:`spec` copies one with overrides).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import needs
import numpy as np

PEER = Path(__file__).with_name("hf_peer.py")
VOCAB = 512
TOKENS = 64  # positions compared (>= 48), longer than every sliding window
PROMPT = 8  # prompt of the greedy-generation comparison
GENERATE = 12
WINDOW = 16

_COMMON = dict(vocab_size=VOCAB, hidden_size=384, intermediate_size=1024, num_hidden_layers=3,
               num_attention_heads=6, num_key_value_heads=2, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
               pad_token_id=0)


@dataclass(frozen=True)
class Spec:
    arch: str  # the row of formats/arch
    config_class: str  # transformers' config class
    config: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    std: float = 1.0  # matrices N(0, std / sqrt(fan_in))


def _longrope(n: int) -> dict[str, Any]:
    return {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": [1.0 + 0.05 * i for i in range(n)], "long_factor": [1.0 + 0.5 * i for i in range(n)]}


#: Gemma 4: sliding and global layers before the two KV-shared ones (4 reads 2, 5 reads 3); the last
#: layer before them global and the one before that sliding, as in E2B/E4B (llama.cpp's KV reuse
#: assumes it: another order fails its llama_kv_cache assertion)
GEMMA4_LAYERS = ["sliding_attention", "full_attention"] * 3

#: one checkpoint per architecture, each with its family's blocks switched on
SPECS: dict[str, Spec] = {s.arch: s for s in (
    Spec("llama", "LlamaConfig", dict(_COMMON, head_dim=64, tie_word_embeddings=True, max_position_embeddings=131072,
                                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                       "original_max_position_embeddings": 8192}), seed=1),
    Spec("mistral", "MistralConfig", dict(_COMMON, head_dim=64, tie_word_embeddings=False, sliding_window=WINDOW,
                                          rope_parameters={"rope_type": "default", "rope_theta": 1e6}), seed=2),
    Spec("qwen2", "Qwen2Config", dict(_COMMON, tie_word_embeddings=True,
                                      rope_parameters={"rope_type": "default", "rope_theta": 1e6}), seed=3),
    Spec("qwen3", "Qwen3Config", dict(_COMMON, head_dim=64, tie_word_embeddings=True,
                                      rope_parameters={"rope_type": "default", "rope_theta": 1e6}), seed=4),
    Spec("gemma3", "Gemma3TextConfig", dict(_COMMON, num_hidden_layers=6, head_dim=64, query_pre_attn_scalar=64,
                                            sliding_window=WINDOW, final_logit_softcapping=30.0,
                                            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                                             "sliding_attention": {"rope_type": "default",
                                                                                   "rope_theta": 1e4}}), seed=5),
    Spec("smollm3", "SmolLM3Config", dict(_COMMON, num_hidden_layers=4, tie_word_embeddings=True), seed=6),
    Spec("phi3", "Phi3Config", dict(_COMMON, tie_word_embeddings=False, sliding_window=WINDOW,
                                    max_position_embeddings=131072, original_max_position_embeddings=4096,
                                    rope_parameters=_longrope(24)), seed=7),
    Spec("lfm2", "Lfm2Config", dict({k: v for k, v in _COMMON.items() if k != "rms_norm_eps"}, num_hidden_layers=4,
                                    norm_eps=1e-5, full_attn_idxs=[1, 3], conv_L_cache=3, tie_word_embeddings=True,
                                    rope_parameters={"rope_type": "default", "rope_theta": 1e6}), seed=9),
    Spec("gemma4", "Gemma4TextConfig", dict(_COMMON, num_hidden_layers=6, head_dim=64, global_head_dim=128,
                                            num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=2,
                                            use_double_wide_mlp=True, hidden_size_per_layer_input=16,
                                            vocab_size_per_layer_input=VOCAB, sliding_window=WINDOW,
                                            final_logit_softcapping=30.0, layer_types=GEMMA4_LAYERS), seed=10),
    Spec("granite", "GraniteConfig", dict(_COMMON, tie_word_embeddings=True, embedding_multiplier=12.0,
                                          attention_multiplier=0.0078125, residual_multiplier=0.22, logits_scaling=8.0,
                                          rope_parameters={"rope_type": "default", "rope_theta": 1e4}), seed=8),
)}
ARCHES = tuple(SPECS)
#: checkpoints of a multimodal wrapper with its text tower only: Gemma 4's ``gemma4``
#: (Gemma4ForConditionalGeneration, tensors under ``model.language_model.``), the form cactus's
#: ``gemma4`` adapter loads
WRAPPED: dict[str, Spec] = {"gemma4": Spec("gemma4", "Gemma4Config", {"text_config": SPECS["gemma4"].config}, seed=11)}
#: the same with tiny vision and audio towers (E2B/E4B's form): passed through by plain repacking,
#: written by the cactus target as cactus writes them, refused by the runtime, dropped from GGUF
#: (llama.cpp's mmproj holds them)
WITH_TOWERS: dict[str, Spec] = {"gemma4": Spec("gemma4", "Gemma4Config", {
    "text_config": SPECS["gemma4"].config,
    "vision_config": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=2, head_dim=16, patch_size=4, position_embedding_size=64),
    "audio_config": dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[8, 4],
                         output_proj_dims=32)}, seed=12)}


def spec(arch: str, **overrides: Any) -> Spec:
    """A copy of ``SPECS[arch]`` with config keys overridden (``seed=``/``std=`` too)."""
    s = SPECS[arch]
    top = {k: overrides.pop(k) for k in ("seed", "std") if k in overrides}
    return replace(s, config={**s.config, **overrides}, **top)


@dataclass
class HFModel:
    spec: Spec
    folder: Path
    ids: list[int]
    logits: np.ndarray  # transformers, f32 [TOKENS, VOCAB]
    generated: list[int]  # transformers' greedy tokens after ids[:PROMPT]


def missing() -> str | None:
    """Why the builders cannot run here (None: they can)."""
    return needs.missing_modules(needs.HF_MODULES, "the architecture tests need")


def require() -> None:
    needs.skip_if(missing())


def train_tokenizer(folder: Path, vocab: int = VOCAB) -> Path:
    """A SentencePiece BPE model of ``vocab`` pieces (byte fallback, ``<|endoftext|>`` a control
    piece) trained on the shipped evaluation text: ``folder/tokenizer.model``."""
    import sentencepiece as spm

    folder.mkdir(parents=True, exist_ok=True)
    text = (Path(__file__).resolve().parents[1] / "data" / "eval.txt").read_text("utf-8")
    corpus = folder / "corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(folder / "tokenizer"), model_type="bpe",
                                   vocab_size=vocab, byte_fallback=True, character_coverage=1.0, num_threads=1,
                                   minloglevel=2, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
                                   control_symbols=["<|endoftext|>"])  # llama.cpp looks it up for Phi-3
    corpus.unlink()
    (folder / "tokenizer.vocab").unlink()
    return folder / "tokenizer.model"


def text_ids(n: int = TOKENS, tokenizer: Path | None = None) -> list[int]:
    """``n`` token ids of the shipped text (BOS first), by the trained tokenizer."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    text = (Path(__file__).resolve().parents[1] / "data" / "eval.txt").read_text("utf-8")
    return [1] + sp.encode(text[:4000])[: n - 1]


def run_peer(ops: list[dict], folder: Path, threads: int = 2, timeout: float = 1800) -> None:
    """Run ``ops`` in one child interpreter (see ``hf_peer.py``)."""
    job = folder / "hf-job.json"
    job.write_text(json.dumps({"threads": threads, "ops": ops}))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore", TRANSFORMERS_VERBOSITY="error")
    env.pop("PYTHONPATH", None)  # the peer never imports panelpack
    r = subprocess.run([sys.executable, str(PEER), str(job)], capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=str(folder))
    if r.returncode != 0:
        raise AssertionError(f"transformers peer failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def build(root: Path, arches=ARCHES, specs: dict[str, Spec] | None = None, reference: bool = True) -> dict[str, HFModel]:
    """Build the checkpoints of ``arches`` under ``root`` (one child process for all of them)
    and, with ``reference``, transformers' logits and greedy tokens for each."""
    require()
    specs = specs or SPECS
    root.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(root / "tokenizer")
    ids = text_ids(TOKENS, tok)
    ops, out = [], {}
    for a in arches:
        s = specs[a]
        folder = root / a
        ops.append({"op": "build", "config_class": s.config_class, "config": s.config, "folder": str(folder),
                    "seed": s.seed, "std": s.std})
        if reference:
            ops.append({"op": "forward", "folder": str(folder), "ids": ids, "out": str(root / f"{a}-logits.npy")})
            ops.append({"op": "generate", "folder": str(folder), "ids": ids[:PROMPT], "n": GENERATE,
                        "out": str(root / f"{a}-generated.json")})
    run_peer(ops, root)
    for a in arches:
        folder = root / a
        (folder / "tokenizer.model").write_bytes(tok.read_bytes())
        logits = np.load(root / f"{a}-logits.npy") if reference else np.zeros((0, VOCAB), np.float32)
        gen = json.loads((root / f"{a}-generated.json").read_text()) if reference else []
        out[a] = HFModel(specs[a], folder, ids, logits, gen)
    return out
