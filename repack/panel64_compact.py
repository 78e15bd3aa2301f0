"""panel64-compact: panel64 with the 5-, 6-, 2- and 3-bit codes stored as bit planes (lossless).

Same geometry, scale regions, padding and channel order as ``panel64`` (panel64.py draws
them); only the code panels of Q5_0, Q5_1, Q5_K, Q6_K, Q2_K and Q3_K differ: instead of one
int8 byte a weight they hold ``bits`` bits a weight, as a **base plane** that one LUTI
instruction expands from ZT0 plus one **bit plane** per remaining code bit, loaded as an SVE
predicate and added where set. Q4_0/Q4_1/Q4_K (nibble panels) and Q8_0 (int8 panels) are
panel64's own forms unchanged. ``code_form`` in the manifest's params says which a tensor got
(``compact``, ``nibble`` or ``int8``); a ``panel64`` bundle (no compact forms) reads as before.

Per type (``u`` = stored code = ``c + code_offset``, ``c`` panel64's signed integer code)::

    type   bits  base plane (B bits)        bit planes    ZT0 entry i (byte 4i)   G
    Q5_0    5    u & 15   LUTI4 (2 regs)    bit 4         i - 16                  32
    Q5_1    5    u & 15   LUTI4 (2 regs)    bit 4         i                       32
    Q5_K    5    u & 15   LUTI4 (2 regs)    bit 4         i                       32
    Q6_K    6    u & 15   LUTI4 (2 regs)    bits 4, 5     i - 32                  16
    Q2_K    2    u & 3    LUTI2 (4 regs)    -             i                       16
    Q3_K    3    u & 3    LUTI2 (4 regs)    bit 2         i - 4                   16

Expanded value: ``c = ZT0[u & (2^B - 1)] + sum over planes p of 2^(B+p) * bit`` (int8 lanes,
never wrapping: each partial sum stays inside the type's code range), exactly the int8 panel
byte. Only the base table is in ZT0 (LUTI2 reads entries 0..3, LUTI4 entries 0..15; the low
byte of each 32-bit entry, C9.2.160/C9.2.162 ``Elem[table, index, 32]<esize-1:0>``).

**Group record** (region ``panels`` ``uint8 [SB][ng][GB]``, ``GB = kq * 32 * bits``, a multiple
of 64: Q5_x 1280, Q6_K 768, Q2_K 256, Q3_K 384), streamed in order by a GEMV/GEMM leaf::

    +-- base plane: kq kg-blocks of 32*B bytes --+-- plane 0: kq x 32 B --+-- plane 1 (Q6_K) --+
    | kg 0 | kg 1 | ...              | kg kq-1   | kg 0 | ... | kg kq-1 | kg 0 | ... | kg kq-1 |
    +--------------------------------------------+-------------------------+--------------------+

  base, B = 4 (128 B a kg-block): byte 2ch + j//2, nibble j%2 = u(ch, j) & 15: panel64's nibble
  panel, so LUTI4 {Zd1.B-Zd2.B} on bytes 0..63 gives vectors 0, 1 and on 64..127 vectors 2, 3;
  base, B = 2 (64 B a kg-block): byte ch = u(ch, 0..3) & 3 at bits 0, 2, 4, 6, so one
  LUTI2 {Zd1.B-Zd4.B} of the 64 bytes gives all four vectors (field 64r + e -> vector r, lane e);
  bit plane (32 B a kg-block): lane L = 4ch + j of the kg-block's 256 (vector L//64, its
  element L%64) at byte L//8, bit L%8: bytes 8v .. 8v+7 are vector v's predicate (LDR P).

Closed forms, weight (n, k) with ``ch = n % 64``, ``j = k % 4``, ``q = (k % G) // 4``,
``rec = ((n // 64) * ng + k // G) * GB``, ``BB = 32 * B``::

    base byte  = rec + q*BB + 2*ch + j//2,  shift 4*(j%2)       (B = 4)
               = rec + q*BB + ch,           shift 2*j           (B = 2)
    plane p    = rec + kq*BB + p*kq*32 + q*32 + (4*ch + j)//8,  bit (4*ch + j) % 8

Pad channels: stored code ``u = code_offset`` (c = 0): Q5_0 base nibble 0 and plane bit 1, Q6_K
nibble 0 and bits (0, 1), Q3_K crumb 0 and bit 1, the others all zero; pad scales 0.

A runtime per kg-block: ``ld1b`` the base bytes, ``luti4``/``luti2`` them into four vectors,
per plane ``ldr p`` four predicates and ``add z.b, p/m, z.b, splat(2^(B+p))``, then SDOT/SMOPA as
on int8 panels. Sizes: ``SB*64*K*bits/8`` code bytes, the source's code bytes plus padding.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..formats import qtypes
from . import _common as C
from . import panel64

NAME = "panel64-compact"
SOURCE_TYPES = panel64.SOURCE_TYPES
ROW_MULTIPLE = 1
TARGET = dict(panel64.TARGET)
DESCRIPTION = ("SME2 64-channel panels at SVL 512 with 5/6/2/3-bit codes as LUTI4/LUTI2 base planes plus "
               "predicate bit planes (panel64's nibble/int8 panels for the other types), lossless")
CHANNELS = panel64.CHANNELS
PLANE_KG_BYTES = 32  # one bit plane of a kg-block: 256 lanes, a 64-bit predicate per vector


class Form(NamedTuple):
    base_bits: int  # 4: LUTI4 (two registers), 2: LUTI2 (four registers)
    planes: int  # bit planes (code bits base_bits, base_bits + 1, ...)
    bits: int  # code bits (base_bits + planes)
    kq: int  # kg-blocks a group
    group_bytes: int  # GB, bytes of one group record


#: type -> bits of its base plane; the bit planes are the code's remaining bits. The one table
#: of which types have a compact form.
BASE_BITS = {qtypes.Q5_0: 4, qtypes.Q5_1: 4, qtypes.Q5_K: 4, qtypes.Q6_K: 4, qtypes.Q2_K: 2, qtypes.Q3_K: 2}
COMPACT_TYPES = frozenset(BASE_BITS)


def form(qtype) -> Form | None:
    """The compact form of ``qtype``, or None (a type panel64-compact stores as panel64 does)."""
    t = qtypes.get(qtype)
    base = BASE_BITS.get(t)
    if base is None:
        return None
    bits = int(t.code_bits or 0)
    kq = int(t.group or 0) // 4
    return Form(base, bits - base, bits, kq, kq * PLANE_KG_BYTES * bits)


def has_form(qtype) -> bool:
    """Whether ``qtype`` has a compact form (else this layout stores it as panel64 does, and
    ``--layout panel64`` writes it as ``panel64``: repack.CODE_FORMS)."""
    return form(qtype) is not None


def zt0_table(qtype) -> bytes:
    """The 64-byte ZT0 image of a compact type: byte 4i = int8 ``i - code_offset`` for the
    ``2^B`` base values, every other byte 0."""
    t = qtypes.get(qtype)
    f = form(t)
    assert f is not None, t.name
    z = np.zeros(64, np.uint8)
    z[0:4 << f.base_bits:4] = (np.arange(1 << f.base_bits) - t.code_offset).astype(np.int8).view(np.uint8)
    return z.tobytes()


# ---- the layout surface -------------------------------------------------------------------
def refuse(qtype, n, k) -> str | None:
    return panel64.refuse(qtype, n, k)


def invertible(qtype) -> bool:
    return panel64.invertible(qtype)


def plan(qtype, n: int, k: int) -> list[C.RegionSpec]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    base = panel64.plan(t, n, k)
    f = form(t)
    if f is None:
        return base
    geo = panel64.geometry(t, n, k)
    return [C.region("panels", "uint8", (geo.sb, geo.ng, f.group_bytes))] + base[1:]


def params(qtype, n: int, k: int) -> dict:
    t = C.accepted(NAME, refuse, qtype, n, k)
    p = panel64.params(t, n, k)
    p["layout"] = NAME
    f = form(t)
    if f is not None:
        p.update({"code_form": "compact", "code_bits": f.bits, "base_bits": f.base_bits,
                  "plane_bits": list(range(f.base_bits, f.bits)), "group_bytes": f.group_bytes,
                  "expand": "luti4" if f.base_bits == 4 else "luti2", "zt0": list(zt0_table(t))})
    return p


def pack(blocks, n: int, k: int, qtype, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Blocks uint8 [n, row_bytes] -> regions in plan order (written into ``out`` if given)."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    f = form(t)
    if f is None:
        return panel64.pack(blocks, n, k, t, out=out)
    raw = C.as_blocks(NAME, blocks, t, n, k)
    regions = C.out_regions(NAME, out, plan(t, n, k))
    if not C.prefer_jit(raw.nbytes, "repack_ref"):
        for name, a in pack_ref(raw, n, k, t).items():
            regions[name][...] = a
        return regions
    from . import _panel64_compact_kernels as K
    from . import _panel64_compact_q23 as Q23
    from . import _panel64_int8_kernels as I8

    if t.name in Q23.TYPES:  # GGUF bytes straight to records (no int8 pass)
        Q23.pack(raw, t, n, k, regions)
        return regions
    geo = panel64.geometry(t, n, k)
    for s0, s1, r0, r1 in _steps(geo, n, k):
        scratch = np.empty((s1 - s0, geo.ng, geo.kq, K.KG_INT8), np.int8)
        part = {name: (scratch if name == "panels" else a[s0:s1]) for name, a in regions.items()}
        I8.pack(raw[r0:r1], t, r1 - r0, k, part)
        panel64._fill_pads(part, t, r1 - r0)  # pad codes c = 0, pad scales 0
        K.pack_records(scratch.reshape(-1).view(np.uint8), (s1 - s0) * geo.ng, geo.kq, f.base_bits, f.planes,
                       t.code_offset, f.bits, regions["panels"][s0:s1].reshape(-1))
    return regions


def unpack(regions, n: int, k: int, qtype, out: np.ndarray | None = None) -> np.ndarray:
    """Regions -> the source blocks uint8 [n, row_bytes], byte for byte."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    f = form(t)
    if f is None:
        return panel64.unpack(regions, n, k, t, out=out)
    r = C.as_regions(NAME, regions, plan(t, n, k))
    raw = C.out_blocks(NAME, out, t, n, k)
    from . import _panel64_compact_kernels as K
    from . import _panel64_compact_q23 as Q23
    from . import _panel64_int8_kernels as I8

    if t.name in Q23.TYPES:
        Q23.unpack(r, t, n, k, raw)
        return raw
    geo = panel64.geometry(t, n, k)
    for s0, s1, r0, r1 in _steps(geo, n, k):
        scratch = np.empty((s1 - s0, geo.ng, geo.kq, K.KG_INT8), np.int8)
        K.unpack_records(np.ascontiguousarray(r["panels"][s0:s1]).reshape(-1), (s1 - s0) * geo.ng, geo.kq,
                         f.base_bits, f.planes, t.code_offset, scratch.reshape(-1).view(np.uint8))
        part = {name: (scratch if name == "panels" else np.ascontiguousarray(a[s0:s1])) for name, a in r.items()}
        I8.unpack(part, t, r1 - r0, k, raw[r0:r1])
    return raw


