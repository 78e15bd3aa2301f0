"""formats/gguf.py: the reader, the lazy arrays, the string walk and the streaming writer.

Ladder: a hand-packed file with golden values; every value type through the writer and back,
compared with struct-packed bytes; gguf-py's writer as a byte-for-byte reference; the
vectorized string walk against its scalar twin; then the real files against ggml's C parser
(libggml, through ctypes) and gguf-py's GGUFReader, and byte-exact rewrites.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from panelpack.formats import gguf, gguf_values, qtypes
from panelpack.formats.errors import BadInputError, OutputError, UnsupportedError
from panelpack.formats.gguf import GGUFArray, GGUFStreamWriter
from panelpack.formats.gguf import GGUFValueType as VT

from builders import (
    BLOCK_FIELDS,
    KV,
    block_field,
    build_gguf,
    gguf_bytes,
    pack_array,
    pack_kv,
    pack_string,
    pack_tensor_info,
    pack_value,
    random_blocks,
    tiny_llama_gguf,
)

CODEC_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]


def write(path: Path, blob: bytes) -> Path:
    path.write_bytes(blob)
    return path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# A hand-packed file: golden values
# ---------------------------------------------------------------------------------------------


def golden_file_bytes() -> bytes:
    f32 = np.arange(8, dtype="<f4").tobytes()  # tensor "t": F32 ne=(4, 2)
    q8 = struct.pack("<e", 0.5) + bytes(range(32))  # tensor "q": one Q8_0 block, ne=(32, 1)
    kvs = [
        pack_kv("general.architecture", VT.STRING, pack_string("llama")),
        pack_kv("x.u32", VT.UINT32, struct.pack("<I", 7)),
    ]
    tis = [pack_tensor_info("t", (4, 2), 0, 0), pack_tensor_info("q", (32, 1), 8, 32)]
    return gguf_bytes(kvs, tis, f32 + q8)


def test_golden_hand_packed(tmp_path):
    path = write(tmp_path / "g.gguf", golden_file_bytes())
    with gguf.open_file(path) as f:
        # 24 header + 45 + 21 (pairs) + 41 + 41 (tensor infos) = 172, padded to 192
        assert (f.version, f.alignment, f.data_offset) == (3, 32, 192)
        assert f.kv_section == (24, 90) and f.tensor_table == (90, 172)
        assert list(f.metadata) == ["general.architecture", "x.u32"]
        assert f.metadata["x.u32"] == 7 and f.architecture == "llama"
        t, q = f.tensors
        assert (t.name, t.shape, t.type.name, t.offset, t.nbytes) == ("t", (2, 4), "F32", 192, 32)
        assert (q.name, q.shape, q.type.name, q.offset, q.nbytes) == ("q", (1, 32), "Q8_0", 224, 34)
        assert f.ne("t") == (4, 2) and f.ne("q") == (32, 1)
        np.testing.assert_array_equal(f.array("t"), np.arange(8, dtype=np.float32).reshape(2, 4))
        assert f.array("q").shape == (1, 34) and f.array("q").dtype == np.uint8
        assert f.raw("q")[2:].tolist() == list(range(32))
        assert f.kv_bytes("x.u32").tobytes() == pack_kv("x.u32", VT.UINT32, struct.pack("<I", 7))
        assert [r.rel_offset for r in f.tensor_records] == [0, 32]
        assert f.tensor_table_bytes().tobytes() == golden_file_bytes()[90:172]


def test_writer_reproduces_golden_bytes(tmp_path):
    """The same content through our writer: the hand-packed bytes plus the final padding."""
    path = tmp_path / "w.gguf"
    w = GGUFStreamWriter(path, arch="llama")
    w.add_kv("x.u32", 7, VT.UINT32)
    assert w.add_tensor_info("t", (2, 4), "F32") == 0
    assert w.add_tensor_info("q", ne=(32, 1), type=qtypes.Q8_0) == 32
    w.write_header()
    assert w.data_offset == 192
    w.write_tensor_data("t", np.arange(8, dtype="<f4").reshape(2, 4))
    w.write_tensor_data("q", struct.pack("<e", 0.5) + bytes(range(32)))
    w.close()
    expected = golden_file_bytes()
    assert path.read_bytes() == expected + bytes(-len(expected) % 32)


# ---------------------------------------------------------------------------------------------
# Every value type
# ---------------------------------------------------------------------------------------------

SCALAR_CASES = [
    (VT.UINT8, 200, int), (VT.INT8, -100, int), (VT.UINT16, 60000, int), (VT.INT16, -30000, int),
    (VT.UINT32, 4_000_000_000, int), (VT.INT32, -2_000_000_000, int), (VT.FLOAT32, 1.5, float),
    (VT.BOOL, True, bool), (VT.BOOL, False, bool), (VT.STRING, "héllo wörld", str),
    (VT.UINT64, 2**64 - 1, int), (VT.INT64, -(2**63), int), (VT.FLOAT64, 0.1, float),
]


@pytest.mark.parametrize("vtype,value,pytype", SCALAR_CASES, ids=lambda x: str(x))
def test_scalar_roundtrip(tmp_path, vtype, value, pytype):
    path = tmp_path / "s.gguf"
    w = GGUFStreamWriter(path)
    w.add_kv("k", value, vtype)
    w.write_header()
    w.close()
    with gguf.open_file(path) as f:
        got = f.metadata["k"]
        assert got == value and type(got) is pytype
        assert f.kv_infos["k"].vtype == vtype
        assert f.kv_bytes("k").tobytes() == pack_kv("k", vtype, pack_value(vtype, value))


ARRAY_CASES = [
    (VT.UINT8, [0, 1, 255]), (VT.INT8, [-128, 0, 127]), (VT.UINT16, [0, 65535]), (VT.INT16, [-32768, 5]),
    (VT.UINT32, [0, 2**32 - 1]), (VT.INT32, [-(2**31), 2**31 - 1]), (VT.FLOAT32, [0.5, -2.25, 2.0**100]),
    (VT.BOOL, [True, False, True]), (VT.UINT64, [0, 2**64 - 1]), (VT.INT64, [-(2**63), 2**63 - 1]),
    (VT.FLOAT64, [0.1, -1e300]), (VT.STRING, ["a", "", "ünï", "x" * 300]),
]


@pytest.mark.parametrize("item_type,values", ARRAY_CASES, ids=lambda x: str(x))
def test_array_roundtrip(tmp_path, item_type, values):
    path = tmp_path / "a.gguf"
    w = GGUFStreamWriter(path)
    w.add_kv("arr", values, VT.ARRAY, item_type)
    w.add_kv("after", 1, VT.UINT8)
    w.write_header()
    w.close()
    with gguf.open_file(path) as f:
        a = f.metadata["arr"]
        assert isinstance(a, GGUFArray) and a.item_type == item_type and len(a) == len(values)
        assert a.tolist() == values and a == values and list(a) == values
        assert a[-1] == values[-1] and a[0] == values[0] and a[1:] == values[1:]
        assert f.metadata["after"] == 1
        info = f.kv_infos["arr"]
        assert (info.vtype, info.item_type, info.count) == (VT.ARRAY, item_type, len(values))
        assert f.kv_bytes("arr").tobytes() == pack_kv("arr", VT.ARRAY, pack_array(item_type, values))
        arr = np.asarray(a)
        if item_type == VT.STRING:
            assert arr.dtype == object and arr.tolist() == values
        else:
            assert arr.tolist() == values
            if item_type != VT.BOOL:
                assert np.shares_memory(arr, f._map) and not arr.flags.writeable
        with pytest.raises(IndexError):
            a[len(values)]


def test_nested_and_empty_arrays(tmp_path):
    path = tmp_path / "n.gguf"
    w = GGUFStreamWriter(path)
    w.add_kv("nested", [[1, 2], [3]], VT.ARRAY, VT.ARRAY)
    w.add_kv("nested_str", [["a", "bc"], ["d"]])
    w.add_kv("empty", [], VT.ARRAY, VT.FLOAT32)
    w.write_header()
    w.close()
    inner = pack_array(VT.INT32, [1, 2]), pack_array(VT.INT32, [3])
    with gguf.open_file(path) as f:
        n = f.metadata["nested"]
        assert n.item_type == VT.ARRAY and n.tolist() == [[1, 2], [3]]
        assert isinstance(n[1], GGUFArray) and n[1].tolist() == [3]
        assert f.kv_bytes("nested").tobytes() == pack_kv("nested", VT.ARRAY, pack_array(VT.ARRAY, list(inner)))
        assert f.metadata["nested_str"].tolist() == [["a", "bc"], ["d"]]
        e = f.metadata["empty"]
        assert len(e) == 0 and e.tolist() == [] and e.item_type == VT.FLOAT32


def test_type_inference(tmp_path):
    path = tmp_path / "i.gguf"
    w = GGUFStreamWriter(path)
    values = {
        "int": 5, "big": 2**40, "huge": 2**63 + 1, "float": 0.25, "bool": True, "str": "s", "bytes": b"\xff\x00",
        "np_u16": np.uint16(9), "np_f64": np.float64(0.1), "list_int": [1, 2**40], "list_str": ["a", "b"],
        "nd_f32": np.array([1.0, 2.0], np.float32), "nd_u64": np.array([1, 2], np.uint64),
        "nd_bool": np.array([True, False]), "np_i8": np.int8(-3), "nd_u8": np.array([1, 2], np.uint8),
        "nd_be": np.array([1, 2], ">i4"), "nd_str": np.array(["x", "yz"]),
    }
    for k, v in values.items():
        w.add_kv(k, v)
    w.write_header()
    w.close()
    expect = {
        "int": VT.INT32, "big": VT.INT64, "huge": VT.UINT64, "float": VT.FLOAT32, "bool": VT.BOOL,
        "str": VT.STRING, "bytes": VT.STRING, "np_u16": VT.UINT16, "np_f64": VT.FLOAT64,
        "list_int": VT.INT64, "list_str": VT.STRING, "nd_f32": VT.FLOAT32, "nd_u64": VT.UINT64, "nd_bool": VT.BOOL,
        "np_i8": VT.INT8, "nd_u8": VT.UINT8, "nd_be": VT.INT32, "nd_str": VT.STRING,
    }
    with gguf.open_file(path) as f:
        for k, vt in expect.items():
            info = f.kv_infos[k]
            assert (info.item_type if info.vtype == VT.ARRAY else info.vtype) == vt, k
        assert f.metadata["bytes"] == b"\xff\x00".decode("utf-8", "surrogateescape")
        assert f.metadata["list_int"].tolist() == [1, 2**40]
        assert f.metadata["nd_bool"].tolist() == [True, False]
        assert f.metadata["np_i8"] == -3 and f.metadata["nd_be"].tolist() == [1, 2]
        assert f.metadata["nd_str"].tolist() == ["x", "yz"]


def test_writer_matches_gguf_py(tmp_path):
    """gguf-py's GGUFWriter and ours, same content: identical files."""
    import gguf as ggufpy

    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 64), dtype=np.float32)
    q8 = random_blocks("Q8_0", 5, 64, rng)
    ref = tmp_path / "ref.gguf"
    g = ggufpy.GGUFWriter(str(ref), "llama")
    g.add_uint32("llama.block_count", 2)
    g.add_float32("llama.rope.freq_base", 10000.0)
    g.add_string("general.name", "x")
    g.add_bool("b", True)
    g.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    g.add_array("tokenizer.ggml.scores", [0.5, -1.0, 2.0])
    g.add_key_value("u64", 123, ggufpy.GGUFValueType.UINT64)
    g.add_tensor("w.f32", f32)
    g.add_tensor("w.q8", q8, raw_dtype=ggufpy.GGMLQuantizationType.Q8_0)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()

    ours = tmp_path / "ours.gguf"
    w = GGUFStreamWriter(ours, arch="llama")
    w.add_kv("llama.block_count", 2, VT.UINT32)
    w.add_kv("llama.rope.freq_base", 10000.0)
    w.add_kv("general.name", "x")
    w.add_kv("b", True)
    w.add_kv("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    w.add_kv("tokenizer.ggml.scores", [0.5, -1.0, 2.0])
    w.add_kv("u64", 123, VT.UINT64)
    w.add_tensor_info("w.f32", f32.shape, "F32")
    w.add_tensor_info("w.q8", (5, 64), "Q8_0")
    w.write_header()
    w.write_tensor_data("w.f32", f32)
    w.write_tensor_data("w.q8", q8)
    w.close()
    assert ours.read_bytes() == ref.read_bytes()


# ---------------------------------------------------------------------------------------------
# Versions, alignment, zero copy, hyperparameters
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("alignment", [32, 64, 1, 4096])
def test_versions_and_alignment(tmp_path, rng, version, alignment):
    blocks = {t: random_blocks(t, 3, 256, rng) for t in ("F32", "Q4_K", "Q8_0")}
    built = build_gguf(tmp_path / "v.gguf", {f"w.{t}": (t, b) for t, b in blocks.items()},
                       {"general.name": "v"}, alignment=alignment, version=version)
    with gguf.open_file(built.path) as f:
        assert f.version == version and f.alignment == alignment
        assert ("general.alignment" in f.metadata) == (alignment != 32)
        assert f.data_offset % alignment == 0
        for t in f.tensors:
            assert (t.offset - f.data_offset) % alignment == 0
            np.testing.assert_array_equal(f.raw(t.name).reshape(3, -1), built.raw[t.name])
    assert os.path.getsize(built.path) % alignment == 0


def test_raw_is_zero_copy_and_read_only(tmp_path, rng):
    built = tiny_llama_gguf(tmp_path / "t.gguf")
    f = gguf.open_file(built.path)
    name = "blk.0.attn_q.weight"
    raw = f.raw(name)
    assert isinstance(raw, np.memmap) and raw.dtype == np.uint8
    assert np.shares_memory(raw, f._map) and not raw.flags.writeable and not raw.flags.owndata
    with pytest.raises(ValueError):
        raw[0] = 1
    a = f.array(name)
    assert a.shape == (256, 256 // 32 * 18) and np.shares_memory(a, f._map)
    norm = f.array("blk.0.attn_norm.weight")
    assert norm.dtype == np.float32 and norm.shape == (256,)
    bf = f.array("blk.1.ffn_up.weight")
    assert bf.dtype == np.uint16 and bf.shape == (512, 256)
    f.close()
    assert raw[:4].tolist() == built.raw[name].reshape(-1)[:4].tolist()  # views outlive close()
    with pytest.raises(BadInputError, match="closed"):
        f.raw(name)


def test_tiny_llama_contents(tmp_path):
    built = tiny_llama_gguf(tmp_path / "t.gguf")
    with gguf.open_file(built.path) as f:
        assert f.kind == "gguf" and f.architecture == "llama"
        assert f.hyperparameters() == {
            "n_layer": 2, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_ctx": 256,
            "n_vocab": 100, "file_type": 2, "quantization_version": 2,
        }
        assert {t.type.name for t in f.tensors} == set(CODEC_TYPES)
        out = f.tensor("output.weight")
        assert out.shape == (100, 256) and out.n % 8 and out.n % 64
        for t in f.tensors:
            assert t.shape == built.shapes[t.name] and t.type.name == built.types[t.name]
            np.testing.assert_array_equal(f.raw(t.name), built.raw[t.name].reshape(-1))
        assert f.metadata["tokenizer.ggml.tokens"][5] == "tok5"


def test_hyperparameters_defaults(tmp_path):
    """n_head_kv falls back to n_head (llama.cpp); n_vocab to {arch}.vocab_size; absent -> None."""
    built = build_gguf(tmp_path / "h.gguf", {}, {
        "llama.attention.head_count": KV(8, VT.UINT32), "llama.vocab_size": KV(77, VT.UINT32),
    })
    with gguf.open_file(built.path) as f:
        h = f.hyperparameters()
        assert h["n_head"] == 8 and h["n_head_kv"] == 8 and h["n_vocab"] == 77 and h["n_layer"] is None


# ---------------------------------------------------------------------------------------------
# Strings: lazy arrays and the vectorized walk against its scalar twin
# ---------------------------------------------------------------------------------------------


def hostile_strings(rng: np.random.Generator, n: int) -> list[bytes]:
    """Strings that stress the walk: long (>= 256), empty, NUL runs, invalid UTF-8."""
    out = []
    for i in range(n):
        r = i % 7
        if r == 0:
            out.append(bytes(rng.integers(0, 256, int(rng.integers(256, 700)), dtype=np.uint8)))
        elif r == 1:
            out.append(b"")
        elif r == 2:
            out.append(b"\0" * int(rng.integers(1, 20)))
        else:
            out.append(f"tok{i}".encode() * int(rng.integers(1, 4)))
    return out


def test_lazy_string_array_with_hostile_strings(tmp_path, rng):
    strings = hostile_strings(rng, 3000)
    path = tmp_path / "s.gguf"
    w = GGUFStreamWriter(path)
    w.add_kv("s", strings, VT.ARRAY, VT.STRING)
    w.add_kv("z", 3, VT.UINT8)
    w.write_header()
    w.close()
    texts = [s.decode("utf-8", "surrogateescape") for s in strings]
    with gguf.open_file(path) as f:
        a = f.metadata["s"]
        assert f.metadata["z"] == 3
        assert a.tolist() == texts
        for i in (0, 1, 2, 3, 1234, -1):
            assert a[i] == texts[i]
        # re-encoding the decoded text gives the original bytes (surrogateescape round trip)
        w2 = GGUFStreamWriter(tmp_path / "s2.gguf")
        w2.add_kv("s", a.tolist(), VT.ARRAY, VT.STRING)
        w2.add_kv("copy", a)  # a GGUFArray is copied as stored
        w2.write_header()
        w2.close()
        with gguf.open_file(tmp_path / "s2.gguf") as g:
            assert g.metadata["s"] == a and g.metadata["copy"] == a


def pack_strings(strings: list[bytes]) -> bytes:
    return b"".join(struct.pack("<Q", len(s)) + s for s in strings)


def walk_both(blob: bytes, prefix: int, count: int, limit: int):
    buf = np.frombuffer(blob, dtype=np.uint8)
    mv = memoryview(buf)
    ref_end, ref_starts = gguf_values._walk_strings_ref(mv, prefix, count, limit)
    end, starts = gguf_values._walk_strings(buf, mv, prefix, count, limit, want_starts=True, scan_min=0)
    return (ref_end, ref_starts), (end, starts)


short_or_long = st.one_of(
    st.binary(max_size=12),
    st.builds(lambda n, b: bytes([b]) * n, st.integers(0, 20), st.sampled_from([0, 1, 255])),
    st.binary(min_size=250, max_size=300),
)


@settings(max_examples=150, deadline=None)
@given(
    strings=st.lists(short_or_long, max_size=60),
    prefix=st.integers(0, 9),
    cap=st.sampled_from([8, 16, 40, 256, 1 << 20]),
    cut=st.integers(0, 40),
)
def test_walk_strings_matches_reference(strings, prefix, cap, cut):
    blob = b"\0" * prefix + pack_strings(strings) + b"\0\0\0\0\0\0\0\0\x07"
    count = len(strings)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gguf_values, "_WINDOW_CAP", cap)
        for limit in (len(blob), max(prefix, len(blob) - 9 - cut)):
            (ref_end, ref_starts), (end, starts) = walk_both(blob, prefix, count, limit)
            assert end == ref_end
            if end >= 0:
                assert starts.tolist() == ref_starts


@pytest.mark.parametrize("cap", [1 << 20, 4096])
@pytest.mark.parametrize("empties", [0, 3000])
def test_walk_strings_large_mixed(rng, empties, cap):
    """A vocabulary-sized walk over several windows, every kind of string. Runs of empty
    strings break the chain at every record: the walk then goes scalar for the rest of the
    window and the next, and back to candidates after (small windows alternate often)."""
    strings = []
    for _ in range(4):
        strings += [b""] * empties + hostile_strings(rng, 5000)
    blob = b"\x01" * 3 + pack_strings(strings)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gguf_values, "_WINDOW_CAP", cap)
        (ref_end, ref_starts), (end, starts) = walk_both(blob, 3, len(strings), len(blob))
        assert end == ref_end == len(blob) and starts.tolist() == ref_starts
        (ref_end, _), (end, _) = walk_both(blob, 3, len(strings), len(blob) - 1)
        assert end == ref_end == -1


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=64), zeros=st.lists(st.integers(0, 63), max_size=48))
def test_string_candidates_exact(data, zeros):
    seg = np.frombuffer(data, dtype=np.uint8).copy()
    seg[[z for z in zeros if z < seg.size]] = 0
    w4 = seg.size // 4 * 4
    brute = [q for q in range(seg.size) if q + 7 < w4 and not seg[q + 1 : q + 8].any()]
    assert gguf_values._string_candidates(seg).tolist() == brute


