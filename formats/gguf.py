"""GGUF v2/v3: a lazy, memory-mapped reader and a streaming writer.

File layout (everything little-endian; offsets absolute unless said otherwise)::

    0    "GGUF"            magic, 4 bytes
    4    version   u32     2 or 3 (v1 used 32-bit counts and is refused)
    8    n_tensors u64
    16   n_kv      u64
    24   n_kv key/value pairs, each:
             key    string            (u64 byte length, then UTF-8 bytes, no NUL)
             vtype  u32               (GGUFValueType)
             value                    scalar: its fixed-size bytes; STRING: a string;
                                      ARRAY: item vtype u32, count u64, count items
    ..   n_tensors tensor infos, each:
             name   string
             n_dims u32               1..4 (GGML_MAX_DIMS)
             ne     u64[n_dims]       ggml order: ne[0] is the contiguous axis (K)
             type   u32               ggml type id (formats.types)
             offset u64               relative to the data section, multiple of alignment
    ..   zero padding up to a multiple of `alignment` (general.alignment, default 32)
    data_offset:  tensor data; each tensor at data_offset + offset, zero-padded to alignment

Reading is lazy: ``open_file()`` maps the file, walks the key/value section and the tensor table
and validates every count, length and offset against the bytes that actually remain before
it loops or allocates. Scalar values are decoded at once; arrays are only *located*
(:class:`GGUFArray`), and decode when asked. Arrays of fixed-size items are skipped in O(1);
arrays of strings (a 262k-token vocabulary) are walked by :func:`_walk_strings`, a
vectorized walk with an exact scalar fallback (see its docstring), so opening a model with a
large vocabulary costs milliseconds.

Writing is streamed by :class:`GGUFStreamWriter`: metadata and tensor infos are declared,
the header is written, then tensor data is written one tensor (or one chunk) at a time, so
memory does not grow with the file. Key/value pairs can be copied byte for byte from a
source file, which is how :func:`copy_gguf` reproduces a GGUF exactly.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from . import atomic, qtypes
from .common import Checkpoint, TensorInfo
from .errors import BadInputError, FormatError, OutputError, UnsupportedError
from .qtypes import GGMLType

logger = logging.getLogger(__name__)

__all__ = [
    "GGUF_MAGIC",
    "DEFAULT_ALIGNMENT",
    "MAX_DIMS",
    "SUPPORTED_VERSIONS",
    "GGUFValueType",
    "GGUFArray",
    "KVInfo",
    "GGUFTensorRecord",
    "GGUFFile",
    "GGUFStreamWriter",
    "open_file",
    "copy_gguf",
]

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
SUPPORTED_VERSIONS = (2, 3)
MAX_NAME_BYTES = 63  # GGML_MAX_NAME is 64 including the NUL; llama.cpp refuses longer names
MAX_ARRAY_DEPTH = 8  # arrays of arrays nested deeper than this are refused (ggml reads none)
HEADER_BYTES = 4 + 4 + 8 + 8
_INT64_MAX = (1 << 63) - 1


class GGUFValueType(IntEnum):
    """Metadata value type ids (gguf.h ``enum gguf_type``)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


VT = GGUFValueType


@dataclass(frozen=True)
class _Scalar:
    """A fixed-size value type: its struct code, size, numpy dtype and Python type."""

    code: str
    size: int
    dtype: str
    py: type

    @property
    def st(self) -> struct.Struct:
        return _STRUCTS[self.code]


# fmt: off
#              vtype          struct  bytes  numpy   python
_SCALARS: dict[int, _Scalar] = {
    VT.UINT8:   _Scalar("B", 1, "<u1", int),
    VT.INT8:    _Scalar("b", 1, "<i1", int),
    VT.UINT16:  _Scalar("H", 2, "<u2", int),
    VT.INT16:   _Scalar("h", 2, "<i2", int),
    VT.UINT32:  _Scalar("I", 4, "<u4", int),
    VT.INT32:   _Scalar("i", 4, "<i4", int),
    VT.FLOAT32: _Scalar("f", 4, "<f4", float),
    VT.BOOL:    _Scalar("B", 1, "<u1", bool),   # one byte; any non-zero byte reads as True
    VT.UINT64:  _Scalar("Q", 8, "<u8", int),
    VT.INT64:   _Scalar("q", 8, "<i8", int),
    VT.FLOAT64: _Scalar("d", 8, "<f8", float),
}
# fmt: on
_STRUCTS = {c: struct.Struct("<" + c) for c in "BbHhIifQqd"}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<4sIQQ")
_NE_STRUCTS = {n: struct.Struct(f"<{n}Q") for n in range(1, MAX_DIMS + 1)}

#: The fewest bytes an item of each type can take in a file (bounds claimed counts).
_MIN_ITEM_BYTES: dict[int, int] = {**{vt: s.size for vt, s in _SCALARS.items()}, VT.STRING: 8, VT.ARRAY: 4 + 8}
_MIN_KV_BYTES = 8 + 4 + 1  # empty key, type id, a one-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims, type, offset (dims come on top)

# numpy dtype kind/size -> value type, for writing numpy values without an explicit type
_DTYPE_VT: dict[str, int] = {np.dtype(s.dtype).str: vt for vt, s in _SCALARS.items() if vt != VT.BOOL}
_DTYPE_VT[np.dtype(np.bool_).str] = VT.BOOL


def _vt_name(vt: int) -> str:
    try:
        return VT(vt).name
    except ValueError:
        return f"unknown value type {vt}"


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


# ---------------------------------------------------------------------------------------------
# Walking arrays of strings
# ---------------------------------------------------------------------------------------------
# An array of n strings is n records [len: u64][len bytes]. Finding where it ends is a serial
# walk, slow in Python for a 262k vocabulary (measured: docs/BENCHMARKS.md, "Reading files"). The vectorized
# walk below guesses the record starts and then proves the guess exactly:
#
#   record at q:  | L | 0 | 0 | 0 | 0 | 0 | 0 | 0 | s0 s1 ... s(L-1) |   (L < 256: bytes q+1..q+7 zero)
#
#   1. candidates (_string_candidates): positions q whose bytes q+1..q+7 are all zero. Seven
#      zero bytes always contain one whole 4-byte-aligned zero word k, so only the aligned u32
#      words are scanned (a quarter of the work of a byte scan); q is then one of 4k-4 .. 4k-1,
#      decided from the neighbouring words x = u32[k-1] and y = u32[k+1]:
#
#          bytes:  4k-4 4k-3 4k-2 4k-1 | 4k .. 4k+3 | 4k+4 4k+5 4k+6 4k+7
#          word:        x (k-1)        |   0 (k)    |      y (k+1)
#          q = 4k-4 needs x >> 8 == 0;   q = 4k-3 needs x >> 16 == 0 and y & 0xFF == 0;
#          q = 4k-2 needs x >> 24 == 0 and y & 0xFFFF == 0;   q = 4k-1 needs y & 0xFFFFFF == 0.
#
#      A non-empty record's own length byte rules out the 7 positions before it, so false
#      candidates need 7 NULs inside string data.
#   2. for a candidate q: next(q) = q + 8 + byte[q] (exact, since bytes q+1..q+7 are zero).
#   3. from a position known to be a record start (the array start, then each proven next),
#      a run of candidates c[i], c[i+1], ... with next(c[j]) == c[j+1] is the true chain: every
#      link is checked, nothing is assumed. Where the chain leaves the candidates (a record
#      with L >= 256, or a window edge) one exact scalar step reads the real u64 length; where
#      it skips a false candidate, a binary search finds the next one. Both cost speed only.
#   4. if the chain breaks at nearly every record (runs of empty or NUL strings make every
#      position a candidate), the rest of the window and the whole next one are walked with
#      scalar steps, so a hostile array costs about 2x the scalar walk (measured), not more.
#
# ``_walk_strings_ref`` is the obviously-correct scalar twin; tests compare the two.