def dequantize(regions, n: int, k: int, qtype) -> np.ndarray:
    """f32 [n, k] read from the planes as a runtime would (ZT0 value of the base plus the
    planes' bits, times the group's scale, in the standard order)."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    if form(t) is None:
        return panel64.dequantize(regions, n, k, t)
    return panel64.dequantize(_as_int8_panels(C.as_regions(NAME, regions, plan(t, n, k)), t, n, k), n, k, t)


def _as_int8_panels(r: dict[str, np.ndarray], t, n: int, k: int) -> dict[str, np.ndarray]:
    """The regions with the group records expanded to panel64's int8 panels (the plane kernel;
    its numpy reference for a small tensor)."""
    from . import _panel64_compact_kernels as K

    f = form(t)
    assert f is not None, t.name
    geo = panel64.geometry(t, n, k)
    out = dict(r)
    if C.prefer_jit(r["panels"].nbytes, "repack_ref"):
        int8 = np.empty((geo.sb, geo.ng, geo.kq, K.KG_INT8), np.int8)
        K.unpack_records(np.ascontiguousarray(r["panels"]).reshape(-1), geo.sb * geo.ng, geo.kq, f.base_bits,
                         f.planes, t.code_offset, int8.reshape(-1).view(np.uint8))
    else:
        int8 = K.int8_ref(r["panels"], f.kq, f.base_bits, f.planes, t.code_offset, f.bits).reshape(
            geo.sb, geo.ng, geo.kq, K.KG_INT8)
    out["panels"] = int8
    return out


def signed_codes(panels: np.ndarray, n: int, k: int, qtype) -> np.ndarray:
    """int8 [n, k]: each weight's signed code read by the closed forms of the module doc
    (base byte and shift, plane byte and bit; the ZT0 table for the base value). Written apart
    from the packers: the verifier's independent reader."""
    t = qtypes.get(qtype)
    f = form(t)
    assert f is not None, t.name
    geo = panel64.geometry(t, n, k)
    p = np.asarray(panels).reshape(-1).view(np.uint8)
    nn = np.arange(n, dtype=np.int64)[:, None]
    kk = np.arange(k, dtype=np.int64)[None, :]
    ch, j, q = nn % 64, kk % 4, (kk % geo.g) // 4
    rec = ((nn // 64) * geo.ng + kk // geo.g) * f.group_bytes
    bb = 32 * f.base_bits
    if f.base_bits == 4:
        u = (p[rec + q * bb + 2 * ch + j // 2] >> (4 * (j % 2))) & 15
    else:
        u = (p[rec + q * bb + ch] >> (2 * j)) & 3
    table = np.frombuffer(zt0_table(t), np.int8)[0::4].astype(np.int16)
    c = table[u]
    lane = 4 * ch + j
    for pl in range(f.planes):
        byte = p[rec + f.kq * bb + pl * f.kq * PLANE_KG_BYTES + q * PLANE_KG_BYTES + lane // 8]
        c = c + (((byte >> (lane % 8)) & 1).astype(np.int16) << (f.base_bits + pl))
    return c.astype(np.int8)


def scale_fields(regions, n: int, qtype) -> dict[str, np.ndarray]:
    """The scale regions back in row order (panel64's, unchanged)."""
    return panel64.scale_fields(regions, n, qtype)


# ---- references (through panel64's int8 panels and the plane references) ------------------
def pack_ref(blocks, n: int, k: int, qtype) -> dict[str, np.ndarray]:
    """Reference packer: panel64's reference int8 panels, then the numpy plane reference."""
    from . import _panel64_compact_kernels as K

    t = C.accepted(NAME, refuse, qtype, n, k)
    f = form(t)
    out = panel64.pack_ref(blocks, n, k, t)
    if f is not None:
        out["panels"] = K.planes_ref(out["panels"], f.kq, f.base_bits, f.planes, t.code_offset, f.bits)
    return out


def unpack_ref(regions, n: int, k: int, qtype) -> np.ndarray:
    """Reference inverse of :func:`pack_ref`."""
    from . import _panel64_compact_kernels as K

    t = C.accepted(NAME, refuse, qtype, n, k)
    f = form(t)
    r = C.as_regions(NAME, regions, plan(t, n, k))
    if f is not None:
        geo = panel64.geometry(t, n, k)
        r = dict(r)
        r["panels"] = K.int8_ref(r["panels"], f.kq, f.base_bits, f.planes, t.code_offset, f.bits).reshape(
            geo.sb, geo.ng, geo.kq, K.KG_INT8)
    return panel64.unpack_ref(r, n, k, t)


_STEP_BYTES = 1 << 18  # int8 scratch per step: stays in L2 between the two passes


def _steps(geo: panel64.Geometry, n: int, k: int):
    """(first super-block, end super-block, first row, end row) of about _STEP_BYTES of int8 panels."""
    step = max(1, _STEP_BYTES // (CHANNELS * k))
    for s0 in range(0, geo.sb, step):
        s1 = min(geo.sb, s0 + step)
        yield s0, s1, s0 * CHANNELS, min(n, s1 * CHANNELS)


def numpy_pack_kind(t: qtypes.GGMLType) -> str:
    return panel64.numpy_pack_kind(t) if form(t) is None else "repack_ref"
