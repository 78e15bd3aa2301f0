"""``export``: the GGUF of any bundle.

A GGUF-sourced bundle whose tensors all keep their source blocks is rebuilt byte for byte (below).
Every other bundle is written as the GGUF of the blocks it holds (:func:`plan_bundle`, through
``convert/gguf_out.py``): an HF-sourced bundle as llama.cpp's converter names and arranges that
checkpoint (its pairs from the bundle's ``source/`` files, q/k rows permuted and Gemma norms
shifted on the stored blocks), and, when it was made with a llama.cpp mix, as
``llama_model_quantize`` writes that mix; a re-quantized GGUF-sourced bundle as
``llama_model_quantize --allow-requantize`` would write it (the source's pairs, then
``general.quantization_version`` and ``general.file_type`` appended; the quantizer's tensor
order). Row permutations and row cuts commute with every block type (no block spans rows), so
transforming stored blocks gives the bytes of quantizing transformed values.

The byte-exact restore:

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

import functools
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import repack
from ..formats import atomic, guard, qtypes
from ..formats import blocks as blocks_mod
from ..formats.bundle import Bundle
from ..formats.errors import BadInputError, FormatError, UnsupportedError
from ..verify.gate import require_sound
from . import gguf_arch, gguf_out

log = logging.getLogger(__name__)


@dataclass
class ExportResult:
    path: Path
    tensors: int
    bytes: int
    sha256: str
    source_sha256: str | None
    seconds: float = 0.0
    plan: Any = None  # the gguf_out.GGUFPlan (ledger) when the file is written from the bundle's blocks

    @property
    def identical(self) -> bool:
        return self.source_sha256 is not None and self.sha256 == self.source_sha256

    def to_json(self) -> dict[str, Any]:
        doc = {"path": str(self.path), "tensors": self.tensors, "bytes": self.bytes, "sha256": self.sha256,
               "source_sha256": self.source_sha256, "identical_to_source": self.identical}
        if self.plan is not None:
            doc.update(mode="blocks", mix=self.plan.mix, ledger=self.plan.ledger())
        return doc

    def render(self) -> str:
        same = "byte-identical to the source" if self.identical else "DIFFERS from the source file's sha256"
        line = f"wrote {self.path}: {self.tensors} tensors, {self.bytes:,} bytes, sha256 {self.sha256[:16]}..."
        if self.plan is None:
            return f"{line} ({same})"
        from .report import render_gguf_ledger

        what = f"as llama_model_quantize writes the {self.plan.mix} mix" if self.plan.mix else "the blocks the bundle holds"
        return f"{render_gguf_ledger(self.plan.ledger())}\n\n{line} ({what})"


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
    b = require_sound(bundle, "exporting")  # verify's structure level first: a damaged bundle is not exported
    _check_source_files(b, ("source/gguf-header.bin", "source/gguf-layout.json", "source/gguf-gaps.bin"))
    src = b.manifest.get("source", {})
    if src.get("kind") != "gguf":
        return _export_plan(b, out, force, t0)
    header_path = b.path / "source" / "gguf-header.bin"
    layout_path = b.path / "source" / "gguf-layout.json"
    for p in (header_path, layout_path):
        if not p.is_file():
            raise FormatError(f"missing {p.relative_to(b.path)}: the bundle does not carry the GGUF header", path=b.path)
    layout_doc = guard.loads_json(layout_path.read_bytes(), path=layout_path)
    _check_layout_doc(layout_doc, layout_path)
    problems = _unrestorable(b, layout_doc)
    if problems and all("re-quantized" in p for p in problems):
        return _export_plan(b, out, force, t0)  # the GGUF of the blocks it holds, as llama-quantize writes it
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



# ---- the GGUF of the blocks a bundle holds ---------------------------------------------------
def _export_plan(b: Bundle, out, force: bool, t0: float) -> ExportResult:
    import time

    plan = plan_bundle(b)
    res = gguf_out.write(plan, out, force=force)
    return ExportResult(Path(out), len(plan.tensors), res.bytes, atomic.sha256_file(out), None,
                        time.perf_counter() - t0, plan=plan)


def _blocks(b: Bundle, t) -> np.ndarray:
    """A tensor's standard blocks ([n, row_bytes] uint8), restored by its layout and checked
    against the hash recorded at conversion."""
    n, k = t.nk
    blocks = np.ascontiguousarray(repack.get(t.layout).unpack(b.regions(t), n, k, t.qtype))
    data = blocks.reshape(-1).view(np.uint8)
    if t.blocks_digest and b.digest.of_bytes(data.data) != t.blocks_digest:
        raise FormatError(f"tensor {t.name!r}: restored blocks do not match the hash recorded at conversion "
                          "(bundle damaged; run `panelpack verify`)", path=b.path)
    return data.reshape(n, -1)


def _not_invertible(b: Bundle, names) -> list[str]:
    out = []
    for t in b.tensors:
        if names is not None and t.name not in names:
            continue
        if not repack.get(t.layout).invertible(t.qtype):
            out.append(f"{t.name}: layout {t.layout} is not invertible for {t.type}")
    return out


def _refuse(problems: list[str], b: Bundle, what: str) -> None:
    if problems:
        listed = "; ".join(problems[:12]) + (f"; ... and {len(problems) - 12} more" if len(problems) > 12 else "")
        raise BadInputError(f"cannot write the GGUF of {len(problems)} tensor(s) {what}: {listed}", path=b.path)


def _file_type(tensors) -> int:
    """llama.cpp loader's guess of a file type: the most common tensor type's."""
    counts: dict[str, int] = {}
    for t in tensors:
        counts[t.type.name] = counts.get(t.type.name, 0) + 1
    top = max(counts, key=lambda k: counts[k]) if counts else "F32"
    return gguf_out.GUESSED_FTYPE.get(top, 0)


def plan_bundle(b: Bundle):
    """The :class:`~.gguf_out.GGUFPlan` of a bundle's blocks (see the module docstring)."""
    kind = b.manifest.get("source", {}).get("kind")
    if kind == "gguf":
        return _plan_gguf_bundle(b)
    if kind in ("hf", "safetensors"):
        return _plan_hf_bundle(b)
    raise BadInputError(f"bundle was made from a {kind!r} source; export writes GGUF from GGUF or HF sources",
                        path=b.path)


