"""il8-nibble: the seed CPU backend's x86 8-row interleaved 4-bit form (Q4_0 and Q4_K).

Rows are grouped in super-rows of 8 (``sr``, rows ``8sr .. 8sr+7``); N % 8 == 0 is required
and nothing is padded. K runs in 32-element blocks ``b`` (``nb = K/32``; for Q4_K these are
the sub-blocks, block ``b`` = sub-block ``b % 8`` of super-block ``b // 8``).

Region ``qs`` uint8 [N/8][nb][128], 128 bytes per (sr, b), the raw 4-bit codes u::

    byte 16g + i   (g = 0..7, i = 0..15):
        low  nibble = u of row 8sr + i//4,       element 4g + i%4 of block b
        high nibble = u of row 8sr + 4 + i//4,   same element

      g:  |<------------- 16 bytes ------------->|
          | i=0..3: rows 0|4 | i=4..7: rows 1|5 | i=8..11: rows 2|6 | i=12..15: rows 3|7 |
          each byte: (row r+4 code) << 4 | (row r code), at elements 4g, 4g+1, 4g+2, 4g+3

Q4_0: region ``scales`` float32 [N/8][nb][8] = f32(d) of row 8sr + r (exact: every f16 is
an f32), value = scales * (u - 8). Invertible (the f16 bits come back from the f32).

Q4_K: regions ``dsc`` and ``dmn`` float32 [N/8][nb][8] = f32(d)*f32(sc) and f32(dmin)*f32(m)
of row 8sr + r, sub-block b; value = dsc*u - dmn, which is exactly gguf-py's
``(d*sc)*q - (dmin*m)``. Not invertible: the products hide d, dmin and the 6-bit sc, m.
"""

from __future__ import annotations

import numpy as np

from ..formats import qtypes
from ..formats.errors import UnsupportedError
from . import _common as C

NAME = "il8-nibble"
SOURCE_TYPES = frozenset({qtypes.Q4_0, qtypes.Q4_K})
ROW_MULTIPLE = 8
TARGET = {"isa": "x86-avx2", "runtime": "seed CPU backend, 8-row interleaved Q4 GEMM (x86 form)"}
DESCRIPTION = "8-row interleaved nibbles + f32 scales (seed x86 form); Q4_K bakes d*sc, dmin*m"


refuse = C.layout_refuse(NAME, SOURCE_TYPES, ROW_MULTIPLE)
invertible = C.invertible_for(frozenset({qtypes.Q4_0}))


def plan(qtype, n: int, k: int) -> list[C.RegionSpec]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    sr, nb = n // 8, k // 32
    out = [C.region("qs", "uint8", (sr, nb, 128))]
    names = ("scales",) if t.name == "Q4_0" else ("dsc", "dmn")
    return out + [C.region(x, "float32", (sr, nb, 8)) for x in names]


def params(qtype, n: int, k: int) -> dict:
    t = C.accepted(NAME, refuse, qtype, n, k)
    return {"layout": NAME, "type": t.name, "n": n, "k": k, "rows_interleaved": 8, "group_size": 32,
            "code_form": "nibble", "code_offset": t.code_offset,
            "scale_form": "f32(d)" if t.name == "Q4_0" else "f32(d)*f32(sc), f32(dmin)*f32(m)",
            "invertible": invertible(t)}


