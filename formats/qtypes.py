"""The one registry of tensor element types (ggml type ids, block sizes, bytes, codecs).

Every reader, writer, codec, layout, kernel and command reads these tables; nothing else in
panelpack spells a type id or a block size. Sizes follow ggml (``ggml.h``/``ggml-common.h``)
and gguf-py's ``GGML_QUANT_SIZES``; entries are written as the sum of their fields.

A type whose ``codec`` is set has a module ``panelpack.formats.blocks.<codec>`` with the
codec surface (see ``formats/blocks/__init__.py``). Types without a codec are still known
(so a GGUF holding them can be listed and sized) but cannot be decoded.

``group`` / ``code_offset`` / ``scheme`` describe the integer form used by the standard
dispatch (docs/FORMAT.md §3): a weight is ``c = code - code_offset`` times a per-``group`` scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .errors import UnsupportedError

QK = 32  # elements in a "small" block
QK_K = 256  # elements in a K-quant super-block


@dataclass(frozen=True)
class GGMLType:
    id: int
    name: str  # ggml's spelling, upper case: "Q4_K", "BF16"
    block_size: int  # elements per block
    type_size: int  # bytes per block
    codec: Optional[str] = None  # module name under panelpack.formats.blocks, None: size only
    numpy_dtype: Optional[str] = None  # for plain element types: the numpy dtype of one element
    can_quantize: bool = False  # the codec can quantize f32 into this type
    group: Optional[int] = None  # K elements per scale group in the standard dispatch (docs/FORMAT.md §3)
    code_bits: Optional[int] = None  # bits of the integer code
    code_offset: int = 0  # c = code - code_offset  (Q4_0: 8, Q5_0: 16, Q6_K: 32, Q3_K: 4)
    scheme: Optional[str] = None  # rescale family: "scale", "scale_min", "k_scale_min", "k_scale"
    scale_field: Optional[str] = None  # "k_scale": the codec field of the per-group scale (Q6_K "scale", Q3_K "sc")
    scale_offset: int = 0  # "k_scale": the group scale is that field minus this (Q3_K: sc - 32)

    @property
    def quantized(self) -> bool:
        return self.block_size > 1

    @property
    def lower(self) -> str:
        return self.name.lower()

    @property
    def scale_fields(self) -> tuple[tuple[str, str, str], ...]:
        """The codec fields that scale this type's integer codes, ``(name, dtype, per)`` with
        ``per`` "group" (one value a scale group) or "super" (one a 256-element super-block),
        group fields first, each in the codec plan's order: what a layout that keeps the scales
        apart from the codes stores (``repack/panel64.py``). Read off :data:`SCHEME_FIELDS`;
        ``tests/test_panel64.py`` checks it against every codec's ``PLAN``."""
        if self.scheme is None:
            return ()
        if self.scheme == "k_scale":  # the one group field the registry names (Q6_K "scale", Q3_K "sc")
            dtype = "int8" if self.scale_offset == 0 else "uint8"  # stored signed, or with an offset
            return ((self.scale_field or "scale", dtype, "group"), ("d", "uint16", "super"))
        return SCHEME_FIELDS[self.scheme]

    def nbytes(self, n_elements: int) -> int:
        """Bytes taken by ``n_elements`` values (must be a whole number of blocks)."""
        if n_elements % self.block_size:
            raise UnsupportedError(
                f"{n_elements} elements is not a whole number of {self.name} blocks of {self.block_size}"
            )
        return n_elements // self.block_size * self.type_size

    def row_bytes(self, k: int) -> int:
        return self.nbytes(k)

    @property
    def codec_module(self):
        """The codec module (imported on first use), or raise UnsupportedError."""
        if self.codec is None:
            raise UnsupportedError(f"type {self.name} (id {self.id}) has no codec in panelpack")
        import importlib

        return importlib.import_module(f"panelpack.formats.blocks.{self.codec}")

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.name