_SCAN_MIN = 64  # arrays with fewer strings than this use the scalar walk (numpy has overhead)
_SLOW_STEPS = 256  # after this many chain steps in a window ...
_SLOW_RECORDS_PER_STEP = 8  # ... averaging fewer records a step, the scalar walk is faster
_WINDOW_CAP = 1 << 20  # bytes scanned per window: cache-sized (measured: 8 MiB windows are ~1.5x slower)
_NO_WORD = np.uint32(0xFFFFFFFF)


def _walk_strings_ref(mv: memoryview, pos: int, count: int, limit: int) -> tuple[int, list[int]]:
    """Scalar reference walk over ``count`` strings at ``pos``: ``(end, starts)``; end is -1
    when a length field or string data runs past ``limit``."""
    starts: list[int] = []
    unpack = _U64.unpack_from
    for _ in range(count):
        if pos + 8 > limit:
            return -1, starts
        starts.append(pos)
        pos += 8 + unpack(mv, pos)[0]
    return (pos if pos <= limit else -1), starts


def _string_candidates(seg: np.ndarray) -> np.ndarray:
    """Sorted positions q of ``seg`` (uint8) whose bytes q+1..q+7 are all zero: every such q
    with q + 7 < 4 * (len(seg) // 4), and no other position (see the diagram above). Fastest
    when ``seg`` starts at a 4-byte-aligned address."""
    nw = seg.shape[0] // 4
    if nw == 0:
        return np.zeros(0, dtype=np.intp)
    u = seg[: nw * 4].view("<u4")
    k = np.flatnonzero(u == 0)
    x = u[k - 1]
    x[k == 0] = _NO_WORD  # u[-1] wrapped around: there is no word before the first
    y = u[np.minimum(k + 1, nw - 1)]
    y[k + 1 >= nw] = _NO_WORD
    m = np.empty((k.size, 4), dtype=bool)
    np.less(x, 1 << 8, out=m[:, 0])
    m[:, 1] = (x < (1 << 16)) & ((y & 0xFF) == 0)
    m[:, 2] = (x < (1 << 24)) & ((y & 0xFFFF) == 0)
    m[:, 3] = (y & 0xFFFFFF) == 0
    f = np.flatnonzero(m)  # row-major: f = 4 * row + j, already in increasing q
    q = k[f >> 2] * 4 - 4 + (f & 3)
    return q[q >= 0] if q.size and q[0] < 0 else q


def _walk_strings(
    buf: np.ndarray,
    mv: memoryview,
    pos: int,
    count: int,
    limit: int,
    want_starts: bool = False,
    scan_min: int = _SCAN_MIN,
) -> tuple[int, np.ndarray | None]:
    """Walk ``count`` GGUF strings starting at ``pos`` without reading at or past ``limit``.

    Returns ``(end, starts)``: the offset one past the last string (-1 if the strings run past
    ``limit``), and, when ``want_starts``, the int64 offset of each string's length field.
    ``buf`` is the uint8 array and ``mv`` a memoryview of the same bytes.
    """
    if count < scan_min:
        end, starts = _walk_strings_ref(mv, pos, count, limit)
        return end, (np.asarray(starts, dtype=np.int64) if want_starts and end >= 0 else None)

    unpack = _U64.unpack_from
    pieces: list[np.ndarray] = []
    done = 0
    pos0 = pos
    per_record = 16.0  # bytes per record, refined as we go
    address = buf.ctypes.data
    skip_next = False
    while done < count:
        if limit - pos < 8:
            return -1, None
        base = pos - (address + pos) % 4  # the window starts 4-byte aligned (fast u32 view)
        # at least one whole length field past pos, so every window makes progress
        w = max(pos - base + 8, int(min(limit - base, _WINDOW_CAP, (count - done) * per_record * 1.25 + 4096)))
        seg = buf[base : base + w]
        cur = pos - base
        scalar = skip_next  # the candidates did not pay in the last window: walk this one scalar
        skip_next = False
        if not scalar:
            cand = _string_candidates(seg)
            nxt = cand + 8 + seg[cand].astype(np.intp)
            breaks = np.flatnonzero(nxt[:-1] != cand[1:])  # the chain c[j] -> c[j+1] breaks after j
            last = cand.size - 1
            steps, done_before = 0, done
            while done < count and cur + 8 <= w:
                steps += 1
                if steps > _SLOW_STEPS and done - done_before < _SLOW_RECORDS_PER_STEP * steps:
                    scalar = skip_next = True  # the chain keeps breaking (empty or NUL strings)
                    break
                n = unpack(mv, base + cur)[0]
                if n < 256:
                    i = int(np.searchsorted(cand, cur))
                    if i <= last and cand[i] == cur:
                        k = int(np.searchsorted(breaks, i))
                        j = int(breaks[k]) if k < breaks.size else last
                        take = min(j - i + 1, count - done)
                        if want_starts:
                            pieces.append(cand[i : i + take] + base)
                        done += take
                        cur = int(nxt[i + take - 1])
                        continue
                # a record the candidates do not cover (length >= 256, or at the window edge)
                if want_starts:
                    pieces.append(np.array([base + cur], dtype=np.intp))
                cur += 8 + n
                done += 1
        if scalar:
            rest = []
            while done < count and cur + 8 <= w:
                if want_starts:
                    rest.append(base + cur)
                cur += 8 + unpack(mv, base + cur)[0]
                done += 1
            pieces.append(np.asarray(rest, dtype=np.intp))
        pos = base + cur
        per_record = max(8.0, (pos - pos0) / max(done, 1))
    if pos > limit:
        return -1, None
    starts = None
    if want_starts:
        starts = np.concatenate(pieces).astype(np.int64, copy=False) if pieces else np.zeros(0, np.int64)
    return pos, starts


# ---------------------------------------------------------------------------------------------
# Bounded parsing of values
# ---------------------------------------------------------------------------------------------


