"""Shared machinery of the reader fuzzers: seed files, mutations, and the one property.

The property, for every reader: any bytes either read cleanly or raise one of panelpack's
exceptions (``formats.errors.PanelpackError``), within ``TIME_LIMIT`` seconds and
``MEMORY_LIMIT`` bytes of Python/numpy allocations (tracemalloc). Anything else (a
``KeyError``, ``RecursionError``, ``struct.error``, a hang) is a finding.

Readers (``READERS``):

* ``gguf``: ``gguf.open_file`` then every tensor's ``array`` and ``hyperparameters``.
* ``safetensors``: ``SafetensorsFile`` then every tensor's ``array``.
* ``index``: an HF folder with two shards and a ``model.safetensors.index.json`` (the
  mutated file is the index; shards stay valid), opened by ``open_checkpoint``.
* ``manifest``: a real bundle whose ``manifest.json`` is mutated, then ``verify`` at level
  ``lossless`` (schema, structure, layout contract, hashes, unpack) and ``describe``.
* ``archive``: the packed bundle (``.ppk.tar.zst``) mutated, then ``archive.unpack``.

Mutations (``mutate``) are a list of ``(op, position, value)``: flip a byte, set a byte to
an interesting value, insert or delete a run, truncate, duplicate a slice, and for JSON
files replace a number/string token with a hostile value. The regular tests drive them
with hypothesis (``tests/test_fuzz_readers.py``); the long-running target draws them at
random (``tests/fuzz/fuzz_readers.py``).
"""

from __future__ import annotations

import json
import re
import shutil
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np

from panelpack.formats.errors import PanelpackError

TIME_LIMIT = 2.0
MEMORY_LIMIT = 64 << 20

INTERESTING = (0, 1, 0x7F, 0x80, 0xFF, 0x20, 0x22, 0x2C, 0x3A, 0x5B, 0x5D, 0x7B, 0x7D, 0x30, 0x2D)
HOSTILE_JSON = ("-1", "0", "1e30", "NaN", "Infinity", "null", "true", "[]", "{}", '""', '"x"',
                "18446744073709551616", "9" * 40, "[" * 200 + "]" * 200, '"../../etc/passwd"',
                '"tensors/../manifest.json"', "-0.0", "1.5", '"\\u0000"')
OPS = ("flip", "set", "insert", "delete", "truncate", "dup", "json")


def mutate(data: bytes, ops: list[tuple[int, int, int]]) -> bytes:
    """Apply ``ops`` (``(op index, position, value)``, any integers) to ``data``."""
    b = bytearray(data)
    for op_i, pos, val in ops:
        op = OPS[op_i % len(OPS)]
        n = len(b)
        p = pos % (n + 1) if n else 0
        if op == "flip" and n:
            b[p % n] ^= 1 << (val % 8)
        elif op == "set" and n:
            b[p % n] = INTERESTING[val % len(INTERESTING)]
        elif op == "insert":
            b[p:p] = bytes([val % 256]) * (1 + val % 7)
        elif op == "delete" and n:
            del b[p:p + 1 + val % 16]
        elif op == "truncate":
            del b[p:]
        elif op == "dup" and n:
            b[p:p] = b[p:p + 1 + val % 64]
        elif op == "json":
            b = bytearray(_json_token(bytes(b), p, val))
    return bytes(b)


_TOKEN = re.compile(rb'-?\d+(\.\d+)?([eE][-+]?\d+)?|"[^"\\]{0,80}"|true|false|null')


def _json_token(data: bytes, pos: int, val: int) -> bytes:
    """Replace the JSON number/string/literal token at or after ``pos`` with a hostile value."""
    m = _TOKEN.search(data, pos) or _TOKEN.search(data)
    if m is None:
        return data
    return data[:m.start()] + HOSTILE_JSON[val % len(HOSTILE_JSON)].encode() + data[m.end():]


