"""``export``: rebuild the source GGUF from a GGUF-sourced bundle, byte for byte.

The bundle keeps the source's header bytes (``source/gguf-header.bin``: header, key/values
and tensor table exactly as stored) and its data layout (``source/gguf-layout.json``). Export
writes that header, then every tensor's standard blocks, restored by its layout's ``unpack``
and checked against the hash recorded at conversion, at its original offset, with the original
bytes between tensors. The result is checked against the source file's sha256.

A tensor can be restored only if its layout is invertible for its type and it still has its
source type (not re-quantized); the bundle must also hold every tensor of the source. When any
tensor cannot be restored, nothing is written and the error lists each one with its reason.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import repack
from ..formats import atomic
from ..formats.bundle import Bundle
from ..formats.errors import BadInputError, FormatError

log = logging.getLogger(__name__)


@dataclass
class ExportResult:
    path: Path
    tensors: int
    bytes: int
    sha256: str
    source_sha256: str | None
    seconds: float = 0.0

    @property
    def identical(self) -> bool:
        return self.source_sha256 is not None and self.sha256 == self.source_sha256

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "tensors": self.tensors, "bytes": self.bytes, "sha256": self.sha256,
                "source_sha256": self.source_sha256, "identical_to_source": self.identical}

    def render(self) -> str:
        same = "byte-identical to the source" if self.identical else "DIFFERS from the source file's sha256"
        return f"wrote {self.path}: {self.tensors} tensors, {self.bytes:,} bytes, sha256 {self.sha256[:16]}... ({same})"


def _unrestorable(b: Bundle, layout_doc: dict[str, Any]) -> list[str]:
    problems = []
    have = {t.name: t for t in b.tensors}
    for rec in layout_doc["tensors"]:
        t = have.get(rec["name"])
        if t is None:
            problems.append(f"{rec['name']}: not in the bundle (converted with --include/--exclude?)")
            continue
        if t.type != rec["type"]:
            problems.append(f"{rec['name']}: re-quantized {rec['type']} -> {t.type}; the source blocks are gone")
            continue
        if not repack.get(t.layout).invertible(t.qtype):
            problems.append(f"{rec['name']}: layout {t.layout} is not invertible for {t.type}")
    return problems


def _check_source_files(b: Bundle, needed: tuple[str, ...]) -> None:
    """The side files export rebuilds the GGUF from must match the sha256 the manifest
    records (a damaged header would be written into the GGUF): raise VerificationError."""
    from ..formats.bundle import sha256_file
    from ..formats.errors import VerificationError

    recorded = {s["file"]: s for s in b.manifest.get("source_files", [])}
    for rel in needed:
        p = b.path / rel
        if not p.is_file():
            continue  # absent: reported as missing below
        entry = recorded.get(rel)
        if entry is None:
            raise VerificationError(f"{b.path}: {rel} is not listed in the manifest; cannot check it: nothing written")
        if sha256_file(p) != entry["sha256"]:
            raise VerificationError(f"{b.path}: {rel} does not match the sha256 recorded in the manifest (damaged "
                                    "bundle; run `panelpack verify`): nothing written")


def _check_layout_doc(doc: Any, path: Path) -> None:
    """``gguf-layout.json`` has the fields and types export reads (FormatError otherwise)."""
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (1 << 50)

    ok = (isinstance(doc, dict) and is_int(doc.get("data_offset")) and is_int(doc.get("file_size"))
          and isinstance(doc.get("tensors"), list) and isinstance(doc.get("nonzero_gaps", []), list))
    if ok:
        ok = all(isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("type"), str)
                 and is_int(r.get("offset")) for r in doc["tensors"])
        ok = ok and all(isinstance(g, list) and len(g) == 2 and all(is_int(x) for x in g) and g[0] < g[1]
                        for g in doc.get("nonzero_gaps", []))
    if not ok:
        raise FormatError("not a GGUF layout document (data_offset, file_size, tensors[{name, type, offset}], "
                          "nonzero_gaps[[a, b]])", path=path)


def export_gguf(bundle: str | os.PathLike, out: str | os.PathLike, force: bool = False) -> ExportResult:
    import time

    from ..formats import guard

    t0 = time.perf_counter()
    guard.check_disjoint(bundle, out, "the bundle", "the GGUF to write")
    b = Bundle(bundle)
    _check_source_files(b, ("source/gguf-header.bin", "source/gguf-layout.json", "source/gguf-gaps.bin"))
    src = b.manifest.get("source", {})
    if src.get("kind") != "gguf":
        raise BadInputError(f"bundle was made from a {src.get('kind')!r} source; export writes GGUF only for GGUF-sourced bundles",
                            path=b.path)
    header_path = b.path / "source" / "gguf-header.bin"
    layout_path = b.path / "source" / "gguf-layout.json"
    for p in (header_path, layout_path):
        if not p.is_file():
            raise FormatError(f"missing {p.relative_to(b.path)}: the bundle does not carry the GGUF header", path=b.path)
    layout_doc = guard.loads_json(layout_path.read_bytes(), path=layout_path)
    _check_layout_doc(layout_doc, layout_path)
    problems = _unrestorable(b, layout_doc)
    if problems:
        listed = "; ".join(problems[:12]) + (f"; ... and {len(problems) - 12} more" if len(problems) > 12 else "")
        raise BadInputError(f"cannot restore {len(problems)} tensor(s) to the source GGUF: {listed}", path=b.path)

    out = atomic.check_target(out, force)
    data_offset, file_size = layout_doc["data_offset"], layout_doc["file_size"]
    gaps = {a: b_ for a, b_ in layout_doc.get("nonzero_gaps", [])}
    gap_bytes = (b.path / "source" / "gguf-gaps.bin").read_bytes() if gaps else b""
    gap_pos = {}
    pos = 0
    for a, b_ in layout_doc.get("nonzero_gaps", []):
        gap_pos[a] = gap_bytes[pos:pos + (b_ - a)]
        pos += b_ - a
    h = hashlib.sha256()
    by_name = {t.name: t for t in b.tensors}
    order = sorted(layout_doc["tensors"], key=lambda r: r["offset"])
    with atomic.atomic_file(out, force=force) as f:
        head = header_path.read_bytes()
        if len(head) != data_offset:
            raise FormatError(f"gguf-header.bin is {len(head)} bytes, expected {data_offset}", path=b.path)
        f.write(head)
        h.update(head)
        cur = data_offset

        def fill(upto: int) -> None:
            nonlocal cur
            while cur < upto:
                if cur in gap_pos:
                    chunk = gap_pos[cur][: upto - cur]
                else:
                    nxt = min([a for a in gap_pos if a > cur] + [upto])
                    chunk = bytes(nxt - cur)
                f.write(chunk)
                h.update(chunk)
                cur += len(chunk)

        for rec in order:
            t = by_name[rec["name"]]
            fill(data_offset + rec["offset"])
            n, k = t.nk
            blocks = repack.get(t.layout).unpack(b.regions(t), n, k, t.qtype)
            data = np.ascontiguousarray(blocks).reshape(-1).view(np.uint8).data
            want = t.blocks_digest
            got = b.digest.of_bytes(data)
            if want and got != want:
                raise FormatError(f"tensor {t.name!r}: restored blocks do not match the hash recorded at conversion "
                                  f"(bundle damaged; run `panelpack verify`)", path=b.path)
            f.write(data)
            h.update(data)
            cur += len(data)
        fill(file_size)
    files = src.get("files") or [{}]
    res = ExportResult(out, len(order), file_size, h.hexdigest(), files[0].get("sha256"), time.perf_counter() - t0)
    if not res.identical:
        log.warning("exported %s differs from the source sha256", out)
    return res

