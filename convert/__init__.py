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
from .pipeline import Progress, TensorResult, run, run_many
from .plan import Plan, make_plan

__all__ = ["convert", "convert_many", "Target", "plan", "ConvertResult", "Progress", "Plan", "export", "to_gguf",
           "TARGETS"]

#: what ``panelpack convert`` writes (``--target``): a bundle (the default), a folder the cactus
#: engine loads (``convert/cactus.py``), or the GGUF llama.cpp's converter and quantizer write
#: (``to_gguf``; also chosen by an output name ending in ``.gguf``)
TARGETS = ("bundle", "cactus", "gguf")


@dataclass
class ConvertResult:
    """What a conversion did: the plan, the bundle written (None for a dry run), timings."""

    plan: Plan
    bundle: Optional[Path] = None
    seconds: float = 0.0
    tensors: list[TensorResult] = field(default_factory=list)
    #: multi-target convert (:func:`convert_many`): per tensor, what this output shared with the
    #: others of the run (``read``, ``source digest``, ``dequantize``, ``quantize Q4_K``)
    shared: dict[str, list[str]] = field(default_factory=dict)

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
            if self.shared.get(t.name):
                row["shared"] = list(self.shared[t.name])
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

    if out is not None and os.fspath(out).lower().endswith(".gguf"):
        if layout != "panel64" or requant or include or exclude or digest:
            from ..formats.errors import BadInputError

            raise BadInputError("GGUF output takes --quant (a llama.cpp mix) and --outtype; --layout, --requant, "
                                "--include/--exclude and --digest are bundle options")
        return to_gguf(source, out, quant=quant, mix_options=mix_options, dry_run=dry_run, force=force,
                       jobs=jobs)  # type: ignore[return-value]
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


@dataclass(frozen=True)
class Target:
    """One output of :func:`convert_many`: a bundle at ``out`` and the options that are its own
    (the rest, the source and ``include``/``exclude``/``mix_options``, are the run's)."""

    out: str | os.PathLike
    layout: str = "panel64"
    quant: Optional[str] = None
    requant: Optional[str] = None
    digest: Optional[str] = None

    @classmethod
    def of(cls, t: "Target | dict[str, Any] | str | os.PathLike") -> "Target":
        """A :class:`Target` from itself, a dict of its fields, or an output path (the defaults)."""
        if isinstance(t, Target):
            return t
        if isinstance(t, dict):
            unknown = sorted(set(t) - {"out", "layout", "quant", "requant", "digest"})
            if unknown or "out" not in t:
                from ..formats.errors import BadInputError

                raise BadInputError(f"a target is a dict of out (required), layout, quant, requant, digest; got {sorted(t)}")
            return cls(**t)
        return cls(t)


def convert_many(source: str | os.PathLike, targets: Sequence["Target | dict[str, Any] | str | os.PathLike"],
                 include: Sequence[str] = (), exclude: Sequence[str] = (), jobs: Optional[int] = 1,
                 dry_run: bool = False, force: bool = False, progress: Optional[Progress] = None,
                 allow_nonfinite: bool = False, mix_options=None) -> list[ConvertResult]:
    """Convert one source into several bundles in one pass (``panelpack convert SRC -o a.ppk
    --layout panel64 -o b.ppk --layout ggml-x8``): the source is read once, and the
    dequantization and each distinct quantization are done once for the targets that need the
    same blocks. Each bundle is atomic on its own and byte-identical to what :func:`convert`
    writes for its target alone; each result's ledger says, per tensor, what it shared.
    ``targets``: :class:`Target`, dicts of its fields, or output paths. Returns one
    :class:`ConvertResult` per target, in order."""
    from ..formats import digests
    from ..formats.errors import BadInputError

    ts = [Target.of(t) for t in targets]
    if not ts:
        raise BadInputError("convert_many needs at least one target")
    outs = [os.path.abspath(os.fspath(t.out)) for t in ts]
    if len(set(outs)) != len(outs):
        dup = sorted({o for o in outs if outs.count(o) > 1})
        raise BadInputError(f"two targets write the same output: {', '.join(dup)}")
    for t in ts:
        if os.fspath(t.out).lower().endswith(".gguf"):
            raise BadInputError(f"{os.fspath(t.out)}: a multi-target convert writes bundles; convert to GGUF on its own")
    names = [digests.get(t.digest or digests.DEFAULT).name for t in ts]
    if not dry_run:
        for t in ts:
            _check_output(source, t.out, force)
    with open_checkpoint(source) as ckpt:
        plans = [make_plan(ckpt, t.layout, t.quant, t.requant, include, exclude, mix_options) for t in ts]
        if dry_run:
            return [ConvertResult(p) for p in plans]
        runs = run_many(ckpt, plans, [t.out for t in ts], force=force, jobs=jobs, progress=progress,
                        allow_nonfinite=allow_nonfinite, digest_names=names)
        return [ConvertResult(p, r.path, r.seconds, r.tensors, r.shared) for p, r in zip(plans, runs)]


