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
line here. ``CODE_FORMS`` is the one table of layouts whose code form is an option
(``--layout panel64:int8``); :func:`request` reads such a name and :func:`written` says which
registered layout a tensor of a given type is stored in.
"""

from __future__ import annotations

from types import ModuleType
from typing import NamedTuple

from ..formats import qtypes
from ..formats.errors import UnsupportedError
from . import ggml_x8, il8_int8, il8_nibble, panel64, panel64_compact, rowmajor
from ._common import JIT_PAYOFF_BYTES, RegionSpec

LAYOUTS: dict[str, ModuleType] = {}

#: what every layout module offers (docs/DEVELOPING.md); ``register`` checks it is there
SURFACE = ("NAME", "SOURCE_TYPES", "ROW_MULTIPLE", "TARGET", "DESCRIPTION",
           "refuse", "invertible", "plan", "params", "pack", "unpack", "dequantize")

__all__ = ["LAYOUTS", "CODE_FORMS", "RegionSpec", "Request", "get", "names", "choices", "request", "written",
           "describe", "register", "numpy_pack_kind", "JIT_PAYOFF_BYTES"]


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


#: ``--layout NAME:FORM``: the layouts whose code form is an option, the one table of it. NAME ->
#: (the form ``NAME`` alone gives, {form: the registered layout that stores it}). A tensor whose
#: type has no such form (that layout's ``has_form(t)`` is false) is written in NAME itself: the
#: same bytes (panel64-compact keeps Q4_0/Q4_1/Q4_K/Q8_0 in panel64's nibble and int8 panels).
#: The form is recorded in the manifest (``options.code_form``), each tensor's in its params.
CODE_FORMS: dict[str, tuple[str, dict[str, str]]] = {
    "panel64": ("compact", {"compact": "panel64-compact", "int8": "panel64"}),
}


class Request(NamedTuple):
    """A requested layout: a registered name and, for a layout in :data:`CODE_FORMS`, its form."""

    layout: str
    code_form: str | None = None

    def __str__(self) -> str:
        return self.layout if self.code_form is None else f"{self.layout}:{self.code_form}"


def request(name: "str | Request") -> Request:
    """``NAME`` or ``NAME:FORM`` (``panel64``, ``panel64:int8``) as a :class:`Request`; a
    layout in :data:`CODE_FORMS` named alone gets its default form. Unknown names and forms
    raise :class:`UnsupportedError` listing the known ones."""
    if isinstance(name, Request):
        return name
    base, sep, form = name.partition(":")
    mod = get(base)
    forms = CODE_FORMS.get(mod.NAME)
    if forms is None:
        if sep:
            raise UnsupportedError(f"layout {mod.NAME!r} has no code-form option (':{form}'); "
                                   f"layouts with one: {', '.join(CODE_FORMS) or 'none'}")
        return Request(mod.NAME)
    form = form.strip().lower() if sep else forms[0]
    if form not in forms[1]:
        raise UnsupportedError(f"unknown code form {form!r} of layout {mod.NAME!r} "
                               f"(known: {', '.join(f'{mod.NAME}:{f}' for f in forms[1])})")
    return Request(mod.NAME, form)


def written(req: "str | Request", qtype) -> str:
    """The registered layout a tensor of type ``qtype`` is stored in for the request ``req``."""
    r = request(req)
    if r.code_form is None:
        return r.layout
    mod = LAYOUTS[CODE_FORMS[r.layout][1][r.code_form]]
    has_form = getattr(mod, "has_form", None)
    return mod.NAME if has_form is None or has_form(qtypes.get(qtype)) else r.layout


def names() -> list[str]:
    return list(LAYOUTS)


def choices() -> list[str]:
    """What ``--layout`` takes: every registered name, then each ``NAME:FORM`` of CODE_FORMS."""
    return names() + [f"{name}:{form}" for name, (_, forms) in CODE_FORMS.items() for form in forms]


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
            **({"code_forms": {"default": CODE_FORMS[mod.NAME][0], "forms": dict(CODE_FORMS[mod.NAME][1])}}
               if mod.NAME in CODE_FORMS else {}),
        })
    return out
