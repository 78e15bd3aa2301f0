"""ggml-x8: the 8-row interleaved blocks llama.cpp's CPU backend builds at load time on x86
(AVX2 and up), byte for byte: ``block_q4_0x8`` (kernel ``q4_0_8x8_q8_0``) and
``block_q4_Kx8`` (``q4_K_8x8_q8_K``), both with an interleave of 8 bytes.

Rows are taken in super-rows of 8 (``sr``; row ``8sr + r``); N % 8 == 0 is required. One
region ``blocks``, ordered [sr][block], the same total size as the source.

Q4_0 (block ``b`` of 32, 144 bytes per (sr, b))::

    byte   0 ..  15   d[r], r = 0..7             f16 of row 8sr+r, unchanged
    byte  16 .. 143   qs[128]:  qs[64h + 8r + i] = row_r.qs[8h + i] ^ 0x88   (h 0..1, i 0..7)

    i.e. 16 runs of 8 bytes: run (h, r) = 8 source qs bytes of row r; the XOR flips bit 3 of
    each nibble, turning the offset-binary code u into the two's-complement int4 u - 8.

Q4_K (super-block ``j`` of 256, 1152 bytes per (sr, j))::

    byte    0 ..   15   d[r]      f16
    byte   16 ..   31   dmin[r]   f16
    byte   32 ..  127   scales: 8 groups of 12 bytes; group s holds sub-block s of all 8
                        rows, packed with the Q4_K 12-byte rule whose 8 slots are the rows:
                          g[r]   (r<4) = sc_r | (sc_{r+4} >> 4) << 6
                          g[4+r] (r<4) = m_r  | (m_{r+4}  >> 4) << 6
                          g[8+r] (r<4) = (sc_{r+4} & 15) | (m_{r+4} & 15) << 4
                        (sc_r, m_r = the 6-bit scale and min of sub-block s of row r)
    byte  128 .. 1151   qs[1024]: qs[64h + 8r + i] = row_r.qs[8h + i]   (h 0..15, no XOR)

Invertible for both types (every bit of the source is kept).
"""

from __future__ import annotations

import numpy as np

from ..formats import qtypes
from . import _common as C

NAME = "ggml-x8"
SOURCE_TYPES = frozenset({qtypes.Q4_0, qtypes.Q4_K})
ROW_MULTIPLE = 8
TARGET = {"isa": "x86-avx2", "runtime": "llama.cpp CPU repack", "interleave_bytes": 8}
DESCRIPTION = "llama.cpp block_q4_0x8 / block_q4_Kx8 (8 rows, 8-byte interleave), as built at load time"
XOR_Q4_0 = 0x88
_KERNEL_NAMES = {"Q4_0": "q4_0_8x8_q8_0", "Q4_K": "q4_K_8x8_q8_K"}
_BYTES = {t.name: ROW_MULTIPLE * t.type_size for t in SOURCE_TYPES}  # bytes per (sr, block) = 8 source blocks


refuse = C.layout_refuse(NAME, SOURCE_TYPES, ROW_MULTIPLE)
invertible = C.invertible_for(SOURCE_TYPES)


