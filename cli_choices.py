"""The CLI's option choices, read from the registries (never literal lists).

``--layout`` lists ``repack.LAYOUTS``, ``--quant``/``--requant`` the quantizable types of the
type registry (``convert.policy.QUANT_CHOICES``), llama.cpp's mixes (``convert.mixes.MIXES``)
and the CQ codes (``convert.cactus.QUANTS``), ``--level`` the verifier's ``LEVELS``, ``--digest``
the bundle digests (``formats.digests.DIGESTS``). A
registry is imported only when click first needs its names (parsing that option, or rendering
that command's help), so ``panelpack --help`` stays as cheap as before.
"""

from __future__ import annotations

from typing import Callable, Sequence

import click


class RegistryChoice(click.Choice):
    """A :class:`click.Choice` whose names come from ``names()``, asked on every use (so a
    layout registered at run time is a choice too). Case-insensitive; ``_`` and ``-`` are the
    same when ``dashes`` (as :func:`panelpack.repack.get` reads layout names)."""

    def __init__(self, names: Callable[[], Sequence[str]], dashes: bool = False) -> None:
        # no super().__init__: it would read the names now
        self._names = names
        self._dashes = dashes
        self.case_sensitive = False

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self._names())

    def convert(self, value, param, ctx):
        if self._dashes and isinstance(value, str):
            value = value.strip().replace("_", "-")
        return super().convert(value, param, ctx)


def _layouts() -> list[str]:
    from panelpack import repack

    return repack.names()


def _requants() -> tuple[str, ...]:
    from panelpack.convert.policy import QUANT_CHOICES

    return tuple(QUANT_CHOICES)


def _quants() -> tuple[str, ...]:
    from panelpack.convert.cactus import QUANTS as CQ_QUANTS
    from panelpack.convert.mixes import MIXES

    names = _requants() + tuple(m.lower() for m in MIXES) + tuple(CQ_QUANTS)
    return tuple(dict.fromkeys(names))  # the mixes named like a type (q4_0, q8_0, ...) once


def _levels() -> tuple[str, ...]:
    from panelpack.verify.bundle_check import LEVELS

    return LEVELS


def _digests() -> tuple[str, ...]:
    from panelpack.formats.digests import DIGESTS

    return tuple(DIGESTS)


def _demo_levels() -> tuple[str, ...]:
    return ("none",) + tuple(_levels())


LAYOUT = RegistryChoice(_layouts, dashes=True)
QUANT = RegistryChoice(_quants)  # --quant: the block types and the CQ codes of --target cactus
REQUANT = RegistryChoice(_requants)  # --requant: block types only
def _native_modes() -> tuple[str, ...]:
    from panelpack.verify.native.session import MODES

    return MODES


LEVEL = RegistryChoice(_levels)
NATIVE = RegistryChoice(_native_modes)
DEMO_LEVEL = RegistryChoice(_demo_levels)
DIGEST = RegistryChoice(_digests)
