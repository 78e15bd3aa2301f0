"""The safetensors header, parsed and validated (formats/safetensors.py draws the file and lists
every rule): the dtypes (the registry's and the *plain* ones), the strict JSON reading, each
tensor entry's dtype, shape and offsets, and :func:`parse_file`, which checks they tile the data
section exactly."""

from __future__ import annotations

import json
import logging
import os
import struct
from typing import Any

import numpy as np

from . import qtypes
from .common import TensorInfo
from .errors import BadInputError, FormatError, UnsupportedError
from .qtypes import GGMLType

log = logging.getLogger(__name__)

#: safetensors refuses headers larger than this (``MAX_HEADER_SIZE`` in its ``tensor.rs``).
MAX_HEADER_SIZE = 100_000_000
_LEN = struct.Struct("<Q")
_U64_LIMIT = 1 << 64  # offsets, element counts and byte sizes are usize (u64) in safetensors

# safetensors dtype -> the registry type of the same name.
_REGISTRY_DTYPES = ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8")
# safetensors dtype -> numpy dtype of one element, for the plain (non-registry) qtypes.
# 8-bit floats have no numpy dtype: they are read as their raw bits, like BF16.
_PLAIN_DTYPES = {
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
    "C64": "<c8",
    "F8_E4M3": "u1",
    "F8_E5M2": "u1",
    "F8_E8M0": "u1",
    "F8_E4M3FNUZ": "u1",
    "F8_E5M2FNUZ": "u1",
}
# Dtypes safetensors defines but that pack several elements per byte: not readable here.
_SUB_BYTE_DTYPES = ("F4", "F6_E2M3", "F6_E3M2")

#: Plain types: not in the registry (``id == -1``, no codec), readable as numpy only.
PLAIN_TYPES: dict[str, GGMLType] = {
    name: GGMLType(-1, name, 1, np.dtype(dt).itemsize, numpy_dtype=dt) for name, dt in _PLAIN_DTYPES.items()
}
#: Every safetensors dtype this reader accepts -> the GGMLType its TensorInfo carries.
DTYPES: dict[str, GGMLType] = {**{n: qtypes.get(n) for n in _REGISTRY_DTYPES}, **PLAIN_TYPES}


def is_plain(t: GGMLType) -> bool:
    """True for a plain safetensors type that is not in the registry (U8, BOOL, ...)."""
    return t.id < 0


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen raw bf16 bits (``uint16``) to ``float32``, exactly: the bits become the top half.

    ``f32_bits = u16 << 16`` keeps every value, NaN payloads and signed zeros included.
    """
    u16 = np.asarray(bits)
    if u16.dtype != np.uint16:
        raise BadInputError(f"bf16_to_f32 takes raw uint16 bits, got {u16.dtype}")
    return (u16.astype(np.uint32) << np.uint32(16)).view(np.float32)


# -- header parsing ----------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """No repeated key, and no lone UTF-16 surrogate (``"\\ud800"``) in a key or string value:
    Python's json lets them through, safetensors' serde_json does not."""
    for k, v in pairs:
        for text in (k, v) if isinstance(v, str) else (k,):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"string {text[:40]!r} holds a lone surrogate escape") from None
    return _no_duplicates(pairs)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in JSON")


def _parse_int(text: str) -> int:
    if text == "-0":  # a usize to safetensors: only digits
        raise ValueError("-0 is not an unsigned integer")
    return int(text)  # ValueError past 4300 digits (sys.int_info), caught by the caller


def _json_type(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(v), "null" if v is None else type(v).__name__
    )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _read_header(path: str) -> tuple[int, int, bytes]:
    """(file size, header length n, the n header bytes); bounded by the real file size."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise FormatError(
                    f"file is {size} bytes, too short for the 8-byte header length of a safetensors file",
                    path=path,
                    where="header",
                )
            (n,) = _LEN.unpack(head)
            if n > MAX_HEADER_SIZE:
                raise FormatError(
                    f"header length {n} is larger than safetensors' limit of {MAX_HEADER_SIZE} bytes "
                    "(not a safetensors file, or a corrupt one)",
                    path=path,
                    where="header",
                )
            if 8 + n > size:
                raise FormatError(
                    f"header length {n} runs past the end of the file ({size} bytes): truncated or not safetensors",
                    path=path,
                    where="header",
                )
            raw = f.read(n)
    except FileNotFoundError:
        raise BadInputError("no such file", path=path) from None
    except IsADirectoryError:
        raise BadInputError("is a folder, not a safetensors file", path=path) from None
    except OSError as e:
        raise BadInputError(f"cannot read: {e.strerror or e}", path=path) from None
    if len(raw) != n:  # the file shrank between stat and read
        raise FormatError(f"file ended after {len(raw)} of the {n} header bytes", path=path, where="header")
    return size, n, raw


