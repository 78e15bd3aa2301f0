"""``panelpack inspect``: what a checkpoint holds, from its headers alone.

:func:`describe` opens a GGUF file, a safetensors file or a Hugging Face folder and returns a
JSON-serialisable document; :func:`render` turns it into a text report. Neither reads tensor
data, and GGUF metadata arrays (the vocabulary) are reported by length only, so a 262k-token
vocabulary costs nothing.

The document (``format: "panelpack.inspect"``, ``version: 1``)::

    source           {kind: gguf|safetensors|hf, path, files: [{path, bytes}], bytes}
    architecture     "llama", "gemma3", "LlamaForCausalLM", ... or null
    model            the architecture table's reading (formats/arch), from the headers:
                     {row, runtime: "yes" or why not, cactus: family or why not,
                     layers: [{kind, count, window, rope}]} or {row: null, runtime: why not}
    hyperparameters  llama.cpp names: n_layer, n_embd, n_head, n_head_kv, n_ff, n_ctx, n_vocab
    metadata         {count, ...}: GGUF: general.name, file_type (+ its name),
                     quantization_version, alignment and the array lengths;
                     safetensors: the __metadata__ strings; HF: model_type and the config
    shape_order      "outermost-first": a matrix is [N, K], K contiguous (numpy order)
    types            [{type, count, elements, bytes, share}], largest bytes first
    totals           {tensors, elements, bytes, bits_per_weight}
    tensors          [{name, shape, type, bytes(, file)}] in file order
"""

from __future__ import annotations

import enum
import os
from typing import Any, Callable, Mapping

import numpy as np

from .common import Checkpoint
from .text import human_bytes, table_lines

SHAPE_ORDER = "outermost-first"
DOC_FORMAT = "panelpack.inspect"
DOC_VERSION = 1

# GGUF scalar keys worth showing (the rest are counted); values come through _jsonable.
_GGUF_KEYS = (
    ("name", "general.name"),
    ("file_type", "general.file_type"),
    ("quantization_version", "general.quantization_version"),
    ("alignment", "general.alignment"),
)


def describe(path: str | os.PathLike) -> dict[str, Any]:
    """Open ``path`` (see :func:`formats.checkpoint.open_checkpoint`) and describe it; a bundle
    folder or ``.ppk.tar.zst`` is described from its manifest (``formats/describe_bundle.py``)."""
    from . import describe_bundle
    from .checkpoint import open_checkpoint

    if describe_bundle.is_bundle_path(path):  # a bundle or its archive: described from the manifest
        return describe_bundle.describe_bundle(path)
    with open_checkpoint(path) as ckpt:
        return describe_checkpoint(ckpt)


def describe_checkpoint(ckpt: Checkpoint) -> dict[str, Any]:
    """The inspect document of an open checkpoint (headers only; no tensor data is read)."""
    files = [{"path": f, "bytes": os.path.getsize(f)} for f in _files(ckpt)]
    multi = len({t.file for t in ckpt.tensors}) > 1
    tensors = []
    hist: dict[str, dict[str, Any]] = {}
    total_bytes = total_elements = 0
    for t in ckpt.tensors:
        row = t.describe()
        if multi:
            row["file"] = os.path.basename(t.file)
        tensors.append(row)
        h = hist.setdefault(t.type.name, {"type": t.type.name, "count": 0, "elements": 0, "bytes": 0})
        h["count"] += 1
        h["elements"] += t.n_elements
        h["bytes"] += t.nbytes
        total_bytes += t.nbytes
        total_elements += t.n_elements
    for h in hist.values():
        h["share"] = h["bytes"] / total_bytes if total_bytes else 0.0
    types_ = sorted(hist.values(), key=lambda h: (-h["bytes"], -h["count"], h["type"]))

    return {
        "format": DOC_FORMAT,
        "version": DOC_VERSION,
        "source": {"kind": ckpt.kind, "path": ckpt.path, "files": files, "bytes": sum(f["bytes"] for f in files)},
        "architecture": ckpt.architecture,
        "model": _model(ckpt),
        "hyperparameters": _jsonable({k: v for k, v in ckpt.hyperparameters().items() if v is not None}),
        "hyperparameter_problems": _hparam_problems(ckpt),
        "metadata": _METADATA.get(ckpt.kind, _generic_metadata)(ckpt),
        "shape_order": SHAPE_ORDER,
        "types": types_,
        "totals": {
            "tensors": len(tensors),
            "elements": total_elements,
            "bytes": total_bytes,
            "bits_per_weight": round(8 * total_bytes / total_elements, 4) if total_elements else 0.0,
        },
        "tensors": tensors,
    }


