"""The shipping form of a bundle: a deterministic tar compressed with zstd (``.ppk.tar.zst``).

Deterministic means: the same bundle directory always gives the same archive bytes. Entries
are sorted by path; every header has mtime 0, uid/gid 0, empty user/group names, mode 0644
for files and 0755 for folders; PAX format (long names get a PAX record, nothing else does).
zstd's multi-threaded mode (``threads >= 1``) produces the same frames whatever the number of
worker threads, so compression uses every core without giving up reproducibility.

Unpacking restores the directory byte for byte. It accepts only regular files and folders
with plain relative paths (no absolute paths, no ``..``, no links or devices), extracts into
a hidden temporary folder next to the output and renames it into place when complete.
"""

from __future__ import annotations

import logging
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import zstandard

from . import atomic
from .errors import BadInputError, FormatError

log = logging.getLogger(__name__)

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SUFFIX = ".ppk.tar.zst"
_CHUNK = 4 << 20


@dataclass(frozen=True)
class ArchiveResult:
    path: Path
    files: int
    bytes_in: int
    bytes_out: int


def is_archive(path: str | os.PathLike) -> bool:
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as f:
        return f.read(4) == ZSTD_MAGIC


def _entries(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        d = Path(dirpath)
        for name in dirnames + filenames:
            p = d / name
            if p.is_symlink() or not (p.is_file() or p.is_dir()):
                raise BadInputError(f"{p.relative_to(root)} is not a regular file or folder", path=root)
            out.append(p)
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def _tarinfo(root: Path, p: Path) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(p.relative_to(root).as_posix())
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    if p.is_dir():
        ti.type = tarfile.DIRTYPE
        ti.mode = 0o755
    else:
        ti.type = tarfile.REGTYPE
        ti.mode = 0o644
        ti.size = p.stat().st_size
    return ti


#: The size-bomb rule of :func:`unpack`: the sizes an archive's members declare may add up to
#: at most ``LARGE_RATIO`` times the archive's own size, or ``LARGE_FLOOR`` bytes, whichever
#: is larger, unless ``allow_large``. Bundles compress by ~1.1x (SmolLM2 panel64 1.12x, the
#: demo 1.11x), so this only refuses archives that are mostly runs of zeros.
LARGE_RATIO = 64
LARGE_FLOOR = 64 << 20


def structure_problems(b) -> list[tuple[str, str]]:
    """The check :func:`pack` and :func:`unpack` run when given none: every file of the bundle
    against its manifest (:meth:`Bundle.check_structure`, extra files included). The commands
    pass verify's whole structure level (``panelpack.verify.gate``), which adds each tensor's
    layout contract."""
    return b.check_structure(hashes=True)


def _check_bundle_for_pack(root: Path, out: Path, check, allow_extra: bool) -> list[str]:
    """pack ships only what verify's structure level would accept: a valid manifest, every
    file present with its size and digest, regions in bounds, no links, nothing unlisted
    (VerificationError); returns the unlisted paths (``allow_extra``: left out, with a warning)."""
    from . import guard
    from .bundle import UNLISTED, Bundle, damage_message
    from .errors import VerificationError

    if not (root / "manifest.json").is_file():
        raise BadInputError("not a bundle directory (no manifest.json)", path=root)
    guard.check_disjoint(root, out, "the bundle", "the archive")
    b = Bundle(root)
    problems = (check or structure_problems)(b)
    extra = [w for w, m in problems if m == UNLISTED]
    if allow_extra:
        problems = [(w, m) for w, m in problems if m != UNLISTED]
    if problems:
        raise VerificationError(damage_message(root, "packing", problems))
    for p in extra:
        log.warning("%s: %s is not listed in the manifest: left out of the archive", root, p)
    return extra


def pack(bundle_dir: str | os.PathLike, out: str | os.PathLike, force: bool = False,
         level: int = 9, threads: int = -1, check=None, allow_extra: bool = False) -> ArchiveResult:
    """Write ``bundle_dir`` as a deterministic ``.tar.zst`` to ``out`` (atomically), after
    ``check(bundle) -> [(where, problem)]`` (default :func:`structure_problems`) found nothing.
    Files the manifest does not list are refused, or with ``allow_extra`` left out."""
    root = Path(bundle_dir)
    extra = _check_bundle_for_pack(root, Path(out), check, allow_extra)
    out = atomic.check_target(out, force)
    skip = {root / p.rstrip("/") for p in extra}
    entries = [p for p in _entries(root) if not any(p == s or s in p.parents for s in skip)]
    threads = threads if threads != 0 else 1
    cctx = zstandard.ZstdCompressor(level=level, threads=threads, write_checksum=True)
    bytes_in = 0
    with atomic.atomic_file(out, force=force) as raw:
        with cctx.stream_writer(raw, closefd=False) as zw:
            with tarfile.open(fileobj=zw, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for p in entries:
                    ti = _tarinfo(root, p)
                    if ti.isdir():
                        tar.addfile(ti)
                    else:
                        with open(p, "rb") as f:
                            tar.addfile(ti, f)
                        bytes_in += ti.size
            zw.flush(zstandard.FLUSH_FRAME)
    res = ArchiveResult(out, sum(1 for p in entries if p.is_file()), bytes_in, out.stat().st_size)
    log.info("packed %s: %d files, %d -> %d bytes", out, res.files, res.bytes_in, res.bytes_out)
    return res


def _safe_member_path(name: str, archive: Path) -> Path:
    p = Path(name)
    if not name or p.is_absolute() or any(part in ("..", "") for part in name.split("/")) or "\\" in name:
        raise FormatError(f"member {name!r} would escape the output folder", path=archive)
    return p


def _check_unpack_args(archive: Path, out: Path, force: bool) -> None:
    from . import guard

    if archive.is_dir():
        raise BadInputError("is a folder, not a .ppk.tar.zst archive (a bundle folder needs no unpacking)",
                            path=archive)
    if not archive.is_file():
        raise BadInputError("no such archive", path=archive)
    guard.check_disjoint(archive, out, "the archive", "the output folder")
    if force:
        guard.check_replaceable_bundle(out)


def _size_rule(member: tarfile.TarInfo, declared: int, archive: Path, allow_large: bool) -> None:
    """Refuse an archive whose members declare far more bytes than it could hold
    (see :data:`LARGE_RATIO`); ``declared`` includes ``member``."""
    limit = max(LARGE_RATIO * archive.stat().st_size, LARGE_FLOOR)
    if declared > limit and not allow_large:
        raise FormatError(f"members declare {declared:,} bytes (at {member.name!r}), more than {LARGE_RATIO}x the "
                          f"archive's size or {LARGE_FLOOR >> 20} MiB: refusing a likely decompression bomb "
                          "(pass --allow-large if it is legitimate)", path=archive)


def _verify_unpacked(tmp: Path, archive: Path, check) -> None:
    """What unpack wrote must be a bundle that ``check`` accepts (VerificationError)."""
    from .bundle import Bundle, damage_message
    from .errors import VerificationError

    if not (tmp / "manifest.json").is_file():
        raise FormatError("archive holds no manifest.json: not a bundle", path=archive)
    try:
        problems = (check or structure_problems)(Bundle(tmp))
    except BadInputError as e:  # named after the archive, not the hidden temporary folder
        raise type(e)(f"the bundle inside: {e.detail}", path=archive) from None
    if problems:
        raise VerificationError(damage_message(archive, "unpacking", problems) + "; nothing written")


def unpack(archive: str | os.PathLike, out: str | os.PathLike, force: bool = False,
           allow_large: bool = False, check=None) -> ArchiveResult:
    """Restore a ``.ppk.tar.zst`` into the folder ``out`` (atomically), checked by ``check``
    (default :func:`structure_problems`) before it appears; refuses size bombs
    (:data:`LARGE_RATIO`) unless ``allow_large``."""
    archive = Path(archive)
    _check_unpack_args(archive, Path(out), force)
    if not is_archive(archive):
        raise FormatError("not a zstd-compressed bundle archive (bad magic)", path=archive)
    out = atomic.check_target(out, force)
    files = bytes_total = 0
    try:
        with atomic.atomic_dir(out, force=force) as tmp:
            dctx = zstandard.ZstdDecompressor()
            with open(archive, "rb") as raw, dctx.stream_reader(raw) as zr:
                with tarfile.open(fileobj=zr, mode="r|") as tar:
                    for m in tar:
                        rel = _safe_member_path(m.name, archive)
                        _size_rule(m, bytes_total + m.size, archive, allow_large)
                        dst = tmp / rel
                        if m.isdir():
                            dst.mkdir(parents=True, exist_ok=True)
                        elif m.isreg():
                            dst.parent.mkdir(parents=True, exist_ok=True)
                            src = tar.extractfile(m)
                            if src is None:  # pragma: no cover - a regular member always has a file object
                                raise FormatError(f"member {m.name!r} has no data", path=archive)
                            with open(dst, "wb") as f:
                                while True:
                                    chunk = src.read(_CHUNK)
                                    if not chunk:
                                        break
                                    f.write(chunk)
                            files += 1
                            bytes_total += m.size
                        else:
                            raise FormatError(f"member {m.name!r} is not a regular file or folder", path=archive)
            _verify_unpacked(tmp, archive, check)
    except (tarfile.TarError, zstandard.ZstdError, EOFError) as e:
        raise FormatError(f"corrupt archive: {e}", path=archive) from None
    return ArchiveResult(out, files, bytes_total, bytes_total)
