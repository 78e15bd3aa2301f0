"""Q5_1: 32 weights in 24 bytes, value = q * d + m, q = low4 | bit4 << 4.

    byte  0      2      4              8             24
          +------+------+--------------+-------------+
          | d f16| m f16| qh u32 (LE)  | qs[16]      |
          +------+------+--------------+-------------+
"""

from __future__ import annotations

from ..types import Q5_1 as QTYPE
from ._bits import BlockPlan, Field, f16_word, nibble_codes, qh_bit

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(0),)),
    Field("m", "u2", (f16_word(2),)),
    Field("codes", "u1", tuple(lo + (qh_bit(4, e),) for e, lo in enumerate(nibble_codes(8)))),
])


def to_fields(blocks, n: int, k: int):
    return PLAN.to_fields(blocks, n, k)


def from_fields(fields, n: int, k: int):
    return PLAN.from_fields(fields, n, k)
