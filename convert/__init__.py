"""The converter's public API: ``convert()``, ``export()``, and the result objects.

    import panelpack
    result = panelpack.convert("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2.ppk", layout="panel64")
    print(result.render())

The ``panelpack convert``/``export`` commands are thin shells over these functions.
"""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ..formats.checkpoint import open_checkpoint
from .pipeline import Progress, TensorResult, run
from .plan import Plan, make_plan

__all__ = ["convert", "plan", "ConvertResult", "Progress", "Plan", "export"]


@dataclass
class ConvertResult:
    """What a conversion did: the plan, the bundle written (None for a dry run), timings."""

    plan: Plan
    bundle: Optional[Path] = None
    seconds: float = 0.0
    tensors: list[TensorResult] = field(default_factory=list)

    @property
    def dry_run(self) -> bool:
        return self.bundle is None

    @property
    def bytes_in(self) -> int:
        return self.plan.bytes_in

    @property
    def bytes_out(self) -> int:
        return self.plan.bytes_out

    @property
    def ledger(self) -> list[dict[str, Any]]:
        errors = {r.entry.name: r.error for r in self.tensors}
        out = []
        for t in self.plan.tensors:
            row = {"name": t.name, "shape": list(t.info.shape), "source_type": t.info.type.name,
                   "type": t.decision.target_type.name, "bytes": t.bytes_out, **t.ledger}
            if errors.get(t.name):
                row["error"] = errors[t.name]
            out.append(row)
        return out

    def render(self) -> str:
        """The ledger table and the summary lines, as ``panelpack convert`` prints them."""
        from .report import render_result

        return render_result(self)

    def to_json(self) -> dict[str, Any]:
        doc = self.plan.to_json()
        doc.update({
            "dry_run": self.dry_run,
            "bundle": str(self.bundle) if self.bundle else None,
            "seconds": round(self.seconds, 3),
            "ledger": self.ledger,
        })
        doc.pop("tensors")
        return doc


def plan(source: str | os.PathLike, layout: str = "panel64", quant: Optional[str] = None,
         requant: Optional[str] = None, include: Sequence[str] = (), exclude: Sequence[str] = (),
         mix_options=None) -> Plan:
    """Plan a conversion from metadata only (no tensor data is read)."""
    with open_checkpoint(source) as ckpt:
        return make_plan(ckpt, layout, quant, requant, include, exclude, mix_options)


def convert(source: str | os.PathLike, out: str | os.PathLike | None = None, layout: str = "panel64",
            quant: Optional[str] = None, requant: Optional[str] = None, include: Sequence[str] = (),
            exclude: Sequence[str] = (), jobs: Optional[int] = 1, dry_run: bool = False, force: bool = False,
            progress: Optional[Progress] = None, allow_nonfinite: bool = False, mix_options=None,
            digest: Optional[str] = None) -> ConvertResult:
    """Convert a GGUF file or an HF checkpoint into a bundle at ``out``.

    ``quant`` (HF sources: q4_0, q8_0, q4_k) quantizes 2-D matmul weights; ``requant`` (GGUF
    sources) re-quantizes what the layout cannot take. With ``dry_run`` nothing is read or
    written beyond the headers, and the result carries the plan and ledger. A NaN/Inf in a
    weight to be quantized is refused (naming the tensor and index) unless ``allow_nonfinite``.
    ``quant`` may also be a llama.cpp file type (``Q4_K_M``, ...; see ``convert.mixes``), which chooses each
    tensor's type as llama-quantize does; ``mix_options`` (a ``mixes.Options``) carries
    ``--pure``, ``--tensor-type`` and the other per-tensor options. ``jobs``: tensors converted
    at once; ``None`` lets the pipeline choose (``pipeline.auto_jobs``: 2 for a job that runs
    the kernels, when 2 cores are usable). ``digest``: the algorithm of the bundle's per-tensor
    digests (``formats.digests.DIGESTS``; None: ``digests.DEFAULT``, BLAKE3; sha256 for a runtime
    without BLAKE3).
    """
    from ..formats import digests

    digest = digests.get(digest or digests.DEFAULT).name  # an unknown name: bad input, nothing read
    if out is not None and not dry_run:
        _check_output(source, out, force)
    with open_checkpoint(source) as ckpt:
        p = make_plan(ckpt, layout, quant, requant, include, exclude, mix_options)
        if dry_run:
            return ConvertResult(p)
        if out is None:
            from ..formats.errors import BadInputError

            raise BadInputError("an output path is needed (-o OUT.ppk) unless --dry-run")
        path, results, seconds = run(ckpt, p, out, force=force, jobs=jobs, progress=progress,
                                     allow_nonfinite=allow_nonfinite, digest=digest)
        return ConvertResult(p, path, seconds, results)


def _check_output(source: str | os.PathLike, out: str | os.PathLike, force: bool) -> None:
    """The bundle may not be, contain or lie inside the source; ``--force`` replaces only a bundle."""
    from ..formats import guard

    guard.check_disjoint(source, out, "the source checkpoint", "the bundle")
    if force:
        guard.check_replaceable_bundle(out)


def export(bundle: str | os.PathLike, out: str | os.PathLike, force: bool = False):
    """Write a GGUF-sourced bundle back to a standard GGUF (see ``gguf_export.export_gguf``)."""
    from .gguf_export import export_gguf

    return export_gguf(bundle, out, force=force)


class _ConvertPackage(types.ModuleType):
    """``panelpack.convert(...)`` is :func:`convert`: the subpackage and the front-door
    function share the name, so calling the package runs the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> ConvertResult:
        return convert(*args, **kwargs)


sys.modules[__name__].__class__ = _ConvertPackage
