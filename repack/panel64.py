"""panel64: SME2 weight panels at a 512-bit streaming vector length (lossless, invertible).

Geometry (N output channels, K inputs; G = the type's scale group, 32, or 16 for Q6_K, Q3_K, Q2_K)::

    SB = ceil(N / 64) super-blocks of 64 channels; channels >= N are padding
    ng = K / G groups;   kq = G / 4 kg-blocks per group (4 consecutive K each)
    kg-blocks ordered [SB][ng][kq]; one kg-block = 4 K x 64 channels

Nibble panels (Q4_0, Q4_1, Q4_K: 4-bit codes, stored raw; ZT0 maps code -> int8), 128 B per
kg-block; channel c owns bytes 2c and 2c+1::

    byte 2c   = code(k0) | code(k1) << 4        k0..k3 = the kg-block's 4 K, in order
    byte 2c+1 = code(k2) | code(k3) << 4

      byte:  0        1        2        3            126      127
           +--------+--------+--------+--------+ ... +--------+--------+
           |k1|k0 c0|k3|k2 c0|k1|k0 c1|k3|k2 c1|     |k1|k0 63|k3|k2 63|   (high|low nibble)
           +--------+--------+--------+--------+ ... +--------+--------+

    weight (n, k):  byte  = (((n//64)*ng + k//G)*kq + (k%G)//4)*128 + 2*(n%64) + (k%4)//2
                    shift = 4*(k%2)

Int8 panels (Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, Q2_K, Q3_K), 256 B per kg-block, the signed integer
code ``c = code - code_offset`` of the standard dispatch (Q5_0 q-16, Q6_K q-32, Q3_K u-4, the
others q)::

    byte 4*ch + j = c(channel ch, K offset j)     (= 64v + 4*(ch%16) + j for ch = 16v + ch%16)
    weight (n, k):  byte  = (((n//64)*ng + k//G)*kq + (k%G)//4)*256 + 4*(n%64) + k%4

    Q2_K (c 0..3) and Q3_K (c -4..3) are int8 panels too, not nibble panels with a ZT0 table:
    nibble panels would be half the size (4 instead of 8 bits a weight), but every reader of
    panel64 (the verifier's compiled kernel, the SME2/NEON leaves, the AVX2 group dot) takes
    nibble panels as G = 32 4-bit types; as int8 panels these two run through the existing
    row kernels of the other int8 panels (_panel64_int8_kernels) and the int8 readers
    unchanged. A runtime expands them with ld1b, as Q5_x/Q6_K.

Scale regions, channel order inside each [64], source values unchanged (f16 as raw uint16)::

    Q4_0 Q5_0 Q8_0   d     uint16 [SB][ng][64]
    Q4_1 Q5_1        d, m  uint16 [SB][ng][64]
    Q4_K Q5_K        sc, m uint8  [SB][ng][64] (6-bit values)   d, dmin uint16 [SB][nsb][64]
    Q6_K             scale int8   [SB][ng][64] (G = 16)         d       uint16 [SB][nsb][64]
    Q2_K             sc, m uint8  [SB][ng][64] (4-bit, G = 16)  d, dmin uint16 [SB][nsb][64]
    Q3_K             sc    uint8  [SB][ng][64] (6-bit, value sc-32, G = 16)   d uint16 [SB][nsb][64]

Padding: nibble pad channels hold the code whose ZT0 value is 0 (Q4_0: 8, Q4_1/Q4_K: 0),
int8 pad channels 0, pad scales 0. ZT0 (``params()["zt0"]``, 64 bytes): byte 4i = int8 value
of code i (Q4_0 i-8, Q4_1/Q4_K i), the other bytes 0.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..formats import qtypes
from ..formats.errors import UnsupportedError
from . import _common as C

NAME = "panel64"
SOURCE_TYPES = frozenset({qtypes.Q4_0, qtypes.Q4_1, qtypes.Q4_K, qtypes.Q5_0, qtypes.Q5_1, qtypes.Q5_K, qtypes.Q6_K, qtypes.Q8_0,
                          qtypes.Q2_K, qtypes.Q3_K})
ROW_MULTIPLE = 1
TARGET = {"isa": "sme2", "svl_bits": 512}
DESCRIPTION = "SME2 64-channel panels at SVL 512 (LUTI4 nibble panels or int8 panels), lossless"
CHANNELS = 64
KG = 4  # consecutive K per kg-block
NIBBLE_KG_BYTES = CHANNELS * KG // 2  # 128: one nibble kg-block
INT8_KG_BYTES = CHANNELS * KG  # 256: one int8 kg-block

class Geometry(NamedTuple):
    g: int  # K per group
    ng: int  # groups along K
    kq: int  # kg-blocks per group (G/4)
    sb: int  # super-blocks of 64 channels
    np_: int  # padded N
    nsb: int  # 256-element super-blocks along K (K-quants), else 0
    nibble: bool  # 4-bit codes in LUTI4 nibble panels, else int8 panels


def geometry(qtype, n: int, k: int) -> Geometry:
    t = qtypes.get(qtype)
    if t.group is None:
        raise UnsupportedError(f"panel64: type {t.name} has no integer form")
    sb = -(-n // CHANNELS)
    return Geometry(t.group, k // t.group, t.group // 4, sb, sb * CHANNELS,
                    k // qtypes.QK_K if t.block_size == qtypes.QK_K else 0, t.code_bits == 4)


def zt0_table(qtype) -> bytes:
    """The 64-byte ZT0 table of a nibble type: byte 4i = int8 value of code i, others 0."""
    t = qtypes.get(qtype)
    z = np.zeros(64, np.uint8)
    z[0::4] = (np.arange(16) - t.code_offset).astype(np.int8).view(np.uint8)
    return z.tobytes()


def pad_code(qtype) -> int:
    """The stored code of a pad channel (its table/integer value is 0)."""
    t = qtypes.get(qtype)
    return t.code_offset if t.code_bits == 4 else 0


# ---- the layout surface -------------------------------------------------------------------
def refuse(qtype, n, k) -> str | None:
    t = qtypes.get(qtype)
    return C.first_reason(C.shape_reason(n, k), C.type_reason(t, NAME, SOURCE_TYPES), C.k_reason(t, k))


def invertible(qtype) -> bool:
    return qtypes.get(qtype) in SOURCE_TYPES


def plan(qtype, n: int, k: int) -> list[C.RegionSpec]:
    t = C.accepted(NAME, refuse, qtype, n, k)
    geo = geometry(t, n, k)
    if geo.nibble:
        out = [C.region("panels", "uint8", (geo.sb, geo.ng, geo.kq, NIBBLE_KG_BYTES))]
    else:
        out = [C.region("panels", "int8", (geo.sb, geo.ng, geo.kq, INT8_KG_BYTES))]
    for name, dtype, per in t.scale_fields:
        out.append(C.region(name, dtype, (geo.sb, geo.ng if per == "group" else geo.nsb, CHANNELS)))
    return out


def params(qtype, n: int, k: int) -> dict:
    t = C.accepted(NAME, refuse, qtype, n, k)
    geo = geometry(t, n, k)
    p = {
        "layout": NAME, "type": t.name, "n": n, "k": k, "svl_bits": 512, "channels": CHANNELS,
        "group_size": geo.g, "ng": geo.ng, "super_blocks": geo.sb, "padded_n": geo.np_,
        "code_form": "nibble" if geo.nibble else "int8",
        "code_offset": t.code_offset, "pad_code": pad_code(t), "invertible": True,
    }
    if geo.nsb:
        p["nsb"] = geo.nsb
    if geo.nibble:
        p["zt0"] = list(zt0_table(t))
    return p


def pack(blocks, n: int, k: int, qtype, out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Blocks uint8 [n, row_bytes] -> regions in plan order (written into ``out`` if given)."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_blocks(NAME, blocks, t, n, k)
    regions = C.out_regions(NAME, out, plan(t, n, k))
    fast = _FAST_PACK.get(t.name)
    plain = _NUMPY_PACK.get(t.name)
    if plain and not C.prefer_jit(raw.nbytes):
        plain(raw, t, n, k, regions)
    elif fast and C.prefer_jit(raw.nbytes, "repack_ref"):
        fast(raw, t, n, k, regions)
        _fill_pads(regions, t, n)
    else:
        for name, a in pack_ref(raw, n, k, t).items():
            regions[name][...] = a
    return regions


def unpack(regions, n: int, k: int, qtype, out: np.ndarray | None = None) -> np.ndarray:
    """Regions -> the source blocks uint8 [n, row_bytes], byte for byte."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    r = C.as_regions(NAME, regions, plan(t, n, k))
    raw = C.out_blocks(NAME, out, t, n, k)
    fast = _FAST_UNPACK.get(t.name)
    if fast:
        fast(r, t, n, k, raw)
    else:
        raw[...] = unpack_ref(r, n, k, t)
    return raw