class _Parser:
    """Bounds-checked reads from a uint8 buffer (a mapped file, or one key/value pair)."""

    def __init__(self, buf: np.ndarray, path: str):
        self.buf = buf
        self.mv = memoryview(buf)
        self.size = int(buf.shape[0])
        self.path = path

    def fail(self, message: str, where: str | None = None) -> FormatError:
        return FormatError(message, path=self.path, where=where)

    def need(self, pos: int, n: int, where: str | None, what: str) -> None:
        if n > self.size - pos:
            raise self.fail(
                f"truncated: {what} needs {n} bytes at offset {pos}, "
                f"but only {max(self.size - pos, 0)} remain",
                where,
            )

    def u32(self, pos: int, where: str | None, what: str) -> int:
        self.need(pos, 4, where, what)
        return _U32.unpack_from(self.mv, pos)[0]

    def u64(self, pos: int, where: str | None, what: str) -> int:
        self.need(pos, 8, where, what)
        return _U64.unpack_from(self.mv, pos)[0]

    def string_bytes(self, pos: int, where: str | None, what: str) -> tuple[bytes, int]:
        n = self.u64(pos, where, f"{what} length")
        pos += 8
        if n > self.size - pos:
            raise self.fail(
                f"{what} claims {n} bytes at offset {pos}, past the end "
                f"({self.size - pos} bytes remain)",
                where,
            )
        return bytes(self.mv[pos : pos + n]), pos + n

    def name(self, pos: int, where: str, what: str) -> tuple[str, int]:
        """A key or tensor name: strict UTF-8."""
        raw, end = self.string_bytes(pos, where, what)
        try:
            return raw.decode("utf-8"), end
        except UnicodeDecodeError as e:
            raise self.fail(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start}): {raw[:64]!r}", where) from None

    def vtype(self, pos: int, where: str, what: str) -> int:
        vt = self.u32(pos, where, what)
        if vt not in _MIN_ITEM_BYTES:
            raise self.fail(f"unknown metadata value type {vt} at offset {pos} (known: 0..12)", where)
        return vt

    def value(self, vt: int, pos: int, where: str, depth: int = 0) -> tuple[Any, int]:
        """Decode a scalar or locate an array at ``pos``: ``(value, end)``."""
        sc = _SCALARS.get(vt)
        if sc is not None:
            self.need(pos, sc.size, where, VT(vt).name.lower())
            return sc.py(sc.st.unpack_from(self.mv, pos)[0]), pos + sc.size
        if vt == VT.STRING:
            raw, end = self.string_bytes(pos, where, "string value")
            return raw.decode("utf-8", "surrogateescape"), end
        # ARRAY
        item_vt, count, data, end = self.array(pos, where, depth)
        return GGUFArray(self, item_vt, count, data, end), end

    def array(self, pos: int, where: str, depth: int) -> tuple[int, int, int, int]:
        """Locate an array at ``pos``: ``(item_vtype, count, data_start, end)``, bounded."""
        if depth >= MAX_ARRAY_DEPTH:
            raise self.fail(f"arrays nested more than {MAX_ARRAY_DEPTH} deep", where)
        item_vt = self.vtype(pos, where, "array item type")
        count = self.u64(pos + 4, where, "array count")
        data = pos + 12
        remaining = self.size - data
        least = _MIN_ITEM_BYTES[item_vt]
        if count > remaining // least:
            raise self.fail(
                f"array of {count} {_vt_name(item_vt).lower()} items needs at least {count * least} bytes "
                f"at offset {data}, but only {remaining} remain",
                where,
            )
        sc = _SCALARS.get(item_vt)
        if sc is not None:
            return item_vt, count, data, data + count * sc.size
        if item_vt == VT.STRING:
            end, _ = _walk_strings(self.buf, self.mv, data, count, self.size)
            if end < 0:
                raise self.fail(
                    f"array of {count} strings at offset {data} runs past the end of the data", where
                )
            return item_vt, count, data, end
        end = data
        for i in range(count):
            _, _, _, end = self.array(end, f"{where}[{i}]", depth + 1)
        return item_vt, count, data, end

    def kv(self, pos: int, index: int) -> tuple[str, int, Any, int]:
        """One key/value pair at ``pos``: ``(key, vtype, value, end)``."""
        key, p = self.name(pos, f"metadata pair #{index}", "key")
        where = f"metadata {key!r}"
        vt = self.vtype(p, where, "value type")
        value, end = self.value(vt, p + 4, where)
        return key, vt, value, end


