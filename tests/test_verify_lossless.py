"""verify/lossless.py: the panel64 reader kernel against its numpy reference
(``repack.panel64.dequantize``), the first-difference kernel against numpy, and the chunked,
threaded comparison still finding a flipped panel or scale byte where it is."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from panelpack.convert import convert
from panelpack.formats import qtypes
from panelpack.repack import panel64 as P
from panelpack.verify import bundle_check
from panelpack.verify import lossless as L

from builders import random_blocks, rehash_entry, run_without_jit, tiny_llama_gguf

TYPES = ["Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0", "Q2_K", "Q3_K"]


def _packed(qtype, n, k, seed=0):
    t = qtypes.get(qtype)
    blocks = random_blocks(t, n, k, np.random.default_rng(seed))
    return t, blocks, P.pack(blocks, n, k, t)


@pytest.mark.parametrize("qtype", TYPES)
def test_reader_kernel_equals_numpy_reference(qtype):
    n, k = 130, 512  # a padded last super-block
    t, _, reg = _packed(qtype, n, k)
    ref = P.dequantize(reg, n, k, t)
    reader = L.Panel64Reader(reg, n, k, t)
    assert np.array_equal(reader.rows(0, n).view(np.uint32), ref.view(np.uint32))
    part = reader.rows(61, 129)  # rows across a super-block boundary
    assert np.array_equal(part.view(np.uint32), ref[61:129].view(np.uint32))


def test_first_difference_equals_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(5000).astype(np.float32)
    for at in (None, 0, 1023, 1024, 4999):
        b = a.copy()
        if at is not None:
            b.view(np.uint32)[at] ^= 1  # one bit, including where -0.0/+0.0 or NaN would hide it
        assert L.first_difference(a, b) == L.first_difference_ref(a, b) == (-1 if at is None else at)
    nan = np.full(3, np.nan, np.float32)
    other = nan.copy()
    other.view(np.uint32)[2] |= 1  # another NaN payload: the bits differ, the values compare unequal anyway
    assert L.first_difference(nan, nan.copy()) == -1 and L.first_difference(nan, other) == 2
    with pytest.raises(ValueError):
        L.first_difference(a, a[:10])


@pytest.mark.parametrize("qtype,region,offset,where", [
    ("Q4_K", "panels", 128 * 8 * 2 + 2 * 5 + 1, (5, 64 + 2)),  # kg-block (g 2, q 0), channel 5, byte 2c+1: k 2
    ("Q8_0", "panels", 256 * 3 + 4 * 7 + 2, (7, 14)),  # kg-block 3 of group 0, channel 7, byte j = 2
    ("Q8_0", "d", 2 * (64 * 1 + 9), (9, 32)),  # group 1 of channel 9
])
@pytest.mark.parametrize("kernels", [True, False])
def test_compare_finds_a_flipped_byte(monkeypatch, qtype, region, offset, where, kernels):
    monkeypatch.setattr(L, "CHUNK_ELEMENTS", 64 * 256)  # many chunks: the threaded path
    monkeypatch.setattr(L, "NUMPY_ELEMENTS", 0 if kernels else 1 << 20)  # kernels, or the small tensor's numpy
    n, k = 200, 256
    t, blocks, reg = _packed(qtype, n, k, seed=2)
    assert L.compare_dequantize(P.NAME, reg, blocks, n, k, t) is None
    bad = {name: a.copy() for name, a in reg.items()}
    flat = bad[region].reshape(-1).view(np.uint8)
    flat[offset] ^= 0x21
    row, col, got, want = L.compare_dequantize(P.NAME, bad, blocks, n, k, t)
    assert (row, col) == where
    ref = P.dequantize(bad, n, k, t)
    assert got.view(np.uint32) == ref[row, col].view(np.uint32) and got.view(np.uint32) != want.view(np.uint32)


def test_compare_reports_the_first_difference_in_row_order(monkeypatch):
    monkeypatch.setattr(L, "CHUNK_ELEMENTS", 64 * 256)
    monkeypatch.setattr(L, "NUMPY_ELEMENTS", 0)
    n, k = 300, 256
    t, blocks, reg = _packed("Q8_0", n, k, seed=3)
    bad = {name: a.copy() for name, a in reg.items()}
    d = bad["d"].reshape(-1)  # [SB][ng][64]: damage channel 3 of the last super-block and channel 1 of the first
    ng = k // 32
    d[(4 * ng) * 64 + 3] ^= 0x0101
    d[1] ^= 0x0101
    assert L.compare_dequantize(P.NAME, bad, blocks, n, k, t)[0] == 1


def test_reader_kernel_body_without_jit():
    code = textwrap.dedent("""
        import numpy as np
        from builders import random_blocks
        from panelpack.formats import qtypes
        from panelpack.repack import panel64 as P
        from panelpack.verify import lossless as L
        L.NUMPY_ELEMENTS = 0
        for q in ("Q4_1", "Q6_K"):
            t = qtypes.get(q)
            b = random_blocks(t, 70, 256, np.random.default_rng(4))
            reg = P.pack(b, 70, 256, t)
            assert np.array_equal(L.panel64_dequantize(reg, 70, 256, t).view(np.uint32),
                                  P.dequantize(reg, 70, 256, t).view(np.uint32)), q
            assert L.compare_dequantize(P.NAME, reg, b, 70, 256, t) is None
        print("ok")
    """)
    assert run_without_jit(code) == "ok"


def test_f64_products_equal_numpy():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((70, 96)).astype(np.float32)
    x = rng.standard_normal((3, 96))
    y = np.zeros((3, 80))
    L._f64_products(w, x, y, 10)  # the kernel itself (f64_products sends this small case to numpy)
    assert np.allclose(y[:, 10:], L.f64_products_ref(w, x), rtol=1e-12, atol=1e-12) and not y[:, :10].any()
    with pytest.raises(ValueError):
        L.f64_products(w, x, y, 20)


# ---- the whole verify with the big-tensor paths forced on a small bundle -----------------------
@pytest.fixture(scope="module")
def tiny_bundle(tmp_path_factory):
    d = tmp_path_factory.mktemp("vl")
    tiny_llama_gguf(d / "tiny.gguf")
    return convert(d / "tiny.gguf", d / "tiny.ppk").bundle


def _big_paths(monkeypatch):
    """Every tensor takes the kernels, and the larger batch the sampled super-blocks (sample 1)."""
    monkeypatch.setattr(L, "NUMPY_ELEMENTS", 0)
    monkeypatch.setattr(L, "CHUNK_ELEMENTS", 64 * 64)
    monkeypatch.setattr(bundle_check, "_FULL_WORK", 0)


def test_big_tensor_paths_agree_and_match_the_small_ones(monkeypatch, tiny_bundle):
    small = bundle_check.verify(tiny_bundle, level="all", sample=1)
    _big_paths(monkeypatch)
    made = []
    real = bundle_check._sampled_kernels

    def spy(*args):
        made.append(args[3].size)  # the sampled rows
        return real(*args)

    monkeypatch.setattr(bundle_check, "_sampled_kernels", spy)
    big = bundle_check.verify(tiny_bundle, level="all", sample=1)
    assert made and all(0 < r <= 128 for r in made)  # the larger batch ran on two super-blocks
    assert small.ok and big.ok, big.render()
    for a, b in zip(small.tensors, big.tensors):
        assert (a.name, a.verdict, a.paths) == (b.name, b.verdict, b.paths)
        assert (a.max_error is None) == (b.max_error is None)


def test_big_tensor_paths_still_catch_a_flipped_panel_byte(monkeypatch, tiny_bundle, tmp_path):
    import json
    import shutil

    from panelpack.formats.bundle import manifest_text

    dst = tmp_path / "b.ppk"
    shutil.copytree(tiny_bundle, dst)
    m = json.loads((dst / "manifest.json").read_text())
    t = next(t for t in m["tensors"] if t["layout"] == P.NAME and t["shape"][0] > 64)
    path = dst / t["file"]
    data = bytearray(path.read_bytes())
    data[t["regions"]["panels"]["offset"] + 77] ^= 0x10
    path.write_bytes(bytes(data))
    rehash_entry(m, t, bytes(data))  # consistent hashes: only lossless can tell
    (dst / "manifest.json").write_text(manifest_text(m))
    _big_paths(monkeypatch)
    rep = bundle_check.verify(dst, level="lossless")
    v = next(x for x in rep.tensors if x.name == t["name"])
    assert not rep.ok and "lossless: blocks restored from panel64 differ" in v.problems[0]
