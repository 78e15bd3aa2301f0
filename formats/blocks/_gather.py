"""The numba twin of a bit plan's field gather (:meth:`._bits.BlockPlan.to_fields`' numpy loop
is its reference), in its own module: ``_bits`` imports it only once a process runs kernels,
and it needs nothing of the codec machinery (``_codec`` reads ``_bits``' tables)."""

from __future__ import annotations

import numba
import numpy as np

from .._jit import lazy_njit, readonly


@lazy_njit(numba.void(readonly("u1", 2), readonly("i8", 2), readonly("u4", 2), readonly("u4", 2), readonly("u4", 2),
                      numba.uint32[:, ::1]), cache=True)
def gather_field(b2, byte, shift, mask, dst, out):
    """A bit plan's gather of one field (``_bits.BlockPlan.to_fields``' numpy loop is the
    reference): ``out[blk, i] = OR_j ((b2[blk, byte[i, j]] >> shift[i, j]) & mask[i, j]) << dst[i, j]``
    over the parts j of element i (padding parts have mask 0)."""
    count, parts = byte.shape
    for blk in range(b2.shape[0]):
        row = b2[blk]
        for i in range(count):
            v = np.uint32(0)
            for j in range(parts):
                v |= ((np.uint32(row[byte[i, j]]) >> shift[i, j]) & mask[i, j]) << dst[i, j]
            out[blk, i] = v