def dequantize(regions, n: int, k: int, qtype) -> np.ndarray:
    """f32 [n, k] read from the panels as a runtime would: integer code (ZT0 value of the
    nibble, or the int8 byte) times the group's scale, in the standard order."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    r = C.as_regions(NAME, regions, plan(t, n, k))
    geo = geometry(t, n, k)
    if geo.nibble:
        table = np.frombuffer(zt0_table(t), np.int8)[0::4].astype(np.int16)
        codes = _codes_from_nibble_panels(r["panels"], geo, n, k)
        c = table[codes]
    else:
        c = _codes_from_int8_panels(r["panels"], geo, n, k).astype(np.int16)
    return C.dequant_from_fields(t, c, scale_fields(r, n, t))


def scale_fields(regions, n: int, qtype) -> dict[str, np.ndarray]:
    """The scale regions back in row order, ``[n, ng]`` or ``[n, nsb]`` each (codec field names)."""
    t = qtypes.get(qtype)
    return {name: _from_channel_order(regions[name], n) for name, _, _ in t.scale_fields}


# ---- numpy references (via the codec fields: obviously right, slow) -----------------------
def _to_channel_order(v: np.ndarray, geo: Geometry, dtype) -> np.ndarray:
    """[n, m] per-row values -> [SB, m, 64] (pad channels 0)."""
    n, m = v.shape
    full = np.zeros((geo.np_, m), dtype)
    full[:n] = v.view(dtype) if v.dtype.itemsize == np.dtype(dtype).itemsize else v
    return np.ascontiguousarray(full.reshape(geo.sb, CHANNELS, m).transpose(0, 2, 1))


def _from_channel_order(region: np.ndarray, n: int) -> np.ndarray:
    sb, m, ch = region.shape
    return np.ascontiguousarray(region.transpose(0, 2, 1).reshape(sb * ch, m)[:n])


def _codes_from_nibble_panels(panels: np.ndarray, geo: Geometry, n: int, k: int) -> np.ndarray:
    p = panels.reshape(geo.sb, geo.ng, geo.kq, CHANNELS, 2)
    x = np.empty((geo.sb, geo.ng, geo.kq, CHANNELS, 4), np.uint8)
    x[..., 0::2] = p & 15
    x[..., 1::2] = p >> 4
    return x.transpose(0, 3, 1, 2, 4).reshape(geo.np_, k)[:n]


def _codes_from_int8_panels(panels: np.ndarray, geo: Geometry, n: int, k: int) -> np.ndarray:
    p = panels.reshape(geo.sb, geo.ng, geo.kq, CHANNELS, 4)
    return p.transpose(0, 3, 1, 2, 4).reshape(geo.np_, k)[:n].view(np.int8)


def pack_ref(blocks, n: int, k: int, qtype) -> dict[str, np.ndarray]:
    """Reference packer for every source type, through ``to_fields`` (no fast kernel)."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    raw = C.as_blocks(NAME, blocks, t, n, k)
    geo = geometry(t, n, k)
    f = C.codec_fields(t, raw, n, k)
    codes = f["codes"]
    out: dict[str, np.ndarray] = {}
    if geo.nibble:
        full = np.full((geo.np_, k), pad_code(t), np.uint8)
        full[:n] = codes
        x = full.reshape(geo.sb, CHANNELS, geo.ng, geo.kq, 4).transpose(0, 2, 3, 1, 4)
        out["panels"] = np.ascontiguousarray((x[..., 0::2] | (x[..., 1::2] << 4)).reshape(geo.sb, geo.ng, geo.kq, 128))
    else:
        full = np.zeros((geo.np_, k), np.int8)
        full[:n] = codes.astype(np.int16) - np.int16(t.code_offset)
        x = full.reshape(geo.sb, CHANNELS, geo.ng, geo.kq, 4).transpose(0, 2, 3, 1, 4)
        out["panels"] = np.ascontiguousarray(x.reshape(geo.sb, geo.ng, geo.kq, 256))
    for name, dtype, _ in t.scale_fields:
        out[name] = _to_channel_order(f[name], geo, C.DTYPES[dtype])
    return out


