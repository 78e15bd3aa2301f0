"""The verifier registry: how ``verify/`` reads each layout, keyed by the layout's ``NAME``.

``repack.LAYOUTS`` is the one list of layouts. This module is the one place in ``verify/`` that
says, per layout name, which of the verifier's **own** byte readers run on it:

* ``kernel``: the compiled-kernel factory (``verify/compiled.py``), ``(layout, type) ->
  KernelSpec | None``: the fast all-rows kernel, ledger path ``compiled.<layout>``;
* ``interleaved``: the 8-row interleaved form factory (``verify/il8.py``), ``(layout, type) ->
  Il8Form | None``;
* ``runners``: the emulated runtime paths (SME2/NEON leaves on panels, the interleaved GEMM,
  or the readers a layout module declares itself, below), each a :class:`Runner`;
* ``regions_are_blocks``: the layout's regions are the standard blocks themselves (rowmajor),
  so the standard dispatch reads the layout's own bytes and their sha256 is the lossless proof;
* ``row_reader``: a class ``(regions, n, k, qtype)`` with ``rows(r0, r1, out)``, f32 rows straight
  from the layout's bytes (``verify/lossless.py``), so the lossless comparison and the f64 sanity
  read a big tensor in row chunks; without one, the layout's ``dequantize`` in one piece;
* ``superblock_major``: every region leads with the 64-row super-block axis, so the sampled
  super-blocks are a tensor of the same layout (and all its runtime paths run on those rows);
* ``stack_rows``: the compiled kernel computes each output row on its own, in units of this
  many rows, so matrices reading the same input stack into one product when each N is a whole
  number of units (the runtime's q/k/v and gate/up, ``verify/runtime/weights.stacked``).

Every geometry fact a reader needs (region names, byte sizes, channels per panel) is read from
the layout module's ``plan()`` and constants, never restated. The readers never call a layout's
``pack``/``unpack`` to interpret bytes: that independence is what makes them a verifier. (The
lossless level does use the layout's declared inverse, ``unpack``, and checks the blocks it
returns against the sha256 recorded from the source.)

A layout module outside this table may declare its own hooks as a ``VERIFY`` dict (plain
callables, so the module needs nothing from ``verify/``)::

    VERIFY = {
        "blocks": read_blocks,              # (regions, n, k, qtype) -> uint8 [n, row_bytes]
        "integer_form": read_integer_form,  # (regions, n, k, qtype) -> (c int [n, k], s, o f32 [n, K/G])
    }

Each hook must read the regions by the byte layout the module documents, written apart from
its ``pack``/``unpack`` (a hook that calls them proves nothing). ``blocks`` runs the compiled
standard reader on the blocks it returns (ledger path ``reader.<layout>.blocks``);
``integer_form`` gives the signed codes ``c = code - code_offset`` and the rescale factors of
docs/FORMAT.md §3 (``dispatch.scale_arrays``), from which the partials and the shared ``rescale`` follow
(``reader.<layout>.integer_form``). A layout with neither still verifies structure and lossless
(through its ``unpack``) and, in agreement, the standard dispatch on the unpacked blocks; its
ledger then lists only ``standard`` and the agreement level says no independent reader ran.

The kernel and form factories and the runners' bodies (``verify/runners.py``) are named here
and imported on first use, so this table costs nothing to import (no numba): ``verify --level
structure`` stays cheap; and the kernels, which look their specs up here, import no module that
imports them (tests/test_imports.py).
"""

from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import numpy as np

from .. import repack
from ..formats import qtypes
from ..formats.errors import UnsupportedError
from ..repack import ggml_x8, il8_int8, il8_nibble, panel64, panel64_compact, rowmajor

log = logging.getLogger(__name__)

# What a runner returns: (ledger path, P int32 [M, C, ng], y f32 [M, C], rows) where rows is None
# for all N rows, else the int64 channel indices C of the sampled rows.
PathResult = tuple[str, np.ndarray, np.ndarray, Optional[np.ndarray]]


@dataclass(frozen=True)
class Sample:
    """One activation batch of one tensor, as every runner of a layout sees it."""

    layout: str
    regions: Mapping[str, np.ndarray]
    qtype: qtypes.GGMLType
    n: int
    k: int
    params: dict[str, Any]  # what the layout's params() records (the manifest's, once structure passed)
    a: np.ndarray  # int8 [M, k] quantized activations
    da: np.ndarray  # f32 [M, k/32] their scales
    A: np.ndarray  # int32 [M, K/G] group sums of a
    sbs: Any  # int64 array: the sampled 64-row super-blocks (emulated leaves)
    rows: np.ndarray  # their channels
    svl_bits: int


