"""HF checkpoint -> Q4_K_M GGUF: panelpack in one process against llama.cpp's pipeline.

    python benchmarks/bench_gguf_out.py                 # Qwen3-0.6B shape, bf16, 3 runs
    python benchmarks/bench_gguf_out.py --runs 5 --shape qwen3-0.6b --threads 2

A random checkpoint of the real Qwen3-0.6B shape (hidden 1024, FFN 3072, 28 layers, 16 heads
over 8 KV heads of 128, vocabulary 151936, tied embeddings; bf16, seeded normals written with
numpy) with Qwen2's real tokenizer (rebuilt as ``tokenizer.json`` from llama.cpp's
``ggml-vocab-qwen2.gguf``, the vocabulary Qwen3 ships) is written under ``--workdir``. Then,
``--runs`` times, interleaved:

* **llama.cpp**: ``convert_hf_to_gguf.py SRC --outtype bf16`` (the llama-cpp-python 0.3.36
  source distribution's, with torch and transformers) then ``llama_model_quantize`` to Q4_K_M
  (llama-cpp-python, ``--threads`` threads): the two processes' wall times added, the larger
  peak memory;
* **panelpack**: ``python -m panelpack convert SRC -o OUT.gguf --quant Q4_K_M``, the whole process.

Both outputs are compared byte for byte (only the general.* provenance keys may differ). Memory
is sampled from ``/proc/PID/smaps_rollup`` by bench_convert's launcher; the bound (3 x the
largest tensor's f32 size + 300 MB) is judged on ``Anonymous`` (pages of the mapped checkpoint
are page cache, not the process's own). The page cache is warm (the checkpoint is read once),
numba's cache too (one untimed panelpack run). Requires the converter folder
(``PANELPACK_LLAMA_CONVERT`` or ``~/.cache/panelpack/llama-convert-0.3.36``, with ``models/``),
torch + transformers + llama-cpp-python in this interpreter's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_convert import loadavg, machine_line, rmtree, run_process, warm_page_cache  # noqa: E402

MB = 1_000_000
SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936),
    "tiny": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, vocab_size=151936),
}

_QUANTIZE = """
import ctypes, sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.nthread, p.allow_requantize = 15, int(sys.argv[3]), True
sys.exit(1 if llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)) else 0)
"""


def write_shards(folder: Path, specs, produce, shard_bytes: int = 5_000_000_000) -> list[Path]:
    """Stream a checkpoint of one raw dtype into safetensors files as hubs ship them.

    ``specs``: ``(name, dtype, shape)`` in state-dict order (``dtype`` a safetensors name, all
    the same width); ``produce(name)``: the tensor's data, any array of ``shape``'s size in that
    width (raw bits for BF16). Tensors go to shards of at most ``shard_bytes`` in that order
    (``model-00001-of-0000N.safetensors`` and ``model.safetensors.index.json``; one file is
    ``model.safetensors``, no index), each shard's header sorted by name as the safetensors
    library writes it. Only one tensor is in memory at a time."""
    import struct

    widths = {"BF16": 2, "F16": 2, "F32": 4}
    shards: list[list] = [[]]
    size = 0
    for name, dtype, shape in specs:
        nbytes = widths[dtype] * int(np.prod(shape))
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, dtype, list(shape), nbytes))
        size += nbytes
    n = len(shards)
    names = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    folder.mkdir(parents=True, exist_ok=True)
    weight_map, total = {}, 0
    for fname, items in zip(names, shards):
        items = sorted(items)
        header: dict = {"__metadata__": {"format": "pt"}}
        at = 0
        for name, dtype, shape, nbytes in items:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + nbytes]}
            at += nbytes
            weight_map[name] = fname
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        with open(folder / fname, "wb") as f:
            f.write(struct.pack("<Q", len(blob)) + blob)
            for name, _, _, nbytes in items:
                data = np.ascontiguousarray(produce(name)).reshape(-1).view(np.uint8)
                assert data.nbytes == nbytes, name
                f.write(data.data)
        total += at
    if n > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return [folder / f for f in names]


def write_checkpoint(folder: Path, shape: dict, vocab_gguf: Path, seed: int = 0,
                     shard_bytes: int = 5_000_000_000) -> Path:
    """The random Qwen3-shaped bf16 checkpoint and its tokenizer."""
    from panelpack.convert.example import f32_to_bf16_bits

    import gguf_models

    folder.mkdir(parents=True, exist_ok=True)
    gguf_models.bpe_tokenizer(vocab_gguf, "qwen2", folder)
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "max_position_embeddings": 40960,
           "rms_norm_eps": 1e-6, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
           "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
           "attention_bias": False, "torch_dtype": "bfloat16", **shape}
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    rng = np.random.default_rng(seed)
    h, ff, hd = shape["hidden_size"], shape["intermediate_size"], shape["head_dim"]
    q, kv = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd

    def w(*s):
        return ("BF16", f32_to_bf16_bits(rng.standard_normal(s, dtype=np.float32) * np.float32(0.02)))

    def norm(n):
        return ("BF16", f32_to_bf16_bits(1 + rng.standard_normal(n, dtype=np.float32) * np.float32(0.05)))

    t = {"model.embed_tokens.weight": w(shape["vocab_size"], h), "model.norm.weight": norm(h)}
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": norm(h), p + "post_attention_layernorm.weight": norm(h),
                  p + "self_attn.q_proj.weight": w(q, h), p + "self_attn.k_proj.weight": w(kv, h),
                  p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.o_proj.weight": w(h, q),
                  p + "self_attn.q_norm.weight": norm(hd), p + "self_attn.k_norm.weight": norm(hd),
                  p + "mlp.gate_proj.weight": w(ff, h), p + "mlp.up_proj.weight": w(ff, h),
                  p + "mlp.down_proj.weight": w(h, ff)})
    write_shards(folder, [(k, v[0], v[1].shape) for k, v in t.items()], lambda k: t[k][1], shard_bytes)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/ppk-bench-gguf-out")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE.parent / "tests"))
    import gguf_compare
    import llama_convert

    conv = llama_convert.converter_dir()
    vocab = llama_convert.vocab_dir()
    if conv is None or vocab is None:
        sys.exit("llama.cpp's converter folder (with models/) is needed: see the module docstring")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"{args.shape}-bf16"
    if not (src / "model.safetensors").is_file():
        write_checkpoint(src, SHAPES[args.shape], vocab / "ggml-vocab-qwen2.gguf")
    warm_page_cache(src / "model.safetensors")
    from panelpack.formats.checkpoint import open_checkpoint

    with open_checkpoint(src) as ck:
        largest = max(4 * t.n_elements for t in ck.tensors)
    env = dict(os.environ, PYTHONPATH=str(conv / "gguf-py"), PYTHONWARNINGS="ignore", OMP_NUM_THREADS=str(args.threads))
    py = sys.executable
    ref_bf16, ref_q, ours = work / "ref-bf16.gguf", work / "ref-q4_k_m.gguf", work / "ours-q4_k_m.gguf"

    def llama_cpp():
        for f in (ref_bf16, ref_q):
            f.unlink(missing_ok=True)
        a = run_process([py, str(conv / "convert_hf_to_gguf.py"), str(src), "--outtype", "bf16", "--outfile",
                         str(ref_bf16)], env, sample=True).check("convert_hf_to_gguf.py")
        b = run_process([py, "-c", _QUANTIZE, str(ref_bf16), str(ref_q), str(args.threads)], None,
                        sample=True).check("llama_model_quantize")
        return a.wall + b.wall, max(a.anon, b.anon), (a.wall, b.wall)

    def panelpack():
        ours.unlink(missing_ok=True)
        r = run_process([py, "-m", "panelpack", "convert", str(src), "-o", str(ours), "--quant", "Q4_K_M",
                         "--no-progress"], dict(os.environ), sample=True).check("panelpack convert")
        return r.wall, r.anon, (r.wall,)

    panelpack()  # numba's cache
    results: dict[str, list] = {"llama.cpp": [], "panelpack": []}
    loads = [loadavg()]
    for i in range(args.runs):
        order = [("llama.cpp", llama_cpp), ("panelpack", panelpack)]
        for name, fn in (order if i % 2 == 0 else order[::-1]):
            results[name].append(fn())
        loads.append(loadavg())
    diffs = gguf_compare.differences(ours, ref_q)
    print(machine_line())
    print(f"checkpoint {args.shape} bf16: {(src / 'model.safetensors').stat().st_size / MB:.0f} MB, "
          f"largest tensor f32 {largest / MB:.0f} MB; {args.runs} runs; load {'; '.join(loads)}")
    for name, rs in results.items():
        walls = [r[0] for r in rs]
        parts = " + ".join(f"{statistics.median(r[2][j] for r in rs):.1f}" for j in range(len(rs[0][2])))
        print(f"{name:10s} wall median {statistics.median(walls):6.2f} s (min {min(walls):.2f}, max {max(walls):.2f};"
              f" {parts}), peak Anonymous {max(r[1] for r in rs) / MB:.0f} MB")
    ratio = statistics.median(r[0] for r in results["llama.cpp"]) / statistics.median(r[0] for r in results["panelpack"])
    bound = 3 * largest + 300 * MB
    print(f"panelpack {ratio:.2f}x faster (target >= 4x); peak {max(r[1] for r in results['panelpack']) / MB:.0f} MB "
          f"vs bound {bound / MB:.0f} MB; output {'byte-identical (but provenance)' if not diffs else diffs}")
    if not args.keep:
        rmtree(work)


if __name__ == "__main__":
    main()
