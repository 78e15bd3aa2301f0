"""What happens to each tensor: its role, its target type, its layout, and why.

The policy is a pure function of metadata (name, shape, type) and the options, so a dry run
plans the whole conversion without reading tensor data. Every decision that differs from what
was requested carries a reason, and the reason is written into the bundle's ledger.

Fallbacks (documented in docs/CONVERT.md):

======================================  ==============================================
tensor                                  what is written
======================================  ==============================================
1-D (norms, biases), scalars            copied as stored, ``rowmajor``
embedding lookups (token/position)      copied as stored (GGUF: same blocks), ``rowmajor``
convolution kernels (LFM2)              copied as stored, ``rowmajor`` (HF [d, 1, L] as
                                        3-D, GGUF [d, L] F32: never quantized, as llama.cpp)
3-D and larger                          copied as stored, ``rowmajor``
2-D float, HF, ``--quant T``            quantized to T, then the requested layout
  K not a multiple of T's block         T = Q4_K and K % 32 == 0: Q8_0 instead;
                                        otherwise copied as stored, ``rowmajor``
2-D quantized, GGUF                     repacked losslessly into the requested layout
  layout refuses the type               ``--requant T``: re-quantized to T (error reported);
                                        otherwise kept, ``rowmajor``
  layout refuses the shape (N % 8)      kept (or quantized), ``rowmajor``
======================================  ==============================================
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Optional, Sequence

from .. import repack
from ..formats import arch, qtypes
from ..formats.common import TensorInfo
from ..formats.errors import BadInputError, UnsupportedError

_FLOATS = (qtypes.F32, qtypes.F16, qtypes.BF16)

#: Options accepted for ``--quant`` (HF sources) and ``--requant`` (GGUF sources).
QUANT_CHOICES = tuple(t.lower for t in qtypes.QUANTIZABLE)


@dataclass(frozen=True)
class Decision:
    role: str  # "matmul", "embedding", "vector", "kernel", "tensor", "tower"
    action: str  # "repack", "quantize", "requantize", "copy"
    target_type: qtypes.GGMLType  # the type of the blocks written
    layout: str  # layout written
    reason: Optional[str]  # why the written layout/type differs from the request (None: as requested)
    rule: Optional[str] = None  # --quant MIX: the llama.cpp rule that chose the type, in words


#: why a vision/audio tower's tensor is kept as stored, whatever was asked (policy and mixes)
TOWER_KEPT = "vision/audio tower tensor: passed through as stored (panelpack runs text decoders only)"


def role_of(info: TensorInfo) -> str:
    if arch.is_tower(info.name):
        return "tower"
    if len(info.shape) <= 1:
        return "vector"
    if arch.is_embedding(info.name):
        return "embedding"
    if arch.is_conv_kernel(info.name):
        return "kernel"
    if len(info.shape) > 2:
        return "tensor"
    return "matmul"


def parse_quant(name: Optional[str], option: str) -> Optional[qtypes.GGMLType]:
    if name is None:
        return None
    t = qtypes.get(name)
    if t not in qtypes.QUANTIZABLE:
        raise UnsupportedError(f"{option} {name}: panelpack quantizes to {', '.join(QUANT_CHOICES)}")
    return t


def _k_fits(t: qtypes.GGMLType, k: int) -> bool:
    return k % t.block_size == 0


def _layout_or_rowmajor(layout_name: str, t: qtypes.GGMLType, n: int, k: int) -> tuple[str, Optional[str]]:
    lay = repack.get(layout_name)
    why = lay.refuse(t, n, k)
    if why is None:
        return layout_name, None
    return "rowmajor", why


def decide(info: TensorInfo, source_kind: str, layout: str, quant: Optional[qtypes.GGMLType],
           requant: Optional[qtypes.GGMLType]) -> Decision:
    """The decision for one tensor (pure; no data read)."""
    role = role_of(info)
    st = info.type
    if role != "matmul":
        why: str | None = {
            "vector": f"{len(info.shape)}-D tensor (norm, bias or scalar): kept as stored",
            "embedding": "embedding lookup: runtimes gather its rows, kept row-major as stored",
            "tower": TOWER_KEPT,
            "kernel": f"convolution kernel {list(info.shape)} (a few taps per channel, not a matrix product): "
                      f"kept as stored, row-major",
            "tensor": f"{len(info.shape)}-D tensor: panels are defined for 2-D matrices, kept as stored",
        }[role]
        return Decision(role, "copy", st, "rowmajor", None if layout == "rowmajor" else why)

    n, k = info.n, info.k
    if st.quantized:
        # GGUF-style quantized source: repack losslessly if the layout takes it.
        lay = repack.get(layout)
        why = lay.refuse(st, n, k)
        if why is None:
            return Decision(role, "repack", st, layout, None)
        if requant is not None and requant != st and _k_fits(requant, k) and repack.get(layout).refuse(requant, n, k) is None:
            return Decision(role, "requantize", requant, layout,
                            f"{why}; re-quantized {st.name} -> {requant.name} (--requant)")
        return Decision(role, "copy", st, "rowmajor", why)

    # A float matrix: quantize if asked (HF --quant, or GGUF --requant for float matrices).
    target = quant if source_kind != "gguf" else requant
    if st not in _FLOATS:
        why = None if layout == "rowmajor" else f"type {st.name} is not a float type panelpack quantizes: kept as stored"
        return Decision(role, "copy", st, "rowmajor", why)
    if target is None:
        reason = None if layout == "rowmajor" else f"{st.name} matrix and no quantization requested (--quant/--requant)"
        return Decision(role, "copy", st, "rowmajor", reason)
    notes = []
    if not _k_fits(target, k):
        if target == qtypes.Q4_K and k % qtypes.Q8_0.block_size == 0:
            notes.append(f"K={k} is not a multiple of 256 for Q4_K: quantized to Q8_0 instead")
            target = qtypes.Q8_0
        else:
            return Decision(role, "copy", st, "rowmajor",
                            f"K={k} is not a multiple of the {target.name} block size {target.block_size}: kept as stored")
    written, why = _layout_or_rowmajor(layout, target, n, k)
    if why:
        notes.append(why)
    return Decision(role, "quantize", target, written, "; ".join(notes) or None)


def select(infos: Sequence[TensorInfo], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[TensorInfo]:
    """Tensors matching any ``include`` glob (all when none given) and no ``exclude`` glob."""
    out = []
    for t in infos:
        if include and not any(fnmatch.fnmatchcase(t.name, g) for g in include):
            continue
        if any(fnmatch.fnmatchcase(t.name, g) for g in exclude):
            continue
        out.append(t)
    if not out:
        raise BadInputError("no tensor matches the --include/--exclude patterns")
    return out
