"""SentencePiece model files (``tokenizer.model``): the pieces of a serialized ``ModelProto``.

The file is one protocol-buffers message (sentencepiece_model.proto). Only what tokenizer
export needs is read; every other field is skipped by its wire type::

    ModelProto        field 1  repeated SentencePiece pieces   (wire type 2: varint length + bytes)
                      field 2.. trainer_spec, normalizer_spec, ...   skipped
    SentencePiece     field 1  string piece                    (wire type 2, UTF-8)
                      field 2  float  score                    (wire type 5: 4 bytes little-endian)
                      field 3  enum   type                     (wire type 0: varint; absent = NORMAL)

    key = varint (field << 3 | wire type); varint = 7 bits per byte, low group first, high bit = more
    wire types: 0 varint, 1 fixed 8 bytes, 2 length-delimited, 5 fixed 4 bytes

Piece types: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .errors import FormatError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
MAX_VARINT_BYTES = 10


@dataclass(frozen=True)
class Piece:
    piece: str
    score: float
    type: int


def _varint(data: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    value = shift = 0
    for _ in range(MAX_VARINT_BYTES):
        if pos >= end:
            raise FormatError(f"{where}: varint runs past the end")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise FormatError(f"{where}: varint longer than {MAX_VARINT_BYTES} bytes")


def _fields(data: bytes, pos: int, end: int, where: str) -> Iterator[tuple[int, int, int, int]]:
    """``(field, wire type, a, b)`` of each field in ``data[pos:end]``: wire 0 gives the value
    as ``a``; the others the byte range ``data[a:b]`` of the value (checked to lie inside)."""
    while pos < end:
        key, pos = _varint(data, pos, end, where)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos, end, where)
            yield field, wire, value, pos
            continue
        if wire in (1, 5):
            n = 8 if wire == 1 else 4
        elif wire == 2:
            n, pos = _varint(data, pos, end, where)
        else:
            raise FormatError(f"{where}: unsupported wire type {wire}")
        if pos + n > end:
            raise FormatError(f"{where}: field {field} of {n} bytes runs past the end")
        yield field, wire, pos, pos + n
        pos += n


def _piece(data: bytes, pos: int, end: int, where: str) -> Piece:
    text, score, kind = None, 0.0, NORMAL
    for field, wire, a, b in _fields(data, pos, end, where):
        if field == 1 and wire == 2:
            try:
                text = data[a:b].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FormatError(f"{where}: piece is not UTF-8 ({exc.reason})") from None
        elif field == 2 and wire == 5:
            score = struct.unpack_from("<f", data, a)[0]
        elif field == 3 and wire == 0:
            kind = a
    if text is None:
        raise FormatError(f"{where}: a piece without its string")
    return Piece(text, float(score), int(kind))


def parse_pieces(data: bytes, where: str = "tokenizer.model") -> list[Piece]:
    """The pieces of a serialized ``ModelProto``, in id order."""
    pieces = [_piece(data, a, b, f"{where}: piece {i}")
              for i, (field, wire, a, b) in enumerate(f for f in _fields(data, 0, len(data), where)
                                                      if f[0] == 1 and f[1] == 2)]
    if not pieces:
        raise FormatError(f"{where}: no pieces (not a SentencePiece model)")
    return pieces


def read_pieces(path: str | Path) -> list[Piece]:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise FormatError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_pieces(data, str(path))
