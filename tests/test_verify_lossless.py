"""verify/lossless.py: the panel64 reader kernel against its numpy reference
(``repack.panel64.dequantize``), the first-difference kernel against numpy, and the chunked,
threaded comparison still finding a flipped panel or scale byte where it is."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from panelpack.formats import qtypes
from panelpack.repack import panel64 as P
from panelpack.verify import lossless as L

from builders import random_blocks, run_without_jit

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
def test_compare_finds_a_flipped_byte(monkeypatch, qtype, region, offset, where):
    monkeypatch.setattr(L, "CHUNK_ELEMENTS", 64 * 256)  # many chunks: the threaded path
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
