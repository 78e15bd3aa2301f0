"""The reference runtime: decoder models run from a bundle's own bytes and kernels.

:class:`Model` (``model.py``) runs ``llama``, ``qwen2`` and ``gemma3`` (``arch.py``) with every
matrix product on a chosen kernel path (``weights.py``); ``evaluate.py`` compares two runs
(perplexity, KL, top-1 agreement, max |Δlogit|, bit-identity).
"""

from .model import Model
from .weights import KERNEL_PATHS

__all__ = ["Model", "KERNEL_PATHS"]
