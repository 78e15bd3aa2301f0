"""Planning: every tensor's action, type, layout, regions and ledger, from metadata only.

``make_plan`` reads the checkpoint's tensor table (never its data), applies the policy and
asks each layout for its region plan, so ``--dry-run`` costs milliseconds and shows exactly
what a real run will write.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from .. import repack
from ..formats import qtypes
from ..formats.bundle import check_tensor_name, dtype_name, layout_regions, tensor_file_name
from ..formats.common import Checkpoint, TensorInfo
from ..formats.errors import BadInputError
from . import mixes, policy

log = logging.getLogger(__name__)


@dataclass
class TensorPlan:
    index: int
    info: TensorInfo
    decision: policy.Decision
    requested: str
    regions: list  # [(name, dtype name, shape)]
    bytes_out: int
    params: dict[str, Any] = field(default_factory=dict)
    importance: Any = None  # --imatrix: the importance row (f32[k]) this tensor is quantized with

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def ledger(self) -> dict[str, Any]:
        led = {"requested": self.requested, "written": self.decision.layout, "reason": self.decision.reason}
        if self.decision.rule:
            led["rule"] = self.decision.rule
        if "code_form" in self.params:  # which code form the layout gave it (panel64: nibble/int8, compact)
            led["code_form"] = self.params["code_form"]
        return led

    def to_json(self) -> dict[str, Any]:
        d = self.decision
        return {
            "name": self.name,
            "shape": list(self.info.shape),
            "source_type": self.info.type.name,
            "type": d.target_type.name,
            "role": d.role,
            "action": d.action,
            "layout": d.layout,
            "bytes_in": self.info.nbytes,
            "bytes_out": self.bytes_out,
            "file": tensor_file_name(self.index, self.name),
            "ledger": self.ledger,
        }


@dataclass
class Plan:
    source_kind: str
    source_path: str
    layout: str
    quant: Optional[qtypes.GGMLType]
    requant: Optional[qtypes.GGMLType]
    tensors: list[TensorPlan]
    mix: Optional[str] = None  # --quant MIX: the llama.cpp file type (Q4_K_M, ...)
    imatrix: Any = None  # --imatrix: the loaded formats.imatrix.Imatrix
    warnings: list[str] = field(default_factory=list)
    code_form: Optional[str] = None  # the requested layout's code-form option (repack.CODE_FORMS), if it has one

    @property
    def bytes_in(self) -> int:
        return sum(t.info.nbytes for t in self.tensors)

    @property
    def bytes_out(self) -> int:
        return sum(t.bytes_out for t in self.tensors)

    def layout_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.decision.layout] = out.get(t.decision.layout, 0) + 1
        return out

    def fallbacks(self) -> list[TensorPlan]:
        """Tensors not written in the requested layout (a re-quantized tensor in the requested
        layout has a reason in its ledger but is no fallback)."""
        return [t for t in self.tensors if t.decision.layout != t.requested]

    def to_json(self) -> dict[str, Any]:
        return {
            "source": {"kind": self.source_kind, "path": self.source_path},
            "layout": self.layout,
            **({"code_form": self.code_form} if self.code_form else {}),
            "quant": self.quant.name if self.quant else None,
            "requant": self.requant.name if self.requant else None,
            **({"mix": self.mix} if self.mix else {}),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "layouts": self.layout_counts(),
            "fallbacks": len(self.fallbacks()),
            "tensors": [t.to_json() for t in self.tensors],
        }


def region_plan(layout_name: str, qtype: qtypes.GGMLType, info: TensorInfo) -> tuple[list, dict]:
    """``[(region, dtype name, shape)]`` and params of ``info`` written as ``qtype`` in a layout."""
    lay = repack.get(layout_name)
    specs = [(r.name, dtype_name(r.dtype), tuple(r.shape)) for r in lay.plan(qtype, info.n, info.k)]
    return specs, lay.params(qtype, info.n, info.k)


def make_plan(ckpt: Checkpoint, layout: str = "panel64", quant: Optional[str] = None,
              requant: Optional[str] = None, include: Sequence[str] = (), exclude: Sequence[str] = (),
              mix_options: Optional[mixes.Options] = None) -> Plan:
    req = repack.request(layout)  # unknown layout or form -> UnsupportedError listing the known ones
    layout = req.layout
    _check_hyperparameters(ckpt)
    if quant is not None and mixes.get_mix(quant) is not None:
        return make_mix_plan(ckpt, str(req), quant, requant, include, exclude, mix_options)
    if mix_options is not None and mix_options != mixes.Options():
        raise BadInputError("--pure, --tensor-type, --output-tensor-type, --token-embedding-type, --imatrix and "
                            f"--leave-output-tensor need a llama.cpp mix as --quant ({', '.join(mixes.MIXES)})")
    qt = policy.parse_quant(quant, "--quant")
    rq = policy.parse_quant(requant, "--requant")
    if ckpt.kind == "gguf" and qt is not None:
        raise BadInputError("--quant applies to float (HF/safetensors) sources; for GGUF use --requant")
    if ckpt.kind != "gguf" and rq is not None:
        raise BadInputError("--requant applies to GGUF sources; for HF/safetensors use --quant")
    if ckpt.kind != "gguf" and qt is None and layout != "rowmajor":
        raise BadInputError(f"{ckpt.path}: a float checkpoint needs --quant (q4_0, q4_k or q8_0) for the "
                            f"{layout} layout (or --layout rowmajor to copy it as stored)")
    infos = policy.select(ckpt.tensors, include, exclude)
    tensors = []
    for i, info in enumerate(infos):
        check_tensor_name(info.name, where=f"{ckpt.path}: tensor")
        d, requested = in_form(policy.decide(info, ckpt.kind, layout, qt, rq), req)
        specs, params = region_plan(d.layout, d.target_type, info)
        _, size = layout_regions(specs)
        tensors.append(TensorPlan(i, info, d, requested, specs, size, params))
    out = Plan(ckpt.kind, ckpt.path, layout, qt, rq, tensors, code_form=req.code_form)
    if rq is not None and not any(t.decision.action in ("requantize", "quantize") for t in tensors):
        out.warnings.append(f"--requant {rq.name} changes nothing: the {layout} layout takes every "
                            "quantized matrix as stored (a llama.cpp mix as --quant re-quantizes them all)")
        log.warning("%s", out.warnings[-1])
    return out


def make_mix_plan(ckpt: Checkpoint, layout: str, quant: str, requant: Optional[str], include: Sequence[str],
                  exclude: Sequence[str], mix_options: Optional[mixes.Options]) -> Plan:
    """``--quant MIX``: llama.cpp's type for every tensor (its rules, see ``mixes``), then the
    layout. GGUF sources are dequantized and re-quantized where the type changes."""
    if requant is not None:
        raise BadInputError(f"--requant and --quant {quant} do not combine: the mix chooses every type")
    req = repack.request(layout)
    layout = req.layout
    imx = None
    if mix_options is not None and mix_options.imatrix:
        from ..formats import imatrix as imatrix_file

        imx = imatrix_file.load(mix_options.imatrix)
    choices = mixes.plan_choices(ckpt, ckpt.tensors, quant, mix_options, has_imatrix=imx is not None)
    facts = mixes.model_facts(ckpt) if imx is not None else None
    tensors = []
    for i, info in enumerate(policy.select(ckpt.tensors, include, exclude)):
        check_tensor_name(info.name, where=f"{ckpt.path}: tensor")
        d, requested = in_form(mixes.decide(info, choices[info.name], layout), req)
        specs, params = region_plan(d.layout, d.target_type, info)
        _, size = layout_regions(specs)
        tp = TensorPlan(i, info, d, requested, specs, size, params)
        tp.importance = mixes.importance(imx, info, ckpt.kind, d, facts)
        tensors.append(tp)
    mix = mixes.get_mix(quant)
    assert mix is not None  # (plan_choices refused any other name)
    return Plan(ckpt.kind, ckpt.path, layout, None, None, tensors, mix=mix.name, imatrix=imx,
                code_form=req.code_form)


def in_form(d: policy.Decision, req: repack.Request) -> tuple[policy.Decision, str]:
    """The decision in the layout the request's code form gives its type (``repack.written``:
    ``panel64`` -> ``panel64-compact`` for a type with a compact form), and that layout as the
    one requested for the tensor (so a tensor kept row-major is still a fallback, and one in
    the form asked for is none)."""
    requested = repack.written(req, d.target_type)
    if d.layout == req.layout and requested != d.layout:
        d = dataclasses.replace(d, layout=requested)
    return d, requested


def _check_hyperparameters(ckpt: Checkpoint) -> None:
    """A bundle records the checkpoint's hyperparameters: refuse ones that are out of range or
    contradict the tensors (formats/hparams.py)."""
    from ..formats import hparams

    probs = hparams.check_checkpoint(ckpt)
    if probs:
        raise BadInputError(f"hyperparameters out of range or in conflict with the tensors: {'; '.join(probs)}",
                            path=ckpt.path)
