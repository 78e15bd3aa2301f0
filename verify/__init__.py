"""The reference runtime: standard dispatch, SME2/NEON emulation, kernels, agreement checks.

``panelpack.verify(path, level=...)`` (calling this package) runs
:func:`panelpack.verify.bundle_check.verify` and returns its ``Report``; the modules below are
imported on first use, so importing the package loads no kernel.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _VerifyPackage(types.ModuleType):
    """The subpackage and the front-door function share the name ``panelpack.verify``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .bundle_check import verify

        return verify(*args, **kwargs)


sys.modules[__name__].__class__ = _VerifyPackage
