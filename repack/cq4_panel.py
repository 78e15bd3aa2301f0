"""CQ4 panels: ``panel64``'s nibble geometry with cactus's group G = 128 (docs/FORMAT.md §4.2), the data
region of cactus's ``*.cq4p.weights`` files.

Input: codebook indices (already mapped to their panel nibbles, see
``formats.cactus.panel_nibbles``) ``u8 [N, Kp]``, Kp a multiple of G. Output: ``SB = ceil(N/64)``
super-blocks of 64 channels, each ``[ng = Kp/G][G/4 kg-blocks][128 B]``::

    kg-block (4 consecutive K x 64 channels) = 128 bytes; channel c owns bytes 2c, 2c+1:
        byte 2c   = idx[n][k0]   | idx[n][k0+1] << 4
        byte 2c+1 = idx[n][k0+2] | idx[n][k0+3] << 4          (n = 64*sb + c, k0 = 4*q)
    byte offset of weight (n, k) = (((n//64)*ng + k//G)*(G/4) + (k%G)//4)*128 + 2*(n%64) + (k%4)//2
    nibble shift = 4*(k%2)

Channels ``n >= N`` are padding: index 0 here, and norm 0 in the folded norms
(``formats.cactus.folded_norm_blob``), so they contribute exactly 0. ``unpack(pack(x)) == x``.
"""

from __future__ import annotations

import numpy as np

from ..formats.errors import BadInputError

NAME = "cq4-panel"
GROUP = 128
CHANNELS = 64


def _check(n: int, kp: int) -> None:
    if n <= 0 or kp <= 0 or kp % GROUP:
        raise BadInputError(f"CQ4 panels need N > 0 and K a multiple of {GROUP}, got {n} x {kp}")


def nbytes(n: int, kp: int) -> int:
    _check(n, kp)
    return -(-n // CHANNELS) * CHANNELS * kp // 2


def pack(indices: np.ndarray) -> np.ndarray:
    """u8 ``[N, Kp]`` nibbles (0..15) -> the flat panel bytes."""
    idx = np.ascontiguousarray(indices, dtype=np.uint8)
    n, kp = idx.shape
    _check(n, kp)
    sb = -(-n // CHANNELS)
    full = np.zeros((sb * CHANNELS, kp), dtype=np.uint8)
    full[:n] = idx & 0xF
    v = full.reshape(sb, CHANNELS, kp // 4, 2, 2)               # [sb][c][q][pair][lo/hi]
    by = v[..., 0] | (v[..., 1] << 4)                           # [sb][c][q][pair]
    return np.ascontiguousarray(by.transpose(0, 2, 1, 3)).reshape(-1)  # [sb][q][c][pair]


def unpack(panels: np.ndarray, n: int, kp: int) -> np.ndarray:
    """Inverse of :func:`pack`: u8 ``[N, Kp]``."""
    _check(n, kp)
    p = np.ascontiguousarray(panels, dtype=np.uint8).reshape(-1)
    if p.size != nbytes(n, kp):
        raise BadInputError(f"CQ4 panels of {n} x {kp} are {nbytes(n, kp)} bytes, got {p.size}")
    sb = -(-n // CHANNELS)
    by = p.reshape(sb, kp // 4, CHANNELS, 2).transpose(0, 2, 1, 3)  # [sb][c][q][pair]
    out = np.stack([by & 0xF, by >> 4], axis=-1).reshape(sb * CHANNELS, kp)
    return np.ascontiguousarray(out[:n])


def pack_ref(indices: np.ndarray) -> np.ndarray:
    """Scalar reference of :func:`pack` from the closed form above."""
    idx = np.asarray(indices, dtype=np.uint8)
    n, kp = idx.shape
    ng = kp // GROUP
    out = np.zeros(nbytes(n, kp), dtype=np.uint8)
    for r in range(n):
        for k in range(kp):
            b = (((r // 64) * ng + k // GROUP) * (GROUP // 4) + (k % GROUP) // 4) * 128 + 2 * (r % 64) + (k % 4) // 2
            out[b] |= (int(idx[r, k]) & 0xF) << (4 * (k % 2))
    return out
