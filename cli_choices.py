"""The CLI's option choices, read from the registries (never literal lists).

``--layout`` lists ``repack.LAYOUTS`` (and ``NAME:FORM`` of ``repack.CODE_FORMS``), ``--quant``/``--requant`` the quantizable types of the
type registry (``convert.policy.QUANT_CHOICES``), llama.cpp's mixes (``convert.mixes.MIXES``)
and the CQ codes (``convert.cactus.QUANTS``), ``--level`` the verifier's ``LEVELS``, ``--digest``
the bundle digests (``formats.digests.DIGESTS``), ``--target`` what convert writes
(``convert.TARGETS``), ``--outtype`` the GGUF writer's (``convert.gguf_out.OUTTYPE_CHOICES``),
``--against`` the evaluator's references (``verify.runtime.evaluate.REFERENCES``) and
``--kernels`` the runtime's kernel paths (``verify.runtime.weights.KERNEL_PATHS``). A
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

    def __init__(self, names: Callable[[], Sequence[str]], dashes: bool = False, case_sensitive: bool = False) -> None:
        # no super().__init__: it would read the names now
        self._names = names
        self._dashes = dashes
        self.case_sensitive = case_sensitive

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self._names())

    def convert(self, value, param, ctx):
        if self._dashes and isinstance(value, str):
            value = value.strip().replace("_", "-")
        return super().convert(value, param, ctx)


def _layouts() -> list[str]:
    from panelpack import repack

    return repack.choices()  # the registered names, and NAME:FORM of the layouts with a code-form option


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


def _targets() -> tuple[str, ...]:
    from panelpack.convert import TARGETS

    return TARGETS


def _outtypes() -> tuple[str, ...]:
    from panelpack.convert.gguf_out import OUTTYPE_CHOICES

    return OUTTYPE_CHOICES


def _references() -> tuple[str, ...]:
    from panelpack.verify.runtime.evaluate import REFERENCES

    return REFERENCES


def _run_paths() -> tuple[str, ...]:
    """The kernel paths a bundle's own run takes: the runtime's, but ``f32`` (the dequantized
    weights, no integer kernel), which is the ``--against f32`` reference's."""
    from panelpack.verify.runtime.weights import KERNEL_PATHS

    return tuple(p for p in KERNEL_PATHS if p != "f32")


# (case-sensitive, as the literal lists they replace were)
TARGET = RegistryChoice(_targets, case_sensitive=True)
OUTTYPE = RegistryChoice(_outtypes)
AGAINST = RegistryChoice(_references, case_sensitive=True)
KERNELS = RegistryChoice(_run_paths, case_sensitive=True)
