"""formats/gguf.py against malformed and malicious files, built with struct.pack.

Every check of the reader has a file here that trips it; each test asserts the exception class
and that the message names the file, the field or tensor, and the problem. Files claiming
huge counts or lengths must fail at once, without allocating what they claim (a test that
allocated 2^60 elements would not finish; we assert the exception, not the time).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from panelpack.formats import gguf
from panelpack.formats.errors import BadInputError, FormatError, UnsupportedError
from panelpack.formats.gguf import GGUFValueType as VT

from builders import gguf_bytes, pack_array, pack_kv, pack_string, pack_tensor_info, pack_value

HUGE = 1 << 60

# a valid little file to break: two pairs, two tensors (F32 4x2 at 0, Q8_0 32x1 at 32)
ARCH = pack_kv("general.architecture", VT.STRING, pack_string("llama"))
U32 = pack_kv("x.u32", VT.UINT32, struct.pack("<I", 7))
T_F32 = pack_tensor_info("t", (4, 2), 0, 0)
T_Q8 = pack_tensor_info("q", (32, 1), 8, 32)
DATA = np.arange(8, dtype="<f4").tobytes() + struct.pack("<e", 0.5) + bytes(range(32))


def valid(**kw) -> bytes:
    kw.setdefault("kvs", [ARCH, U32])
    kw.setdefault("tensor_infos", [T_F32, T_Q8])
    kw.setdefault("data", DATA)
    return gguf_bytes(**kw)


def expect(tmp_path, blob: bytes, exc: type, *fragments: str) -> BadInputError:
    """Open ``blob``; it must raise ``exc`` whose message holds the path and every fragment."""
    path = tmp_path / "hostile.gguf"
    path.write_bytes(blob)
    with pytest.raises(exc) as info:
        gguf.open_file(path)
    msg = str(info.value)
    assert str(path) in msg, msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    return info.value


def test_the_base_file_is_valid(tmp_path):
    path = tmp_path / "ok.gguf"
    path.write_bytes(valid())
    with gguf.open_file(path) as f:
        assert [t.name for t in f.tensors] == ["t", "q"]


# -- header ----------------------------------------------------------------------------------


def test_empty_file(tmp_path):
    expect(tmp_path, b"", FormatError, "empty file")


def test_wrong_magic(tmp_path):
    expect(tmp_path, b"GGML" + valid()[4:], FormatError, "header", "not a GGUF file", "b'GGML'")


def test_tiny_non_gguf(tmp_path):
    expect(tmp_path, b"GG", FormatError, "header", "truncated header")


@pytest.mark.parametrize("n", [4, 7, 8, 16, 23])
def test_truncated_header(tmp_path, n):
    expect(tmp_path, valid()[:n], FormatError, "header", "truncated")


def test_version_1_refused(tmp_path):
    expect(tmp_path, valid(version=1), UnsupportedError, "header", "version 1 is no longer supported")


@pytest.mark.parametrize("version", [0, 4, 0xFFFF])
def test_unsupported_version(tmp_path, version):
    expect(tmp_path, valid(version=version), UnsupportedError, "header", f"unsupported GGUF version {version}")


def test_big_endian_refused(tmp_path):
    blob = bytearray(valid())
    blob[4:8] = struct.pack(">I", 3)
    expect(tmp_path, bytes(blob), UnsupportedError, "header", "big-endian")


def test_kv_count_impossibly_large(tmp_path):
    expect(tmp_path, valid(n_kv=HUGE), FormatError, "header.kv_count", str(HUGE), "impossibly large")


def test_tensor_count_impossibly_large(tmp_path):
    expect(tmp_path, valid(n_tensors=HUGE), FormatError, "header.tensor_count", "impossibly large")
    expect(tmp_path, valid(n_tensors=2**64 - 1), FormatError, "header.tensor_count")


# -- key/value section -----------------------------------------------------------------------


def test_key_length_past_end(tmp_path):
    kv = struct.pack("<Q", 1000) + b"abc"
    expect(tmp_path, valid(kvs=[kv, U32]), FormatError, "metadata pair #0", "key claims 1000 bytes")


def test_key_length_huge(tmp_path):
    kv = struct.pack("<Q", 2**64 - 1) + b"abc" + b"\0" * 20
    expect(tmp_path, valid(kvs=[ARCH, kv]), FormatError, "metadata pair #1", str(2**64 - 1))


def test_key_not_utf8(tmp_path):
    expect(tmp_path, valid(kvs=[pack_kv(b"bad\xff", VT.UINT8, b"\1")]), FormatError, "metadata pair #0", "UTF-8")


@pytest.mark.parametrize("vtype", [13, 255, 2**32 - 1])
def test_unknown_value_type(tmp_path, vtype):
    kv = pack_kv("odd.key", vtype, b"\0" * 8)
    expect(tmp_path, valid(kvs=[ARCH, kv]), FormatError, "'odd.key'", f"unknown metadata value type {vtype}")


def test_unknown_array_item_type(tmp_path):
    kv = pack_kv("arr", VT.ARRAY, struct.pack("<IQ", 77, 1) + b"\0" * 8)
    expect(tmp_path, valid(kvs=[kv]), FormatError, "'arr'", "unknown metadata value type 77")


def test_string_value_past_end(tmp_path):
    kv = pack_kv("s", VT.STRING, struct.pack("<Q", 2**62) + b"xy")
    expect(tmp_path, valid(kvs=[ARCH, kv]), FormatError, "metadata 's'", "string value claims")


@pytest.mark.parametrize("item_type", [VT.UINT8, VT.FLOAT64, VT.STRING, VT.ARRAY])
def test_array_count_huge(tmp_path, item_type):
    kv = pack_kv("tokenizer.ggml.tokens", VT.ARRAY, struct.pack("<IQ", item_type, HUGE) + b"\0" * 64)
    expect(tmp_path, valid(kvs=[kv]), FormatError, "'tokenizer.ggml.tokens'", f"array of {HUGE}", "only")


def test_string_array_runs_past_end(tmp_path):
    """Plenty of bytes for the count, but one string claims more than the file has."""
    items = [pack_string(f"t{i}") for i in range(100)] + [struct.pack("<Q", 10_000)]
    kv = pack_kv("toks", VT.ARRAY, struct.pack("<IQ", VT.STRING, 101) + b"".join(items))
    expect(tmp_path, valid(kvs=[kv]), FormatError, "'toks'", "runs past the end")


def test_nested_array_count_huge(tmp_path):
    inner = struct.pack("<IQ", VT.UINT32, HUGE)
    kv = pack_kv("n", VT.ARRAY, pack_array(VT.ARRAY, [inner]))
    expect(tmp_path, valid(kvs=[kv]), FormatError, "'n'[0]", f"array of {HUGE}")


def test_arrays_nested_too_deep(tmp_path):
    payload = pack_array(VT.UINT8, [1])
    for _ in range(gguf.MAX_ARRAY_DEPTH):
        payload = pack_array(VT.ARRAY, [payload])
    expect(tmp_path, valid(kvs=[pack_kv("deep", VT.ARRAY, payload)]), FormatError, "'deep'", "nested more than")


def test_scalar_value_truncated(tmp_path):
    head = struct.pack("<4sIQQ", b"GGUF", 3, 0, 2)
    expect(tmp_path, head + ARCH + pack_kv("x", VT.UINT64, b"\1\2\3"), FormatError, "metadata 'x'", "truncated")


def test_duplicate_key(tmp_path):
    expect(tmp_path, valid(kvs=[U32, ARCH, U32]), FormatError, "metadata 'x.u32'", "duplicate key")


@pytest.mark.parametrize("value", [0, 3, 48, 2**31 + 1])
def test_alignment_not_power_of_two(tmp_path, value):
    kv = pack_kv("general.alignment", VT.UINT32, struct.pack("<I", value))
    expect(tmp_path, valid(kvs=[ARCH, kv]), FormatError, "'general.alignment'", "not a power of two")


def test_alignment_wrong_type(tmp_path):
    kv = pack_kv("general.alignment", VT.UINT64, struct.pack("<Q", 32))
    expect(tmp_path, valid(kvs=[kv]), FormatError, "'general.alignment'", "must be uint32")


# -- tensor table ----------------------------------------------------------------------------


def test_tensor_name_past_end(tmp_path):
    ti = struct.pack("<Q", 5000) + b"abc"
    expect(tmp_path, valid(tensor_infos=[T_F32, ti], data=b""), FormatError, "tensor #1", "tensor name claims")


def test_tensor_name_not_utf8(tmp_path):
    ti = pack_tensor_info(b"w\xc3", (4,), 0, 64)
    expect(tmp_path, valid(tensor_infos=[T_F32, ti]), FormatError, "tensor #1", "UTF-8")


def test_duplicate_tensor_name(tmp_path):
    expect(tmp_path, valid(tensor_infos=[T_F32, pack_tensor_info("t", (32, 1), 8, 32)]), FormatError,
           "tensor 't'", "duplicate tensor name")


@pytest.mark.parametrize("n_dims", [0, 5, 2**32 - 1])
def test_bad_n_dims(tmp_path, n_dims):
    ti = pack_tensor_info("w", (4, 2), 0, 0, n_dims=n_dims)
    expect(tmp_path, valid(tensor_infos=[ti]), FormatError, "tensor 'w'", f"has {n_dims} dimensions")


@pytest.mark.parametrize("ne,problem", [
    ((0, 2), "ne[0] = 0"),
    ((4, 2**63), f"ne[1] = {2**63}"),
    ((4, 2**64 - 1), "ne[1] ="),
    ((2**32, 2**32), "overflows int64"),
    ((2**21, 2**21, 2**21), "overflows int64"),
])
def test_bad_dims(tmp_path, ne, problem):
    expect(tmp_path, valid(tensor_infos=[pack_tensor_info("w", ne, 0, 0)]), FormatError, "tensor 'w'", problem)


@pytest.mark.parametrize("type_id,problem", [(99, "unknown ggml type id 99"), (31, "Q4_0_4_4"), (33, "Q4_0_8_8"),
                                             (2**32 - 1, "unknown ggml type id")])
def test_unknown_tensor_type(tmp_path, type_id, problem):
    ti = pack_tensor_info("w", (32, 1), type_id, 0)
    expect(tmp_path, valid(tensor_infos=[ti]), UnsupportedError, "tensor 'w'", problem)


def test_ne0_not_a_block_multiple(tmp_path):
    ti = pack_tensor_info("w", (33, 1), 2, 0)  # Q4_0
    expect(tmp_path, valid(tensor_infos=[ti]), FormatError, "tensor 'w'", "ne[0] = 33", "Q4_0 block size 32")


def test_misaligned_offset(tmp_path):
    ti = pack_tensor_info("q", (32, 1), 8, 36)
    expect(tmp_path, valid(tensor_infos=[T_F32, ti]), FormatError, "tensor 'q'", "offset 36", "alignment 32")


def test_misaligned_with_custom_alignment(tmp_path):
    kv = pack_kv("general.alignment", VT.UINT32, struct.pack("<I", 64))
    expect(tmp_path, valid(kvs=[kv], tensor_infos=[T_F32, T_Q8], alignment=64), FormatError, "tensor 'q'",
           "alignment 64")


@pytest.mark.parametrize("offset", [64, 2**40, 2**64 - 32])
def test_data_past_end(tmp_path, offset):
    ti = pack_tensor_info("q", (32, 1), 8, offset)
    expect(tmp_path, valid(tensor_infos=[T_F32, ti]), FormatError, "tensor 'q'", "past the end of the file")


def test_data_truncated(tmp_path):
    expect(tmp_path, valid()[:-1], FormatError, "tensor 'q'", "past the end of the file")


def test_overlapping_tensors(tmp_path):
    big = pack_tensor_info("big", (16, 1), 0, 0)  # 64 bytes: [0, 64)
    q = pack_tensor_info("q", (32, 1), 8, 32)  # [32, 66)
    expect(tmp_path, valid(tensor_infos=[q, big], data=DATA + bytes(64)), FormatError, "overlaps", "'big'", "'q'")


def test_tensor_table_truncated(tmp_path):
    blob = valid(data=b"")
    cut = blob[: 24 + len(ARCH) + len(U32) + len(T_F32) + 10]
    expect(tmp_path, cut, FormatError, "tensor", "truncated")


def test_every_truncation_is_caught(tmp_path):
    """Each prefix of a valid file that cuts into the header, metadata, table or data fails
    cleanly; only cutting the final padding would leave a valid file (there is none here)."""
    blob = valid()
    path = tmp_path / "cut.gguf"
    for n in range(len(blob)):
        path.write_bytes(blob[:n])
        with pytest.raises(BadInputError) as info:
            gguf.open_file(path)
        assert str(path) in str(info.value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6))
def test_random_corruption_never_escapes(tmp_path, flips):
    """Random byte changes: the file opens (and its metadata decodes) or fails with our error."""
    strings = pack_kv("toks", VT.ARRAY, pack_value(VT.ARRAY, [f"t{i}" for i in range(70)], VT.STRING))
    blob = bytearray(valid(kvs=[ARCH, U32, strings]))
    for pos, val in flips:
        blob[pos % len(blob)] = val
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(bytes(blob))
    try:
        f = gguf.open_file(path)
    except BadInputError as e:
        assert str(path) in str(e)
        return
    for value in f.metadata.values():
        if isinstance(value, gguf.GGUFArray):
            value.tolist()
    for t in f.tensors:
        assert f.raw(t.name).size == t.nbytes