def _check_output(source: str | os.PathLike, out: str | os.PathLike, force: bool) -> None:
    """The bundle may not be, contain or lie inside the source; ``--force`` replaces only a bundle."""
    from ..formats import guard

    guard.check_disjoint(source, out, "the source checkpoint", "the bundle")
    if force:
        guard.check_replaceable_bundle(out)


def to_gguf(source: str | os.PathLike, out: str | os.PathLike | None = None, outtype: Optional[str] = None,
            quant: Optional[str] = None, mix_options=None, dry_run: bool = False, force: bool = False,
            jobs: Optional[int] = None):
    """Write the GGUF llama.cpp's tools write (see ``convert/gguf_out.py``): from an HF folder what
    ``convert_hf_to_gguf.py --outtype OUTTYPE`` writes, then, with ``quant`` (a llama.cpp mix,
    ``Q4_K_M``), what ``llama_model_quantize`` writes from it; from a GGUF file what
    ``llama_model_quantize --allow-requantize`` writes for ``quant``. ``outtype``: f32, f16, bf16,
    q8_0 or auto (the default: llama.cpp's auto without a mix; with one, the source's own float
    type, so nothing is rounded before the quantizer). Returns a ``GGUFResult`` (its ledger says
    what each tensor became and why)."""
    from . import gguf_out

    if out is not None and not dry_run:
        _check_gguf_output(source, out, force)
    with open_checkpoint(source) as ckpt:
        if ckpt.kind == "gguf":
            if outtype not in (None, "auto"):
                from ..formats.errors import BadInputError

                raise BadInputError("--outtype applies to HF sources; a GGUF source is re-quantized with --quant")
            p = gguf_out.plan_gguf(ckpt, quant, mix_options)
        elif ckpt.kind == "hf":
            p = gguf_out.plan_hf(ckpt, outtype, quant, mix_options)
        else:
            from ..formats.errors import BadInputError

            raise BadInputError("GGUF output reads an HF folder (config.json, weights, tokenizer) or a GGUF file",
                                path=source)
        if dry_run:
            return gguf_out.GGUFResult(p, None)
        if out is None:
            from ..formats.errors import BadInputError

            raise BadInputError("an output path is needed (-o model.gguf) unless --dry-run")
        return gguf_out.write(p, out, force=force, jobs=jobs)


def _check_gguf_output(source: str | os.PathLike, out: str | os.PathLike, force: bool) -> None:
    from ..formats import atomic, guard

    guard.check_disjoint(source, out, "the source checkpoint", "the GGUF")
    atomic.check_target(out, force)


def export(bundle: str | os.PathLike, out: str | os.PathLike, force: bool = False):
    """Write a bundle as a GGUF: a GGUF-sourced one back to its source byte for byte, any other as the
    GGUF of the blocks it holds (see ``gguf_export.export_gguf``)."""
    from .gguf_export import export_gguf

    return export_gguf(bundle, out, force=force)


class _ConvertPackage(types.ModuleType):
    """``panelpack.convert(...)`` is :func:`convert`: the subpackage and the front-door
    function share the name, so calling the package runs the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> ConvertResult:
        return convert(*args, **kwargs)


sys.modules[__name__].__class__ = _ConvertPackage
