"""formats/safetensors.py on well-formed input: single files, HF folders, shards, MiniLM.

Every read is cross-checked against the ``safetensors`` package (``safe_open`` with numpy, or
``safetensors.deserialize`` for BF16, which numpy cannot represent).
"""

from __future__ import annotations

import json
import logging
import os
import struct

import numpy as np
import pytest
import safetensors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import TensorSpec, safe_open, serialize_file
from safetensors.numpy import save_file

from panelpack.formats import qtypes
from panelpack.formats.errors import BadInputError, FormatError, OutputError, UnsupportedError
from panelpack.formats.safetensors import (
    DTYPES,
    PLAIN_TYPES,
    HFCheckpoint,
    SafetensorsFile,
    bf16_to_f32,
    is_plain,
)
from panelpack.formats.safetensors import save_file as our_save_file

# numpy dtype -> the safetensors dtype it is written as, and our expected registry type name
NUMPY_CASES = {
    np.float64: ("F64", "F64"),
    np.float32: ("F32", "F32"),
    np.float16: ("F16", "F16"),
    np.int64: ("I64", "I64"),
    np.int32: ("I32", "I32"),
    np.int16: ("I16", "I16"),
    np.int8: ("I8", "I8"),
    np.uint8: ("U8", None),
    np.bool_: ("BOOL", None),
    np.uint16: ("U16", None),
    np.uint32: ("U32", None),
    np.uint64: ("U64", None),
    np.complex64: ("C64", None),
}


def random_array(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)


def save_bf16(path, tensors: dict[str, np.ndarray], metadata=None) -> None:
    """Write raw-bit uint16 arrays as BF16 with the safetensors library itself."""
    keep = {k: np.ascontiguousarray(v, dtype=np.uint16) for k, v in tensors.items()}
    specs = {
        k: TensorSpec(dtype="bfloat16", shape=list(v.shape), data_ptr=v.ctypes.data, data_len=v.nbytes)
        for k, v in keep.items()
    }
    serialize_file(specs, str(path), metadata=metadata)


def write_raw(path, header: dict, data: bytes) -> None:
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def library_metadata(path) -> dict[str, str]:
    with safe_open(str(path), framework="numpy") as f:
        return f.metadata() or {}


def library_tensors(path) -> dict[str, np.ndarray]:
    with safe_open(str(path), framework="numpy") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


# -- single files -------------------------------------------------------------------------------


def test_every_numpy_dtype_matches_library(tmp_path, rng):
    arrays = {
        f"t_{np.dtype(dt).name}": random_array(rng, dt, (3, 5) if i % 2 else (7,))
        for i, dt in enumerate(NUMPY_CASES)
    }
    arrays["scalar"] = np.array(1.5, dtype=np.float32)
    arrays["empty"] = np.zeros((0, 4), dtype=np.float16)
    path = tmp_path / "m.safetensors"
    save_file(arrays, str(path), metadata={"format": "np", "who": "test"})
    ref = library_tensors(path)
    blob = path.read_bytes()

    with SafetensorsFile(path) as f:
        assert f.kind == "safetensors"
        assert sorted(f.names) == sorted(arrays)
        assert dict(f.metadata) == {"format": "np", "who": "test"}
        assert f.file_size == len(blob)
        assert f.data_offset == 8 + struct.unpack("<Q", blob[:8])[0]
        for name, want in ref.items():
            info = f.tensor(name)
            got = f.array(name)
            assert info.shape == want.shape
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            # offset is absolute in the file
            assert blob[info.offset : info.offset + info.nbytes] == want.tobytes()
            assert info.file == str(path)
            # zero-copy, read-only view onto the mapping
            raw = f.raw(name)
            assert raw.dtype == np.uint8 and raw.size == info.nbytes
            assert not raw.flags.writeable and not got.flags.writeable
            assert not raw.flags.owndata
        # types: registry types where the registry has them, plain types otherwise
        for dt, (st_name, reg) in NUMPY_CASES.items():
            t = f.tensor(f"t_{np.dtype(dt).name}").type
            assert t.name == st_name
            if reg is None:
                assert is_plain(t) and t is PLAIN_TYPES[st_name] and t.codec is None
            else:
                assert t is qtypes.get(reg) and not is_plain(t)


