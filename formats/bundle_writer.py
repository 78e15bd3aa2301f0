"""Writing a panelpack bundle atomically (formats/bundle.py draws it): :class:`BundleWriter`
builds a hidden partial directory, fsyncs every file and renames it into place on commit; the
tensor files are written, or mapped and filled in place, region by region."""

from __future__ import annotations

import errno
import logging
import mmap
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from . import atomic, digests
from .atomic import sha256_file
from .bundle_manifest import (
    DTYPES,
    FORMAT,
    MANIFEST,
    SOURCE_DIR,
    TENSOR_DIR,
    VERSION,
    Region,
    TensorEntry,
    TensorFile,
    _done,
    dtype_name,
    hash_async,
    layout_regions,
    manifest_text,
    tensor_file_name,
)
from .digests import Digest
from .errors import BadInputError, OutputError

log = logging.getLogger(__name__)


@dataclass
class MappedTensor:
    """A tensor file reserved on disk and memory-mapped (:meth:`BundleWriter.map_tensor`): a
    packer writes ``views`` in place, :meth:`BundleWriter.finish_tensor` hashes and records it."""

    file: str
    layout: list[Region]
    bytes: int
    views: dict[str, np.ndarray]


class PendingTensorFile:
    """A tensor file written, its hashes still running on the hash threads: :meth:`result`
    waits for them and gives the :class:`TensorFile`. Lets the writer go on to the next tensor
    while this one is hashed (the data stays referenced until then)."""

    def __init__(self, file: str, size: int, layout: list[Region], region_hashes: list, digest_name: str):
        self.file, self.size, self.layout, self.digest_name = file, size, layout, digest_name
        self._region_hashes: Optional[list] = region_hashes
        self._done: Optional[TensorFile] = None

    def result(self) -> TensorFile:
        if self._done is None:
            assert self._region_hashes is not None
            self._done = TensorFile(self.file, self.size,
                                    {r.name: replace(r, digest=hx.result()) for r, hx in zip(self.layout, self._region_hashes)},
                                    self.digest_name)
            self._region_hashes = None
        return self._done


def _start_hashes(dg: Digest, views: list, known_hashes) -> list:
    """Futures of the region digests (``known_hashes``: a digest or a Future per region, or None
    to compute it). No file digest: a version 2 file is its regions and zero padding."""
    known = list(known_hashes or ()) + [None] * len(views)
    return [hash_async(dg.of_bytes, v) if k is None else (_done(k) if isinstance(k, str) else k)
            for v, k in zip(views, known)]


def _file_pieces(layout: list[Region], views: list):
    """The bytes of the tensor file made of ``views`` at ``layout``'s offsets, in order: the
    zero padding before each region, then the region."""
    pos = 0
    for reg, data in zip(layout, views):
        if reg.offset > pos:
            yield bytes(reg.offset - pos)
        yield data
        pos = reg.offset + reg.nbytes


#: The manifest's last member: the sha256 of every byte of manifest.json before it
#: (docs/FORMAT.md, "Manifest checksum"). Any byte changed anywhere in the file is caught.


