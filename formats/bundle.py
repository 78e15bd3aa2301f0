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
import hashlib
import json
import logging
import math
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from .errors import BadInputError, FormatError, OutputError
from . import guard, qtypes

log = logging.getLogger(__name__)

FORMAT = "panelpack.bundle"
VERSION = 1
MANIFEST = "manifest.json"
ALIGN = 64
TENSOR_DIR = "tensors"
SOURCE_DIR = "source"

# dtype names used in manifests -> numpy dtypes (little-endian, explicit)
DTYPES: dict[str, str] = {
    "u8": "<u1", "i8": "<i1", "u16": "<u2", "i16": "<i2", "f16": "<f2",
    "u32": "<u4", "i32": "<i4", "f32": "<f4", "f64": "<f8", "i64": "<i8",
}
_NP_TO_NAME = {np.dtype(v).str: k for k, v in DTYPES.items() if k != "f16"}
_NP_TO_NAME[np.dtype("<f2").str] = "f16"

_SAFE_FILE = re.compile(r"^[A-Za-z0-9._+-]+$")
_HASH_CHUNK = 8 << 20


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


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_HASH_CHUNK)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data) -> str:
    return hashlib.sha256(memoryview(data).cast("B") if not isinstance(data, bytes) else data).hexdigest()


def _align(x: int, a: int = ALIGN) -> int:
    return (x + a - 1) // a * a


@dataclass(frozen=True)
class Region:
    name: str
    offset: int
    nbytes: int
    dtype: str  # manifest dtype name
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "bytes": self.nbytes, "dtype": self.dtype, "shape": list(self.shape)}


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
def _partial_prefix(out: Path) -> str:
    return f".{out.name}.partial-"


def _remove_stale_partials(out: Path) -> None:
    """Remove partial directories left by killed writers (their pid no longer runs)."""
    prefix = _partial_prefix(out)
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return
    for p in entries:
        if not p.name.startswith(prefix):
            continue
        pid_s = p.name[len(prefix):].split("-", 1)[0]
        try:
            pid = int(pid_s)
            os.kill(pid, 0)
            continue  # still running: not ours to remove
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError):
            continue
        log.info("removing stale partial bundle %s", p)
        shutil.rmtree(p, ignore_errors=True)


def _output_error(e: OSError, what: str) -> OutputError:
    if e.errno == errno.ENOSPC:
        return OutputError(f"{what}: no space left on device")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"{what}: permission denied (read-only folder?)")
    return OutputError(f"{what}: {e.strerror or e}")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_HASH_POOL: list = []


def hash_async(fn, *args):
    """Run a hashing function on the shared hash threads; returns a Future."""
    if not _HASH_POOL:
        from concurrent.futures import ThreadPoolExecutor

        _HASH_POOL.append(ThreadPoolExecutor(max_workers=2, thread_name_prefix="panelpack-sha256"))
    return _HASH_POOL[0].submit(fn, *args)


def _done(value):
    from concurrent.futures import Future

    f: Future = Future()
    f.set_result(value)
    return f