# ---------------------------------------------------------------------------------------------
# The writer: state machine, checks, byte-exact copies
# ---------------------------------------------------------------------------------------------


def test_writer_streams_in_chunks_and_out_of_declaration_order(tmp_path, rng):
    a = random_blocks("Q4_0", 4, 64, rng)
    b = random_blocks("F32", 2, 8, rng)
    path = tmp_path / "c.gguf"
    w = GGUFStreamWriter(path)
    w.add_tensor_info("a", (4, 64), "Q4_0", offset=128)  # declared first, stored second
    w.add_tensor_info("b", (2, 8), "F32", offset=0)
    w.write_header()
    with pytest.raises(BadInputError, match="expected data for tensor 'b'"):
        w.write_tensor_data("a", a)
    w.write_tensor_data("b", b)
    w.write_tensor_data("a", a[:1], partial=True)
    w.write_tensor_data("a", a[1:], partial=True)
    w.close()
    with gguf.open_file(path) as f:
        assert [t.name for t in f.tensors] == ["a", "b"]
        assert f.tensor("a").offset == f.data_offset + 128
        np.testing.assert_array_equal(f.raw("a"), a.reshape(-1))
        np.testing.assert_array_equal(f.raw("b"), b.reshape(-1))


def test_writer_refuses_bad_use(tmp_path):
    path = tmp_path / "x.gguf"
    w = GGUFStreamWriter(path)
    w.add_kv("k", 1)
    with pytest.raises(BadInputError, match="duplicate metadata key"):
        w.add_kv("k", 2)
    with pytest.raises(BadInputError, match="cannot store 300 as uint8"):
        w.add_kv("u8", 300, VT.UINT8)
    with pytest.raises(BadInputError, match="'u8s'.*uint8"):
        w.add_kv("u8s", [1, 300], VT.ARRAY, VT.UINT8)
    with pytest.raises(BadInputError, match="do not fit in uint8"):
        w.add_kv("u8n", np.array([1, 300]), VT.ARRAY, VT.UINT8)
    with pytest.raises(BadInputError, match="do not fit in int32"):
        w.add_kv("i32f", [1.5], VT.ARRAY, VT.INT32)
    with pytest.raises(BadInputError, match="mixed types"):
        w.add_kv("mix", [1, "a"])
    with pytest.raises(BadInputError, match="general.alignment"):
        w.add_kv("general.alignment", 64, VT.UINT32)
    with pytest.raises(BadInputError, match="not a multiple of the Q4_0 block size"):
        w.add_tensor_info("t", (2, 33), "Q4_0")
    with pytest.raises(UnsupportedError, match="Q4_0_4_4"):
        w.add_tensor_info("t", (2, 32), 31)
    with pytest.raises(BadInputError, match="nbytes 10 does not match"):
        w.add_tensor_info("t", (2, 32), "Q4_0", nbytes=10)
    with pytest.raises(BadInputError, match="longer than 63 bytes"):
        w.add_tensor_info("x" * 64, (2, 32), "Q4_0")
    with pytest.raises(BadInputError, match="not a non-negative multiple of 32"):
        w.add_tensor_info("t", (2, 32), "Q4_0", offset=16)
    w.add_tensor_info("t", (2, 32), "Q4_0")
    with pytest.raises(BadInputError, match="duplicate tensor name"):
        w.add_tensor_info("t", (2, 32), "Q4_0")
    w.add_tensor_info("u", (1, 32), "Q4_0", offset=32)
    with pytest.raises(BadInputError, match="overlaps tensor 't'"):
        w.write_header()
    assert not path.exists()
    with pytest.raises(BadInputError, match="alignment 48 is not a power of two"):
        GGUFStreamWriter(tmp_path / "y.gguf", alignment=48)
    with pytest.raises(UnsupportedError, match="version 1"):
        GGUFStreamWriter(tmp_path / "y.gguf", version=1)


