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
from numba import njit

from ..formats._jit import lazy_njit
from ..repack import panel64 as _panel64
from ..repack import panel64_compact as _compact
from . import _simd
from . import compiled as _compiled
from ._compiled_kernels import TILE, _column_tile, _tile_view, int8_group_tile
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


def _record_view(bits: int):
    """The tile view of ``bits``-bit group records: ``G/4 * 32 * bits = 8 * bits * G`` bytes a
    group, the factor a constant of each kernel (one view per code width, as the column tile
    wants: :func:`._compiled_kernels._column_tile`)."""
    unit = 8 * bits

    @lazy_njit(inline="always", tag=f"bits{bits}")
    def view(w, t, tw, ng, group):
        return _tile_view(w, t, 1, ng, group * unit)

    return view


#: code bits -> the column tile of that record size
_TILES = {bits: _column_tile(_record_view(bits), _unpack_compact) for bits in (2, 3, 5, 6)}


# ---- where numba targets AVX2: each group's record expanded to its int8 panel, then _simd's
# ---- int8 group dot on it, as panel64's int8 tiles. The expansion is the SME2 leaf's sequence in
# ---- LLVM vector IR, written here from §4.2.1 (not repack's converter): per 32 lanes the base
# ---- value (nibbles or crumbs to lanes, minus the code offset: the ZT0 value), then per bit plane
# ---- the plane's 32 bits as an i1 mask selecting 2^(B+p) to add (the predicated ADD).
def _expand_intrinsic(base: int, nplanes: int, kq: int):
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    v32i8, v16i8, v8i8, v32i1 = (ir.VectorType(i8, 32), ir.VectorType(i8, 16), ir.VectorType(i8, 8),
                                 ir.VectorType(ir.IntType(1), 32))
    vi = ir.VectorType(i32, 32)

    def const(v, ty=v32i8):
        return ir.Constant(ty, [v] * ty.count)

    @intrinsic
    def expand(typingctx, w, rec, out, off):
        """The group record at ``w[rec:]`` -> its int8 panel in ``out[0 : kq*256]`` (signed codes)."""
        sig = types.void(w, rec, out, off)

        def codegen(context, builder, signature, args):
            wp = builder.gep(context.make_array(signature.args[0])(context, builder, args[0]).data, [args[1]])
            op = context.make_array(signature.args[2])(context, builder, args[2]).data
            ob = builder.insert_element(ir.Constant(v32i8, None), builder.trunc(args[3], i8), ir.Constant(i32, 0))
            offs = builder.shuffle_vector(ob, ir.Constant(v32i8, None), ir.Constant(vi, [0] * 32))

            def at(p, o, ty):
                return builder.bitcast(builder.gep(p, [ir.Constant(i64, o)]), ty.as_pointer())

            for q in range(kq):
                for c in range(8):  # lanes 32c .. 32c+31 of kg-block q
                    if base == 4:
                        b = builder.load(at(wp, q * 128 + 16 * c, v16i8), align=1)
                        lo, hi = builder.and_(b, const(15, v16i8)), builder.lshr(b, const(4, v16i8))
                        u = builder.shuffle_vector(lo, hi, ir.Constant(vi, [x for i in range(16) for x in (i, 16 + i)]))
                    else:
                        b = builder.load(at(wp, q * 64 + 8 * c, v8i8), align=1)
                        rep = builder.shuffle_vector(b, ir.Constant(v8i8, None), ir.Constant(vi, [i // 4 for i in range(32)]))
                        u = builder.and_(builder.lshr(rep, ir.Constant(v32i8, [2 * (i % 4) for i in range(32)])), const(3))
                    val = builder.sub(u, offs)
                    for p in range(nplanes):
                        word = builder.load(at(wp, kq * 32 * base + (p * kq + q) * 32 + 4 * c, i32), align=1)
                        mask = builder.bitcast(word, v32i1)
                        val = builder.add(val, builder.select(mask, const(1 << (base + p)), const(0)))
                    builder.store(val, at(op, q * 256 + 32 * c, v32i8), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return expand


def _avx2_tile(base: int, nplanes: int, kq: int):
    """The AVX2 tile of one compact form: each group's record expanded into an int8 panel, then
    the int8 panels' own group dots."""
    gb = kq * (32 * base + _PLANE * nplanes)
    expand = _expand_intrinsic(base, nplanes, kq)

    @njit(inline="always")
    def expanded(w, t, g, ng, group, geom, scratch):
        expand(w, (t * ng + g) * gb, scratch, geom[0])
        return scratch, 0

    dot = _simd.int8_group_dot16 if kq == 4 else _simd.int8_group_dot
    return int8_group_tile(dot, expanded, kq * 256)


#: code bits -> the AVX2 tile of that form (None where numba does not target AVX2)
_AVX2_TILES = {f.bits: _avx2_tile(f.base_bits, f.planes, f.kq) for f in map(_compact.form, _compact.COMPACT_TYPES)
               } if _simd.AVAILABLE else {}


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
    offset = lambda t_, n, k: np.array([t_.code_offset], np.int64)  # noqa: E731
    fast = _AVX2_TILES.get(f.bits)
    if fast is not None:  # signed codes into the int8 group dot (|c| <= 32: never -128)
        return _compiled.KernelSpec(layout, t.name, fast, compact_code_bytes, _compiled.panel64_scale_arrays, offset,
                                    max(t.code_offset, (1 << f.bits) - 1 - t.code_offset), variant="avx2")
    return _compiled.KernelSpec(layout, t.name, _TILES[f.bits], compact_code_bytes, _compiled.panel64_scale_arrays,
                                offset, (1 << f.bits) - 1)


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
    GEMV (LUTI + predicated ADD + SDOT) and the NEON path (TBL/USHL/CMTST + SDOT) at M = 1,
    GEMM (... + SMOPA) for more rows."""
    from . import compact_leaves, dispatch, leaves

    t = s.qtype
    f = _compact.form(t)
    assert f is not None, t.name
    part, rows = leaves.sb_regions(s.regions, s.sbs), s.rows.size
    recs = compact_code_bytes(t, part, rows, s.k, s.layout)
    sc, of = _compiled.panel64_scale_arrays(t, part, rows, s.k, s.layout)
    zt0 = np.asarray(s.params.get("zt0", list(_compact.zt0_table(t))), np.uint8)
    expand = "luti4" if f.base_bits == 4 else "luti2"
    args = (recs, zt0, s.a, rows, s.k, int(t.group), f.base_bits, f.planes)
    if s.a.shape[0] == 1:
        runs = [(f"sme2.gemv.{expand}_planes_sdot", compact_leaves.gemv_leaf(*args)),
                ("neon.compact", compact_leaves.neon_leaf(*args))]
    else:
        runs = [(f"sme2.gemm.{expand}_planes_smopa", compact_leaves.gemm_leaf(*args))]
    return [(path, P, dispatch.rescale(P, s.A, sc, of, s.da, t), s.rows) for path, P in runs]


assert _panel64.CHANNELS == TILE
