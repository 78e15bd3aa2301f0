"""Q5_K: 256 weights in 176 bytes; 8 sub-blocks of 32, value = d*sc[s]*q - dmin*m[s], q in 0..31.

    byte  0      2        4            16            48                         176
          +------+--------+------------+-------------+---------------------------+
          | d f16|dmin f16| scales[12] | qh[32]      | qs[128]                   |
          +------+--------+------------+-------------+---------------------------+
    element e, s = e // 32, l = e % 32:
      low 4 bits = nibble (s % 2) of qs[32 (s // 2) + l]     bit 4 = (qh[l] >> s) & 1
"""

from __future__ import annotations

from ..types import Q5_K as QTYPE
from ._bits import BlockPlan, Field, f16_word, k_scale_parts

_SC, _M = k_scale_parts(4)

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(0),)),
    Field("dmin", "u2", (f16_word(2),)),
    Field("sc", "u1", _SC),
    Field("m", "u1", _M),
    Field("codes", "u1", tuple(((48 + 32 * (e // 64) + e % 32, 4 * ((e // 32) % 2), 4, 0),
                                (16 + e % 32, e // 32, 1, 4)) for e in range(256))),
])


def to_fields(blocks, n: int, k: int):
    return PLAN.to_fields(blocks, n, k)


def from_fields(fields, n: int, k: int):
    return PLAN.from_fields(fields, n, k)
