"""The one way panelpack puts a file or a folder at a target path, and the one sha256 helper.

Every writer (bundle, GGUF, safetensors, archive pack and unpack, export, verify reports,
cactus folders) goes through :func:`atomic_file` or :func:`atomic_dir`:

1. stale partials of the same target whose owning process is dead are removed first;
2. the output is built under a hidden temporary name *beside* the target
   (``.<name>.partial-<pid>-<random>``, so the rename stays on one file system);
3. the file (or every file of the folder) is fsynced, then the folder holding it;
4. one ``rename`` puts it at the target; with ``force`` an existing target is first moved
   aside (``.<name>.old-<pid>-<random>``) and removed after the rename;
5. on any failure (an exception, Ctrl-C) the temporary is removed and nothing is left at the
   target; a failure of that clean-up itself (a read-only folder) is logged, never raised
   over the original error.

A SIGKILL cannot run step 5: the next write to the same target removes what it left
(recognisable by name and by its dead pid). Errors are :class:`OutputError` naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import IO, Callable, Iterator, Optional, TypeVar

from . import digests
from .errors import OutputError

log = logging.getLogger(__name__)

T = TypeVar("T")

PARTIAL = "partial"
OLD = "old"


def temp_name(target: Path, kind: str = PARTIAL) -> Path:
    """``.<name>.<kind>-<pid>-<random>`` beside ``target``."""
    return target.parent / f".{target.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def _owner_alive(name: str, prefix: str) -> bool:
    pid_s = name[len(prefix):].split("-", 1)[0]
    try:
        os.kill(int(pid_s), 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError, OverflowError):
        return True  # not one of ours, or a pid we may not signal: leave it
    return True


def remove_quietly(path: Path) -> None:
    """Remove a file or a folder tree; log (never raise) when it cannot be removed."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("could not remove temporary %s: %s", path, e.strerror or e)


def sweep_stale(target: str | os.PathLike) -> int:
    """Remove the partials (and moved-aside old copies) of ``target`` left by dead processes.
    Returns how many were removed."""
    target = Path(target)
    removed = 0
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return 0
    for kind in (PARTIAL, OLD):
        prefix = f".{target.name}.{kind}-"
        for p in entries:
            if p.name.startswith(prefix) and not _owner_alive(p.name, prefix):
                log.info("removing stale %s left by a killed run: %s", kind, p)
                remove_quietly(p)
                removed += 1
    return removed