# ---------------------------------------------------------------------------------------------
# seed files
# ---------------------------------------------------------------------------------------------
class Corpus:
    """Seed files for every reader, built once in ``root``."""

    def __init__(self, root: Path):
        from panelpack.convert import convert
        from panelpack.formats import archive
        from panelpack.formats.safetensors import save_file

        from builders import tiny_llama_gguf

        self.root = root
        rng = np.random.default_rng(7)
        root.mkdir(parents=True, exist_ok=True)
        gguf = root / "seed.gguf"
        tiny_llama_gguf(gguf, n_layer=1, n_embd=256, n_ff=256, n_vocab=16)
        st = root / "seed.safetensors"
        save_file({"a": rng.standard_normal((4, 8)).astype(np.float32),
                   "b": ("BF16", rng.integers(0, 1 << 15, (3, 5), dtype=np.uint16)),
                   "c": rng.integers(0, 255, (7,), dtype=np.uint8)}, st, metadata={"format": "pt"})
        hf = root / "hf"
        hf.mkdir(exist_ok=True)
        save_file({"model.layers.0.w": rng.standard_normal((8, 32)).astype(np.float32)}, hf / "model-00001-of-00002.safetensors")
        save_file({"model.layers.1.w": rng.standard_normal((8, 32)).astype(np.float32),
                   "model.norm.weight": np.ones(32, np.float32)}, hf / "model-00002-of-00002.safetensors")
        index = {"metadata": {"total_size": 2 * 8 * 32 * 4 + 128},
                 "weight_map": {"model.layers.0.w": "model-00001-of-00002.safetensors",
                                "model.layers.1.w": "model-00002-of-00002.safetensors",
                                "model.norm.weight": "model-00002-of-00002.safetensors"}}
        (hf / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
        (hf / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32}))
        bundle = root / "seed.ppk"
        if not bundle.exists():
            convert(gguf, bundle, layout="panel64")
        packed = root / "seed.ppk.tar.zst"
        if not packed.exists():
            archive.pack(bundle, packed, threads=0)
        self.seeds = {
            "gguf": gguf.read_bytes(),
            "safetensors": st.read_bytes(),
            "index": (hf / "model.safetensors.index.json").read_bytes(),
            "manifest": (bundle / "manifest.json").read_bytes(),
            "archive": packed.read_bytes(),
        }
        self.hf, self.bundle = hf, bundle
        # warm up (numba cache loads, lazy imports) so the time bound measures the reader
        for reader, data in self.seeds.items():
            check(reader, data, root / f"warm-{reader}", self, limits=False)


# ---------------------------------------------------------------------------------------------
# readers: each takes (mutated bytes, a scratch folder, the corpus) and reads everything
# ---------------------------------------------------------------------------------------------
def _read_gguf(data: bytes, work: Path, corpus: Corpus) -> None:
    from panelpack.formats import gguf

    p = work / "x.gguf"
    p.write_bytes(data)
    with gguf.open_file(p) as f:
        f.hyperparameters()
        for t in f.tensors:
            with np.errstate(all="ignore"):
                np.asarray(f.array(t.name)).sum()


def _read_every_array(f) -> None:
    """Decode every tensor of an open reader (the values themselves are not checked)."""
    for t in f.tensors:
        with np.errstate(all="ignore"):
            np.asarray(f.array(t.name)).sum()


def _copy_once(src: Path, dst: Path) -> Path:
    """``dst``: a copy of the folder ``src``, made on first use (later cases overwrite one file)."""
    if not dst.exists():
        shutil.copytree(src, dst)
    return dst


def _read_safetensors(data: bytes, work: Path, corpus: Corpus) -> None:
    from panelpack.formats.safetensors import SafetensorsFile

    p = work / "x.safetensors"
    p.write_bytes(data)
    with SafetensorsFile(p) as f:
        _read_every_array(f)


def _read_index(data: bytes, work: Path, corpus: Corpus) -> None:
    from panelpack.formats.checkpoint import open_checkpoint

    d = _copy_once(corpus.hf, work / "hf")
    (d / "model.safetensors.index.json").write_bytes(data)
    with open_checkpoint(d) as f:
        f.hyperparameters()
        _read_every_array(f)


def _read_manifest(data: bytes, work: Path, corpus: Corpus) -> None:
    from panelpack.formats import describe
    from panelpack.verify import bundle_check

    d = _copy_once(corpus.bundle, work / "b.ppk")
    (d / "manifest.json").write_bytes(data)
    rep = bundle_check.verify(d, level="lossless")
    rep.render()
    json.dumps(rep.to_json(), allow_nan=False)
    describe.render(describe.describe(d))


def _read_archive(data: bytes, work: Path, corpus: Corpus) -> None:
    from panelpack.formats import archive

    p = work / "x.ppk.tar.zst"
    p.write_bytes(data)
    out = work / "out.ppk"
    if out.exists():
        shutil.rmtree(out)
    archive.unpack(p, out)


READERS: dict[str, Callable[[bytes, Path, Corpus], None]] = {
    "gguf": _read_gguf,
    "safetensors": _read_safetensors,
    "index": _read_index,
    "manifest": _read_manifest,
    "archive": _read_archive,
}


class Finding(AssertionError):
    """A case that broke the property: the exception, the time or the memory bound."""


def check(reader: str, data: bytes, work: Path, corpus: Corpus, limits: bool = True) -> str:
    """Run one case; returns ``"ok"`` or the name of our exception class, raises
    :class:`Finding` on anything else."""
    work.mkdir(parents=True, exist_ok=True)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        READERS[reader](data, work, corpus)
        outcome = "ok"
    except PanelpackError as e:
        outcome = type(e).__name__
    except Exception as e:  # noqa: BLE001 - the finding itself
        raise Finding(f"{reader}: {type(e).__name__}: {e}"[:500]) from e
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    dt = time.perf_counter() - t0
    if not limits:
        return outcome
    if dt > TIME_LIMIT:
        raise Finding(f"{reader}: took {dt:.2f} s (limit {TIME_LIMIT} s)")
    if peak > MEMORY_LIMIT:
        raise Finding(f"{reader}: peak {peak >> 20} MiB allocated (limit {MEMORY_LIMIT >> 20} MiB)")
    return outcome