def _model(ckpt: Checkpoint) -> dict[str, Any]:
    """What the architecture table makes of the checkpoint (headers and 1-D RoPE factors only)."""
    from . import arch
    from .errors import BadInputError

    config = getattr(ckpt, "config", None)
    try:
        if ckpt.kind == "gguf":
            row = arch.for_gguf(ckpt.metadata)
            names = {t.name for t in ckpt.tensors}
            emb = next((t for t in ckpt.tensors if t.name == "token_embd.weight"), None)

            def vector(name):
                from . import blocks

                info = ckpt.tensor(name)
                return blocks.dequantize(ckpt.raw(name), info.type, info.n, info.k).reshape(-1)

            hp = arch.from_gguf(ckpt.metadata, emb.shape[0] if emb is not None else 0, names, vector)
        elif isinstance(config, Mapping) and config:
            row = arch.for_hf_config(config)
            hp = arch.from_hf_config(config)
        else:
            return {"row": None, "runtime": "no architecture to read (no GGUF metadata or config.json)"}
    except BadInputError as e:
        return {"row": None, "runtime": e.detail}
    cactus: str = row.cactus_family or f"no ({row.cactus_refusal})"
    groups: list[dict[str, Any]] = []
    for L in hp.layers:
        rope = L.rope.label if L.rope is not None else "none"
        if groups and (groups[-1]["kind"], groups[-1]["window"], groups[-1]["rope"]) == (L.kind, L.window, rope):
            groups[-1]["count"] += 1
        else:
            groups.append({"kind": L.kind, "count": 1, "window": L.window, "rope": rope})
    return {"row": row.name, "runtime": "yes", "cactus": cactus, "layers": groups}


def _hparam_problems(ckpt: Checkpoint) -> list[str]:
    from . import hparams

    return hparams.check_checkpoint(ckpt)


def _files(ckpt: Checkpoint) -> list[str]:
    files = getattr(ckpt, "files", None)  # SafetensorsFile / HFCheckpoint list their files
    if files:
        return list(files)
    return [ckpt.path] if os.path.isfile(ckpt.path) else sorted({t.file for t in ckpt.tensors})


# -- metadata per kind -------------------------------------------------------------------------


def _gguf_metadata(ckpt: Checkpoint) -> dict[str, Any]:
    md = ckpt.metadata
    out: dict[str, Any] = {"count": len(md)}
    for ours, key in _GGUF_KEYS:
        if key in md:
            out[ours] = _jsonable(md[key])
    ft = out.get("file_type")
    if isinstance(ft, int):
        import gguf  # gguf-py's LlamaFileType names the llama.cpp file types

        try:
            out["file_type_name"] = gguf.LlamaFileType(ft).name
        except ValueError:
            out["file_type_name"] = None
    from .gguf import GGUFArray  # arrays are located, not decoded: len() is free

    out["arrays"] = {k: len(v) for k, v in md.items() if isinstance(v, GGUFArray)}
    return out


def _hf_metadata(ckpt: Checkpoint) -> dict[str, Any]:
    config = dict(ckpt.metadata)
    return {"count": len(config), "model_type": getattr(ckpt, "model_type", None), "config": _jsonable(config)}


def _generic_metadata(ckpt: Checkpoint) -> dict[str, Any]:
    md = dict(ckpt.metadata)
    return {"count": len(md), "values": _jsonable(md)}


_METADATA: dict[str, Callable[[Checkpoint], dict[str, Any]]] = {
    "gguf": _gguf_metadata,
    "hf": _hf_metadata,
    "safetensors": _generic_metadata,
}


def _jsonable(v: Any) -> Any:
    """numpy scalars/arrays and bytes to plain JSON values (small values only)."""
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", errors="replace")
    if isinstance(v, enum.Enum):
        return _jsonable(v.value)
    return v


# -- text report -------------------------------------------------------------------------------


def _shape(shape: list[int]) -> str:
    return " x ".join(str(d) for d in shape) if shape else "scalar"


