"""The streaming pipeline: read, convert and write one tensor at a time (a few with ``jobs``).

Peak memory is bounded by ``jobs`` times the working set of the largest tensor (its f32
copy when it is quantized, plus its blocks and regions) plus the finished results waiting
to be written in order (at most twice the largest tensor's output, see :func:`run`),
independent of the model size: tensor data is read through memory maps, each result is
written and dropped as soon as the tensors before it are.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from .. import __version__, repack
from ..formats import blocks as codecs
from ..formats import bundle, digests, engine, qtypes
from ..formats.atomic import sha256_file
from ..formats.bundle import BundleWriter, MappedTensor, TensorEntry, hash_async
from ..formats.common import Checkpoint
from . import quality
from .plan import Plan, TensorPlan

log = logging.getLogger(__name__)


class Progress:
    """Progress events; the CLI passes a tqdm-backed subclass, the API defaults to silence."""

    def start(self, tensors: int, nbytes: int) -> None:
        pass

    def tensor_done(self, name: str, nbytes: int) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class TensorResult:
    entry: TensorEntry  # the manifest entry
    error: Optional[dict[str, float]] = None  # quantization error added, when quantized


def _as_f32(raw: np.ndarray, t: qtypes.GGMLType, n: int, k: int, parallel: Optional[bool] = None,
            out: Optional[np.ndarray] = None) -> np.ndarray:
    return codecs.dequantize(raw, t, n, k, out=out, parallel=parallel).reshape(n, k)


#: ``--jobs``: tensors queued per worker beyond the one being written, and the least byte budget
#: of finished results waiting to be written (see :func:`run`).
WINDOW_PER_JOB = 4
WINDOW_BYTES = 64 << 20

#: ``jobs=None`` (the CLI's default): workers for a job big enough to start the kernels, at
#: most the cores this process may use; a small job (numpy references, formats/engine.py) runs
#: on one. Two measured on the 2-core host (docs/BENCHMARKS.md); more hold more tensors at once.
AUTO_JOBS = 2


def auto_jobs(kernels: bool) -> int:
    """``jobs`` when none is given: :data:`AUTO_JOBS` (or the usable cores, if fewer) when the
    job runs the kernels, else 1."""
    return max(1, min(AUTO_JOBS, engine.usable_cores())) if kernels else 1


#: tensors written whose hashes may still be running while the next ones convert (their data
#: stays referenced, mapped file pages or the regions, until hashed)
HASH_AHEAD = 2

#: f32 elements per step of a (re)quantization: the f32 copies exist one chunk at a time (16 MB)
REQUANT_CHUNK_ELEMENTS = 1 << 22


def _quantize_rows(raw: np.ndarray, src: qtypes.GGMLType, dst: qtypes.GGMLType, n: int, k: int,
                   name: str = "", allow_nonfinite: bool = False, imatrix: Optional[np.ndarray] = None,
                   parallel: Optional[bool] = None) -> tuple[np.ndarray, dict[str, Any]]:
    """(blocks of ``dst`` uint8 [n, row_bytes], the error added) from ``raw`` of ``src``, in
    steps of whole rows: dequantize, quantize and measure one chunk at a time, so memory is
    the output blocks plus one chunk's f32 copies, not whole-tensor f32/f64 arrays (the bytes
    are the same: every block is quantized on its own). Non-finite weights are refused
    (:func:`quality.check_finite`) unless ``allow_nonfinite``; ``imatrix`` (a
    llama.cpp importance row over K) weights every row alike. ``parallel``: the kernels' choice
    (False when several tensors run at once: each then keeps to its own thread)."""
    return _quantize_rows_many(raw, src, [(dst, imatrix)], n, k, name, allow_nonfinite, parallel)[0]


def _quantize_rows_many(raw: np.ndarray, src: qtypes.GGMLType, dsts: list[tuple[qtypes.GGMLType, Optional[np.ndarray]]],
                        n: int, k: int, name: str = "", allow_nonfinite: bool = False,
                        parallel: Optional[bool] = None) -> list[tuple[np.ndarray, dict[str, Any]]]:
    """:func:`_quantize_rows` into several ``(type, importance)`` at once: each chunk of the
    source is dequantized once and quantized into every one of them (a multi-target convert
    shares the f32 copy; each result's bytes are those of its own single run)."""
    rows = max(1, REQUANT_CHUNK_ELEMENTS // max(1, k))
    src_rb = raw.size // n if n else 0
    flat = raw.reshape(n, src_rb) if n else raw
    single = 0 < n <= rows  # one chunk (most tensors): the quantizer's output is the result, no copy
    outs = [np.empty((n, dst.row_bytes(k)), np.uint8) if not single else np.empty((0, 0), np.uint8)
            for dst, _ in dsts]
    stats = [quality.ErrorStats() for _ in dsts]
    # the chunk's two f32 copies (the source, and the result read back for the error) reuse two
    # buffers: fresh 16 MB arrays each chunk cost their page faults again (half the f32 time)
    xbuf, ybuf = (np.empty((min(n, rows), k), np.float32) for _ in range(2))
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        x = _as_f32(flat[r0:r1], src, r1 - r0, k, parallel, out=xbuf[:r1 - r0])
        for j, (dst, imatrix) in enumerate(dsts):
            q = codecs.quantize(x, dst, imatrix=imatrix, parallel=parallel).reshape(r1 - r0, -1)
            if single:
                outs[j] = q
            else:
                outs[j][r0:r1] = q
            if stats[j].add(_as_f32(q, dst, r1 - r0, k, parallel, out=ybuf[:r1 - r0]), x, q, dst):
                # a non-finite element: refused here, before anything is written, unless allowed
                quality.check_finite(x, name, allow_nonfinite, row0=r0)
    return [(out, st.result(name)) for out, st in zip(outs, stats)]


def convert_tensor(ckpt: Checkpoint, tp: TensorPlan, allow_nonfinite: bool = False, parallel: Optional[bool] = None,
                   writer: Optional[BundleWriter] = None) -> tuple[Any, dict[str, Any], Optional[dict]]:
    """Produce one tensor's regions. Returns (regions, extra manifest fields, error); with a
    ``writer`` that maps files, the regions are packed straight into the tensor file and
    returned as its :class:`MappedTensor` (for :meth:`BundleWriter.finish_tensor`). The digests
    are in the writer's algorithm (the default one without a writer)."""
    return convert_unit(ckpt, [tp], allow_nonfinite, parallel, [writer])[0][0]


def _imatrix_key(importance: Optional[np.ndarray]) -> Optional[bytes]:
    return None if importance is None else np.ascontiguousarray(importance, np.float32).tobytes()


def convert_unit(ckpt: Checkpoint, tps: list[TensorPlan], allow_nonfinite: bool = False,
                 parallel: Optional[bool] = None, writers: Optional[Sequence[Optional[BundleWriter]]] = None
                 ) -> tuple[list[tuple[Any, dict[str, Any], Optional[dict]]], list[list[str]]]:
    """One source tensor into every target's regions (``tps[i]``: its plan in target ``i``,
    written by ``writers[i]``): the source is read once, hashed once per digest algorithm,
    dequantized once (chunk by chunk) for every target that (re)quantizes it, and quantized
    once per distinct ``(type, importance)``; only the packing is per target. Returns
    ``[(regions, extra, error)]`` as :func:`convert_tensor`, and per target what it shared
    with the others (``"read"``, ``"source digest"``, ``"dequantize"``, ``"quantize Q4_K"``)."""
    info = tps[0].info
    n, k = info.n, info.k
    writers = list(writers) if writers is not None else [None] * len(tps)
    raw = np.asarray(ckpt.raw(info.name))  # a plain view of the map: slicing a np.memmap is slow
    dgs = [w.digest if w is not None else digests.get(digests.DEFAULT) for w in writers]
    # the hashes run on the hash threads, while this one converts; one per algorithm
    source_hash = {dg.name: hash_async(dg.of_bytes, raw) for dg in dgs}
    quantized: dict[tuple[str, Optional[bytes]], int] = {}  # (type, importance) -> index in wanted
    wanted: list[tuple[qtypes.GGMLType, Optional[np.ndarray]]] = []
    for tp in tps:
        if tp.decision.action in ("quantize", "requantize"):
            key = (tp.decision.target_type.name, _imatrix_key(tp.importance))
            if key not in quantized:
                quantized[key] = len(wanted)
                wanted.append((tp.decision.target_type, tp.importance))
        elif tp.decision.action not in ("repack", "copy"):  # pragma: no cover - the policy's actions only
            raise AssertionError(tp.decision.action)
    made = _quantize_rows_many(raw, info.type, wanted, n, k, info.name, allow_nonfinite, parallel) if wanted else []
    blocks_hash: dict[tuple[int, str], Any] = {}
    users = [0] * len(wanted)
    for tp in tps:
        if tp.decision.action in ("quantize", "requantize"):
            users[quantized[(tp.decision.target_type.name, _imatrix_key(tp.importance))]] += 1
    out = []
    shared: list[list[str]] = []
    for tp, writer, dg in zip(tps, writers, dgs):
        d = tp.decision
        err = bh = None
        notes = ["read"] if len(tps) > 1 else []
        if sum(1 for x in dgs if x.name == dg.name) > 1:
            notes.append("source digest")
        if d.action in ("repack", "copy"):
            blocks = raw.reshape(n, -1) if info.type.quantized else raw
        else:
            j = quantized[(d.target_type.name, _imatrix_key(tp.importance))]
            blocks, err = made[j]
            if (j, dg.name) not in blocks_hash:
                blocks_hash[(j, dg.name)] = hash_async(dg.of_bytes, blocks)
            bh = blocks_hash[(j, dg.name)]
            if len(wanted) > 1 or users[j] > 1:
                notes.append("dequantize")
            if users[j] > 1:
                notes.append(f"quantize {d.target_type.name}")
        lay = repack.get(d.layout)
        specs = [(r.name, bundle.dtype_name(r.np_dtype), r.shape) for r in lay.plan(d.target_type, n, k)]
        mapped = writer.map_tensor(tp.index, tp.name, specs) if writer is not None else None  # None: cannot map
        if mapped is not None:
            lay.pack(blocks, n, k, d.target_type, out=mapped.views)
            regions: Any = mapped
        else:
            regions = lay.pack(blocks, n, k, d.target_type)
        # the hashes may still be running: the writer records them once done (HASH_AHEAD)
        extra: dict[str, Any] = {"source_digest": source_hash[dg.name], "blocks_digest": bh or source_hash[dg.name]}
        out.append((regions, extra, err))
        shared.append(notes)
    return out, shared


def gguf_layout_json(ckpt) -> dict[str, Any]:
    """What ``export`` needs besides the header bytes: sizes, tensor order and data gaps."""
    covered = sorted((t.offset, t.offset + t.nbytes) for t in ckpt.tensors)
    gaps, pos = [], ckpt.data_offset
    for a, b in covered + [(ckpt.file_size, ckpt.file_size)]:
        if a > pos:
            gaps.append((pos, a))
        pos = max(pos, b)
    nonzero = [(a, b) for a, b in gaps if np.any(ckpt.bytes_at(a, b))]
    return {
        "version": ckpt.version,
        "alignment": ckpt.alignment,
        "data_offset": ckpt.data_offset,
        "file_size": ckpt.file_size,
        "tensors": [{"name": r.name, "ne": list(r.ne), "type": r.type.name, "offset": r.rel_offset}
                    for r in ckpt.tensor_records],
        "nonzero_gaps": [[a, b] for a, b in nonzero],
    }


def _gguf_side_data(ckpt) -> list[tuple[str, bytes]]:
    """GGUF metadata, kept so that ``export`` can rebuild the file byte for byte, as ``(name,
    bytes)`` of the side files: ``gguf-header.bin`` (bytes 0 .. data_offset as stored: header,
    key/values, tensor table; readers take the key/values from it, ``Bundle.gguf_metadata``)
    and ``gguf-layout.json`` (sizes, tensor order, any non-zero bytes between tensors in
    ``gguf-gaps.bin``). No decoded copy of the key/values: it was as large as the header again
    (8.5 MB for Gemma 3's 262k-token vocabulary). Metadata only: :func:`run` builds it on a
    thread of its own while the tensors convert."""
    files = [("gguf-header.bin", bytes(ckpt.bytes_at(0, ckpt.data_offset)))]
    layout = gguf_layout_json(ckpt)
    if layout["nonzero_gaps"]:
        files.append(("gguf-gaps.bin", b"".join(bytes(ckpt.bytes_at(a, b)) for a, b in layout["nonzero_gaps"])))
    files.append(("gguf-layout.json", (json.dumps(layout, indent=1) + "\n").encode()))
    return files


def _gguf_side_files(ckpt, writer: BundleWriter, files: Optional[list[tuple[str, bytes]]] = None) -> None:
    """Write the GGUF side files (:func:`_gguf_side_data`, or ``files`` made from it already)."""
    for name, data in _gguf_side_data(ckpt) if files is None else files:
        writer.add_source_file(name, data=data)


def _in_background(fn, *args) -> "Future":
    """``fn(*args)`` on a thread of its own (its exception comes out of ``.result()``)."""
    pool = ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(fn, *args)
    pool.shutdown(wait=False)
    return fut


def _hf_side_files(ckpt, writer: BundleWriter) -> None:
    for p in getattr(ckpt, "side_files", []):
        p = Path(p)
        rel = p.relative_to(Path(ckpt.path)) if Path(ckpt.path).is_dir() else Path(p.name)
        writer.add_source_file(rel.as_posix(), src=p)
    meta = getattr(ckpt, "st_metadata", None)
    if meta:
        writer.add_source_file("safetensors-metadata.json", data=(json.dumps(meta, indent=1) + "\n").encode())


def engine_work(plan: Plan) -> dict[str, int]:
    """The job's work in the engine's terms (formats/engine.py), bytes per kind: f32 quantized
    and dequantized (the result back for the error, and a block-type source to f32; plain
    floats widen at memory speed) and blocks packed."""
    work = dict.fromkeys(engine.NUMPY_BUDGET_BYTES, 0)
    for tp in plan.tensors:
        d = tp.decision
        if d.action == "copy":
            continue
        if d.action in ("quantize", "requantize"):
            f32 = 4 * tp.info.n * tp.info.k
            work["quantize"] += f32
            work["dequantize"] += f32 * (2 if tp.info.type.quantized else 1)  # the result, and a block source
        kind = repack.numpy_pack_kind(d.layout, d.target_type)
        if kind is not None:
            work[kind] += d.target_type.nbytes(tp.info.n * tp.info.k)
    return work


def _hash_sources(ckpt: Checkpoint) -> "Future":
    """sha256 of every source file, in a background thread (hashlib releases the GIL), so it
    overlaps the conversion instead of adding a pass over the model at the end."""
    files = sorted({t.file for t in ckpt.tensors})
    return _in_background(lambda: [{"name": os.path.basename(f), "bytes": os.path.getsize(f), "sha256": sha256_file(f)}
                                   for f in files])


def _source_block(ckpt: Checkpoint, files: list[dict[str, Any]], plan: Plan) -> dict[str, Any]:
    selected = {tp.name for tp in plan.tensors}
    return {
        "kind": ckpt.kind,
        "path": os.path.basename(os.path.normpath(ckpt.path)),
        "architecture": ckpt.architecture,
        "files": files,
        "tensor_list": bundle.source_tensor_list(ckpt.tensors),
        "excluded": [t.name for t in ckpt.tensors if t.name not in selected],
    }


def _target(plan: Plan) -> dict[str, Any]:
    return dict(repack.get(plan.layout).TARGET)


def run(ckpt: Checkpoint, plan: Plan, out: str | os.PathLike, force: bool = False, jobs: Optional[int] = 1,
        progress: Optional[Progress] = None, allow_nonfinite: bool = False, digest: str = digests.DEFAULT
        ) -> tuple[Path, list[TensorResult], float]:
    """Write the bundle for ``plan``. Returns (path, per-tensor results, seconds)."""
    done = run_many(ckpt, [plan], [out], force, jobs, progress, allow_nonfinite, [digest])[0]
    return done.path, done.tensors, done.seconds


@dataclass
class TargetRun:
    """One bundle of :func:`run_many`: its path, per-tensor results, the run's seconds and,
    per tensor name, what it shared with the other targets (:func:`convert_unit`)."""

    path: Path
    tensors: list[TensorResult]
    seconds: float
    shared: dict[str, list[str]]


def _same_tensors(plans: list[Plan]) -> None:
    names = [tp.name for tp in plans[0].tensors]
    for p in plans[1:]:
        if [tp.name for tp in p.tensors] != names:  # pragma: no cover - one source, one include/exclude
            raise AssertionError("the targets of one source select different tensors")


def run_many(ckpt: Checkpoint, plans: list[Plan], outs: list[str | os.PathLike], force: bool = False,
             jobs: Optional[int] = 1, progress: Optional[Progress] = None, allow_nonfinite: bool = False,
             digest_names: Optional[list[str]] = None) -> list[TargetRun]:
    """Write one bundle per ``plans[i]`` at ``outs[i]`` in one pass over the source: every tensor
    is read once and each piece of work several targets need is done once (:func:`convert_unit`).
    Each bundle is atomic on its own (a temporary name renamed into place) and holds the bytes a
    single :func:`run` of its plan writes."""
    progress = progress or Progress()
    t0 = time.perf_counter()
    _same_tensors(plans)
    m = len(plans)
    digest_names = list(digest_names) if digest_names is not None else [digests.DEFAULT] * m
    results: list[list[TensorResult]] = [[] for _ in plans]
    shared: list[dict[str, list[str]]] = [{} for _ in plans]
    with ExitStack() as stack:
        writers = [stack.enter_context(BundleWriter(o, force=force, digest=dg)) for o, dg in zip(outs, digest_names)]
        source_hashes = _hash_sources(ckpt)
        side_data = _in_background(_gguf_side_data, ckpt) if ckpt.kind == "gguf" else None
        progress.start(len(plans[0].tensors), plans[0].bytes_in)
        # numba's start-up only pays for itself on big jobs; small ones stay in numpy
        work: dict[str, int] = {}
        for p in plans:
            for kind, nb in engine_work(p).items():
                work[kind] = work.get(kind, 0) + nb
        jit = engine.expect(False, **work)
        log.debug("kernels: %s", "numba" if jit else "numpy where it has a reference")
        jobs = auto_jobs(jit) if jobs is None else max(1, int(jobs))
        log.debug("jobs: %d", jobs)

        hashing: deque = deque()  # tensors written, their hashes still running, in plan order

        def record(i: int, tp: TensorPlan, written, extra: dict[str, Any], err) -> None:
            d = tp.decision
            entry = TensorEntry.create(
                tp.name, tp.info.shape, d.target_type.name, d.layout, written.result(), tp.params,
                dict(tp.ledger, **({"error": err} if err else {})),
                source_type=tp.info.type.name, role=d.role, action=d.action,
                **{key: fut.result() for key, fut in extra.items()})
            results[i].append(TensorResult(entry, err))
            if i == m - 1:
                progress.tensor_done(tp.name, tp.info.nbytes)

        def finish(unit: tuple[TensorPlan, ...], produced) -> None:
            outputs, notes = produced
            for i, (tp, (regions, extra, err)) in enumerate(zip(unit, outputs)):
                if notes[i]:
                    shared[i][tp.name] = notes[i]
                # row-major blocks are the standard blocks themselves: their hash is known
                known = [extra["blocks_digest"]] if tp.decision.layout == "rowmajor" else None
                if isinstance(regions, MappedTensor):
                    written = writers[i].finish_tensor(regions, known_hashes=known, wait=False)
                else:
                    written = writers[i].write_tensor(tp.index, tp.name, regions, known_hashes=known, wait=False)
                hashing.append((i, tp, written, extra, err))
            while len(hashing) > HASH_AHEAD * m:
                record(*hashing.popleft())

        units = list(zip(*(p.tensors for p in plans)))
        if jobs == 1:
            for unit in units:
                finish(unit, convert_unit(ckpt, list(unit), allow_nonfinite, writers=writers))
        else:
            # Results are written in plan order, each as soon as it and all before it are done.
            # Tensors queue ahead while the oldest is still running (a worker never idles behind
            # one large tensor), up to WINDOW_PER_JOB per worker and a byte budget of finished
            # results held for writing: twice the largest tensor's output, at least WINDOW_BYTES.
            def size(unit) -> int:
                return sum(tp.bytes_out for tp in unit)

            budget = max(WINDOW_BYTES, 2 * max((size(u) for u in units), default=0))
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                window: deque = deque()
                held = 0
                for unit in units:
                    # each worker keeps its kernels on its own thread: --jobs is the parallelism
                    window.append((unit, pool.submit(convert_unit, ckpt, list(unit), allow_nonfinite, False, writers)))
                    held += size(unit)
                    while window and (window[0][1].done() or len(window) > WINDOW_PER_JOB * jobs or held > budget):
                        u0, fut = window.popleft()
                        held -= size(u0)
                        finish(u0, fut.result())
                while window:
                    u0, fut = window.popleft()
                    finish(u0, fut.result())

        while hashing:
            record(*hashing.popleft())
        side = side_data.result() if side_data is not None else None
        files = source_hashes.result()
        paths = []
        for plan, writer, res in zip(plans, writers, results):
            if ckpt.kind == "gguf":
                _gguf_side_files(ckpt, writer, side)
            else:
                _hf_side_files(ckpt, writer)
            paths.append(writer.commit(_manifest(ckpt, plan, files, res)))
        progress.close()
    seconds = time.perf_counter() - t0
    return [TargetRun(path, res, seconds, sh) for path, res, sh in zip(paths, results, shared)]


def _manifest(ckpt: Checkpoint, plan: Plan, files: list[dict[str, Any]], results: list[TensorResult]) -> dict[str, Any]:
    return {
        "format": bundle.FORMAT,
        "version": bundle.VERSION,
        "created_by": f"panelpack {__version__}",
        "target": _target(plan),
        "source": _source_block(ckpt, files, plan),
        "model": ckpt.hyperparameters(),
        "options": {"layout": plan.layout, **({"code_form": plan.code_form} if plan.code_form else {}),
                    "quant": plan.quant.name if plan.quant else None,
                    "requant": plan.requant.name if plan.requant else None,
                    **({"mix": plan.mix} if plan.mix else {}),
                    **({"imatrix": plan.imatrix.provenance()} if plan.imatrix else {})},
        "tensors": [r.entry for r in results],
    }
