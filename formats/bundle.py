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

What the manifest holds (entries, regions, names, the checksum) is ``formats/bundle_manifest.py``,
the writer ``formats/bundle_writer.py``; every name stays importable from here.
"""

from __future__ import annotations

import json
import logging
import math
import mmap
import os
import stat
from pathlib import Path
from typing import Any, Optional

import numpy as np

from . import digests, guard
from .atomic import sha256_bytes, sha256_file
from .bundle_manifest import (
    _LOSSLESS_ACTIONS,
    ALIGN,
    CHECKSUM_KEY,
    DTYPES,
    FORMAT,
    MANIFEST,
    READS,
    SIGNATURE,
    SOURCE_DIR,
    TENSOR_DIR,
    VERSION,
    Region,
    TensorEntry,
    TensorFile,
    _align,
    _canonical,
    check_tensor_name,
    dtype_name,
    hash_async,
    layout_regions,
    manifest_checksum_problem,
    manifest_text,
    refuse_nonfinite,
    source_tensor_list,
    tensor_file_name,
)
from .bundle_writer import BundleWriter, MappedTensor, PendingTensorFile
from .common import tensor_named
from .digests import Digest
from .errors import BadInputError, FormatError

log = logging.getLogger(__name__)

#: the module's names before it was split in three (manifest, writer, reader): all importable here
__all__ = [
    "FORMAT",
    "VERSION",
    "READS",
    "MANIFEST",
    "ALIGN",
    "TENSOR_DIR",
    "SOURCE_DIR",
    "SIGNATURE",
    "DTYPES",
    "dtype_name",
    "check_tensor_name",
    "tensor_file_name",
    "Region",
    "TensorFile",
    "MappedTensor",
    "PendingTensorFile",
    "TensorEntry",
    "layout_regions",
    "hash_async",
    "CHECKSUM_KEY",
    "refuse_nonfinite",
    "manifest_text",
    "manifest_checksum_problem",
    "BundleWriter",
    "Bundle",
    "damage_message",
    "UNLISTED",
    "source_tensor_list",
    "MAX_DIM",
    "MAX_ELEMENTS",
    "MAX_BYTES",
    "open_bundle",
    "sha256_bytes",
    "sha256_file",
]


# =========================================================================================
# Reading
# =========================================================================================
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
        return tensor_named(self._by_name, name, self.path, " in the bundle")

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
    def gguf_metadata(self) -> dict[str, Any]:
        """A GGUF-sourced bundle's key/values (key -> value, as ``GGUFFile.metadata`` gives them),
        read from ``source/gguf-header.bin``, the source's header bytes that ``export`` writes
        back (FORMAT.md §5). A bundle that has only ``source/metadata.json`` (the decoded copy
        written before 2026-12-02) reads from it. BadInputError when it has neither."""
        from . import gguf

        root = self.path / "source"
        header, decoded = root / "gguf-header.bin", root / "metadata.json"
        if header.is_file():
            g = gguf.open_header(header)
            try:
                return dict(g.metadata)
            finally:
                g.close()
        if decoded.is_file():
            doc = guard.loads_json(decoded.read_bytes(), path=decoded)
            return {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in doc.items()}
        raise BadInputError("GGUF-sourced bundle has no source/gguf-header.bin (nor the metadata.json of "
                            "older bundles)", path=self.path)

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
