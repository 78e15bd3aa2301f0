"""rowmajor: the source bytes unchanged (the converter's fallback for every tensor).

    region "blocks": uint8 [N, row_bytes]
        row n = the N-th row of the source, exactly as the checkpoint stores it
        (row_bytes = K / block_size * type_size; K elements for F32/F16/BF16).

Accepts every type, including those panelpack cannot decode (they are copied, not read);
``dequantize`` needs a codec (or F32/F16/BF16).
"""

from __future__ import annotations

import numpy as np

from ..formats import qtypes
from ..formats.errors import UnsupportedError
from . import _common as C

NAME = "rowmajor"
SOURCE_TYPES = frozenset(qtypes.TYPES)
ROW_MULTIPLE = 1
TARGET = {"isa": "any"}
DESCRIPTION = "source rows unchanged (fallback; any type)"


def refuse(qtype, n, k) -> str | None:
    t = qtypes.get(qtype)
    return C.first_reason(C.shape_reason(n, k), C.k_reason(t, k))


def invertible(qtype) -> bool:
    qtypes.get(qtype)
    return True


def plan(qtype, n: int, k: int) -> list[C.RegionSpec]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    return [C.region("blocks", "uint8", (n, t.row_bytes(k)))]


def params(qtype, n: int, k: int) -> dict:
    t = C.accepted(NAME, refuse, qtype, n, k)
    return {"layout": NAME, "type": t.name, "n": n, "k": k, "row_bytes": t.row_bytes(k), "invertible": True}


def numpy_pack_kind(t) -> None:
    """Packing is a copy: free for a job that stays in numpy (formats/engine.py)."""
    return None


def pack(blocks, n: int, k: int, qtype, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_blocks(NAME, blocks, t, n, k)
    regions = C.out_regions(NAME, out, plan(t, n, k))
    np.copyto(regions["blocks"], raw)
    return regions


def unpack(regions, n: int, k: int, qtype, out: np.ndarray | None = None) -> np.ndarray:
    t = C.accepted(NAME, refuse, qtype, n, k)
    r = C.as_regions(NAME, regions, plan(t, n, k))
    raw = C.out_blocks(NAME, out, t, n, k)
    np.copyto(raw, r["blocks"])
    return raw


def dequantize(regions, n: int, k: int, qtype) -> np.ndarray:
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_regions(NAME, regions, plan(t, n, k))["blocks"]
    if t.codec is None:
        raise UnsupportedError(f"layout {NAME}: type {t.name} (id {t.id}) has no codec in panelpack")
    from ..formats import blocks as _blocks

    if hasattr(t.codec_module, "dequantize"):
        return _blocks.dequantize(raw, t, n, k)
    # codec without its fast kernel: the integer form and the standard formulas
    if not t.quantized:
        return C.plain_dequantize(t, raw, n, k)
    fields = C.codec_fields(t, raw, n, k)
    c = fields["codes"].astype(np.int16) - np.int16(t.code_offset)
    return C.dequant_from_fields(t, c, fields)
