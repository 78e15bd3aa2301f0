"""Q4_1: 32 weights in 20 bytes, value = u * d + m.

    byte  0      2      4                            20
          +------+------+----------------------------+
          | d f16| m f16| qs[16]  (nibbles as Q4_0)  |
          +------+------+----------------------------+
"""

from __future__ import annotations

from ..types import Q4_1 as QTYPE
from ._bits import BlockPlan, Field, f16_word, nibble_codes

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(0),)),
    Field("m", "u2", (f16_word(2),)),
    Field("codes", "u1", nibble_codes(4)),
])


def to_fields(blocks, n: int, k: int):
    return PLAN.to_fields(blocks, n, k)


def from_fields(fields, n: int, k: int):
    return PLAN.from_fields(fields, n, k)