def render(doc: Mapping[str, Any]) -> str:
    """A readable report of a :func:`describe` document: summary, type histogram (largest
    first), then the tensor table, with sizes humanised and columns aligned."""
    from . import describe_bundle

    if doc.get("format") == describe_bundle.DOC_FORMAT:
        return describe_bundle.render_bundle(doc)
    src = doc["source"]
    out: list[str] = []
    kv: list[tuple[str, str]] = [("source", f"{src['kind']}  {src['path']}")]
    for f in src["files"]:
        kv.append(("file", f"{os.path.basename(f['path'])}  {human_bytes(f['bytes'])} ({f['bytes']} bytes)"))
    md = doc.get("metadata") or {}
    arch = doc.get("architecture") or "unknown"
    if md.get("model_type") and md["model_type"] != arch:
        arch += f" (model_type {md['model_type']})"
    kv.append(("architecture", arch))
    model = doc.get("model") or {}
    if model.get("row"):
        kinds = sorted({(g["kind"], g["window"], g["rope"]) for g in model.get("layers", [])})
        layers = "; ".join(f"{k}{f' window {w}' if w else ''}, RoPE {r}" for k, w, r in kinds)
        cactus = model["cactus"] if not str(model["cactus"]).startswith("no ") else "no family"
        kv.append(("model", f"{model['row']} (runtime: {model['runtime']}; cactus: {cactus}): {layers}"))
    elif model:
        kv.append(("model", f"not run by the runtime: {model.get('runtime')}"))
    hp = doc.get("hyperparameters") or {}
    kv.append(("hyperparameters", "  ".join(f"{k}={v}" for k, v in hp.items()) or "none found"))
    for p in doc.get("hyperparameter_problems") or ():
        kv.append(("PROBLEM", p))
    kv.append(("metadata", _metadata_line(md)))
    arrays = md.get("arrays") or {}
    if arrays:
        kv.append(("arrays", ", ".join(f"{k}[{n}]" for k, n in arrays.items())))
    tot = doc["totals"]
    kv.append(
        (
            "totals",
            f"{tot['tensors']} tensors, {tot['elements']:,} weights, {human_bytes(tot['bytes'])}, "
            f"{tot['bits_per_weight']:.2f} bits/weight",
        )
    )
    width = max(len(k) for k, _ in kv)
    out += [f"{k.ljust(width)}  {v}" for k, v in kv]

    out += ["", "types (largest first)"]
    rows = [
        [h["type"], str(h["count"]), f"{h['elements']:,}", human_bytes(h["bytes"]), f"{100 * h['share']:.1f}%"]
        for h in doc["types"]
    ]
    rows.append(["total", str(tot["tensors"]), f"{tot['elements']:,}", human_bytes(tot["bytes"]), "100.0%"])
    out += table_lines(["type", "tensors", "weights", "bytes", "share"], rows, right={1, 2, 3, 4}, indent="  ")

    order = "shapes outermost-first: a matrix is N x K" if doc.get("shape_order") == SHAPE_ORDER else ""
    out += ["", f"tensors ({order})" if order else "tensors"]
    has_file = any("file" in t for t in doc["tensors"])
    headers = ["name", "shape", "type", "bytes"] + (["file"] if has_file else [])
    rows = [
        [t["name"], _shape(t["shape"]), t["type"], human_bytes(t["bytes"])] + ([t.get("file", "")] if has_file else [])
        for t in doc["tensors"]
    ]
    out += table_lines(headers, rows, right={3}, indent="  ")
    return "\n".join(out)


def _metadata_line(md: Mapping[str, Any]) -> str:
    parts = [f"{md.get('count', 0)} keys"]
    if "name" in md:
        parts.append(f"name {md['name']!r}")
    if "file_type" in md:
        ft = md["file_type"]
        parts.append(f"file_type {md['file_type_name']} ({ft})" if md.get("file_type_name") else f"file_type {ft}")
    if "quantization_version" in md:
        parts.append(f"quantization_version {md['quantization_version']}")
    values = md.get("values")
    if values:
        parts.append(", ".join(f"{k}={v!r}" for k, v in list(values.items())[:6]))
    return ", ".join(parts)


__all__ = ["describe", "describe_checkpoint", "render", "human_bytes", "SHAPE_ORDER"]
