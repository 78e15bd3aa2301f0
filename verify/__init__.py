"""The reference runtime: standard dispatch, SME2/NEON emulation, kernels, agreement checks,
and the model runtime (``verify/runtime``).

``panelpack.verify(path, level=...)`` (calling this package) runs
:func:`panelpack.verify.bundle_check.verify` and returns its ``Report``. ``eval``, ``generate``
and ``Model`` run whole models from a bundle. The modules below are imported on first use, so
importing the package loads no kernel.
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


def eval(bundle, **options):  # noqa: A001 - the API name the runtime is asked for
    """Run a text through ``bundle`` and compare it with a reference run
    (:func:`panelpack.verify.runtime.evaluate.evaluate`; returns an ``EvalReport``)."""
    from .runtime.evaluate import evaluate

    return evaluate(bundle, **options)


def generate(bundle, prompt, n: int = 32, temp: float = 0.0, seed: int = 0, kernels: str = "compiled") -> str:
    """Continue ``prompt`` (text) with ``bundle``'s own kernels; the new text."""
    from .runtime import Model

    m = Model.open(bundle, kernels)
    try:
        return m.tokenizer.decode(list(m.generate(prompt, n, temp=temp, seed=seed)))
    finally:
        m.close()


def __getattr__(name: str) -> Any:
    if name == "Model":
        from .runtime import Model

        return Model
    raise AttributeError(f"module 'panelpack.verify' has no attribute {name!r}")