class GGUFArray:
    """A metadata array, located but not decoded until asked.

    ``len(a)``, ``a[i]``, ``a[i:j]`` (a list), ``a.tolist()``, ``np.asarray(a)`` (zero-copy
    read-only view for numeric items, an object array for strings), iteration, ``==`` with a
    list/tuple or another GGUFArray. ``item_type`` is a :class:`GGUFValueType`;
    ``raw_payload()`` is the array's bytes as stored (item type, count, items).
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, parser: _Parser, item_type: int, count: int, data: int, end: int):
        self._p = parser
        self.item_type = VT(item_type)
        self.count = count
        self.data_offset = data  # first item
        self.end = end  # one past the last item
        self._starts: np.ndarray | None = None  # per-item offsets (strings, nested arrays)

    # -- where it is ------------------------------------------------------------------------
    @property
    def offset(self) -> int:
        """Offset of the array header (item type, count), 12 bytes before the first item."""
        return self.data_offset - 12

    @property
    def nbytes(self) -> int:
        return self.end - self.data_offset

    def raw_payload(self) -> np.ndarray:
        """The array as stored (item type u32, count u64, items): a zero-copy uint8 view."""
        return self._p.buf[self.offset : self.end]

    # -- decoding ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.count

    def _item_starts(self) -> np.ndarray:
        if self._starts is None:
            p = self._p
            if self.item_type == VT.STRING:
                end, starts = _walk_strings(p.buf, p.mv, self.data_offset, self.count, p.size, want_starts=True)
            else:  # nested arrays
                pos, out = self.data_offset, []
                for _ in range(self.count):
                    out.append(pos)
                    _, _, _, pos = p.array(pos, "nested array", 1)
                end, starts = pos, np.asarray(out, dtype=np.int64)
            if end != self.end or starts is None:
                raise p.fail(f"array at offset {self.offset} changed since the file was opened", "metadata")
            self._starts = starts
        return self._starts

    def to_numpy(self) -> np.ndarray:
        """Numeric items as a read-only numpy array (a zero-copy view; BOOL as a bool copy)."""
        sc = _SCALARS.get(self.item_type)
        if sc is None:
            raise TypeError(f"an array of {self.item_type.name} has no numpy form; use tolist()")
        view = self._p.buf[self.data_offset : self.end].view(np.dtype(sc.dtype))
        return view != 0 if self.item_type == VT.BOOL else view

    def _item(self, i: int) -> Any:
        sc = _SCALARS.get(self.item_type)
        p = self._p
        if sc is not None:
            return sc.py(sc.st.unpack_from(p.mv, self.data_offset + i * sc.size)[0])
        s = int(self._item_starts()[i])
        if self.item_type == VT.STRING:
            n = _U64.unpack_from(p.mv, s)[0]
            return bytes(p.mv[s + 8 : s + 8 + n]).decode("utf-8", "surrogateescape")
        item_vt, count, data, end = p.array(s, "nested array", 1)
        return GGUFArray(p, item_vt, count, data, end)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(self.count))]
        i = int(index)
        if i < 0:
            i += self.count
        if not 0 <= i < self.count:
            raise IndexError(f"index {index} out of range for an array of {self.count}")
        return self._item(i)

    def tolist(self) -> list:
        if self.item_type in _SCALARS:
            return self.to_numpy().tolist()
        if self.item_type == VT.STRING:
            starts = self._item_starts()
            if not self.count:
                return []
            ends = np.empty_like(starts)
            ends[:-1] = starts[1:]
            ends[-1] = self.end
            base = int(starts[0])
            blob = self._p.buf[base : self.end].tobytes()
            lo = (starts + 8 - base).tolist()
            hi = (ends - base).tolist()
            return [blob[a:b].decode("utf-8", "surrogateescape") for a, b in zip(lo, hi)]
        return [self._item(i).tolist() for i in range(self.count)]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.tolist())

    def __array__(self, dtype=None, copy=None):
        if self.item_type in _SCALARS:
            a = self.to_numpy()
        else:
            a = np.empty(self.count, dtype=object)
            a[:] = self.tolist()
        if dtype is not None:
            a = a.astype(dtype)
        elif copy:
            a = a.copy()
        return a

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GGUFArray):
            return self.item_type == other.item_type and np.array_equal(self.raw_payload(), other.raw_payload())
        if isinstance(other, (list, tuple)):
            return self.tolist() == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"GGUFArray({self.item_type.name}, count={self.count}, offset={self.offset})"


# ---------------------------------------------------------------------------------------------
# The reader
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVInfo:
    """Where one key/value pair lives: ``[start, end)`` covers key, type id and value."""

    key: str
    vtype: GGUFValueType
    item_type: GGUFValueType | None  # arrays: the item type
    count: int | None  # arrays: number of items
    start: int
    value_start: int
    end: int

    @property
    def raw_range(self) -> tuple[int, int]:
        return self.start, self.end


@dataclass(frozen=True)
class GGUFTensorRecord:
    """One entry of the tensor-info table, as stored."""

    name: str
    ne: tuple[int, ...]  # ggml order: ne[0] is the contiguous axis
    type: GGMLType
    rel_offset: int  # relative to data_offset, as stored
    start: int  # byte range of this entry in the table
    end: int


class GGUFFile(Checkpoint):
    """A GGUF v2/v3 file, memory-mapped and validated (see the module docstring)."""

    kind = "gguf"

    def __init__(self, path: str | os.PathLike):
        super().__init__(path)
        try:
            self.file_size = os.path.getsize(self.path)
            if self.file_size == 0:
                raise FormatError("empty file, not a GGUF file", path=self.path)
            self._map: np.memmap | None = np.memmap(self.path, dtype=np.uint8, mode="r")
        except OSError as e:
            raise BadInputError(f"cannot open: {e.strerror or e}", path=self.path) from None
        p = self._parser = _Parser(np.asarray(self._map), self.path)
        self._parse_header(p)
        self._parse_kv(p)
        self._parse_tensor_table(p)
        logger.debug(
            "%s: GGUF v%d, %d metadata pairs, %d tensors, data at %d",
            self.path, self.version, len(self.kv_infos), len(self._tensors), self.data_offset,
        )

    # -- parsing ------------------------------------------------------------------------------
    def _parse_header(self, p: _Parser) -> None:
        size = self.file_size
        if size < 4:
            raise p.fail(f"truncated header: {size} bytes, a GGUF header needs {HEADER_BYTES}", "header")
        magic = bytes(p.mv[:4])
        if magic != GGUF_MAGIC:
            raise p.fail(f"not a GGUF file: magic {magic!r}, expected {GGUF_MAGIC!r}", "header")
        version = p.u32(4, "header", "version")
        if version not in SUPPORTED_VERSIONS:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if version & 0xFFFF == 0 and swapped in SUPPORTED_VERSIONS:
                raise UnsupportedError(
                    f"big-endian GGUF (version field reads {version:#010x}) is not supported", self.path, "header"
                )
            if version == 1:
                raise UnsupportedError(
                    "GGUF version 1 is no longer supported (it used 32-bit counts); re-convert the model "
                    "with a current llama.cpp", self.path, "header",
                )
            raise UnsupportedError(f"unsupported GGUF version {version} (supported: 2, 3)", self.path, "header")
        p.need(0, HEADER_BYTES, "header", "GGUF header")
        _, self.version, n_tensors, n_kv = _HEADER.unpack_from(p.mv, 0)
        rest = size - HEADER_BYTES
        if n_kv > rest // _MIN_KV_BYTES:
            raise p.fail(
                f"kv_count {n_kv} is impossibly large: each pair takes at least {_MIN_KV_BYTES} bytes "
                f"and only {rest} follow the header", "header.kv_count",
            )
        if n_tensors > (rest - n_kv * _MIN_KV_BYTES) // _MIN_TENSOR_INFO_BYTES:
            raise p.fail(
                f"tensor_count {n_tensors} is impossibly large: each tensor info takes at least "
                f"{_MIN_TENSOR_INFO_BYTES} bytes and the file has {size} bytes", "header.tensor_count",
            )
        self._n_tensors, self._n_kv = n_tensors, n_kv

    def _parse_kv(self, p: _Parser) -> None:
        infos: dict[str, KVInfo] = {}
        values: dict[str, Any] = {}
        pos = HEADER_BYTES
        for i in range(self._n_kv):
            key, vt, value, end = p.kv(pos, i)
            if key in infos:
                raise p.fail(f"duplicate key (first at offset {infos[key].start}, again at {pos})", f"metadata {key!r}")
            arr = value if isinstance(value, GGUFArray) else None
            value_start = pos + 8 + len(key.encode("utf-8")) + 4
            infos[key] = KVInfo(
                key, VT(vt), arr.item_type if arr else None, arr.count if arr else None, pos, value_start, end
            )
            values[key] = value
            pos = end
        self.kv_section = (HEADER_BYTES, pos)
        self.kv_infos: Mapping[str, KVInfo] = MappingProxyType(infos)
        self._values = values
        self._metadata = MappingProxyType(values)
        self.alignment = DEFAULT_ALIGNMENT
        a = infos.get("general.alignment")
        if a is not None:
            where = "metadata 'general.alignment'"
            if a.vtype != VT.UINT32:
                raise p.fail(f"must be uint32, found {a.vtype.name.lower()}", where)
            align = values["general.alignment"]
            if align <= 0 or align & (align - 1):
                raise p.fail(f"alignment {align} is not a power of two", where)
            self.alignment = align

    def _parse_tensor_table(self, p: _Parser) -> None:
        pos = self.kv_section[1]
        records: list[GGUFTensorRecord] = []
        seen: dict[str, int] = {}
        align = self.alignment
        mv, size = p.mv, p.size
        u32, u64 = _U32.unpack_from, _U64.unpack_from
        for i in range(self._n_tensors):
            # fast path: bounds are checked inline; the helpers only run to raise
            start = pos
            if pos + 8 > size:
                p.need(pos, 8, f"tensor #{i}", "tensor name length")
            n = u64(mv, pos)[0]
            if n > size - pos - 8:
                p.name(pos, f"tensor #{i}", "tensor name")  # raises: name past the end
            raw = mv[pos + 8 : pos + 8 + n].tobytes()
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                p.name(pos, f"tensor #{i}", "tensor name")  # raises with the reason
                raise
            pos += 8 + n
            where = f"tensor {name!r}"
            if name in seen:
                raise p.fail(f"duplicate tensor name (entries #{seen[name]} and #{i})", where)
            seen[name] = i
            if pos + 4 > size:
                p.need(pos, 4, where, "n_dims")
            n_dims = u32(mv, pos)[0]
            if n_dims == 0 or n_dims > MAX_DIMS:
                raise p.fail(f"has {n_dims} dimensions; GGUF tensors have 1 to {MAX_DIMS}", where)
            pos += 4
            if pos + 8 * n_dims + 12 > size:
                p.need(pos, 8 * n_dims + 12, where, "dimensions, type and offset")
            ne = _NE_STRUCTS[n_dims].unpack_from(mv, pos)
            pos += 8 * n_dims
            n_elements = 1
            for d in ne:
                n_elements *= d
            if n_elements > _INT64_MAX or 0 in ne:
                for j, d in enumerate(ne):
                    if d == 0 or d > _INT64_MAX:
                        raise p.fail(f"dimension ne[{j}] = {d} is invalid (must be 1 .. 2^63-1)", where)
                raise p.fail(f"element count of ne={list(ne)} overflows int64", where)
            type_id = u32(mv, pos)[0]
            t = qtypes.BY_ID.get(type_id)
            if t is None:
                try:
                    qtypes.get(type_id)
                except UnsupportedError as e:
                    raise UnsupportedError(e.detail, self.path, where) from None
            if ne[0] % t.block_size:
                raise p.fail(
                    f"ne[0] = {ne[0]} is not a multiple of the {t.name} block size {t.block_size}", where
                )
            rel = u64(mv, pos + 4)[0]
            pos += 12
            if rel % align:
                raise p.fail(f"data offset {rel} is not a multiple of the alignment {align}", where)
            records.append(GGUFTensorRecord(name, ne, t, rel, start, pos))
        self.tensor_table = (self.kv_section[1], pos)
        self.data_offset = _align(pos, align)
        size = self.file_size
        tensors = []
        for r in records:
            nbytes = r.ne[0] // r.type.block_size * r.type.type_size
            for d in r.ne[1:]:
                nbytes *= d
            off = self.data_offset + r.rel_offset
            if off + nbytes > size:
                raise p.fail(
                    f"data [{off}, {off + nbytes}) lies past the end of the file ({size} bytes): truncated?",
                    f"tensor {r.name!r}",
                )
            tensors.append(TensorInfo(r.name, tuple(reversed(r.ne)), r.type, off, nbytes, self.path))
        ordered = sorted(tensors, key=lambda t: t.offset)
        for a, b in zip(ordered, ordered[1:]):
            if b.offset < a.offset + a.nbytes:
                raise p.fail(
                    f"data [{b.offset}, {b.offset + b.nbytes}) overlaps tensor {a.name!r} "
                    f"[{a.offset}, {a.offset + a.nbytes})",
                    f"tensor {b.name!r}",
                )
        self.tensor_records: list[GGUFTensorRecord] = records
        self._ne = {r.name: r.ne for r in records}
        self._set_tensors(tensors)

    # -- the Checkpoint surface -------------------------------------------------------------
    @property
    def metadata(self) -> Mapping[str, Any]:
        """Ordered, read-only: key -> value (scalars decoded; arrays as lazy GGUFArray)."""
        return self._metadata

    @property
    def architecture(self) -> str | None:
        arch = self._values.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def hyperparameters(self) -> dict[str, Any]:
        """llama.cpp's names: n_layer, n_embd, n_head, n_head_kv, n_ff, n_ctx, n_vocab, file_type,
        quantization_version (None when absent; per-layer arrays as lists)."""
        from .arch import keys as arch_keys

        v = self._values
        arch = self.architecture or ""

        def get(key: str) -> Any:
            x = v.get(key)
            return x.tolist() if isinstance(x, GGUFArray) else x

        out = {name: get(arch_keys.gguf_key(name, arch)) for name in arch_keys.INSPECT}
        if out["n_head_kv"] is None:
            out["n_head_kv"] = out["n_head"]  # llama.cpp's default
        tokens = v.get("tokenizer.ggml.tokens")
        if isinstance(tokens, GGUFArray):
            out["n_vocab"] = len(tokens)
        out["file_type"] = get("general.file_type")
        out["quantization_version"] = get("general.quantization_version")
        return out

    def _mapped(self) -> np.memmap:
        if self._map is None:
            raise BadInputError("the file is closed", path=self.path)
        return self._map

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes: a read-only uint8 np.memmap view of the file (no copy)."""
        info = self.tensor(name)
        return self._mapped()[info.offset : info.offset + info.nbytes]

    def ne(self, name: str) -> tuple[int, ...]:
        """ggml dims of a tensor as stored (ne[0] contiguous): the reverse of ``shape``."""
        self.tensor(name)
        return self._ne[name]

    # -- raw bytes for byte-exact export ------------------------------------------------------
    def bytes_at(self, start: int, end: int) -> np.ndarray:
        """A zero-copy read-only uint8 view of ``[start, end)``."""
        return self._mapped()[start:end]

    def kv_bytes(self, key: str) -> np.ndarray:
        """One key/value pair exactly as stored (key, type id, value)."""
        try:
            info = self.kv_infos[key]
        except KeyError:
            raise BadInputError(f"no metadata key {key!r}", path=self.path) from None
        return self.bytes_at(*info.raw_range)

    def kv_section_bytes(self) -> np.ndarray:
        return self.bytes_at(*self.kv_section)

    def tensor_table_bytes(self) -> np.ndarray:
        return self.bytes_at(*self.tensor_table)

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Drop this handle's mapping. Views handed out stay valid (they keep the map alive)."""
        self._map = None

    def __repr__(self) -> str:
        return f"GGUFFile({self.path!r}, v{self.version}, {len(self.kv_infos)} kv, {len(self._tensors)} tensors)"