@dataclass(frozen=True)
class Runner:
    """A verification path of a layout beyond its compiled kernel."""

    label: str  # the ledger path (or its family) for listings
    accepts: Callable[[str, qtypes.GGMLType], bool]
    run: Callable[[Sample], list[PathResult]]
    #: the lazy kernels ``run`` calls, as ``"<verify module>.<name>"``: what a cold first run
    #: may compile in a second process meanwhile (verify/precompile.py)
    kernels: tuple[str, ...] = ()


@dataclass(frozen=True)
class LayoutVerifier:
    """One row of :data:`VERIFIERS`: what the verifier runs on layout ``name``."""

    name: str
    kernel: Optional[Callable[..., Any]] = None  # (layout, t) -> compiled.KernelSpec | None
    interleaved: Optional[Callable[..., Any]] = None  # (layout, t) -> il8.Il8Form | None
    runners: tuple[Runner, ...] = ()
    regions_are_blocks: bool = False
    origin: str = "verify"  # "verify" (this table), "VERIFY hooks" (the layout module), "none"
    row_reader: Optional[Callable[..., Any]] = None  # (regions, n, k, t) -> lossless.Panel64Reader-like
    superblock_major: bool = False
    stack_rows: Optional[int] = None

    def kernel_spec(self, t: qtypes.GGMLType):
        """The compiled kernel for type ``t`` on this layout, or None."""
        if self.kernel is None or t not in repack.get(self.name).SOURCE_TYPES:
            return None
        return self.kernel(self.name, t)

    def form(self, t: qtypes.GGMLType):
        """The interleaved form for type ``t`` on this layout, or None."""
        if self.interleaved is None or t not in repack.get(self.name).SOURCE_TYPES:
            return None
        return self.interleaved(self.name, t)

    def paths(self, qtype) -> list[str]:
        """The readers ``verify --level all`` runs on a tensor of this layout and type that read
        the layout's own bytes (empty: nothing but the layout's own ``unpack`` would vouch for it)."""
        t = qtypes.get(qtype)
        lay = repack.get(self.name)
        if t not in lay.SOURCE_TYPES:
            return []
        if self.regions_are_blocks:  # the standard dispatch reads these very bytes
            if t.scheme is None:
                return ["lossless.sha256"] if lay.invertible(t) else []
            return ["standard"] if self.kernel_spec(t) is not None else []
        if t.scheme is None:
            return []
        spec = self.kernel_spec(t)
        return ([spec.path] if spec is not None else []) + [r.label for r in self.runners if r.accepts(self.name, t)]


def _named(module: str, name: str) -> Callable[..., Any]:
    """``verify/<module>.<name>``, imported on its first call (keeps this table import-cheap)."""

    def call(*args):
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)(*args)

    call.__qualname__ = call.__name__ = f"{module}.{name}"
    return call


# ---- the emulated runtime paths (their bodies: verify/runners.py) -----------------------------
def _panel_leaves_accept(layout: str, t: qtypes.GGMLType) -> bool:
    return t.scheme is not None and (t.group or 0) % 16 == 0


def _il8_gemm_accept(layout: str, t: qtypes.GGMLType) -> bool:
    return verifier(layout).form(t) is not None


PANEL_LEAVES = Runner("sme2/neon leaves", _panel_leaves_accept, _named("runners", "panel_leaves"),
                      kernels=("leaves.gemv_program", "neon.neon_program", "leaves.gemm_program"))
IL8_GEMM = Runner("il8.gemm", _il8_gemm_accept, _named("runners", "il8_gemm"))


# panel64-compact (verify/compact.py): panel64's leaves on the types it keeps in panel64's forms,
# the closed-form reader on the bit-plane records
def _panel64_forms_accept(layout: str, t: qtypes.GGMLType) -> bool:
    return panel64_compact.form(t) is None and _panel_leaves_accept(layout, t)


def _compact_forms_accept(layout: str, t: qtypes.GGMLType) -> bool:
    return t.scheme is not None and panel64_compact.form(t) is not None


PANEL64_FORM_LEAVES = Runner("sme2/neon leaves", _panel64_forms_accept, PANEL_LEAVES.run, kernels=PANEL_LEAVES.kernels)
COMPACT_READER = Runner("reader.closed_form", _compact_forms_accept, _named("compact", "integer_form_reader"))
COMPACT_LEAVES = Runner("sme2/neon compact leaves", _compact_forms_accept, _named("compact", "leaves_runner"),
                        kernels=("compact_leaves.gemv_program", "compact_leaves.neon_program",
                                 "compact_leaves.gemm_program"))


def _interleaved(mod, kernel: str, form: str) -> LayoutVerifier:
    return LayoutVerifier(mod.NAME, _named("compiled", kernel), _named("il8", form), (IL8_GEMM,))


