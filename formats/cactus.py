"""cactus's tensor files (``*.weights``): the 84-byte ``CACT`` header, CQ payloads, FP16.

Every file is::

    offset 0   header (84 bytes, little-endian)
               0  "CACT"        4  flags u32      8  alignment u32 (32)   12 ndim u32
               16 dims[4] u64 (unused dims 0)
               48 precision u32 52 data_bytes u64 60 scales_bytes u64
               68 group_size u32 72 num_groups u32 76 original_n u64
    offset 96  metadata blob ("scales", ``scales_bytes`` long; the header padded to 32)
    data       at align32(96 + scales_bytes), ``data_bytes`` long; file size = data + data_bytes

Precision: 0 INT8, 1 FP16, 2 FP32, 3/4/5/6 = CQ1/CQ2/CQ3/CQ4. Flags (CQ files):
``1<<1`` orthogonal rotation, ``1<<2`` INTERLEAVED_4ROW, ``1<<5`` packed panels
(``*.cq4p.weights`` only; see :data:`LINEAGE_NO_ROTATION`).

**Hadamard CQ metadata**: codebook f16[2^b], input scale f16[K], its reciprocal f16[K]
(``min(1/max(s, 1e-8), 65504)``), norms f16, left signs i8[G], right signs i8[G], perm u32[G].
In the INTERLEAVED_4ROW form the codebook is stored divided by ``f = max|cb|/127`` and the
norms multiplied by ``f`` (so the dequantization is unchanged), and the norms are ordered
``[N/4][groups][4 rows]``; row-major files keep them ``[N][groups]``.

**Orthogonal CQ4 metadata**: codebook (not rescaled), input scale, reciprocal, norms f16[N]
(one per row; the interleaved form's ``[N/4][1][4]`` is the same order), the K x K rotation f16.

**FP16 files**: flags 0, precision 1, dims = the shape, scales 0, group 0/0,
``original_n = dims[0]``, data = f16 values row-major.

**Depthwise INT8 files** (LFM2's short-convolution kernel ``[C, 1, K]``): flags 1 (scales),
precision 0, dims ``(C, 1, K)``, group ``K`` x 1 group, ``original_n = C``; metadata = one
f16 scale per channel ``max|w_c| / 127`` (at least 1e-10), data = int8 ``round(w / scale)``
(half to even, clipped to -128..127) ``[C][K]``.

The index packings (the data region) are drawn next to each packer below. Writers return
bytes (:func:`cq_file_bytes`, :func:`fp16_file_bytes`, :func:`cq4p_file_bytes`) and write
through :mod:`.atomic` (:func:`write_file`); :func:`read` parses and validates any of them.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from . import cq as cqc
from .atomic import write_bytes
from .errors import BadInputError

MAGIC = b"CACT"
HEADER = struct.Struct("<4sIIIQQQQIQQIIQ")
HEADER_SIZE = HEADER.size  # 84
ALIGNMENT = 32

PRECISION_INT8 = 0
PRECISION_FP16 = 1
PRECISION_FP32 = 2
PRECISION_CQ = {1: 3, 2: 4, 3: 5, 4: 6}
"""CQ bits -> header precision."""
BITS_OF_PRECISION = {v: k for k, v in PRECISION_CQ.items()}

FLAG_HAS_SCALES = 1 << 0  # INT8 files: a scale per group in the metadata
FLAG_ORTHOGONAL = 1 << 1
FLAG_INTERLEAVED_4ROW = 1 << 2
FLAG_PANELS = 1 << 5
PANEL_SUFFIX = ".cq4p.weights"
PANEL_CHANNELS = 64

LINEAGE_LEGACY = "legacy"
LINEAGE_PANEL = "panel (cq4p, flag 1<<5 = packed 64-channel panels)"
LINEAGE_NO_ROTATION = "other lineage (flag 1<<5 = no rotation)"

FOLDER_MANIFEST = "manifest.json"
FOLDER_MANIFEST_FORMAT = "panelpack-cactus/1"
"""Our manifest beside a cactus folder's files (checksums and ledger; cactus ignores it)."""