def test_writer_never_leaves_a_short_file(tmp_path, rng):
    path = tmp_path / "short.gguf"
    w = GGUFStreamWriter(path)
    w.add_tensor_info("a", (2, 32), "Q8_0")
    w.add_tensor_info("b", (2, 32), "Q8_0")
    w.write_header()
    with pytest.raises(BadInputError, match="got 10 bytes"):
        w.write_tensor_data("a", bytes(10))
    with pytest.raises(BadInputError, match="numpy array or bytes-like"):
        w.write_tensor_data("a", np.array([None] * 68, dtype=object))
    with pytest.raises(BadInputError, match="already called"):
        w.write_header()
    w.write_tensor_data("a", random_blocks("Q8_0", 2, 32, rng))
    # the bytes go to a temporary beside the target, never to the target itself
    assert not path.exists() and [p.name for p in tmp_path.iterdir()][0].startswith(".short.gguf.partial-")
    with pytest.raises(OutputError, match="1 of 2 tensors incomplete .*'b'.*removed"):
        w.close()
    assert not path.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(BadInputError, match="closed"):
        w.write_tensor_data("b", bytes(68))

    with pytest.raises(RuntimeError, match="boom"):
        with GGUFStreamWriter(path) as w2:
            w2.add_tensor_info("a", (2, 32), "Q8_0")
            w2.write_header()
            raise RuntimeError("boom")
    assert not path.exists() and list(tmp_path.iterdir()) == []

    w3 = GGUFStreamWriter(path)
    with pytest.raises(OutputError, match="before write_header"):
        w3.close()
    assert not path.exists()


