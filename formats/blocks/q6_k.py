"""Q6_K: 256 weights in 210 bytes; 16 groups of 16, value = d*scale[g]*(q - 32), q in 0..63.

    byte  0                    128          192            208     210
          +--------------------+------------+--------------+-------+
          | ql[128]            | qh[64]     | scales i8[16]| d f16 |   (d is last)
          +--------------------+------------+--------------+-------+
    element e, h = e // 128, t = e % 128, g = t // 32, l = t % 32:
      low 4 bits  = nibble (g // 2) of ql[64h + 32 (g % 2) + l]
      high 2 bits = (qh[32h + l] >> 2g) & 3
      scale       = scales[e // 16]
"""

from __future__ import annotations

from ..types import Q6_K as QTYPE
from ._bits import BlockPlan, Field, f16_word, whole_byte


def _code(e: int) -> tuple:
    h, t = divmod(e, 128)
    g, l = divmod(t, 32)
    return ((64 * h + 32 * (g % 2) + l, 4 * (g // 2), 4, 0), (128 + 32 * h + l, 2 * g, 2, 4))


PLAN = BlockPlan(QTYPE, [
    Field("codes", "u1", tuple(_code(e) for e in range(256))),
    Field("scale", "i1", tuple(whole_byte(192 + i) for i in range(16))),
    Field("d", "u2", (f16_word(208),)),
])


def to_fields(blocks, n: int, k: int):
    return PLAN.to_fields(blocks, n, k)


def from_fields(fields, n: int, k: int):
    return PLAN.from_fields(fields, n, k)
