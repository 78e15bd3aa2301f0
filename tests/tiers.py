"""The two test tiers (docs/DEVELOPING.md, "Tests"): helpers to put some cases of a parametrized
test in the slow tier and keep a cheap few in the README's fast one."""

from __future__ import annotations

from typing import Any, Collection, Iterable

import pytest


def fast_only(values: Iterable[Any], keep: Collection[Any], ids=None) -> list:
    """``values`` for ``pytest.mark.parametrize``: those in ``keep`` run in the fast tier, the
    rest are marked ``slow`` (a case of several parameters is slow when any of its values is)."""
    out = []
    for v in values:
        marks = () if v in keep else (pytest.mark.slow,)
        out.append(pytest.param(v, marks=marks, id=ids(v) if callable(ids) else None))
    return out
