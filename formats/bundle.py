"""The panelpack bundle: a directory of tensor files plus ``manifest.json`` (docs/FORMAT.md, "Bundle").

::

    model.ppk/
      manifest.json
      tensors/00000-token_embd.weight.bin      one file per tensor, regions 64-byte aligned
      source/...                               config.json, tokenizer files, or GGUF metadata

Writing is atomic: :class:`BundleWriter` builds ``.<name>.partial-<pid>-<rand>`` next to the
output, fsyncs every file, and renames it into place only in :meth:`BundleWriter.commit`.
Any exception (or Ctrl-C) before that removes the partial directory, so a bundle that exists
under its final name is always complete. A run killed with SIGKILL leaves only the hidden
partial directory, which the next writer into the same folder removes.

:class:`Bundle` opens a bundle, validates the manifest schema (exception = bad input) and
hands out memory-mapped region views; :meth:`Bundle.check_structure` lists what is wrong with
the files (missing, wrong size, bad checksum, regions out of bounds or misaligned) for the
verifier to report.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import mmap
import os
import re
import shutil
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from . import atomic, digests, guard, qtypes
from .atomic import sha256_bytes, sha256_file
from .digests import Digest
from .errors import BadInputError, FormatError, OutputError

log = logging.getLogger(__name__)

FORMAT = "panelpack.bundle"
#: the version written. Version 2: the manifest's ``digest`` member names the algorithm, every
#: region carries its digest, and a tensor file is exactly its regions at their canonical offsets
#: with zero padding (so the regions' digests cover it; no separate file digest). Version 1 (read
#: still): sha256 throughout, a file digest per tensor, region digests where written.
VERSION = 2
READS = (1, 2)
MANIFEST = "manifest.json"
ALIGN = 64
TENSOR_DIR = "tensors"
SOURCE_DIR = "source"
#: the bundle's signature (OpenSSF model-signing, a Sigstore bundle: docs/FORMAT.md, "Signature"),
#: the one file a bundle may hold that its manifest does not list (it signs the manifest)
SIGNATURE = "model.sig"

# dtype names used in manifests -> numpy dtypes (little-endian, explicit)
DTYPES: dict[str, str] = {
    "u8": "<u1", "i8": "<i1", "u16": "<u2", "i16": "<i2", "f16": "<f2",
    "u32": "<u4", "i32": "<i4", "f32": "<f4", "f64": "<f8", "i64": "<i8",
}
_NP_TO_NAME = {np.dtype(v).str: k for k, v in DTYPES.items() if k != "f16"}
_NP_TO_NAME[np.dtype("<f2").str] = "f16"

_SAFE_FILE = re.compile(r"^[A-Za-z0-9._+-]+$")


def dtype_name(dt) -> str:
    """Manifest name of a numpy dtype (``u8``, ``f16``, ...)."""
    d = np.dtype(dt).newbyteorder("<") if np.dtype(dt).byteorder not in "<|" else np.dtype(dt)
    try:
        return _NP_TO_NAME[d.str]
    except KeyError:
        raise BadInputError(f"dtype {d} cannot be stored in a bundle region") from None


def check_tensor_name(name: str, where: str | None = None) -> None:
    """Refuse names that could escape the bundle directory or are not representable."""
    problem = None
    if not isinstance(name, str) or not name:
        problem = "empty tensor name"
    elif "\x00" in name:
        problem = "tensor name contains a NUL byte"
    elif "/" in name or "\\" in name:
        problem = "tensor name contains a path separator"
    elif name in (".", "..") or name.startswith(".."):
        problem = "tensor name would escape the bundle directory"
    elif len(name.encode("utf-8", "surrogatepass")) > 512:
        problem = "tensor name is longer than 512 bytes"
    if problem:
        raise BadInputError(f"{problem}: {name!r}", where=where)


def tensor_file_name(index: int, name: str) -> str:
    """``tensors/00012-blk.0.attn_q.weight.bin``: index keeps names unique after sanitizing."""
    check_tensor_name(name)
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", name).lstrip(".") or "tensor"
    return f"{TENSOR_DIR}/{index:05d}-{safe[:160]}.bin"


def _align(x: int, a: int = ALIGN) -> int:
    return (x + a - 1) // a * a


@dataclass(frozen=True)
class Region:
    """One region of a tensor file: ``nbytes`` bytes of ``dtype`` at ``offset`` (64-aligned)."""

    name: str
    offset: int
    nbytes: int
    dtype: str  # manifest dtype name
    shape: tuple[int, ...]
    digest: Optional[str] = None  # of the region's bytes, in the bundle's algorithm

    def to_json(self, key: str = digests.DEFAULT) -> dict[str, Any]:
        """The region as the manifest holds it; ``key``: the bundle's digest name."""
        d: dict[str, Any] = {"offset": self.offset, "bytes": self.nbytes, "dtype": self.dtype, "shape": list(self.shape)}
        if self.digest is not None:
            d[key] = self.digest
        return d

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(DTYPES[self.dtype])

    @classmethod
    def from_json(cls, name: str, r: Any, mpath: Path, where: str, digest_key: str = digests.LEGACY) -> "Region":
        if not isinstance(r, dict):
            raise FormatError("must be an object", path=mpath, where=where)
        for key, typ in _REQUIRED_REGION_KEYS.items():
            if not isinstance(r.get(key), typ) or isinstance(r.get(key), bool):
                raise FormatError(f"field {key!r} missing or not {typ.__name__}", path=mpath, where=where)
        if r["dtype"] not in DTYPES:
            raise FormatError(f"unknown dtype {r['dtype']!r}", path=mpath, where=where)
        if r["offset"] < 0 or r["bytes"] < 0:
            raise FormatError("negative offset or size", path=mpath, where=where)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in r["shape"]):
            raise FormatError("shape must be non-negative integers", path=mpath, where=where)
        want = math.prod(r["shape"]) * np.dtype(DTYPES[r["dtype"]]).itemsize  # Python ints: no overflow
        if want != r["bytes"]:
            raise FormatError(f"shape {r['shape']} of {r['dtype']} is {want} bytes, region says {r['bytes']}",
                              path=mpath, where=where)
        sha = r.get(digest_key)
        if digest_key in r and not (isinstance(sha, str) and _HEX64.match(sha)):
            raise FormatError(f"field {digest_key!r} is not 64 hex digits", path=mpath, where=where)
        return cls(name, r["offset"], r["bytes"], r["dtype"], tuple(r["shape"]), sha)