def _parse_json(path: str, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(
            f"header is not valid UTF-8 (byte {e.start} of the header)", path=path, where="header"
        ) from None
    if not text.startswith("{"):
        raise FormatError(
            f"header must be a JSON object starting with '{{', it starts with {text[:16]!r}", path=path, where="header"
        )
    try:
        doc = json.loads(
            text, object_pairs_hook=_strict_object, parse_constant=_reject_constant, parse_int=_parse_int
        )
    except _DuplicateKey as e:
        raise FormatError(f"key {e.args[0]!r} appears twice in the header", path=path, where="header") from None
    except RecursionError:
        raise FormatError("header JSON is nested too deeply", path=path, where="header") from None
    except ValueError as e:  # JSONDecodeError, NaN/Infinity, -0, lone surrogates, 5000-digit integers
        raise FormatError(f"header is not valid JSON: {e}", path=path, where="header") from None
    if not isinstance(doc, dict):  # unreachable after the '{' check; kept for clarity
        raise FormatError(f"header is a JSON {_json_type(doc)}, expected an object", path=path, where="header")
    return doc


def _parse_metadata(path: str, value: Any) -> dict[str, str]:
    where = "field '__metadata__'"
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FormatError(f"is a JSON {_json_type(value)}, expected an object of strings", path=path, where=where)
    for k, v in value.items():
        if not isinstance(v, str):
            raise FormatError(f"value of {k!r} is a JSON {_json_type(v)}, expected a string", path=path, where=where)
    return dict(value)


def _parse_entry(path: str, name: str, entry: Any) -> tuple[GGMLType, tuple[int, ...], int, int]:
    """Check one tensor entry on its own: (type, shape, begin, end)."""
    where = f"tensor {name!r}"

    def bad(msg: str) -> FormatError:
        return FormatError(msg, path=path, where=where)

    if not isinstance(entry, dict):
        raise bad(f"entry is a JSON {_json_type(entry)}, expected an object with dtype, shape and data_offsets")
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in entry]
    if missing:
        raise bad(f"missing field(s) {', '.join(missing)}")

    dtype = entry["dtype"]
    if not isinstance(dtype, str):
        raise bad(f"field 'dtype' is a JSON {_json_type(dtype)}, expected a string such as \"F32\"")
    t = DTYPES.get(dtype)
    if t is None:
        if dtype in _SUB_BYTE_DTYPES:
            raise UnsupportedError(
                f"dtype {dtype} packs several elements per byte; panelpack does not read it", path=path, where=where
            )
        raise bad(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")

    shape = entry["shape"]
    if not isinstance(shape, list):
        raise bad(f"field 'shape' is a JSON {_json_type(shape)}, expected an array of integers")
    count = 1
    for i, d in enumerate(shape):
        if not _is_int(d):
            raise bad(f"field 'shape' dimension {i} is a JSON {_json_type(d)} ({d!r}), expected an integer")
        if d < 0:
            raise bad(f"field 'shape' dimension {i} is {d}: dimensions must be >= 0")
        count *= d
        if count >= _U64_LIMIT:  # stops a million-dimension shape early, too
            raise bad(f"field 'shape' {_short(shape)}: the element count overflows 64 bits")
    nbytes = count * t.type_size
    if nbytes >= _U64_LIMIT:
        raise bad(f"field 'shape' {_short(shape)} of {dtype}: the byte size overflows 64 bits")

    offs = entry["data_offsets"]
    if not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) for o in offs)):
        raise bad(f"field 'data_offsets' is {_short(offs)}, expected two integers [begin, end]")
    begin, end = offs
    if begin < 0 or end < 0:
        raise bad(f"field 'data_offsets' {offs} is negative")
    if end < begin:
        raise bad(f"field 'data_offsets' {offs}: end {end} is before begin {begin}")
    if end - begin != nbytes:
        raise bad(
            f"header lies about sizes: shape {list(shape)} of {dtype} is {nbytes} bytes "
            f"but data_offsets {offs} span {end - begin} bytes"
        )
    return t, tuple(shape), begin, end