def unpack_ref(regions, n: int, k: int, qtype) -> np.ndarray:
    """Reference inverse of :func:`pack_ref`, through ``from_fields``."""
    t = C.accepted(NAME, refuse, qtype, n, k)
    r = C.as_regions(NAME, regions, plan(t, n, k))
    geo = geometry(t, n, k)
    if geo.nibble:
        codes = _codes_from_nibble_panels(r["panels"], geo, n, k)
    else:
        c = _codes_from_int8_panels(r["panels"], geo, n, k).astype(np.int16)
        codes = (c + np.int16(t.code_offset)).astype(np.uint8)
    fields = {"codes": np.ascontiguousarray(codes)}
    for name, _, _ in t.scale_fields:
        fields[name] = _from_channel_order(r[name], n)
    return C.codec_from_fields(t, fields, n, k)


# ---- wrappers around the kernels (in _panel64_kernels, compiled on first use) --------------
def _k():
    from . import _panel64_kernels

    return _panel64_kernels


def _pack_int8_rows(raw, t, n, k, out):
    """An int8 type: its row kernel where _panel64_int8_kernels has a body for it, else
    :func:`pack_ref` (a new type's panel64 support before, or without, a kernel of its own)."""
    from . import _panel64_int8_kernels

    if t.name in _panel64_int8_kernels.TYPES:
        _panel64_int8_kernels.pack(raw, t, n, k, out)
    else:
        for name, a in pack_ref(raw, n, k, t).items():
            out[name][...] = a


