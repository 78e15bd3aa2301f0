"""Q5_0: 32 weights in 22 bytes, value = (q - 16) * d, q = low4 | bit4 << 4.

    byte  0      2              6                    22
          +------+--------------+--------------------+
          | d f16| qh u32 (LE)  | qs[16]             |
          +------+--------------+--------------------+
    low4(e) = nibbles of qs as Q4_0;   bit4(e) = (qh >> e) & 1
"""

from __future__ import annotations

from ..types import Q5_0 as QTYPE
from ._bits import BlockPlan, Field, f16_word, nibble_codes, qh_bit

PLAN = BlockPlan(QTYPE, [
    Field("d", "u2", (f16_word(0),)),
    Field("codes", "u1", tuple(lo + (qh_bit(2, e),) for e, lo in enumerate(nibble_codes(6)))),
])


def to_fields(blocks, n: int, k: int):
    return PLAN.to_fields(blocks, n, k)


def from_fields(fields, n: int, k: int):
    return PLAN.from_fields(fields, n, k)
