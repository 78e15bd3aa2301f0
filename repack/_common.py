"""Pieces every layout module shares: region descriptions, input checks, f16 tables, the
standard dequantization formulas and the 12-byte K-quant scale packing.

Nothing here knows a particular layout; the layout modules (``rowmajor.py``, ``panel64.py``,
...) describe their bytes next to their own code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..formats import blocks as _blocks
from ..formats import engine, qtypes
from ..formats.blocks import _bits as _kbits
from ..formats.errors import BadInputError, UnsupportedError

# ---- regions ------------------------------------------------------------------------------
#: numpy dtype names a region may have (every multi-byte value is little-endian).
DTYPES = {"uint8": "<u1", "int8": "<i1", "uint16": "<u2", "int16": "<i2", "float32": "<f4"}


@dataclass(frozen=True)
class RegionSpec:
    """One named array of a packed tensor: what a dry run needs to size and place it."""

    name: str
    dtype: str  # a key of DTYPES
    shape: tuple[int, ...]
    nbytes: int

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(DTYPES[self.dtype])

    def as_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "nbytes": self.nbytes}


def region(name: str, dtype: str, shape: tuple[int, ...]) -> RegionSpec:
    shape = tuple(int(s) for s in shape)
    return RegionSpec(name, dtype, shape, int(np.prod(shape, dtype=np.int64)) * np.dtype(DTYPES[dtype]).itemsize)


# ---- refusals (the words a ledger records) ------------------------------------------------
def shape_reason(n, k) -> str | None:
    for label, v in (("N", n), ("K", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            return f"{label}={v!r} is not an integer"
        if v < 1:
            return f"{label}={v} is not a positive size"
    return None


def type_reason(t: qtypes.GGMLType, layout: str, accepted) -> str | None:
    if t in accepted:
        return None
    names = ", ".join(x.name for x in sorted(accepted, key=lambda x: x.id))
    return f"type {t.name} is not accepted by {layout} (accepts {names})"


def k_reason(t: qtypes.GGMLType, k: int) -> str | None:
    if k % t.block_size:
        return f"K={k} is not a multiple of the {t.name} block size {t.block_size}"
    return None


def n_reason(n: int, multiple: int) -> str | None:
    if multiple > 1 and n % multiple:
        return f"N={n} is not a multiple of {multiple}"
    return None


def first_reason(*reasons: str | None) -> str | None:
    for r in reasons:
        if r:
            return r
    return None


def layout_refuse(name: str, source_types, row_multiple: int = 1):
    """The ``refuse(qtype, n, k)`` of a layout that takes ``source_types``, K in whole blocks
    and N a multiple of ``row_multiple``: the first reason it cannot, or None."""

    def refuse(qtype, n, k) -> str | None:
        t = qtypes.get(qtype)
        return first_reason(shape_reason(n, k), type_reason(t, name, source_types), k_reason(t, k),
                            n_reason(n, row_multiple))

    return refuse


def invertible_for(types_):
    """The ``invertible(qtype)`` of a layout whose unpack gives back exactly ``types_``."""

    def invertible(qtype) -> bool:
        return qtypes.get(qtype) in types_

    return invertible


def aligned_out(a: np.ndarray, dtype=np.uint64):
    """(flat view of the output array ``a`` as ``dtype`` for a kernel to write, finisher): ``a``
    itself when aligned for ``dtype``, else a scratch array the finisher copies back."""
    flat = a.reshape(-1).view(np.uint8)
    if flat.ctypes.data % np.dtype(dtype).itemsize == 0:
        return flat.view(dtype), lambda: None
    tmp = np.empty(flat.size, np.uint8)

    def finish():
        flat[...] = tmp

    return tmp.view(dtype), finish


def accepted(name: str, refuse, qtype, n, k) -> qtypes.GGMLType:
    """Resolve ``qtype`` and raise UnsupportedError with the layout's refusal, if any."""
    t = qtypes.get(qtype)
    reason = refuse(t, n, k)
    if reason:
        raise UnsupportedError(f"layout {name}: {reason}")
    return t


