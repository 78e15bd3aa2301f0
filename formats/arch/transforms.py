"""What llama.cpp's ``convert_hf_to_gguf.py`` does to tensors on the way to GGUF, and back.

The names are :data:`~.spec.GGUF_TRANSFORMS`; an architecture row says which roles get which
(``Arch.gguf_transforms``). Each transform here has its inverse, so a GGUF can be read back in
HF terms (the cactus target from a GGUF source) and an HF checkpoint written as llama.cpp
writes it.

q/k permutation (``LlamaModel.permute``): each head's rows ``[2][d/2]`` (halves) are stored
``[d/2][2]`` (pairs), so GGUF ``llama`` rotates adjacent pairs where HF rotates halves::

    HF head rows    0 1 2 3 | 4 5 6 7        (d = 8: rotated pairs (0,4) (1,5) (2,6) (3,7))
    GGUF head rows  0 4 1 5   2 6 3 7        (rotated pairs (0,1) (2,3) ...)
"""

from __future__ import annotations

import numpy as np


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF -> GGUF: llama.cpp's q/k row permutation over ``n_head`` heads (rows or a bias)."""
    n = w.shape[0]
    return np.ascontiguousarray(w.reshape(n_head, 2, n // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF -> HF: the inverse of :func:`permute_rows`."""
    n = w.shape[0]
    return np.ascontiguousarray(w.reshape(n_head, n // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def squeeze_1(w: np.ndarray) -> np.ndarray:
    """HF -> GGUF: LFM2's convolution kernel ``[d, 1, L]`` stored ``[d, L]``."""
    return np.ascontiguousarray(w.reshape(w.shape[0], w.shape[-1]))


def unsqueeze_1(w: np.ndarray) -> np.ndarray:
    """GGUF -> HF: the inverse of :func:`squeeze_1`."""
    return np.ascontiguousarray(w.reshape(w.shape[0], 1, w.shape[-1]))


def plus_one(w: np.ndarray) -> np.ndarray:
    """HF -> GGUF: Gemma's norm weights ``w`` stored as ``1 + w``."""
    return w + np.asarray(1, w.dtype)


def minus_one(w: np.ndarray) -> np.ndarray:
    """GGUF -> HF: the inverse of :func:`plus_one` (exact for the f32 values it produced when
    ``|w| < 1``; a GGUF's stored ``1 + w`` is the value the runtime multiplies by)."""
    return w - np.asarray(1, w.dtype)