EMBEDDING_STEMS = frozenset({"token_embeddings", "embed_tokens", "embed_tokens_per_layer"})
"""File stems cactus never writes in the interleaved Hadamard form."""


def align(offset: int, a: int = ALIGNMENT) -> int:
    return -(-offset // a) * a


def header_bytes(flags: int, dims: tuple[int, ...], precision: int, data_bytes: int, scales_bytes: int,
                 group_size: int, num_groups: int, original_n: int) -> bytes:
    """The 84-byte header followed by the zero padding up to the 32-aligned metadata offset."""
    d = tuple(int(x) for x in dims) + (0,) * (4 - len(dims))
    raw = HEADER.pack(MAGIC, flags, ALIGNMENT, len(dims), *d, precision, data_bytes, scales_bytes,
                      group_size, num_groups, original_n)
    return raw + b"\0" * (align(HEADER_SIZE) - HEADER_SIZE)


def _assemble(head: bytes, blob: bytes, data: bytes) -> bytes:
    scales_end = len(head) + len(blob)
    return b"".join((head, blob, b"\0" * (align(scales_end) - scales_end), data))


# ---- index packings -------------------------------------------------------------------------

def pack_lsb(indices: np.ndarray, bits: int) -> np.ndarray:
    """Row-major LSB packing: each row is one little-endian bit stream, index k at bit
    ``bits*k`` (LSB first), K a multiple of 8 so every row is whole bytes::

        4-bit: byte j = idx[2j] | idx[2j+1] << 4
        2-bit: byte j = idx[4j] | idx[4j+1] << 2 | idx[4j+2] << 4 | idx[4j+3] << 6
        1-bit: byte j = sum_b idx[8j+b] << b
        3-bit: 8 indices -> 24-bit word sum_i idx[8c+i] << 3i -> 3 bytes little-endian
    """
    idx = np.ascontiguousarray(indices, dtype=np.uint8)
    n, k = idx.shape
    if bits == 3:
        v = idx.reshape(n, k // 8, 8).astype(np.uint32)
        word = np.zeros(v.shape[:-1], dtype=np.uint32)
        for i in range(8):
            word |= (v[..., i] & 7) << (3 * i)
        out = np.empty(v.shape[:-1] + (3,), dtype=np.uint8)
        for b in range(3):
            out[..., b] = (word >> (8 * b)) & 0xFF
        return out.reshape(n, k * 3 // 8)
    per = 8 // bits
    codes = idx.reshape(n, k // per, per)
    packed = np.zeros((n, k // per), dtype=np.uint8)
    mask = (1 << bits) - 1
    for i in range(per):
        packed |= (codes[..., i] & mask) << (bits * i)
    return packed


def unpack_lsb(packed: np.ndarray, n: int, k: int, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_lsb`: u8 ``[n, k]``."""
    p = np.ascontiguousarray(packed, dtype=np.uint8).reshape(n, k * bits // 8)
    if bits == 3:
        b3 = p.reshape(n, k // 8, 3).astype(np.uint32)
        word = b3[..., 0] | (b3[..., 1] << 8) | (b3[..., 2] << 16)
        out = np.empty((n, k // 8, 8), dtype=np.uint8)
        for i in range(8):
            out[..., i] = (word >> (3 * i)) & 7
        return out.reshape(n, k)
    per = 8 // bits
    mask = (1 << bits) - 1
    out = np.empty((n, k // per, per), dtype=np.uint8)
    for i in range(per):
        out[..., i] = (p >> (bits * i)) & mask
    return out.reshape(n, k)


# INTERLEAVED_4ROW: rows in blocks of 4 (nb = N/4); inside a block, per group g (G indices),
# fixed-size chunks; within a chunk the 4 rows' bytes sit side by side:
#
#   4-bit  chunk = 8 K  -> 16 B: [row r][byte j] = idx[r][k0+j] | idx[r][k0+4+j] << 4   (j < 4)
#   2-bit  chunk = 16 K -> 16 B: [a][row r]      = sum_b idx[r][k0+4a+b] << 2b          (a, b < 4)
#   1-bit  chunk = 32 K -> 16 B: [a][row r]      = sum_b idx[r][k0+8a+b] << b           (a < 4, b < 8)
#   3-bit  chunk = 4 K  -> 6 B:  16 values v_i = idx[row i//4][k0 + i%4], 48-bit little-endian
#                                word sum_i v_i << 3i
#
# order of chunks: [nb][group][chunk], k0 = g*G + chunk*(chunk width).

def _il_shape(idx: np.ndarray, group: int, width: int) -> np.ndarray:
    n, k = idx.shape
    return idx.reshape(n // 4, 4, k // group, group // width, width)


def pack_interleaved(indices: np.ndarray, group: int, bits: int) -> np.ndarray:
    """INTERLEAVED_4ROW packing (see the diagram above); flat u8."""
    idx = np.ascontiguousarray(indices, dtype=np.uint8)
    if bits == 4:
        v = _il_shape(idx, group, 8)                           # [nb][r][g][c][8]
        by = (v[..., :4] & 0xF) | ((v[..., 4:] & 0xF) << 4)    # [nb][r][g][c][4]
        return np.ascontiguousarray(by.transpose(0, 2, 3, 1, 4)).reshape(-1)
    if bits in (2, 1):
        per = 8 // bits
        v = _il_shape(idx, group, 4 * per).reshape(idx.shape[0] // 4, 4, idx.shape[1] // group, group // (4 * per), 4, per)
        by = np.zeros(v.shape[:-1], dtype=np.uint8)            # [nb][r][g][c][a]
        for b in range(per):
            by |= (v[..., b] & ((1 << bits) - 1)) << (bits * b)
        return np.ascontiguousarray(by.transpose(0, 2, 3, 4, 1)).reshape(-1)
    if bits == 3:
        v = _il_shape(idx, group, 4).transpose(0, 2, 3, 1, 4)  # [nb][g][c][r][4]
        v = v.reshape(v.shape[0], v.shape[1], v.shape[2], 16).astype(np.uint64)
        word = np.zeros(v.shape[:-1], dtype=np.uint64)
        for i in range(16):
            word |= (v[..., i] & np.uint64(7)) << np.uint64(3 * i)
        out = np.empty(v.shape[:-1] + (6,), dtype=np.uint8)
        for b in range(6):
            out[..., b] = (word >> np.uint64(8 * b)) & np.uint64(0xFF)
        return out.reshape(-1)
    raise BadInputError(f"INTERLEAVED_4ROW supports CQ1..CQ4, got CQ{bits}")


def unpack_interleaved(packed: np.ndarray, n: int, k: int, group: int, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_interleaved`: u8 ``[n, k]``."""
    p = np.ascontiguousarray(packed, dtype=np.uint8)
    nb, ng = n // 4, k // group
    if bits == 4:
        by = p.reshape(nb, ng, group // 8, 4, 4).transpose(0, 3, 1, 2, 4)  # [nb][r][g][c][4]
        out = np.concatenate([by & 0xF, by >> 4], axis=-1)
        return np.ascontiguousarray(out).reshape(n, k)
    if bits in (2, 1):
        per = 8 // bits
        by = p.reshape(nb, ng, group // (4 * per), 4, 4).transpose(0, 4, 1, 2, 3)  # [nb][r][g][c][a]
        out = np.empty(by.shape + (per,), dtype=np.uint8)
        for b in range(per):
            out[..., b] = (by >> (bits * b)) & ((1 << bits) - 1)
        return np.ascontiguousarray(out).reshape(n, k)
    if bits == 3:
        by = p.reshape(nb, ng, group // 4, 6).astype(np.uint64)
        word = np.zeros(by.shape[:-1], dtype=np.uint64)
        for b in range(6):
            word |= by[..., b] << np.uint64(8 * b)
        v = np.empty(by.shape[:-1] + (16,), dtype=np.uint8)
        for i in range(16):
            v[..., i] = (word >> np.uint64(3 * i)) & np.uint64(7)
        v = v.reshape(nb, ng, group // 4, 4, 4).transpose(0, 3, 1, 2, 4)
        return np.ascontiguousarray(v).reshape(n, k)
    raise BadInputError(f"INTERLEAVED_4ROW supports CQ1..CQ4, got CQ{bits}")


# ---- writers --------------------------------------------------------------------------------

def interleave_by_default(cq: cqc.CQTensor, stem: str) -> bool:
    """cactus's rule for a Hadamard CQ file: INTERLEAVED_4ROW when N % 4 == 0 and the group
    size suits it (multiple of 32, at most 256), except for embedding tables."""
    return (cq.rotation != "orthogonal" and cq.n % 4 == 0 and cq.group % 32 == 0
            and cq.group <= 256 and stem not in EMBEDDING_STEMS)


def _check_interleavable(cq: cqc.CQTensor) -> None:
    if cq.n % 4:
        raise BadInputError(f"INTERLEAVED_4ROW needs N % 4 == 0, got N = {cq.n}")
    if cq.rotation == "orthogonal":
        if cq.bits != 4 or cq.kp % 32:
            raise BadInputError("orthogonal INTERLEAVED_4ROW needs CQ4 and K % 32 == 0")
    elif cq.group % 32 or cq.group > 256:
        raise BadInputError(f"INTERLEAVED_4ROW needs a group size multiple of 32 and <= 256, got {cq.group}")


def codebook_factor(cb: np.ndarray) -> float:
    """``max|cb| / 127`` (1/127 for an all-zero codebook): the interleaved form's divisor."""
    m = float(np.max(np.abs(cb)))
    return m / 127.0 if m > 1e-12 else 1.0 / 127.0


def stored_codebook_and_norms(cq: cqc.CQTensor, interleaved: bool) -> tuple[np.ndarray, np.ndarray]:
    """The f16 codebook and f16 norms ``[N, groups]`` as the file stores them (pre-scaled by
    :func:`codebook_factor` in the interleaved Hadamard form)."""
    cb = cq.codebook().astype(np.float32)
    norms = cq.norms.astype(np.float32)
    if interleaved and cq.rotation != "orthogonal":
        f = codebook_factor(cb)
        cb = cb / f
        norms = norms * f
    return cb.astype(np.float16), norms.astype(np.float16)


def reciprocal_scale(scale16: np.ndarray) -> np.ndarray:
    return np.minimum(1.0 / np.maximum(scale16.astype(np.float32), 1e-8), 65504.0).astype(np.float16)


def _rotation_blob(cq: cqc.CQTensor) -> bytes:
    if cq.rotation == "orthogonal":
        return cq.rotation_matrix().astype(np.float16).tobytes()
    left, right, perm = cq.components()
    return left.tobytes() + right.tobytes() + perm.astype("<u4").tobytes()


def cq_file_bytes(cq: cqc.CQTensor, interleaved: bool) -> bytes:
    """A CQ tensor file (Hadamard or orthogonal; row-major LSB or INTERLEAVED_4ROW), byte for
    byte as cactus's ``write_cq_tensor`` writes the same contents."""
    if interleaved:
        _check_interleavable(cq)
    n, kp, g = cq.n, cq.kp, cq.group
    cb16, norms16 = stored_codebook_and_norms(cq, interleaved)
    scale16 = cq.input_scale.astype(np.float16).reshape(kp)
    if interleaved:
        norms_blob = np.ascontiguousarray(norms16.reshape(n // 4, 4, -1).transpose(0, 2, 1)).tobytes()
        data = pack_interleaved(cq.indices, g, cq.bits).tobytes()
    else:
        norms_blob = norms16.tobytes()
        data = pack_lsb(cq.indices, cq.bits).tobytes()
    blob = b"".join((cb16.tobytes(), scale16.tobytes(), reciprocal_scale(scale16).tobytes(), norms_blob,
                     _rotation_blob(cq)))
    flags = (FLAG_INTERLEAVED_4ROW if interleaved else 0) | (FLAG_ORTHOGONAL if cq.rotation == "orthogonal" else 0)
    head = header_bytes(flags, (n, kp), PRECISION_CQ[cq.bits], len(data), len(blob), g, kp // g, n)
    return _assemble(head, blob, data)


def fp16_file_bytes(array: np.ndarray) -> bytes:
    """An FP16 tensor file (cactus's fallback for norms, biases, odd shapes): ndim 1..4."""
    a = np.asarray(array)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim > 4:
        a = a.reshape(a.shape[0], -1)
    data = np.ascontiguousarray(a.astype(np.float16)).tobytes()
    head = header_bytes(0, a.shape, PRECISION_FP16, len(data), 0, 0, 0, int(a.shape[0]))
    return head + data


def depthwise_int8_file_bytes(w: np.ndarray) -> bytes:
    """A depthwise convolution kernel ``[C, 1, K]`` (f32) as cactus's grouped INT8 file (see the
    module doc; cactus's ``save_depthwise_conv_int8_with_header``, the same f32 steps)."""
    a = np.asarray(w, np.float32)
    if a.ndim != 3 or a.shape[1] != 1 or a.shape[2] < 1:
        raise BadInputError(f"a depthwise INT8 file holds a [C, 1, K] kernel, got shape {a.shape}")
    c, _, k = a.shape
    rows = a.reshape(c, k)
    scales = np.maximum(np.max(np.abs(rows), axis=1, keepdims=True) / np.float32(127.0), np.float32(1e-10))
    q = np.clip(np.round(rows / scales), -128, 127).astype(np.int8)
    blob = scales.reshape(-1).astype(np.float16).tobytes()
    data = q.tobytes()
    head = header_bytes(FLAG_HAS_SCALES, (c, 1, k), PRECISION_INT8, len(data), len(blob), k, 1, c)
    return _assemble(head, blob, data)


# ---- the CQ4 panel file (*.cq4p.weights) ------------------------------------------------------

def int8_codebook(cb16: np.ndarray) -> np.ndarray:
    """The int8 value of each pre-divided f16 codebook entry (round half to even, saturate)."""
    return np.clip(np.rint(cb16.astype(np.float32)), -127, 127).astype(np.int8)


def panel_nibbles(cb16: np.ndarray) -> np.ndarray:
    """Codebook index -> the nibble stored in a panel: the first index with the same int8
    value (the identity unless two entries round to one int8 value)."""
    q = int8_codebook(cb16)
    return np.array([int(np.flatnonzero(q == q[i])[0]) for i in range(len(q))], dtype=np.uint8)


def folded_norm_blob(norms16: np.ndarray) -> np.ndarray:
    """f32 ``[SB][groups][64]`` from the stored (already codebook-folded) f16 norms
    ``[N][groups]``; channels >= N are 0."""
    n, ng = norms16.shape
    sb = -(-n // PANEL_CHANNELS)
    out = np.zeros((sb * PANEL_CHANNELS, ng), dtype=np.float32)
    out[:n] = norms16.astype(np.float32)
    return np.ascontiguousarray(out.reshape(sb, PANEL_CHANNELS, ng).transpose(0, 2, 1))


def cq4p_file_bytes(cq: cqc.CQTensor, panels: np.ndarray) -> bytes:
    """A CQ4 Hadamard panel file: header flags ``1<<5``, precision 6; metadata = f16 codebook
    (pre-divided by ``max|cb|/127``), f16 input scale and reciprocal, f16 norms ``[N][groups]``
    (multiplied by the same factor, the values of the INTERLEAVED_4ROW file), zero pad to 4,
    folded f32 norms ``[SB][groups][64]``, left/right i8[G], perm u32[G]; then ``panels`` (the
    nibble panel bytes of :mod:`panelpack.repack.cq4_panel`) at the next 32-aligned offset."""
    if cq.bits != 4 or cq.rotation != "hadamard":
        raise BadInputError(f"{PANEL_SUFFIX} holds CQ4 Hadamard weights, got CQ{cq.bits} {cq.rotation}")
    n, kp, g = cq.n, cq.kp, cq.group
    cb16, norms16 = stored_codebook_and_norms(cq, interleaved=True)
    scale16 = cq.input_scale.astype(np.float16).reshape(kp)
    head_blob = b"".join((cb16.tobytes(), scale16.tobytes(), reciprocal_scale(scale16).tobytes(), norms16.tobytes()))
    head_blob += b"\0" * (align(len(head_blob), 4) - len(head_blob))
    blob = head_blob + folded_norm_blob(norms16).tobytes() + _rotation_blob(cq)
    data = np.ascontiguousarray(panels, dtype=np.uint8).tobytes()
    sb = -(-n // PANEL_CHANNELS)
    if len(data) != sb * PANEL_CHANNELS * kp // 2:
        raise BadInputError(f"panel data is {len(data)} bytes, expected {sb * PANEL_CHANNELS * kp // 2}")
    head = header_bytes(FLAG_PANELS, (n, kp), PRECISION_CQ[4], len(data), len(blob), g, kp // g, n)
    return _assemble(head, blob, data)


def write_file(path: str | os.PathLike, data: bytes, force: bool = False) -> None:
    """Write one tensor file atomically."""
    write_bytes(path, data, force=force)


# ---- reading --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Header:
    flags: int
    alignment: int
    ndim: int
    dims: tuple[int, int, int, int]
    precision: int
    data_bytes: int
    scales_bytes: int
    group_size: int
    num_groups: int
    original_n: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.dims[: self.ndim])

    @property
    def scales_offset(self) -> int:
        return align(HEADER_SIZE, self.alignment)

    @property
    def data_offset(self) -> int:
        return align(self.scales_offset + self.scales_bytes, self.alignment)


def parse_header(raw: bytes, where: str = "") -> Header:
    if len(raw) < HEADER_SIZE:
        raise BadInputError(f"{where}: {len(raw)} bytes, too small for the 84-byte cactus header")
    f = HEADER.unpack_from(raw, 0)
    if f[0] != MAGIC:
        raise BadInputError(f"{where}: not a cactus tensor file (magic {f[0]!r}, expected b'CACT')")
    flags, alignment, ndim = f[1], f[2], f[3]
    if not 1 <= ndim <= 4:
        raise BadInputError(f"{where}: ndim {ndim} (1..4 allowed)")
    if alignment == 0 or alignment & (alignment - 1) or alignment > 1 << 16:
        raise BadInputError(f"{where}: alignment {alignment} is not a power of two <= 65536")
    return Header(flags, alignment, ndim, tuple(f[4:8]), f[8], f[9], f[10], f[11], f[12], f[13])  # type: ignore[arg-type]


@dataclass
class CactusTensorFile:
    """A parsed tensor file. ``kind`` is ``fp16``/``fp32``/``int8``/``cq``; ``lineage`` says
    which format family the flags were read as (:data:`LINEAGE_LEGACY` or :data:`LINEAGE_PANEL`)."""

    path: str
    header: Header
    kind: str
    lineage: str
    raw: np.ndarray  # the whole file, u8

    @property
    def shape(self) -> tuple[int, ...]:
        return self.header.shape

    @property
    def blob(self) -> np.ndarray:
        h = self.header
        return self.raw[h.scales_offset:h.scales_offset + h.scales_bytes]

    @property
    def data(self) -> np.ndarray:
        h = self.header
        return self.raw[h.data_offset:h.data_offset + h.data_bytes]

    @property
    def bits(self) -> int:
        return BITS_OF_PRECISION[self.header.precision]

    @property
    def interleaved(self) -> bool:
        return bool(self.header.flags & FLAG_INTERLEAVED_4ROW)

    @property
    def orthogonal(self) -> bool:
        return bool(self.header.flags & FLAG_ORTHOGONAL)

    def array(self) -> np.ndarray:
        """FP16/FP32 files: the values, in the header's shape; depthwise INT8 files: their
        dequantized values ``int8 · scale16`` (f32)."""
        if self.kind == "int8" and self.header.ndim == 3 and self.header.num_groups == 1:
            c, _, k = self.shape
            scales = np.frombuffer(self.blob.tobytes(), dtype="<f2", count=c).astype(np.float32)
            q = np.frombuffer(self.data.tobytes(), dtype=np.int8, count=c * k).reshape(c, k)
            return (q.astype(np.float32) * scales[:, None]).reshape(self.shape)
        if self.kind not in ("fp16", "fp32"):
            raise BadInputError(f"{self.path}: {self.kind} file has no plain array")
        dt = np.float16 if self.kind == "fp16" else np.float32
        count = math.prod(self.shape)
        return np.frombuffer(self.data.tobytes(), dtype=dt, count=count).reshape(self.shape)

    def metadata(self) -> dict[str, np.ndarray]:
        """The metadata fields of a CQ file (stored values, f16 kept as f16)."""
        if self.kind != "cq":
            raise BadInputError(f"{self.path}: not a CQ file")
        n, kp = self.shape
        h = self.header
        g, ng = h.group_size, h.num_groups
        b = self.blob.tobytes()
        pos = 0

        def take(dtype, count):
            nonlocal pos
            size = np.dtype(dtype).itemsize * count
            if pos + size > len(b):
                raise BadInputError(f"{self.path}: metadata ends at byte {len(b)}, needs {pos + size}")
            a = np.frombuffer(b, dtype=dtype, count=count, offset=pos)
            pos += size
            return a

        out = {"codebook": take("<f2", 1 << self.bits), "input_scale": take("<f2", kp),
               "input_scale_recip": take("<f2", kp)}
        panel = self.lineage == LINEAGE_PANEL
        nnorm = n if self.orthogonal else n * ng
        norms = take("<f2", nnorm)
        if self.interleaved:
            norms = norms.reshape(n // 4, -1, 4).transpose(0, 2, 1).reshape(n, -1)
        out["norms"] = norms.reshape(n, -1)
        if panel:
            pos = align(pos, 4)
            sb = -(-n // PANEL_CHANNELS)
            out["folded_norms"] = take("<f4", sb * ng * PANEL_CHANNELS).reshape(sb, ng, PANEL_CHANNELS)
        if self.orthogonal:
            out["rotation"] = take("<f2", kp * kp).reshape(kp, kp)
            if panel:
                out["rotation_t"] = take("<f2", kp * kp).reshape(kp, kp)
        else:
            out["left"] = take("i1", g)
            out["right"] = take("i1", g)
            out["perm"] = take("<u4", g)
        if pos != len(b):
            raise BadInputError(f"{self.path}: metadata is {len(b)} bytes, the fields take {pos}")
        return out

    def indices(self) -> np.ndarray:
        """Codebook indices u8 ``[N, K]`` (legacy files; panel files need repack.cq4_panel)."""
        n, kp = self.shape
        if self.lineage == LINEAGE_PANEL:
            raise BadInputError(f"{self.path}: panel file: unpack it with panelpack.repack.cq4_panel")
        if self.interleaved:
            return unpack_interleaved(self.data, n, kp, self.header.group_size, self.bits)
        return unpack_lsb(self.data, n, kp, self.bits)

    def cq(self, indices: Optional[np.ndarray] = None) -> cqc.CQTensor:
        """The file as a :class:`CQTensor` (norms/codebook as stored: use :meth:`dequantize`
        for values). ``indices`` supplies unpacked panel indices."""
        m = self.metadata()
        idx = self.indices() if indices is None else indices
        if self.orthogonal:
            return cqc.CQTensor(idx, np.ascontiguousarray(m["norms"]), m["input_scale"].copy(), self.bits,
                                self.header.group_size, "orthogonal", 0, self.shape[1],
                                m["rotation"].astype(np.float32))
        left, right, perm = m["left"], m["right"], m["perm"]
        g = self.header.group_size
        if g & (g - 1) or not set(np.unique(left)) | set(np.unique(right)) <= {-1, 1}:
            raise BadInputError(f"{self.path}: Hadamard signs must be +-1 and G a power of two")
        if not np.array_equal(np.sort(perm), np.arange(g)):
            raise BadInputError(f"{self.path}: the permutation is not a permutation of 0..{g - 1}")
        return cqc.CQTensor(idx, np.ascontiguousarray(m["norms"]), m["input_scale"].copy(), self.bits,
                            g, "hadamard", -1, self.shape[1], signs=(left.copy(), right.copy(), perm.copy()))

    def dequantize(self, indices: Optional[np.ndarray] = None) -> np.ndarray:
        """f32 ``[N, K]``: ``(cb16[idx] @ R^T) * norm16 / input_scale16``, from the stored values
        (the same numbers cactus's ``qdq`` reader computes)."""
        if self.kind in ("fp16", "fp32", "int8"):
            return self.array().astype(np.float32)
        m = self.metadata()
        t = self.cq(indices)
        return cqc.dequantize(t, cb=m["codebook"].astype(np.float32), norms=m["norms"].astype(np.float32))


def lineage_of(path: str, header: Header) -> str:
    """Which format family the flags mean: bit 5 is "packed panels" only in a ``.cq4p.weights``
    file of precision CQ4; elsewhere it is the other lineage's "no rotation" bit."""
    if header.flags & FLAG_PANELS:
        if path.endswith(PANEL_SUFFIX) and header.precision == PRECISION_CQ[4]:
            return LINEAGE_PANEL
        return LINEAGE_NO_ROTATION
    return LINEAGE_LEGACY


def read(path: str | os.PathLike) -> CactusTensorFile:
    """Parse and validate a cactus tensor file (sizes, precision, shape, metadata length)."""
    p = os.fspath(path)
    try:
        raw = np.fromfile(p, dtype=np.uint8)
    except OSError as e:
        raise BadInputError(f"{p}: cannot read: {e.strerror or e}") from None
    h = parse_header(raw[:HEADER_SIZE].tobytes(), p)
    if raw.size != h.data_offset + h.data_bytes:
        raise BadInputError(f"{p}: file is {raw.size} bytes, the header says {h.data_offset + h.data_bytes}")
    lineage = lineage_of(p, h)
    if lineage == LINEAGE_NO_ROTATION:
        raise BadInputError(f"{p}: flag 1<<5 outside a CQ4 {PANEL_SUFFIX} file: read as the {lineage}, "
                            "which panelpack does not read")
    kinds = {PRECISION_FP16: "fp16", PRECISION_FP32: "fp32", PRECISION_INT8: "int8"}
    if h.precision in kinds:
        kind = kinds[h.precision]
        want = math.prod(h.shape) * {"fp16": 2, "fp32": 4, "int8": 1}[kind]
        if h.data_bytes != want:
            raise BadInputError(f"{p}: {kind} data is {h.data_bytes} bytes, shape {h.shape} needs {want}")
        if kind == "int8" and h.scales_bytes != 2 * h.original_n * h.num_groups:
            raise BadInputError(f"{p}: int8 scales are {h.scales_bytes} bytes, {h.original_n} rows x "
                                f"{h.num_groups} groups need {2 * h.original_n * h.num_groups}")
    elif h.precision in BITS_OF_PRECISION:
        kind = "cq"
        if h.ndim != 2:
            raise BadInputError(f"{p}: a CQ file is 2-D, got shape {h.shape}")
        n, kp = h.shape
        g = h.group_size
        if g == 0 or kp % g or h.num_groups != kp // g:
            raise BadInputError(f"{p}: group size {g} x {h.num_groups} groups does not tile K = {kp}")
        bits = BITS_OF_PRECISION[h.precision]
        if lineage == LINEAGE_PANEL:
            want = -(-n // PANEL_CHANNELS) * PANEL_CHANNELS * kp // 2
        else:
            want = n * kp * bits // 8
        if h.data_bytes != want:
            raise BadInputError(f"{p}: CQ{bits} data is {h.data_bytes} bytes, {n} x {kp} needs {want}")
    else:
        raise BadInputError(f"{p}: unknown precision {h.precision}")
    f = CactusTensorFile(p, h, kind, lineage, raw)
    if kind == "cq":
        f.metadata()  # validates the metadata length
    return f


def is_panel_path(path: str | os.PathLike) -> bool:
    return Path(path).name.endswith(PANEL_SUFFIX)
