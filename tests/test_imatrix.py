"""--imatrix: llama.cpp's importance-matrix files (legacy binary and GGUF) and quantizing with
the importance weights, byte-identical with ggml's quantizers given the same weights."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from panelpack import repack
from panelpack.convert import convert, mixes, plan
from panelpack.formats import blocks, imatrix, qtypes
from panelpack.formats.bundle import Bundle
from panelpack.formats.checkpoint import open_checkpoint
from panelpack.formats.errors import BadInputError, FormatError

import ggml_ref
from builders import tiny_llama_gguf
from tiers import fast_only

needs_ggml = pytest.mark.skipif(not ggml_ref.available(), reason="libggml-python is not installed")
WEIGHTED = tuple(t.lower for t in qtypes.QUANTIZABLE if t.quantized and t.name != "Q8_0")


def write_legacy(path, entries: dict[str, np.ndarray], ncall: int = 10, chunks: int = 7, dataset: str = "wiki.txt"):
    out = [struct.pack("<i", len(entries))]
    for name, v in entries.items():
        nb = name.encode()
        out += [struct.pack("<i", len(nb)), nb, struct.pack("<ii", ncall, v.size), np.asarray(v, "<f4").tobytes()]
    ds = dataset.encode()
    out += [struct.pack("<i", chunks), struct.pack("<i", len(ds)), ds]
    path.write_bytes(b"".join(out))
    return path


def write_gguf_imatrix(path, entries: dict[str, np.ndarray], counts: dict[str, np.ndarray]):
    import gguf

    w = gguf.GGUFWriter(str(path), "imatrix")
    w.add_array("imatrix.datasets", ["calib.txt"])
    w.add_uint32("imatrix.chunk_count", 12)
    w.add_uint32("imatrix.chunk_size", 512)
    for name, v in entries.items():
        w.add_tensor(name + ".in_sum2", np.asarray(v, np.float32))
        w.add_tensor(name + ".counts", np.asarray(counts[name], np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@needs_ggml
@pytest.mark.parametrize("name", fast_only(WEIGHTED, {"q4_0"}))
def test_weighted_quantize_equals_ggml(name, rng):
    for scale in (1e-3, 1.0, 1e3):
        x = (rng.standard_normal((5, 512)) * scale).astype(np.float32)
        x[1, ::5] = 0
        w = (rng.random(512) * 4).astype(np.float32)
        w[::11] = 0
        got = blocks.quantize(x, name, imatrix=w)
        assert np.array_equal(got, ggml_ref.quantize(x, name, imatrix=w)), (name, scale)
        assert np.array_equal(blocks.codec(name).quantize_weighted(x, w, parallel=True), got)


@pytest.mark.slow
@needs_ggml
@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(x=hnp.arrays(np.float32, (2, 256), elements=st.floats(width=32, min_value=-1e4, max_value=1e4)),
       w=hnp.arrays(np.float32, (256,), elements=st.floats(width=32, min_value=0, max_value=100)))
def test_weighted_property_equals_ggml(x, w):
    with np.errstate(all="ignore"):
        for name in WEIGHTED:
            assert np.array_equal(blocks.quantize(x, name, imatrix=w), ggml_ref.quantize(x, name, imatrix=w)), name


def test_q8_0_ignores_weights_and_bad_sizes_refuse(rng):
    x = rng.standard_normal((2, 256)).astype(np.float32)
    w = np.ones(256, np.float32)
    assert np.array_equal(blocks.quantize(x, "q8_0", imatrix=w), blocks.quantize(x, "q8_0"))
    assert all(blocks.can_weight(t) for t in qtypes.QUANTIZABLE)
    with pytest.raises(BadInputError, match="100 importance weights"):
        blocks.quantize(x, "q4_k", imatrix=np.ones(100, np.float32))


def test_legacy_and_gguf_files(tmp_path, rng):
    a, b = (rng.random(64) * 5).astype(np.float32), (rng.random(32) * 5).astype(np.float32)
    leg = imatrix.load(write_legacy(tmp_path / "m.dat", {"blk.0.attn_q.weight": a, "blk.0.ffn_down.weight": b}))
    assert leg.legacy and leg.chunk_count == 7 and leg.datasets == ["wiki.txt"]
    assert np.array_equal(leg.weights["blk.0.attn_q.weight"], a / np.float32(10))
    assert leg.provenance() == {"quantize.imatrix.file": str(tmp_path / "m.dat"), "quantize.imatrix.dataset": "wiki.txt",
                                "quantize.imatrix.entries_count": 2, "quantize.imatrix.chunks_count": 7}
    two = np.concatenate([a, a * 2])  # two experts of 64
    g = imatrix.load(write_gguf_imatrix(tmp_path / "m.gguf", {"blk.0.attn_q.weight": a, "blk.0.ffn_up.weight": two},
                                        {"blk.0.attn_q.weight": np.array([4.0]), "blk.0.ffn_up.weight": np.array([2.0, 0.0])}))
    assert not g.legacy and g.chunk_count == 12 and g.datasets == ["calib.txt"]
    assert np.array_equal(g.weights["blk.0.attn_q.weight"], a / np.float32(4))
    up = g.weights["blk.0.ffn_up.weight"]
    assert np.array_equal(up[:64], a / np.float32(2)) and np.all(up[64:] == 1)  # count 0: weight 1
    (tmp_path / "bad.dat").write_bytes(b"\x02\x00\x00\x00\x05\x00\x00\x00ab")
    with pytest.raises(FormatError, match="bad.dat"):
        imatrix.load(tmp_path / "bad.dat")


@pytest.mark.slow
@needs_ggml
def test_convert_with_imatrix_equals_ggml_and_records_provenance(tmp_path, rng):
    src = tmp_path / "tiny.gguf"
    tiny_llama_gguf(src)
    with open_checkpoint(src) as ck:
        infos = {t.name: t for t in ck.tensors}
        entries = {t.name: (rng.random(t.k) * 3).astype(np.float32) for t in ck.tensors if len(t.shape) == 2}
    imx = write_legacy(tmp_path / "tiny.imatrix", entries, ncall=3)
    opts = mixes.Options(imatrix=str(imx))
    p = plan(src, layout="rowmajor", quant="q4_k_m", mix_options=opts)
    weighted = [t for t in p.tensors if t.importance is not None]
    assert weighted, "no tensor got importance weights"
    res = convert(src, tmp_path / "t.ppk", layout="rowmajor", quant="q4_k_m", mix_options=opts)
    b = Bundle(res.bundle)
    assert b.manifest["options"]["imatrix"]["quantize.imatrix.entries_count"] == len(entries)
    assert b.manifest["options"]["imatrix"]["quantize.imatrix.file"] == str(imx)
    with open_checkpoint(src) as ck:
        for t in weighted:
            info = infos[t.name]
            x = blocks.dequantize(ck.raw(info.name), info.type, info.n, info.k)
            want = ggml_ref.quantize(x, t.decision.target_type, imatrix=entries[t.name] / np.float32(3))
            regions = b.regions(b.tensor(t.name))
            got = repack.get("rowmajor").unpack(regions, info.n, info.k, t.decision.target_type)
            assert np.array_equal(got, want), t.name


def test_imatrix_needs_a_mix_and_matching_sizes(tmp_path, rng):
    src = tmp_path / "tiny.gguf"
    tiny_llama_gguf(src)
    with open_checkpoint(src) as ck:
        entries = {t.name: np.ones(t.k, np.float32) for t in ck.tensors if len(t.shape) == 2}
    imx = write_legacy(tmp_path / "tiny.imatrix", entries)
    with pytest.raises(BadInputError, match="need a llama.cpp mix"):
        plan(src, requant="q4_0", mix_options=mixes.Options(imatrix=str(imx)))
    bad = write_legacy(tmp_path / "bad.imatrix", {"blk.0.attn_q.weight": np.ones(7, np.float32)})
    with pytest.raises(BadInputError, match="has 7 values"):
        plan(src, layout="rowmajor", quant="q5_k_m", mix_options=mixes.Options(imatrix=str(bad)))


def test_factory_kernels_never_share_a_cache_key():
    """Two row kernels of one factory (same name, same bytecode) pickle differently, so a
    kernel closing over them (the parallel twin) gets its own numba cache entry per type."""
    import pickle

    keys = {pickle.dumps(blocks.codec(t).CODEC.quantize_weighted_parallel.py_func.__closure__[0].cell_contents)
            for t in WEIGHTED}
    assert len(keys) == len(WEIGHTED)