def test_tensors_come_in_data_order(tmp_path):
    # header lists b before a, data holds a before b; also a zero-size tensor and a scalar
    a = np.arange(6, dtype=np.int32)
    b = np.array(2.5, dtype=np.float64)
    header = {
        "b": {"dtype": "F64", "shape": [], "data_offsets": [24, 32]},
        "z": {"dtype": "F32", "shape": [0, 3], "data_offsets": [24, 24]},
        "a": {"dtype": "I32", "shape": [2, 3], "data_offsets": [0, 24]},
        "__metadata__": None,
    }
    path = tmp_path / "hand.safetensors"
    write_raw(path, header, a.tobytes() + b.tobytes())
    with SafetensorsFile(path) as f:
        assert f.names == ["a", "z", "b"]
        assert f.metadata == {}
        np.testing.assert_array_equal(f.array("a"), a.reshape(2, 3))
        assert f.array("b").shape == () and f.array("b")[()] == 2.5
        assert f.array("z").shape == (0, 3)
    assert sorted(library_tensors(path)) == ["a", "b", "z"]  # the library agrees it is valid


def test_bf16_raw_bits_match_library(tmp_path, rng):
    bits = rng.integers(0, 1 << 16, (4, 32), dtype=np.uint16)
    path = tmp_path / "bf16.safetensors"
    save_bf16(path, {"w": bits, "v": bits[0]}, metadata={"dtype": "bf16"})
    lib = dict(safetensors.deserialize(path.read_bytes()))
    with SafetensorsFile(path) as f:
        info = f.tensor("w")
        assert info.type is qtypes.BF16 and info.shape == (4, 32) and info.nbytes == 256
        got = f.array("w")
        assert got.dtype == np.uint16
        np.testing.assert_array_equal(got, bits)
        assert lib["w"]["dtype"] == "BF16" and bytes(lib["w"]["data"]) == got.tobytes()
        assert bytes(lib["v"]["data"]) == f.raw("v").tobytes()


def test_bf16_to_f32_is_exact():
    # every bf16 bit pattern widens to the f32 whose top half it is, and back
    bits = np.arange(1 << 16, dtype=np.uint16)
    f = bf16_to_f32(bits)
    assert f.dtype == np.float32
    np.testing.assert_array_equal((f.view(np.uint32) >> 16).astype(np.uint16), bits)
    np.testing.assert_array_equal(f.view(np.uint32) & 0xFFFF, 0)
    # known values: 1.0, -2.0, +inf, -0.0, the smallest subnormal
    known = np.array([0x3F80, 0xC000, 0x7F80, 0x8000, 0x0001], dtype=np.uint16)
    want = np.array([1.0, -2.0, np.inf, -0.0, np.float32(2.0**-133)], dtype=np.float32)
    np.testing.assert_array_equal(bf16_to_f32(known).view(np.uint32), want.view(np.uint32))
    # f32 values representable in bf16 survive truncation + widening
    x = np.array([0.15625, -3.0, 1e-3], dtype=np.float32)
    x_bf = (x.view(np.uint32) >> 16).astype(np.uint16)
    assert bf16_to_f32(x_bf)[0] == np.float32(0.15625)
    assert bf16_to_f32(x_bf.reshape(3, 1)).shape == (3, 1)
    with pytest.raises(BadInputError, match="uint16"):
        bf16_to_f32(np.zeros(3, dtype=np.float16))


def test_plain_types_stay_out_of_the_registry():
    for name, t in PLAIN_TYPES.items():
        assert name not in qtypes.BY_NAME
        assert t.id == -1 and t.block_size == 1 and t.codec is None
        with pytest.raises(UnsupportedError):
            t.codec_module
    for name in ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8"):
        assert DTYPES[name] is qtypes.BY_NAME[name]


def test_8bit_float_is_read_as_raw_bits(tmp_path):
    path = tmp_path / "f8.safetensors"
    write_raw(path, {"q": {"dtype": "F8_E4M3", "shape": [2, 4], "data_offsets": [0, 8]}}, bytes(range(8)))
    with SafetensorsFile(path) as f:
        got = f.array("q")
        assert got.dtype == np.uint8 and got.shape == (2, 4)
        assert got.tobytes() == bytes(range(8))