def open_file(path: str | os.PathLike) -> GGUFFile:
    """Open and validate a GGUF v2/v3 file (lazy: no tensor data or array is read)."""
    return GGUFFile(path)


# ---------------------------------------------------------------------------------------------
# Encoding values
# ---------------------------------------------------------------------------------------------


def _infer_vtype(value: Any, where: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        return VT.BOOL
    if isinstance(value, np.generic):
        vt = _DTYPE_VT.get(value.dtype.newbyteorder("<").str)
        if vt is not None:
            return vt
    if isinstance(value, int):
        if -(1 << 31) <= value < (1 << 31):
            return VT.INT32
        if -(1 << 63) <= value < (1 << 63):
            return VT.INT64
        return VT.UINT64
    if isinstance(value, float):
        return VT.FLOAT32  # gguf-py's convention; pass vtype=FLOAT64 to keep a double
    if isinstance(value, (str, bytes)):
        return VT.STRING
    if isinstance(value, (list, tuple, np.ndarray, GGUFArray)):
        return VT.ARRAY
    raise BadInputError(f"cannot store a {type(value).__name__} in GGUF metadata", where=where)


def _infer_item_type(value: Any, where: str) -> int:
    if isinstance(value, GGUFArray):
        return value.item_type
    if isinstance(value, np.ndarray):
        if value.dtype == np.bool_:
            return VT.BOOL
        if value.dtype.kind in "US":
            return VT.STRING
        vt = _DTYPE_VT.get(value.dtype.newbyteorder("<").str)
        if vt is None:
            raise BadInputError(f"no GGUF item type for numpy dtype {value.dtype}", where=where)
        return vt
    if not len(value):
        raise BadInputError("an empty array needs an explicit item_type", where=where)
    kinds = {_infer_vtype(x, where) for x in value}
    if kinds <= {VT.INT32, VT.INT64, VT.UINT64}:  # Python ints: the narrowest type that holds all
        return max(kinds, key=[VT.INT32, VT.INT64, VT.UINT64].index)
    if len(kinds) != 1:
        raise BadInputError(f"array items have mixed types: {sorted(_vt_name(k) for k in kinds)}", where=where)
    return kinds.pop()


def _encode_string(value: Any, where: str) -> bytes:
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogateescape")
    elif isinstance(value, (bytes, bytearray, memoryview, np.bytes_)):
        raw = bytes(value)
    else:
        raise BadInputError(f"expected a string, got {type(value).__name__}", where=where)
    return _U64.pack(len(raw)) + raw


def _encode_scalar(vt: int, value: Any, where: str) -> bytes:
    sc = _SCALARS[vt]
    if vt == VT.BOOL:
        return b"\x01" if bool(value) else b"\x00"
    try:
        if sc.py is int and int(value) != value:
            raise ValueError("not an integer")
        return sc.st.pack(sc.py(value))
    except (struct.error, ValueError, TypeError, OverflowError) as e:
        raise BadInputError(f"cannot store {value!r} as {VT(vt).name.lower()}: {e}", where=where) from None


def _as_item_array(value: Any, dt: np.dtype, tname: str, where: str) -> np.ndarray:
    """``value`` (list, tuple or ndarray) as ``dt``, refusing anything that would not round-trip."""
    unfit = BadInputError(f"items do not fit in {tname}", where=where)
    if not isinstance(value, np.ndarray):
        try:
            out = np.array(value, dtype=dt)
        except (ValueError, TypeError, OverflowError) as e:
            raise BadInputError(f"cannot store the items as {tname}: {e}", where=where) from None
        if out.ndim != 1 or (dt.kind in "iu" and out.tolist() != list(value)):
            raise unfit
        return out
    if value.ndim != 1:
        raise BadInputError(f"arrays must be one-dimensional, got shape {value.shape}", where=where)
    if dt.kind in "iu" and value.size:
        info = np.iinfo(dt)
        if value.dtype.kind in "iu":
            if int(value.min()) < info.min or int(value.max()) > info.max:
                raise unfit
        elif value.dtype.kind == "f":
            if not np.isfinite(value).all() or (value != np.trunc(value)).any() \
                    or value.min() < info.min or value.max() > info.max:
                raise unfit
        elif value.dtype.kind != "b":
            raise BadInputError(f"cannot store {value.dtype} items as {tname}", where=where)
    try:
        return value.astype(dt)
    except (ValueError, TypeError) as e:
        raise BadInputError(f"cannot store the items as {tname}: {e}", where=where) from None


def _encode_array(value: Any, item_type: int | None, where: str, depth: int = 0) -> bytes:
    """Array payload: item type u32, count u64, items."""
    if depth >= MAX_ARRAY_DEPTH:
        raise BadInputError(f"arrays nested more than {MAX_ARRAY_DEPTH} deep", where=where)
    if isinstance(value, GGUFArray) and item_type in (None, value.item_type):
        return value.raw_payload().tobytes()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, np.ndarray, GGUFArray)):
        raise BadInputError(f"expected a list, tuple or numpy array, got {type(value).__name__}", where=where)
    it = _infer_item_type(value, where) if item_type is None else int(item_type)
    if it not in _MIN_ITEM_BYTES:
        raise BadInputError(f"unknown item type {it}", where=where)
    head = _U32.pack(it) + _U64.pack(len(value))
    sc = _SCALARS.get(it)
    if sc is not None:
        if it == VT.BOOL:
            return head + (np.asarray(value) != 0).astype(np.uint8).tobytes()
        return head + _as_item_array(value, np.dtype(sc.dtype), VT(it).name.lower(), where).tobytes()
    if it == VT.STRING:
        if isinstance(value, list) and all(type(x) is str for x in value):  # a vocabulary: one pass, no checks per item
            raw = [x.encode("utf-8", "surrogateescape") for x in value]
            pack = _U64.pack
            return head + b"".join([pack(len(r)) + r for r in raw])
        return head + b"".join(_encode_string(x, where) for x in value)
    return head + b"".join(_encode_array(x, None, where, depth + 1) for x in value)


