"""Block codecs: one module per type (``q4_0.py``, ``q4_k.py``, ...), same surface each.

See docs/DEVELOPING.md for the surface and the field table. The functions here dispatch on
the type registry (``formats/types.py``); they are the entry points the rest of panelpack uses.
"""

from __future__ import annotations

import numpy as np

from .. import types as _types
from ..errors import UnsupportedError


def codec(qtype):
    """The codec module of a type (by GGMLType, id or name)."""
    return _types.get(qtype).codec_module


def to_fields(raw: np.ndarray, qtype, n: int, k: int) -> dict[str, np.ndarray]:
    """Split ``[n, k]`` worth of blocks into integer codes and raw scale fields (lossless)."""
    mod = codec(qtype)
    if not hasattr(mod, "to_fields"):
        raise UnsupportedError(f"type {_types.get(qtype).name} has no block fields")
    return mod.to_fields(raw, n, k)


def from_fields(fields: dict[str, np.ndarray], qtype, n: int, k: int) -> np.ndarray:
    """Inverse of :func:`to_fields`: uint8 ``[n, row_bytes]``, byte for byte."""
    mod = codec(qtype)
    if not hasattr(mod, "from_fields"):
        raise UnsupportedError(f"type {_types.get(qtype).name} has no block fields")
    return mod.from_fields(fields, n, k)


def integer_codes(fields: dict[str, np.ndarray], qtype) -> np.ndarray:
    """The signed integer weight code ``c`` of SPEC §3 (``code - code_offset``), int16 ``[n, k]``."""
    t = _types.get(qtype)
    if t.scheme is None:
        raise UnsupportedError(f"type {t.name} has no integer form")
    return fields["codes"].astype(np.int16) - np.int16(t.code_offset)
