"""The emulated runtime paths the verifier registry lists (:data:`.registry.VERIFIERS`'s
``runners``, a layout module's ``VERIFY`` hooks): each takes one :class:`.registry.Sample` and
returns its :data:`.registry.PathResult` list.

They call the kernels (``compiled``, ``il8``, ``leaves``, ``neon``), and the kernels look their
specs up in the registry, so they live here and the registry names them (imported on first use,
as it names the kernel factories): the registry imports no kernel, and no kernel imports this.
"""

from __future__ import annotations

from typing import Any, Callable, cast

import numpy as np

from ..repack import rowmajor
from .registry import PathResult, Sample


def panel_leaves(s: Sample) -> list[PathResult]:
    """The SME2 GEMV/GEMM leaves and the NEON path on the sampled super-blocks (``m == 1``
    runs GEMV and NEON, more rows GEMM; another SVL the closed-form reader of that geometry)."""
    from . import compiled, dispatch, leaves, neon

    t = s.qtype
    G = cast(int, t.group)
    nibble = t.code_bits == 4
    zt0 = np.asarray(s.params.get("zt0", [0] * 64), dtype=np.uint8) if nibble else None
    expand = "luti4" if nibble else "ld1b"
    m = s.a.shape[0]
    runs = []
    if s.svl_bits != 512:
        # what a runtime with another vector length would read from the same bytes
        panels = compiled.panel64_code_bytes(t, s.regions, s.n, s.k, s.layout)
        sc, of = compiled.panel64_scale_arrays(t, s.regions, s.n, s.k, s.layout)
        sc, of = sc[s.rows], of[s.rows]
        codes = leaves.read_panels_ref(panels, zt0, s.n, s.k, G, nibble, svl_bits=s.svl_bits)
        runs.append((f"sme2.svl{s.svl_bits}.ref", dispatch.partials_ref(codes[s.rows], s.a, G)))
    else:
        # the leaves run on the sampled super-blocks' bytes alone (a panel64 tensor of those
        # rows), so a memory-mapped bundle is never copied whole for the emulated memory
        part, rows = leaves.sb_regions(s.regions, s.sbs), s.rows.size
        panels = compiled.panel64_code_bytes(t, part, rows, s.k, s.layout)
        sc, of = compiled.panel64_scale_arrays(t, part, rows, s.k, s.layout)
        if m == 1:
            runs.append((f"sme2.gemv.{expand}_sdot", leaves.gemv_leaf(panels, zt0, s.a, rows, s.k, G, nibble)))
            runs.append(("neon.panel", neon.neon_leaf(panels, zt0, s.a, rows, s.k, G, nibble)))
        else:
            runs.append((f"sme2.gemm.{expand}_smopa", leaves.gemm_leaf(panels, zt0, s.a, rows, s.k, G, nibble)))
    return [(path, P, dispatch.rescale(P, s.A, sc, of, s.da, t), s.rows) for path, P in runs]


def il8_gemm(s: Sample) -> list[PathResult]:
    """The 8-row interleaved kernel, all rows, as the runtimes' ``*_8x8`` kernels read the bytes."""
    from . import dispatch, il8

    P, A = il8.il8_partials(s.layout, s.regions, s.n, s.k, s.qtype, s.a)
    sc, of = il8.il8_scales(s.layout, s.regions, s.n, s.k, s.qtype)
    return [("il8.gemm", P, dispatch.rescale(P, A, sc, of, s.da, s.qtype), None)]


def hook_blocks(hook: Callable[..., Any], s: Sample) -> list[PathResult]:
    """A layout module's ``VERIFY["blocks"]`` reader, then the compiled standard kernel on its blocks."""
    from . import compiled

    blocks = np.ascontiguousarray(hook(s.regions, s.n, s.k, s.qtype), np.uint8).reshape(s.n, -1)
    P, _, y = compiled.prepare(rowmajor.NAME, {"blocks": blocks}, s.n, s.k, s.qtype).run(s.a, s.da)
    return [(f"reader.{s.layout}.blocks", cast(np.ndarray, P), y, None)]


def hook_integer_form(hook: Callable[..., Any], s: Sample) -> list[PathResult]:
    """A layout module's ``VERIFY["integer_form"]`` reader: its signed codes and rescale factors."""
    from . import dispatch

    c, sc, of = hook(s.regions, s.n, s.k, s.qtype)
    P = dispatch.partials_from_codes(np.asarray(c), s.a, cast(int, s.qtype.group))
    y = dispatch.rescale(P, s.A, np.asarray(sc, np.float32), np.asarray(of, np.float32), s.da, s.qtype)
    return [(f"reader.{s.layout}.integer_form", P, y, None)]