def interleave(codes: np.ndarray, n: int, nb: int) -> np.ndarray:
    """codes uint8 [n, nb, 32] -> qs uint8 [n/8, nb, 128]."""
    x = codes.reshape(n // 8, 2, 4, nb, 8, 4).transpose(0, 3, 4, 1, 2, 5)  # [sr, b, g, half, r, c]
    return np.ascontiguousarray((x[:, :, :, 0] | (x[:, :, :, 1] << 4)).reshape(n // 8, nb, 128))


def deinterleave(nibbles: np.ndarray, n: int, nb: int) -> np.ndarray:
    """Inverse of :func:`interleave` -> codes uint8 [n, nb, 32]."""
    p = nibbles.reshape(n // 8, nb, 8, 1, 4, 4)
    x = np.concatenate([p & 15, p >> 4], axis=3)  # [sr, b, g, half, r, c]
    return np.ascontiguousarray(x.transpose(0, 3, 4, 1, 2, 5).reshape(n, nb, 32))


def _rows_to_sr(v: np.ndarray, n: int) -> np.ndarray:
    """per-row [n, nb] -> [n/8, nb, 8]."""
    return np.ascontiguousarray(v.reshape(n // 8, 8, -1).transpose(0, 2, 1))


def _sr_to_rows(v: np.ndarray, n: int) -> np.ndarray:
    return np.ascontiguousarray(v.transpose(0, 2, 1).reshape(n, -1))


def pack(blocks, n: int, k: int, qtype, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_blocks(NAME, blocks, t, n, k).reshape(-1)
    regions = C.out_regions(NAME, out, plan(t, n, k))
    q32 = regions["qs"].reshape(-1).view(np.uint32)
    if t.name == "Q4_0":
        _k()._nibble_q4_0_pack(raw, n, k // 32, C.F16_TO_F32.view(np.uint32), q32,
                               regions["scales"].reshape(-1).view(np.uint32))
    else:
        _k()._nibble_q4_k_pack(raw, n, k // 256, C.F16_TO_F32, q32, regions["dsc"].reshape(-1),
                               regions["dmn"].reshape(-1))
    return regions


def pack_ref(blocks, n: int, k: int, qtype) -> dict[str, np.ndarray]:
    """numpy reference of :func:`pack` (byte-level splits, reshapes and f32 products)."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_blocks(NAME, blocks, t, n, k)
    regions = C.out_regions(NAME, None, plan(t, n, k))
    nb = k // 32
    if t.name == "Q4_0":
        codes, d = C.q4_0_split(raw, n, k)
        regions["scales"][...] = _rows_to_sr(C.f16_bits_to_f32(d), n)
    else:
        f = C.q4_k_split(raw, n, k)
        codes = f["codes"]
        d = np.repeat(C.f16_bits_to_f32(f["d"]), 8, axis=1)
        dmin = np.repeat(C.f16_bits_to_f32(f["dmin"]), 8, axis=1)
        with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf d stay NaN/inf, as in the kernel
            regions["dsc"][...] = _rows_to_sr(d * f["sc"].astype(np.float32), n)
            regions["dmn"][...] = _rows_to_sr(dmin * f["m"].astype(np.float32), n)
    regions["qs"][...] = interleave(codes, n, nb)
    return regions


def unpack(regions, n: int, k: int, qtype, out: np.ndarray | None = None) -> np.ndarray:
    t = C.accepted(NAME, refuse, qtype, n, k)
    if not invertible(t):
        raise UnsupportedError(
            f"layout {NAME}: {t.name} is not invertible (dsc = d*sc and dmn = dmin*m hide the source's"
            " d, dmin and 6-bit scales); check it numerically with dequantize instead"
        )
    r = C.as_regions(NAME, regions, plan(t, n, k))
    raw = C.out_blocks(NAME, out, t, n, k)
    d = C.f32_to_f16_bits_fast(r["scales"], f"layout {NAME}: region 'scales'")
    _k()._nibble_q4_0_unpack(r["qs"].reshape(-1).view(np.uint32), d.reshape(-1).view(np.uint8), n, k // 32,
                             raw.reshape(-1))
    return raw


def unpack_ref(regions, n: int, k: int, qtype) -> np.ndarray:
    t = C.accepted(NAME, refuse, qtype, n, k)
    r = C.as_regions(NAME, regions, plan(t, n, k))
    d = C.f32_to_f16_bits_exact(_sr_to_rows(r["scales"], n), f"layout {NAME}: region 'scales'")
    return C.q4_0_join(deinterleave(r["qs"], n, k // 32), d, n, k)


def dequantize(regions, n: int, k: int, qtype) -> np.ndarray:
    t = C.accepted(NAME, refuse, qtype, n, k)
    r = C.as_regions(NAME, regions, plan(t, n, k))
    nb = k // 32
    u = deinterleave(r["qs"], n, nb).reshape(n, k).astype(np.int16)
    if t.name == "Q4_0":
        return C.dequant_integer_form(u - np.int16(8), _sr_to_rows(r["scales"], n))
    return C.dequant_integer_form(u, _sr_to_rows(r["dsc"], n), _sr_to_rows(r["dmn"], n), -1)


def _k():
    from . import _il8_kernels

    return _il8_kernels
