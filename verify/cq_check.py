"""``panelpack verify`` for a cactus folder written by ``convert --target cactus``.

Levels (the same names as for bundles):

* ``structure``: ``manifest.json`` present and of our format; every file it lists present
  with its size and sha256; every tensor file parses (header, sizes, metadata length) and its
  lineage is the one its suffix promises (``.cq4p.weights``: panel; else legacy);
* ``lossless``: CQ files: the index packing round-trips (unpack then pack gives the stored
  bytes); panel files also: the folded f32 norms equal the stored f16 norms, pad channels 0;
* ``agreement``: ``.cq4p.weights``: the emulated SME2 GEMV (LUTI4 + SDOT vgx4) and GEMM
  (SMOPA) leaves on ``sample`` sampled super-blocks at M = 1 and 17 give int32 partials
  identical to the direct integer computation, and the rescaled outputs lie within the stated
  bound of the f64 oracle (``verify/cq.py``). Legacy CQ4 Hadamard files: the same, on the
  panels they pack to in memory (``PanelCheck.from_legacy``). Other CQ files (CQ1-3, the
  orthogonal CQ4 tables): no emulated kernel reads them: SKIPPED.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ..formats import cactus as cfile
from ..formats import guard
from ..formats.atomic import sha256_file
from ..formats.errors import BadInputError
from ..repack import cq4_panel
from .report import _RUNS, LEVELS, Report, TensorVerdict

MANIFEST = cfile.FOLDER_MANIFEST
MANIFEST_FORMAT = cfile.FOLDER_MANIFEST_FORMAT
AGREEMENT_M = (1, 17)


def is_cactus_folder(path: str | os.PathLike) -> bool:
    p = Path(path) / MANIFEST
    if not p.is_file():
        return False
    try:
        return guard.loads_json(p.read_bytes(), p).get("format") == MANIFEST_FORMAT
    except (OSError, ValueError, AttributeError):  # our FormatError is a ValueError
        return False


def structure_problems(folder: str | os.PathLike) -> list[tuple[str, str]]:
    """``(file, problem)`` for every structure/checksum problem of the folder."""
    folder = Path(folder)
    try:
        doc = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadInputError(f"{folder}: no readable {MANIFEST}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise BadInputError(f"{folder}/{MANIFEST}: not a {MANIFEST_FORMAT} manifest")
    out = []
    for name, want in sorted(doc.get("files", {}).items()):
        p = folder / name
        if os.sep in name or name.startswith("."):
            out.append((name, "file name escapes the folder"))
        elif not p.is_file():
            out.append((name, "missing"))
        elif p.stat().st_size != want.get("bytes") or sha256_file(p) != want.get("sha256"):
            out.append((name, "size or sha256 differs from the manifest"))
        elif name.endswith((".weights", ".bias")):
            try:
                f = cfile.read(p)
                if (f.lineage == cfile.LINEAGE_PANEL) != name.endswith(cfile.PANEL_SUFFIX):
                    out.append((name, f"read as {f.lineage}, which its suffix does not promise"))
            except BadInputError as e:
                out.append((name, str(e)))
    return out


def _kind(f: cfile.CactusTensorFile) -> tuple[str, str]:
    if f.kind != "cq":
        return f.kind, f.kind.upper()
    lay = "cq4p" if f.lineage == cfile.LINEAGE_PANEL else ("cq-il4row" if f.interleaved else "cq-lsb")
    return lay + ("-orthogonal" if f.orthogonal else ""), f"CQ{f.bits}"


def _lossless(f: cfile.CactusTensorFile, v: TensorVerdict) -> None:
    n, kp = f.shape
    if f.lineage == cfile.LINEAGE_PANEL:
        nib = cq4_panel.unpack(f.data, n, kp)
        if not np.array_equal(cq4_panel.pack(nib), f.data):
            v.problems.append("lossless: panel bytes do not round-trip (pad channels not 0?)")
        m = f.metadata()
        want = cfile.folded_norm_blob(m["norms"])
        if not np.array_equal(m["folded_norms"].view(np.uint32), want.view(np.uint32)):
            v.problems.append("lossless: folded norms differ from the f16 norms (or pad norms not 0)")
        return
    idx = f.indices()
    packed = (cfile.pack_interleaved(idx, f.header.group_size, f.bits) if f.interleaved
              else cfile.pack_lsb(idx, f.bits).reshape(-1))
    if not np.array_equal(packed, f.data):
        v.problems.append("lossless: index packing does not round-trip")


def _emulated(f: cfile.CactusTensorFile) -> bool:
    """Files the emulated CQ4 leaves run on: panel files, and legacy CQ4 Hadamard files."""
    return f.lineage == cfile.LINEAGE_PANEL or (f.kind == "cq" and f.bits == 4 and not f.orthogonal)


def _agreement(f: cfile.CactusTensorFile, v: TensorVerdict, rng: np.random.Generator, sample: int) -> None:
    from .cq import PanelCheck

    pc = PanelCheck(f) if f.lineage == cfile.LINEAGE_PANEL else PanelCheck.from_legacy(f)
    nsb = -(-pc.n // cq4_panel.CHANNELS)
    sbs = np.sort(rng.choice(nsb, size=min(sample, nsb), replace=False)) if sample else np.arange(nsb)
    worst = 0.0
    for m in AGREEMENT_M:
        a = rng.standard_normal((m, pc.kp)).astype(np.float32)
        a[:, rng.integers(pc.kp)] *= 20.0  # an activation outlier
        r = pc.run(a, sbs)
        if not r["partials_equal"]:
            v.problems.append(f"agreement: M={m}: {r['first_diff']}")
        if r["bound_ratio"] > 1.0:
            v.problems.append(f"agreement: M={m}: output off the f64 oracle by {r['bound_ratio']:.3g} x the bound")
        worst = max(worst, r["bound_ratio"])
    v.paths.extend((["cq4_panel.pack(in memory)"] if f.lineage != cfile.LINEAGE_PANEL else [])
                   + ["sme2.gemv.luti4_sdot", "sme2.gemm.luti4_smopa", "direct.int32"])
    v.max_error = worst


def verify_cactus(path: str | os.PathLike, level: str = "all", seed: int = 0, sample: int = 2,
                  names: Optional[list[str]] = None, progress=None) -> Report:
    """Verify a cactus folder at ``level`` (see the module docstring); a bundle-style Report
    whose tensors are the folder's tensor files (``max_error``: worst |y - oracle| / bound)."""
    if level not in _RUNS:
        raise BadInputError(f"unknown level {level!r} (known: {', '.join(LEVELS)})")
    runs = _RUNS[level]
    t0 = time.perf_counter()
    folder = Path(path)
    problems = structure_problems(folder)
    bad = {w for w, _ in problems}
    doc = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    files = sorted(n for n in doc.get("files", {}) if n.endswith((".weights", ".bias")))
    if names:
        files = [n for n in files if n in set(names)]
    verdicts = []
    for i, name in enumerate(files):
        v = TensorVerdict(name, "?", "?", "?", None)
        if name in bad:
            v.problems.extend(f"structure: {p}" for w, p in problems if w == name)
            v.levels["structure"] = "failed"
            verdicts.append(v)
            continue
        f = cfile.read(folder / name)
        v.layout, v.type = _kind(f)
        v.requested = v.layout
        v.levels["structure"] = "ok"
        if f.kind == "cq" and "lossless" in runs:
            _lossless(f, v)
            v.levels["lossless"] = "failed" if v.problems else "ok"
        if "agreement" in runs and not v.problems:
            if _emulated(f):
                _agreement(f, v, np.random.default_rng([seed, i]), sample)
                v.levels["agreement"] = "failed" if v.problems else "ok"
            else:
                v.skipped = "no emulated kernel reads this layout" if f.kind == "cq" else "plain values"
        elif "agreement" not in runs:
            v.skipped = f"level {level}"
        verdicts.append(v)
        if progress is not None:
            progress(v)
    other = [(w, p) for w, p in problems if w not in set(files)]
    return Report(str(path), runs, seed, sample, verdicts, other, time.perf_counter() - t0)
