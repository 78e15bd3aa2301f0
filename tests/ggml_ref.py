"""ggml's C reference codecs through ctypes (tests and benchmarks only).

libggml-python (a test/bench dependency) ships ``libggml-base.so`` in its package folder
(``libggml/lib64/``). From it we call:

* ``ggml_quantize_chunk(type, src, dst, start, nrows, n_per_row, imatrix=NULL)``: with a NULL
  imatrix, ``quantize_q4_0/q8_0/q4_K`` call ``quantize_row_<t>_ref`` (ggml-quants.c), the
  reference quantizers panelpack reproduces;
* ``ggml_get_type_traits(type)->to_float``: ggml's own ``dequantize_row_<t>``;
* ``ggml_fp32_to_fp16_row`` / ``ggml_fp16_to_fp32_row``.

The library is located without importing the package's Python side; :func:`available`
says whether it was found, and tests skip cleanly when it was not.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import numpy as np

from panelpack.formats import qtypes


class _TypeTraits(ctypes.Structure):
    # ggml.h: struct ggml_type_traits
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


_TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def library_path() -> Path | None:
    spec = importlib.util.find_spec("libggml")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    for sub in ("lib64", "lib"):
        p = root / sub / "libggml-base.so"
        if p.is_file():
            return p
    return None


_LIB: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """The loaded ``libggml-base.so`` (raises RuntimeError when libggml-python is absent)."""
    global _LIB
    if _LIB is None:
        path = library_path()
        if path is None:
            raise RuntimeError("libggml-python is not installed")
        L = ctypes.CDLL(str(path))
        L.ggml_quantize_chunk.restype = ctypes.c_size_t
        L.ggml_quantize_chunk.argtypes = [
            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
            ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
        ]
        L.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
        L.ggml_get_type_traits.argtypes = [ctypes.c_int]
        for fn in (L.ggml_fp32_to_fp16_row, L.ggml_fp16_to_fp32_row):
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        _LIB = L
    return _LIB


def available() -> bool:
    return library_path() is not None


def traits(qtype) -> _TypeTraits:
    return lib().ggml_get_type_traits(qtypes.get(qtype).id).contents


def quantize(x: np.ndarray, qtype, threads: int = 1, imatrix: np.ndarray | None = None) -> np.ndarray:
    """ggml_quantize_chunk of f32 ``[n, k]``: uint8 ``[n, row_bytes]``; ``imatrix``: the
    importance weights ``f32[k]`` (NULL when None: the reference quantizers).

    ``threads`` > 1 splits the rows across Python threads (ctypes drops the GIL; ggml's
    quantizers are thread-safe and rows are independent), for the big slow tests.
    """
    t = qtypes.get(qtype)
    x = np.ascontiguousarray(x, np.float32)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    n, k = x.shape
    out = np.zeros((n, t.row_bytes(k)), np.uint8)
    L = lib()
    qw = None if imatrix is None else np.ascontiguousarray(imatrix, np.float32).reshape(-1)
    qw_ptr = None if qw is None else qw.ctypes.data

    def run(r0: int, r1: int) -> None:
        if r1 > r0:
            written = L.ggml_quantize_chunk(t.id, x[r0:r1].ctypes.data, out[r0:r1].ctypes.data, 0, r1 - r0, k, qw_ptr)
            assert written == (r1 - r0) * out.shape[1], (written, r0, r1)

    if threads <= 1 or n < 2 * threads:
        run(0, n)
    else:
        from concurrent.futures import ThreadPoolExecutor

        bounds = np.linspace(0, n, threads + 1).astype(int)
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(run, bounds[:-1], bounds[1:]))
    return out


def dequantize(raw: np.ndarray, qtype, n: int, k: int) -> np.ndarray:
    """ggml's ``to_float`` for the type: f32 ``[n, k]``."""
    t = qtypes.get(qtype)
    raw = np.ascontiguousarray(raw, np.uint8).reshape(-1)
    assert raw.size == n * t.row_bytes(k)
    if not traits(t).to_float:  # F32: ggml has no conversion, the bytes are the values
        return raw.view(np.float32).reshape(n, k).copy()
    fn = _TO_FLOAT(traits(t).to_float)
    y = np.empty((n, k), np.float32)
    fn(raw.ctypes.data, y.ctypes.data, n * k)
    return y


def fp32_to_fp16(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32).reshape(-1)
    h = np.empty(x.size, np.uint16)
    lib().ggml_fp32_to_fp16_row(x.ctypes.data, h.ctypes.data, x.size)
    return h


def fp16_to_fp32(h: np.ndarray) -> np.ndarray:
    h = np.ascontiguousarray(h, np.uint16).reshape(-1)
    y = np.empty(h.size, np.float32)
    lib().ggml_fp16_to_fp32_row(h.ctypes.data, y.ctypes.data, h.size)
    return y
