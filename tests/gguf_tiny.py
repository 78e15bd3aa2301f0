"""Tiny HF folders built with numpy alone (no torch): the fast tier's inputs for the GGUF writer.

:func:`spm_model` writes a SentencePiece ``ModelProto`` by hand (the bytes of
sentencepiece_model.proto, see formats/sentencepiece.py); :func:`folder` writes ``config.json``,
``model.safetensors`` (seeded normals in the requested dtype, every tensor the architecture
table expects of the row), ``tokenizer.model`` and a ``tokenizer_config.json``, for any row.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from panelpack.convert.example import f32_to_bf16_bits
from panelpack.formats.safetensors import save_file

from test_sentencepiece import field, varint  # the ModelProto encoder of the SentencePiece tests

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def spm_model(pieces: list[tuple[str, float, int]]) -> bytes:
    """A ModelProto holding ``pieces`` (text, score, type), in id order."""
    out = b""
    for text, score, kind in pieces:
        body = field(1, 2, text.encode()) + field(2, 5, struct.pack("<f", score))
        if kind != NORMAL:
            body += field(3, 0, varint(kind))
        out += field(1, 2, body)
    return out


def spm_pieces(n: int = 300) -> list[tuple[str, float, int]]:
    """<unk> <s> </s>, the 256 byte tokens, then words with falling scores."""
    out = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL)]
    out += [(f"<0x{b:02X}>", 0.0, BYTE) for b in range(256)]
    words = ["\u2581the", "\u2581a", "\u2581of", "in", "er", "\u2581to", "ing", "\u2581and", "on", "at", "\u2581is"]
    i = 0
    while len(out) < n:
        w = words[i] if i < len(words) else f"\u2581w{i}"
        out.append((w, -float(i + 1), NORMAL))
        i += 1
    return out


#: config.json keys of each row's tiny checkpoint beyond the common ones (its family's blocks on)
EXTRA = {
    "llama": {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
    "qwen3": {"head_dim": 16},
    "gemma3": {"head_dim": 16, "sliding_window": 8, "query_pre_attn_scalar": 16,
               "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}},
    "phi3": {"max_position_embeddings": 4096, "original_max_position_embeddings": 256,
             "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                                 "short_factor": [1.0 + 0.1 * i for i in range(4)],
                                 "long_factor": [1.0 + 0.5 * i for i in range(4)]}},
    "lfm2": {"full_attn_idxs": [1], "norm_eps": 1e-6, "conv_L_cache": 3},  # a convolution layer, then attention
    "gemma4": {"head_dim": 16, "global_head_dim": 32, "sliding_window": 8, "hidden_size_per_layer_input": 8,
               "vocab_size_per_layer_input": 300, "num_hidden_layers": 3, "num_kv_shared_layers": 1,
               "layer_types": ["sliding_attention", "full_attention", "full_attention"],
               "rope_parameters": {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                      "rope_theta": 1e6},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}},
    "granite": {"embedding_multiplier": 12.0, "attention_multiplier": 0.0625, "residual_multiplier": 0.25,
                "logits_scaling": 4.0},
}


def folder(root: Path, arch: str = "llama", dtype: str = "BF16", seed: int = 0, vocab: int = 300,
           tied: bool = False, hidden: int = 64) -> Path:
    """A tiny checkpoint of a row of the architecture table: hidden 64, 4 heads over 2 KV heads,
    FFN 96, 2 layers, every tensor the table says the row has (seeded normals; norms near 1)."""
    from panelpack.formats import arch as table

    row = table.get(arch)
    cfg = {"architectures": [row.hf_architectures[0]], "model_type": row.hf_model_types[0], "hidden_size": hidden,
           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": vocab, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
           "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "tie_word_embeddings": tied,
           "bos_token_id": 1, "eos_token_id": 2, **EXTRA.get(arch, {})}
    rng = np.random.default_rng(seed)
    t = {}
    for name, (shape, role) in table.expected_tensors(table.from_hf_config(cfg), "hf").items():
        x = rng.normal(0, 0.05, size=shape).astype(np.float32)
        t[name] = x + np.float32(1) if len(shape) == 1 and "norm" in role else x
    out = Path(root)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    store = {"BF16": lambda a: ("BF16", f32_to_bf16_bits(a)), "F32": lambda a: ("F32", a),
             "F16": lambda a: ("F16", a.astype(np.float16))}[dtype]
    save_file({k: store(v) for k, v in t.items()}, out / "model.safetensors", metadata={"format": "pt"})
    (out / "tokenizer.model").write_bytes(spm_model(spm_pieces(vocab - 4)))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
        "tokenizer_class": "LlamaTokenizer",
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
        "added_tokens_decoder": {str(vocab - 2): {"content": "<|im_start|>", "special": True},
                                 str(vocab - 1): {"content": "<tool>", "special": False}}}))
    return out


def hf_values(folder_path: Path, name: str) -> np.ndarray:
    """An HF tensor of a :func:`folder` checkpoint as f32."""
    from panelpack.formats import blocks
    from panelpack.formats.checkpoint import open_checkpoint

    with open_checkpoint(folder_path) as ck:
        info = ck.tensor(name)
        return blocks.dequantize(np.asarray(ck.raw(name)), info.type, info.n, info.k).reshape(info.shape)
