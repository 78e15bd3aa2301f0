"""Block codecs: one module per type (``q4_0.py``, ``q4_k.py``, ...), same surface each.

See docs/DEVELOPING.md for the surface and the field table, docs/CODECS.md for the exact
float operation orders and rounding rules. The functions here dispatch on the type registry
(``formats/types.py``); they are the entry points the rest of panelpack uses:
``dequantize(raw, qtype, n, k)`` (bit-identical with gguf-py) and ``quantize(x, qtype)``
(byte-identical with ggml's reference quantizers), plus the bit-field helpers.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .. import engine, qtypes
from ..errors import BadInputError, UnsupportedError


def codec(qtype):
    """The codec module of a type (by GGMLType, id or name)."""
    return qtypes.get(qtype).codec_module


def to_fields(raw: np.ndarray, qtype, n: int, k: int) -> dict[str, np.ndarray]:
    """Split ``[n, k]`` worth of blocks into integer codes and raw scale fields (lossless)."""
    mod = codec(qtype)
    if not hasattr(mod, "to_fields"):
        raise UnsupportedError(f"type {qtypes.get(qtype).name} has no block fields")
    return mod.to_fields(raw, n, k)


def from_fields(fields: dict[str, np.ndarray], qtype, n: int, k: int) -> np.ndarray:
    """Inverse of :func:`to_fields`: uint8 ``[n, row_bytes]``, byte for byte."""
    mod = codec(qtype)
    if not hasattr(mod, "from_fields"):
        raise UnsupportedError(f"type {qtypes.get(qtype).name} has no block fields")
    return mod.from_fields(fields, n, k)


def integer_codes(fields: dict[str, np.ndarray], qtype) -> np.ndarray:
    """The signed integer weight code ``c`` of docs/FORMAT.md §3 (``code - code_offset``), int16 ``[n, k]``."""
    t = qtypes.get(qtype)
    if t.scheme is None:
        raise UnsupportedError(f"type {t.name} has no integer form")
    return fields["codes"].astype(np.int16) - np.int16(t.code_offset)


def k_scales(fields: Mapping[str, np.ndarray], qtype) -> np.ndarray:
    """The signed per-group scale of a ``k_scale`` type (docs/FORMAT.md §3), int16 ``[n, k/G]``:
    the registry's ``scale_field`` minus ``scale_offset`` (Q6_K ``scale``, Q3_K ``sc - 32``).
    The field is read as int8 (Q6_K's is signed; Q3_K's 6-bit values are below 64 either way)."""
    t = qtypes.get(qtype)
    if t.scale_field is None:
        raise UnsupportedError(f"type {t.name} has no per-group K scale")
    return np.asarray(fields[t.scale_field]).astype(np.int8).astype(np.int16) - np.int16(t.scale_offset)


def dequantize(raw, qtype, n: int, k: int, out: np.ndarray | None = None, parallel: bool | None = None) -> np.ndarray:
    """Decode ``[n, k]`` worth of ``qtype`` data to f32 ``[n, k]``, bit-identical with gguf-py.

    ``raw``: the bytes (any C-contiguous array or buffer; read as uint8), exactly
    ``n * row_bytes(k)`` of them. ``out``: optional f32 ``[n, k]`` array to write into.
    ``parallel``: None picks by size, False runs on the calling thread, True on numba's threads.
    """
    t = qtypes.get(qtype)
    mod = codec(t)
    n, k = int(n), int(k)
    if n < 0 or k < 0:
        raise BadInputError(f"{t.name}: bad shape [{n}, {k}]")
    if k % t.block_size:
        raise BadInputError(f"{t.name}: K={k} is not a multiple of the block size {t.block_size}")
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = np.frombuffer(raw, np.uint8)
    if not isinstance(raw, np.ndarray):
        raise BadInputError(f"{t.name}: expected an array of bytes, got {type(raw).__name__}")
    if raw.dtype != np.uint8:
        raw = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    row_bytes = t.row_bytes(k)
    if raw.size != n * row_bytes:
        raise BadInputError(f"{t.name} [{n}, {k}] needs {n * row_bytes} bytes, got {raw.size}")
    raw = raw.reshape(n, row_bytes)
    if not engine.prefer_kernels("dequantize", 4 * n * k) and hasattr(mod, "dequantize_ref"):
        y = mod.dequantize_ref(raw).reshape(n, k)  # a small job: numpy, the same bits (formats/engine.py)
        if out is None:
            return y
        from ._codec import check_out

        check_out(out, (n, k), np.float32, t)[...] = y
        return out
    return mod.dequantize(raw, out=out, parallel=parallel)


#: Types ggml quantizes without looking at importance weights (``quantize_q8_0`` ignores them).
IGNORES_IMATRIX = ("Q8_0", "F32", "F16", "BF16")


def can_weight(qtype) -> bool:
    """Whether :func:`quantize` takes importance weights for ``qtype`` (or ggml ignores them)."""
    t = qtypes.get(qtype)
    return t.name in IGNORES_IMATRIX or (t.codec is not None and hasattr(t.codec_module, "quantize_weighted"))


def quantize(x: np.ndarray, qtype, imatrix: np.ndarray | None = None, parallel: bool | None = None) -> np.ndarray:
    """Encode f32 ``[n, k]`` (1-D: one row) as ``qtype`` blocks, uint8 ``[n, row_bytes]``,
    byte-identical with ggml's reference quantizer of that type; with ``imatrix`` (importance
    weights ``f32[k]``), byte-identical with ``ggml_quantize_chunk`` given those weights.
    ``parallel``: as :func:`dequantize` (the plain float types are numpy and ignore it)."""
    t = qtypes.get(qtype)
    mod = codec(t) if t.codec else None
    if t.quantized and not t.can_quantize or not hasattr(mod, "quantize"):
        known = ", ".join(q.name for q in qtypes.QUANTIZABLE)
        raise UnsupportedError(f"panelpack cannot quantize into {t.name} (it can: {known}, F32, F16, BF16)")
    assert mod is not None  # (a type without a codec was refused above)
    if isinstance(x, np.ndarray) and x.ndim == 1:
        x = x.reshape(1, -1)
    if imatrix is not None and t.name not in IGNORES_IMATRIX:
        if not can_weight(t):
            known = ", ".join(q.name for q in qtypes.QUANTIZABLE if can_weight(q) and q.quantized)
            raise UnsupportedError(f"panelpack cannot quantize {t.name} with importance weights yet (it can: {known})")
        return mod.quantize_weighted(x, imatrix, parallel=parallel)
    if getattr(mod, "QUANTIZE_REF_IS_NUMPY", False) and not engine.prefer_kernels("quantize", 4 * int(np.size(x))):
        return mod.quantize_ref(x)  # a small job: numpy, the same bytes (formats/engine.py)
    return mod.quantize(x, parallel=parallel)
