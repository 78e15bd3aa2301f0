"""Q8_0: 32 weights in 34 bytes, value = q * d.

    byte  0      2                                   34
          +------+-----------------------------------+
          | d f16| qs int8[32]                       |
          +------+-----------------------------------+
"""

from __future__ import annotations

from ..types import Q8_0 as QTYPE
from ._bits import BlockPlan, Field, f16_word, whole_byte

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(0),)),
    Field("codes", "i1", tuple(whole_byte(2 + e) for e in range(32))),
])


def to_fields(blocks, n: int, k: int):
    return PLAN.to_fields(blocks, n, k)


def from_fields(fields, n: int, k: int):
    return PLAN.from_fields(fields, n, k)
