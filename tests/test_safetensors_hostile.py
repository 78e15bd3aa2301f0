"""Hostile safetensors files built byte by byte with struct.pack.

Every case must raise one of our exceptions (class checked) whose message names the file, the
tensor or field, and the problem. Each case also records what the ``safetensors`` library does
with the same bytes: where we are stricter than it (duplicate keys, a header not starting with
``{``), the test says so explicitly.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from panelpack.formats.errors import BadInputError, FormatError, UnsupportedError
from panelpack.formats.safetensors import MAX_HEADER_SIZE, SafetensorsFile

DATA8 = bytes(range(8))


def build(header: bytes | str | dict, data: bytes = b"", length: int | None = None) -> bytes:
    """``u64 length`` + header + data; ``length`` overrides the real header length."""
    if isinstance(header, dict):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode()
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def entry(dtype="U8", shape=(8,), offsets=(0, 8)) -> dict:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def library_accepts(path) -> bool:
    try:
        with safe_open(str(path), framework="numpy") as f:
            for k in f.keys():
                f.get_slice(k)
        return True
    except SafetensorError:
        return False


# (id, file bytes, our exception class, fragments the message must contain, library rejects too)
CASES = [
    ("empty_file", b"", FormatError, ["header", "0 bytes, too short"], True),
    ("five_bytes", b"\x01\x02\x03\x04\x05", FormatError, ["header", "5 bytes, too short"], True),
    (
        "length_past_eof",
        build(b'{"a":1}', length=1000),
        FormatError,
        ["header", "header length 1000 runs past the end of the file (15 bytes)"],
        True,
    ),
    (
        "length_absurd",
        build(b"{}", length=MAX_HEADER_SIZE + 1),
        FormatError,
        ["header", f"header length {MAX_HEADER_SIZE + 1} is larger than safetensors' limit"],
        True,
    ),
    ("length_u64_max", build(b"{}", length=2**64 - 1), FormatError, ["header", "larger than safetensors' limit"], True),
    ("not_utf8", build(b'{"a\xff":1}'), FormatError, ["header", "not valid UTF-8"], True),
    ("not_json", build(b'{"a": '), FormatError, ["header", "not valid JSON"], True),
    ("trailing_nul", build(b"{}\x00\x00"), FormatError, ["header", "not valid JSON"], True),
    ("json_array", build(b"[]"), FormatError, ["header", "starting with '{'"], True),
    ("json_string", build(b'"x"'), FormatError, ["header", "starting with '{'"], True),
    # the format says the header begins with '{'; safetensors 0.8 tolerates leading spaces
    ("leading_space", build(b' {"a":' + json.dumps(entry()).encode() + b"}", DATA8), FormatError,
     ["header", "starting with '{'"], False),
    ("nan", build(b'{"a":{"dtype":"U8","shape":[NaN],"data_offsets":[0,8]}}', DATA8), FormatError,
     ["header", "NaN is not allowed"], True),
    ("deep_nesting", build(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"), FormatError,
     ["header", "nested too deeply"], True),
    ("huge_int_literal", build(b'{"a":{"dtype":"U8","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,8]}}', DATA8),
     FormatError, ["header", "not valid JSON"], True),
    ("negative_zero", build(b'{"a":{"dtype":"U8","shape":[8],"data_offsets":[-0,8]}}', DATA8), FormatError,
     ["header", "-0 is not an unsigned integer"], True),
    ("lone_surrogate", build(b'{"\\ud800":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}', DATA8), FormatError,
     ["header", "lone surrogate"], True),
    ("bom", build(b'\xef\xbb\xbf{}'), FormatError, ["header", "starting with '{'"], True),
    ("control_char", build(b'{"a\x01":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}', DATA8), FormatError,
     ["header", "not valid JSON", "control character"], True),
    # stricter than safetensors, which keeps the last of two equal keys
    ("duplicate_escaped", build(b'{"a":' + json.dumps(entry()).encode() + b',"\\u0061":' + json.dumps(entry()).encode()
                                + b"}", DATA8), FormatError, ["header", "key 'a' appears twice"], False),
    ("duplicate_tensor", build(b'{"a":' + json.dumps(entry()).encode() + b',"a":' + json.dumps(entry()).encode()
                               + b"}", DATA8), FormatError, ["header", "key 'a' appears twice"], False),
    ("duplicate_field", build(b'{"a":{"dtype":"U8","dtype":"U8","shape":[8],"data_offsets":[0,8]}}', DATA8),
     FormatError, ["header", "key 'dtype' appears twice"], True),
    ("metadata_not_object", build({"__metadata__": [1], "a": entry()}, DATA8), FormatError,
     ["field '__metadata__'", "is a JSON array"], True),
    ("metadata_int_value", build({"__metadata__": {"x": 1}, "a": entry()}, DATA8), FormatError,
     ["field '__metadata__'", "value of 'x' is a JSON integer, expected a string"], True),
    ("entry_not_object", build({"a": 5}), FormatError, ["tensor 'a'", "entry is a JSON integer"], True),
    ("missing_dtype", build({"a": {"shape": [8], "data_offsets": [0, 8]}}, DATA8), FormatError,
     ["tensor 'a'", "missing field(s) dtype"], True),
    ("missing_shape_offsets", build({"a": {"dtype": "U8"}}, DATA8), FormatError,
     ["tensor 'a'", "missing field(s) shape, data_offsets"], True),
    ("dtype_not_string", build({"a": entry(dtype=3)}, DATA8), FormatError,
     ["tensor 'a'", "field 'dtype' is a JSON integer"], True),
    ("unknown_dtype", build({"a": entry(dtype="Q4")}, DATA8), FormatError,
     ["tensor 'a'", "unknown dtype 'Q4'"], True),
    ("sub_byte_dtype", build({"a": entry(dtype="F4", shape=(16,))}, DATA8), UnsupportedError,
     ["tensor 'a'", "dtype F4 packs several elements per byte"], None),
    ("shape_not_list", build({"a": {"dtype": "U8", "shape": 8, "data_offsets": [0, 8]}}, DATA8), FormatError,
     ["tensor 'a'", "field 'shape' is a JSON integer"], True),
    ("shape_float", build({"a": entry(shape=(8.0,))}, DATA8), FormatError,
     ["tensor 'a'", "field 'shape' dimension 0 is a JSON number"], True),
    ("shape_bool", build({"a": entry(shape=(True,), offsets=(0, 1))}, DATA8[:1]), FormatError,
     ["tensor 'a'", "field 'shape' dimension 0 is a JSON boolean"], True),
    ("negative_dim", build({"a": entry(shape=(2, -4))}, DATA8), FormatError,
     ["tensor 'a'", "dimension 1 is -4: dimensions must be >= 0"], True),
    ("shape_overflow", build({"a": entry(shape=(2**32, 2**32, 2))}, DATA8), FormatError,
     ["tensor 'a'", "element count overflows 64 bits"], True),
    ("bytes_overflow", build({"a": entry(dtype="F64", shape=(2**62,))}, DATA8), FormatError,
     ["tensor 'a'", "byte size overflows 64 bits"], True),
    ("million_dims", build({"a": entry(shape=[2] * 1_000_000)}, DATA8), FormatError,
     ["tensor 'a'", "element count overflows 64 bits"], True),
    ("offsets_not_pair", build({"a": entry(offsets=(0, 4, 8))}, DATA8), FormatError,
     ["tensor 'a'", "field 'data_offsets' is [0, 4, 8], expected two integers"], True),
    ("offsets_float", build({"a": entry(offsets=(0, 8.5))}, DATA8), FormatError,
     ["tensor 'a'", "field 'data_offsets'", "expected two integers"], True),
    ("offsets_negative", build({"a": entry(offsets=(-8, 0))}, DATA8), FormatError,
     ["tensor 'a'", "field 'data_offsets' [-8, 0] is negative"], True),
    ("end_before_begin", build({"a": entry(shape=(0,), offsets=(8, 0))}, DATA8), FormatError,
     ["tensor 'a'", "end 0 is before begin 8"], True),
    ("header_lies", build({"a": entry(dtype="F32", shape=(3,), offsets=(0, 8))}, DATA8), FormatError,
     ["tensor 'a'", "header lies about sizes: shape [3] of F32 is 12 bytes but data_offsets [0, 8] span 8"], True),
    ("past_eof", build({"a": entry(dtype="F32", shape=(4,), offsets=(0, 16))}, DATA8), FormatError,
     ["tensor 'a'", "data_offsets [0, 16] run past the end of the file: the data section holds 8 bytes"], True),
    ("past_eof_huge", build({"a": entry(dtype="F32", shape=(10**15,), offsets=(0, 4 * 10**15))}, DATA8),
     FormatError, ["tensor 'a'", "run past the end of the file"], True),
    ("overlap", build({"a": entry(shape=(6,), offsets=(0, 6)), "b": entry(shape=(4,), offsets=(4, 8))}, DATA8),
     FormatError, ["tensor 'b'", "data [4, 8) overlaps tensor 'a' at [0, 6)"], True),
    ("same_range", build({"a": entry(), "b": entry()}, DATA8), FormatError,
     ["tensor 'b'", "overlaps tensor 'a'"], True),
    ("zero_size_inside", build({"a": entry(), "z": entry(shape=(0,), offsets=(4, 4))}, DATA8), FormatError,
     ["tensor 'z'", "overlaps tensor 'a'"], True),
    ("gap_at_start", build({"a": entry(shape=(4,), offsets=(4, 8))}, DATA8), FormatError,
     ["tensor 'a'", "gap: data bytes [0, 4) at the start of the data section belong to no tensor"], True),
    ("gap_between", build({"a": entry(shape=(2,), offsets=(0, 2)), "b": entry(shape=(4,), offsets=(4, 8))}, DATA8),
     FormatError, ["tensor 'b'", "gap: data bytes [2, 4) after tensor 'a'"], True),
    ("trailing_bytes", build({"a": entry(shape=(4,), offsets=(0, 4))}, DATA8), FormatError,
     ["data", "4 trailing bytes after tensor 'a' belong to no tensor"], True),
    ("data_without_tensors", build({}, DATA8), FormatError, ["data", "8 trailing bytes after the header"], True),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_header(tmp_path, case):
    name, blob, cls, fragments, library_rejects = case
    path = tmp_path / f"{name}.safetensors"
    path.write_bytes(blob)
    with pytest.raises(BadInputError) as e:
        SafetensorsFile(path)
    assert type(e.value) is cls, f"{type(e.value).__name__}: {e.value}"
    msg = str(e.value)
    assert msg.startswith(f"{path}: "), msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    assert len(msg) < 400 and "\n" not in msg
    if library_rejects is not None:
        assert library_accepts(path) is (not library_rejects)


def test_gaps_rule_matches_library_on_valid_neighbours(tmp_path):
    """The accepted side of the coverage rule: back-to-back tensors in any header order, and
    zero-size tensors at a boundary, are fine for both readers."""
    hdr = {
        "z0": entry(shape=(0,), offsets=(0, 0)),
        "b": entry(shape=(4,), offsets=(4, 8)),
        "a": entry(shape=(4,), offsets=(0, 4)),
        "z8": entry(shape=(0, 3), offsets=(8, 8)),
    }
    path = tmp_path / "ok.safetensors"
    path.write_bytes(build(hdr, DATA8))
    assert library_accepts(path)
    with SafetensorsFile(path) as f:
        assert f.names == ["z0", "a", "b", "z8"]
        assert f.raw("b").tobytes() == DATA8[4:]


def test_trailing_spaces_after_header_are_padding(tmp_path):
    path = tmp_path / "pad.safetensors"
    path.write_bytes(build(json.dumps({"a": entry()}) + "       ", DATA8))
    assert library_accepts(path)
    with SafetensorsFile(path) as f:
        assert f.raw("a").tobytes() == DATA8


def test_claimed_sizes_allocate_nothing(tmp_path):
    """Headers that claim enormous sizes fail before anything proportional is allocated."""
    cases = [
        build(b"{}", length=MAX_HEADER_SIZE),  # 100 MB header claimed, file is 10 bytes
        build({"a": entry(dtype="F64", shape=(10**17,), offsets=(0, 8 * 10**17))}, DATA8),
        build({"a": entry(shape=(2**40,), offsets=(0, 2**40))}, DATA8),
    ]
    for i, blob in enumerate(cases):
        path = tmp_path / f"big{i}.safetensors"
        path.write_bytes(blob)
        tracemalloc.start()
        try:
            with pytest.raises(FormatError):
                SafetensorsFile(path)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20, f"case {i}: peak {peak} bytes"


def test_file_shrinking_after_open_is_caught(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"a": np.arange(16, dtype=np.float32)}, str(path))
    f = SafetensorsFile(path)
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) - 4)
    with pytest.raises(FormatError, match="file changed since it was opened") as e:
        f.raw("a")
    assert str(path) in str(e.value)


# -- differential fuzzing against the library ---------------------------------------------------

# A valid file to mutate: three tensors of mixed dtypes and a metadata block.
_SEED = build(
    {
        "__metadata__": {"k": "v"},
        "a": entry(dtype="F32", shape=(2, 2), offsets=(0, 16)),
        "b": entry(dtype="I16", shape=(3,), offsets=(16, 22)),
        "c": entry(dtype="U8", shape=(2,), offsets=(22, 24)),
    },
    bytes(range(24)),
)
_HLEN = struct.unpack("<Q", _SEED[:8])[0]
_JSONISH = b'0123456789{}[]",:- eE.aFU8'
_STRICTER = ("appears twice", "starting with '{'")  # the rules where we reject what the library takes


@settings(max_examples=400, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(_SEED) - 1), st.one_of(st.sampled_from(list(_JSONISH)), st.integers(0, 255))),
        min_size=1,
        max_size=4,
    ),
    cut=st.one_of(st.none(), st.integers(0, len(_SEED))),
    header_only=st.booleans(),
)
def test_fuzz_against_library(edits, cut, header_only):
    blob = bytearray(_SEED)
    for pos, byte in edits:
        if header_only:
            pos = 8 + pos % _HLEN
        blob[pos] = byte
    if cut is not None:
        blob = blob[:cut]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.safetensors")
        with open(path, "wb") as f:
            f.write(blob)
        lib_ok = library_accepts(path)
        try:
            ours = SafetensorsFile(path)
        except (FormatError, UnsupportedError) as e:
            assert str(e).startswith(path)
            if lib_ok:  # we may only be stricter where the module docstring says so
                assert any(s in str(e) for s in _STRICTER) or isinstance(e, UnsupportedError), str(e)
            return
        # we accepted: the library must accept the same bytes and see the same tensors
        assert lib_ok, f"we accepted a file safetensors rejects: {bytes(blob)!r}"
        with safe_open(path, framework="numpy") as lib:
            assert sorted(lib.keys()) == sorted(ours.names)
            for t in ours.tensors:
                assert list(lib.get_slice(t.name).get_shape()) == list(t.shape)
                if t.type.name in ("F32", "I16", "U8", "F16", "F64", "I8", "I32", "I64", "U16", "U32", "U64", "BOOL"):
                    assert lib.get_tensor(t.name).tobytes() == ours.raw(t.name).tobytes()
        ours.close()
