"""Q8_0: 32 weights in 34 bytes, value = q * d.

    byte  0      2                                   34
          +------+-----------------------------------+
          | d f16| qs int8[32]                       |
          +------+-----------------------------------+

Dequantize (gguf-py ``Q8_0.dequantize_blocks``, ggml ``dequantize_row_q8_0``):
``y = f32(q) * f32(d)``, one rounding.

Quantize (ggml ``quantize_row_q8_0_ref``; gguf-py's numpy twin is bit-exact with it on finite
input). This is also the activation quantizer of the standard dispatch (docs/FORMAT.md §3 step 1):
    amax = MAX(amax, |v|) over the block in order, MAX(a, b) = a > b ? a : b
           (so a NaN only survives as the last element; on finite input it is max |x|)
    d    = amax / 127              (f32; stored as f16(d), round to nearest even)
    id   = d != 0 ? 1/d : 0        (from the f32 d)
    q    = (int8)roundf(x * id)    (roundf: half away from zero; NaN -> 0 as x86 converts)
"""

from __future__ import annotations

import numba
import numpy as np

from .._jit import RO_F32, inline_jit, lazy_njit
from ..qtypes import Q8_0 as QTYPE
from ..qtypes import QK
from ._bits import BlockPlan, Field, byte_map, f16_word, whole_byte
from ._codec import LANES, declare, load_lanes, offset_ref
from ._kquant import store_lanes
from .f16 import f16_at, f16_bits_ref
from .f32 import cvtt_i32, cvtt_i32_ref, low_i8

#: byte offsets of the arrays drawn above, from their sizes (checked against the type table)
AT = byte_map(QTYPE, d=2, qs=QK)

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(AT.d),)),
    Field("codes", "i1", tuple(whole_byte(AT.qs + e) for e in range(QK))),
])


# ---- dequantize ----------------------------------------------------------------------------
@inline_jit
def _dequantize_block(blk, yb, qk):
    # qk (32) comes at run time, so LLVM vectorizes the inner loop instead of unrolling it
    d = f16_at(blk, 0)
    for j in range(qk):
        yb[j] = np.float32(((np.int32(blk[2 + j]) ^ 0x80) - 0x80)) * d


# ---- quantize ------------------------------------------------------------------------------
@lazy_njit(numba.void(RO_F32, numba.uint8[::1], numba.int64, numba.int64), cache=True, error_model="numpy")
def _quantize_range(x, out, b0, b1):
    """Blocks ``[b0, b1)``; ggml's per-block loop run for ``LANES`` blocks side by side."""
    xt = np.empty((32, LANES), np.float32)  # xt[e, l]: element e of block c0 + l
    amax = np.empty(LANES, np.float32)
    idv = np.empty(LANES, np.float32)
    qs = np.empty((32, LANES), np.int32)
    half = np.float32(0.5)
    for c0 in range(b0, b1, LANES):
        nl = min(LANES, b1 - c0)
        load_lanes(x, c0, nl, xt)
        for l in range(nl):
            amax[l] = np.float32(0)
        for e in range(32):  # amax = MAX(amax, fabsf(v))
            row = xt[e]
            for l in range(nl):
                a = abs(row[l])
                amax[l] = amax[l] if amax[l] > a else a
        for l in range(nl):
            d = amax[l] / np.float32(127)
            amax[l] = d  # now holds d
            idv[l] = np.float32(1) / d if d != np.float32(0) else np.float32(0)
        for e in range(32):
            row = xt[e]
            qe = qs[e]
            for l in range(nl):
                v = row[l] * idv[l]
                r = np.trunc(v)  # roundf: half away from zero
                if abs(v - r) >= half:
                    r = r + (np.float32(1) if v > np.float32(0) else np.float32(-1))
                qe[l] = np.int32(cvtt_i32(r) & 0xFF)
        store_lanes(out, c0, nl, 34, amax, qs)


def roundf_ref(v: np.ndarray) -> np.ndarray:
    """C's ``roundf`` (half away from zero), elementwise, exact in f32."""
    r = np.trunc(v)
    with np.errstate(invalid="ignore"):
        away = np.abs(v - r) >= np.float32(0.5)
    return np.where(away, r + np.where(v > 0, np.float32(1), np.float32(-1)), r).astype(np.float32)


def _encode_ref(xr: np.ndarray) -> dict[str, np.ndarray]:
    """numpy: ggml's scalar loop, vectorised over blocks, as bit fields (for ``quantize_ref``)."""
    xb = xr.reshape(-1, 32)
    amax = np.zeros(len(xb), np.float32)
    for e in range(32):
        a = np.abs(xb[:, e])
        amax = np.where(amax > a, amax, a)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        q = low_i8(cvtt_i32_ref(roundf_ref(xb * idv[:, None])))
    n, k = xr.shape
    fields = {"d": f16_bits_ref(d).reshape(n, -1), "codes": q.astype(np.int8).reshape(n, k)}
    return fields


CODEC = declare(globals(), QTYPE, PLAN, decode_ref=offset_ref(0),
        quantize_range=_quantize_range, encode_ref=_encode_ref)
to_fields, from_fields, dequantize, dequantize_ref, quantize, quantize_ref = CODEC.surface
_dequantize_range, QUANTIZE_REF_IS_NUMPY = CODEC.dequantize_range, CODEC.quantize_ref_is_numpy