def _short(v: Any, limit: int = 60) -> str:
    s = json.dumps(v) if isinstance(v, (list, dict, str, int, float, bool)) or v is None else repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def parse_file(path: str | os.PathLike) -> tuple[int, int, dict[str, str], list[TensorInfo]]:
    """Parse and validate a safetensors file's header.

    Returns ``(file_size, header_length, metadata, tensors)`` with the tensors in data order.
    Reads only the header; raises :class:`FormatError` (see the module docstring for the rules).
    """
    path = os.fspath(path)
    size, n, raw = _read_header(path)
    doc = _parse_json(path, raw)
    data_start = 8 + n
    data_size = size - data_start

    metadata: dict[str, str] = {}
    entries: list[tuple[int, int, str, GGMLType, tuple[int, ...]]] = []
    for name, entry in doc.items():
        if name == "__metadata__":
            metadata = _parse_metadata(path, entry)
            continue
        t, shape, begin, end = _parse_entry(path, name, entry)
        if end > data_size:
            raise FormatError(
                f"data_offsets [{begin}, {end}] run past the end of the file: the data section holds "
                f"{data_size} bytes (file {size} bytes, header {n} bytes)",
                path=path,
                where=f"tensor {name!r}",
            )
        entries.append((begin, end, name, t, shape))

    # Coverage: sorted by (begin, end), each tensor starts where the previous one ended.
    entries.sort(key=lambda e: (e[0], e[1]))
    expected: int = 0
    prev: tuple[int, int, str] | None = None
    for begin, end, name, _, _ in entries:
        if begin < expected:
            assert prev is not None  # expected > 0: a tensor came before
            raise FormatError(
                f"data [{begin}, {end}) overlaps tensor {prev[2]!r} at [{prev[0]}, {prev[1]})",
                path=path,
                where=f"tensor {name!r}",
            )
        if begin > expected:
            after = f"after tensor {prev[2]!r}" if prev else "at the start of the data section"
            raise FormatError(
                f"gap: data bytes [{expected}, {begin}) {after} belong to no tensor "
                "(safetensors requires the tensors to cover the data section back to back)",
                path=path,
                where=f"tensor {name!r}",
            )
        expected, prev = end, (begin, end, name)
    if expected != data_size:
        last = f"tensor {prev[2]!r}" if prev else "the header"
        raise FormatError(
            f"{data_size - expected} trailing bytes after {last} belong to no tensor "
            f"(the data section holds {data_size} bytes, the tensors cover {expected})",
            path=path,
            where="data",
        )

    tensors = [
        TensorInfo(name=name, shape=shape, type=t, offset=data_start + begin, nbytes=end - begin, file=path)
        for begin, end, name, t, shape in entries
    ]
    return size, n, metadata, tensors
