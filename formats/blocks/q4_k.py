"""Q4_K: 256 weights in 144 bytes; 8 sub-blocks of 32, value = d*sc[s]*q - dmin*m[s].

    byte  0      2        4              16                                   144
          +------+--------+--------------+-------------------------------------+
          | d f16|dmin f16| scales[12]   | qs[128]                             |
          +------+--------+--------------+-------------------------------------+
    scales: 6-bit sc[8], m[8] packed as drawn in _bits.k_scale_parts.
    element e: chunk c = e // 64, t = e % 64 -> qs[32c + t % 32], low nibble if t < 32 else high
               (sub-block s = e // 32 uses nibble s % 2 of qs[32 (s // 2) .. +32])
"""

from __future__ import annotations

from ..types import Q4_K as QTYPE
from ._bits import BlockPlan, Field, f16_word, k_scale_parts

_SC, _M = k_scale_parts(4)

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(0),)),
    Field("dmin", "u2", (f16_word(2),)),
    Field("sc", "u1", _SC),
    Field("m", "u1", _M),
    Field("codes", "u1", tuple(((16 + 32 * (e // 64) + e % 32, 4 * ((e % 64) // 32), 4, 0),)
                               for e in range(256))),
])


def to_fields(blocks, n: int, k: int):
    return PLAN.to_fields(blocks, n, k)


def from_fields(fields, n: int, k: int):
    return PLAN.from_fields(fields, n, k)
