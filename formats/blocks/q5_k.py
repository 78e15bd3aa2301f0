"""Q5_K: 256 weights in 176 bytes; 8 sub-blocks of 32, value = d*sc[s]*q - dmin*m[s], q in 0..31.

    byte  0      2        4            16            48                         176
          +------+--------+------------+-------------+---------------------------+
          | d f16|dmin f16| scales[12] | qh[32]      | qs[128]                   |
          +------+--------+------------+-------------+---------------------------+
    element e, s = e // 32, l = e % 32:
      low 4 bits = nibble (s % 2) of qs[32 (s // 2) + l]     bit 4 = (qh[l] >> s) & 1

Dequantize (gguf-py ``Q5_K.dequantize_blocks``, ggml ``dequantize_row_q5_K``), in f32:
``y = (f32(d) * f32(sc[s])) * f32(q) - (f32(dmin) * f32(m[s]))``.
"""

from __future__ import annotations

import numba
import numpy as np

from ..qtypes import Q5_K as QTYPE
from ._bits import BlockPlan, Field, f16_word, k_scale_parts
from ._codec import CHUNK_BLOCKS, declare, k_scale_min
from .f16 import f16_to_f32
from .._jit import RO_U8, lazy_njit

_SC, _M = k_scale_parts(4)

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(0),)),
    Field("dmin", "u2", (f16_word(2),)),
    Field("sc", "u1", _SC),
    Field("m", "u1", _M),
    Field("codes", "u1", tuple(((48 + 32 * (e // 64) + e % 32, 4 * ((e // 32) % 2), 4, 0),
                                (16 + e % 32, e // 32, 1, 4)) for e in range(256))),
])


# ---- dequantize ----------------------------------------------------------------------------
@lazy_njit(numba.void(RO_U8, numba.float32[::1], numba.int64, numba.int64, numba.int64), cache=True, error_model="numpy")
def _dequantize_range(b, y, b0, b1, qk):
    sub = qk >> 3  # 32; a run-time trip count, so LLVM vectorizes the loops below
    for i in range(b0, b1):
        blk = b[i * 176:i * 176 + 176]
        yb = y[i * 256:i * 256 + 256]
        d = f16_to_f32(np.int64(blk[0]) | (np.int64(blk[1]) << 8))
        dmin = f16_to_f32(np.int64(blk[2]) | (np.int64(blk[3]) << 8))
        for s in range(8):
            sc, m = k_scale_min(blk, s)
            ds = d * np.float32(sc)
            ms = dmin * np.float32(m)
            ql = blk[48 + 32 * (s >> 1):48 + 32 * (s >> 1) + 32]
            qh = blk[16:48]
            ys = yb[32 * s:32 * s + 32]
            sh = 4 * (s & 1)
            for j in range(sub):
                q = ((np.int32(ql[j]) >> sh) & 15) | (((np.int32(qh[j]) >> s) & 1) << 4)
                ys[j] = ds * np.float32(q) - ms


def _decode_ref(f):
    """numpy: the f32 values from the bit fields (for ``dequantize_ref``)."""
    d = f["d"].view("<f2").astype(np.float32).repeat(8, axis=1)
    dmin = f["dmin"].view("<f2").astype(np.float32).repeat(8, axis=1)
    ds = (d * f["sc"].astype(np.float32)).repeat(32, axis=1)
    ms = (dmin * f["m"].astype(np.float32)).repeat(32, axis=1)
    return ds * f["codes"].astype(np.float32) - ms


declare(globals(), QTYPE, PLAN, dequantize_range=_dequantize_range, chunk=CHUNK_BLOCKS // 8,
        decode_ref=_decode_ref)
