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

The value types, the bounded parsing and the lazy arrays are in ``formats/gguf_values.py``, the
writer in ``formats/gguf_writer.py``; every public name stays importable from here.

Writing is streamed by :class:`GGUFStreamWriter`: metadata and tensor infos are declared,
the header is written, then tensor data is written one tensor (or one chunk) at a time, so
memory does not grow with the file. Key/value pairs can be copied byte for byte from a
source file, which is how :func:`copy_gguf` reproduces a GGUF exactly.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from . import qtypes
from .common import Checkpoint, TensorInfo
from .errors import BadInputError, FormatError, UnsupportedError
from .gguf_values import (
    _HEADER,
    _INT64_MAX,
    _MIN_KV_BYTES,
    _MIN_TENSOR_INFO_BYTES,
    _NE_STRUCTS,
    _U32,
    _U64,
    DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    HEADER_BYTES,
    MAX_ARRAY_DEPTH,
    MAX_DIMS,
    MAX_NAME_BYTES,
    SUPPORTED_VERSIONS,
    VT,
    GGUFArray,
    GGUFValueType,
    _align,
    _Parser,
)
from .gguf_writer import GGUFStreamWriter
from .qtypes import GGMLType

logger = logging.getLogger(__name__)

__all__ = [
    "GGUF_MAGIC",
    "DEFAULT_ALIGNMENT",
    "MAX_DIMS",
    "SUPPORTED_VERSIONS",
    "MAX_NAME_BYTES",
    "MAX_ARRAY_DEPTH",
    "HEADER_BYTES",
    "GGUFValueType",
    "GGUFArray",
    "KVInfo",
    "GGUFTensorRecord",
    "GGUFFile",
    "GGUFStreamWriter",
    "open_file",
    "copy_gguf",
]



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

    def __init__(self, path: str | os.PathLike, header_only: bool = False):
        super().__init__(path)
        self.header_only = header_only  # the bytes up to the data alone (open_header)
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
                raise AssertionError(f"type id {type_id}: qtypes.get accepted an id BY_ID lacks")  # (unreachable)
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
            if off + nbytes > size and not self.header_only:
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
        if self.header_only:
            raise BadInputError(f"a GGUF header without its data: no bytes of tensor {name!r}", path=self.path)
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


def open_header(path: str | os.PathLike) -> GGUFFile:
    """A GGUF file's bytes ``0 .. data_offset`` alone (a bundle's ``source/gguf-header.bin``):
    header, key/values and tensor table parsed and validated as :func:`open_file` does, but
    no tensor data is expected (``raw`` refuses). ``metadata`` is the file's key/values."""
    return GGUFFile(path, header_only=True)


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
