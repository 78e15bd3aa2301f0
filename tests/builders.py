"""Synthetic checkpoints for tests.

Three layers, from the lowest:

* ``pack_*`` / :func:`gguf_bytes`: a GGUF assembled with ``struct.pack`` only, independent of
  ``formats/gguf.py``, for golden values and hostile files (every field can be overridden).
* :func:`random_blocks`: random but valid blocks for every type with a codec, packed byte by
  byte from random field values (layouts of docs/FORMAT.md §2, table :data:`BLOCK_FIELDS`); no codec
  module is used, so codec tests can take them as independent input. f16 scales are finite,
  normal and moderate (magnitude 2^-10 .. 2^-3), never zero.
* :func:`build_gguf` (any tensors and metadata, written by panelpack's own
  ``GGUFStreamWriter``) and :func:`tiny_llama_gguf` (a two-layer llama-shaped model using every
  type with a codec, with an ``output.weight`` whose N = 100 is not a multiple of 8 or 64).

Example::

    blocks = random_blocks("q4_k", 64, 512, rng)          # uint8 [64, 2 * 144]
    built = build_gguf(tmp_path / "m.gguf", {"w": ("Q4_K", blocks)}, {"general.name": "t"})
    built.shapes["w"] == (64, 512)
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from panelpack.formats import qtypes
from panelpack.formats.gguf import GGUFStreamWriter, GGUFValueType

VT = GGUFValueType

# ---------------------------------------------------------------------------------------------
# struct.pack level (independent of formats/gguf.py)
# ---------------------------------------------------------------------------------------------

#: struct codes of the fixed-size metadata value types (GGUF spec), for hand-packed files.
SCALAR_CODES = {
    VT.UINT8: "B", VT.INT8: "b", VT.UINT16: "H", VT.INT16: "h", VT.UINT32: "I", VT.INT32: "i",
    VT.FLOAT32: "f", VT.BOOL: "?", VT.UINT64: "Q", VT.INT64: "q", VT.FLOAT64: "d",
}


def pack_string(s: str | bytes, length: int | None = None) -> bytes:
    """u64 length + bytes; ``length`` overrides the stored length (hostile files)."""
    raw = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def pack_value(vtype: int, value: Any, item_type: int | None = None) -> bytes:
    """The value bytes (without the type id) of one metadata value."""
    if vtype in SCALAR_CODES:
        return struct.pack("<" + SCALAR_CODES[VT(vtype)], value)
    if vtype == VT.STRING:
        return pack_string(value)
    if vtype == VT.ARRAY:
        assert item_type is not None, "arrays need item_type"
        return pack_array(item_type, value)
    raise ValueError(f"unknown vtype {vtype}")


def pack_array(item_type: int, values: Sequence[Any], count: int | None = None) -> bytes:
    """An ARRAY value: item type, count (overridable), packed items. Nested arrays: pass
    already-packed array payloads as ``bytes`` items with ``item_type=ARRAY``."""
    if item_type == VT.ARRAY:
        body = b"".join(values)
    else:
        body = b"".join(pack_value(item_type, v) for v in values)
    return struct.pack("<IQ", item_type, len(values) if count is None else count) + body


def pack_kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    """One key/value pair: key string, u32 type id, value bytes (already packed)."""
    return pack_string(key) + struct.pack("<I", vtype) + payload


def pack_tensor_info(name: str | bytes, ne: Sequence[int], type_id: int, offset: int,
                     n_dims: int | None = None) -> bytes:
    """One tensor-info entry; ``n_dims`` overrides the stored dimension count."""
    return (
        pack_string(name)
        + struct.pack("<I", len(ne) if n_dims is None else n_dims)
        + struct.pack(f"<{len(ne)}Q", *ne)
        + struct.pack("<IQ", type_id, offset)
    )


def pack_header(version: int = 3, n_tensors: int = 0, n_kv: int = 0, magic: bytes = b"GGUF") -> bytes:
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def gguf_bytes(
    kvs: Sequence[bytes] = (),
    tensor_infos: Sequence[bytes] = (),
    data: bytes = b"",
    *,
    version: int = 3,
    alignment: int = 32,
    n_tensors: int | None = None,
    n_kv: int | None = None,
    magic: bytes = b"GGUF",
) -> bytes:
    """A whole file from packed pieces: header, pairs, tensor infos, zero padding to
    ``alignment``, then ``data`` (the data section, offsets relative to its start)."""
    head = pack_header(version, len(tensor_infos) if n_tensors is None else n_tensors,
                       len(kvs) if n_kv is None else n_kv, magic)
    meta = head + b"".join(kvs) + b"".join(tensor_infos)
    pad = (-len(meta)) % alignment
    return meta + b"\0" * pad + data


# ---------------------------------------------------------------------------------------------
# Random valid blocks
# ---------------------------------------------------------------------------------------------

F16_POS = "f16+"  # f16 scale in [2^-10, 2^-3]
F16_SIGNED = "f16±"  # same magnitude, random sign
BYTES = "u8"  # uniform random bytes (codes, high bits, packed 6-bit scales: every pattern is valid)
I8_SYM = "i8"  # int8 in [-127, 127] (Q8_0 codes: ggml's quantizer never writes -128)


class Field(NamedTuple):
    name: str
    kind: str
    count: int  # items of that kind (f16 fields: 1 item = 2 bytes)


#: Byte layout of one block, fields in storage order (docs/FORMAT.md §2; gguf-py quants.py). Signs
#: follow ggml's reference quantizers: Q4_0/Q5_0/Q6_K d can be negative, Q8_0 and the
#: K-quants' d/dmin and Q4_1/Q5_1 d are >= 0, Q4_1/Q5_1 m is signed.
BLOCK_FIELDS: dict[str, tuple[Field, ...]] = {
    "Q4_0": (Field("d", F16_SIGNED, 1), Field("qs", BYTES, 16)),
    "Q4_1": (Field("d", F16_POS, 1), Field("m", F16_SIGNED, 1), Field("qs", BYTES, 16)),
    "Q5_0": (Field("d", F16_SIGNED, 1), Field("qh", BYTES, 4), Field("qs", BYTES, 16)),
    "Q5_1": (Field("d", F16_POS, 1), Field("m", F16_SIGNED, 1), Field("qh", BYTES, 4), Field("qs", BYTES, 16)),
    "Q8_0": (Field("d", F16_POS, 1), Field("qs", I8_SYM, 32)),
    "Q4_K": (Field("d", F16_POS, 1), Field("dmin", F16_POS, 1), Field("scales", BYTES, 12),
             Field("qs", BYTES, 128)),
    "Q5_K": (Field("d", F16_POS, 1), Field("dmin", F16_POS, 1), Field("scales", BYTES, 12),
             Field("qh", BYTES, 32), Field("qs", BYTES, 128)),
    "Q6_K": (Field("ql", BYTES, 128), Field("qh", BYTES, 64), Field("scales", BYTES, 16),
             Field("d", F16_SIGNED, 1)),
    "Q2_K": (Field("scales", BYTES, 16), Field("qs", BYTES, 64), Field("d", F16_POS, 1),
             Field("dmin", F16_POS, 1)),
    "Q3_K": (Field("hmask", BYTES, 32), Field("qs", BYTES, 64), Field("scales", BYTES, 12),
             Field("d", F16_SIGNED, 1)),
}
_KIND_BYTES = {F16_POS: 2, F16_SIGNED: 2, BYTES: 1, I8_SYM: 1}

#: Plain element types: how random values are made and stored.
PLAIN_TYPES = ("F32", "F16", "BF16")


def _field_bytes(kind: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """uint8 [*shape, bytes] for ``shape`` items of ``kind``."""
    if kind in (F16_POS, F16_SIGNED):
        mag = np.exp2(rng.uniform(-10.0, -3.0, size=shape)).astype(np.float32)
        if kind == F16_SIGNED:
            mag *= rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=shape)
        return mag.astype("<f2").view(np.uint8).reshape(*shape, 2)
    if kind == BYTES:
        return rng.integers(0, 256, size=(*shape, 1), dtype=np.uint8)
    if kind == I8_SYM:
        return rng.integers(-127, 128, size=(*shape, 1), dtype=np.int8).view(np.uint8)
    raise ValueError(kind)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even f32 -> bf16 bits (uint16), NaN kept quiet; as gguf-py does."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded).astype("<u2")


def random_blocks(qtype: Any, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random valid rows of ``qtype``: uint8 ``[n, row_bytes]`` for an ``(n, k)`` tensor.

    Quantized types: every field random (see :data:`BLOCK_FIELDS`). F32/F16/BF16: standard
    normal values stored in the type, as raw bytes.
    """
    t = qtypes.get(qtype)
    if k % t.block_size:
        raise ValueError(f"k={k} is not a multiple of the {t.name} block size {t.block_size}")
    nb = k // t.block_size
    if t.name == "F32":
        return rng.standard_normal((n, k), dtype=np.float32).astype("<f4").view(np.uint8)
    if t.name == "F16":
        return rng.standard_normal((n, k), dtype=np.float32).astype("<f2").view(np.uint8)
    if t.name == "BF16":
        return f32_to_bf16_bits(rng.standard_normal((n, k), dtype=np.float32)).view(np.uint8)
    fields = BLOCK_FIELDS.get(t.name)
    if fields is None:
        raise ValueError(f"no block layout for {t.name} in tests/builders.py")
    parts = [
        _field_bytes(f.kind, (n, nb, f.count), rng).reshape(n, nb, f.count * _KIND_BYTES[f.kind]) for f in fields
    ]
    blocks = np.concatenate(parts, axis=2)
    assert blocks.shape[2] == t.type_size, f"{t.name} layout sums to {blocks.shape[2]}, registry says {t.type_size}"
    return np.ascontiguousarray(blocks.reshape(n, nb * t.type_size))


