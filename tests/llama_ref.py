"""llama.cpp's own quantizer as an oracle (tests only): ``llama_model_quantize`` through
llama-cpp-python (the ``oracle-llama`` extra), and the F16 GGUF files it is fed.

* :func:`f16_gguf` writes, with gguf-py, a GGUF derived from a real one: every KV copied (the
  tokenizer arrays cut to ``n_vocab`` entries), the first ``n_layer`` blocks, every matrix
  dequantized by panelpack's codecs and stored as F16, 1-D tensors as F32;
* :func:`quantize` runs ``llama_model_quantize`` for a llama.cpp file type name;
* :func:`tensors` reads a GGUF's tensors as ``{name: (type name, raw bytes)}``.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np


def available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


_TOKENIZER_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")


def f16_gguf(src: str | Path, dst: str | Path, n_layer: int | None = None, n_vocab: int | None = None) -> Path:
    """An F16/F32 GGUF derived from ``src`` (see the module text); returns ``dst``."""
    import gguf

    from panelpack.formats import blocks
    from panelpack.formats.checkpoint import open_checkpoint

    reader = gguf.GGUFReader(str(src))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    writer = gguf.GGUFWriter(str(dst), arch)
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
            continue
        if name == "tokenizer.ggml.merges" and n_vocab is not None:
            continue  # merges may name tokens past the cut; quantizing never reads them
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            idx = f.data if n_vocab is None or name not in _TOKENIZER_ARRAYS else f.data[:n_vocab]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in idx]
            else:
                val = [f.parts[i].tolist()[0] for i in idx]
            writer.add_key_value(name, val, vtype, sub_type=sub)
        elif vtype == gguf.GGUFValueType.STRING:
            writer.add_key_value(name, bytes(f.parts[-1]).decode("utf-8", "surrogateescape"), vtype)
        else:
            val = f.parts[-1].tolist()[0]
            if n_layer is not None and name == f"{arch}.block_count":
                val = n_layer
            writer.add_key_value(name, val, vtype)
    writer.add_file_type(1)  # LLAMA_FTYPE_MOSTLY_F16
    with open_checkpoint(src) as ck:
        for info in ck.tensors:
            m = re.match(r"blk\.(\d+)\.", info.name)
            if n_layer is not None and m and int(m.group(1)) >= n_layer:
                continue
            n, k, shape = info.n, info.k, info.shape
            raw = ck.raw(info.name)
            if info.name == "token_embd.weight" and n_vocab is not None:
                n, shape = n_vocab, (n_vocab, k)
                raw = raw.reshape(info.n, -1)[:n_vocab]
            x = blocks.dequantize(raw, info.type, n, k).reshape(shape)
            writer.add_tensor(info.name, np.ascontiguousarray(x.astype(np.float16 if x.ndim >= 2 else np.float32)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(dst)


def quantize(src: str | Path, dst: str | Path, mix: str, threads: int = 2,
             imatrix: dict[str, np.ndarray] | None = None, **params) -> Path:
    """``llama_model_quantize(src, dst)`` for the llama.cpp file type ``mix`` (``Q4_K_M``), in a
    fresh Python process (llama.cpp's libggml and libggml-python's must not meet in one
    process: the second one loaded resolves against the first); ``imatrix``: importance
    weights by tensor name, handed over as llama-quantize hands them."""
    import json
    import subprocess
    import sys
    import tempfile

    from panelpack.convert import mixes

    with tempfile.TemporaryDirectory() as tmp:
        weights = None
        if imatrix:
            weights = str(Path(tmp) / "imatrix.npz")
            np.savez(weights, **{f"w{i}": np.asarray(w, np.float32) for i, w in enumerate(imatrix.values())})
            (Path(tmp) / "names.json").write_text(json.dumps(list(imatrix)))
        job = {"src": str(src), "dst": str(dst), "ftype": mixes.MIXES[mix.upper()].ftype, "threads": threads,
               "params": params, "weights": weights}
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(job)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"llama_model_quantize({mix}) failed: {proc.stderr[-2000:]}")
    return Path(dst)


_CHILD = """
import ctypes, json, sys
from pathlib import Path
import numpy as np
import llama_cpp

job = json.loads(sys.argv[1])
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = job["ftype"]
p.nthread = job["threads"]
p.allow_requantize = True
for key, value in job["params"].items():
    setattr(p, key, value)
keep = []
if job["weights"]:
    class Entry(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.POINTER(ctypes.c_float)), ("size", ctypes.c_size_t)]
    names = json.loads((Path(job["weights"]).parent / "names.json").read_text())
    data = np.load(job["weights"])
    arr = (Entry * (len(names) + 1))()
    for i, name in enumerate(names):
        w = np.ascontiguousarray(data[f"w{i}"], np.float32)
        b = ctypes.create_string_buffer(name.encode())
        keep += [w, b]
        arr[i] = Entry(ctypes.cast(b, ctypes.c_char_p), w.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), w.size)
    arr[len(names)] = Entry(None, None, 0)
    keep.append(arr)
    p.imatrix = ctypes.cast(arr, dict(type(p)._fields_)["imatrix"])
rc = llama_cpp.llama_model_quantize(job["src"].encode(), job["dst"].encode(), ctypes.byref(p))
sys.exit(1 if rc else 0)
"""


def tensors(path: str | Path) -> dict[str, tuple[str, bytes]]:
    """``{name: (type name, raw bytes)}`` of a GGUF file, read by panelpack's reader."""
    from panelpack.formats.checkpoint import open_checkpoint

    with open_checkpoint(path) as ck:
        return {t.name: (t.type.name, ck.raw(t.name).tobytes()) for t in ck.tensors}


def mix_differences(src: str | Path, tmp: Path, mix: str, params: dict | None = None, **options) -> tuple[list, int]:
    """``convert --quant MIX`` (rowmajor) of ``src`` against ``llama_model_quantize`` with the
    same mix: the tensors whose type or bytes differ, ``(name, ours, llama.cpp's, bytes equal)``,
    and the number of tensors compared. ``options`` are ``mixes.Options`` fields, ``params``
    llama.cpp's quantize parameters (and ``imatrix``, as :func:`quantize` takes it)."""
    from panelpack import repack
    from panelpack.convert import convert, mixes
    from panelpack.formats.bundle import Bundle

    want = tensors(quantize(src, tmp / f"{mix}.gguf", mix, **(params or {})))
    res = convert(src, tmp / f"{mix}.ppk", layout="rowmajor", quant=mix, mix_options=mixes.Options(**options))
    b = Bundle(res.bundle)
    rm = repack.get("rowmajor")
    bad = []
    for t in res.plan.tensors:
        wtype, wbytes = want[t.name]
        ours = t.decision.target_type
        raw = rm.unpack(b.regions(b.tensor(t.name)), t.info.n, t.info.k, ours).tobytes()
        if ours.name != wtype or raw != wbytes:
            bad.append((t.name, ours.name, wtype, raw == wbytes))
    return bad, len(res.plan.tensors)
