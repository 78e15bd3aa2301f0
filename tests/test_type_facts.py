"""Per-type byte facts are stated once: block sizes in the type table, byte offsets in each
codec's ``AT`` (its byte diagram in numbers), field names and dtypes in its ``PLAN``; the
panel64 layout, its kernels and the verifier's row decoders read them (docs/DEVELOPING.md,
"Adding a quant type to panel64")."""

from __future__ import annotations

import numpy as np
import pytest

from panelpack.formats import qtypes
from panelpack.formats.blocks._bits import byte_map
from panelpack.repack import panel64 as P

from builders import random_blocks

_DTYPE = {"u1": "uint8", "i1": "int8", "u2": "uint16"}
CODEC_TYPES = [t for t in qtypes.INTEGER_FORM if t.codec]


@pytest.mark.parametrize("t", CODEC_TYPES, ids=lambda t: t.name)
def test_scale_fields_are_the_codec_plans_fields(t):
    """``GGMLType.scale_fields`` (what panel64 stores beside the codes, numba-free) is every field
    of the codec's plan but the codes, with its dtype and count: group fields first, then
    super-block fields, each in plan order."""
    plan = t.codec_module.PLAN
    fields = [f for f in plan.fields.values() if f.name != "codes"]
    per_group = t.block_size // t.group
    want = ([(f.name, _DTYPE[f.dtype], "group") for f in fields if f.count == per_group]
            + [(f.name, _DTYPE[f.dtype], "super") for f in fields if f.count == 1 and per_group != 1])
    assert len(want) == len(fields), [f.name for f in fields]
    assert list(t.scale_fields) == want


@pytest.mark.parametrize("t", CODEC_TYPES, ids=lambda t: t.name)
def test_byte_map_agrees_with_the_plan_and_the_type_table(t):
    """A codec's ``AT`` offsets: increasing, inside the block, and every plan field stored whole
    at a named array (``d``, ``m``, ``dmin``) starts where ``AT`` says."""
    at = t.codec_module.AT
    offsets = list(at)
    assert offsets == sorted(offsets) and offsets[0] == 0 and offsets[-1] < t.type_size
    for f in t.codec_module.PLAN.fields.values():
        if f.name in at._fields:
            assert f.parts[0][0][0] == getattr(at, f.name), f.name


def test_byte_map_refuses_sizes_that_disagree_with_the_type_table():
    with pytest.raises(AssertionError, match="Q8_0.*33 bytes.*34"):
        byte_map(qtypes.Q8_0, d=2, qs=31)
    assert byte_map(qtypes.Q8_0, d=2, qs=32) == (0, 2)


@pytest.mark.parametrize("qtype", ["Q5_1", "Q6_K"])
def test_an_int8_type_without_a_row_kernel_packs_through_the_references(qtype, monkeypatch, rng):
    """The worked example of docs/DEVELOPING.md: a type in ``SOURCE_TYPES`` whose body is not in
    ``_panel64_int8_kernels`` (yet) packs and unpacks through ``pack_ref``/``unpack_ref``, the
    same bytes as the kernel's."""
    from panelpack.repack import _panel64_int8_kernels as I

    t = qtypes.get(qtype)
    n, k = 70, 2 * qtypes.QK_K
    raw = random_blocks(t, n, k, rng)
    monkeypatch.setattr(P.C, "prefer_jit", lambda *a: True)
    fast = P.pack(raw, n, k, t)
    monkeypatch.setattr(I, "TYPES", I.TYPES - {qtype})
    monkeypatch.setattr(I, "pack", lambda *a: pytest.fail("the row kernel ran"))
    monkeypatch.setattr(I, "unpack", lambda *a: pytest.fail("the row kernel ran"))
    slow = P.pack(raw, n, k, t)
    assert list(slow) == list(fast)
    for name in fast:
        assert np.array_equal(slow[name].view(np.uint8), fast[name].view(np.uint8)), name
    assert np.array_equal(P.unpack(slow, n, k, t), raw.reshape(n, -1))