#: The scale fields of each rescale family (see :attr:`GGMLType.scale_fields`; "k_scale" names its
#: group field in the type's row).
SCHEME_FIELDS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "scale": (("d", "uint16", "group"),),
    "scale_min": (("d", "uint16", "group"), ("m", "uint16", "group")),
    "k_scale_min": (("sc", "uint8", "group"), ("m", "uint8", "group"), ("d", "uint16", "super"),
                    ("dmin", "uint16", "super")),
}


def _t(id, name, block_size, type_size, **kw) -> GGMLType:
    return GGMLType(id, name, block_size, type_size, **kw)


# fmt: off
#                 id  name      block   bytes                          codec / integer form
TYPES: tuple[GGMLType, ...] = (
    _t(0,  "F32",     1,     4,                              codec="f32",  numpy_dtype="<f4"),
    _t(1,  "F16",     1,     2,                              codec="f16",  numpy_dtype="<f2"),
    _t(2,  "Q4_0",    QK,    2 + QK // 2,                    codec="q4_0", can_quantize=True,
       group=32, code_bits=4, code_offset=8, scheme="scale"),
    _t(3,  "Q4_1",    QK,    2 + 2 + QK // 2,                codec="q4_1", can_quantize=True,
       group=32, code_bits=4, code_offset=0, scheme="scale_min"),
    _t(6,  "Q5_0",    QK,    2 + 4 + QK // 2,                codec="q5_0", can_quantize=True,
       group=32, code_bits=5, code_offset=16, scheme="scale"),
    _t(7,  "Q5_1",    QK,    2 + 2 + 4 + QK // 2,            codec="q5_1", can_quantize=True,
       group=32, code_bits=5, code_offset=0, scheme="scale_min"),
    _t(8,  "Q8_0",    QK,    2 + QK,                         codec="q8_0", can_quantize=True,
       group=32, code_bits=8, code_offset=0, scheme="scale"),
    _t(9,  "Q8_1",    QK,    2 + 2 + QK),  # ggml block_q8_1: half d, half s, 32 x int8
    _t(10, "Q2_K",    QK_K,  QK_K // 16 + QK_K // 4 + 2 + 2,  codec="q2_k", can_quantize=True,
       group=16, code_bits=2, code_offset=0, scheme="k_scale_min"),
    _t(11, "Q3_K",    QK_K,  QK_K // 8 + QK_K // 4 + 12 + 2,  codec="q3_k", can_quantize=True,
       group=16, code_bits=3, code_offset=4, scheme="k_scale", scale_field="sc", scale_offset=32),
    _t(12, "Q4_K",    QK_K,  2 + 2 + 12 + QK_K // 2,         codec="q4_k", can_quantize=True,
       group=32, code_bits=4, code_offset=0, scheme="k_scale_min"),
    _t(13, "Q5_K",    QK_K,  2 + 2 + 12 + QK_K // 8 + QK_K // 2, codec="q5_k", can_quantize=True,
       group=32, code_bits=5, code_offset=0, scheme="k_scale_min"),
    _t(14, "Q6_K",    QK_K,  QK_K // 2 + QK_K // 4 + QK_K // 16 + 2, codec="q6_k", can_quantize=True,
       group=16, code_bits=6, code_offset=32, scheme="k_scale", scale_field="scale"),
    _t(15, "Q8_K",    QK_K,  4 + QK_K + QK_K // 16 * 2),
    _t(16, "IQ2_XXS", QK_K,  2 + QK_K // 8 * 2),
    _t(17, "IQ2_XS",  QK_K,  2 + QK_K // 8 * 2 + QK_K // 32),
    _t(18, "IQ3_XXS", QK_K,  2 + QK_K // 4 + QK_K // 8),
    _t(19, "IQ1_S",   QK_K,  2 + QK_K // 8 + QK_K // 16),
    _t(20, "IQ4_NL",  QK,    2 + QK // 2),
    _t(21, "IQ3_S",   QK_K,  2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    _t(22, "IQ2_S",   QK_K,  2 + QK_K // 4 + QK_K // 16),
    _t(23, "IQ4_XS",  QK_K,  2 + 2 + QK_K // 2 + QK_K // 64),
    _t(24, "I8",      1,     1,                              numpy_dtype="<i1"),
    _t(25, "I16",     1,     2,                              numpy_dtype="<i2"),
    _t(26, "I32",     1,     4,                              numpy_dtype="<i4"),
    _t(27, "I64",     1,     8,                              numpy_dtype="<i8"),
    _t(28, "F64",     1,     8,                              numpy_dtype="<f8"),
    _t(29, "IQ1_M",   QK_K,  QK_K // 8 + QK_K // 16 + QK_K // 32),
    _t(30, "BF16",    1,     2,                              codec="bf16", numpy_dtype="<u2"),
    _t(34, "TQ1_0",   QK_K,  2 + 4 * 13),
    _t(35, "TQ2_0",   QK_K,  2 + 64),
    _t(39, "MXFP4",   QK,    1 + QK // 2),
    _t(40, "NVFP4",   64,    4 + 64 // 2),
    _t(41, "Q1_0",    128,   2 + 128 // 8),
    _t(42, "Q2_0",    64,    2 + 64 // 4),
)
# fmt: on

BY_ID: dict[int, GGMLType] = {t.id: t for t in TYPES}
BY_NAME: dict[str, GGMLType] = {t.name: t for t in TYPES}
assert len(BY_ID) == len(TYPES) and len(BY_NAME) == len(TYPES), "duplicate type in TYPES"

# Ids 4-5 were Q4_2/Q4_3 (deprecated long ago); 31-33 and 36-38 were the pre-interleaved
# Q4_0_x_x/IQ4_NL_x_x file types, removed from GGUF in favour of load-time repacking. Readers
# report them by name; panelpack never writes them.
REMOVED_IDS: dict[int, str] = {4: "Q4_2", 5: "Q4_3", 31: "Q4_0_4_4", 32: "Q4_0_4_8", 33: "Q4_0_8_8",
                               36: "IQ4_NL_4_4", 37: "IQ4_NL_4_8", 38: "IQ4_NL_8_8"}

#: The types the codecs and layouts name directly.
F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = (BY_NAME[n] for n in (
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"))

#: Types panelpack can decode (every codec), and those it can quantize into.
DECODABLE = tuple(t for t in TYPES if t.codec)
QUANTIZABLE = tuple(t for t in TYPES if t.can_quantize)
#: Quantized types with an integer form (the standard dispatch of docs/FORMAT.md §3 applies).
INTEGER_FORM = tuple(t for t in TYPES if t.scheme)


def get(t: "GGMLType | int | str") -> GGMLType:
    """Look a type up by GGMLType, id or name (any case: ``q4_k``, ``Q4_K``, ``12``)."""
    if isinstance(t, GGMLType):
        return t
    if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
        found = BY_ID.get(int(t))
        if found is None:
            if int(t) in REMOVED_IDS:
                raise UnsupportedError(
                    f"type id {int(t)} ({REMOVED_IDS[int(t)]}) is a removed GGUF type"
                )
            raise UnsupportedError(f"unknown ggml type id {int(t)}")
        return found
    if isinstance(t, str):
        s = t.strip()
        if s.isdigit():
            return get(int(s))
        found = BY_NAME.get(s.upper())
        if found is None:
            known = ", ".join(x.lower for x in DECODABLE)
            raise UnsupportedError(f"unknown type {t!r} (known: {known})")
        return found
    # enum-like objects (gguf.GGMLQuantizationType) carry .value / .name
    value = getattr(t, "value", None)
    if isinstance(value, int):
        return get(value)
    raise UnsupportedError(f"cannot interpret {t!r} as a tensor type")