@dataclass(frozen=True)
class TensorFile:
    """What :meth:`BundleWriter.write_tensor` wrote: the file's name, size and regions, their
    digests in the algorithm ``digest_name`` (they cover the file: it has no digest of its own)."""

    file: str
    bytes: int
    regions: Mapping[str, Region]
    digest_name: str = digests.DEFAULT


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


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the manifest (docs/FORMAT.md, "Bundle"): where its bytes are, what they
    are, and the ledger of the decision that produced them. Built once (:meth:`create` in the
    converter, :meth:`from_json` when a bundle is read); everything else reads its fields."""

    name: str
    shape: tuple[int, ...]
    type: str  # the GGML type name of the blocks written
    layout: str  # the layout name (repack.LAYOUTS)
    file: str
    bytes: int
    digest: Optional[str]  # of the tensor file: version 1 only; every digest is in the algorithm digest_name
    regions: Mapping[str, Region]
    params: Mapping[str, Any]
    ledger: Mapping[str, Any]
    source_type: Optional[str] = None
    role: Optional[str] = None
    action: Optional[str] = None
    source_digest: Optional[str] = None  # of the tensor's bytes in the source checkpoint
    blocks_digest: Optional[str] = None  # of the row-major blocks before the layout
    extra: Mapping[str, Any] = field(default_factory=dict)  # fields of newer writers, kept as read
    digest_name: str = digests.DEFAULT  # the bundle's digest algorithm (formats/digests)

    @classmethod
    def create(cls, name: str, shape: Iterable[int], type: str, layout: str, written: TensorFile,
               params: Mapping[str, Any], ledger: Mapping[str, Any], **optional: Any) -> "TensorEntry":
        return cls(name=name, shape=tuple(int(d) for d in shape), type=type, layout=layout, file=written.file,
                   bytes=written.bytes, digest=None, regions=dict(written.regions), params=dict(params),
                   ledger=dict(ledger), digest_name=written.digest_name, **optional)

    # -- derived --------------------------------------------------------------------------
    @property
    def qtype(self) -> qtypes.GGMLType:
        return qtypes.get(self.type)

    @property
    def nk(self) -> tuple[int, int]:
        """``(n, k)``: rows (all outer dimensions) and the innermost dimension."""
        k = self.shape[-1] if self.shape else 1
        n = 1
        for d in self.shape[:-1]:
            n *= d
        return n, k

    # -- JSON -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        keys = _json_keys(self.digest_name)
        for key in _ENTRY_ORDER:
            value = getattr(self, key)
            if value is None and key in _OPTIONAL_KEYS:
                continue
            if key == "shape":
                value = list(value)
            elif key == "regions":
                value = {n: r.to_json(self.digest_name) for n, r in value.items()}
            elif key in ("params", "ledger"):
                value = dict(value)
            d[keys.get(key, key)] = value
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, t: Any, mpath: Path, index: int, digest_name: str = digests.LEGACY,
                  version: int = 1) -> "TensorEntry":
        where = f"tensors[{index}]"
        if not isinstance(t, dict):
            raise FormatError("must be an object", path=mpath, where=where)
        keys = _json_keys(digest_name)  # attribute -> manifest key
        # version 1: a file digest per tensor; version 2: none (the regions' digests cover the file)
        required = dict(_REQUIRED_TENSOR_KEYS, **({keys["digest"]: str} if version == 1 else {}))
        for key, typ in required.items():
            if key not in t:
                raise FormatError(f"missing field {key!r}", path=mpath, where=where)
            if not isinstance(t[key], typ) or (typ is int and isinstance(t[key], bool)):
                raise FormatError(f"field {key!r} must be {typ.__name__}", path=mpath, where=where)
        name = t["name"]
        where = f"tensor {name!r}"
        check_tensor_name(name, where=f"{mpath}: {where}")
        f = t["file"]
        fparts = f.split("/")
        if len(fparts) != 2 or fparts[0] != TENSOR_DIR or not _SAFE_FILE.match(fparts[1]) or fparts[1] in (".", ".."):
            raise FormatError(f"file {f!r} is not a plain name under {TENSOR_DIR}/", path=mpath, where=where)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in t["shape"]):
            raise FormatError(f"shape {t['shape']!r} must be positive integers", path=mpath, where=where)
        try:
            qtypes.get(t["type"])
        except BadInputError as e:
            raise FormatError(e.detail, path=mpath, where=where) from None
        if t["bytes"] < 0:
            raise FormatError("negative byte count", path=mpath, where=where)
        for key in (keys["digest"], keys["source_digest"], keys["blocks_digest"]):  # optional: absent, never null
            v = t.get(key)
            if key in t and not (isinstance(v, str) and _HEX64.match(v)):
                raise FormatError(f"field {key!r} is not 64 hex digits", path=mpath, where=where)
        for key in ("source_type", "role", "action"):
            if t.get(key) is not None and not isinstance(t[key], str):
                raise FormatError(f"field {key!r} must be str", path=mpath, where=where)
        if version >= 2 and keys["digest"] in t:
            raise FormatError(f"field {keys['digest']!r}: a version {version} entry has no file digest "
                              "(its regions' digests cover the file)", path=mpath, where=where)
        regions = {rname: Region.from_json(rname, r, mpath, f"{where} region {rname!r}", digest_name)
                   for rname, r in t["regions"].items()}
        if version >= 2:
            missing = [rname for rname, r in regions.items() if r.digest is None]
            if missing:
                raise FormatError(f"region {missing[0]!r} has no {digest_name!r} digest", path=mpath, where=where)
        led = t["ledger"]
        if not all(k in led for k in ("requested", "written", "reason")):
            raise FormatError("ledger needs requested, written and reason", path=mpath, where=where)
        known = {k: t[keys.get(k, k)] for k in _ENTRY_ORDER if keys.get(k, k) in t}
        known["shape"] = tuple(t["shape"])
        known["regions"] = regions
        known.setdefault("digest", None)  # (version 2: none)
        taken = {keys.get(k, k) for k in _ENTRY_ORDER}
        return cls(**known, extra={k: v for k, v in t.items() if k not in taken}, digest_name=digest_name)


#: an entry's attributes in manifest order; the digest ones are named after the algorithm there
_ENTRY_ORDER = ("name", "shape", "source_type", "type", "role", "action", "layout", "file", "bytes", "digest",
                "regions", "params", "source_digest", "blocks_digest", "ledger")
_OPTIONAL_KEYS = frozenset({"source_type", "role", "action", "digest", "source_digest", "blocks_digest"})


def _json_keys(digest_name: str) -> dict[str, str]:
    """The manifest keys of an entry's digest attributes for the algorithm ``digest_name``
    (``sha256``, ``source_sha256``, ``blocks_sha256`` for sha256; the others keep their names)."""
    dg = digests.get(digest_name)
    return {"digest": dg.name, "source_digest": dg.source_key, "blocks_digest": dg.blocks_key}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_LOSSLESS_ACTIONS = frozenset({"repack", "copy"})


def layout_regions(specs: Iterable[tuple[str, str, tuple[int, ...]]]) -> tuple[list[Region], int]:
    """Offsets for regions ``(name, dtype name, shape)`` packed in order, each 64-aligned.

    Returns the regions and the file size (the end of the last region; no trailing pad).
    """
    regions, off = [], 0
    for name, dt, shape in specs:
        itemsize = np.dtype(DTYPES[dt]).itemsize
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize if len(shape) else itemsize
        off = _align(off)
        regions.append(Region(name, off, nbytes, dt, tuple(int(s) for s in shape)))
        off += nbytes
    return regions, off


# =========================================================================================
# Writing
# =========================================================================================
_HASH_POOL: list = []


def hash_async(fn, *args):
    """Run a hashing function on the shared hash threads; returns a Future."""
    if not _HASH_POOL:
        from concurrent.futures import ThreadPoolExecutor

        _HASH_POOL.append(ThreadPoolExecutor(max_workers=2, thread_name_prefix="panelpack-hash"))
    return _HASH_POOL[0].submit(fn, *args)


def _done(value):
    from concurrent.futures import Future

    f: Future = Future()
    f.set_result(value)
    return f


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
CHECKSUM_KEY = "manifest_sha256"
_CHECKSUM_TAIL = re.compile(rb',\n "' + CHECKSUM_KEY.encode() + rb'": "([0-9a-f]{64})"\n\}\n\Z')


def refuse_nonfinite(doc: Any, what: str = "manifest") -> None:
    """Raise BadInputError naming the first NaN/±Inf float in ``doc`` (JSON cannot hold one,
    and ``json`` would write a bare ``NaN`` that no strict reader accepts)."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, float) and not np.isfinite(v):
            raise BadInputError(f"{what} value {where or '(root)'} is {v!r}: JSON cannot represent NaN or "
                                "infinity; nothing written")
        if isinstance(v, dict):
            stack.extend((f"{where}.{k}" if where else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))


