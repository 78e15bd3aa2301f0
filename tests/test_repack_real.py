"""Every quantized matrix of the real checkpoints through every layout that accepts it:
byte-exact round trips, and dequantized values equal to the codec's on a sample of rows."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack import repack
from panelpack.formats import blocks as B
from panelpack.formats.gguf import GGUFFile

pytestmark = pytest.mark.real
SAMPLE_ROWS = 16


def _matrices(path):
    g = GGUFFile(path)
    for info in g.tensors:
        if info.type.quantized and len(info.shape) == 2:
            n, k = info.shape
            yield info, n, k, np.asarray(g.raw(info.name)).reshape(n, info.type.row_bytes(k))


def _check_file(path):
    counts: dict[tuple[str, str], int] = {}
    for info, n, k, raw in _matrices(path):
        t = info.type
        for mod in repack.LAYOUTS.values():
            if mod.refuse(t, n, k):
                continue
            regions = mod.pack(raw, n, k, t)
            if mod.invertible(t):
                back = mod.unpack(regions, n, k, t)
                assert np.array_equal(back, raw), f"{info.name} ({t.name} [{n}, {k}]) via {mod.NAME}: bytes differ"
            # dequantize equality on a sample: the first super-row-aligned rows
            m = min(n, SAMPLE_ROWS)
            m -= m % mod.ROW_MULTIPLE
            if m:
                sub = mod.pack(raw[:m], m, k, t)
                got = mod.dequantize(sub, m, k, t)
                want = B.dequantize(raw[:m], t, m, k)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"{info.name} via {mod.NAME}"
            counts[(mod.NAME, t.name)] = counts.get((mod.NAME, t.name), 0) + 1
    return counts


def test_smollm2_every_matrix_every_layout(smollm2):
    counts = _check_file(smollm2)
    assert counts[("panel64", "Q4_1")] == 210 and counts[("panel64", "Q8_0")] == 1
    assert counts[("rowmajor", "Q4_1")] == 210


@pytest.mark.slow
def test_gemma_every_matrix_every_layout(gemma):
    counts = _check_file(gemma)
    for layout in ("panel64", "ggml-x8", "il8-nibble"):
        assert counts[(layout, "Q4_K")] == 27, layout
    for qtype in ("Q5_0", "Q6_K", "Q8_0"):
        assert counts[("panel64", qtype)] > 0
        assert counts[("panel64-compact", qtype)] == counts[("panel64", qtype)]  # Q5_0, Q6_K as bit planes
