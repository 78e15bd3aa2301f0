"""The digests a bundle records of its bytes (docs/FORMAT.md, "Digests"): one registry.

A bundle's manifest names one algorithm in its ``digest`` member; every per-tensor digest
(each region, the tensor's bytes in the source, the standard blocks) uses it, and its manifest
keys carry the algorithm's name::

    "digest": "blake3"                    (version 1 manifests have no member: sha256)
    tensors[i].regions[r].blake3          each region's (in version 2 they cover the file)
    tensors[i].source_blake3              the tensor's bytes in the source checkpoint
    tensors[i].blocks_blake3              the standard blocks the layout was packed from
    tensors[i].sha256                     version 1 only: the tensor file's own digest

What stays sha256 whatever the bundle's algorithm: the source checkpoint's files (what model
hubs publish), the bundle's side files, the source tensor list and the manifest checksum (a few
KB each).

Both algorithms give 32 bytes, written as 64 lowercase hex digits. BLAKE3 is the default for
new bundles: 2.2x sha256's speed on one core here (3.25 against 1.45 GB/s, x86 with SHA
extensions) and the same security for this purpose (256-bit output, 128-bit collision
resistance; docs/FORMAT.md gives the argument). It comes from the ``blake3`` package (the
reference implementation's Rust crate; wheels for every platform numba has).
"""

from __future__ import annotations

import hashlib
import mmap
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from .errors import BadInputError

#: bytes per update when a file is hashed from its map or read in chunks
CHUNK = 16 << 20


def _blake3() -> Any:
    try:
        from blake3 import blake3
    except ImportError:  # an install without its dependencies
        raise BadInputError("BLAKE3 digests need the 'blake3' package (pip install blake3)") from None
    return blake3()


@dataclass(frozen=True)
class Digest:
    """One digest algorithm: its manifest name and a fresh hasher (``update``/``hexdigest``;
    both release the GIL on large buffers, so hash threads run side by side)."""

    name: str
    new: Callable[[], Any]

    @property
    def source_key(self) -> str:
        return f"source_{self.name}"

    @property
    def blocks_key(self) -> str:
        return f"blocks_{self.name}"

    def of_bytes(self, data) -> str:
        """The digest of a bytes-like object or of an array's bytes (no copy when contiguous)."""
        h = self.new()
        h.update(_buffer(data))
        return h.hexdigest()

    def of_file(self, path: str | os.PathLike, offset: int = 0, size: Optional[int] = None) -> str:
        """The digest of a file (or of ``size`` bytes from ``offset``): hashed straight from a
        read-only map (no copy into Python buffers), or read in chunks where the file cannot be
        mapped (a pipe, a special file, some network file systems)."""
        h = self.new()
        with open(path, "rb") as f:
            total = os.fstat(f.fileno()).st_size
            end = total if size is None else min(total, offset + size)
            if end <= offset:
                return h.hexdigest()
            try:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                mm = None
            if mm is None:
                f.seek(offset)
                while offset < end:
                    b = f.read(min(CHUNK, end - offset))
                    if not b:
                        break
                    h.update(b)
                    offset += len(b)
                return h.hexdigest()
            with mm:
                if hasattr(mmap, "MADV_SEQUENTIAL"):
                    mm.madvise(mmap.MADV_SEQUENTIAL)
                view = memoryview(mm)
                try:
                    for a in range(offset, end, CHUNK):
                        h.update(view[a:min(end, a + CHUNK)])
                finally:
                    view.release()
        return h.hexdigest()


def _buffer(data):
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if not isinstance(data, (bytes, bytearray)):
        data = memoryview(data).cast("B")
    return data


SHA256 = Digest("sha256", hashlib.sha256)
BLAKE3 = Digest("blake3", _blake3)

#: every algorithm a bundle may name, by manifest name
DIGESTS: dict[str, Digest] = {d.name: d for d in (SHA256, BLAKE3)}
#: what new bundles use unless asked otherwise
DEFAULT = BLAKE3.name
#: what a manifest without a ``digest`` member (format version 1) used
LEGACY = SHA256.name


def get(name: str) -> Digest:
    """The algorithm called ``name``; BadInputError naming the known ones otherwise."""
    try:
        return DIGESTS[name]
    except (KeyError, TypeError):
        raise BadInputError(f"unknown digest {name!r} (known: {', '.join(DIGESTS)})") from None