def blocks_with_codes(qtype: Any, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Blocks of ``qtype`` whose integer codes are ``codes`` [n, k] (the other fields random,
    from :func:`random_blocks`), through the codec's fields (``formats/blocks.py``)."""
    from panelpack.formats import blocks as codecs

    t = qtypes.get(qtype)
    n, k = codes.shape
    f = codecs.to_fields(random_blocks(t, n, k, rng), t, n, k)
    f["codes"] = codes.astype(f["codes"].dtype)
    return codecs.from_fields(f, t, n, k)


def block_field(blocks: np.ndarray, qtype: Any, name: str) -> np.ndarray:
    """Raw bytes of one field of every block: uint8 ``[rows, blocks_per_row, field_bytes]``."""
    t = qtypes.get(qtype)
    fields = BLOCK_FIELDS[t.name]
    rows = blocks.reshape(blocks.shape[0], -1, t.type_size)
    start = 0
    for f in fields:
        size = f.count * _KIND_BYTES[f.kind]
        if f.name == name:
            return rows[:, :, start : start + size]
        start += size
    raise KeyError(f"{t.name} has no field {name!r}")


# ---------------------------------------------------------------------------------------------
# Whole files through panelpack's writer
# ---------------------------------------------------------------------------------------------


class KV(NamedTuple):
    """A metadata value with an explicit type: ``KV(7, VT.UINT32)``, ``KV([1.0], VT.ARRAY, VT.FLOAT32)``."""

    value: Any
    vtype: int
    item_type: int | None = None


@dataclass
class BuiltGGUF:
    """What :func:`build_gguf` wrote: the path, and per tensor its type name, numpy-order
    shape and stored bytes (uint8 ``[rows, row_bytes]``)."""

    path: Path
    types: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    raw: dict[str, np.ndarray] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


def _as_stored(name: str, qtype: Any, data: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """(uint8 rows, numpy shape) for a tensor given as raw bytes or as float values."""
    t = qtypes.get(qtype)
    data = np.asarray(data)
    if data.dtype == np.uint8:  # raw bytes, last axis = row bytes
        row_bytes = data.shape[-1]
        if row_bytes % t.type_size:
            raise ValueError(f"{name}: {row_bytes} bytes per row is not whole {t.name} blocks")
        k = row_bytes // t.type_size * t.block_size
        return np.ascontiguousarray(data), (*data.shape[:-1], k)
    if t.name == "BF16" and data.dtype == np.uint16:
        return np.ascontiguousarray(data.astype("<u2")).view(np.uint8), data.shape
    if t.name in ("F32", "F16") and data.dtype.kind == "f":
        return np.ascontiguousarray(data.astype("<f4" if t.name == "F32" else "<f2")).view(np.uint8), data.shape
    if t.name == "BF16" and data.dtype.kind == "f":
        return f32_to_bf16_bits(data.astype(np.float32)).view(np.uint8), data.shape
    raise ValueError(f"{name}: give {t.name} data as uint8 raw rows" + (" or floats" if t.name in PLAIN_TYPES else ""))


def build_gguf(
    path: str | os.PathLike,
    tensors: Mapping[str, tuple[Any, np.ndarray]],
    metadata: Mapping[str, Any] | None = None,
    arch: str | None = "llama",
    alignment: int = 32,
    version: int = 3,
) -> BuiltGGUF:
    """Write a GGUF with panelpack's writer.

    ``tensors``: name -> (type name/id, data); data is uint8 raw rows ``[..., row_bytes]``
    (e.g. from :func:`random_blocks`; the shape's last axis becomes K) or, for F32/F16/BF16,
    float values (BF16 also as uint16 bits). ``metadata``: key -> value (type inferred as the
    writer does) or :class:`KV` for an explicit type. ``arch`` adds ``general.architecture``
    first unless ``metadata`` has it.
    """
    path = Path(path)
    metadata = dict(metadata or {})
    built = BuiltGGUF(path)
    w = GGUFStreamWriter(path, arch=None if "general.architecture" in metadata else arch,
                         alignment=alignment, version=version)
    if arch is not None and "general.architecture" not in metadata:
        built.metadata["general.architecture"] = arch
    for key, value in metadata.items():
        if isinstance(value, KV):
            w.add_kv(key, value.value, value.vtype, value.item_type)
            built.metadata[key] = value.value
        else:
            w.add_kv(key, value)
            built.metadata[key] = value
    for name, (qtype, data) in tensors.items():
        raw, shape = _as_stored(name, qtype, data)
        w.add_tensor_info(name, shape, qtype)
        built.types[name] = qtypes.get(qtype).name
        built.shapes[name] = tuple(int(d) for d in shape)
        built.raw[name] = raw.reshape(-1, raw.shape[-1]) if raw.ndim > 1 else raw.reshape(1, -1)
    with w:
        w.write_header()
        for name in tensors:
            w.write_tensor_data(name, built.raw[name])
    return built


#: tiny_llama_gguf's per-layer matmul types (layer 0, layer 1): every type with a codec.
TINY_LLAMA_TYPES = {
    "attn_q": ("Q4_0", "Q4_K"),
    "attn_k": ("Q4_1", "Q5_K"),
    "attn_v": ("Q5_0", "Q6_K"),
    "attn_output": ("Q5_1", "Q8_0"),
    "ffn_gate": ("Q4_K", "F16"),
    "ffn_up": ("Q6_K", "BF16"),
    "ffn_down": ("Q5_K", "Q4_0"),
}


def tiny_llama_gguf(
    path: str | os.PathLike,
    *,
    n_layer: int = 2,
    n_embd: int = 256,
    n_ff: int = 512,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_vocab: int = 100,
    seed: int = 0,
    output_type: str = "Q4_0",
    alignment: int = 32,
) -> BuiltGGUF:
    """A small llama-shaped GGUF with random weights.

    Layers alternate the type pairs of :data:`TINY_LLAMA_TYPES` (so every type with a codec
    appears), norms are F32, ``token_embd.weight`` is Q8_0 and ``output.weight`` is
    ``output_type`` with N = ``n_vocab`` (100 by default: not a multiple of 8 or 64).
    ``n_embd`` and ``n_ff`` must be multiples of 256 (K-quants). Tokenizer metadata is a
    synthetic vocabulary of ``n_vocab`` tokens.
    """
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head
    n_kv = head_dim * n_head_kv
    shapes = {
        "attn_q": (n_embd, n_embd), "attn_k": (n_kv, n_embd), "attn_v": (n_kv, n_embd),
        "attn_output": (n_embd, n_embd), "ffn_gate": (n_ff, n_embd), "ffn_up": (n_ff, n_embd),
        "ffn_down": (n_embd, n_ff),
    }
    tensors: dict[str, tuple[str, np.ndarray]] = {
        "token_embd.weight": ("Q8_0", random_blocks("Q8_0", n_vocab, n_embd, rng)),
    }
    for i in range(n_layer):
        tensors[f"blk.{i}.attn_norm.weight"] = ("F32", 1.0 + 0.1 * rng.standard_normal(n_embd).astype(np.float32))
        for role in ("attn_q", "attn_k", "attn_v", "attn_output"):
            qtype = TINY_LLAMA_TYPES[role][i % 2]
            tensors[f"blk.{i}.{role}.weight"] = (qtype, random_blocks(qtype, *shapes[role], rng))
        tensors[f"blk.{i}.ffn_norm.weight"] = ("F32", 1.0 + 0.1 * rng.standard_normal(n_embd).astype(np.float32))
        for role in ("ffn_gate", "ffn_up", "ffn_down"):
            qtype = TINY_LLAMA_TYPES[role][i % 2]
            tensors[f"blk.{i}.{role}.weight"] = (qtype, random_blocks(qtype, *shapes[role], rng))
    tensors["output_norm.weight"] = ("F32", 1.0 + 0.1 * rng.standard_normal(n_embd).astype(np.float32))
    tensors["output.weight"] = (output_type, random_blocks(output_type, n_vocab, n_embd, rng))

    tokens = ["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(3, n_vocab)]
    metadata = {
        "general.name": "tiny-llama",
        "general.file_type": KV(2, VT.UINT32),  # LLAMA_FTYPE_MOSTLY_Q4_0
        "general.quantization_version": KV(2, VT.UINT32),
        "llama.block_count": KV(n_layer, VT.UINT32),
        "llama.context_length": KV(256, VT.UINT32),
        "llama.embedding_length": KV(n_embd, VT.UINT32),
        "llama.feed_forward_length": KV(n_ff, VT.UINT32),
        "llama.attention.head_count": KV(n_head, VT.UINT32),
        "llama.attention.head_count_kv": KV(n_head_kv, VT.UINT32),
        "llama.rope.freq_base": KV(10000.0, VT.FLOAT32),
        "llama.attention.layer_norm_rms_epsilon": KV(1e-5, VT.FLOAT32),
        "llama.rope.dimension_count": KV(head_dim, VT.UINT32),
        "llama.vocab_size": KV(n_vocab, VT.UINT32),
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": KV(tokens, VT.ARRAY, VT.STRING),
        "tokenizer.ggml.scores": KV(np.linspace(0, -1, n_vocab, dtype=np.float32), VT.ARRAY, VT.FLOAT32),
        "tokenizer.ggml.token_type": KV([3, 3, 3] + [1] * (n_vocab - 3), VT.ARRAY, VT.INT32),
        "tokenizer.ggml.bos_token_id": KV(1, VT.UINT32),
        "tokenizer.ggml.eos_token_id": KV(2, VT.UINT32),
    }
    return build_gguf(path, tensors, metadata, arch="llama", alignment=alignment)


def run_without_jit(code: str, *args: str, timeout: int = 600) -> str:
    """Run ``code`` in a fresh Python with ``NUMBA_DISABLE_JIT=1`` (every kernel as plain
    Python: the scalar references) and this folder on the path; its stdout, stripped. Fails
    the calling test with the child's stderr when it exits non-zero."""
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


def rehash_entry(manifest: Mapping[str, Any], entry: dict, data: bytes) -> None:
    """Record ``data`` as ``entry``'s tensor file in a parsed manifest: the file and region digests
    recomputed in the bundle's algorithm, as a buggy packer would have written them (the caller
    reseals the manifest)."""
    from panelpack.formats import digests

    dg = digests.get(manifest.get("digest", digests.LEGACY))
    if manifest.get("version") == 1:  # (version 2 records no file digest: the regions' cover it)
        entry[dg.name] = dg.of_bytes(data)
    for r in entry["regions"].values():
        r[dg.name] = dg.of_bytes(data[r["offset"]:r["offset"] + r["bytes"]])


def smallest_bundle(folder: str | os.PathLike, seed: int = 7) -> Path:
    """The smallest real bundle: two tiny tensors (a Q8_0 matrix, an F32 norm) from a GGUF,
    kept rowmajor (manifest, 2 tensor files, the GGUF header, layout and metadata side files)."""
    from panelpack.convert import convert

    d = Path(folder)
    rng = np.random.default_rng(seed)
    build_gguf(d / "s.gguf", {"blk.0.ffn_up.weight": ("Q8_0", random_blocks("Q8_0", 2, 32, rng)),
                              "blk.0.attn_norm.weight": ("F32", rng.standard_normal(8).astype(np.float32))},
               {"general.name": "s"})
    return convert(d / "s.gguf", d / "s.ppk", layout="rowmajor").bundle