def manifest_text(doc: dict[str, Any]) -> str:
    """The manifest as JSON: one top-level key per line and one line per tensor (readable and
    diffable, and written by json's C encoder, which pretty-printing would bypass), sealed
    with :data:`CHECKSUM_KEY` as the last member."""
    refuse_nonfinite(doc)
    enc = json.JSONEncoder(allow_nan=False, separators=(", ", ": "))
    lines = []
    for key, value in doc.items():
        if key == CHECKSUM_KEY:
            continue
        if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            items = ",\n".join("  " + enc.encode(x) for x in value)
            lines.append(f" {enc.encode(key)}: [\n{items}\n ]")
        else:
            lines.append(f" {enc.encode(key)}: {enc.encode(value)}")
    body = "{\n" + ",\n".join(lines)
    return body + f',\n "{CHECKSUM_KEY}": "{sha256_bytes(body.encode("utf-8"))}"\n}}\n'


def manifest_checksum_problem(text: bytes) -> Optional[str]:
    """None when ``text`` (the bytes of manifest.json) carries a checksum that matches it."""
    m = _CHECKSUM_TAIL.search(text)
    if m is None:
        return f"manifest.json does not end with its {CHECKSUM_KEY!r} checksum (damaged, or edited by hand)"
    if sha256_bytes(text[:m.start()]) != m.group(1).decode():
        return "manifest.json does not match its own checksum: it was changed after it was written"
    return None


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