def test_add_raw_kv_validates(tmp_path):
    w = GGUFStreamWriter(tmp_path / "r.gguf")
    good = pack_kv("a", VT.UINT16, struct.pack("<H", 5))
    assert w.add_raw_kv(good) == "a"
    with pytest.raises(BadInputError, match="1 bytes after its value"):
        w.add_raw_kv(pack_kv("b", VT.UINT16, struct.pack("<H", 5)) + b"\0")
    with pytest.raises(BadInputError, match="truncated"):
        w.add_raw_kv(pack_kv("c", VT.UINT32, b"\0\0"))
    with pytest.raises(BadInputError, match="duplicate"):
        w.add_raw_kv(good)


def test_copy_synthetic_byte_exact(tmp_path):
    for alignment in (32, 64):
        built = tiny_llama_gguf(tmp_path / f"src{alignment}.gguf", alignment=alignment)
        dst = tmp_path / f"dst{alignment}.gguf"
        gguf.copy_gguf(built.path, dst)
        assert dst.read_bytes() == built.path.read_bytes()


# ---------------------------------------------------------------------------------------------
# builders.py self-checks (its blocks decode to finite, moderate values in gguf-py)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", CODEC_TYPES)
def test_random_blocks_are_valid(rng, qtype):
    import gguf as ggufpy

    t = qtypes.get(qtype)
    k = 512
    blocks = random_blocks(qtype, 9, k, rng)
    assert blocks.dtype == np.uint8 and blocks.shape == (9, t.row_bytes(k)) and blocks.flags.c_contiguous
    values = ggufpy.quants.dequantize(blocks, ggufpy.GGMLQuantizationType(t.id))
    assert values.shape == (9, k) and np.isfinite(values).all()
    assert 0 < np.abs(values).max() < 1e4
    for f in BLOCK_FIELDS.get(t.name, ()):
        if f.kind.startswith("f16"):
            d = block_field(blocks, qtype, f.name).copy().view("<f2").astype(np.float32)
            assert np.isfinite(d).all() and (np.abs(d) >= 2.0**-10).all() and (np.abs(d) <= 2.0**-3).all()