def test_unknown_tensor_name(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"a": np.zeros(2, np.float32)}, str(path))
    with SafetensorsFile(path) as f, pytest.raises(BadInputError, match="no tensor named 'b'"):
        f.raw("b")


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(BadInputError, match="no such file"):
        SafetensorsFile(tmp_path / "nope.safetensors")
    with pytest.raises(BadInputError, match="is a folder"):
        SafetensorsFile(tmp_path)


def test_close_and_reopen(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"a": np.arange(4, dtype=np.float32)}, str(path))
    f = SafetensorsFile(path)
    view = f.array("a")
    f.close()
    np.testing.assert_array_equal(view, np.arange(4))  # views outlive close()
    np.testing.assert_array_equal(f.array("a"), np.arange(4))  # raw() maps again


NP_DTYPES = st.sampled_from([np.float32, np.float16, np.float64, np.int8, np.int32, np.uint8, np.bool_])
SHAPES = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=st.dictionaries(
        st.text(alphabet="abcxyz._0123", min_size=1, max_size=8), st.tuples(NP_DTYPES, SHAPES), max_size=6
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_roundtrip_against_library(tmp_path, spec, seed):
    rng = np.random.default_rng(seed)
    arrays = {k: random_array(rng, dt, shape) for k, (dt, shape) in spec.items()}
    path = tmp_path / "p.safetensors"
    save_file(arrays, str(path))
    ref = library_tensors(path)
    with SafetensorsFile(path) as f:
        assert sorted(f.names) == sorted(ref)
        for k, v in ref.items():
            np.testing.assert_array_equal(f.array(k), v)
            assert f.array(k).dtype == v.dtype


# -- Hugging Face folders -----------------------------------------------------------------------

HPARAM_KEYS = ("n_layer", "n_embd", "n_head", "n_head_kv", "n_ff", "n_ctx", "n_vocab")


def hparams(*values: int) -> dict[str, int]:
    """The hyperparameters a config with every key gives, in HPARAM_KEYS order."""
    assert len(values) == len(HPARAM_KEYS)
    return dict(zip(HPARAM_KEYS, values))


LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 256,
    "vocab_size": 100,
    "rms_norm_eps": 1e-5,
}