# =========================================================================================
# Reading
# =========================================================================================
_REQUIRED_TENSOR_KEYS = {  # and the file's digest, named after the bundle's algorithm
    "name": str, "shape": list, "type": str, "layout": str, "file": str, "bytes": int,
    "regions": dict, "params": dict, "ledger": dict,
}
_REQUIRED_REGION_KEYS = {"offset": int, "bytes": int, "dtype": str, "shape": list}


class Bundle:
    """An opened bundle: the validated manifest and memory-mapped tensor regions."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        mpath = self.path / MANIFEST
        if not self.path.is_dir():
            raise BadInputError("not a bundle directory (expected a folder with manifest.json)", path=self.path)
        if not mpath.is_file():
            raise FormatError("no manifest.json: not a panelpack bundle", path=self.path)
        guard.refuse_links(self.path)  # no symlinks or special files anywhere in a bundle
        try:
            with open(mpath, "rb") as f:
                # (read(n) allocates n bytes up front: ask for what the file holds, capped)
                text = f.read(min(os.fstat(f.fileno()).st_size, 64 << 20) + 1)
            if len(text) > (64 << 20):
                raise FormatError("manifest.json is larger than 64 MiB", path=mpath)
            self.manifest = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates(mpath))
        except UnicodeDecodeError as e:
            raise FormatError(f"not UTF-8 ({e.reason} at byte {e.start})", path=mpath) from None
        except json.JSONDecodeError as e:
            raise FormatError(f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}", path=mpath) from None
        except RecursionError:
            raise FormatError(guard.MAX_JSON_DEPTH_NOTE, path=mpath) from None
        self._validate(mpath)
        self._by_name = {t.name: t for t in self.entries}
        #: why the manifest cannot be trusted (its checksum), or None
        self.manifest_problem = manifest_checksum_problem(text)
        _check_manifest_values(self.manifest, mpath)

    # -- schema -----------------------------------------------------------------------------
    def _validate(self, mpath: Path) -> None:
        m = self.manifest
        if not isinstance(m, dict):
            raise FormatError("manifest is not a JSON object", path=mpath)
        if m.get("format") != FORMAT:
            raise FormatError(f"field 'format' is {m.get('format')!r}, expected {FORMAT!r}", path=mpath)
        version = m.get("version")
        if version not in READS or isinstance(version, bool):
            raise FormatError(f"unsupported bundle version {version!r} (this panelpack reads "
                              f"{', '.join(map(str, READS))})", path=mpath)
        if version == 1:  # before the digest member: sha256 throughout
            if "digest" in m:
                raise FormatError("a version 1 manifest has no 'digest' member", path=mpath)
            named: Any = digests.LEGACY
        else:
            named = m.get("digest")
            if not isinstance(named, str) or named not in digests.DIGESTS:
                raise FormatError(f"field 'digest' is {named!r}, expected one of {', '.join(digests.DIGESTS)}",
                                  path=mpath)
        #: the algorithm of every tensor, region and block digest of this bundle
        self.digest: Digest = digests.get(named)
        self.version: int = version
        tensors = m.get("tensors")
        if not isinstance(tensors, list):
            raise FormatError("field 'tensors' must be a list", path=mpath)
        seen_names, seen_files = set(), set()
        entries = []
        for i, t in enumerate(tensors):
            e = TensorEntry.from_json(t, mpath, i, self.digest.name, version)
            where = f"tensor {e.name!r}"
            if e.name in seen_names:
                raise FormatError("listed twice", path=mpath, where=where)
            seen_names.add(e.name)
            if e.file in seen_files:
                raise FormatError(f"file {e.file!r} is used by two tensors", path=mpath, where=where)
            seen_files.add(e.file)
            entries.append(e)
        self.entries: list[TensorEntry] = entries
        side = m.get("source_files", [])
        if not isinstance(side, list):
            raise FormatError("field 'source_files' must be a list", path=mpath)
        for i, s in enumerate(side):
            where = f"source_files[{i}]"
            if not isinstance(s, dict) or not isinstance(s.get("file"), str) or not isinstance(s.get("sha256"), str):
                raise FormatError("needs 'file' and 'sha256' strings", path=mpath, where=where)
            parts = s["file"].split("/")
            if parts[0] != SOURCE_DIR or len(parts) < 2 or any(p in ("", ".", "..") or "\\" in p for p in parts):
                raise FormatError(f"file {s['file']!r} is not a plain path under {SOURCE_DIR}/", path=mpath, where=where)

    # -- access -----------------------------------------------------------------------------
    @property
    def tensors(self) -> list[TensorEntry]:
        return self.entries

    def tensor(self, name: str) -> TensorEntry:
        try:
            return self._by_name[name]
        except KeyError:
            raise BadInputError(f"no tensor named {name!r} in the bundle", path=self.path) from None

    def file_path(self, entry: TensorEntry) -> Path:
        return self.path / entry.file

    def regions(self, name_or_entry) -> dict[str, np.ndarray]:
        """Read-only memory-mapped views of a tensor's regions, typed and shaped."""
        t = self.tensor(name_or_entry) if isinstance(name_or_entry, str) else name_or_entry
        path = self.file_path(t)
        size = path.stat().st_size if path.exists() else -1
        if size != t.bytes:
            raise FormatError(f"file is {size} bytes, manifest says {t.bytes}", path=path)
        mm = np.memmap(path, dtype=np.uint8, mode="r") if size > 0 else np.zeros(0, np.uint8)
        out = {}
        for rname, r in t.regions.items():
            if r.offset + r.nbytes > size:
                raise FormatError(f"region {rname!r} ends at {r.offset + r.nbytes}, past the file end {size}", path=path)
            view = mm[r.offset:r.offset + r.nbytes]
            out[rname] = view.view(r.np_dtype).reshape(r.shape)
        return out

    # -- completeness against the source --------------------------------------------------
    def completeness_problems(self) -> list[tuple[str, str]]:
        """Tensors the source had (and the conversion selected) that the manifest lacks, and
        entries the source never had, from the source tensor list the converter recorded."""
        src = self.manifest.get("source")
        if src is None:  # not made from a checkpoint (a hand-built bundle): nothing to compare
            return []
        listed = src.get("tensor_list") if isinstance(src, dict) else None
        if listed is None:
            return [(MANIFEST, "the manifest records no source tensor list: completeness cannot be proven")]
        try:
            tensors = listed["tensors"]
            names = [t["name"] for t in tensors]
            ok = listed["count"] == len(tensors) and listed["sha256"] == sha256_bytes(_canonical(tensors))
        except (KeyError, TypeError):
            return [(MANIFEST, "the source tensor list is malformed")]
        if not ok:
            return [(MANIFEST, "the source tensor list does not match its own count and sha256")]
        excluded = set(src.get("excluded", []))
        want = [n for n in names if n not in excluded]
        have = {t.name for t in self.entries}
        problems = [(n, "in the source but missing from the bundle") for n in want if n not in have]
        problems += [(n, "in the bundle but not in the source tensor list") for n in sorted(have - set(names))]
        problems += [(n, "excluded at conversion, yet in the bundle") for n in sorted(have & excluded)]
        return problems

    # -- files the manifest does not account for ------------------------------------------
    def unlisted(self) -> list[str]:
        """Paths in the bundle (POSIX, relative; a folder ends with ``/`` and is not entered)
        that the manifest does not account for: anything but ``manifest.json``, the tensor
        files, the source files it lists, their folders and :data:`SIGNATURE`. ``pack`` ships
        only what the manifest lists, so these are refused (or, allowed, left out)."""
        files = {MANIFEST, SIGNATURE} | {t.file for t in self.entries}
        files |= {s["file"] for s in self.manifest.get("source_files", [])}
        folders = {TENSOR_DIR, SOURCE_DIR} | {"/".join(f.split("/")[:i]) for f in files
                                             for i in range(1, f.count("/") + 1)}
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.path):
            rel = Path(dirpath).relative_to(self.path).as_posix()
            prefix = "" if rel == "." else rel + "/"
            out.extend(prefix + d + "/" for d in dirnames if prefix + d not in folders)
            dirnames[:] = sorted(d for d in dirnames if prefix + d in folders)
            out.extend(prefix + f for f in filenames if prefix + f not in files)
        return sorted(out)

    # -- structure check (verify level "structure") ----------------------------------------
    def check_structure(self, hashes: bool = True, extra: bool = True) -> list[tuple[str, str]]:
        """Problems with the files as ``(where, message)``; empty when all is well. ``extra``:
        files the manifest does not list (:meth:`unlisted`) are problems too."""
        problems: list[tuple[str, str]] = []
        if self.manifest_problem:
            problems.append((MANIFEST, self.manifest_problem))
        problems.extend(self.completeness_problems())
        if extra:
            problems.extend((p, UNLISTED) for p in self.unlisted())
        sizes = {t.name: _file_size(self.file_path(t)) for t in self.tensors}  # None: not a file
        # the hashes of every well-sized file start at once on the hash threads (one file each);
        # the loop below collects them in manifest order
        dg = self.digest
        hashing = {t.name: hash_async(_file_and_region_hashes, dg, self.file_path(t), t) for t in self.tensors
                   if hashes and sizes[t.name] == t.bytes}
        # version 2: a file is exactly its regions, each at the first multiple of ALIGN after the one
        # before (the first at 0), ending where the last ends; with their digests and zero padding
        # they account for every byte of the file
        canonical = self.version >= 2
        for t in self.tensors:
            if t.action in _LOSSLESS_ACTIONS and t.source_digest != t.blocks_digest:
                problems.append((t.name, f"action {t.action!r} keeps the source blocks, but {dg.blocks_key} differs "
                                         f"from {dg.source_key}"))
            path = self.file_path(t)
            where = t.name
            size = sizes[t.name]
            if size is None:
                problems.append((where, f"file {t.file} is missing"))
                continue
            if size != t.bytes:
                problems.append((where, f"file {t.file} is {size} bytes, manifest says {t.bytes}"))
                continue
            end = 0
            for rname, r in sorted(t.regions.items(), key=lambda kv: kv[1].offset):
                if r.offset % ALIGN:
                    problems.append((where, f"region {rname!r} offset {r.offset} is not a multiple of {ALIGN}"))
                if r.offset < end:
                    problems.append((where, f"region {rname!r} overlaps the previous region"))
                if r.offset + r.nbytes > size:
                    problems.append((where, f"region {rname!r} ends past the end of {t.file}"))
                if canonical and r.offset != _align(end):
                    problems.append((where, f"region {rname!r} is at offset {r.offset}; packed after the region "
                                            f"before it, it starts at {_align(end)}"))
                end = max(end, r.offset + r.nbytes)
            if canonical and end != t.bytes:
                problems.append((where, f"{t.file} is {t.bytes} bytes, its regions end at {end}"))
            if hashes:
                got, bad, dirty = hashing.pop(t.name).result()  # (started above: every well-sized file)
                if t.digest is not None and got != t.digest:  # version 1: the file's own digest
                    problems.append((where, f"{dg.name} of {t.file} is {got[:16]}..., manifest says {t.digest[:16]}..."
                                            + (f" (damaged region: {', '.join(bad)})" if bad
                                               else " (damage outside the regions: padding)")))
                elif bad:
                    problems.append((where, f"region {dg.name} of {', '.join(bad)} does not match the manifest"
                                            f" (damaged region: {', '.join(bad)})"))
                if dirty is not None:
                    problems.append((where, f"byte {dirty} of {t.file}, outside every region, is not zero "
                                            "(damage outside the regions: padding)"))
        for s in self.manifest.get("source_files", []):
            path = self.path / s["file"]
            if not path.is_file():
                problems.append((s["file"], "source file is missing"))
            elif hashes and sha256_file(path) != s["sha256"]:
                problems.append((s["file"], "sha256 does not match the manifest"))
        return problems


