"""il8-int8: the seed CPU backend's aarch64 8-row interleaved Q4_0 form, codes widened to int8.

Super-rows of 8 (``sr``, rows ``8sr .. 8sr+7``); N % 8 == 0 is required, nothing is padded.
K in 32-element blocks ``b`` (``nb = K/32``).

Region ``qs`` int8 [N/8][nb][256], 256 bytes per (sr, b), the signed code u - 8::

    byte 32g + 16h + 4r + c   (g = 0..7, h = 0..1, r = 0..3, c = 0..3)
        = u - 8 of row 8sr + 4h + r, element 4g + c of block b

      g: |<------------------------- 32 bytes ------------------------->|
         | h=0: rows 0,1,2,3 (4 elements each) | h=1: rows 4,5,6,7      |

Region ``scales`` float32 [N/8][nb][8] = f32(d) of row 8sr + r (exact); value = scales * code.
Invertible: u = code + 8 and d = the f16 whose widening is the stored f32.
"""

from __future__ import annotations

import numpy as np

from ..formats import qtypes
from ..formats.errors import BadInputError
from . import _common as C

NAME = "il8-int8"
SOURCE_TYPES = frozenset({qtypes.Q4_0})
ROW_MULTIPLE = 8
TARGET = {"isa": "aarch64-neon", "runtime": "seed CPU backend, 8-row interleaved Q4_0 GEMM (aarch64 form)"}
DESCRIPTION = "8-row interleaved int8 codes (u-8) + f32 scales (seed aarch64 form)"


refuse = C.layout_refuse(NAME, SOURCE_TYPES, ROW_MULTIPLE)
invertible = C.invertible_for(SOURCE_TYPES)


def plan(qtype, n: int, k: int) -> list[C.RegionSpec]:
    C.accepted(NAME, refuse, qtype, n, k)
    sr, nb = n // 8, k // 32
    return [C.region("qs", "int8", (sr, nb, 256)), C.region("scales", "float32", (sr, nb, 8))]


def params(qtype, n: int, k: int) -> dict:
    t = C.accepted(NAME, refuse, qtype, n, k)
    return {"layout": NAME, "type": t.name, "n": n, "k": k, "rows_interleaved": 8, "group_size": 32,
            "code_form": "int8", "code_offset": t.code_offset, "scale_form": "f32(d)", "invertible": True}


def interleave(c: np.ndarray, n: int, nb: int) -> np.ndarray:
    """signed codes int8 [n, nb, 32] -> int8 [n/8, nb, 256]."""
    x = c.reshape(n // 8, 2, 4, nb, 8, 4).transpose(0, 3, 4, 1, 2, 5)  # [sr, b, g, h, r, c]
    return np.ascontiguousarray(x.reshape(n // 8, nb, 256))


def deinterleave(codes: np.ndarray, n: int, nb: int) -> np.ndarray:
    x = codes.reshape(n // 8, nb, 8, 2, 4, 4).transpose(0, 3, 4, 1, 2, 5)  # [sr, h, r, b, g, c]
    return np.ascontiguousarray(x.reshape(n, nb, 32))


def pack(blocks, n: int, k: int, qtype, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_blocks(NAME, blocks, t, n, k).reshape(-1)
    regions = C.out_regions(NAME, out, plan(t, n, k))
    _k()._int8_q4_0_pack(raw, n, k // 32, C.F16_TO_F32.view(np.uint32), regions["qs"].reshape(-1).view(np.uint32),
                         regions["scales"].reshape(-1).view(np.uint32))  # the f32 scales written as their bits
    return regions


def pack_ref(blocks, n: int, k: int, qtype) -> dict[str, np.ndarray]:
    """numpy reference of :func:`pack`."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_blocks(NAME, blocks, t, n, k)
    regions = C.out_regions(NAME, None, plan(t, n, k))
    u, d = C.q4_0_split(raw, n, k)
    regions["qs"][...] = interleave((u.astype(np.int8) - np.int8(8)), n, k // 32)
    regions["scales"][...] = np.ascontiguousarray(C.f16_bits_to_f32(d).reshape(n // 8, 8, -1).transpose(0, 2, 1))
    return regions


def _checked(t, n, k, regions):
    r = C.as_regions(NAME, regions, plan(t, n, k))
    q = r["qs"]
    if q.size and (q.min() < -8 or q.max() > 7):
        raise BadInputError(f"layout {NAME}: region 'qs' holds values outside -8..7 (not a Q4_0 code)")
    return r, C.f32_to_f16_bits_exact(r["scales"], f"layout {NAME}: region 'scales'")


def unpack(regions, n: int, k: int, qtype, out: np.ndarray | None = None) -> np.ndarray:
    t = C.accepted(NAME, refuse, qtype, n, k)
    r = C.as_regions(NAME, regions, plan(t, n, k))
    d = C.f32_to_f16_bits_fast(r["scales"], f"layout {NAME}: region 'scales'")
    raw = C.out_blocks(NAME, out, t, n, k)
    if _k()._int8_q4_0_unpack(r["qs"].reshape(-1).view(np.uint32), d.reshape(-1).view(np.uint8), n, k // 32,
                              raw.reshape(-1)):
        _checked(t, n, k, regions)  # raises, naming the codes outside -8..7 (``raw`` is then partly written)
    return raw


def unpack_ref(regions, n: int, k: int, qtype) -> np.ndarray:
    t = C.accepted(NAME, refuse, qtype, n, k)
    r, d = _checked(t, n, k, regions)
    u = (deinterleave(r["qs"], n, k // 32).astype(np.int16) + 8).astype(np.uint8)
    return C.q4_0_join(u, np.ascontiguousarray(d.transpose(0, 2, 1).reshape(n, -1)), n, k)


def dequantize(regions, n: int, k: int, qtype) -> np.ndarray:
    C.accepted(NAME, refuse, qtype, n, k)
    r = C.as_regions(NAME, regions, plan(qtype, n, k))
    c = deinterleave(r["qs"], n, k // 32).reshape(n, k).astype(np.int16)
    scales = np.ascontiguousarray(r["scales"].transpose(0, 2, 1).reshape(n, -1))
    return C.dequant_integer_form(c, scales)


def _k():
    from . import _il8_kernels

    return _il8_kernels
