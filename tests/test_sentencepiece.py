"""formats/sentencepiece.py: a ModelProto built by hand (golden bytes), hostile files, and
transformers' merge generation on a hand-checked vocabulary (the real models are compared with
cactus-compute in test_cactus_tokenizer_oracle.py)."""

from __future__ import annotations

import struct

import pytest

from panelpack.convert.cactus_tokenizer import generate_merges
from panelpack.formats import sentencepiece as sp
from panelpack.formats.errors import FormatError


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num: int, wire: int, payload: bytes) -> bytes:
    key = varint(num << 3 | wire)
    return key + (varint(len(payload)) + payload if wire == 2 else payload)


def piece(text: str, score: float, kind: int | None = None) -> bytes:
    body = field(1, 2, text.encode()) + field(2, 5, struct.pack("<f", score))
    if kind is not None:
        body += field(3, 0, varint(kind))
    return field(1, 2, body)


def model(*pieces: bytes) -> bytes:
    trainer = field(2, 2, field(3, 0, varint(2)) + field(40, 0, varint(0)))  # skipped: trainer_spec
    return pieces[0] + trainer + b"".join(pieces[1:]) + field(3, 2, b"\x01\x02") + field(9, 1, b"\0" * 8)


def test_hand_built_model():
    data = model(piece("<unk>", 0.0, sp.UNKNOWN), piece("<s>", 0.0, sp.CONTROL), piece("\u2581the", -1.5),
                 piece("<0x41>", 0.0, sp.BYTE), piece("<tool>", 0.0, sp.USER_DEFINED))
    assert data[:4] == b"\x0a\x0e\x0a\x05"  # pieces[0]: 14 bytes (string 2+5, score 1+4, type 1+1)
    got = sp.parse_pieces(data)
    assert [(p.piece, p.score, p.type) for p in got] == [
        ("<unk>", 0.0, sp.UNKNOWN), ("<s>", 0.0, sp.CONTROL), ("\u2581the", -1.5, sp.NORMAL),
        ("<0x41>", 0.0, sp.BYTE), ("<tool>", 0.0, sp.USER_DEFINED)]


@pytest.mark.parametrize("data, message", [
    (b"\x0a", "varint runs past the end"),
    (b"\x0a\x05\x0a\x01", "runs past the end"),
    (field(1, 2, field(2, 5, b"\0\0")[:-2] + b"\0"), "field 2 of 4 bytes runs past the end"),
    (field(1, 2, field(1, 2, b"\xff\xfe")), "not UTF-8"),
    (field(1, 2, field(2, 5, b"\0\0\0\0")), "without its string"),
    (field(1, 2, field(1, 2, b"a") + b"\x13"), "unsupported wire type 3"),
    (b"\x0a" + b"\xff" * 11, "longer than 10 bytes"),
    (field(2, 2, b""), "no pieces"),
])
def test_hostile_models(data, message):
    with pytest.raises(FormatError, match=message):
        sp.parse_pieces(data, "t.model")


def test_generate_merges_by_hand():
    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5}
    # pieces in id order; abc splits as a|bc and ab|c, ordered by (left id, right id)
    assert generate_merges(vocab) == [("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")]