# ---- input checks -------------------------------------------------------------------------
def as_blocks(layout_name: str, blocks, t: qtypes.GGMLType, n: int, k: int) -> np.ndarray:
    """The source as a C-contiguous uint8 ``[n, row_bytes]`` array (a view when possible)."""
    if not isinstance(blocks, np.ndarray):
        try:
            blocks = np.frombuffer(blocks, np.uint8)
        except TypeError:
            raise BadInputError(
                f"layout {layout_name}: blocks must be a numpy array or a buffer, got {type(blocks).__name__}"
            ) from None
    arr = np.asarray(blocks)
    want = n * t.row_bytes(k)
    if arr.nbytes != want:
        raise BadInputError(
            f"layout {layout_name}: {t.name} [{n}, {k}] needs {want} bytes of blocks, got {arr.nbytes}"
            f" (array {arr.dtype} {list(arr.shape)})"
        )
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr.reshape(-1).view(np.uint8).reshape(n, t.row_bytes(k))


def as_regions(layout_name: str, regions: Mapping[str, np.ndarray], plan: list[RegionSpec]) -> dict[str, np.ndarray]:
    """Check ``regions`` against ``plan``; return C-contiguous arrays of the plan's dtype/shape.

    A region may come typed (the plan's dtype) or as raw bytes (uint8 of the right size, e.g.
    read back from a bundle file); anything else is refused with the region's name.
    """
    if not isinstance(regions, Mapping):
        raise BadInputError(f"layout {layout_name}: regions must be a mapping of name to array")
    want = {r.name for r in plan}
    extra = sorted(set(regions) - want)
    if extra:
        raise BadInputError(f"layout {layout_name}: unexpected region(s) {extra} (expected {[r.name for r in plan]})")
    out = {}
    for spec in plan:
        if spec.name not in regions:
            raise BadInputError(f"layout {layout_name}: region {spec.name!r} missing (expected {[r.name for r in plan]})")
        a = np.asarray(regions[spec.name])
        dt = spec.np_dtype
        if a.dtype != dt and a.dtype != np.uint8:
            raise BadInputError(f"layout {layout_name}: region {spec.name!r} has dtype {a.dtype}, expected {spec.dtype}")
        if a.nbytes != spec.nbytes:
            raise BadInputError(
                f"layout {layout_name}: region {spec.name!r} has {a.nbytes} bytes, expected {spec.nbytes}"
                f" ({spec.dtype} {list(spec.shape)})"
            )
        if a.dtype == dt and a.shape != spec.shape and a.ndim != 1:
            raise BadInputError(
                f"layout {layout_name}: region {spec.name!r} has shape {list(a.shape)}, expected {list(spec.shape)}"
            )
        a = np.ascontiguousarray(a)
        out[spec.name] = a.reshape(-1).view(dt).reshape(spec.shape)
    return out


def out_regions(layout_name: str, out: Mapping[str, np.ndarray] | None, plan: list[RegionSpec]) -> dict[str, np.ndarray]:
    """Fresh region arrays for ``plan``, or ``out`` checked to be writable arrays matching it
    exactly (e.g. memory maps of the bundle's tensor file, so packing writes in place)."""
    if out is None:
        return {spec.name: np.empty(spec.shape, spec.np_dtype) for spec in plan}
    if not isinstance(out, Mapping) or set(out) != {r.name for r in plan}:
        got = sorted(out) if isinstance(out, Mapping) else type(out).__name__
        raise BadInputError(f"layout {layout_name}: out must hold exactly the regions {[r.name for r in plan]}, got {got}")
    res = {}
    for spec in plan:
        a = out[spec.name]
        if not isinstance(a, np.ndarray) or a.dtype != spec.np_dtype or a.shape != spec.shape:
            raise BadInputError(
                f"layout {layout_name}: out region {spec.name!r} must be a {spec.dtype} array of shape {list(spec.shape)}"
            )
        if not (a.flags.c_contiguous and a.flags.writeable):
            raise BadInputError(f"layout {layout_name}: out region {spec.name!r} must be C-contiguous and writable")
        res[spec.name] = a
    return res