def _mix_of(b: Bundle):
    from . import mixes

    name = (b.manifest.get("options") or {}).get("mix")
    return mixes.get_mix(name) if name else None


def _plan_gguf_bundle(b: Bundle):
    from ..formats.gguf_kv import read_pairs

    _check_source_files(b, ("source/gguf-header.bin", "source/gguf-layout.json"))
    layout_doc = guard.loads_json((b.path / "source" / "gguf-layout.json").read_bytes(),
                                  path=b.path / "source" / "gguf-layout.json")
    _check_layout_doc(layout_doc, b.path / "source" / "gguf-layout.json")
    have = {t.name: t for t in b.tensors}
    missing = [f"{r['name']}: not in the bundle (converted with --include/--exclude?)"
               for r in layout_doc["tensors"] if r["name"] not in have]
    _refuse(missing + _not_invertible(b, None), b, "of the source")
    kv = read_pairs((b.path / "source" / "gguf-header.bin").read_bytes(), str(b.path / "source" / "gguf-header.bin"))
    tensors = []
    for r in layout_doc["tensors"]:
        t = have[r["name"]]
        reason = "as stored" if t.type == r["type"] else f"re-quantized {r['type']} -> {t.type} (in the bundle)"
        tensors.append(gguf_out.OutTensor(t.name, gguf_out.shape_of_ne(r["ne"]), t.qtype, t.name, r["type"],
                                          functools.partial(_blocks, b, t),
                                          "copy" if t.type == r["type"] else "requantize", [reason],
                                          rule=t.ledger.get("rule")))
    arch = str(kv.get("general.architecture") or "?")
    plan = gguf_out.GGUFPlan(kv, tensors, arch, "gguf-bundle", str(b.path))
    mix = _mix_of(b)
    if mix is not None:  # llama_model_quantize's file: split keys dropped, the two pairs last, its order
        for key in gguf_out.SPLIT_KEYS:
            kv.remove(key)
        kv.set("general.quantization_version", gguf_out.QUANTIZATION_VERSION)
        kv.set("general.file_type", mix.ftype)
        plan.tensors = gguf_out.quantizer_order(tensors)
        plan.mix = mix.name
    elif "general.file_type" in kv:
        kv.add("general.file_type", _file_type(tensors))
    return plan