def make_sharded(folder, rng, n_shards=3, per_shard=3, dtype=np.float32, config=LLAMA_CONFIG):
    """A sharded HF folder: shards, index, config and side files. Returns {name: array}."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays, weight_map = {}, {}
    for s in range(n_shards):
        shard = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {f"layers.{s}.w{j}.weight": random_array(rng, dtype, (8, 16)) for j in range(per_shard)}
        if dtype is np.uint16:
            save_bf16(folder / shard, part)
        else:
            save_file(part, str(folder / shard))
        arrays.update(part)
        weight_map.update({k: shard for k in part})
    index = {"metadata": {"total_size": sum(a.nbytes for a in arrays.values())}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    return arrays


def test_hf_sharded_folder(tmp_path, rng):
    arrays = make_sharded(tmp_path / "m", rng)
    with HFCheckpoint(tmp_path / "m") as ck:
        assert ck.kind == "hf"
        assert sorted(ck.names) == sorted(arrays)
        assert len(ck.shards) == 3
        assert ck.index_file == str(tmp_path / "m" / "model.safetensors.index.json")
        assert ck.files[-1] == ck.index_file and len(ck.files) == 4
        for name, want in arrays.items():
            np.testing.assert_array_equal(ck.array(name), want)
            info = ck.tensor(name)
            assert os.path.basename(info.file) == f"model-{int(name.split('.')[1]) + 1:05d}-of-00003.safetensors"
        assert ck.config == LLAMA_CONFIG and ck.metadata == LLAMA_CONFIG
        assert ck.architecture == "LlamaForCausalLM" and ck.model_type == "llama"
        assert ck.hyperparameters() == hparams(2, 64, 4, 2, 128, 256, 100)
        rel = ["1_Pooling/config.json", "config.json", "tokenizer.json", "tokenizer_config.json"]
        assert ck.side_files == [str(tmp_path / "m" / r) for r in rel]
        assert all(os.path.isfile(f) for f in ck.side_files)


def test_hf_st_metadata_merges_shards(tmp_path, rng):
    folder = tmp_path / "m"
    make_sharded(folder, rng, n_shards=2, per_shard=1)
    save_file({"layers.0.w0.weight": np.zeros((8, 16), np.float32)}, str(folder / "model-00001-of-00002.safetensors"),
              metadata={"format": "pt", "a": "1"})
    save_file({"layers.1.w0.weight": np.zeros((8, 16), np.float32)}, str(folder / "model-00002-of-00002.safetensors"),
              metadata={"format": "np", "b": "2"})
    with HFCheckpoint(folder) as ck:
        assert ck.st_metadata == {"format": "pt", "a": "1", "b": "2"}
        assert ck.metadata == ck.config  # metadata is the config for a folder
    with SafetensorsFile(folder / "model-00002-of-00002.safetensors") as f:
        assert f.st_metadata == {"format": "np", "b": "2"} == dict(f.metadata) and f.side_files == []


def test_hf_sharded_bf16(tmp_path, rng):
    arrays = make_sharded(tmp_path / "m", rng, n_shards=2, dtype=np.uint16)
    with HFCheckpoint(tmp_path / "m") as ck:
        for name, want in arrays.items():
            assert ck.tensor(name).type is qtypes.BF16
            np.testing.assert_array_equal(ck.array(name), want)


def test_hf_single_file_folder_and_config_fallbacks(tmp_path, rng):
    folder = tmp_path / "m"
    folder.mkdir()
    save_file({"w": random_array(rng, np.float16, (4, 8))}, str(folder / "model.safetensors"))
    # no architectures: model_type; no num_key_value_heads: n_head; nested text_config
    cfg = {"model_type": "gemma3", "text_config": {"num_hidden_layers": 18, "num_attention_heads": 4}}
    (folder / "config.json").write_text(json.dumps(cfg))
    with HFCheckpoint(folder) as ck:
        assert ck.names == ["w"] and ck.index_file is None and ck.files == [str(folder / "model.safetensors")]
        assert ck.architecture == "gemma3"
        assert ck.hyperparameters() == {"n_layer": 18, "n_head": 4, "n_head_kv": 4}
    (folder / "config.json").unlink()
    with HFCheckpoint(folder) as ck:
        assert ck.config == {} and ck.architecture is None and ck.hyperparameters() == {}


def test_hf_single_file_wins_over_index(tmp_path, rng, caplog):
    make_sharded(tmp_path / "m", rng, n_shards=2)
    save_file({"only": np.zeros(3, np.float32)}, str(tmp_path / "m" / "model.safetensors"))
    with caplog.at_level(logging.WARNING), HFCheckpoint(tmp_path / "m") as ck:
        assert ck.names == ["only"]
    assert "model.safetensors.index.json" in caplog.text


def test_hf_unindexed_shards(tmp_path, rng):
    folder = tmp_path / "m"
    folder.mkdir()
    save_file({"a": random_array(rng, np.float32, (2, 3))}, str(folder / "part1.safetensors"))
    save_file({"b": random_array(rng, np.float32, (3,))}, str(folder / "part2.safetensors"))
    with HFCheckpoint(folder) as ck:
        assert ck.names == ["a", "b"] and ck.index_file is None
        np.testing.assert_array_equal(ck.array("b"), library_tensors(folder / "part2.safetensors")["b"])


def test_hf_unindexed_duplicates_are_one_error(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    save_file({"a": np.zeros(2, np.float32), "b": np.zeros(1, np.int8)}, str(folder / "x.safetensors"))
    save_file({"a": np.ones(2, np.float32), "b": np.ones(1, np.int8)}, str(folder / "y.safetensors"))
    with pytest.raises(FormatError) as e:
        HFCheckpoint(folder)
    msg = str(e.value)
    assert str(folder) in msg and "2 tensor(s) appear in more than one file" in msg
    assert "a (x.safetensors and y.safetensors)" in msg and "b (x.safetensors and y.safetensors)" in msg


def _rewrite_index(folder, edit):
    p = folder / "model.safetensors.index.json"
    doc = json.loads(p.read_text())
    edit(doc["weight_map"])
    p.write_text(json.dumps(doc))


def test_index_problems_all_in_one_error(tmp_path, rng):
    folder = tmp_path / "m"
    make_sharded(folder, rng, n_shards=3)
    # 1) a missing shard file
    (folder / "model-00003-of-00003.safetensors").unlink()
    # 2) an extra tensor in shard 1 that the index does not list, 3) a duplicate in shard 2
    save_file(
        {
            "layers.0.w0.weight": np.zeros((8, 16), np.float32),
            "layers.0.w1.weight": np.zeros((8, 16), np.float32),
            "layers.0.w2.weight": np.zeros((8, 16), np.float32),
            "extra.bias": np.zeros(8, np.float32),
        },
        str(folder / "model-00001-of-00003.safetensors"),
    )
    save_file(
        {"layers.1.w0.weight": np.zeros((8, 16), np.float32), "layers.0.w2.weight": np.zeros((8, 16), np.float32)},
        str(folder / "model-00002-of-00003.safetensors"),
    )
    # 4) tensors the index puts in shard 2 that are not there (w1, w2 of layer 1)
    with pytest.raises(FormatError) as e:
        HFCheckpoint(folder)
    msg = str(e.value)
    assert msg.startswith(str(folder / "model.safetensors.index.json"))
    assert "index does not match the shard files" in msg
    assert "1 shard file(s) missing: model-00003-of-00003.safetensors (3 tensors)" in msg
    assert "2 tensor(s) missing from their shard" in msg
    assert "layers.1.w1.weight (listed in model-00002-of-00003.safetensors)" in msg
    assert "layers.1.w2.weight" in msg
    assert "1 tensor(s) in the shards but not in the index: extra.bias (in model-00001-of-00003.safetensors)" in msg
    assert (
        "1 tensor(s) in more than one shard: layers.0.w2.weight "
        "(model-00001-of-00003.safetensors and model-00002-of-00003.safetensors)" in msg
    )
    assert "\n" not in msg  # one line


@pytest.mark.parametrize("problem", ["missing_shard", "missing_tensor", "extra_tensor", "duplicate"])
def test_index_each_problem_alone(tmp_path, rng, problem):
    folder = tmp_path / "m"
    make_sharded(folder, rng, n_shards=2, per_shard=2)
    s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    if problem == "missing_shard":
        (folder / s2).unlink()
        expect = f"1 shard file(s) missing: {s2} (2 tensors)"
    elif problem == "missing_tensor":
        _rewrite_index(folder, lambda wm: wm.update({"ghost.weight": s1}))
        expect = f"1 tensor(s) missing from their shard: ghost.weight (listed in {s1})"
    elif problem == "extra_tensor":
        _rewrite_index(folder, lambda wm: wm.pop("layers.1.w1.weight"))
        expect = f"1 tensor(s) in the shards but not in the index: layers.1.w1.weight (in {s2})"
    else:
        save_file(
            {"layers.1.w0.weight": np.zeros((8, 16), np.float32), "layers.0.w1.weight": np.zeros((8, 16), np.float32)},
            str(folder / s2),
        )
        expect = f"layers.0.w1.weight ({s1} and {s2})"
    with pytest.raises(FormatError, match="index does not match the shard files") as e:
        HFCheckpoint(folder)
    assert expect in str(e.value)


def test_index_misplaced_tensor_says_where_it_is(tmp_path, rng):
    folder = tmp_path / "m"
    make_sharded(folder, rng, n_shards=2, per_shard=2)
    s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    _rewrite_index(folder, lambda wm: wm.update({"layers.0.w0.weight": s2}))
    with pytest.raises(FormatError) as e:
        HFCheckpoint(folder)
    assert f"layers.0.w0.weight (listed in {s2}, found in {s1})" in str(e.value)


def test_index_error_lists_are_capped(tmp_path, rng):
    folder = tmp_path / "m"
    make_sharded(folder, rng, n_shards=1, per_shard=1)
    _rewrite_index(folder, lambda wm: wm.update({f"ghost.{i}": "model-00001-of-00001.safetensors" for i in range(20)}))
    with pytest.raises(FormatError) as e:
        HFCheckpoint(folder)
    msg = str(e.value)
    assert "20 tensor(s) missing from their shard" in msg and "... and 12 more" in msg
    assert "ghost.7 " in msg and "ghost.8 " not in msg


@pytest.mark.parametrize(
    "index, match",
    [
        ('{"metadata": {}}', "field 'weight_map' is missing"),
        ('{"weight_map": []}', "field 'weight_map' is a JSON array"),
        ('{"weight_map": {"a": 3}}', "shard of tensor 'a' is 3"),
        ('{"weight_map": {"a": "../evil.safetensors"}}', "outside the folder"),
        ('{"weight_map": {"a": "/etc/passwd"}}', "outside the folder"),
        ('{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}', "key 'a' appears twice"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "is a JSON array, expected an object"),
    ],
)
def test_bad_index_files(tmp_path, index, match):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(index)
    with pytest.raises(FormatError, match=match) as e:
        HFCheckpoint(folder)
    assert "model.safetensors.index.json" in str(e.value)


def test_bad_config_json(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    save_file({"w": np.zeros(2, np.float32)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"hidden_size": ')
    with pytest.raises(FormatError, match="config.json is not valid JSON") as e:
        HFCheckpoint(folder)
    assert str(folder / "config.json") in str(e.value)


def test_pickle_only_folder_is_unsupported(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02pickle")
    (folder / "config.json").write_text("{}")
    with pytest.raises(UnsupportedError, match=r"pytorch_model\.bin.*panelpack reads safetensors") as e:
        HFCheckpoint(folder)
    assert str(folder) in str(e.value)


def test_folder_without_weights(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    with pytest.raises(BadInputError, match="no weights found.*found: nothing"):
        HFCheckpoint(folder)
    (folder / "config.json").write_text("{}")
    with pytest.raises(BadInputError, match=r"no weights found: expected model\.safetensors.*found: config\.json"):
        HFCheckpoint(folder)
    (folder / "x.gguf").write_bytes(b"GGUF")
    with pytest.raises(BadInputError, match=r"GGUF file\(s\) x\.gguf: pass the \.gguf file itself"):
        HFCheckpoint(folder)
    with pytest.raises(BadInputError, match="not a folder"):
        HFCheckpoint(folder / "config.json")


def test_shard_header_errors_name_the_shard(tmp_path, rng):
    folder = tmp_path / "m"
    make_sharded(folder, rng, n_shards=2)
    bad = folder / "model-00002-of-00002.safetensors"
    bad.write_bytes(bad.read_bytes()[:-1])  # truncated: the last tensor runs past the end
    with pytest.raises(FormatError) as e:
        HFCheckpoint(folder)
    assert str(bad) in str(e.value) and "past the end of the file" in str(e.value)


# -- the real checkpoint ------------------------------------------------------------------------


@pytest.mark.real
def test_minilm_every_tensor_equals_library(minilm):
    ref = library_tensors(minilm / "model.safetensors")
    with HFCheckpoint(minilm) as ck:
        assert sorted(ck.names) == sorted(ref)
        assert ck.architecture == "BertModel" and ck.model_type == "bert"
        assert ck.hyperparameters() == hparams(6, 384, 12, 12, 1536, 512, 30522)
        rel = [os.path.relpath(f, minilm) for f in ck.side_files]
        assert "config.json" in rel and "tokenizer.json" in rel and "vocab.txt" in rel
        assert os.path.join("1_Pooling", "config.json") in rel
        assert not any(r.endswith(".safetensors") or r.startswith(".") for r in rel)
        assert ck.st_metadata == library_metadata(minilm / "model.safetensors")
        for name, want in ref.items():
            got = ck.array(name)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert got.tobytes() == want.tobytes(), name
        word = ck.tensor("embeddings.word_embeddings.weight")
        assert word.shape == (30522, 384) and word.n == 30522 and word.k == 384


def test_index_ignores_and_reports_unnamed_shards(tmp_path, rng, caplog):
    folder = tmp_path / "m"
    arrays = make_sharded(folder, rng, n_shards=2)
    save_file({"stale": np.zeros(2, np.float32)}, str(folder / "old-model.safetensors"))
    with caplog.at_level(logging.WARNING), HFCheckpoint(folder) as ck:
        assert sorted(ck.names) == sorted(arrays)
    assert "ignoring old-model.safetensors, not named by the index" in caplog.text


def test_explicit_index_choice(tmp_path, rng):
    folder = tmp_path / "m"
    make_sharded(folder, rng, n_shards=2)
    os.rename(folder / "model.safetensors.index.json", folder / "other.safetensors.index.json")
    with HFCheckpoint(folder) as ck:  # the only index, whatever its prefix
        assert ck.index_file.endswith("other.safetensors.index.json") and len(ck) == 6
    with HFCheckpoint(folder, index="other.safetensors.index.json") as ck:
        assert len(ck) == 6
    with pytest.raises(BadInputError, match="no index file 'nope.safetensors.index.json'"):
        HFCheckpoint(folder, index="nope.safetensors.index.json")
    (folder / "third.safetensors.index.json").write_text("{}")
    with pytest.raises(BadInputError, match="several safetensors indexes"):
        HFCheckpoint(folder)


# -- the writer ---------------------------------------------------------------------------------


def test_writer_matches_library_bytes(tmp_path, rng):
    arrays = {
        f"t_{np.dtype(dt).name}": random_array(rng, dt, (3, 5) if i % 2 else (7,)) for i, dt in enumerate(NUMPY_CASES)
    }
    arrays["scalar"] = np.array(1.5, dtype=np.float64)
    arrays["empty"] = np.zeros((0, 4), dtype=np.float16)
    arrays["big_endian"] = np.arange(6, dtype=">i4").reshape(2, 3)
    arrays["strided"] = random_array(rng, np.float32, (4, 6))[:, ::2]
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "lib.safetensors"
    our_save_file(arrays, ours, metadata={"format": "np"})
    save_file({k: np.ascontiguousarray(v) if v.ndim else v for k, v in arrays.items()}, str(theirs),
              metadata={"format": "np"})
    assert ours.read_bytes() == theirs.read_bytes()
    assert not (tmp_path / "ours.safetensors.partial").exists()
    with SafetensorsFile(ours) as f:
        for k, v in arrays.items():
            np.testing.assert_array_equal(f.array(k), v)


def test_writer_bf16_matches_library_bytes(tmp_path, rng):
    bits = {"w": rng.integers(0, 1 << 16, (4, 8), dtype=np.uint16), "n": rng.integers(0, 1 << 16, 8, dtype=np.uint16)}
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "lib.safetensors"
    our_save_file({k: ("BF16", v) for k, v in bits.items()}, ours)
    save_bf16(theirs, bits)
    assert ours.read_bytes() == theirs.read_bytes()
    with SafetensorsFile(ours) as f:
        assert f.tensor("w").type is qtypes.BF16
        np.testing.assert_array_equal(f.array("w"), bits["w"])


def test_writer_errors(tmp_path):
    p = tmp_path / "x.safetensors"
    with pytest.raises(BadInputError, match="BF16 takes uint16 data, got float32") as e:
        our_save_file({"a": ("BF16", np.zeros(2, np.float32))}, p)
    assert str(p) in str(e.value) and "tensor 'a'" in str(e.value)
    with pytest.raises(UnsupportedError, match="numpy dtype <U1 has no safetensors dtype"):
        our_save_file({"a": np.array(["x"])}, p)
    with pytest.raises(UnsupportedError, match="dtype 'Q4_0' cannot be written"):
        our_save_file({"a": ("Q4_0", np.zeros(18, np.uint8))}, p)
    with pytest.raises(BadInputError, match="other than '__metadata__'"):
        our_save_file({"__metadata__": np.zeros(1, np.uint8)}, p)
    with pytest.raises(BadInputError, match="metadata must map strings to strings"):
        our_save_file({"a": np.zeros(1, np.uint8)}, p, metadata={"n": 1})
    with pytest.raises(OutputError, match="cannot write"):
        our_save_file({"a": np.zeros(1, np.uint8)}, tmp_path / "no" / "such" / "dir.safetensors")
    assert not p.exists()
