"""A llama-shaped 8B model (Llama 3 8B's shape) through panelpack on this machine (issue 27, item 3).

    nice -n 19 python benchmarks/bench_7b.py --workdir /work/bench7b-tmp          # every phase
    nice -n 19 python benchmarks/bench_7b.py --phases quant multi verify export pack
    python benchmarks/bench_7b.py --layers 2 --vocab 32000 --workdir /tmp/b7      # a small trial

The shape: 32 layers, d = 4096, FFN 14336, vocabulary 128256, 32 heads over 8 KV heads, untied
output (8.03 B parameters). Every tensor's values are windows of one pool of bf16 normals
(sigma 0.02; magnitudes under 2^-14 set to 0 so each value is exact in f16 as well), at offsets
drawn from a seed per tensor name: the F16 GGUF (``make_gguf.py``'s llama tensors and metadata;
q/k rows permuted as ``convert_hf_to_gguf.py`` permutes them) and the bf16 HF shards
(``bench_gguf_out.write_shards``: ~5 GB shards and ``model.safetensors.index.json``, Llama 3's
tokenizer) hold the same numbers, so the Q4_K_M of either must be the same blocks.

Phases (``--phases``; results appended to ``WORKDIR/results.jsonl`` as they come, so a cut run
keeps what it measured). Every timed command runs whole-process under bench_convert's launcher
(wall, CPU, peak ``Anonymous`` from ``/proc/PID/smaps_rollup``) with the same 2 threads
(``--threads``): ``llama_model_quantize`` nthread, panelpack ``--jobs``, NUMBA_NUM_THREADS.

* ``gguf``: write the F16 GGUF (16 GB);
* ``quant``: ``llama_model_quantize`` F16 -> Q4_K_M (llama-cpp-python) vs ``panelpack convert
  F16.gguf -o OUT.gguf --quant Q4_K_M``; the two files compared tensor for tensor
  (tests/gguf_compare.py) and llama.cpp's tensors' digests kept (``ref-digests.json``);
  llama.cpp first, panelpack second (``--panelpack-first`` reverses them);
* ``multi``: ``panelpack convert F16.gguf --quant Q4_K_M -o a.ppk --layout panel64 -o b.ppk
  --layout ggml-x8`` (one run, two bundles; ggml-x8's removed afterwards);
* ``verify``: ``panelpack verify a.ppk --level all`` (target <= 5 min);
* ``export``: ``panelpack export a.ppk -o x.gguf``, its tensors against llama.cpp's digests;
* ``pack``: ``panelpack pack a.ppk -o a.ppk.tar.zst --threads THREADS``;
* ``hf``: the F16 GGUF and bundles removed, the bf16 shards written, ``panelpack convert HF
  -o OUT.gguf --quant Q4_K_M`` timed and its tensors against llama.cpp's digests.

Before the timed runs, the same commands on a tiny model of the same kind fill numba's cache.
Disk: at most the F16 GGUF (or the shards) + two 4.9 GB outputs at once (~26 GB). The page
cache cannot hold 16 GB next to the other work of a shared host: reads are partly cold.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from bench_convert import loadavg, machine_line, rmtree, run_process  # noqa: E402

MB = 1_000_000
POOL = 1 << 25  # bf16 values in the pool (64 MB)
WINDOW = 1 << 20  # values per window
PHASES = ("gguf", "quant", "multi", "verify", "export", "pack", "hf")

_QUANTIZE = """
import ctypes, sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.nthread, p.allow_requantize = 15, int(sys.argv[3]), True
sys.exit(1 if llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)) else 0)
"""


class Model:
    """The shape and the values of every tensor, by HF name (GGUF names map onto them)."""

    def __init__(self, layers: int, dim: int, ffn: int, vocab: int, heads: int, kv_heads: int, seed: int):
        from panelpack.convert.example import f32_to_bf16_bits

        self.layers, self.dim, self.ffn, self.vocab, self.heads, self.kv_heads = layers, dim, ffn, vocab, heads, kv_heads
        self.seed = seed
        rng = np.random.default_rng(seed)
        bits = f32_to_bf16_bits(rng.standard_normal(POOL, dtype=np.float32) * np.float32(0.02))
        bits[(bits & 0x7FFF) < 0x3880] = 0  # |x| < 2^-14: not a normal f16
        self.pool_bf16 = bits
        self.pool_f16 = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float16)
        assert np.array_equal(self.pool_f16.astype(np.float32), (bits.astype(np.uint32) << 16).view(np.float32))
        kv = dim // heads * kv_heads
        self.hf: list[tuple[str, str, tuple]] = [("model.embed_tokens.weight", "token_embd.weight", (vocab, dim))]
        for i in range(layers):
            p, b = f"model.layers.{i}.", f"blk.{i}."
            self.hf += [(p + "input_layernorm.weight", b + "attn_norm.weight", (dim,)),
                        (p + "self_attn.q_proj.weight", b + "attn_q.weight", (dim, dim)),
                        (p + "self_attn.k_proj.weight", b + "attn_k.weight", (kv, dim)),
                        (p + "self_attn.v_proj.weight", b + "attn_v.weight", (kv, dim)),
                        (p + "self_attn.o_proj.weight", b + "attn_output.weight", (dim, dim)),
                        (p + "post_attention_layernorm.weight", b + "ffn_norm.weight", (dim,)),
                        (p + "mlp.gate_proj.weight", b + "ffn_gate.weight", (ffn, dim)),
                        (p + "mlp.up_proj.weight", b + "ffn_up.weight", (ffn, dim)),
                        (p + "mlp.down_proj.weight", b + "ffn_down.weight", (dim, ffn))]
        self.hf += [("model.norm.weight", "output_norm.weight", (dim,)), ("lm_head.weight", "output.weight", (vocab, dim))]
        self.by_gguf = {g: (h, s) for h, g, s in self.hf}

    def largest_f32(self) -> int:
        return max(4 * int(np.prod(s)) for _, _, s in self.hf)

    def bf16(self, name: str, shape: tuple) -> np.ndarray:
        """uint16 bf16 bits of the HF tensor ``name``, flat."""
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
        n = int(np.prod(shape))
        if len(shape) == 1:  # norms around 1
            from panelpack.convert.example import f32_to_bf16_bits

            return f32_to_bf16_bits(1 + rng.standard_normal(n, dtype=np.float32) * np.float32(0.05))
        out = np.empty(n, np.uint16)
        for at in range(0, n, WINDOW):
            size = min(WINDOW, n - at)
            start = int(rng.integers(0, POOL - size + 1))
            out[at:at + size] = self.pool_bf16[start:start + size]
        return out

    def gguf_data(self, gname: str) -> np.ndarray:
        """The GGUF tensor's bytes: F32 norms, F16 matrices, q/k rows permuted as the converter does."""
        hname, shape = self.by_gguf[gname]
        bits = self.bf16(hname, shape)
        f32 = (bits.astype(np.uint32) << 16).view(np.float32)
        if len(shape) == 1:
            return f32.astype("<f4")
        w = f32.reshape(shape)
        if gname.endswith(("attn_q.weight", "attn_k.weight")):
            h = self.heads if gname.endswith("attn_q.weight") else self.kv_heads
            w = w.reshape(h, 2, shape[0] // h // 2, shape[1]).swapaxes(1, 2).reshape(shape)
        return np.ascontiguousarray(w).astype("<f2")

    def write_gguf(self, path: Path) -> None:
        import make_gguf

        from panelpack.formats import qtypes
        from panelpack.formats.gguf import GGUFStreamWriter

        kv = self.dim // self.heads * self.kv_heads
        specs = make_gguf.llama_tensors(self.layers, self.dim, self.ffn, self.vocab, kv)
        w = GGUFStreamWriter(path, arch="llama")
        make_gguf.add_llama_kv(w, layers=self.layers, dim=self.dim, ffn=self.ffn, vocab=self.vocab, heads=self.heads,
                               kv_heads=self.kv_heads)
        for name, shape in specs:
            w.add_tensor_info(name, shape, qtypes.get("F32" if len(shape) == 1 else "F16"))
        with w:
            w.write_header()
            for name, _ in specs:
                w.write_tensor_data(name, self.gguf_data(name).view(np.uint8))

    def write_hf(self, folder: Path, vocab_gguf: Path) -> None:
        import bench_gguf_out

        import gguf_models

        folder.mkdir(parents=True, exist_ok=True)
        gguf_models.bpe_tokenizer(vocab_gguf, "llama-bpe", folder)
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": self.dim,
               "intermediate_size": self.ffn, "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
               "num_key_value_heads": self.kv_heads, "vocab_size": self.vocab, "max_position_embeddings": 8192,
               "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False, "hidden_act": "silu",
               "bos_token_id": 128000, "eos_token_id": 128001, "attention_bias": False, "mlp_bias": False,
               "torch_dtype": "bfloat16"}
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))
        shapes = {h: s for h, _, s in self.hf}
        bench_gguf_out.write_shards(folder, [(h, "BF16", s) for h, _, s in self.hf], lambda h: self.bf16(h, shapes[h]))