def _digest(data) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_digest(layout: list[Region], views: list) -> str:
    """sha256 of the tensor file made of ``views`` at ``layout``'s offsets, zero-padded."""
    h = hashlib.sha256()
    pos = 0
    for reg, data in zip(layout, views):
        if reg.offset > pos:
            h.update(bytes(reg.offset - pos))
        h.update(data)
        pos = reg.offset + reg.nbytes
    return h.hexdigest()


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
    diffable, and written by json's C encoder, which pretty-printing would bypass)."""
    refuse_nonfinite(doc)
    enc = json.JSONEncoder(allow_nan=False, separators=(", ", ": "))
    lines = []
    for key, value in doc.items():
        if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            items = ",\n".join("  " + enc.encode(x) for x in value)
            lines.append(f" {enc.encode(key)}: [\n{items}\n ]")
        else:
            lines.append(f" {enc.encode(key)}: {enc.encode(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


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


class BundleWriter:
    """Builds a bundle under a temporary name and renames it into place on :meth:`commit`.

    Use as a context manager: leaving the block with an exception (including
    KeyboardInterrupt) calls :meth:`abort`, which removes everything written so far.
    """

    def __init__(self, out: str | os.PathLike, force: bool = False):
        self.out = Path(out)
        self.force = force
        if self.out.exists() and not force:
            raise OutputError(f"{self.out}: already exists (pass --force to replace it)")
        if self.out.exists() and not self.out.is_dir():
            raise OutputError(f"{self.out}: exists and is not a bundle directory")
        parent = self.out.parent if str(self.out.parent) else Path(".")
        if not parent.is_dir():
            raise OutputError(f"{parent}: output folder does not exist")
        _remove_stale_partials(self.out)
        self.tmp = parent / f"{_partial_prefix(self.out)}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            (self.tmp / TENSOR_DIR).mkdir(parents=True)
            (self.tmp / SOURCE_DIR).mkdir()
        except OSError as e:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise _output_error(e, f"cannot create the bundle in {parent}") from None
        self._done = False
        self._unsynced: list[Path] = []  # tensor files written, fsynced together in commit()
        self.tensors: list[dict[str, Any]] = []
        self.side_files: list[dict[str, Any]] = []

    # -- tensors --------------------------------------------------------------------------
    def write_tensor(self, index: int, name: str, regions: Mapping[str, np.ndarray],
                     known_hashes: Optional[list[Optional[str]]] = None) -> dict[str, Any]:
        """Write one tensor file from its regions (in order); returns the manifest fields
        ``file``, ``bytes``, ``sha256``, ``regions``. ``known_hashes`` may give the sha256 of
        some regions already computed by the caller (e.g. row-major blocks = source bytes)."""
        rel = tensor_file_name(index, name)
        specs = []
        arrays = []
        for rname, arr in regions.items():
            a = np.ascontiguousarray(arr)
            specs.append((rname, dtype_name(a.dtype), a.shape))
            arrays.append(a)
        layout, size = layout_regions(specs)
        views = [memoryview(a.reshape(-1).view(np.uint8)) for a in arrays]
        # the file hash and the region hashes run on the hash threads (hashlib releases the
        # GIL) while this thread writes the same bytes; a file that is one region at offset 0
        # (row-major blocks) has one hash for both
        region_hashes = [hash_async(_digest, v) if known is None else _done(known)
                         for v, known in zip(views, list(known_hashes or ()) + [None] * len(views))]
        file_hash = region_hashes[0] if len(views) == 1 else hash_async(_file_digest, layout, views)
        path = self.tmp / rel
        try:
            with open(path, "wb") as f:
                pos = 0
                for reg, data in zip(layout, views):
                    if reg.offset > pos:
                        f.write(bytes(reg.offset - pos))
                    f.write(data)
                    pos = reg.offset + reg.nbytes
            self._unsynced.append(path)
        except OSError as e:
            raise _output_error(e, f"writing {path}") from None
        return {
            "file": rel,
            "bytes": size,
            "sha256": file_hash.result(),
            "regions": {r.name: dict(r.to_json(), sha256=hx.result()) for r, hx in zip(layout, region_hashes)},
        }

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
                shutil.copyfile(src, dst)
            else:
                with open(dst, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            raise _output_error(e, f"writing {dst}") from None
        entry = {"file": f"{SOURCE_DIR}/{Path(*parts).as_posix()}", "bytes": dst.stat().st_size, "sha256": sha256_file(dst)}
        self.side_files.append(entry)
        return entry

    # -- finishing ------------------------------------------------------------------------
    def commit(self, manifest: dict[str, Any]) -> Path:
        """Write ``manifest.json``, fsync, and rename the bundle into place."""
        doc = dict(manifest)
        doc.setdefault("format", FORMAT)
        doc.setdefault("version", VERSION)
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
                _fsync_dir(d)
            old = None
            if self.out.exists():
                if not self.force:  # appeared while we were writing
                    raise OutputError(f"{self.out}: already exists (pass --force to replace it)")
                old = self.out.parent / f"{_partial_prefix(self.out)}{os.getpid()}-old-{secrets.token_hex(4)}"
                os.rename(self.out, old)
            os.rename(self.tmp, self.out)
            _fsync_dir(self.out.parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except OSError as e:
            self.abort()
            raise _output_error(e, f"finishing {self.out}") from None
        self._done = True
        log.info("wrote bundle %s", self.out)
        return self.out

    def abort(self) -> None:
        if not self._done:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self._done = True

    def __enter__(self) -> "BundleWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or not self._done:
            self.abort()


# =========================================================================================
# Reading
# =========================================================================================
_REQUIRED_TENSOR_KEYS = {
    "name": str, "shape": list, "type": str, "layout": str, "file": str, "bytes": int,
    "sha256": str, "regions": dict, "params": dict, "ledger": dict,
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
        _check_manifest_values(self.manifest, mpath)
        self._by_name = {t["name"]: t for t in self.manifest["tensors"]}

    # -- schema -----------------------------------------------------------------------------
    def _validate(self, mpath: Path) -> None:
        m = self.manifest
        if not isinstance(m, dict):
            raise FormatError("manifest is not a JSON object", path=mpath)
        if m.get("format") != FORMAT:
            raise FormatError(f"field 'format' is {m.get('format')!r}, expected {FORMAT!r}", path=mpath)
        if m.get("version") != VERSION:
            raise FormatError(f"unsupported bundle version {m.get('version')!r} (this panelpack reads {VERSION})", path=mpath)
        tensors = m.get("tensors")
        if not isinstance(tensors, list):
            raise FormatError("field 'tensors' must be a list", path=mpath)
        seen_names, seen_files = set(), set()
        for i, t in enumerate(tensors):
            where = f"tensors[{i}]"
            if not isinstance(t, dict):
                raise FormatError("must be an object", path=mpath, where=where)
            for key, typ in _REQUIRED_TENSOR_KEYS.items():
                if key not in t:
                    raise FormatError(f"missing field {key!r}", path=mpath, where=where)
                if not isinstance(t[key], typ) or (typ is int and isinstance(t[key], bool)):
                    raise FormatError(f"field {key!r} must be {typ.__name__}", path=mpath, where=where)
            name = t["name"]
            where = f"tensor {name!r}"
            check_tensor_name(name, where=f"{mpath}: {where}")
            if name in seen_names:
                raise FormatError("listed twice", path=mpath, where=where)
            seen_names.add(name)
            f = t["file"]
            fparts = f.split("/")
            if len(fparts) != 2 or fparts[0] != TENSOR_DIR or not _SAFE_FILE.match(fparts[1]) or fparts[1] in (".", ".."):
                raise FormatError(f"file {f!r} is not a plain name under {TENSOR_DIR}/", path=mpath, where=where)
            if f in seen_files:
                raise FormatError(f"file {f!r} is used by two tensors", path=mpath, where=where)
            seen_files.add(f)
            if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in t["shape"]):
                raise FormatError(f"shape {t['shape']!r} must be positive integers", path=mpath, where=where)
            try:
                qtypes.get(t["type"])
            except BadInputError as e:
                raise FormatError(e.detail, path=mpath, where=where) from None
            if t["bytes"] < 0:
                raise FormatError("negative byte count", path=mpath, where=where)
            for rname, r in t["regions"].items():
                rwhere = f"{where} region {rname!r}"
                if not isinstance(r, dict):
                    raise FormatError("must be an object", path=mpath, where=rwhere)
                for key, typ in _REQUIRED_REGION_KEYS.items():
                    if not isinstance(r.get(key), typ) or isinstance(r.get(key), bool):
                        raise FormatError(f"field {key!r} missing or not {typ.__name__}", path=mpath, where=rwhere)
                if r["dtype"] not in DTYPES:
                    raise FormatError(f"unknown dtype {r['dtype']!r}", path=mpath, where=rwhere)
                if r["offset"] < 0 or r["bytes"] < 0:
                    raise FormatError("negative offset or size", path=mpath, where=rwhere)
                if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in r["shape"]):
                    raise FormatError("shape must be non-negative integers", path=mpath, where=rwhere)
                want = math.prod(r["shape"]) * np.dtype(DTYPES[r["dtype"]]).itemsize  # Python ints: no overflow
                if want != r["bytes"]:
                    raise FormatError(f"shape {r['shape']} of {r['dtype']} is {want} bytes, region says {r['bytes']}",
                                      path=mpath, where=rwhere)
            led = t["ledger"]
            if not all(k in led for k in ("requested", "written", "reason")):
                raise FormatError("ledger needs requested, written and reason", path=mpath, where=where)
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
    def tensors(self) -> list[dict[str, Any]]:
        return self.manifest["tensors"]

    def tensor(self, name: str) -> dict[str, Any]:
        try:
            return self._by_name[name]
        except KeyError:
            raise BadInputError(f"no tensor named {name!r} in the bundle", path=self.path) from None

    def file_path(self, entry: dict[str, Any]) -> Path:
        return self.path / entry["file"]

    def regions(self, name_or_entry) -> dict[str, np.ndarray]:
        """Read-only memory-mapped views of a tensor's regions, typed and shaped."""
        t = self.tensor(name_or_entry) if isinstance(name_or_entry, str) else name_or_entry
        path = self.file_path(t)
        size = path.stat().st_size if path.exists() else -1
        if size != t["bytes"]:
            raise FormatError(f"file is {size} bytes, manifest says {t['bytes']}", path=path)
        mm = np.memmap(path, dtype=np.uint8, mode="r") if size > 0 else np.zeros(0, np.uint8)
        out = {}
        for rname, r in t["regions"].items():
            if r["offset"] + r["bytes"] > size:
                raise FormatError(f"region {rname!r} ends at {r['offset'] + r['bytes']}, past the file end {size}", path=path)
            view = mm[r["offset"]:r["offset"] + r["bytes"]]
            out[rname] = view.view(np.dtype(DTYPES[r["dtype"]])).reshape(r["shape"])
        return out

    # -- structure check (verify level "structure") ----------------------------------------
    def check_structure(self, hashes: bool = True) -> list[tuple[str, str]]:
        """Problems with the files as ``(where, message)``; empty when all is well."""
        problems: list[tuple[str, str]] = []
        for t in self.tensors:
            path = self.file_path(t)
            where = t["name"]
            if not path.is_file():
                problems.append((where, f"file {t['file']} is missing"))
                continue
            size = path.stat().st_size
            if size != t["bytes"]:
                problems.append((where, f"file {t['file']} is {size} bytes, manifest says {t['bytes']}"))
                continue
            end = 0
            for rname, r in sorted(t["regions"].items(), key=lambda kv: kv[1]["offset"]):
                if r["offset"] % ALIGN:
                    problems.append((where, f"region {rname!r} offset {r['offset']} is not a multiple of {ALIGN}"))
                if r["offset"] < end:
                    problems.append((where, f"region {rname!r} overlaps the previous region"))
                if r["offset"] + r["bytes"] > size:
                    problems.append((where, f"region {rname!r} ends past the end of {t['file']}"))
                end = max(end, r["offset"] + r["bytes"])
            if hashes:
                got = sha256_file(path)
                if got != t["sha256"]:
                    problems.append((where, f"sha256 of {t['file']} is {got[:16]}..., manifest says {t['sha256'][:16]}..."
                                            + _bad_regions(path, t)))
        for s in self.manifest.get("source_files", []):
            path = self.path / s["file"]
            if not path.is_file():
                problems.append((s["file"], "source file is missing"))
            elif hashes and sha256_file(path) != s["sha256"]:
                problems.append((s["file"], "sha256 does not match the manifest"))
        return problems


def _bad_regions(path: Path, t: dict[str, Any]) -> str:
    """Name the regions whose own sha256 no longer matches (where the damage is)."""
    bad = []
    with open(path, "rb") as f:
        for rname, r in t["regions"].items():
            if "sha256" not in r:
                continue
            f.seek(r["offset"])
            if hashlib.sha256(f.read(r["bytes"])).hexdigest() != r["sha256"]:
                bad.append(rname)
    return f" (damaged region: {', '.join(bad)})" if bad else " (damage outside the regions: padding)"


#: Bounds no real bundle reaches (a tensor dimension, a tensor's element count, a byte count
#: or offset): beyond them numpy's int64 arithmetic would overflow.
MAX_DIM = 1 << 32
MAX_ELEMENTS = 1 << 48
MAX_BYTES = 1 << 50
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _check_manifest_values(m: dict[str, Any], mpath: Path) -> None:
    """Value checks beyond the schema (found by fuzzing, tests/fuzz/): sizes within the
    bounds above, optional hashes that are hashes, ledger and source fields of the right type."""
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
            if "sha256" in r and not (isinstance(r["sha256"], str) and _HEX64.match(r["sha256"])):
                raise FormatError("region sha256 is not a sha256", path=mpath, where=f"{where} region {rname!r}")
        if not _HEX64.match(t["sha256"]):
            raise FormatError("field 'sha256' is not a sha256 (64 hex digits)", path=mpath, where=where)
        for key in ("blocks_sha256", "source_sha256"):
            if key in t and not (isinstance(t[key], str) and _HEX64.match(t[key])):
                raise FormatError(f"field {key!r} is not a sha256 (64 hex digits)", path=mpath, where=where)
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
