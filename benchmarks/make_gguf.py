"""Deterministic llama-shaped GGUF files of any size and type mix, for the big benchmarks.

    python benchmarks/make_gguf.py /tmp/big.gguf --layers 8 --dim 4096 --ffn 11008 --vocab 32000 \\
        --types q4_k,q8_0
    python benchmarks/make_gguf.py /tmp/big4.gguf --size 4G --types q4_k,q8_0
    python benchmarks/make_gguf.py /tmp/x.gguf --size 1.2G --types q4_0,q6_k,q5_k --seed 3

Tensors are those of a llama model (``token_embd``, per layer ``attn_norm``, ``attn_q/k/v``,
``attn_output``, ``ffn_norm``, ``ffn_gate/up/down``, then ``output_norm``, ``output``), with the
hyperparameters and a synthetic tokenizer in the metadata. The matrices take the ``--types``
in turn, in file order (``token_embd`` the first, ``blk.0.attn_q`` the second, ...); norms are
F32. ``--size`` picks the number of layers whose file is closest to the size asked (the other
shape options stay as given).

Every block is valid: its f16 fields (``d``, ``dmin``, ``m``) are finite, small, non-zero
values of both signs where the type allows (``m``), codes and 6-bit scales random, Q8_0 codes in
-127..127 as ggml writes them. To write at disk speed the generator makes one pool of random
valid blocks per type (``POOL_BYTES``, from ``--seed``) and writes each tensor as block-aligned
windows of it at offsets drawn from the same seed: the same arguments give the same bytes, and
no two neighbouring windows coincide, but the data repeats at a scale of the pool (irrelevant to
repacking and hashing; a long-window compressor would notice). Written with panelpack's own
``GGUFStreamWriter`` (read back by panelpack, gguf-py and ggml alike).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

import numpy as np

from panelpack.formats import qtypes
from panelpack.formats.gguf import GGUFStreamWriter
from panelpack.formats.gguf import GGUFValueType as VT

POOL_BYTES = 8 << 20  # random valid blocks per type; windows of it are written
F16_SIGNED = {"m"}  # f16 fields that take both signs (Q4_1/Q5_1 minimum); d/dmin stay positive


def parse_size(s: str) -> int:
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kKmMgGtT]?)i?[bB]?\s*", s)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {s!r} (e.g. 1.2G, 4G, 800M)")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def valid_pool(t, rng: np.random.Generator, nbytes: int = POOL_BYTES) -> np.ndarray:
    """uint8 [blocks, type_size] random blocks of ``t`` with valid f16 fields and Q8_0 codes."""
    nblk = max(1, nbytes // t.type_size)
    pool = rng.integers(0, 1 << 63, (nblk * t.type_size + 7) // 8, dtype=np.uint64).view(np.uint8)
    pool = pool[:nblk * t.type_size].reshape(nblk, t.type_size)
    for name, f in t.codec_module.PLAN.fields.items():
        if f.dtype == "u2":  # little-endian f16 words: byte of the first part of each element
            for el in f.parts:
                at = el[0][0]
                mag = np.exp2(rng.uniform(-10.0, -3.0, nblk)).astype(np.float32)
                if name in F16_SIGNED:
                    mag *= rng.choice(np.array([-1.0, 1.0], np.float32), nblk)
                pool[:, at:at + 2] = mag.astype("<f2").view(np.uint8).reshape(nblk, 2)
        elif f.dtype == "i1" and t.name == "Q8_0":  # -128 never comes out of ggml's quantizer
            codes = pool[:, 2:]
            codes[codes == 0x80] = 0x81
    return pool


def llama_tensors(layers: int, dim: int, ffn: int, vocab: int, kv_dim: int) -> list[tuple[str, tuple[int, int] | tuple[int]]]:
    """(name, numpy shape) in file order; matrices are (N, K)."""
    out: list = [("token_embd.weight", (vocab, dim))]
    for i in range(layers):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (dim,)), (b + "attn_q.weight", (dim, dim)),
                (b + "attn_k.weight", (kv_dim, dim)), (b + "attn_v.weight", (kv_dim, dim)),
                (b + "attn_output.weight", (dim, dim)), (b + "ffn_norm.weight", (dim,)),
                (b + "ffn_gate.weight", (ffn, dim)), (b + "ffn_up.weight", (ffn, dim)),
                (b + "ffn_down.weight", (dim, ffn))]
    out += [("output_norm.weight", (dim,)), ("output.weight", (vocab, dim))]
    return out


def assign_types(tensors, types) -> list[tuple[str, tuple, object]]:
    out, i = [], 0
    for name, shape in tensors:
        if len(shape) == 1:
            out.append((name, shape, qtypes.get("F32")))
        else:
            out.append((name, shape, types[i % len(types)]))
            i += 1
    return out


def data_bytes(specs) -> int:
    total = 0
    for _, shape, t in specs:
        n = 1 if len(shape) == 1 else shape[0]
        total += n * t.row_bytes(shape[-1])
    return total


def layers_for_size(size: int, dim: int, ffn: int, vocab: int, kv_dim: int, types) -> int:
    """The layer count whose data size is closest to ``size``."""
    base = data_bytes(assign_types(llama_tensors(0, dim, ffn, vocab, kv_dim), types))
    one = data_bytes(assign_types(llama_tensors(2, dim, ffn, vocab, kv_dim), types)) - base
    return max(1, round((size - base) / (one / 2)))


def add_llama_kv(w, *, layers: int, dim: int, ffn: int, vocab: int, heads: int, kv_heads: int) -> None:
    """The llama hyperparameters and a synthetic tokenizer, as pairs of the writer ``w``."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(3, vocab)]
    meta = {
        "general.name": (f"synthetic-llama-{layers}x{dim}", VT.STRING),
        "general.quantization_version": (2, VT.UINT32),
        "llama.block_count": (layers, VT.UINT32), "llama.context_length": (4096, VT.UINT32),
        "llama.embedding_length": (dim, VT.UINT32), "llama.feed_forward_length": (ffn, VT.UINT32),
        "llama.attention.head_count": (heads, VT.UINT32), "llama.attention.head_count_kv": (kv_heads, VT.UINT32),
        "llama.rope.freq_base": (10000.0, VT.FLOAT32), "llama.attention.layer_norm_rms_epsilon": (1e-5, VT.FLOAT32),
        "llama.rope.dimension_count": (dim // heads, VT.UINT32), "llama.vocab_size": (vocab, VT.UINT32),
        "tokenizer.ggml.model": ("llama", VT.STRING),
        "tokenizer.ggml.bos_token_id": (1, VT.UINT32), "tokenizer.ggml.eos_token_id": (2, VT.UINT32),
    }
    for key, (value, vt) in meta.items():
        w.add_kv(key, value, vt)
    w.add_kv("tokenizer.ggml.tokens", tokens, VT.ARRAY, VT.STRING)
    w.add_kv("tokenizer.ggml.scores", np.linspace(0, -1, vocab, dtype=np.float32), VT.ARRAY, VT.FLOAT32)
    w.add_kv("tokenizer.ggml.token_type", [3, 3, 3] + [1] * (vocab - 3), VT.ARRAY, VT.INT32)


def write(path, *, layers: int, dim: int, ffn: int, vocab: int, heads: int, kv_heads: int, types, seed: int,
          chunk: int = POOL_BYTES // 2) -> dict:
    """Write the file; returns {'bytes', 'tensors', 'seconds', 'types': {name: bytes}}."""
    t0 = time.perf_counter()
    kv_dim = dim // heads * kv_heads
    specs = assign_types(llama_tensors(layers, dim, ffn, vocab, kv_dim), types)
    rng = np.random.default_rng(seed)
    pools = {t.name: valid_pool(t, rng) for t in dict.fromkeys(t for _, _, t in specs if t.name != "F32")}
    w = GGUFStreamWriter(path, arch="llama")
    add_llama_kv(w, layers=layers, dim=dim, ffn=ffn, vocab=vocab, heads=heads, kv_heads=kv_heads)
    for name, shape, t in specs:
        w.add_tensor_info(name, shape, t)
    per_type: dict[str, int] = {}
    with w:
        w.write_header()
        for name, shape, t in specs:
            if t.name == "F32":
                w.write_tensor_data(name, (1.0 + 0.1 * rng.standard_normal(shape[0])).astype("<f4"))
                per_type["F32"] = per_type.get("F32", 0) + 4 * shape[0]
                continue
            pool = pools[t.name].reshape(-1)
            total = shape[0] * t.row_bytes(shape[1])
            per_type[t.name] = per_type.get(t.name, 0) + total
            step = chunk // t.type_size * t.type_size
            span = pool.size - step  # window starts: block-aligned offsets in [0, span]
            done = 0
            while done < total:
                size = min(step, total - done)
                at = int(rng.integers(0, span // t.type_size + 1)) * t.type_size
                w.write_tensor_data(name, pool[at:at + size], partial=True)
                done += size
    return {"bytes": os.path.getsize(path), "tensors": len(specs), "layers": layers,
            "seconds": time.perf_counter() - t0, "types": per_type}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=None, help="default: --heads (no GQA)")
    ap.add_argument("--types", default="q4_k,q8_0", help="matrix types, taken in turn in file order")
    ap.add_argument("--size", type=parse_size, default=None, help="e.g. 1.2G, 4G: choose --layers to get near it")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    kv_heads = a.kv_heads or a.heads
    types = [qtypes.get(s.strip()) for s in a.types.split(",") if s.strip()]
    if not types or any(t.codec_module is None or t.name in ("F32", "F16", "BF16") for t in types):
        ap.error("--types takes block-quantized types, e.g. q4_k,q8_0")
    for d, what in ((a.dim, "--dim"), (a.ffn, "--ffn")):
        if any(d % t.block_size for t in types):
            ap.error(f"{what} {d} is not a multiple of every type's block size")
    if a.dim % a.heads or a.heads % kv_heads:
        ap.error("--dim must divide by --heads, and --heads by --kv-heads")
    layers = a.layers
    if a.size is not None:
        layers = layers_for_size(a.size, a.dim, a.ffn, a.vocab, a.dim // a.heads * kv_heads, types)
    r = write(a.path, layers=layers, dim=a.dim, ffn=a.ffn, vocab=a.vocab, heads=a.heads, kv_heads=kv_heads,
              types=types, seed=a.seed)
    mix = ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in r["types"].items())
    print(f"{a.path}: {r['bytes'] / 1e9:.3f} GB, {r['tensors']} tensors, {layers} layers ({mix}) in "
          f"{r['seconds']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
