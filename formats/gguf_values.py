"""GGUF values (formats/gguf.py draws the file): the value types, the header and item sizes
that bound every claimed count, bounds-checked parsing of key/value pairs (:class:`_Parser`),
the vectorized walk over arrays of strings, and the lazy :class:`GGUFArray`. What the reader
(formats/gguf.py) and the writer (formats/gguf_writer.py) both read."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Iterator

import numpy as np

from .errors import FormatError

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
        end, found = _walk_strings_ref(mv, pos, count, limit)
        return end, (np.asarray(found, dtype=np.int64) if want_starts and end >= 0 else None)

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
    starts: np.ndarray | None = None
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
        self.mv = buf.data  # a memoryview of the same bytes
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