def plan(qtype, n: int, k: int) -> list[C.RegionSpec]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    return [C.region("blocks", "uint8", (n // 8, k // t.block_size, _BYTES[t.name]))]


def params(qtype, n: int, k: int) -> dict:
    t = C.accepted(NAME, refuse, qtype, n, k)
    p = {"layout": NAME, "type": t.name, "n": n, "k": k, "rows_interleaved": 8, "interleave_bytes": 8,
         "block_bytes": _BYTES[t.name], "llama_cpp_kernel": _KERNEL_NAMES[t.name], "invertible": True}
    if t.name == "Q4_0":
        p["xor"] = XOR_Q4_0
    return p


#: (type, direction) -> (the kernel on 64-bit words, the bytewise one for rows of blocks that are
#: not whole words, or None when every row is)
_KERNELS = {
    ("Q4_0", "pack"): ("_q4_0_x8_pack_w", "_q4_0_x8_pack_b"),
    ("Q4_0", "unpack"): ("_q4_0_x8_unpack_w", "_q4_0_x8_unpack_b"),
    ("Q4_K", "pack"): ("_q4_k_x8_pack", None),
    ("Q4_K", "unpack"): ("_q4_k_x8_unpack", None),
}


def _run(direction: str, t, n: int, k: int, src: np.ndarray, dst: np.ndarray) -> None:
    words, bytewise = _KERNELS[t.name, direction]
    nb = k // t.block_size
    if bytewise is not None and nb % 4:  # Q4_0 rows of 18-byte blocks are whole words every 4 blocks
        getattr(_k(), bytewise)(src.reshape(-1), n, nb, dst.reshape(-1))
        return
    w_out, finish = C.aligned_out(dst)
    getattr(_k(), words)(C.aligned_words(src), n, nb, w_out)
    finish()


def pack(blocks, n: int, k: int, qtype, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_blocks(NAME, blocks, t, n, k)
    regions = C.out_regions(NAME, out, plan(t, n, k))
    _run("pack", t, n, k, raw, regions["blocks"])
    return regions


def unpack(regions, n: int, k: int, qtype, out: np.ndarray | None = None) -> np.ndarray:
    t = C.accepted(NAME, refuse, qtype, n, k)
    src = C.as_regions(NAME, regions, plan(t, n, k))["blocks"]
    raw = C.out_blocks(NAME, out, t, n, k)
    _run("unpack", t, n, k, src, raw)
    return raw


def dequantize(regions, n: int, k: int, qtype) -> np.ndarray:
    """f32 [n, k] read from the interleaved blocks (int4 two's complement for Q4_0)."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    x = C.as_regions(NAME, regions, plan(t, n, k))["blocks"]
    sr = n // 8
    if t.name == "Q4_0":
        nb = k // 32
        d = x[..., :16].copy().view(np.uint16).reshape(sr, nb, 8).transpose(0, 2, 1).reshape(n, nb)
        qs = (x[..., 16:].reshape(sr, nb, 2, 8, 8).transpose(0, 3, 1, 2, 4).reshape(sr, 8, nb, 16))
        lo = (qs & 15).astype(np.int16)
        hi = (qs >> 4).astype(np.int16)
        nib = np.concatenate([lo, hi], axis=-1)  # element e: low nibble of qs[e], then high of qs[e-16]
        c = (nib - ((nib & 8) << 1)).reshape(n, k)  # sign-extend the int4
        return C.dequant_integer_form(c, C.f16_bits_to_f32(d))
    nsb = k // 256
    d = x[..., 0:16].copy().view(np.uint16).reshape(sr, nsb, 8).transpose(0, 2, 1).reshape(n, nsb)
    dmin = x[..., 16:32].copy().view(np.uint16).reshape(sr, nsb, 8).transpose(0, 2, 1).reshape(n, nsb)
    sc_rows, m_rows = C.unpack_scales12(x[..., 32:128].reshape(sr, nsb, 8, 12))  # [sr, nsb, s, r]
    sc = sc_rows.transpose(0, 3, 1, 2).reshape(n, nsb * 8)
    m = m_rows.transpose(0, 3, 1, 2).reshape(n, nsb * 8)
    qs = x[..., 128:].reshape(sr, nsb, 16, 8, 8).transpose(0, 3, 1, 2, 4).reshape(sr, 8, nsb, 4, 1, 32)
    q = np.concatenate([qs & 15, qs >> 4], axis=-2).reshape(n, k).astype(np.int16)
    return C.dequant_from_fields(t, q, {"d": d, "dmin": dmin, "sc": sc, "m": m})


# ---- numpy reference (a direct transcription of the diagram above) ---------------------------
def pack_ref(blocks, n: int, k: int, qtype) -> dict[str, np.ndarray]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_blocks(NAME, blocks, t, n, k)
    sr, nb = n // 8, k // t.block_size
    b = raw.reshape(sr, 8, nb, t.type_size)
    out = np.empty((sr, nb, _BYTES[t.name]), np.uint8)
    if t.name == "Q4_0":
        out[..., :16] = b[..., 0:2].transpose(0, 2, 1, 3).reshape(sr, nb, 16)
        qs = b[..., 2:18].reshape(sr, 8, nb, 2, 8).transpose(0, 2, 3, 1, 4)  # [sr, nb, h, r, i]
        out[..., 16:] = qs.reshape(sr, nb, 128) ^ np.uint8(XOR_Q4_0)
    else:
        out[..., 0:16] = b[..., 0:2].transpose(0, 2, 1, 3).reshape(sr, nb, 16)
        out[..., 16:32] = b[..., 2:4].transpose(0, 2, 1, 3).reshape(sr, nb, 16)
        sc, m = C.unpack_scales12(b[..., 4:16])  # [sr, r, nb, s]
        out[..., 32:128] = C.pack_scales12(sc.transpose(0, 2, 3, 1), m.transpose(0, 2, 3, 1)).reshape(sr, nb, 96)
        qs = b[..., 16:144].reshape(sr, 8, nb, 16, 8).transpose(0, 2, 3, 1, 4)  # [sr, nb, h, r, i]
        out[..., 128:] = qs.reshape(sr, nb, 1024)
    return {"blocks": out}


def unpack_ref(regions, n: int, k: int, qtype) -> np.ndarray:
    t = C.accepted(NAME, refuse, qtype, n, k)
    x = C.as_regions(NAME, regions, plan(t, n, k))["blocks"]
    sr, nb = n // 8, k // t.block_size
    b = np.empty((sr, 8, nb, t.type_size), np.uint8)
    if t.name == "Q4_0":
        b[..., 0:2] = x[..., :16].reshape(sr, nb, 8, 2).transpose(0, 2, 1, 3)
        qs = (x[..., 16:] ^ np.uint8(XOR_Q4_0)).reshape(sr, nb, 2, 8, 8).transpose(0, 3, 1, 2, 4)
        b[..., 2:18] = qs.reshape(sr, 8, nb, 16)
    else:
        b[..., 0:2] = x[..., 0:16].reshape(sr, nb, 8, 2).transpose(0, 2, 1, 3)
        b[..., 2:4] = x[..., 16:32].reshape(sr, nb, 8, 2).transpose(0, 2, 1, 3)
        sc, m = C.unpack_scales12(x[..., 32:128].reshape(sr, nb, 8, 12))  # [sr, nb, s, r]
        b[..., 4:16] = C.pack_scales12(sc.transpose(0, 3, 1, 2), m.transpose(0, 3, 1, 2))
        b[..., 16:144] = x[..., 128:].reshape(sr, nb, 16, 8, 8).transpose(0, 3, 1, 2, 4).reshape(sr, 8, nb, 128)
    return b.reshape(n, t.row_bytes(k))


def _k():
    from . import _ggml_x8_kernels

    return _ggml_x8_kernels