def out_blocks(layout_name: str, out: np.ndarray | None, t: qtypes.GGMLType, n: int, k: int) -> np.ndarray:
    """A fresh uint8 [n, row_bytes] array, or ``out`` checked to be exactly that (writable)."""
    shape = (n, t.row_bytes(k))
    if out is None:
        return np.empty(shape, np.uint8)
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.shape != shape:
        raise BadInputError(f"layout {layout_name}: out must be a uint8 array of shape {list(shape)}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise BadInputError(f"layout {layout_name}: out must be C-contiguous and writable")
    return out


def word_step(t: qtypes.GGMLType) -> tuple[int, int]:
    """(blocks, 64-bit words) of the fewest whole blocks of ``t`` that are whole words: Q4_0
    4 x 18 bytes = 9 words, Q4_1 2 x 20 = 5, Q4_K 1 x 144 = 18 (a row step of the word kernels)."""
    blocks = 8 // math.gcd(t.type_size, 8)
    return blocks, blocks * t.type_size // 8


def aligned_words(flat: np.ndarray) -> np.ndarray:
    """A byte array as little-endian uint64 words (copied only if misaligned); size % 8 == 0."""
    flat = flat.reshape(-1)
    if flat.ctypes.data % 8:
        tmp = np.empty(flat.size, np.uint8)
        tmp[...] = flat
        flat = tmp
    return flat.view(np.uint64)


def words(a: np.ndarray, dtype=np.uint64) -> np.ndarray:
    """A region (any dtype, a multiple of 8 bytes) as flat ``dtype`` words for a kernel to read
    (copied only if misaligned)."""
    return aligned_words(a.reshape(-1).view(np.uint8)).view(dtype)


# ---- numba or numpy ------------------------------------------------------------------------
#: Bytes of weights from which numba's start-up pays for itself against the numpy packers of
#: the simple block types (they lose a little per byte against the kernels): below it a job
#: stays in numpy unless something else started the kernels (``formats.engine``). The figures
#: behind it: docs/BENCHMARKS.md ("#4"; benchmarks/bench_repack.py --engine numpy|jit).
JIT_PAYOFF_BYTES = engine.NUMPY_BUDGET_BYTES["repack"]


def prefer_jit(nbytes: int, kind: str = "repack") -> bool:
    """Run a numba kernel rather than a numpy packer for ``nbytes`` of blocks? ``kind``: the
    packer numpy would run, a fast one (``repack``) or the reference (``repack_ref``)."""
    return engine.prefer_kernels(kind, nbytes)


# ---- f16 <-> f32 --------------------------------------------------------------------------
#: f32 value of every f16 bit pattern, exactly as numpy (and so gguf-py) widens it: NaN
#: payloads and signalling NaNs are kept, so the map is injective.
F16_TO_F32: np.ndarray = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def f16_bits_to_f32(h: np.ndarray) -> np.ndarray:
    return F16_TO_F32[np.asarray(h).view(np.uint16)]


def f32_to_f16_bits_exact(x: np.ndarray, what: str) -> np.ndarray:
    """Inverse of :data:`F16_TO_F32` for values that are exact widened f16s; raise otherwise."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    with np.errstate(over="ignore"):  # too big for an f16: inf, which the check below refuses
        h = x.astype(np.float16).view(np.uint16)
    bad = F16_TO_F32[h].view(np.uint32) != x.view(np.uint32)
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(-1))[0])
        raise BadInputError(
            f"{what}: value {float(x.reshape(-1)[i])!r} (bits 0x{int(x.view(np.uint32).reshape(-1)[i]):08x}) at flat"
            f" index {i} is not an exact f16, so the source scale cannot be restored"
        )
    return h


def f32_to_f16_bits_fast(x: np.ndarray, what: str) -> np.ndarray:
    """:func:`f32_to_f16_bits_exact` by a numba kernel (``_il8_kernels._f16_exact``, ~6x
    faster): the same bits, and the same error (raised by the numpy check, run only then)."""
    from . import _il8_kernels

    x = np.require(x, np.float32, ["C_CONTIGUOUS", "ALIGNED"])
    h = np.empty(x.shape, np.uint16)
    if _il8_kernels._f16_exact(x.reshape(-1).view(np.uint32), h.reshape(-1)):
        f32_to_f16_bits_exact(x, what)  # raises, naming the first value
    return h


# ---- the standard dequantization (gguf-py's order, all in f32) ----------------------------
def dequant_integer_form(c: np.ndarray, s: np.ndarray, o: np.ndarray | None = None, sign: int = 1) -> np.ndarray:
    """``value = s*f32(c)`` (``+ o`` when sign=+1 and o given, ``- o`` when sign=-1), per group.

    ``c`` is the integer code ``[n, k]``; ``s`` and ``o`` are f32 ``[n, k/G]`` (one value per
    group of G consecutive K). Each product and sum is one f32 rounding, the order gguf-py uses:
    Q4_0/Q5_0/Q8_0 ``d*c``; Q4_1/Q5_1 ``d*q + m``; Q4_K/Q5_K ``(d*sc)*q - (dmin*m)`` (callers
    pass ``s = d*sc`` and ``o = dmin*m``); Q6_K ``(d*scale)*c``.
    """
    n, k = c.shape
    ng = s.shape[1]
    g = k // ng
    v = c.reshape(n, ng, g).astype(np.float32) * s.reshape(n, ng, 1).astype(np.float32, copy=False)
    if o is not None:
        o3 = o.reshape(n, ng, 1).astype(np.float32, copy=False)
        v = v + o3 if sign > 0 else v - o3
    return v.reshape(n, k)


def dequant_from_fields(t: qtypes.GGMLType, c: np.ndarray, fields: Mapping[str, np.ndarray]) -> np.ndarray:
    """Dequantize from the integer code ``c`` and the raw scale fields (codec field names).

    ``fields`` holds per-group arrays ``[n, k/G]`` and, for K-quants, per-super-block arrays
    ``[n, k/256]``, with f16 values as raw uint16 bits.
    """
    return dequant_integer_form(c, *integer_form_scales(t, fields))


def integer_form_scales(t: qtypes.GGMLType, fields: Mapping[str, np.ndarray]) -> tuple:
    """``(s, o, sign)`` of :func:`dequant_integer_form` from the raw scale fields (see
    :func:`dequant_from_fields`): ``s`` f32 ``[n, k/G]``, ``o`` the same or None, ``sign`` +1/-1."""
    scheme = t.scheme
    if scheme == "scale":
        return f16_bits_to_f32(fields["d"]), None, 1
    if scheme == "scale_min":
        return f16_bits_to_f32(fields["d"]), f16_bits_to_f32(fields["m"]), +1
    assert t.group is not None  # (a type with a scheme has a group)
    per = qtypes.QK_K // t.group  # groups per super-block
    d = np.repeat(f16_bits_to_f32(fields["d"]), per, axis=1)
    if scheme == "k_scale_min":
        dmin = np.repeat(f16_bits_to_f32(fields["dmin"]), per, axis=1)
        s = d * np.asarray(fields["sc"]).astype(np.float32)
        o = dmin * np.asarray(fields["m"]).astype(np.float32)
        return s, o, -1
    if scheme == "k_scale":
        return d * _blocks.k_scales(fields, t).astype(np.float32), None, 1
    raise UnsupportedError(f"type {t.name} has no integer form")  # pragma: no cover - registry guards


def plain_dequantize(t: qtypes.GGMLType, raw: np.ndarray, n: int, k: int) -> np.ndarray:
    """F32 / F16 / BF16 bytes to f32 ``[n, k]`` (numpy's widening, as gguf-py)."""
    if t.name == "F32":
        return raw.reshape(-1).view("<f4").reshape(n, k).astype(np.float32, copy=True)
    if t.name == "F16":
        return raw.reshape(-1).view("<f2").astype(np.float32).reshape(n, k)
    if t.name == "BF16":
        return (raw.reshape(-1).view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(n, k)
    raise UnsupportedError(f"type {t.name} (id {t.id}) cannot be dequantized by panelpack")


# ---- the 12-byte 6-bit scale packing of Q4_K / Q5_K (and of ggml's block_q4_Kx8) ----------
# In a Q4_K block the 8 slots are the sub-blocks; in ggml's block_q4_Kx8 they are the 8
# interleaved rows (one 12-byte group per sub-block). One implementation, drawn and tabled in
# formats/blocks/_bits.py (``k_scale_parts``); re-exported here under the names repack uses.
unpack_scales12 = _kbits.unpack_scales12
pack_scales12 = _kbits.pack_scales12


def codec_fields(t: qtypes.GGMLType, raw: np.ndarray, n: int, k: int) -> dict[str, np.ndarray]:
    from ..formats import blocks as _blocks

    return _blocks.to_fields(raw, t, n, k)


def codec_from_fields(t: qtypes.GGMLType, fields: dict[str, np.ndarray], n: int, k: int) -> np.ndarray:
    from ..formats import blocks as _blocks

    return _blocks.from_fields(fields, t, n, k)


# ---- byte-level views of Q4_0 / Q4_K blocks (numpy; the codec fields, without the tables) --
#   Q4_0 block (18 B): d:f16 | qs[16];   element e: e<16 low nibble of qs[e], else high of qs[e-16]
#   Q4_K block (144 B): d | dmin | scales[12] | qs[128];  sub-block s, element l: nibble s%2
#                       of qs[32*(s//2) + l]
# Sizes and offsets are the type table's and the codecs' (``AT``), imported on first use: the
# codec modules load numba, which a process that only reads or lists bundles never imports.
def _at(codec: str):
    import importlib

    m = importlib.import_module(f"..formats.blocks.{codec}", __package__)
    return m.AT, m.QTYPE


def q4_0_split(raw: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """-> (codes uint8 [n, k/32, 32] raw u, d uint16 [n, k/32])."""
    at, t = _at("q4_0")
    b = raw.reshape(n, k // t.block_size, t.type_size)
    qs = b[..., at.qs:]
    codes = np.concatenate([qs & 15, qs >> 4], axis=-1)
    return codes, _f16_at(b, at.d)


def q4_0_join(codes: np.ndarray, d: np.ndarray, n: int, k: int) -> np.ndarray:
    """Inverse of q4_0_split -> uint8 [n, row_bytes]."""
    at, t = _at("q4_0")
    nb, half = k // t.block_size, t.block_size // 2
    out = np.empty((n, nb, t.type_size), np.uint8)
    out[..., at.d:at.d + 2] = np.ascontiguousarray(d, dtype=np.uint16).reshape(n, nb, 1).view(np.uint8)
    c = codes.reshape(n, nb, t.block_size)
    out[..., at.qs:] = (c[..., :half] & 15) | ((c[..., half:] & 15) << 4)
    return out.reshape(n, nb * t.type_size)


def q4_k_split(raw: np.ndarray, n: int, k: int) -> dict[str, np.ndarray]:
    """-> codes uint8 [n, k/32, 32], sc/m uint8 [n, k/32], d/dmin uint16 [n, k/256]."""
    at, t = _at("q4_k")
    nsb = k // t.block_size
    b = raw.reshape(n, nsb, t.type_size)
    sc, m = unpack_scales12(b[..., at.scales:at.qs])
    qs = b[..., at.qs:].reshape(n, nsb, 4, 1, 32)
    codes = np.concatenate([qs & 15, qs >> 4], axis=-2).reshape(n, nsb * 8, 32)
    return {"codes": codes, "sc": sc.reshape(n, nsb * 8), "m": m.reshape(n, nsb * 8),
            "d": _f16_at(b, at.d), "dmin": _f16_at(b, at.dmin)}


def _f16_at(b: np.ndarray, byte: int) -> np.ndarray:
    """The f16 bits at ``byte`` of every block of ``b`` [..., type_size]."""
    return np.ascontiguousarray(b[..., byte:byte + 2]).view(np.uint16)[..., 0]
