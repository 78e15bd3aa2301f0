"""What a panelpack bundle's manifest holds (docs/FORMAT.md, "Bundle"), shared by the writer
(formats/bundle_writer.py) and the reader (formats/bundle.py): the format's constants and
dtype names, tensor and file names, :class:`Region` / :class:`TensorFile` / :class:`TensorEntry`
and their JSON, the manifest's text and checksum, and the shared hashing threads."""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from . import digests, qtypes
from .atomic import sha256_bytes
from .errors import BadInputError, FormatError

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


_REQUIRED_TENSOR_KEYS = {  # and the file's digest, named after the bundle's algorithm
    "name": str, "shape": list, "type": str, "layout": str, "file": str, "bytes": int,
    "regions": dict, "params": dict, "ledger": dict,
}
_REQUIRED_REGION_KEYS = {"offset": int, "bytes": int, "dtype": str, "shape": list}


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
# Hashing on the shared threads (the writer's digests, and the reader's structure check)
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


def source_tensor_list(ckpt_tensors: Iterable[Any]) -> dict[str, Any]:
    """What the manifest records of the source's tensors: names, types and shapes in order,
    their count and the sha256 of that list (so a removed or renamed entry is caught)."""
    listed = [{"name": t.name, "type": t.type.name, "shape": list(t.shape)} for t in ckpt_tensors]
    return {"count": len(listed), "sha256": sha256_bytes(_canonical(listed)), "tensors": listed}


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


#: Bounds no real bundle reaches (a tensor dimension, a tensor's element count, a byte count
#: or offset): beyond them numpy's int64 arithmetic would overflow.
