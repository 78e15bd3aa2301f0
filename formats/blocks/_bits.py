"""Table-driven bit fields: split GGUF blocks into named integer fields and back.

Every quantized block is a fixed arrangement of bit fields (codes, scales, f16 words). A type
module declares that arrangement once as a :class:`BlockPlan` (a list of :class:`Field`, each
element of which is made of one or more bit *parts* ``(byte, shift, nbits, dst)`` meaning
"bits ``shift .. shift+nbits`` of block byte ``byte`` are bits ``dst .. dst+nbits`` of the
value"). From that single table this module derives:

* ``to_fields(blocks)``: gather every field as an integer array (codes ``[n, k]``, group
  scales ``[n, k/G]``, super-block words ``[n, k/256]``);
* ``from_fields(fields)``: scatter them back, byte for byte;
* a proof that the plan is a bijection: every bit of every block byte is claimed by exactly
  one part (checked when the plan is built), so ``from_fields(to_fields(b)) == b`` for *any*
  bytes, including NaN f16 payloads and unused bit patterns.

These are the numpy references. Hot paths (dequantize, panel packing) have their own kernels
that are tested against them.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import engine
from ..errors import BadInputError
from ..qtypes import GGMLType

#: values of one field above which a process that runs kernels gathers it in numba
#: (``_gather.gather_field``, 3-5x the numpy loop on every type at 1024 x 4096); the numpy loop below
#: is its reference and the only path of a process that runs none
GATHER_KERNEL_VALUES = 1 << 16


@dataclass(frozen=True)
class Field:
    """One named field: ``count`` elements per block, each built from ``parts[i]``."""

    name: str
    dtype: str  # numpy dtype of the decoded value: "u1", "i1", "u2"
    parts: tuple[tuple[tuple[int, int, int, int], ...], ...]  # [element][part] = (byte, shift, nbits, dst)

    @property
    def count(self) -> int:
        return len(self.parts)


def byte_map(qtype: GGMLType, **sizes: int) -> Any:
    """The byte offsets of a block's arrays, from their sizes in block order: ``byte_map(Q6_K,
    ql=128, qh=64, scales=16, d=2)`` is ``AT(ql=0, qh=128, scales=192, d=208)``, checked
    against the type table (the sizes must sum to ``qtype.type_size``).

    The one statement of a type's byte diagram in numbers: its :class:`BlockPlan` and every
    kernel that reads the blocks directly (``repack/``, ``verify/``) take their offsets from
    it. A namedtuple of ints, so numba kernels read it as compile-time constants
    (``AT.d`` folds into the address arithmetic)."""
    total = sum(sizes.values())
    if total != qtype.type_size:
        raise AssertionError(f"{qtype.name}: arrays {sizes} take {total} bytes, the type table says {qtype.type_size}")
    offsets, at = [], 0
    for size in sizes.values():
        offsets.append(at)
        at += size
    at_type: Any = namedtuple(f"{qtype.name}_AT", list(sizes))  # type: ignore[misc]  # (a type made at run time)
    return at_type(*offsets)


def f16_word(byte: int) -> tuple[tuple[int, int, int, int], ...]:
    """The parts of a little-endian 16-bit word starting at ``byte``."""
    return ((byte, 0, 8, 0), (byte + 1, 0, 8, 8))


def whole_byte(byte: int) -> tuple[tuple[int, int, int, int], ...]:
    return ((byte, 0, 8, 0),)


def _byte_run(f: Field) -> int | None:
    """The first byte of ``f`` when its elements are whole little-endian values stored one
    after another (element i at ``start + i * itemsize``, byte j its bits 8j..8j+7), else None."""
    isz = np.dtype(f.dtype).itemsize
    start = f.parts[0][0][0] if f.parts and f.parts[0] else None
    if start is None:
        return None
    for i, el in enumerate(f.parts):
        if tuple(el) != tuple((start + i * isz + j, 0, 8, 8 * j) for j in range(isz)):
            return None
    return start


class BlockPlan:
    """The compiled bit plan of one block type."""

    def __init__(self, qtype: GGMLType, fields: list[Field]):
        self.qtype = qtype
        self.fields = {f.name: f for f in fields}
        ts = qtype.type_size
        # -- gather tables per field: [count, P] arrays, padded with nbits = 0 ------------
        self._gather = {}
        for f in fields:
            p = max(len(el) for el in f.parts)
            byte = np.zeros((f.count, p), np.intp)
            shift = np.zeros((f.count, p), np.uint32)
            mask = np.zeros((f.count, p), np.uint32)
            dst = np.zeros((f.count, p), np.uint32)
            for i, el in enumerate(f.parts):
                for j, (b, s, nb, d) in enumerate(el):
                    byte[i, j], shift[i, j], mask[i, j], dst[i, j] = b, s, (1 << nb) - 1, d
            self._gather[f.name] = (byte, shift, mask, dst)
        # -- fields stored as plain little-endian values, one after another: a byte slice ---
        self._slice = {f.name: _byte_run(f) for f in fields}
        # -- bijection check and scatter table: for each block byte, its contributors ----
        owner = np.full((ts, 8), -1, np.int64)
        contributors: list[list[tuple[str, int, int, int, int]]] = [[] for _ in range(ts)]
        for f in fields:
            for i, el in enumerate(f.parts):
                for b, s, nb, d in el:
                    if not (0 <= b < ts and 0 <= s and s + nb <= 8 and nb > 0):
                        raise AssertionError(f"{qtype.name}.{f.name}[{i}]: bad part {(b, s, nb, d)}")
                    for bit in range(s, s + nb):
                        if owner[b, bit] != -1:
                            raise AssertionError(f"{qtype.name}: bit {bit} of byte {b} claimed twice")
                        owner[b, bit] = 1
                    contributors[b].append((f.name, i, s, nb, d))
        if (owner == -1).any():
            b, bit = np.argwhere(owner == -1)[0]
            raise AssertionError(f"{qtype.name}: bit {bit} of byte {b} is not claimed by any field")
        self._contributors = contributors

    # -------------------------------------------------------------------------------------
    def _blocks2d(self, blocks: np.ndarray, n: int, k: int) -> np.ndarray:
        t = self.qtype
        if k % t.block_size:
            raise BadInputError(f"K={k} is not a multiple of the {t.name} block size {t.block_size}")
        want = n * (k // t.block_size) * t.type_size
        b = np.ascontiguousarray(blocks).reshape(-1).view(np.uint8)
        if b.size != want:
            raise BadInputError(f"{t.name} [{n}, {k}] needs {want} bytes, got {b.size}")
        return b.reshape(n * (k // t.block_size), t.type_size)

    def to_fields(self, blocks: np.ndarray, n: int, k: int, names=None) -> dict[str, np.ndarray]:
        """The fields of ``[n, k]`` worth of blocks (only those in ``names``, when given)."""
        b2 = self._blocks2d(blocks, n, k)
        out = {}
        for name, f in self.fields.items():
            if names is not None and name not in names:
                continue
            start = self._slice[name]
            if start is not None:  # whole little-endian values in a row: the bytes themselves
                isz = np.dtype(f.dtype).itemsize
                run = np.ascontiguousarray(b2[:, start:start + f.count * isz])
                out[name] = run.view(np.dtype(f.dtype).newbyteorder("<")).astype(f.dtype, copy=False).reshape(n, -1)
                continue
            byte, shift, mask, dst = self._gather[name]
            if engine.kernels_started() and b2.shape[0] * f.count >= GATHER_KERNEL_VALUES:
                from ._gather import gather_field  # (numba: only once this process runs kernels)

                val = np.empty((b2.shape[0], f.count), np.uint32)
                gather_field(b2, byte, shift, mask, dst, val)
            else:  # the reference: one numpy pass per part
                val = np.zeros((b2.shape[0], f.count), np.uint32)
                for j in range(byte.shape[1]):
                    part = b2[:, byte[:, j]].astype(np.uint32)
                    val |= ((part >> shift[:, j]) & mask[:, j]) << dst[:, j]
            unsigned = np.dtype(f.dtype).newbyteorder("=").str.replace("i", "u")
            arr = val.astype(unsigned).view(f.dtype)
            out[name] = arr.reshape(n, -1)
        return out

    def from_fields(self, fields: dict[str, np.ndarray], n: int, k: int) -> np.ndarray:
        t = self.qtype
        nblk = n * (k // t.block_size)
        vals = {}
        for name, f in self.fields.items():
            if name not in fields:
                raise BadInputError(f"{t.name}: field {name!r} missing (have {sorted(fields)})")
            v = np.ascontiguousarray(fields[name])
            if v.size != nblk * f.count:
                raise BadInputError(f"{t.name}: field {name!r} has {v.size} values, expected {nblk * f.count}")
            unsigned = np.dtype(f.dtype).str.replace("i", "u")
            vals[name] = v.reshape(nblk, f.count).view(unsigned).astype(np.uint32)
        out = np.zeros((nblk, t.type_size), np.uint8)
        for b, contribs in enumerate(self._contributors):
            acc = np.zeros(nblk, np.uint32)
            for name, i, s, nb, d in contribs:
                acc |= ((vals[name][:, i] >> d) & ((1 << nb) - 1)) << s
            out[:, b] = acc
        return out.reshape(n, -1)


# ---- helpers the type modules use to declare their parts --------------------------------
def nibble_codes(qs_offset: int, count: int = 32) -> tuple:
    """Q4_0-style codes: element e < 16 is the low nibble of qs[e], e >= 16 the high nibble of qs[e-16]."""
    half = count // 2
    return tuple(((qs_offset + e % half, 4 * (e // half), 4, 0),) for e in range(count))


def qh_bit(qh_offset: int, e: int, dst: int = 4) -> tuple[int, int, int, int]:
    """Bit e of a little-endian u32 at ``qh_offset`` (Q5_0/Q5_1 high bits)."""
    return (qh_offset + e // 8, e % 8, 1, dst)


def k_scale_parts(offset: int) -> tuple[tuple, tuple]:
    """The 12-byte 6-bit scale packing shared by Q4_K and Q5_K: parts of ``sc[8]`` and ``m[8]``.

    Bytes ``scales[0..11]`` at ``offset``; sub-block ``s``, ``j = s - 4``::

        s < 4:  sc = scales[s]   & 63                        m = scales[s+4] & 63
        s >= 4: sc = (scales[j+8] & 15) | (scales[j] >> 6) << 4
                m  = (scales[j+8] >> 4) | (scales[j+4] >> 6) << 4

                 bit 7 6 | 5 4 3 2 1 0
        scales[0..3]:  sc[4..7]>>4 | sc[0..3]
        scales[4..7]:  m[4..7]>>4  | m[0..3]
        scales[8..11]: m[4..7]&15 (high nibble) | sc[4..7]&15 (low nibble)
    """
    sc: list[tuple] = []
    m: list[tuple] = []
    for s in range(8):
        if s < 4:
            sc.append(((offset + s, 0, 6, 0),))
            m.append(((offset + s + 4, 0, 6, 0),))
        else:
            j = s - 4
            sc.append(((offset + j + 8, 0, 4, 0), (offset + j, 6, 2, 4)))
            m.append(((offset + j + 8, 4, 4, 0), (offset + j + 4, 6, 2, 4)))
    return tuple(sc), tuple(m)


#: where Q4_K and Q5_K keep ``d``, ``dmin`` and their 12 scale bytes: the numba helpers they share
#: (``_kquant.k_min_block``, ``_codec.k_scale_min``/``k_scale_put``) read them there, and
#: :func:`k_min_fields` checks each type's ``AT`` against it
K_MIN_HEAD = (0, 2, 4)


def k_min_fields(at) -> list:
    """The fields Q4_K and Q5_K share: ``d`` and ``dmin`` (f16 words at ``at.d``, ``at.dmin``)
    and the 6-bit ``sc`` and ``m`` of the 12 scale bytes at ``at.scales`` (:func:`k_scale_parts`)."""
    if (at.d, at.dmin, at.scales) != K_MIN_HEAD:
        raise AssertionError(f"{at}: the Q4_K/Q5_K numba helpers read d, dmin, scales at bytes {K_MIN_HEAD}")
    sc, m = k_scale_parts(at.scales)
    return [Field("d", "u2", (f16_word(at.d),)), Field("dmin", "u2", (f16_word(at.dmin),)),
            Field("sc", "u1", sc), Field("m", "u1", m)]


def k_scale_table() -> np.ndarray:
    """:func:`k_scale_parts` as an int64 table ``[2 (sc, m), 8 (slot), 2 (part), 4]`` of
    ``(byte, shift, nbits, dst)`` (bytes counted from the start of ``scales``; a slot with one
    part has ``nbits = 0`` in the second), read by the numba kernels and the numpy helpers."""
    t = np.zeros((2, 8, 2, 4), np.int64)
    for f, parts in enumerate(k_scale_parts(0)):
        for s, el in enumerate(parts):
            for p, part in enumerate(el):
                t[f, s, p] = part
    return t


K_SCALES = k_scale_table()


def unpack_scales12(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 ``[..., 12]`` packed as drawn in :func:`k_scale_parts` -> (sc, m) uint8 ``[..., 8]``."""
    b = np.asarray(b, dtype=np.uint8)
    out = np.zeros((2,) + b.shape[:-1] + (8,), np.uint8)
    for f in range(2):
        for s in range(8):
            for byte, shift, nbits, dst in K_SCALES[f, s].tolist():
                if nbits:
                    out[f, ..., s] |= (((b[..., byte] >> shift) & ((1 << nbits) - 1)) << dst).astype(np.uint8)
    return out[0], out[1]


def pack_scales12(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """(sc, m) uint8 ``[..., 8]`` (values < 64) -> uint8 ``[..., 12]``; inverse of
    :func:`unpack_scales12`."""
    vals = (np.asarray(sc, dtype=np.uint8), np.asarray(m, dtype=np.uint8))
    out = np.zeros(np.broadcast_shapes(vals[0].shape, vals[1].shape)[:-1] + (12,), np.uint8)
    for f in range(2):
        for s in range(8):
            for byte, shift, nbits, dst in K_SCALES[f, s].tolist():
                if nbits:
                    out[..., byte] |= (((vals[f][..., s] >> dst) & ((1 << nbits) - 1)) << shift).astype(np.uint8)
    return out
