"""The reading surface every checkpoint format shares.

``formats.gguf.GGUFFile``, ``formats.safetensors.SafetensorsFile`` and
``formats.safetensors.HFCheckpoint`` all subclass :class:`Checkpoint`: a lazy handle that
parses headers up front (bounded by the file size, never by a claimed size) and hands out
zero-copy ``np.memmap`` views of tensor data on request.

Shapes are in numpy/torch order, outermost first: a weight matrix is ``(N, K)`` with ``K``
contiguous. (GGUF stores ``ne = [K, N]``; the GGUF reader reverses it.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, TypeVar

import numpy as np

from .errors import BadInputError
from .qtypes import GGMLType


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # outermost first; a matrix is (N, K)
    type: GGMLType
    offset: int  # absolute byte offset of the data in ``file``
    nbytes: int
    file: str  # path of the file that holds the data

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n(self) -> int:
        """Rows (output channels) of the tensor seen as a matrix: product of all but the last dim."""
        return self.n_elements // self.k if self.shape else 1

    @property
    def k(self) -> int:
        """Contiguous (last) dimension."""
        return self.shape[-1] if self.shape else 1

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "type": self.type.name, "bytes": self.nbytes}


T = TypeVar("T")


def tensor_named(by_name: Mapping[str, T], name: str, path, of: str = "") -> T:
    """``by_name[name]``: the tensor a reader holds under ``name``, or the BadInputError every
    reader raises for a name it does not hold (``of`` says of what, e.g. " in the bundle")."""
    try:
        return by_name[name]
    except KeyError:
        raise BadInputError(f"no tensor named {name!r}{of}", path=path) from None


class Checkpoint:
    """Base class of a lazily parsed, memory-mapped checkpoint handle."""

    kind: str = "?"  # "gguf", "safetensors", "hf"

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._tensors: list[TensorInfo] = []
        self._by_name: dict[str, TensorInfo] = {}

    # -- the tensor table ---------------------------------------------------------------
    @property
    def tensors(self) -> list[TensorInfo]:
        return self._tensors

    @property
    def names(self) -> list[str]:
        return [t.name for t in self._tensors]

    def _set_tensors(self, tensors: list[TensorInfo]) -> None:
        self._tensors = list(tensors)
        self._by_name = {t.name: t for t in self._tensors}

    def tensor(self, name: str) -> TensorInfo:
        return tensor_named(self._by_name, name, self.path)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    # -- data ---------------------------------------------------------------------------
    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a read-only uint8 memmap view (no copy)."""
        raise NotImplementedError

    def array(self, name: str) -> np.ndarray:
        """A typed zero-copy view: plain types get their numpy dtype and shape (BF16 as raw
        uint16); quantized types get uint8 ``[rows, row_bytes]`` block rows."""
        info = self.tensor(name)
        raw = self.raw(name)
        t = info.type
        if t.numpy_dtype is not None:
            return raw.view(np.dtype(t.numpy_dtype)).reshape(info.shape)
        return raw.reshape(info.n, t.row_bytes(info.k))

    # -- metadata -----------------------------------------------------------------------
    @property
    def metadata(self) -> Mapping[str, Any]:
        return {}

    @property
    def architecture(self) -> str | None:
        return None

    def hyperparameters(self) -> dict[str, Any]:
        """Key hyperparameters for ``inspect`` (names as llama.cpp's: n_layer, n_embd, ...)."""
        return {}

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
