"""Open any checkpoint panelpack reads: ``open_checkpoint(path) -> Checkpoint``.

| path                                   | reader                                   |
| -------------------------------------- | ---------------------------------------- |
| a file starting with the GGUF magic    | ``formats.gguf.GGUFFile`` (any name)      |
| ``*.safetensors``, or a file whose     | ``formats.safetensors.SafetensorsFile``   |
| first bytes look like a safetensors    |                                          |
| header (``u64`` length, then ``{``)    |                                          |
| ``*.safetensors.index.json``           | ``HFCheckpoint`` of its folder            |
| a folder                               | ``formats.safetensors.HFCheckpoint``      |

Anything else is a :class:`FormatError` that says what the file starts with.
"""

from __future__ import annotations

import os
import struct

from .common import Checkpoint
from .errors import BadInputError, FormatError
from .safetensors import INDEX_SUFFIX, MAX_HEADER_SIZE, HFCheckpoint, SafetensorsFile

_GGUF_MAGIC = b"GGUF"  # the first 4 bytes of every GGUF file (gguf-py GGUF_MAGIC, little-endian)
_SNIFF = 16


def _looks_like_safetensors(head: bytes, size: int) -> bool:
    """A plausible header length followed by ``{``: how a safetensors file without the usual
    extension is recognised (the format has no magic)."""
    if len(head) < 9:
        return False
    (n,) = struct.unpack_from("<Q", head)
    return 2 <= n <= min(MAX_HEADER_SIZE, size - 8) and head[8:9] == b"{"


def open_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Open a GGUF file, a safetensors file, or a Hugging Face folder (see the module table)."""
    p = os.fspath(path)
    if not os.path.exists(p):
        raise BadInputError("no such file or folder", path=p)
    if os.path.isdir(p):
        return HFCheckpoint(p)
    if not os.path.isfile(p):
        raise BadInputError("not a regular file or a folder", path=p)
    try:
        size = os.path.getsize(p)
        with open(p, "rb") as f:
            head = f.read(_SNIFF)
    except OSError as e:
        raise BadInputError(f"cannot read: {e.strerror or e}", path=p) from None

    name = os.path.basename(p).lower()
    if head[:4] == _GGUF_MAGIC:
        from . import gguf  # lazily: most commands open one kind only

        return gguf.open_file(p)
    if name.endswith(INDEX_SUFFIX):
        return HFCheckpoint(os.path.dirname(os.path.abspath(p)), index=os.path.basename(p))
    if name.endswith(".safetensors") or _looks_like_safetensors(head, size):
        return SafetensorsFile(p)
    if size == 0:
        raise FormatError("empty file (0 bytes): not a GGUF or safetensors file", path=p)
    if name.endswith(".gguf"):
        raise FormatError(f"named .gguf but starts with {head[:4]!r}, not the GGUF magic {_GGUF_MAGIC!r}", path=p)
    raise FormatError(f"not a GGUF (magic {head[:4]!r}) or safetensors file", path=p)


__all__ = ["open_checkpoint"]