def damage_message(path: str | os.PathLike, doing: str, problems: list[tuple[str, str]]) -> str:
    """The one line a command that refuses a damaged bundle prints: the first problems as
    verify lists them (names escaped: a hostile name cannot fake a line)."""
    from .text import escape

    listed = "; ".join(f"{escape(w)}: {escape(m)}" for w, m in problems[:3])
    more = f"; ... and {len(problems) - 3} more" if len(problems) > 3 else ""
    return (f"{escape(os.fspath(path))}: damaged bundle, not {doing} it ({len(problems)} problem(s): {listed}{more}); "
            "`panelpack verify` lists them")


def _file_size(path: Path) -> Optional[int]:
    """The size of the regular file at ``path``, or None when there is none (one stat)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


#: the problem :meth:`Bundle.check_structure` reports for each path :meth:`Bundle.unlisted` finds
UNLISTED = "not listed in the manifest (an extra file: pack would not ship it; verify --allow-extra warns instead)"

_READ_CHUNK = 1 << 20  # bytes per read of a file being hashed: both hashes find them in L2


def _file_and_region_hashes(dg: Digest, path: Path, t: TensorEntry) -> tuple[Optional[str], list[str], Optional[int]]:
    """From one pass over the file: its digest (only for an entry that records one, version 1),
    the names of the regions whose own digest does not match, and the offset of the first
    non-zero byte outside every region (None: all zero). Each 1 MB chunk feeds the hashes of the
    regions it overlaps while it is in L2 (one thread per file; :meth:`Bundle.check_structure`
    hashes files side by side). The chunks are slices of a read-only map (no copy), or reads
    where the file cannot be mapped. A region that is the whole file (a row-major tensor's) has
    the file's digest: it is not hashed twice."""
    whole = dg.new() if t.digest is not None else None
    checks = [(rname, r, whole if whole is not None and (r.offset, r.nbytes) == (0, t.bytes) else dg.new())
              for rname, r in t.regions.items() if r.digest is not None]
    parts = [(r, h) for _, r, h in checks if h is not whole]
    # the bytes outside every region (alignment padding, a few per region) must be zero where no
    # file digest covers them (version 2)
    gaps: list[tuple[int, int]] = []
    if whole is None:
        end = 0
        for r in sorted(t.regions.values(), key=lambda r: r.offset):
            if r.offset > end:
                gaps.append((end, r.offset))
            end = max(end, r.offset + r.nbytes)
        gaps.append((end, t.bytes))
    dirty: list[int] = []

    def feed(pos: int, chunk) -> None:
        if whole is not None:
            whole.update(chunk)
        for r, h in parts:
            a, b = max(r.offset, pos), min(r.offset + r.nbytes, pos + len(chunk))
            if a < b:
                h.update(chunk[a - pos:b - pos])
        for g0, g1 in gaps:
            a, b = max(g0, pos), min(g1, pos + len(chunk))
            if a < b and not dirty:
                piece = bytes(chunk[a - pos:b - pos])
                if piece.count(0) != len(piece):
                    dirty.append(a + len(piece) - len(piece.lstrip(b"\0")))

    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except (OSError, ValueError):  # a file system that cannot map files: plain reads
            mm = None
        if mm is not None:
            with mm:
                view = memoryview(mm)
                try:
                    for pos in range(0, size, _READ_CHUNK):
                        feed(pos, view[pos:pos + _READ_CHUNK])
                finally:
                    view.release()
        else:
            buf = bytearray(_READ_CHUNK)
            chunk_view = memoryview(buf)
            pos = 0
            while got := f.readinto(buf):
                feed(pos, chunk_view[:got])
                pos += got
    got = whole.hexdigest() if whole is not None else None
    bad = [rname for rname, r, h in checks if (got if h is whole else h.hexdigest()) != r.digest]
    return got, bad, (dirty[0] if dirty else None)


def source_tensor_list(ckpt_tensors: Iterable[Any]) -> dict[str, Any]:
    """What the manifest records of the source's tensors: names, types and shapes in order,
    their count and the sha256 of that list (so a removed or renamed entry is caught)."""
    listed = [{"name": t.name, "type": t.type.name, "shape": list(t.shape)} for t in ckpt_tensors]
    return {"count": len(listed), "sha256": sha256_bytes(_canonical(listed)), "tensors": listed}


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


#: Bounds no real bundle reaches (a tensor dimension, a tensor's element count, a byte count
#: or offset): beyond them numpy's int64 arithmetic would overflow.
MAX_DIM = 1 << 32
MAX_ELEMENTS = 1 << 48
MAX_BYTES = 1 << 50


def _check_manifest_values(m: dict[str, Any], mpath: Path) -> None:
    """Value checks beyond the schema (found by fuzzing, tests/fuzz/): sizes within the
    bounds above, ledger and source fields of the right type (the hash fields are checked where
    each entry is parsed, :meth:`TensorEntry.from_json`)."""
    for key in ("source", "model", "options", "target"):
        if key in m and not isinstance(m[key], dict):
            raise FormatError(f"field {key!r} must be an object", path=mpath)
    files = m.get("source", {}).get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise FormatError("field 'source.files' must be a list of objects", path=mpath)
    for f in files:
        if not isinstance(f.get("sha256", ""), (str, type(None))) or not isinstance(f.get("bytes", 0), (int, type(None))):
            raise FormatError("source.files entries need a string sha256 and an integer bytes", path=mpath)
    for t in m["tensors"]:
        where = f"tensor {t['name']!r}"
        if any(d > MAX_DIM for d in t["shape"]) or math.prod(t["shape"]) > MAX_ELEMENTS:
            raise FormatError(f"shape {t['shape']} is beyond any real tensor", path=mpath, where=where)
        if t["bytes"] > MAX_BYTES:
            raise FormatError(f"{t['bytes']} bytes is beyond any real tensor", path=mpath, where=where)
        for rname, r in t["regions"].items():
            if r["offset"] > MAX_BYTES or r["bytes"] > MAX_BYTES:
                raise FormatError("offset or size beyond any real tensor", path=mpath, where=f"{where} region {rname!r}")
        led = t["ledger"]
        for key in ("requested", "written"):
            if not isinstance(led[key], str):
                raise FormatError(f"ledger field {key!r} must be a string", path=mpath, where=where)
        if not isinstance(led["reason"], (str, type(None))):
            raise FormatError("ledger field 'reason' must be a string or null", path=mpath, where=where)
        if "error" in led and not isinstance(led["error"], (dict, type(None))):
            raise FormatError("ledger field 'error' must be an object", path=mpath, where=where)


def _no_duplicates(path):
    def hook(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                raise FormatError(f"duplicate key {k!r}", path=path)
            d[k] = v
        return d

    return hook


def open_bundle(path: str | os.PathLike) -> Bundle:
    return Bundle(path)
