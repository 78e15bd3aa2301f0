"""Q4_1: 32 weights in 20 bytes, value = u * d + m.

    byte  0      2      4                            20
          +------+------+----------------------------+
          | d f16| m f16| qs[16]  (nibbles as Q4_0)  |
          +------+------+----------------------------+

Dequantize (gguf-py ``Q4_1.dequantize_blocks``, ggml ``dequantize_row_q4_1``), in f32:
``y = f32(d) * f32(u) + f32(m)`` (two roundings, never fused).
When both ``d*u`` and ``m`` are NaN the result is ``d*u``'s NaN (x86's rule for the first
operand, as ggml and gguf-py compute it; see ``f32.add_first_nan``).
"""

from __future__ import annotations

import numba
import numpy as np

from ..qtypes import Q4_1 as QTYPE
from ._bits import BlockPlan, Field, f16_word, nibble_codes
from ._codec import declare
from .f16 import f16_to_f32
from .f32 import add_first_nan
from .._jit import RO_U8, lazy_njit

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(0),)),
    Field("m", "u2", (f16_word(2),)),
    Field("codes", "u1", nibble_codes(4)),
])


# ---- dequantize ----------------------------------------------------------------------------
@lazy_njit(numba.void(RO_U8, numba.float32[::1], numba.int64, numba.int64, numba.int64), cache=True, error_model="numpy")
def _dequantize_range(b, y, b0, b1, qk):
    half = qk >> 1  # 16; a run-time trip count, so LLVM vectorizes the loops below
    for i in range(b0, b1):
        blk = b[i * 20:i * 20 + 20]
        yb = y[i * 32:i * 32 + 32]
        d = f16_to_f32(np.int64(blk[0]) | (np.int64(blk[1]) << 8))
        m = f16_to_f32(np.int64(blk[2]) | (np.int64(blk[3]) << 8))
        for j in range(half):
            yb[j] = add_first_nan(d * np.float32(np.int32(blk[4 + j] & 15)), m)
        for j in range(half):
            yb[half + j] = add_first_nan(d * np.float32(np.int32(blk[4 + j] >> 4)), m)


def _decode_ref(f):
    """numpy: the f32 values from the bit fields (for ``dequantize_ref``)."""
    d = f["d"].view("<f2").astype(np.float32).repeat(32, axis=1)
    m = f["m"].view("<f2").astype(np.float32).repeat(32, axis=1)
    return d * f["codes"].astype(np.float32) + m


declare(globals(), QTYPE, PLAN, dequantize_range=_dequantize_range, decode_ref=_decode_ref)