def output_error(e: OSError, path: str | os.PathLike, what: str = "cannot write") -> OutputError:
    """Our :class:`OutputError` for an ``OSError`` met while writing ``path``."""
    p = os.fspath(path)
    if e.errno == errno.ENOSPC:
        return OutputError(f"{p}: {what}: no space left on device")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"{p}: {what}: permission denied (read-only folder?)")
    if e.errno == errno.ENOENT:
        return OutputError(f"{p}: {what}: the folder does not exist")
    return OutputError(f"{p}: {what}: {e.strerror or e}")


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a folder (its entries); silently skipped where the platform cannot."""
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


def fsync_tree(root: Path) -> None:
    """fsync every file and folder below ``root`` (and ``root``)."""
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


def check_target(target: str | os.PathLike, force: bool) -> Path:
    """The target as a Path; refuse an existing one without ``force`` (before any work)."""
    target = Path(target)
    if target.is_symlink() or target.exists():
        if not force:
            raise OutputError(f"{target}: already exists (use --force to replace it)")
    if not target.parent.is_dir():
        raise OutputError(f"{target}: cannot write: the folder {target.parent} does not exist")
    return target


def publish(tmp: Path, target: Path, force: bool) -> None:
    """Rename ``tmp`` to ``target``. Without ``force`` an existing target is never replaced
    (another writer that finished first wins; this one fails with "already exists"). With
    ``force`` the existing target is moved aside first, so the target is always one complete
    output, never a mix, even when several forced writers race."""
    is_dir = tmp.is_dir()
    for _attempt in range(8):
        if not force:
            try:
                if is_dir:
                    os.rename(tmp, target)  # fails (ENOTEMPTY/EEXIST/ENOTDIR) on a non-empty target
                else:
                    os.link(tmp, target)  # fails with EEXIST: never replaces
                    os.unlink(tmp)
                return
            except FileExistsError:
                raise OutputError(f"{target}: already exists (use --force to replace it)") from None
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                    raise OutputError(f"{target}: already exists (use --force to replace it)") from None
                if e.errno in (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP) and not is_dir:
                    # file systems without hard links: rename after an existence check
                    if target.exists() or target.is_symlink():
                        raise OutputError(f"{target}: already exists (use --force to replace it)") from None
                    os.rename(tmp, target)
                    return
                raise
        old: Optional[Path] = None
        try:
            st: Optional[os.stat_result] = os.lstat(target)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                old = temp_name(target, OLD)
                try:
                    os.rename(target, old)
                except FileNotFoundError:
                    old = None  # a racing writer moved it first
            elif not is_dir:
                os.replace(tmp, target)  # a file over a file: rename replaces atomically
                return
            else:
                try:
                    target.unlink()  # a file where a folder goes
                except FileNotFoundError:
                    pass
        try:
            os.rename(tmp, target)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                # a racing forced writer put its own output there first: move it aside again
                if old is not None:
                    remove_quietly(old)
                continue
            raise
        if old is not None:
            remove_quietly(old)
        return
    raise OutputError(f"{target}: gave up replacing it: other writers keep replacing it too")


@contextlib.contextmanager
def _built_beside(target: str | os.PathLike, force: bool, create: Callable[[Path], T]) -> Iterator[tuple[Path, T]]:
    """The shared frame of :func:`atomic_dir` and :func:`atomic_file`: check the target, sweep
    stale partials, ``create(tmp)`` the temporary, and on any failure remove it; the caller's
    block builds it and makes it durable, then :func:`publish` puts it in place."""
    target = check_target(target, force)
    sweep_stale(target)
    tmp = temp_name(target)
    try:
        handle = create(tmp)
    except OSError as e:
        raise output_error(e, target) from None
    try:
        yield tmp, handle
        publish(tmp, target, force)
        fsync_dir(target.parent)
    except OSError as e:
        remove_quietly(tmp)
        if isinstance(e, OutputError):
            raise
        raise output_error(e, target) from None
    except BaseException:
        remove_quietly(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike, *, force: bool = False) -> Iterator[Path]:
    """Build a folder at a temporary path beside ``target``; on a clean exit fsync it and rename
    it to ``target``. ``with atomic_dir(out) as tmp: (tmp / "a").write_bytes(...)``."""
    with _built_beside(target, force, lambda tmp: tmp.mkdir()) as (tmp, _):
        yield tmp
        fsync_tree(tmp)


@contextlib.contextmanager
def atomic_file(target: str | os.PathLike, *, force: bool = False, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``target`` for writing; on a clean exit flush, fsync and
    rename it to ``target`` (the folder is fsynced too). ``with atomic_file(p) as f: f.write(b)``.
    The open file's ``.name`` is the temporary path (for code that must reopen it)."""
    def opened(tmp: Path) -> IO:
        return open(tmp, mode)

    with _built_beside(target, force, opened) as (_tmp, f):
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())


def write_bytes(target: str | os.PathLike, data: bytes, *, force: bool = False) -> None:
    """Write ``data`` to ``target`` atomically."""
    with atomic_file(target, force=force) as f:
        f.write(data)


# ---- hashing (sha256: what model hubs publish; a bundle's own digests are formats/digests) ---
def sha256_bytes(data) -> str:
    """sha256 of a bytes-like object or of an array's bytes (no copy when it is contiguous)."""
    return digests.SHA256.of_bytes(data)


def sha256_file(path: str | os.PathLike, offset: int = 0, size: Optional[int] = None) -> str:
    """sha256 of a file (or of ``size`` bytes from ``offset``), from a read-only map (reads
    where the file cannot be mapped)."""
    return digests.SHA256.of_file(path, offset, size)