def _unpack_int8_rows(r, t, n, k, raw):
    from . import _panel64_int8_kernels

    if t.name in _panel64_int8_kernels.TYPES:
        _panel64_int8_kernels.unpack(r, t, n, k, raw)
    else:
        raw[...] = unpack_ref(r, n, k, t)


def _fill_pads(regions: dict[str, np.ndarray], t, n: int) -> None:
    """Pad channels (n..SB*64) of the last super-block: pad code, zero scales."""
    cpad = n - (n - 1) // CHANNELS * CHANNELS  # channels in use in the last super-block
    if cpad == CHANNELS:
        return
    for name, a in regions.items():
        if name == "panels":
            per = a.shape[-1] // CHANNELS  # bytes per channel in a kg-block: 2 or 4
            last = a[-1].reshape(a.shape[1], a.shape[2], CHANNELS, per)
            if per == 2:
                code = pad_code(t)
                last[:, :, cpad:, :] = code | (code << 4)
            else:
                last[:, :, cpad:, :] = 0
        else:
            a[-1, :, cpad:] = 0



def _q4_step(t) -> tuple[int, int]:
    """(header bytes of a Q4_0/Q4_1 block: its scale fields, before the 16 code bytes; blocks
    along K in a row step of the channel-quad kernels: the fewest that make whole 64-bit words,
    Q4_0 4 x 18 = 72 bytes, Q4_1 2 x 20 = 40), from the type table."""
    return t.type_size - t.block_size // 2, C.word_step(t)[0]


