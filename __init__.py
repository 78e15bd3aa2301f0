"""panelpack: offline conversion and weight repacking of quantized LLM checkpoints.

The front door for pipelines (each name is loaded on first use, so ``import panelpack`` stays
cheap: no numpy-heavy module and no numba until a function runs)::

    import panelpack
    plan = panelpack.plan("model.gguf", layout="panel64")          # metadata only
    result = panelpack.convert("model.gguf", "model.ppk")          # -> ConvertResult
    results = panelpack.convert_many("model.gguf", [               # one read, several bundles
        panelpack.Target("a.ppk", layout="panel64"), panelpack.Target("b.ppk", layout="ggml-x8")])
    report = panelpack.verify("model.ppk", level="all")            # -> Report (report.ok)
    panelpack.batch("catalog.toml")                                # -> BatchResult (executor="ray")
    panelpack.export("model.ppk", "back.gguf")                     # -> ExportResult
    with panelpack.open_checkpoint("model-hf/") as ckpt: ...       # GGUF, safetensors, HF folder
    bundle = panelpack.open_bundle("model.ppk")                    # typed manifest, mapped regions
    panelpack.layouts()                                            # the layout registry, described
    panelpack.pack("model.ppk", "model.ppk.tar.zst")               # checked, then archived (unpack too)
    panelpack.sign("model.ppk", key="key.pem")                     # model.sig (pip install 'panelpack[sign]')

Every result object renders itself (``.render()`` for people, ``.to_json()`` for programs).

Subpackages: ``panelpack.formats`` (type registry, codecs, GGUF/safetensors/bundle files),
``panelpack.repack`` (layouts), ``panelpack.verify`` (reference runtime and agreement checks),
``panelpack.convert`` (the pipeline). ``panelpack.convert`` and ``panelpack.verify`` are both
the subpackage and the function: calling the package runs its main function.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: module -> the front-door names it provides, each the module's attribute of that name
_FROM: dict[str, tuple[str, ...]] = {
    "panelpack.convert": ("convert_many", "Target", "plan", "export"),
    "panelpack.convert.batch": ("batch",),
    "panelpack.formats.checkpoint": ("open_checkpoint",),
    "panelpack.formats.bundle": ("open_bundle",),
    # shipping, after verify's structure level (verify/gate.py)
    "panelpack.verify.gate": ("pack", "unpack", "sign"),
}

#: front-door name -> (module, attribute; None: the module itself, which is callable): the two
#: callable subpackages, the layout registry's description, and every name of ``_FROM``
_FRONT: dict[str, tuple[str, str | None]] = {
    "convert": ("panelpack.convert", None),
    "verify": ("panelpack.verify", None),
    "layouts": ("panelpack.repack", "describe"),
    **{name: (module, name) for module, names in _FROM.items() for name in names},
}

__all__ = ["__version__", *_FRONT]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _FRONT[name]
    except KeyError:
        raise AttributeError(f"module 'panelpack' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    return mod if attr is None else getattr(mod, attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FRONT))