# ---------------------------------------------------------------------------------------------
# The streaming writer
# ---------------------------------------------------------------------------------------------


@dataclass
class _PendingTensor:
    name: str
    ne: tuple[int, ...]
    type: GGMLType
    nbytes: int
    offset: int  # relative to the data section
    written: int = 0


class GGUFStreamWriter:
    """Write a GGUF file in one pass, with memory bounded by the metadata, not the tensors.

    Sequence: ``add_kv``/``add_raw_kv``/``copy_kv`` and ``add_tensor_info`` (any order between
    them; the file keeps each list's order), then ``write_header()``, then
    ``write_tensor_data(name, data)`` for every tensor in data order (the declaration order
    unless explicit offsets say otherwise), then ``close()``. ``close()`` before every tensor is
    complete removes the partial file and raises :class:`OutputError`: a file never claims
    more data than it holds. The bytes go to a temporary file beside ``path``
    (:mod:`formats.atomic`), which ``close()`` fsyncs and renames to ``path``: a killed writer
    never leaves a truncated GGUF at the target. An existing ``path`` is replaced only with
    ``force=True`` (the default, as for ``open(path, "wb")``).

    Tensor data is padded to ``alignment`` after every tensor, the last one included, as
    ggml's and gguf-py's writers do. If ``arch`` is given, ``general.architecture`` is the
    first pair; if ``alignment`` is not 32 and no ``general.alignment`` pair was added, one is
    appended at ``write_header()``.
    """

    def __init__(self, path: str | os.PathLike, arch: str | None = None, alignment: int = DEFAULT_ALIGNMENT,
                 version: int = 3, force: bool = True):
        self.path = os.fspath(path)
        self.force = force
        self._tmp: Path | None = None
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise BadInputError(f"alignment {alignment!r} is not a power of two", path=self.path)
        if version not in SUPPORTED_VERSIONS:
            raise UnsupportedError(f"cannot write GGUF version {version} (supported: 2, 3)", path=self.path)
        self.alignment = alignment
        self.version = version
        self._kv: list[tuple[str, Any]] = []  # (key, bytes-like of the whole pair)
        self._keys: set[str] = set()
        self._tensors: list[_PendingTensor] = []
        self._by_name: dict[str, _PendingTensor] = {}
        self._end = 0  # end of the declared data (relative)
        self._state = "declare"
        self._f = None
        self._order: list[_PendingTensor] = []
        self._next = 0  # index into _order of the tensor being written
        self._pos = 0  # bytes written to the data section
        self.data_offset: int | None = None
        if arch is not None:
            self.add_kv("general.architecture", arch, VT.STRING)

    # -- metadata -----------------------------------------------------------------------------
    def _check_declaring(self, what: str) -> None:
        if self._state != "declare":
            raise BadInputError(f"cannot {what} after write_header()", path=self.path)

    def _add_pair(self, key: str, pair: Any, vtype: int, value: Any) -> None:
        if key in self._keys:
            raise BadInputError("duplicate metadata key", path=self.path, where=f"metadata {key!r}")
        if key == "general.alignment" and (vtype != VT.UINT32 or value != self.alignment):
            raise BadInputError(
                f"general.alignment must be uint32 {self.alignment} (the writer's alignment), got "
                f"{_vt_name(vtype).lower()} {value!r}", path=self.path, where=f"metadata {key!r}",
            )
        self._keys.add(key)
        self._kv.append((key, pair))

    def add_kv(self, key: str, value: Any, vtype: int | None = None, item_type: int | None = None) -> None:
        """Add one pair. ``vtype`` (a GGUFValueType) is inferred when omitted: bool -> BOOL,
        int -> INT32 (INT64/UINT64 if it does not fit), float -> FLOAT32, str/bytes -> STRING,
        list/tuple/ndarray/GGUFArray -> ARRAY with ``item_type`` inferred from the items."""
        self._check_declaring("add metadata")
        where = f"metadata {key!r}"
        if not isinstance(key, str):
            raise BadInputError("keys must be str", path=self.path, where=where)
        vt = _infer_vtype(value, where) if vtype is None else int(vtype)
        try:
            if vt in _SCALARS:
                payload = _encode_scalar(vt, value, where)
            elif vt == VT.STRING:
                payload = _encode_string(value, where)
            elif vt == VT.ARRAY:
                payload = _encode_array(value, item_type, where)
            else:
                raise BadInputError(f"unknown value type {vt}", where=where)
        except BadInputError as e:
            raise BadInputError(e.detail, path=self.path, where=where) from None
        pair = _encode_string(key, where) + _U32.pack(vt) + payload
        self._add_pair(key, pair, vt, value)

    def add_raw_kv(self, raw: bytes | bytearray | memoryview | np.ndarray) -> str:
        """Add one pair given as its stored bytes (key, type id, value), verbatim. The bytes
        are parsed and must hold exactly one well-formed pair. Returns the key."""
        self._check_declaring("add metadata")
        buf = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1)
        if buf.dtype != np.uint8:
            buf = buf.view(np.uint8)
        p = _Parser(buf, self.path + " (raw metadata pair)")
        key, vt, value, end = p.kv(0, len(self._kv))
        if end != buf.shape[0]:
            raise BadInputError(f"raw pair holds {buf.shape[0] - end} bytes after its value",
                                path=self.path, where=f"metadata {key!r}")
        self._add_pair(key, buf, vt, value)
        return key

    def copy_kv(self, src: GGUFFile, key: str) -> None:
        """Copy one pair from ``src`` byte for byte."""
        self.add_raw_kv(src.kv_bytes(key))

    # -- tensors ------------------------------------------------------------------------------
    def add_tensor_info(
        self,
        name: str,
        shape: Sequence[int] | None = None,
        type: GGMLType | int | str = "F32",  # noqa: A002 - the registry's word
        *,
        ne: Sequence[int] | None = None,
        nbytes: int | None = None,
        offset: int | None = None,
    ) -> int:
        """Declare a tensor: ``shape`` in numpy order (a matrix is (N, K)) or ``ne`` in ggml
        order. ``nbytes``, when given, must match the type and shape. ``offset`` (relative to
        the data section) defaults to the aligned end of the data declared so far. Returns the
        relative offset."""
        self._check_declaring("add tensors")
        where = f"tensor {name!r}"
        if not isinstance(name, str) or not name:
            raise BadInputError("tensor names must be non-empty str", path=self.path, where=where)
        if len(name.encode("utf-8")) > MAX_NAME_BYTES:
            raise BadInputError(f"name longer than {MAX_NAME_BYTES} bytes (llama.cpp refuses it)",
                                path=self.path, where=where)
        if name in self._by_name:
            raise BadInputError("duplicate tensor name", path=self.path, where=where)
        if (shape is None) == (ne is None):
            raise BadInputError("give exactly one of shape= and ne=", path=self.path, where=where)
        dims = tuple(int(d) for d in (ne if ne is not None else reversed(tuple(shape))))
        if not 1 <= len(dims) <= MAX_DIMS or any(d < 1 for d in dims):
            raise BadInputError(f"ne={list(dims)}: need 1 to {MAX_DIMS} dims, each >= 1", path=self.path, where=where)
        try:
            t = qtypes.get(type)
        except UnsupportedError as e:
            raise UnsupportedError(e.detail, path=self.path, where=where) from None
        if dims[0] % t.block_size:
            raise BadInputError(f"ne[0] = {dims[0]} is not a multiple of the {t.name} block size {t.block_size}",
                                path=self.path, where=where)
        n_el = 1
        for d in dims:
            n_el *= d
        if n_el > _INT64_MAX:
            raise BadInputError(f"element count of ne={list(dims)} overflows int64", path=self.path, where=where)
        size = n_el // t.block_size * t.type_size
        if nbytes is not None and int(nbytes) != size:
            raise BadInputError(f"nbytes {nbytes} does not match {t.name} ne={list(dims)} ({size} bytes)",
                                path=self.path, where=where)
        if offset is None:
            offset = _align(self._end, self.alignment)
        elif offset < 0 or offset % self.alignment:
            raise BadInputError(f"offset {offset} is not a non-negative multiple of {self.alignment}",
                                path=self.path, where=where)
        rec = _PendingTensor(name, dims, t, size, int(offset))
        self._tensors.append(rec)
        self._by_name[name] = rec
        self._end = max(self._end, rec.offset + size)
        return rec.offset

    # -- writing ------------------------------------------------------------------------------
    def _header_bytes(self) -> list[Any]:
        parts: list[Any] = [_HEADER.pack(GGUF_MAGIC, self.version, len(self._tensors), len(self._kv))]
        parts += [pair for _, pair in self._kv]
        for t in self._tensors:
            parts.append(_encode_string(t.name, t.name))
            parts.append(struct.pack(f"<I{len(t.ne)}QIQ", len(t.ne), *t.ne, t.type.id, t.offset))
        return parts

    def write_header(self) -> None:
        """Write magic, counts, metadata and the tensor-info table, padded to the alignment."""
        if self._state != "declare":
            raise BadInputError("write_header() was already called", path=self.path)
        if self.alignment != DEFAULT_ALIGNMENT and "general.alignment" not in self._keys:
            self.add_kv("general.alignment", self.alignment, VT.UINT32)
        order = sorted(self._tensors, key=lambda t: t.offset)
        for a, b in zip(order, order[1:]):
            if b.offset < a.offset + a.nbytes:
                raise BadInputError(f"data at offset {b.offset} overlaps tensor {a.name!r}",
                                    path=self.path, where=f"tensor {b.name!r}")
        target = atomic.check_target(self.path, self.force)
        atomic.sweep_stale(target)
        self._tmp = atomic.temp_name(target)
        try:
            self._f = open(self._tmp, "wb")
            n = 0
            for part in self._header_bytes():
                n += self._f.write(part)
            pad = _align(n, self.alignment) - n
            self._f.write(bytes(pad))
        except OSError as e:
            self._abort()
            raise OutputError(f"{self.path}: cannot write: {e.strerror or e}") from None
        self.data_offset = n + pad
        self._order = order
        self._state = "data"

    def write_tensor_data(self, name: str, data: Any, partial: bool = False) -> None:
        """Write a tensor's bytes (ndarray of any dtype, or bytes-like). Tensors come in data
        order. With ``partial=True`` the data may be a leading chunk and later calls continue
        the same tensor; otherwise it must complete the tensor exactly."""
        if self._state != "data":
            raise BadInputError("write_header() must come before tensor data" if self._state == "declare"
                                else "the writer is closed", path=self.path, where=f"tensor {name!r}")
        if self._next >= len(self._order):
            raise BadInputError("all declared tensors are already written", path=self.path, where=f"tensor {name!r}")
        t = self._order[self._next]
        if name != t.name:
            raise BadInputError(f"expected data for tensor {t.name!r} next (data order)", path=self.path,
                                where=f"tensor {name!r}")
        try:
            if isinstance(data, np.ndarray):
                if data.dtype.hasobject:
                    raise TypeError("object arrays have no bytes")
                data = np.ascontiguousarray(data)
            mv = memoryview(data).cast("B")
        except TypeError as e:
            raise BadInputError(f"tensor data must be a numpy array or bytes-like ({e})", path=self.path,
                                where=f"tensor {name!r}") from None
        n = mv.nbytes
        left = t.nbytes - t.written
        if n > left or (not partial and n != left):
            raise BadInputError(
                f"got {n} bytes; the tensor has {t.nbytes} and {t.written} are written", path=self.path,
                where=f"tensor {name!r}",
            )
        try:
            if t.written == 0 and self._pos < t.offset:
                self._f.write(bytes(t.offset - self._pos))
                self._pos = t.offset
            self._f.write(mv)
        except OSError as e:
            self._abort()
            raise OutputError(f"{self.path}: cannot write: {e.strerror or e}") from None
        self._pos += n
        t.written += n
        if t.written == t.nbytes:
            self._next += 1

    def close(self) -> None:
        """Finish the file (pad the end to the alignment). Raises OutputError, removing the
        partial file, if the header or any tensor data is missing."""
        if self._state == "closed":
            return
        if self._state == "declare":
            self._state = "closed"
            raise OutputError(f"{self.path}: closed before write_header(); nothing was written")
        missing = [t.name for t in self._order[self._next :]]
        if missing:
            self._abort()
            raise OutputError(
                f"{self.path}: closed with {len(missing)} of {len(self._order)} tensors incomplete "
                f"(next: {missing[0]!r}); the partial file was removed"
            )
        try:
            end = _align(self._pos, self.alignment)
            self._f.write(bytes(end - self._pos))
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            self._f = None
            atomic.publish(self._tmp, Path(self.path), self.force)
        except OSError as e:
            self._abort()
            if isinstance(e, OutputError):
                raise
            raise atomic.output_error(e, self.path) from None
        self._tmp = None
        self._state = "closed"

    def _abort(self) -> None:
        """Close and remove whatever was written (the temporary; the target is untouched)."""
        if self._f is not None:
            self._f.close()
            self._f = None
        if self._tmp is not None:
            atomic.remove_quietly(self._tmp)
            self._tmp = None
        self._state = "closed"

    def abort(self) -> None:
        """Give up: close and remove the partial file."""
        self._abort()

    def __enter__(self) -> "GGUFStreamWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._abort()
        else:
            self.close()


def copy_gguf(src: str | os.PathLike | GGUFFile, dst: str | os.PathLike) -> None:
    """Rewrite ``src`` to ``dst`` through :class:`GGUFStreamWriter`: metadata pairs copied
    verbatim, the tensor table and data in the source's order. For a file laid out as ggml and
    gguf-py write them (zero padding, data padded to the alignment), the copy is byte-identical."""
    g = src if isinstance(src, GGUFFile) else open_file(src)
    try:
        w = GGUFStreamWriter(dst, alignment=g.alignment, version=g.version)
        for key in g.kv_infos:
            w.add_raw_kv(g.kv_bytes(key))
        for r in g.tensor_records:
            w.add_tensor_info(r.name, ne=r.ne, type=r.type, offset=r.rel_offset)
        with w:
            w.write_header()
            for t in sorted(g.tensors, key=lambda t: t.offset):
                w.write_tensor_data(t.name, g.raw(t.name))
    finally:
        if g is not src:
            g.close()

