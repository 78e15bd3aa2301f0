"""How the verifier reads ``panel64-compact`` (docs/FORMAT.md §4.2.1): the compiled column tile
on the bit-plane group records, the closed-form integer reader, and the factories the verifier
registry names. Types ``panel64-compact`` keeps in panel64's forms (Q4_x nibble, Q8_0 int8) go
to panel64's own kernel and leaves: their bytes are the same.

The column tile (:func:`_unpack_compact`) reads group ``g`` of a 64-channel tile straight from
its record, by the closed forms of the layout (never through ``repack``'s pack/unpack), and
writes the stored codes ``u`` into ``buf[G][64]``; the shared column-tile loop then subtracts
``code_offset * A`` (exact in int32) and rescales as every other kernel does.
"""

from __future__ import annotations

import numpy as np

from ..formats._jit import lazy_njit
from ..repack import panel64 as _panel64
from ..repack import panel64_compact as _compact
from . import compiled as _compiled
from ._compiled_kernels import TILE, _column_tile, _tile_view
from .registry import PathResult, Sample

_PLANE = _compact.PLANE_KG_BYTES


@lazy_njit(inline="always")
def _unpack_compact(wt, g, buf, tw):
    # wt = [1, ng, GB]: the tile's group records; G = buf.shape[0], kq = G/4, bits = GB/(32 kq)
    kq = buf.shape[0] // 4
    bits = wt.shape[2] // (32 * kq)
    base = 4 if bits >= 4 else 2
    bb = 32 * base
    for q in range(kq):
        for ch in range(TILE):
            for j in range(4):
                if base == 4:
                    u = (wt[0, g, q * bb + 2 * ch + j // 2] >> (4 * (j % 2))) & 15
                else:
                    u = (wt[0, g, q * bb + ch] >> (2 * j)) & 3
                lane = 4 * ch + j
                for p in range(bits - base):
                    pb = wt[0, g, kq * bb + p * kq * _PLANE + q * _PLANE + lane // 8]
                    u |= ((pb >> (lane % 8)) & 1) << (base + p)
                buf[4 * q + j, ch] = np.int8(u)


# one view per code width (the record size GB = G/4 * 32 * bits is a compile-time constant)
@lazy_njit(inline="always")
def _view_bits2(w, t, tw, ng, group):
    return _tile_view(w, t, 1, ng, group * 16)


@lazy_njit(inline="always")
def _view_bits3(w, t, tw, ng, group):
    return _tile_view(w, t, 1, ng, group * 24)


@lazy_njit(inline="always")
def _view_bits5(w, t, tw, ng, group):
    return _tile_view(w, t, 1, ng, group * 40)


@lazy_njit(inline="always")
def _view_bits6(w, t, tw, ng, group):
    return _tile_view(w, t, 1, ng, group * 48)


#: code bits -> the column tile of that record size
_TILES = {2: _column_tile(_view_bits2, _unpack_compact), 3: _column_tile(_view_bits3, _unpack_compact),
          5: _column_tile(_view_bits5, _unpack_compact), 6: _column_tile(_view_bits6, _unpack_compact)}


def compact_code_bytes(t, regions, n, k, layout=_compact.NAME):
    """The group records (the first region of panel64-compact's plan) as flat uint8."""
    codes = _compact.plan(t, n, k)[0]
    return _compiled._region(regions, layout, t.name, codes.name, codes.nbytes)


def panel64_compact_kernel(layout: str, t) -> _compiled.KernelSpec | None:
    """The compiled kernel of ``(panel64-compact, t)``: the record tile of a compact type, else
    panel64's kernel (the same bytes). The scale regions are panel64's."""
    f = _compact.form(t)
    if f is None:
        return _compiled.panel64_kernel(layout, t)
    if t.scheme is None:
        return None
    return _compiled.KernelSpec(layout, t.name, _TILES[f.bits], compact_code_bytes, _compiled.panel64_scale_arrays,
                                lambda t_, n, k: np.array([t_.code_offset], np.int64), (1 << f.bits) - 1)


# ---- the runners the registry lists for panel64-compact -------------------------------------
def integer_form_reader(s: Sample) -> list[PathResult]:
    """The closed-form reader (``panel64_compact.signed_codes``: every weight's base byte and
    shift, plane bytes and bits, ZT0 value) on the sampled super-blocks, then the standard
    partials and rescale."""
    from . import dispatch, leaves

    t = s.qtype
    part, rows = leaves.sb_regions(s.regions, s.sbs), s.rows.size
    c = _compact.signed_codes(part["panels"], rows, s.k, t)
    sc, of = _compiled.panel64_scale_arrays(t, part, rows, s.k, s.layout)
    P = dispatch.partials_from_codes(c, s.a, int(t.group))
    y = dispatch.rescale(P, s.A, sc, of, s.da, t)
    return [(f"reader.{s.layout}.closed_form", P, y, s.rows)]


def leaves_runner(s: Sample) -> list[PathResult]:
    """The emulated SME2 leaves on the sampled super-blocks' records (verify/compact_leaves.py):
    GEMV (LUTI + predicated ADD + SDOT) at M = 1, GEMM (... + SMOPA) for more rows."""
    from . import compact_leaves, dispatch, leaves

    t = s.qtype
    f = _compact.form(t)
    assert f is not None, t.name
    part, rows = leaves.sb_regions(s.regions, s.sbs), s.rows.size
    recs = compact_code_bytes(t, part, rows, s.k, s.layout)
    sc, of = _compiled.panel64_scale_arrays(t, part, rows, s.k, s.layout)
    zt0 = np.asarray(s.params.get("zt0", list(_compact.zt0_table(t))), np.uint8)
    expand = "luti4" if f.base_bits == 4 else "luti2"
    if s.a.shape[0] == 1:
        path, leaf = f"sme2.gemv.{expand}_planes_sdot", compact_leaves.gemv_leaf
    else:
        path, leaf = f"sme2.gemm.{expand}_planes_smopa", compact_leaves.gemm_leaf
    P = leaf(recs, zt0, s.a, rows, s.k, int(t.group), f.base_bits, f.planes)
    return [(path, P, dispatch.rescale(P, s.A, sc, of, s.da, t), s.rows)]


assert _panel64.CHANNELS == TILE
