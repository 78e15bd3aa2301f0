"""llama.cpp importance-matrix files (``llama-imatrix`` output), read as llama-quantize reads them.

Two forms, told apart the way llama.cpp does (a GGUF magic, else the legacy binary):

* **GGUF** (what llama-imatrix writes today): per weight ``W`` two F32 tensors,
  ``W.in_sum2`` (``ne0 * n_expert`` sums of squared activations) and ``W.counts``
  (``n_expert`` token counts); metadata ``imatrix.datasets`` (string array),
  ``imatrix.chunk_count``, ``imatrix.chunk_size`` (u32), all three required. The importance
  of column ``i`` of expert ``j`` is ``in_sum2[j*ne0 + i] / f32(round(counts[j]))``, or 1 where
  the count is 0.
* **legacy** (little-endian)::

      int32 n_entries
      n_entries x { int32 len, char name[len], int32 ncall, int32 nval, f32 values[nval] }
      optional:     int32 chunk_count, int32 len, char dataset[len]

  the importance is ``values[i] / f32(ncall)`` (``values`` as stored when ``ncall <= 0``).

:func:`load` returns an :class:`Imatrix` (``weights[name] -> f32[...]``, the datasets and the
chunk count) or raises our :class:`FormatError` naming the file.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import BadInputError, FormatError


@dataclass
class Imatrix:
    path: str
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # tensor name -> f32 importance
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    legacy: bool = False

    def provenance(self) -> dict[str, object]:
        """The keys llama-quantize writes into the quantized model (``quantize.imatrix.*``)."""
        out: dict[str, object] = {"quantize.imatrix.file": self.path[:127]}
        if self.datasets:
            out["quantize.imatrix.dataset"] = self.datasets[0][:127]
        out["quantize.imatrix.entries_count"] = len(self.weights)
        if self.chunk_count > 0:
            out["quantize.imatrix.chunks_count"] = self.chunk_count
        return out

    def for_tensor(self, name: str, k: int, n_expert: int = 1) -> np.ndarray | None:
        """The importance row of a tensor with rows of ``k`` (None: no entry, as llama.cpp
        then quantizes without one); a size that does not match is an error."""
        w = self.weights.get(name)
        if w is None:
            return None
        if w.size != k * n_expert:
            raise BadInputError(f"{self.path}: imatrix entry {name} has {w.size} values, the tensor needs {k * n_expert}")
        return w


def load(path: str | os.PathLike) -> Imatrix:
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadInputError(f"{path}: cannot read the imatrix ({e.strerror})") from None
    if data[:4] == b"GGUF":
        return _load_gguf(path)
    return _load_legacy(path, data)


def _load_legacy(path: str, data: bytes) -> Imatrix:
    out = Imatrix(path, legacy=True)
    pos = 0

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(data):
            raise FormatError(f"{path}: legacy imatrix truncated at byte {pos}")
        vals = struct.unpack_from(fmt, data, pos)
        pos += size
        return vals

    (n_entries,) = take("<i")
    if n_entries < 1:
        raise FormatError(f"{path}: not an imatrix (no entries; neither GGUF nor the legacy form)")
    for i in range(n_entries):
        (length,) = take("<i")
        if length < 0 or pos + length > len(data):
            raise FormatError(f"{path}: legacy imatrix entry {i + 1}: bad name length {length}")
        name = data[pos:pos + length].split(b"\0", 1)[0].decode("utf-8", "replace")
        pos += length
        ncall, nval = take("<ii")
        if nval < 1 or pos + 4 * nval > len(data):
            raise FormatError(f"{path}: legacy imatrix entry {name!r}: bad value count {nval}")
        vals = np.frombuffer(data, "<f4", nval, pos).astype(np.float32)
        pos += 4 * nval
        out.weights[name] = (vals / np.float32(ncall)).astype(np.float32) if ncall > 0 else vals.copy()
    if pos + 4 <= len(data):
        (out.chunk_count,) = take("<i")
        if pos + 4 <= len(data):
            (length,) = take("<i")
            if length > 0 and pos + length <= len(data):
                out.datasets.append(data[pos:pos + length].split(b"\0", 1)[0].decode("utf-8", "replace"))
    return out


def _load_gguf(path: str) -> Imatrix:
    from .checkpoint import open_checkpoint

    out = Imatrix(path)
    with open_checkpoint(path) as ck:
        meta = ck.metadata
        missing = [k for k in ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size") if k not in meta]
        if missing:
            raise FormatError(f"{path}: GGUF imatrix without its metadata ({', '.join(missing)})")
        ds = meta["imatrix.datasets"]
        out.datasets = [str(x) for x in (ds.tolist() if hasattr(ds, "tolist") else ds)]
        out.chunk_count = int(meta["imatrix.chunk_count"])
        sums: dict[str, Any] = {}
        counts: dict[str, Any] = {}
        for t in ck.tensors:
            for suffix, into in ((".in_sum2", sums), (".counts", counts)):
                if t.name.endswith(suffix):
                    if t.type.name != "F32":
                        raise FormatError(f"{path}: {t.name} must be F32, is {t.type.name}")
                    into[t.name[: -len(suffix)]] = np.array(ck.raw(t.name).view("<f4"), np.float32)
        for name in sorted(set(sums) | set(counts)):
            if name not in sums or name not in counts:
                raise FormatError(f"{path}: mismatched sums and counts for {name}")
            s, c = sums[name], counts[name]
            if c.size == 0 or s.size % c.size:
                raise FormatError(f"{path}: {name}: {s.size} sums for {c.size} counts")
            ne0 = s.size // c.size
            cnt = np.floor(np.abs(c.astype(np.float64)) + 0.5) * np.sign(c)  # std::lround
            w = np.ones(s.size, np.float32).reshape(c.size, ne0)
            for j in range(c.size):
                if np.float32(cnt[j]) > 0:
                    w[j] = s.reshape(c.size, ne0)[j] / np.float32(cnt[j])
            out.weights[name] = w.reshape(-1)
    return out