#: layout NAME -> how the verifier reads it. The only table in verify/ keyed by layout.
VERIFIERS: dict[str, LayoutVerifier] = {v.name: v for v in (
    LayoutVerifier(rowmajor.NAME, _named("compiled", "rowmajor_kernel"), regions_are_blocks=True, stack_rows=1),
    LayoutVerifier(panel64.NAME, _named("compiled", "panel64_kernel"), runners=(PANEL_LEAVES,),
                   row_reader=_named("lossless", "Panel64Reader"), superblock_major=True, stack_rows=panel64.CHANNELS),
    _interleaved(ggml_x8, "x8_kernel", "x8_form"),
    _interleaved(il8_nibble, "il8_nibble_kernel", "il8_nibble_form"),
    _interleaved(il8_int8, "il8_int8_kernel", "il8_int8_form"),
    LayoutVerifier(panel64_compact.NAME, _named("compact", "panel64_compact_kernel"),
                   runners=(PANEL64_FORM_LEAVES, COMPACT_READER, COMPACT_LEAVES), superblock_major=True,
                   stack_rows=panel64.CHANNELS),
)}


# ---- a layout module's own hooks ------------------------------------------------------------
def _hook_accept(layout: str, t: qtypes.GGMLType) -> bool:
    return t.scheme is not None and t in repack.get(layout).SOURCE_TYPES


def _blocks_runner(hook: Callable[..., Any]) -> Runner:
    return Runner("reader.blocks", _hook_accept, functools.partial(_named("runners", "hook_blocks"), hook))


def _integer_form_runner(hook: Callable[..., Any]) -> Runner:
    return Runner("reader.integer_form", _hook_accept, functools.partial(_named("runners", "hook_integer_form"), hook))


#: the hooks a layout module may declare in ``VERIFY``, and the runner each becomes
HOOKS: dict[str, Callable[[Callable[..., Any]], Runner]] = {
    "blocks": _blocks_runner,
    "integer_form": _integer_form_runner,
}


def _from_module(mod) -> LayoutVerifier:
    hooks = getattr(mod, "VERIFY", None) or {}
    unknown = sorted(set(hooks) - set(HOOKS))
    if unknown:
        log.warning("layout %s: VERIFY names unknown hooks %s (known: %s)", mod.NAME, unknown, ", ".join(HOOKS))
    runners = tuple(HOOKS[key](fn) for key, fn in hooks.items() if key in HOOKS)
    return LayoutVerifier(mod.NAME, runners=runners, origin="VERIFY hooks" if runners else "none")


def verifier(layout: str) -> LayoutVerifier:
    """How the verifier reads ``layout`` (any name :func:`panelpack.repack.get` accepts)."""
    mod = repack.get(layout)
    return VERIFIERS.get(mod.NAME) or _from_module(mod)


def _known(layout: str) -> Optional[LayoutVerifier]:
    try:
        return verifier(layout)
    except UnsupportedError:  # not a layout name
        return None


def row_reader(layout: str) -> Optional[Callable[..., Any]]:
    """The lossless row reader of ``layout`` (see the module docstring), or None."""
    v = _known(layout)
    return None if v is None else v.row_reader


def superblock_major(layout: str) -> bool:
    """Whether every region of ``layout`` leads with the 64-row super-block axis."""
    v = _known(layout)
    return v is not None and v.superblock_major


def stack_rows(layout: str) -> Optional[int]:
    """The row unit in which ``layout``'s compiled products stack (None: they do not)."""
    v = _known(layout)
    return None if v is None else v.stack_rows


def kernel_spec(layout: str, qtype):
    """The compiled kernel of ``(layout, qtype)``, or None (an unknown layout name included)."""
    v = _known(layout)
    return None if v is None else v.kernel_spec(qtypes.get(qtype))


def form(layout: str, qtype):
    """The interleaved form of ``(layout, qtype)``, or None (an unknown layout name included)."""
    v = _known(layout)
    return None if v is None else v.form(qtypes.get(qtype))


def coverage() -> dict[tuple[str, str], list[str]]:
    """``(layout, type name) -> reader paths`` for every pair ``repack.LAYOUTS`` accepts."""
    return _table(LayoutVerifier.paths)


def _table(pick: Callable[[LayoutVerifier, qtypes.GGMLType], Any]) -> dict:
    """``(layout, type name) -> pick(verifier, type)`` over every layout and source type, where not None."""
    out = {}
    for name, mod in repack.LAYOUTS.items():
        v = verifier(name)
        for t in sorted(mod.SOURCE_TYPES, key=lambda x: x.id):
            item = pick(v, t)
            if item is not None:
                out[(name, t.name)] = item
    return out


def compiled_kernels() -> dict:
    """``(layout, type name) -> compiled.KernelSpec`` wherever a compiled kernel exists."""
    return _table(LayoutVerifier.kernel_spec)


def interleaved_forms() -> dict:
    """``(layout, type name) -> il8.Il8Form`` wherever an interleaved form exists."""
    return _table(LayoutVerifier.form)
