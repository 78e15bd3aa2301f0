"""What ``panelpack verify`` reports: the levels, one verdict per tensor, the report of a bundle
or a cactus folder (:mod:`.bundle_check`, :mod:`.cq_check`). Its own module, so the cactus
checker and the bundle checker that hands cactus folders to it share these without importing
each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..formats import signature as _signature
from ..formats.text import escape, table

LEVELS = ("structure", "lossless", "agreement", "all")
_RUNS = {"structure": ("structure",), "lossless": ("structure", "lossless"),
         "agreement": ("structure", "agreement"), "all": ("structure", "lossless", "agreement")}


@dataclass
class TensorVerdict:
    name: str
    layout: str
    type: str
    requested: str
    reason: Optional[str]
    paths: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: Optional[str] = None
    max_error: Optional[float] = None  # f64 sanity: relative L2 of the standard output
    levels: dict[str, str] = field(default_factory=dict)

    @property
    def fallback(self) -> bool:
        return self.layout != self.requested

    @property
    def verdict(self) -> str:
        if self.problems:
            return "MISMATCH"
        if self.fallback:
            return f"FALLBACK({self.reason})" if self.reason else "FALLBACK(unexplained)"
        if self.skipped:
            return f"SKIPPED({self.skipped})"
        if "agreement" not in self.levels:  # a level without agreement: say what was checked
            done = [k if s.startswith("ok") else f"{k} {s}" for k, s in self.levels.items()]
            return f"PASSED({', '.join(done)})"
        return "AGREE"

    @property
    def ok(self) -> bool:
        return not self.problems and not (self.fallback and not self.reason)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "layout": self.layout, "requested": self.requested, "type": self.type,
                "paths": self.paths, "verdict": self.verdict,
                "max_error": self.max_error if self.max_error is None or np.isfinite(self.max_error) else None,
                "levels": self.levels, "problems": self.problems}


@dataclass
class Report:
    bundle: str
    levels: tuple[str, ...]
    seed: int
    sample: int
    tensors: list[TensorVerdict]
    problems: list[tuple[str, str]]  # structure problems not tied to one tensor
    seconds: float = 0.0
    native: Optional[str] = None  # the C kernels' line (verify/native): what ran, or SKIPPED(why)
    compiled_kernels: int = 0  # kernels numba compiled (not in its on-disk cache) during the run
    compile_seconds: float = 0.0  # the wall time those compilations took (and the wait for a helper's)
    helper_kernels: int = 0  # of compiled_kernels, those a helper process compiled alongside
    helper_seconds: float = 0.0  # the helper's own compile time (verify/precompile.py)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # e.g. unlisted files with --allow-extra
    signature: Optional[_signature.SignatureStatus] = None  # None: not looked at (a cactus folder)

    @property
    def ok(self) -> bool:
        return (not self.problems and all(t.ok for t in self.tensors)
                and (self.signature is None or self.signature.ok))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            key = t.verdict.split("(")[0]
            out[key] = out.get(key, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {"bundle": self.bundle, "ok": self.ok, "levels": list(self.levels), "seed": self.seed,
                "sample": self.sample, "seconds": round(self.seconds, 3), "counts": self.counts(), "native": self.native,
                "compiled": {"kernels": self.compiled_kernels, "seconds": round(self.compile_seconds, 3),
                             "helper_kernels": self.helper_kernels, "helper_seconds": round(self.helper_seconds, 3)},
                "problems": [{"where": w, "problem": p} for w, p in self.problems],
                "warnings": [{"where": w, "warning": p} for w, p in self.warnings],
                "signature": self.signature.to_json() if self.signature is not None else None,
                "tensors": [t.to_json() for t in self.tensors]}

    def render(self) -> str:
        rows = []
        for t in self.tensors:
            err = "" if t.max_error is None else f"{t.max_error:.2e}"
            rows.append((t.name, t.layout, t.type, ",".join(t.paths) or "-", t.verdict, err))
        lines = [table(rows, ("tensor", "layout", "type", "kernel paths", "verdict", "err vs f64"), right=(5,))]
        for t in self.tensors:
            for p in t.problems:
                lines.append(f"MISMATCH {escape(t.name)}: {escape(p)}")
        for where, p in self.problems:
            lines.append(f"PROBLEM {escape(where)}: {escape(p)}")
        for where, p in self.warnings:
            lines.append(f"WARNING {escape(where)}: {escape(p)}")
        if self.native:
            lines.append(f"native: {self.native}")
        if self.signature is not None:
            lines.append(self.signature.render())
        if self.compiled_kernels:
            helper = (f"; {self.helper_kernels} of them in a helper process alongside, {self.helper_seconds:.1f} s there"
                      if self.helper_kernels else "")
            lines.append(f"first run on this numba cache: compiled {self.compiled_kernels} kernel(s), "
                         f"{self.compile_seconds:.1f} s of the {self.seconds:.1f} s{helper} (cached for the next run)")
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(self.counts().items()))
        state = "OK" if self.ok else "FAILED"
        # the verdict stays the last line (scripts and the examples read it)
        lines.append(f"verify {state}: {len(self.tensors)} tensors ({counts}); levels {'+'.join(self.levels)}; "
                     f"seed {self.seed}; {self.seconds:.1f} s")
        return "\n".join(lines)