def digests(path: Path) -> dict[str, list]:
    """{tensor name: [type, blake2b of its bytes]} of a GGUF file."""
    from panelpack.formats.gguf import GGUFFile

    g = GGUFFile(path)
    return {r.name: [r.type.name, hashlib.blake2b(bytes(g.raw(r.name)), digest_size=16).hexdigest()]
            for r in g.tensor_records}


def compare(got: dict, want: dict) -> str:
    if set(got) != set(want):
        return f"tensor sets differ: only ours {sorted(set(got) - set(want))[:5]}, only llama's {sorted(set(want) - set(got))[:5]}"
    bad = [n for n in want if got[n] != want[n]]
    return f"{len(want)}/{len(want)} tensors identical" if not bad else \
        f"{len(bad)}/{len(want)} tensors differ, e.g. {[(n, got[n][0], want[n][0]) for n in bad[:5]]}"


def folder_bytes(p: Path) -> int:
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


class Bench:
    def __init__(self, args):
        self.a = args
        self.work = Path(args.workdir)
        self.work.mkdir(parents=True, exist_ok=True)
        self.results = self.work / "results.jsonl"
        t = str(args.threads)
        self.env = dict(os.environ, NUMBA_NUM_THREADS=t, OMP_NUM_THREADS=t, PYTHONWARNINGS="ignore")
        self.model = Model(args.layers, args.dim, args.ffn, args.vocab, args.heads, args.kv_heads, args.seed)
        self.bound = 3 * self.model.largest_f32() + 300 * MB
        self.f16 = self.work / "f16.gguf"
        self.hf = self.work / "hf-bf16"
        self.p64 = self.work / "q4km-panel64.ppk"

    def log(self, phase: str, **kw) -> None:
        kw = {"phase": phase, "utc": time.strftime("%H:%M:%S", time.gmtime()), "load": loadavg(), **kw}
        with open(self.results, "a") as f:
            f.write(json.dumps(kw) + "\n")
        print(json.dumps(kw), flush=True)

    def run(self, what: str, argv: list, **extra):
        r = run_process([str(x) for x in argv], self.env, sample=True)
        row = dict(what=what, wall=round(r.wall, 2), cpu=round(r.cpu, 2), anon_mb=round(r.anon / MB),
                   rss_mb=round(r.rss / MB), rc=r.rc, within_bound=r.anon <= self.bound, **extra)
        if r.rc:
            row["log_tail"] = r.log[-1500:]
        self.log(what.split()[0], **row)
        return r

    def pp(self, *args) -> list:
        return [sys.executable, "-m", "panelpack", *args]

    def warm(self) -> None:
        """The timed commands once on a tiny model of the same kind: numba's cache, bytecode."""
        tiny = self.work / "warm"
        rmtree(tiny)
        tiny.mkdir()
        m = Model(2, 512, 1024, 2048, 8, 2, self.a.seed)
        m.write_gguf(tiny / "t.gguf")
        j = ["--jobs", str(self.a.threads)]
        for argv in (self.pp("convert", tiny / "t.gguf", "-o", tiny / "t.q.gguf", "--quant", "Q4_K_M", "--no-progress", *j),
                     self.pp("convert", tiny / "t.gguf", "--quant", "Q4_K_M", "--no-progress", *j, "-o", tiny / "a.ppk",
                             "--layout", "panel64", "-o", tiny / "b.ppk", "--layout", "ggml-x8"),
                     self.pp("verify", tiny / "a.ppk", "--level", "all"),
                     self.pp("export", tiny / "a.ppk", "-o", tiny / "x.gguf"),
                     self.pp("pack", tiny / "a.ppk", "-o", tiny / "a.tar.zst", "--threads", str(self.a.threads))):
            r = run_process([str(x) for x in argv], self.env)
            if r.rc:
                print(f"warm-up failed: {' '.join(map(str, argv))}\n{r.log[-2000:]}", flush=True)
        rmtree(tiny)

    # -- phases -----------------------------------------------------------------------------
    def gguf(self) -> None:
        t0 = time.perf_counter()
        self.model.write_gguf(self.f16)
        self.log("gguf", what="write F16 GGUF", seconds=round(time.perf_counter() - t0, 1),
                 bytes=self.f16.stat().st_size)

    def quant(self) -> None:
        ref, ours = self.work / "llama-q4km.gguf", self.work / "pp-q4km.gguf"
        for f in (ref, ours):
            rmtree(f)
        def llama():
            return self.run("quant llama_model_quantize", [sys.executable, "-c", _QUANTIZE, self.f16, ref, self.a.threads])

        def panelpack():
            return self.run("quant panelpack convert --quant Q4_K_M",
                            self.pp("convert", self.f16, "-o", ours, "--quant", "Q4_K_M", "--no-progress",
                                    "--jobs", self.a.threads))

        if self.a.panelpack_first:
            r2, r1 = panelpack(), llama()
        else:
            r1, r2 = llama(), panelpack()
        if r1.rc == 0:
            want = digests(ref)
            (self.work / "ref-digests.json").write_text(json.dumps(want))
        if r1.rc == 0 and r2.rc == 0:
            import gguf_compare

            diffs = gguf_compare.differences(ours, ref)
            self.log("quant", what="compare", identical=not diffs, diffs=diffs[:5], tensors=compare(digests(ours), want),
                     bytes_llama=ref.stat().st_size, bytes_ours=ours.stat().st_size,
                     ratio=round(r1.wall / r2.wall, 2), cpu_ratio=round(r1.cpu / r2.cpu, 2))
        for f in (ref, ours):
            rmtree(f)

    def multi(self) -> None:
        x8 = self.work / "q4km-x8.ppk"
        for f in (self.p64, x8):
            rmtree(f)
        r = self.run("multi convert -o panel64 -o ggml-x8",
                     self.pp("convert", self.f16, "--quant", "Q4_K_M", "--no-progress", "--jobs", self.a.threads,
                             "-o", self.p64, "--layout", "panel64", "-o", x8, "--layout", "ggml-x8"))
        if r.rc == 0:
            self.log("multi", what="sizes", panel64=folder_bytes(self.p64), ggml_x8=folder_bytes(x8))
        rmtree(x8)

    def verify(self) -> None:
        self.run("verify --level all", self.pp("verify", self.p64, "--level", "all"), target_s=300)

    def export(self) -> None:
        out = self.work / "export.gguf"
        rmtree(out)
        r = self.run("export", self.pp("export", self.p64, "-o", out))
        ref = self.work / "ref-digests.json"
        if r.rc == 0 and ref.exists():
            self.log("export", what="compare", tensors=compare(digests(out), json.loads(ref.read_text())),
                     bytes=out.stat().st_size)
        rmtree(out)

    def pack(self) -> None:
        out = self.work / "q4km-panel64.ppk.tar.zst"
        rmtree(out)
        r = self.run("pack", self.pp("pack", self.p64, "-o", out, "--threads", self.a.threads))
        if r.rc == 0:
            self.log("pack", what="size", bytes=out.stat().st_size, bundle=folder_bytes(self.p64))
        rmtree(out)

    def hf_source(self) -> None:
        import llama_convert

        for f in (self.f16, self.p64):
            rmtree(f)
        vocab = llama_convert.vocab_dir()
        if vocab is None:
            self.log("hf", what="skipped: llama.cpp's vocab folder is missing")
            return
        t0 = time.perf_counter()
        self.model.write_hf(self.hf, vocab / "ggml-vocab-llama-bpe.gguf")
        self.log("hf", what="write bf16 shards", seconds=round(time.perf_counter() - t0, 1),
                 shards=sorted(p.name for p in self.hf.glob("*.safetensors")), bytes=folder_bytes(self.hf))
        ours = self.work / "hf-q4km.gguf"
        rmtree(ours)
        r = self.run("hf panelpack convert HF --quant Q4_K_M",
                     self.pp("convert", self.hf, "-o", ours, "--quant", "Q4_K_M", "--no-progress",
                             "--jobs", self.a.threads))
        ref = self.work / "ref-digests.json"
        if r.rc == 0 and ref.exists():
            self.log("hf", what="compare", tensors=compare(digests(ours), json.loads(ref.read_text())))
        rmtree(ours)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/work/bench7b-tmp")
    ap.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-warm", dest="warm", action="store_false")
    ap.add_argument("--panelpack-first", action="store_true", help="quant: time panelpack before llama.cpp")
    ap.add_argument("--keep", action="store_true", help="keep the workdir (default: removed at the end)")
    a = ap.parse_args(argv)
    b = Bench(a)
    print(machine_line(), flush=True)
    print(f"disk: {shutil.disk_usage(b.work).free / 1e9:.0f} GB free; largest tensor f32 "
          f"{b.model.largest_f32() / MB:.0f} MB, bound {b.bound / MB:.0f} MB", flush=True)
    try:
        if a.warm:
            b.warm()
        steps = {"gguf": b.gguf, "quant": b.quant, "multi": b.multi, "verify": b.verify, "export": b.export,
                 "pack": b.pack, "hf": b.hf_source}
        for phase in a.phases:
            if phase != "gguf" and phase != "hf" and not b.f16.exists():
                b.gguf()
            steps[phase]()
    finally:
        if not a.keep:
            shutil.rmtree(b.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
