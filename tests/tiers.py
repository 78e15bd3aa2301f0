"""The two test tiers (docs/DEVELOPING.md, "Tests"): helpers to put some cases of a parametrized
test in the slow tier and keep a cheap few in the README's fast one."""

from __future__ import annotations

import os
from typing import Any, Collection, Iterable

import pytest

#: ``PANELPACK_EXHAUSTIVE=1`` widens the slow tier's largest sweep from a sample to every case
#: (docs/DEVELOPING.md, "Tests"): CI runs the sample, a release check runs it all.
EXHAUSTIVE = os.environ.get("PANELPACK_EXHAUSTIVE", "") == "1"


def fast_only(values: Iterable[Any], keep: Collection[Any], ids=None) -> list:
    """``values`` for ``pytest.mark.parametrize``: those in ``keep`` run in the fast tier, the
    rest are marked ``slow`` (a case of several parameters is slow when any of its values is)."""
    out = []
    for v in values:
        marks = () if v in keep else (pytest.mark.slow,)
        out.append(pytest.param(v, marks=marks, id=ids(v) if callable(ids) else None))
    return out