def _pack_q4_small(raw, t, n, k, out):
    """Q4_0/Q4_1: the channel-quad kernel (_q4_pack_w) when K is a whole number of its steps,
    else the four-channel block-column kernel (_q4_small_cols); both write the regions as
    uint64 words (``m`` empty for Q4_0)."""
    geo = geometry(t, n, k)
    hdr, nbk = _q4_step(t)
    views = [C.aligned_out(out[name]) for name in ("panels", "d", "m") if name in out]
    p64, d64 = views[0][0], views[1][0]
    m64 = views[2][0] if len(views) > 2 else d64[:0]
    if geo.ng % nbk == 0:
        _k()._q4_pack_w(C.aligned_words(raw), n, geo.ng, hdr, p64, d64, m64)
    else:
        _k()._q4_small_cols(raw.reshape(-1), n, k // t.block_size, hdr, p64, d64, m64)
    for _, fin in views:
        fin()


def _unpack_q4_small(r, t, n, k, raw):
    geo = geometry(t, n, k)
    hdr, nbk = _q4_step(t)
    if geo.ng % nbk == 0:
        w64, finish = C.aligned_out(raw)
        d64 = C.words(r["d"])
        _k()._q4_unpack_w(C.words(r["panels"]), d64, C.words(r["m"]) if "m" in r else d64[:0], n, geo.ng, hdr, w64)
        finish()
    else:
        p16 = r["panels"].reshape(-1).view(np.uint16)
        d = r["d"].reshape(-1)
        m = r["m"].reshape(-1) if "m" in r else d[:0]
        _k()._q4_unpack_b(p16, d, m, n, geo.ng, hdr, raw.reshape(-1))


#: the Q4_K regions as the channel-quad kernels take them: four channels a word
_Q4_K_WORDS = (("panels", np.uint64), ("sc", np.uint32), ("m", np.uint32), ("d", np.uint64), ("dmin", np.uint64))


def _pack_q4_k(raw, t, n, k, out):
    geo = geometry(t, n, k)
    views = [C.aligned_out(out[name], dtype) for name, dtype in _Q4_K_WORDS]
    _k()._q4_k_pack(C.aligned_words(raw), n, geo.nsb, *(v for v, _ in views))
    for _, fin in views:
        fin()


def _unpack_q4_k(r, t, n, k, raw):
    geo = geometry(t, n, k)
    w64, finish = C.aligned_out(raw)
    _k()._q4_k_unpack(*(C.words(r[name], dtype) for name, dtype in _Q4_K_WORDS), n, geo.nsb, w64)
    finish()


# -- numpy packers of the 32-element block types (no JIT: see _common.JIT_PAYOFF_BYTES) -------
_CHUNK_BYTES = 1 << 18  # source bytes per step: keeps the temporaries in L2


def _super_block_steps(geo: Geometry, n: int, row_bytes: int):
    """(first super-block, end super-block, first row, end row) steps of about _CHUNK_BYTES."""
    step = max(1, _CHUNK_BYTES // (CHANNELS * row_bytes))
    for s0 in range(0, geo.sb, step):
        s1 = min(geo.sb, s0 + step)
        yield s0, s1, s0 * CHANNELS, min(n, s1 * CHANNELS)


def _header_fields(b3: np.ndarray, names, geo: Geometry, out: dict[str, np.ndarray]) -> None:
    """The f16 fields at the head of each block (d; d, m) -> their [SB][ng][64] regions."""
    head = np.ascontiguousarray(b3[:, :, :2 * len(names)]).view(np.uint16)
    for i, name in enumerate(names):
        out[name][...] = _to_channel_order(head[:, :, i], geo, np.uint16)


def _np_pack_q4_small(raw, t, n, k, out):
    # A Q4_0/Q4_1 block's 16 code bytes, read as 4 little-endian uint32 words w[0..3]:
    # word i holds bytes 4i..4i+3 = codes (4i+j) in the low nibbles and (16+4i+j) in the high:
    #
    #   w[i] bits: 31..28 27..24 23..20 19..16 15..12 11..8  7..4   3..0
    #              c16+3  c3     c16+2  c2     c16+1  c1     c16+0  c0     (c = code at 4i + ...)
    #
    # kg-block q < 4 (K 4q..4q+3) is the low nibbles of w[q] gathered into one u16 panel word
    # (bits 0, 4, 8, 12 = K offsets 0..3: the layout drawn at the top); q >= 4 the high ones.
    geo = geometry(t, n, k)
    head = t.type_size - t.block_size // 2  # the 16 code bytes end the block
    b3 = raw.reshape(n, geo.ng, t.type_size)
    panels = out["panels"].reshape(-1).view(np.uint16).reshape(geo.sb, geo.ng, geo.kq, CHANNELS)
    pad = pad_code(t) * 0x11111111
    for s0, s1, r0, r1 in _super_block_steps(geo, n, geo.ng * t.type_size):
        w = np.empty(((s1 - s0) * CHANNELS, geo.ng, 4), np.uint32)
        w[:r1 - r0] = np.ascontiguousarray(b3[r0:r1, :, head:]).view(np.uint32)
        w[r1 - r0:] = pad
        wt = w.reshape(s1 - s0, CHANNELS, geo.ng, 4).transpose(0, 2, 3, 1)  # [sb, ng, i, channel]
        low = wt & 0xF
        low |= (wt >> 4) & 0xF0
        low |= (wt >> 8) & 0xF00
        low |= (wt >> 12) & 0xF000
        panels[s0:s1, :, :4] = low
        high = (wt >> 4) & 0xF
        high |= (wt >> 8) & 0xF0
        high |= (wt >> 12) & 0xF00
        high |= (wt >> 16) & 0xF000
        panels[s0:s1, :, 4:] = high
    _header_fields(b3, [name for name, _, _ in t.scale_fields], geo, out)


def _np_pack_q8_0(raw, t, n, k, out):
    # A Q8_0 block's 32 int8 codes are 8 groups of 4 consecutive K: exactly the 4 bytes a
    # channel owns in each kg-block (code_offset 0), so the panels are a transpose of uint32s.
    geo = geometry(t, n, k)
    b3 = raw.reshape(n, geo.ng, t.type_size)
    panels = out["panels"].reshape(-1).view(np.uint32).reshape(geo.sb, geo.ng, geo.kq, CHANNELS)
    for s0, s1, r0, r1 in _super_block_steps(geo, n, geo.ng * t.type_size):
        w = np.zeros(((s1 - s0) * CHANNELS, geo.ng, geo.kq), np.uint32)
        w[:r1 - r0] = np.ascontiguousarray(b3[r0:r1, :, t.type_size - t.block_size:]).view(np.uint32)  # the codes end the block
        panels[s0:s1] = w.reshape(s1 - s0, CHANNELS, geo.ng, geo.kq).transpose(0, 2, 3, 1)
    _header_fields(b3, ["d"], geo, out)


#: the nibble types' own kernels; every int8 type goes to the row kernels (_pack_int8_rows,
#: which fall back on the references for a type without a body there)
_NIBBLE_PACK = {"Q4_0": _pack_q4_small, "Q4_1": _pack_q4_small, "Q4_K": _pack_q4_k}
_NIBBLE_UNPACK = {"Q4_0": _unpack_q4_small, "Q4_1": _unpack_q4_small, "Q4_K": _unpack_q4_k}


def _by_form(nibble: dict, int8) -> dict:
    """type name -> fast kernel wrapper of every source type that has one."""
    return {t.name: nibble.get(t.name) if t.code_bits == 4 else int8 for t in SOURCE_TYPES
            if t.code_bits != 4 or t.name in nibble}


_FAST_PACK = _by_form(_NIBBLE_PACK, _pack_int8_rows)
_FAST_UNPACK = _by_form(_NIBBLE_UNPACK, _unpack_int8_rows)
_NUMPY_PACK = {"Q4_0": _np_pack_q4_small, "Q4_1": _np_pack_q4_small, "Q8_0": _np_pack_q8_0}


def numpy_pack_kind(t: qtypes.GGMLType) -> str:
    """The engine budget (formats/engine.py) a small job's pack of ``t`` counts against: a
    numpy packer of its own, or the field-by-field :func:`pack_ref`."""
    return "repack" if t.name in _NUMPY_PACK else "repack_ref"