def _plan_hf_bundle(b: Bundle):
    import json

    folder = b.path / "source"
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise BadInputError("the bundle carries no source/config.json: the GGUF's architecture is unknown", path=b.path)
    _check_source_files(b, tuple(f"source/{p.relative_to(folder).as_posix()}" for p in folder.rglob("*") if p.is_file()))
    w = gguf_arch.writer_for(json.loads(cfg_path.read_text("utf-8")))
    src = b.manifest.get("source", {})
    listed = [x["name"] for x in (src.get("tensor_list") or {}).get("tensors", [])]
    have = {t.name: t for t in b.tensors}
    names = {n: w.gguf_name(n) for n in sorted(set(listed) | set(have))}  # None: the converter drops it
    missing = [f"{n}: not in the bundle (converted with --include/--exclude?)" for n in listed
               if n not in have and names[n] is not None]
    kept = [n for n in sorted(have) if names[n] is not None]
    _refuse(missing + _not_invertible(b, set(kept)), b, "of the checkpoint")
    if w.row is not None and any("vocab_rows" in t for t in w.row.gguf_transforms.values()):
        w.n_vocab_rows = gguf_out.vocab_rows(folder, w.hp)
    tensors, early = gguf_out.generated_tensors(w)
    for hf in kept:
        t, name = have[hf], names[hf]
        assert name is not None
        tr = w.transform(hf, tuple(t.shape))
        shape = tr.shape(tuple(t.shape))
        st = t.qtype
        if st.quantized:
            if tr.shift:
                raise UnsupportedError(f"{hf}: a quantized norm cannot be shifted", path=b.path)
            out, notes = st, [f"{st.name} blocks as the bundle holds them"]
        else:  # floats: the converter's F32 for vectors, norms and its F32 tables; matrices as stored
            f32, why = gguf_out.converter_type(name, shape, st)
            out, notes = (f32, [why]) if f32 == qtypes.F32 else (st, [f"{st.name} as the bundle holds it"])

        def produce(t=t, tr=tr, st=st, out=out) -> np.ndarray:
            blocks = _blocks(b, t)
            if st.quantized or (out == st and not tr.shift):
                return np.ascontiguousarray(tr.rows_of(blocks)).reshape(-1)
            n, k = t.nk
            x = (blocks.view(np.float16) if st == qtypes.F16 else
                 blocks_mod.dequantize(blocks, st, n, k)).reshape(t.shape)
            return gguf_out.to_type(tr.values(x), out)
        tensors.append(gguf_out.OutTensor(name, shape, out, hf, t.type, produce, "copy" if out == st and tr.identity
                                          else "convert", tr.notes() + notes, rule=t.ledger.get("rule")))
    mix = _mix_of(b)
    n_params = sum(int(np.prod(t.shape)) for t in tensors)
    kv = gguf_out.hf_kv(folder, w, mix.ftype if mix else _file_type(tensors), n_params, name=src.get("path"),
                        early=early)
    plan = gguf_out.GGUFPlan(kv, tensors, w.gguf, "hf-bundle", str(b.path))
    if mix is not None:
        kv.set("general.quantization_version", gguf_out.QUANTIZATION_VERSION)
        kv.set("general.file_type", mix.ftype)
        plan.tensors = gguf_out.quantizer_order(tensors)
        plan.mix = mix.name
    return plan
