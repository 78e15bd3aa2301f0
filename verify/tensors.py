"""A bundle tensor's shape, standard blocks and values, whatever its layout: what the runtime
(``verify/runtime/weights.py``) and the bundle gate (a RoPE factor tensor) both read."""

from __future__ import annotations

import numpy as np

from .. import repack
from ..formats import blocks as _blocks
from ..formats.errors import UnsupportedError


def nk(entry) -> tuple[int, int]:
    shape = entry.shape
    if len(shape) == 1:
        return 1, int(shape[0])
    if len(shape) != 2:
        raise UnsupportedError(f"tensor {entry.name!r} has {len(shape)} dimensions; the runtime takes 1-D and 2-D")
    return int(shape[0]), int(shape[1])


def standard_blocks(entry, regions) -> np.ndarray:
    """The standard (row-major GGUF) blocks of a tensor, ``uint8 [n, row_bytes]``."""
    n, k = nk(entry)
    lay = repack.get(entry.layout)
    if not lay.invertible(entry.type):
        raise UnsupportedError(f"tensor {entry.name!r}: layout {entry.layout} is not invertible for "
                               f"{entry.type}; its standard blocks cannot be restored")
    return lay.unpack(regions, n, k, entry.type)


def dequantized(entry, regions) -> np.ndarray:
    """The tensor's values as f32 ``[n, k]`` (bit-identical with the codec, any layout)."""
    n, k = nk(entry)
    if entry.layout == "rowmajor":
        return _blocks.dequantize(np.asarray(regions["blocks"]), entry.type, n, k)
    return np.asarray(repack.get(entry.layout).dequantize(regions, n, k, entry.type), np.float32)


def vector(entry, regions) -> np.ndarray:
    """A 1-D tensor (norm weight, bias) as f32 ``[k]``."""
    return np.ascontiguousarray(dequantized(entry, regions).reshape(-1), np.float32)
