"""The reference runtime: decoder models run from a bundle's own bytes and kernels.

:class:`Model` (``model.py``) runs every architecture of the table in
:mod:`panelpack.formats.arch` (llama, mistral, qwen2, qwen3, gemma3, smollm3, phi3, granite)
with every matrix product on a chosen kernel path (``weights.py``); ``evaluate.py`` compares
two runs (perplexity, KL, top-1 agreement, max |Δlogit|, bit-identity).
"""

from .model import Model
from .weights import KERNEL_PATHS

__all__ = ["Model", "KERNEL_PATHS"]
