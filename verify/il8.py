"""Kernels that read the 8-row-interleaved layouts the way their runtimes do (docs/FORMAT.md §4).

One step of every kernel here takes one super-row ``sr`` (rows ``8sr .. 8sr+7``) and one block
of K, and produces 8 int32 lanes, one per row, as the seed CPU backend's and llama.cpp's
``*_8x8`` kernels do. Unlike those kernels (which add floats per half-block), each lane's sum is
kept per weight group as the integer partial ``P[m, n, g]`` of docs/FORMAT.md §3, and the f32 result comes
from the one shared :func:`panelpack.verify.dispatch.rescale`; so the output is bit-identical
with the standard dispatch whenever ``P`` is.

Layouts and the bytes each step reads (``nb = K/32``, ``nsb = K/256``, ``r`` = row in the
super-row)::

  ggml-x8 / Q4_0   region "blocks", 144 B per (sr, b) = block_q4_0x8:
        [0, 16)    d[r] f16
        [16, 144)  qs[64h + 8r + i] = row_r.qs[8h + i] ^ 0x88      h = 0, 1; i = 0..7
                   low nibble = element 8h+i, high = element 8h+i+16, as two's-complement int4
                   (the XOR turned offset-binary u into u - 8)

  ggml-x8 / Q4_K   region "blocks", 1152 B per (sr, j) = block_q4_Kx8:
        [0, 16) d[r] f16   [16, 32) dmin[r] f16
        [32, 128)  8 groups of 12 bytes; group s = sub-block s of the 8 rows, packed with the
                   Q4_K 12-byte rule whose 8 slots are the 8 rows
        [128, 1152) qs[64h + 8r + i] = row_r.qs[8h + i]            h = 0..15; i = 0..7
                   row byte 8h+i: chunk c = h // 4, l = 8 (h % 4) + i;
                   low nibble = element 64c + l (sub-block 2c), high = 64c + 32 + l (2c + 1)

  il8-nibble / Q4_0, Q4_K   region "qs", 128 B per (sr, b) (b counts 32-blocks), + f32 regions
        byte 16g + i  (g = 0..7, i = 0..15):  low nibble  = u of row i//4 at element 4g + i%4
                                              high nibble = u of row 4 + i//4 at the same element
        Q4_0: "scales"  f32[(sr·nb + b)·8 + r] = f32(d)
        Q4_K: "dsc"/"dmn" f32[(sr·nb + b)·8 + r] = f32(d)·sc, f32(dmin)·m   (not invertible)

  il8-int8 / Q4_0  region "qs", 256 B per (sr, b), + "scales" as il8-nibble
        byte 32g + 16h + 4r + c = int8 (u - 8) of row 4h + r, element 4g + c

For Q4_K ``il8-nibble`` the rescale factors ``s``/``o`` are the stored products themselves; the
standard dispatch computes the same f32 products from ``d``, ``sc``, ``dmin``, ``m``, so the
output is still bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
from numba import njit, types

from .. import repack
from ..formats import qtypes
from ..formats._jit import closable_inline, lazy_njit
from ..formats.errors import BadInputError, UnsupportedError
from ..repack import ggml_x8, il8_int8, il8_nibble
from ..repack._common import unpack_scales12
from . import dispatch as _d
from . import registry as _registry

ROWS = 8  # rows per super-row: the 8 int32 lanes of every kernel here
QK = 32


def unit_regions(layout: str, qtype, unit: int) -> dict[str, int]:
    """Region name -> bytes per (super-row, unit of ``unit`` K), read from the layout's plan()."""
    t = qtypes.get(qtype)
    units = max(1, t.block_size // unit)  # the shortest K the layout takes: one block
    return {r.name: r.nbytes // units for r in repack.get(layout).plan(t, ROWS, unit * units)}


#: bytes of the code region per (super-row, unit), from the layouts' plans (kernel constants)
UNIT_BYTES: dict[str, int] = {
    "x8_q4_0": unit_regions(ggml_x8.NAME, qtypes.Q4_0, QK)["blocks"],  # 144 = block_q4_0x8
    "x8_q4_k": unit_regions(ggml_x8.NAME, qtypes.Q4_K, qtypes.QK_K)["blocks"],  # 1152 = block_q4_Kx8
    "il8_nibble": unit_regions(il8_nibble.NAME, qtypes.Q4_0, QK)["qs"],  # 128
    "il8_int8": unit_regions(il8_int8.NAME, qtypes.Q4_0, QK)["qs"],  # 256
}
_X8_Q4_0 = UNIT_BYTES["x8_q4_0"]
_X8_Q4_K = UNIT_BYTES["x8_q4_k"]
_NIBBLE = UNIT_BYTES["il8_nibble"]
_INT8 = UNIT_BYTES["il8_int8"]

# (layout bytes, activations, code offset, out P); inputs read-only so memory-mapped regions work
_SIG = types.void(
    types.Array(types.uint8, 1, "C", readonly=True), types.Array(types.int8, 2, "C", readonly=True),
    types.int64, types.int32[:, :, ::1],
)


@njit(inline="always")
def _int4(v):
    """Two's-complement value of a 4-bit field (0..15 -> -8..7)."""
    return (v ^ 8) - 8


#: a block dot: a plain function numba inlines (so the kernels _block_partials makes can close
#: over it and keep the hand-written sweep's speed and a stable cache key)
_dot = closable_inline


def _block_partials(unit: int, first: int, block_dot):
    """The kernel ``P[m, 8sr + r, b]`` of a form whose unit is one QK block: super-row ``sr``'s
    block ``b`` is ``unit`` bytes at ``(sr*nb + b)*unit``, its codes from byte ``first`` on, and
    ``block_dot(w, codes, a, m, e0, off, lanes)`` adds its 8 rows' dots with activation row
    ``m`` (K ``e0`` .. ``e0 + QK``, code offset ``off``) into ``lanes[r]``. A factory, as
    ``_compiled_kernels._column_tile``: each kernel is compiled with its block dot as a
    constant, the sweep written once."""

    @lazy_njit(_SIG, cache=True, tag=block_dot.__name__.strip("_"))
    def partials(w, a, offset, out):
        m_rows, k = a.shape
        nb = k // QK
        off = np.int32(offset)
        lanes = np.zeros(ROWS, np.int32)
        for sr in range(out.shape[1] // ROWS):
            for b in range(nb):
                codes = (sr * nb + b) * unit + first
                for m in range(m_rows):
                    lanes[:] = 0
                    block_dot(w, codes, a, m, QK * b, off, lanes)
                    for r in range(ROWS):
                        out[m, ROWS * sr + r, b] = lanes[r]

    return partials


# ---- the kernels: P[m, 8sr + r, g] for every super-row, 8 lanes per step --------------------
@_dot
def _x8_q4_0_dot(w, qs, a, m, e0, off, lanes):
    for h in range(2):
        for r in range(ROWS):
            for i in range(8):
                byte = np.int32(w[qs + 64 * h + 8 * r + i])
                e = e0 + 8 * h + i
                lanes[r] += _int4(byte & 15) * np.int32(a[m, e]) + _int4(byte >> 4) * np.int32(a[m, e + 16])


_x8_q4_0_partials = _block_partials(_X8_Q4_0, 16, _x8_q4_0_dot)


@lazy_njit(_SIG, cache=True)
def _x8_q4_k_partials(w, a, offset, out):
    m_rows, k = a.shape
    nsb = k // 256
    lanes = np.zeros((ROWS, 8), np.int32)  # [row][sub-block]
    for sr in range(out.shape[1] // ROWS):
        for j in range(nsb):
            qs = (sr * nsb + j) * _X8_Q4_K + 128
            for m in range(m_rows):
                lanes[:, :] = 0
                for h in range(16):
                    c = h // 4
                    for r in range(ROWS):
                        for i in range(8):
                            byte = np.int32(w[qs + 64 * h + 8 * r + i])
                            e = 256 * j + 64 * c + 8 * (h % 4) + i
                            lanes[r, 2 * c] += (byte & 15) * np.int32(a[m, e])
                            lanes[r, 2 * c + 1] += (byte >> 4) * np.int32(a[m, e + 32])
                for r in range(ROWS):
                    for s in range(8):
                        out[m, ROWS * sr + r, 8 * j + s] = lanes[r, s]


@_dot
def _il8_nibble_dot(w, base, a, m, e0, off, lanes):
    """Raw nibbles ``u``; the weight is ``u - offset`` (Q4_0: 8, Q4_K: 0)."""
    for g in range(8):
        for i in range(16):
            byte = np.int32(w[base + 16 * g + i])
            av = np.int32(a[m, e0 + 4 * g + i % 4])
            lanes[i // 4] += ((byte & 15) - off) * av
            lanes[4 + i // 4] += ((byte >> 4) - off) * av


@_dot
def _il8_int8_dot(w, base, a, m, e0, off, lanes):
    for g in range(8):
        for h in range(2):
            for r in range(4):
                for c in range(4):
                    v = np.int32(np.int8(w[base + 32 * g + 16 * h + 4 * r + c]))
                    lanes[4 * h + r] += v * np.int32(a[m, e0 + 4 * g + c])


_il8_nibble_partials = _block_partials(_NIBBLE, 0, _il8_nibble_dot)
_il8_int8_partials = _block_partials(_INT8, 0, _il8_int8_dot)


# ---- rescale factors from each layout's scale bytes -----------------------------------------
def _x8_q4_0_scales(reg, n, k):
    nb = k // QK
    d = reg["blocks"].reshape(n // ROWS, nb, _X8_Q4_0)[:, :, :16].copy().view("<u2")  # [SR, nb, 8]
    s = _d._f16(d).transpose(0, 2, 1).reshape(n, nb)
    return s, np.zeros_like(s)


def _x8_q4_k_scales(reg, n, k):
    nsb = k // 256
    blk = reg["blocks"].reshape(n // ROWS, nsb, _X8_Q4_K)
    d = _d._f16(blk[:, :, 0:16].copy().view("<u2"))  # [SR, nsb, 8 rows]
    dmin = _d._f16(blk[:, :, 16:32].copy().view("<u2"))
    sc, mn = unpack_scales12(blk[:, :, 32:128].reshape(n // ROWS, nsb, 8, 12))  # [SR, nsb, sub, row]
    # s[8sr + r, 8j + sub] = f32(d[r]) * f32(sc[sub][r])
    s = d[:, :, None, :] * sc.astype(np.float32)
    o = dmin[:, :, None, :] * mn.astype(np.float32)
    return (s.transpose(0, 3, 1, 2).reshape(n, nsb * 8), o.transpose(0, 3, 1, 2).reshape(n, nsb * 8))


def _f32_per_row(region, n, k):
    return region.view("<f4").reshape(n // ROWS, k // QK, ROWS).transpose(0, 2, 1).reshape(n, k // QK)


def _il8_q4_0_scales(reg, n, k):
    s = _f32_per_row(reg["scales"], n, k)
    return s, np.zeros_like(s)


def _il8_q4_k_scales(reg, n, k):
    return _f32_per_row(reg["dsc"], n, k), _f32_per_row(reg["dmn"], n, k)


@dataclass(frozen=True)
class Il8Form:
    """How one (layout, type) is read: its regions and byte sizes, its kernel, its scales."""

    layout: str
    qtype: str
    unit: int  # K elements per step (a 32-block, or a 256 super-block for ggml-x8 Q4_K)
    regions: dict  # region name -> bytes per (super-row, unit)
    kernel: Callable
    scales: Callable
    offset: int = 0  # code offset the kernel subtracts (raw-nibble forms)


def _forms(rows: dict[str, tuple[int, Callable, Callable, int]]) -> Callable[[str, qtypes.GGMLType], Il8Form | None]:
    """A form factory (what the verifier registry names per layout) over ``type name ->
    (unit, kernel, scales, code offset)``; region names and sizes come from the layout's plan()."""

    def factory(layout: str, t) -> Il8Form | None:
        row = rows.get(t.name)
        if row is None:
            return None
        unit, kernel, scales, offset = row
        return Il8Form(layout, t.name, unit, unit_regions(layout, t, unit), kernel, scales, offset)

    return factory


x8_form = _forms({"Q4_0": (QK, _x8_q4_0_partials, _x8_q4_0_scales, 0),
                  "Q4_K": (qtypes.QK_K, _x8_q4_k_partials, _x8_q4_k_scales, 0)})
il8_nibble_form = _forms({"Q4_0": (QK, _il8_nibble_partials, _il8_q4_0_scales, 8),
                          "Q4_K": (QK, _il8_nibble_partials, _il8_q4_k_scales, 0)})
il8_int8_form = _forms({"Q4_0": (QK, _il8_int8_partials, _il8_q4_0_scales, 0)})


def __getattr__(name: str):
    if name == "FORMS":  # (layout, type name) -> Il8Form: the interleaved rows of the registry
        return _registry.interleaved_forms()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def form(layout: str, qtype, n: int, k: int) -> Il8Form:
    """The registry's form for ``(layout, qtype)``, after checking the shape qualifies."""
    t = _d.qtype_of(qtype)
    f = _registry.form(layout, t)
    if f is None:
        have = ", ".join(f"{lay}/{q}" for lay, q in _registry.interleaved_forms())
        raise UnsupportedError(f"no interleaved kernel for layout {layout!r} with type {t.name} (have {have})")
    if n < ROWS or n % ROWS:
        raise UnsupportedError(f"layout {layout}: N={n} is not a positive multiple of {ROWS}")
    if k < f.unit or k % f.unit or k % t.block_size:
        raise UnsupportedError(f"layout {layout}: K={k} is not a positive multiple of {max(f.unit, t.block_size)}")
    return f


def region_bytes(f: Il8Form, regions: Mapping[str, np.ndarray], n: int, k: int) -> dict[str, np.ndarray]:
    """Each region of ``f`` as a flat C-contiguous uint8 array of the right size."""
    if not isinstance(regions, Mapping):
        raise BadInputError(f"layout {f.layout}: regions must be a mapping of name to array")
    units = (n // ROWS) * (k // f.unit)
    out = {}
    for name, per in f.regions.items():
        if name not in regions:
            raise BadInputError(f"layout {f.layout} {f.qtype}: region {name!r} missing (have {sorted(regions)})")
        arr = np.ascontiguousarray(regions[name])
        if arr.nbytes != units * per:
            raise BadInputError(
                f"layout {f.layout} {f.qtype} [{n}, {k}]: region {name!r} has {arr.nbytes} bytes,"
                f" expected {units * per}"
            )
        out[name] = arr.reshape(-1).view(np.uint8)
    return out


# ---- entry points ---------------------------------------------------------------------------
def il8_partials(layout: str, regions, n: int, k: int, qtype, a) -> tuple[np.ndarray, np.ndarray]:
    """``(P int32 [M, n, K/G], A int32 [M, K/G])`` read from an interleaved layout's bytes."""
    f = form(layout, qtype, n, k)
    reg = region_bytes(f, regions, n, k)
    a8 = _d.check_codes_activations(a, k)
    t = qtypes.get(qtype)
    out = np.empty((a8.shape[0], n, k // t.group), np.int32)
    f.kernel(reg[next(iter(f.regions))], a8, f.offset, out)
    return out, _d.group_sums(a8, t.group)


def il8_scales(layout: str, regions, n: int, k: int, qtype) -> tuple[np.ndarray, np.ndarray]:
    """The rescale factors ``(s, o)`` f32 ``[n, K/G]`` from the layout's scale bytes."""
    f = form(layout, qtype, n, k)
    s, o = f.scales(region_bytes(f, regions, n, k), n, k)
    return np.ascontiguousarray(s, np.float32), np.ascontiguousarray(o, np.float32)


def il8_matmul(layout: str, regions, n: int, k: int, qtype, x) -> np.ndarray:
    """``y = W·x`` on an interleaved layout: quantize ``x``, integer partials, shared rescale."""
    t = _d.qtype_of(qtype)
    xr, vector = _d._as_activation_rows(x)
    if xr.shape[1] != k:
        raise BadInputError(f"activations have K={xr.shape[1]}, the {t.name} matrix has K={k}")
    a, da = _d.quantize_activations(xr)
    P, A = il8_partials(layout, regions, n, k, t, a)
    s, o = il8_scales(layout, regions, n, k, t)
    y = _d.rescale(P, A, s, o, da, t)
    return y[0] if vector else y