# ---------------------------------------------------------------------------------------------
# Real files: ggml's C parser (fast, independent) and gguf-py's GGUFReader (slow)
# ---------------------------------------------------------------------------------------------


class _InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


def ggml_gguf_lib():
    spec = importlib.util.find_spec("libggml")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("libggml-python is not installed")
    lib = ctypes.CDLL(str(Path(list(spec.submodule_search_locations)[0]) / "lib64" / "libggml-base.so"))
    sig = {
        "gguf_init_from_file": (ctypes.c_void_p, [ctypes.c_char_p, _InitParams]),
        "gguf_free": (None, [ctypes.c_void_p]),
        "gguf_get_version": (ctypes.c_uint32, [ctypes.c_void_p]),
        "gguf_get_alignment": (ctypes.c_size_t, [ctypes.c_void_p]),
        "gguf_get_data_offset": (ctypes.c_size_t, [ctypes.c_void_p]),
        "gguf_get_n_kv": (ctypes.c_int64, [ctypes.c_void_p]),
        "gguf_get_key": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_kv_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_arr_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_arr_n": (ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_arr_data": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_arr_str": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t]),
        "gguf_get_val_data": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_val_str": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_n_tensors": (ctypes.c_int64, [ctypes.c_void_p]),
        "gguf_get_tensor_name": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_tensor_offset": (ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_tensor_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_tensor_size": (ctypes.c_size_t, [ctypes.c_void_p, ctypes.c_int64]),
        "gguf_get_tensor_ne": (ctypes.POINTER(ctypes.c_int64), [ctypes.c_void_p, ctypes.c_int64]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def compare_with_ggml(path: Path, full_string_arrays: bool = True) -> None:
    """Our reader vs ggml's gguf_init_from_file on every header field, key, value and tensor."""
    lib = ggml_gguf_lib()
    ctx = lib.gguf_init_from_file(os.fsencode(path), _InitParams(True, None))
    assert ctx, "ggml refused the file"
    try:
        f = gguf.open_file(path)
        assert f.version == lib.gguf_get_version(ctx)
        assert f.alignment == lib.gguf_get_alignment(ctx)
        assert f.data_offset == lib.gguf_get_data_offset(ctx)
        n_kv = lib.gguf_get_n_kv(ctx)
        assert list(f.metadata) == [lib.gguf_get_key(ctx, i).decode() for i in range(n_kv)]
        for i, (key, value) in enumerate(f.metadata.items()):
            info = f.kv_infos[key]
            assert info.vtype == lib.gguf_get_kv_type(ctx, i), key
            if info.vtype == VT.STRING:
                assert value == lib.gguf_get_val_str(ctx, i).decode(), key
            elif info.vtype != VT.ARRAY:
                size = struct.calcsize("<" + gguf_values._SCALARS[info.vtype].code)
                raw = ctypes.string_at(lib.gguf_get_val_data(ctx, i), size)
                assert info.end - info.value_start == size
                assert f.bytes_at(info.value_start, info.end).tobytes() == raw, key
            else:
                assert value.item_type == lib.gguf_get_arr_type(ctx, i), key
                assert len(value) == lib.gguf_get_arr_n(ctx, i), key
                if value.item_type == VT.STRING:
                    idx = range(len(value)) if full_string_arrays else [0, 1, len(value) // 2, len(value) - 1]
                    ours = value.tolist()
                    assert [ours[j] for j in idx] == [lib.gguf_get_arr_str(ctx, i, j).decode() for j in idx], key
                else:
                    nbytes = value.nbytes
                    assert value.to_numpy().tobytes() == ctypes.string_at(lib.gguf_get_arr_data(ctx, i), nbytes), key
        n = lib.gguf_get_n_tensors(ctx)
        assert len(f.tensors) == n
        for i, (t, rec) in enumerate(zip(f.tensors, f.tensor_records)):
            assert t.name == lib.gguf_get_tensor_name(ctx, i).decode()
            assert t.type.id == lib.gguf_get_tensor_type(ctx, i)
            assert rec.rel_offset == lib.gguf_get_tensor_offset(ctx, i)
            assert t.offset == f.data_offset + rec.rel_offset
            assert t.nbytes == lib.gguf_get_tensor_size(ctx, i)
            ne = lib.gguf_get_tensor_ne(ctx, i)
            assert list(rec.ne) + [1] * (4 - len(rec.ne)) == [ne[j] for j in range(4)]
            assert t.shape == tuple(reversed(rec.ne))
    finally:
        lib.gguf_free(ctx)


@pytest.mark.real
def test_smollm2_matches_ggml(smollm2):
    compare_with_ggml(smollm2)


@pytest.mark.real
def test_gemma_matches_ggml(gemma):
    compare_with_ggml(gemma)


@pytest.mark.real
def test_gemma_hyperparameters(gemma):
    with gguf.open_file(gemma) as f:
        assert f.architecture == "gemma3"
        assert f.hyperparameters() == {
            "n_layer": 18, "n_embd": 640, "n_head": 4, "n_head_kv": 1, "n_ff": 2048, "n_ctx": 32768,
            "n_vocab": 262144, "file_type": 15, "quantization_version": 2,
        }
        assert {t.type.name for t in f.tensors} == {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"}
        assert f.tensor("token_embd.weight").shape == (262144, 640)


def compare_with_gguf_py(path: Path, sample_tensor_bytes: bool = True) -> None:
    import gguf as ggufpy

    r = ggufpy.GGUFReader(str(path))
    f = gguf.open_file(path)
    assert f.alignment == r.alignment and f.data_offset == r.data_offset
    fields = {k: v for k, v in r.fields.items() if not k.startswith("GGUF.")}
    assert list(f.metadata) == list(fields)
    for key, field in fields.items():
        ours = f.metadata[key]
        assert [int(t) for t in field.types] == (
            [VT.ARRAY, ours.item_type] if isinstance(ours, GGUFArray) else [f.kv_infos[key].vtype]
        ), key
        theirs = field.contents()
        assert (ours.tolist() if isinstance(ours, GGUFArray) else ours) == theirs, key
    assert [t.name for t in f.tensors] == [t.name for t in r.tensors]
    for ours, theirs in zip(f.tensors, r.tensors):
        assert ours.shape == tuple(int(d) for d in reversed(theirs.shape.tolist()))
        assert ours.type.id == int(theirs.tensor_type)
        assert ours.offset == theirs.data_offset and ours.nbytes == theirs.n_bytes
        if sample_tensor_bytes:
            assert np.array_equal(f.raw(ours.name), theirs.data.reshape(-1).view(np.uint8))


@pytest.mark.real
@pytest.mark.slow
def test_smollm2_matches_gguf_py(smollm2):
    compare_with_gguf_py(smollm2)


@pytest.mark.real
@pytest.mark.slow
def test_gemma_matches_gguf_py(gemma):
    compare_with_gguf_py(gemma)


@pytest.mark.real
def test_copy_smollm2_byte_exact(smollm2, tmp_path):
    dst = tmp_path / "copy.gguf"
    gguf.copy_gguf(smollm2, dst)
    assert sha256(dst) == sha256(smollm2)


@pytest.mark.real
def test_copy_gemma_byte_exact(gemma, tmp_path):
    dst = tmp_path / "copy.gguf"
    gguf.copy_gguf(gemma, dst)
    assert sha256(dst) == sha256(gemma)
