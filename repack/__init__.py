"""Layouts: pure, exact transforms between standard GGUF blocks and kernel layouts.

One module per layout, all with the same surface (see docs/DEVELOPING.md and the module
docstrings, which draw each byte layout)::

    NAME, SOURCE_TYPES, ROW_MULTIPLE, TARGET, DESCRIPTION
    refuse(qtype, n, k) -> str | None        why a tensor does not qualify (ledger words)
    invertible(qtype) -> bool
    plan(qtype, n, k) -> list[RegionSpec]    names, dtypes, shapes, sizes (no data)
    params(qtype, n, k) -> dict              what the manifest records (JSON-serialisable)
    pack(blocks, n, k, qtype, out=None) -> dict[name, ndarray]     regions in plan order
    unpack(regions, n, k, qtype, out=None) -> uint8 [n, row_bytes] invertible layouts only
    dequantize(regions, n, k, qtype) -> f32 [n, k]                 bit-identical to the codec

``LAYOUTS`` is the one registry every command reads; a new layout is a new module plus its
line here.
"""

from __future__ import annotations

from types import ModuleType

from ..formats import qtypes
from ..formats.errors import UnsupportedError
from . import ggml_x8, il8_int8, il8_nibble, panel64, panel64_compact, rowmajor
from ._common import JIT_PAYOFF_BYTES, RegionSpec

LAYOUTS: dict[str, ModuleType] = {}

#: what every layout module offers (docs/DEVELOPING.md); ``register`` checks it is there
SURFACE = ("NAME", "SOURCE_TYPES", "ROW_MULTIPLE", "TARGET", "DESCRIPTION",
           "refuse", "invertible", "plan", "params", "pack", "unpack", "dequantize")

__all__ = ["LAYOUTS", "RegionSpec", "get", "names", "describe", "register", "numpy_pack_kind", "JIT_PAYOFF_BYTES"]


def register(module: ModuleType) -> ModuleType:
    """Add a layout module to :data:`LAYOUTS` under its ``NAME`` (lower case, ``-`` not ``_``).

    Refuses a module that lacks part of the surface or whose name is taken, so a layout is
    listed once. Everything else (``convert``, ``verify``, the CLI's choices) reads LAYOUTS.
    """
    missing = [a for a in SURFACE if not hasattr(module, a)]
    if missing:
        raise TypeError(f"layout module {module.__name__} lacks {', '.join(missing)}")
    name = module.NAME
    if not isinstance(name, str) or name != name.strip().lower().replace("_", "-"):
        raise ValueError(f"layout name {name!r} must be lower case with '-' (as get() normalises)")
    if name in LAYOUTS:
        raise ValueError(f"layout name {name!r} is already registered (by {LAYOUTS[name].__name__})")
    LAYOUTS[name] = module
    return module


for _mod in (rowmajor, panel64, ggml_x8, il8_nibble, il8_int8, panel64_compact):
    register(_mod)
del _mod


def names() -> list[str]:
    return list(LAYOUTS)


def numpy_pack_kind(layout: str, qtype) -> str | None:
    """What packing ``qtype`` into ``layout`` costs a job that stays in numpy
    (formats/engine.py): ``"repack"`` (a numpy packer), ``"repack_ref"`` (only the reference
    packer), or None for a layout that copies the blocks as they are (row-major). A layout
    says so with an optional ``numpy_pack_kind(t)``; one without kernels-free packers counts
    as ``"repack"`` (its first kernel starts numba for the rest of the job)."""
    kind = getattr(get(layout), "numpy_pack_kind", None)
    return kind(qtypes.get(qtype)) if kind else "repack"


def get(name: str) -> ModuleType:
    """The layout module called ``name`` (case-insensitive; ``_`` and ``-`` are the same)."""
    if isinstance(name, str):
        key = name.strip().lower().replace("_", "-")
        if key in LAYOUTS:
            return LAYOUTS[key]
    raise UnsupportedError(f"unknown layout {name!r} (known: {', '.join(LAYOUTS)})")


def describe() -> list[dict]:
    """One JSON-serialisable entry per layout, for ``panelpack layouts``."""
    out = []
    for mod in LAYOUTS.values():
        types = sorted(mod.SOURCE_TYPES, key=lambda t: t.id)
        any_type = mod.SOURCE_TYPES == frozenset(qtypes.TYPES)
        out.append({
            "name": mod.NAME,
            "any_type": any_type,
            "source_types": [t.name for t in types],
            "row_multiple": mod.ROW_MULTIPLE,
            "k_multiple": {t.name: t.block_size for t in types},
            "invertible": {t.name: mod.invertible(t) for t in types},
            "target": dict(mod.TARGET),
            "description": mod.DESCRIPTION,
        })
    return out
