"""The lossless level's second half, at memory speed: a layout's panels read as a runtime reads
them, compared bit for bit with the codec's dequantize of the restored blocks.

``bundle_check`` proves two things per invertible tensor: ``unpack`` gives back the source
blocks (their sha256), and reading the *panel bytes* the way a runtime does (the integer code
from the nibble and its ZT0 value, or the int8 byte, times the group's scale read from the
channel-ordered scale regions) gives the codec's values. The second reading must not go through
``unpack`` + codec, or it proves nothing; here it is a numba kernel straight from the panel
bytes (:func:`panel64_rows`) whose numpy reference is ``repack.panel64.dequantize``, the
closed-form reader the layout module documents.

The comparison runs in row chunks (a few MB of f32 at a time, on two threads), so memory stays
bounded by the chunk, not by the tensor (a 32000 x 4096 matrix is 524 MB as f32).

panel64 geometry (drawn in full in ``repack/panel64.py``)::

    kg-block (sb, g, q) = 4 consecutive K (4q .. 4q+3 of group g) x 64 channels, at
    at = ((sb*ng + g)*kq + q) * B          B = 128 (nibble) or 256 (int8) bytes
    nibble: byte at + 2c   = code(k0) | code(k1) << 4    byte at + 2c + 1 = code(k2) | code(k3) << 4
    int8:   byte at + 4c + j = c(k_j) as int8
    value(row, k) = f32(c) * s[row, g]  (+ o or - o, per the type's formula)
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import numpy as np
from numba import types as nt

from .. import repack
from ..formats import blocks as codecs
from ..formats import qtypes
from ..formats._jit import RO_U8, lazy_njit
from ..repack import _common as C
from ..repack import panel64
from . import registry

CHUNK_ELEMENTS = 1 << 20  # f32 values per comparison step (4 MB per buffer, two buffers a thread)
#: tensors of at most this many weights take the numpy references instead (the layout's
#: numpy ``dequantize``, the codec's ``dequantize_ref``): milliseconds each, and a small
#: bundle's first verify compiles none of these kernels (cold start)
NUMPY_ELEMENTS = 1 << 20
THREADS = 2
_F32_2D = nt.float32[:, ::1]


@lazy_njit(nt.void(RO_U8, nt.int64, nt.float32[::1], _F32_2D, _F32_2D, nt.int64, nt.int64, nt.int64, nt.int64,
                   nt.int64, _F32_2D), boundscheck=False)
def _panel64_rows(panels, nibble, table, s, o, sign, kq, r0, r1, k, out):
    # rows r0..r1 of the f32 matrix from the panel bytes (see the module docstring);
    # out is [r1 - r0, k]; s, o are [n, ng] (sign 0: no offset term); table: f32 value of each
    # nibble code (its ZT0 int8 value). A group's codes are gathered first (c), then scaled in
    # one loop per formula, which vectorizes.
    ng = s.shape[1]
    g_len = k // ng
    kb = 128 if nibble else 256
    c = np.empty(g_len, np.float32)
    for r in range(r0, r1):
        sb = r // 64
        ch = r % 64
        row = out[r - r0]
        for g in range(ng):
            base = (sb * ng + g) * kq
            if nibble:
                for q in range(kq):
                    at = (base + q) * kb + 2 * ch
                    b0 = panels[at]
                    b1 = panels[at + 1]
                    c[4 * q] = table[b0 & 15]
                    c[4 * q + 1] = table[b0 >> 4]
                    c[4 * q + 2] = table[b1 & 15]
                    c[4 * q + 3] = table[b1 >> 4]
            else:
                for q in range(kq):
                    at = (base + q) * kb + 4 * ch
                    for j in range(4):
                        b = np.int32(panels[at + j])
                        c[4 * q + j] = np.float32(b - 256 if b >= 128 else b)
            sv = s[r, g]
            ov = o[r, g]
            k0 = g * g_len
            if sign > 0:
                for e in range(g_len):
                    row[k0 + e] = c[e] * sv + ov
            elif sign < 0:
                for e in range(g_len):
                    row[k0 + e] = c[e] * sv - ov
            else:
                for e in range(g_len):
                    row[k0 + e] = c[e] * sv


@lazy_njit(nt.int64(nt.uint32[::1], nt.uint32[::1]), boundscheck=False)
def _first_difference(a, b):
    """Index of the first element where ``a`` and ``b`` differ, or -1 (a branch-free OR of
    XORs per 1024 elements, which vectorizes; the element is looked for only in a block that
    differs)."""
    size = a.size
    for i0 in range(0, size, 1024):
        i1 = min(size, i0 + 1024)
        acc = np.uint32(0)
        for i in range(i0, i1):
            acc |= a[i] ^ b[i]
        if acc:
            for i in range(i0, i1):
                if a[i] != b[i]:
                    return i
    return -1


def first_difference_ref(a: np.ndarray, b: np.ndarray) -> int:
    """numpy reference of :func:`first_difference`."""
    d = np.flatnonzero(a.reshape(-1).view(np.uint32) != b.reshape(-1).view(np.uint32))
    return int(d[0]) if d.size else -1


def first_difference(a: np.ndarray, b: np.ndarray) -> int:
    """The flat index of the first element whose bits differ in two f32 arrays of one shape, or -1."""
    if a.shape != b.shape or a.dtype != np.float32 or b.dtype != np.float32:
        raise ValueError(f"first_difference needs two f32 arrays of one shape, got {a.shape} {a.dtype}, "
                         f"{b.shape} {b.dtype}")
    return int(_first_difference(np.ascontiguousarray(a).reshape(-1).view(np.uint32),
                                 np.ascontiguousarray(b).reshape(-1).view(np.uint32)))


class Panel64Reader:
    """Rows of a panel64 tensor's f32 values straight from its panel bytes (the kernel above);
    ``rows(r0, r1, out)``. ``repack.panel64.dequantize`` is the numpy reference."""

    def __init__(self, regions, n: int, k: int, qtype):
        t = C.accepted(panel64.NAME, panel64.refuse, qtype, n, k)
        r = C.as_regions(panel64.NAME, regions, panel64.plan(t, n, k))
        geo = panel64.geometry(t, n, k)
        s, o, sign = C.integer_form_scales(t, panel64.scale_fields(r, n, t))
        self.n, self.k, self.kq, self.nibble = n, k, geo.kq, geo.nibble
        self.s = np.ascontiguousarray(s, np.float32)
        self.o = self.s if o is None else np.ascontiguousarray(o, np.float32)
        self.sign = 0 if o is None else int(sign)
        self.panels = np.ascontiguousarray(r["panels"]).reshape(-1).view(np.uint8)
        self.table = np.frombuffer(panel64.zt0_table(t), np.int8)[0::4].astype(np.float32)

    def rows(self, r0: int, r1: int, out: Optional[np.ndarray] = None) -> np.ndarray:
        if not 0 <= r0 <= r1 <= self.n:
            raise ValueError(f"rows {r0}..{r1} outside 0..{self.n}")
        y = np.empty((r1 - r0, self.k), np.float32) if out is None else out
        if y.shape != (r1 - r0, self.k) or y.dtype != np.float32 or not y.flags.c_contiguous:
            raise ValueError(f"out must be C-contiguous f32 {(r1 - r0, self.k)}")
        _panel64_rows(self.panels, int(self.nibble), self.table, self.s, self.o, self.sign, self.kq, r0, r1,
                      self.k, y)
        return y


def panel64_dequantize(regions, n: int, k: int, qtype) -> np.ndarray:
    """f32 ``[n, k]`` from the panels by the kernel (``repack.panel64.dequantize``: its reference)."""
    return Panel64Reader(regions, n, k, qtype).rows(0, n)


def chunk_rows(k: int) -> int:
    """Rows per comparison step: about :data:`CHUNK_ELEMENTS` values, whole 64-row super-blocks."""
    return max(64, CHUNK_ELEMENTS // max(k, 1) // 64 * 64)


def dequantized_rows(layout: str, regions, n: int, k: int, qtype, ranges: Optional[list] = None):
    """``(r0, r1, f32 [r1 - r0, k])`` row chunks of a layout's own reading of its bytes (its
    reader kernel, else its ``dequantize`` in one piece, cut to ``ranges``). ``ranges``: the
    ``(r0, r1)`` row ranges wanted, in order (default: all rows). The array is reused."""
    t = qtypes.get(qtype)
    reader_cls = registry.row_reader(layout)  # (the registry's row_reader: Panel64Reader for panel64)
    if reader_cls is None or n * k <= NUMPY_ELEMENTS:
        w = repack.get(layout).dequantize(regions, n, k, t)
        for r0, r1 in ranges or [(0, n)]:
            yield r0, r1, w[r0:r1]
        return
    reader = reader_cls(regions, n, k, t)
    step = chunk_rows(k)
    if ranges is None:
        ranges = [(r0, min(n, r0 + step)) for r0 in range(0, n, step)]
    buf = np.empty(max([r1 - r0 for r0, r1 in ranges] + [0]) * k, np.float32)
    for r0, r1 in ranges:
        yield r0, r1, reader.rows(r0, r1, buf[:(r1 - r0) * k].reshape(r1 - r0, k))


# ---- the agreement level's f64 sanity products, from the same reader ----------------------------
@lazy_njit(nt.void(nt.float32[:, ::1], nt.float64[:, ::1], nt.float64[:, ::1], nt.int64), fastmath=True,
           boundscheck=False)
def _f64_products(w, x, y, col):
    # y[:, col + r] = x · w[r] in f64 (w f32 [rows, k], x f64 [m, k]); fastmath: the sums may be
    # reassociated (vectorized), which suits a reported error measure, never a bit-exact check
    for r in range(w.shape[0]):
        for m in range(x.shape[0]):
            acc = 0.0
            for e in range(w.shape[1]):
                acc += np.float64(w[r, e]) * x[m, e]
            y[m, col + r] = acc


def f64_products_ref(w: np.ndarray, x64: np.ndarray) -> np.ndarray:
    """numpy reference of :func:`f64_products`."""
    return x64 @ w.astype(np.float64).T


def f64_products(w: np.ndarray, x64: np.ndarray, out: Optional[np.ndarray] = None, col: int = 0,
                 tensor_elements: Optional[int] = None) -> np.ndarray:
    """``x64 · wᵀ`` in f64 (``w`` f32 ``[rows, k]``, ``x64`` f64 ``[m, k]``) into ``out[:, col:col+rows]``.
    ``tensor_elements``: the size of the tensor ``w`` is a chunk of (default ``w``'s own):
    a small tensor takes the numpy reference."""
    w = np.ascontiguousarray(w, np.float32)
    x64 = np.ascontiguousarray(x64, np.float64)
    y = np.empty((x64.shape[0], w.shape[0]), np.float64) if out is None else out
    if w.shape[1] != x64.shape[1] or y.shape[0] != x64.shape[0] or not 0 <= col <= y.shape[1] - w.shape[0]:
        raise ValueError(f"f64_products: w {w.shape}, x {x64.shape}, out {y.shape} at column {col}")
    if (w.size if tensor_elements is None else tensor_elements) <= NUMPY_ELEMENTS:
        y[:, col:col + w.shape[0]] = f64_products_ref(w, x64)
    else:
        _f64_products(w, x64, y, col)
    return y


def compare_dequantize(layout: str, regions, blocks: np.ndarray, n: int, k: int, qtype) -> Optional[tuple]:
    """Compare a layout's reading of its own bytes with the codec's dequantize of ``blocks``.

    Returns None when they agree bit for bit, else ``(row, col, got, want)`` of the first
    difference (first in row order). Row chunks run on :data:`THREADS` threads (the kernels
    release the GIL), each with its two reused buffers."""
    t = qtypes.get(qtype)
    reader_cls = registry.row_reader(layout)
    raw = np.ascontiguousarray(blocks).reshape(n, -1)
    small = n * k <= NUMPY_ELEMENTS
    if reader_cls is None or small:
        got = repack.get(layout).dequantize(regions, n, k, t)
        ref = getattr(t.codec_module, "dequantize_ref", None) if small else None
        want = (ref(raw) if ref else codecs.dequantize(raw, t, n, k)).reshape(n, k)
        i = first_difference_ref(got, want) if small else first_difference(got, want)
        return None if i < 0 else (i // k, i % k, got.reshape(-1)[i], want.reshape(-1)[i])
    reader = reader_cls(regions, n, k, t)
    step = chunk_rows(k)
    local = threading.local()

    def one(r0: int):
        r1 = min(n, r0 + step)
        bufs = getattr(local, "bufs", None)
        if bufs is None:
            bufs = local.bufs = (np.empty(step * k, np.float32), np.empty(step * k, np.float32))
        got = bufs[0][:(r1 - r0) * k].reshape(r1 - r0, k)
        want = bufs[1][:(r1 - r0) * k].reshape(r1 - r0, k)
        reader.rows(r0, r1, got)
        codecs.dequantize(raw[r0:r1], t, r1 - r0, k, out=want, parallel=False)
        i = first_difference(got, want)
        return None if i < 0 else (r0 + i // k, i % k, got.reshape(-1)[i], want.reshape(-1)[i])

    starts = range(0, n, step)
    if len(starts) == 1:
        return one(0)
    with ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="panelpack-lossless") as pool:
        for hit in pool.map(one, starts):
            if hit is not None:
                return hit
    return None
