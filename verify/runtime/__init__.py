"""The reference runtime: decoder models run from a bundle's own bytes and kernels.

:class:`Model` (``model.py``) runs every architecture of the table in
:mod:`panelpack.formats.arch` (llama, mistral, qwen2, qwen3, gemma3, smollm3, phi3, granite)
with every matrix product on a chosen kernel path (``weights.py``); ``evaluate.py`` compares
two runs (perplexity, KL, top-1 agreement, max |Δlogit|, bit-identity).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Model
    from .weights import KERNEL_PATHS

__all__ = ["Model", "KERNEL_PATHS"]


def __getattr__(name: str) -> Any:
    # imported on first use: the runtime's modules import numba, and the CLI reads its kernel
    # paths and references (cli_choices) when it renders a command's help
    if name == "Model":
        from .model import Model

        return Model
    if name == "KERNEL_PATHS":
        from .weights import KERNEL_PATHS

        return KERNEL_PATHS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
