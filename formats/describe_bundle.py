"""``panelpack inspect BUNDLE``: what a bundle (or ``.ppk.tar.zst``) holds, from its manifest.

The document (``format: "panelpack.inspect.bundle"``, ``version: 1``)::

    bundle       {path, created_by, archive: bool}
    source       {kind, path, architecture, files: [{name, bytes, sha256}]}
    model        the hyperparameters recorded at conversion
    options      {layout, quant, requant}; target: what the layout is for
    layouts      [{layout, tensors, bytes}]   (written layouts, largest first)
    types        [{type, tensors, bytes}]     (types written, largest first)
    ledger       {requested, in_requested_layout, fallbacks, fallback_reasons: {reason: n},
                  requantized, quantized, warnings: [names], max_rel_rms}
    totals       {tensors, bytes, source_files}
    tensors      [{name, shape, type, source_type, layout, bytes}]

Reads the manifest only (no tensor data, no hashes): ``verify`` is what proves a bundle.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from .text import human_bytes, table_lines

DOC_FORMAT = "panelpack.inspect.bundle"
DOC_VERSION = 1


def is_bundle_path(path: str | os.PathLike) -> bool:
    """A bundle folder (has ``manifest.json``) or a zstd archive of one."""
    from . import archive

    p = Path(path)
    return (p.is_dir() and (p / "manifest.json").is_file()) or (p.is_file() and archive.is_archive(p))


def describe_bundle(path: str | os.PathLike) -> dict[str, Any]:
    from . import archive
    from .bundle import Bundle

    p = Path(path)
    if p.is_file():
        with tempfile.TemporaryDirectory(prefix="panelpack-inspect-") as tmp:
            archive.unpack(p, Path(tmp) / "b.ppk")
            doc = _doc(Bundle(Path(tmp) / "b.ppk"))
        doc["bundle"].update(path=str(p), archive=True)
        return doc
    return _doc(Bundle(p))


def _count(rows: dict[str, dict[str, Any]], key: str, nbytes: int) -> None:
    r = rows.setdefault(key, {"tensors": 0, "bytes": 0})
    r["tensors"] += 1
    r["bytes"] += nbytes


def _doc(b) -> dict[str, Any]:
    m = b.manifest
    layouts: dict[str, dict[str, Any]] = {}
    types: dict[str, dict[str, Any]] = {}
    reasons: dict[str, int] = {}
    tensors, warnings = [], []
    requested = m.get("options", {}).get("layout") if isinstance(m.get("options"), dict) else None
    fallbacks = requant = quantized = 0
    max_rel = None
    for t in b.tensors:
        led = t.ledger
        _count(layouts, t.layout, t.bytes)
        _count(types, t.type, t.bytes)
        if led.get("written", t.layout) != led.get("requested"):
            fallbacks += 1
            reason = str(led.get("reason") or "unexplained")
            reasons[reason] = reasons.get(reason, 0) + 1
        requant += t.action == "requantize"
        quantized += t.action == "quantize"
        err = led.get("error") if isinstance(led.get("error"), dict) else None
        if err:
            rel = err.get("rel_rms")
            if isinstance(rel, (int, float)):
                max_rel = rel if max_rel is None else max(max_rel, rel)
            if err.get("warning"):
                warnings.append(t.name)
        tensors.append({"name": t.name, "shape": list(t.shape), "type": t.type,
                        "source_type": t.source_type or t.type, "layout": t.layout, "bytes": t.bytes})
    src = m.get("source") if isinstance(m.get("source"), dict) else {}

    def ranked(rows: dict[str, dict[str, Any]], key: str) -> list[dict[str, Any]]:
        return [{key: k, **v} for k, v in sorted(rows.items(), key=lambda kv: (-kv[1]["bytes"], kv[0]))]

    return {
        "format": DOC_FORMAT,
        "version": DOC_VERSION,
        "bundle": {"path": str(b.path), "created_by": m.get("created_by"), "archive": False,
                   "format_version": b.version, "digest": b.digest.name},
        "source": {"kind": src.get("kind"), "path": src.get("path"), "architecture": src.get("architecture"),
                   "files": src.get("files") or []},
        "model": m.get("model") or {},
        "options": m.get("options") or {},
        "target": m.get("target") or {},
        "layouts": ranked(layouts, "layout"),
        "types": ranked(types, "type"),
        "ledger": {"requested": requested, "in_requested_layout": len(tensors) - fallbacks, "fallbacks": fallbacks,
                   "fallback_reasons": reasons, "requantized": int(requant), "quantized": int(quantized),
                   "warnings": warnings, "max_rel_rms": max_rel},
        "totals": {"tensors": len(tensors), "bytes": sum(t["bytes"] for t in tensors),
                   "source_files": len(m.get("source_files", []))},
        "tensors": tensors,
    }


def render_bundle(doc: Mapping[str, Any]) -> str:
    src, led, tot = doc["source"], doc["ledger"], doc["totals"]
    kv = [("bundle", f"{doc['bundle']['path']}" + ("  (archive)" if doc["bundle"].get("archive") else "")),
          ("created by", str(doc["bundle"].get("created_by") or "unknown")),
          ("format", f"version {doc['bundle'].get('format_version')}, {doc['bundle'].get('digest')} digests"),
          ("source", f"{src.get('kind')}  {src.get('path')}  architecture {src.get('architecture') or 'unknown'}")]
    for f in src.get("files", []):
        if isinstance(f, dict):
            kv.append(("source file", f"{f.get('name')}  {human_bytes(f.get('bytes') or 0)}  "
                                      f"sha256 {str(f.get('sha256'))[:16]}..."))
    hp = doc.get("model") or {}
    kv.append(("hyperparameters", "  ".join(f"{k}={v}" for k, v in hp.items()) or "none recorded"))
    opts = doc.get("options") or {}
    kv.append(("options", "  ".join(f"{k}={v}" for k, v in opts.items() if v is not None) or "-"))
    kv.append(("totals", f"{tot['tensors']} tensors, {human_bytes(tot['bytes'])}, {tot['source_files']} source file(s)"))
    ledger = (f"{led['in_requested_layout']} in the requested layout {led['requested']!r}, {led['fallbacks']} "
              f"fallback(s); {led['quantized']} quantized, {led['requantized']} re-quantized")
    if led.get("max_rel_rms") is not None:
        ledger += f"; max quantization error rel_rms={led['max_rel_rms']:.3g}"
    kv.append(("ledger", ledger))
    if led.get("warnings"):
        kv.append(("WARNING", f"{len(led['warnings'])} tensor(s) quantized badly: {', '.join(led['warnings'][:5])}"))
    width = max(len(k) for k, _ in kv)
    out = [f"{k.ljust(width)}  {v}" for k, v in kv]
    if led.get("fallback_reasons"):
        out += ["", "fallbacks (reason: tensors)"]
        out += [f"  {n:5d}  {r}" for r, n in sorted(led["fallback_reasons"].items(), key=lambda kv: -kv[1])]
    for title, key in (("layouts written", "layout"), ("types written", "type")):
        out += ["", title]
        rows = [[r[key], str(r["tensors"]), human_bytes(r["bytes"])] for r in doc[key + "s"]]
        out += table_lines([key, "tensors", "bytes"], rows, right={1, 2}, indent="  ")
    out += ["", "tensors"]
    rows = [[t["name"], " x ".join(map(str, t["shape"])),
             t["type"] if t["type"] == t["source_type"] else f"{t['source_type']}->{t['type']}",
             t["layout"], human_bytes(t["bytes"])] for t in doc["tensors"]]
    out += table_lines(["name", "shape", "type", "layout", "bytes"], rows, right={4}, indent="  ")
    return "\n".join(out)