def _syncfs(folder: Path) -> bool:
    """Flush the whole filesystem holding ``folder`` in one call (Linux ``syncfs``)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return False
    fd = os.open(folder, os.O_RDONLY)
    try:
        return fn(fd) == 0
    finally:
        os.close(fd)


def _fsync_files(paths: list[Path]) -> None:
    """Make many written files durable: one ``syncfs`` where the platform has it, else an
    fsync per file (a few threads: the waits overlap, the GIL is released)."""
    if len(paths) > 8 and _syncfs(paths[0].parent):
        return

    def sync(p: Path) -> None:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if len(paths) <= 2:
        for p in paths:
            sync(p)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(sync, paths))


#: errors that say a file system cannot reserve or map a file (not that it is full)
_CANNOT_MAP = frozenset({errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL, errno.ENOSYS, errno.EACCES})


class BundleWriter:
    """Builds a bundle under a temporary name and renames it into place on :meth:`commit`.

    Use as a context manager: leaving the block with an exception (including
    KeyboardInterrupt) calls :meth:`abort`, which removes everything written so far.
    """

    def __init__(self, out: str | os.PathLike, force: bool = False, digest: str = digests.DEFAULT):
        self.digest = digests.get(digest)  # the algorithm of every tensor, region and block digest
        self.digest.new()  # a missing package is a clear error now, not on a hash thread later
        self.out = atomic.check_target(out, force)
        self.force = force
        if self.out.exists() and not self.out.is_dir():
            raise OutputError(f"{self.out}: exists and is not a bundle directory")
        atomic.sweep_stale(self.out)
        self.tmp = atomic.temp_name(self.out)
        try:
            (self.tmp / TENSOR_DIR).mkdir(parents=True)
            (self.tmp / SOURCE_DIR).mkdir()
        except OSError as e:
            atomic.remove_quietly(self.tmp)
            raise atomic.output_error(e, self.out, "cannot create the bundle") from None
        self._done = False
        self._unsynced: list[Path] = []  # tensor files written, fsynced together in commit()
        self.tensors: list[dict[str, Any]] = []
        self.side_files: list[dict[str, Any]] = []

    # -- tensors --------------------------------------------------------------------------
    def write_tensor(self, index: int, name: str, regions: Mapping[str, np.ndarray],
                     known_hashes: Optional[list] = None, wait: bool = True) -> Any:
        """Write one tensor file from its regions (in order); returns its
        :class:`TensorFile` (``file``, ``bytes``, ``regions`` with their digests), or with ``wait=False``
        a :class:`PendingTensorFile` whose hashes are still running. ``known_hashes`` may give
        the digest (or a Future of it) of some regions already computed by the caller (e.g.
        row-major blocks = source bytes), in the writer's algorithm."""
        rel = tensor_file_name(index, name)
        specs = []
        arrays = []
        for rname, arr in regions.items():
            a = np.ascontiguousarray(arr)
            specs.append((rname, dtype_name(a.dtype), a.shape))
            arrays.append(a)
        layout, size = layout_regions(specs)
        views = [a.reshape(-1).view(np.uint8).data for a in arrays]
        # the region digests run on the hash threads (both algorithms release the GIL) while
        # this thread writes the same bytes
        region_hashes = _start_hashes(self.digest, views, known_hashes)
        path = self.tmp / rel
        try:
            with open(path, "wb") as f:
                for piece in _file_pieces(layout, views):
                    f.write(piece)
            self._unsynced.append(path)
        except OSError as e:
            raise atomic.output_error(e, path) from None
        pending = PendingTensorFile(rel, size, layout, region_hashes, self.digest.name)
        return pending.result() if wait else pending

    #: whether :meth:`map_tensor` is offered: the file's blocks are reserved first
    #: (``posix_fallocate``), so a full disk is an OSError there, never a SIGBUS in a packer
    MAPS = hasattr(os, "posix_fallocate")

    def map_tensor(self, index: int, name: str, specs: Iterable[tuple[str, str, tuple[int, ...]]]
                   ) -> Optional[MappedTensor]:
        """Create the tensor file for regions ``(name, dtype name, shape)`` at their offsets, its
        space reserved (padding reads as zeros), and map it: the caller writes each region's
        array in ``views`` (a layout's ``pack(..., out=views)``), then calls :meth:`finish_tensor`.
        No copy of the data passes through this process's memory or a ``write`` call, and the
        pages written are the file's own page cache (not anonymous memory). None when the file
        system cannot reserve or map files (the caller then uses :meth:`write_tensor`; so do all
        later tensors); a full disk is an :class:`OutputError`."""
        if not self.MAPS:
            return None
        rel = tensor_file_name(index, name)
        layout, size = layout_regions(specs)
        path = self.tmp / rel
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                if size:
                    os.posix_fallocate(fd, 0, size)
                mm = mmap.mmap(fd, size) if size else None
            finally:
                os.close(fd)  # the map keeps the file open
        except OSError as e:
            if e.errno in _CANNOT_MAP:
                log.debug("%s: cannot reserve or map tensor files here (%s): writing them instead", self.out, e)
                self.MAPS = False
                path.unlink(missing_ok=True)
                return None
            raise atomic.output_error(e, path) from None
        self._unsynced.append(path)
        whole = np.frombuffer(mm, np.uint8) if mm is not None else None
        views = {}
        for r in layout:
            dt = np.dtype(DTYPES[r.dtype])
            if whole is None or not r.nbytes:
                views[r.name] = np.zeros(r.shape, dt)
            else:
                views[r.name] = whole[r.offset:r.offset + r.nbytes].view(dt).reshape(r.shape)
        return MappedTensor(rel, layout, size, views)

    def finish_tensor(self, mt: MappedTensor, known_hashes: Optional[list] = None, wait: bool = True) -> Any:
        """Hash a :meth:`map_tensor` file from its map (as :meth:`write_tensor` hashes its regions)
        and return its :class:`TensorFile` (``wait=False``: a :class:`PendingTensorFile`). The map
        is released when the last view of it goes (the hash threads hold theirs until done)."""
        views = [mt.views[r.name].reshape(-1).view(np.uint8) for r in mt.layout]
        region_hashes = _start_hashes(self.digest, views, known_hashes)
        mt.views.clear()
        pending = PendingTensorFile(mt.file, mt.bytes, mt.layout, region_hashes, self.digest.name)
        return pending.result() if wait else pending

    # -- side files -----------------------------------------------------------------------
    def add_source_file(self, rel_name: str, data: bytes | None = None, src: str | os.PathLike | None = None) -> dict:
        """Copy a non-tensor file (config, tokenizer, GGUF metadata) into ``source/``."""
        parts = Path(rel_name).parts
        if not parts or any(p in ("..", "") or p.startswith("/") for p in parts) or Path(rel_name).is_absolute():
            raise BadInputError(f"side file name {rel_name!r} would escape the bundle directory")
        dst = self.tmp / SOURCE_DIR / rel_name
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            if data is None:
                if src is None:
                    raise BadInputError(f"side file {rel_name!r}: give data or src")
                shutil.copyfile(src, dst)
            else:
                with open(dst, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            raise atomic.output_error(e, dst) from None
        entry = {"file": f"{SOURCE_DIR}/{Path(*parts).as_posix()}", "bytes": dst.stat().st_size, "sha256": sha256_file(dst)}
        self.side_files.append(entry)
        return entry

    # -- finishing ------------------------------------------------------------------------
    def commit(self, manifest: dict[str, Any]) -> Path:
        """Write ``manifest.json``, fsync, and rename the bundle into place."""
        # format, version and digest lead (the digest is always this writer's: its files use it)
        doc = {"format": FORMAT, "version": VERSION, "digest": self.digest.name, **manifest}
        doc["digest"] = self.digest.name
        doc["tensors"] = [t.to_json() if isinstance(t, TensorEntry) else t for t in doc.get("tensors", [])]
        doc.setdefault("source_files", self.side_files)
        text = manifest_text(doc)
        try:
            _fsync_files(self._unsynced)
            self._unsynced = []
            with open(self.tmp / MANIFEST, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            for d in (self.tmp / TENSOR_DIR, self.tmp / SOURCE_DIR, self.tmp):
                atomic.fsync_dir(d)
            atomic.publish(self.tmp, self.out, self.force)
            atomic.fsync_dir(self.out.parent)
        except OSError as e:
            self.abort()
            if isinstance(e, OutputError):
                raise
            raise atomic.output_error(e, self.out, "cannot finish the bundle") from None
        self._done = True
        log.info("wrote bundle %s", self.out)
        return self.out

    def abort(self) -> None:
        if not self._done:
            atomic.remove_quietly(self.tmp)
            self._done = True

    def __enter__(self) -> "BundleWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or not self._done:
            self.abort()
