"""The streaming GGUF writer (formats/gguf.py draws the file): values encoded by their type,
then :class:`GGUFStreamWriter`'s one pass (metadata and tensor infos declared, the header
written, tensor data one tensor or one chunk at a time, so memory does not grow with the file).
Pairs can be copied byte for byte from a source file."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Sequence

import numpy as np

from . import atomic, qtypes
from .errors import BadInputError, OutputError, UnsupportedError
from .gguf_values import (
    _DTYPE_VT,
    _HEADER,
    _INT64_MAX,
    _MIN_ITEM_BYTES,
    _SCALARS,
    _U32,
    _U64,
    DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    MAX_ARRAY_DEPTH,
    MAX_DIMS,
    MAX_NAME_BYTES,
    SUPPORTED_VERSIONS,
    VT,
    GGUFArray,
    _align,
    _Parser,
    _vt_name,
)
from .qtypes import GGMLType

if TYPE_CHECKING:
    from .gguf import GGUFFile


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
        widths: list[int] = [VT.INT32, VT.INT64, VT.UINT64]
        return max(kinds, key=widths.index)
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
        self._f: IO[bytes] | None = None
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
        dims = tuple(int(d) for d in (ne if ne is not None else reversed(tuple(shape or ()))))
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
            self._f = f = open(self._tmp, "wb")
            n = 0
            for part in self._header_bytes():
                n += f.write(part)
            pad = _align(n, self.alignment) - n
            f.write(bytes(pad))
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
        f = self._f
        assert f is not None  # (the state machine: write_header() opened it)
        try:
            if t.written == 0 and self._pos < t.offset:
                f.write(bytes(t.offset - self._pos))
                self._pos = t.offset
            f.write(mv)
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
        f, tmp = self._f, self._tmp
        assert f is not None and tmp is not None  # (the state machine: write_header() opened it)
        try:
            end = _align(self._pos, self.alignment)
            f.write(bytes(end - self._pos))
            f.flush()
            os.fsync(f.fileno())
            f.close()
            self._f = None
            atomic.publish(tmp, Path(self.path), self.force)
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
