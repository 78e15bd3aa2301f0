"""The type registry is pinned to ggml's own ``type_traits`` (block size, bytes, name), read
from libggml through ctypes: gguf-py's table is not the oracle (it has Q8_1 at 40 bytes)."""

from __future__ import annotations

import pytest

from panelpack.formats import qtypes
from panelpack.formats.errors import UnsupportedError

import ggml_ref

pytestmark = pytest.mark.skipif(not ggml_ref.available(), reason="libggml-python is not installed")


@pytest.mark.parametrize("t", qtypes.TYPES, ids=lambda t: t.name)
def test_entry_matches_ggml_type_traits(t):
    tr = ggml_ref.lib().ggml_get_type_traits(t.id).contents
    assert (tr.type_name.decode().upper(), tr.blck_size, tr.type_size) == (t.name, t.block_size, t.type_size)
    assert tr.is_quantized == t.quantized or t.name in ("F16", "BF16")  # ggml counts the halves as not quantized


@pytest.mark.parametrize("type_id", sorted(qtypes.REMOVED_IDS))
def test_removed_ids_are_removed_in_ggml_too(type_id):
    tr = ggml_ref.lib().ggml_get_type_traits(type_id).contents
    assert tr.blck_size == 0 and tr.type_size == 0
    with pytest.raises(UnsupportedError, match=f"{qtypes.REMOVED_IDS[type_id]}.* removed GGUF type"):
        qtypes.get(type_id)


def test_every_ggml_id_up_to_ours_is_known_or_removed():
    top = max(qtypes.BY_ID)
    for i in range(top + 1):
        assert i in qtypes.BY_ID or i in qtypes.REMOVED_IDS, f"ggml type id {i} is missing from the registry"


def test_q8_1_is_two_halves_and_32_bytes():
    assert qtypes.get("q8_1").type_size == 2 + 2 + 32
