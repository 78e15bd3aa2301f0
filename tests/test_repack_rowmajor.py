"""rowmajor: the identity layout, for every type (the converter's fallback)."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.formats import qtypes
from panelpack.formats.errors import UnsupportedError
from panelpack.repack import rowmajor as R

from builders import random_blocks


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16", "Q4_0", "Q6_K", "Q2_K", "IQ4_XS", "I32"])
def test_identity_for_every_type(qtype, rng):
    t = qtypes.get(qtype)
    n, k = 3, 2 * t.block_size
    raw = rng.integers(0, 256, (n, t.row_bytes(k)), dtype=np.uint8)
    reg = R.pack(raw, n, k, t)
    assert list(reg) == ["blocks"] and np.array_equal(reg["blocks"], raw)
    assert not np.shares_memory(reg["blocks"], raw)
    assert np.array_equal(R.unpack(reg, n, k, t), raw)
    assert R.refuse(t, n, k) is None and R.invertible(t)
    assert R.params(t, n, k)["row_bytes"] == t.row_bytes(k)


def test_typed_inputs_are_taken_as_their_bytes(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    reg = R.pack(x, 4, 8, "F32")
    assert reg["blocks"].shape == (4, 32) and reg["blocks"].tobytes() == x.tobytes()
    assert np.array_equal(R.dequantize(reg, 4, 8, "F32"), x)


@pytest.mark.parametrize("qtype", ["F16", "BF16"])
def test_plain_types_dequantize_as_numpy_widens(qtype, rng):
    raw = random_blocks(qtype, 2, 16, rng)
    y = R.dequantize(R.pack(raw, 2, 16, qtype), 2, 16, qtype)
    if qtype == "F16":
        want = raw.view("<f2").astype(np.float32).reshape(2, 16)
    else:
        want = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(2, 16)
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))


def test_types_without_a_codec_are_copied_but_not_decoded(rng):
    raw = rng.integers(0, 256, (2, qtypes.get("IQ4_XS").row_bytes(256)), dtype=np.uint8)
    reg = R.pack(raw, 2, 256, "IQ4_XS")
    with pytest.raises(UnsupportedError, match=r"layout rowmajor: type IQ4_XS \(id 23\) has no codec"):
        R.dequantize(reg, 2, 256, "IQ4_XS")
