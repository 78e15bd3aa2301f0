"""The direct Q2_K/Q3_K panel64-compact kernels (repack/_panel64_compact_q23.py): GGUF blocks to
group records in one pass, against the numpy statement of one tile (``cols_ref``) and the
layout's reference packer, byte for byte, at N % 64 != 0 and several blocks along K."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.formats import qtypes
from panelpack.repack import _panel64_compact_q23 as Q
from panelpack.repack import _panel64_int8_kernels as I8
from panelpack.repack import panel64_compact as PC

from builders import random_blocks


@pytest.fixture
def kernels(monkeypatch):
    from panelpack.formats import engine

    monkeypatch.setattr(engine, "_kernels", True)


@pytest.mark.parametrize("qtype", ["Q2_K", "Q3_K"])
def test_one_tile_is_the_channel_space_reference(qtype, rng, kernels):
    """64 channels x one block: the source bytes as columns [byte][channel] through cols_ref."""
    t = qtypes.get(qtype)
    raw = random_blocks(t, 64, 256, rng)
    got = PC.pack(raw, 64, 256, t)
    want = Q.cols_ref(raw.T, t)  # raw [channel][byte] -> columns [byte][channel]
    assert list(want) == list(got)
    for name, a in want.items():
        assert np.array_equal(got[name].view(np.uint8).reshape(-1), a.reshape(-1)), name


@pytest.mark.parametrize("qtype, n, k", [("Q2_K", 1, 256), ("Q2_K", 64, 512), ("Q2_K", 191, 768),
                                         ("Q3_K", 1, 512), ("Q3_K", 65, 256), ("Q3_K", 128, 1024)])
def test_direct_kernels_skip_the_int8_pass(qtype, n, k, rng, kernels, monkeypatch):
    """No int8 panels in between (the int8 row kernels would raise), the reference's bytes, the
    blocks back, pad channels as the layout draws them."""
    def no_int8(*a):
        raise AssertionError("int8 pass")

    monkeypatch.setattr(I8, "pack", no_int8)
    monkeypatch.setattr(I8, "unpack", no_int8)
    raw = random_blocks(qtype, n, k, rng)
    got = PC.pack(raw, n, k, qtype)
    ref = PC.pack_ref(raw, n, k, qtype)
    for name in ref:
        assert np.array_equal(got[name].view(np.uint8), ref[name].view(np.uint8)), name
    assert np.array_equal(PC.unpack(got, n, k, qtype), raw)
    assert np.array_equal(PC.unpack_ref(got, n, k, qtype), raw)


def test_kernels_have_their_explicit_signatures_only(rng, kernels):
    for name, (pack, unpack, _) in Q.KERNELS.items():
        raw = random_blocks(name, 64, 256, rng)
        PC.unpack(PC.pack(raw, 64, 256, name), 64, 256, name)
        assert len(pack.dispatcher.signatures) == len(unpack.dispatcher.signatures) == 1


def test_pad_rows_are_code_zero():
    assert not Q.pad_row("Q2_K").any()
    row = Q.pad_row("Q3_K")
    assert row[:32].tolist() == [255] * 32 and not row[32:].any()  # hmask 1: u = 4, c = 0
