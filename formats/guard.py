"""Guards every command runs before it reads a bundle or writes an output.

* :func:`refuse_links`: a bundle is read only through regular files and folders of its own:
  a symlink (or a device, fifo, socket) anywhere under the bundle folder is refused, so
  ``tensors/00001-x.bin -> /etc/shadow`` cannot make ``verify``, ``export``, ``pack`` or
  ``inspect`` read (or ship) a file outside the bundle. (Checkpoint folders are different: a
  Hugging Face hub snapshot is made of symlinks into ``../../blobs``, and those are read.)
* :func:`check_contained`: the files read from a checkpoint folder resolve inside it (or, for
  a hub snapshot, into its repository's ``blobs/``): a side file linked to ``/etc/passwd`` is
  refused by name, never copied into a bundle.
* :func:`check_disjoint`: an output that is, contains or lies inside an input is refused
  (``convert hf -o hf --force`` would replace the checkpoint being read).
* :func:`check_replaceable_bundle`: a folder a command may replace is a bundle (``demo -o
  DIR`` must not delete a folder of someone's files).
* :func:`loads_json`: ``json.loads`` whose nesting-depth failure (a ``RecursionError``) is a
  :class:`FormatError` like every other malformed JSON.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import FormatError, OutputError

MAX_JSON_DEPTH_NOTE = "JSON nested too deeply (the parser's recursion limit)"


def loads_json(text: str | bytes, path: str | os.PathLike | None = None, **kwargs: Any) -> Any:
    """``json.loads(text)``; invalid or too deeply nested JSON raises :class:`FormatError`."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise FormatError(MAX_JSON_DEPTH_NOTE, path=path) from None
    except UnicodeDecodeError as e:
        raise FormatError(f"not UTF-8 ({e.reason} at byte {e.start})", path=path) from None
    except json.JSONDecodeError as e:
        raise FormatError(f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}", path=path) from None


def refuse_links(root: str | os.PathLike, what: str = "bundle") -> None:
    """Raise :class:`FormatError` if anything under ``root`` (not ``root`` itself) is a
    symlink or not a regular file or folder. Uses ``lstat``: links are never followed."""
    root = Path(root)
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError as e:
            raise FormatError(f"cannot list {d}: {e.strerror or e}", path=root) from None
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            rel = os.path.relpath(entry.path, root)
            if stat.S_ISLNK(st.st_mode):
                raise FormatError(f"{rel} is a symbolic link; a {what} holds only regular files "
                                  "(a link could make panelpack read a file outside it)", path=root)
            if stat.S_ISDIR(st.st_mode):
                stack.append(Path(entry.path))
            elif not stat.S_ISREG(st.st_mode):
                raise FormatError(f"{rel} is not a regular file or folder", path=root)


def _real(p: str | os.PathLike) -> Path:
    """The resolved absolute path of ``p`` (which may not exist yet: its parent resolves)."""
    return Path(os.path.realpath(os.path.abspath(os.fspath(p))))


def _inside(a: Path, b: Path) -> bool:
    """``a`` is ``b`` or lies inside it."""
    return a == b or b in a.parents


def check_contained(folder: str | os.PathLike, paths: list[str]) -> None:
    """Refuse (:class:`FormatError`, naming the file) any of ``paths`` (files of a checkpoint
    folder) that resolves outside the folder: a ``tokenizer.json -> /etc/passwd`` would
    otherwise be copied into the bundle and shipped. A Hugging Face hub snapshot
    (``.../snapshots/<rev>/``) may point into its own repository's ``blobs/``."""
    root = _real(folder)
    hub = _real(root.parent.parent / "blobs") if root.parent.name == "snapshots" else None
    for p in paths:
        real = _real(p)
        if _inside(real, root) or (hub is not None and _inside(real, hub)):
            continue
        rel = os.path.relpath(os.path.abspath(p), os.path.abspath(folder))
        raise FormatError(f"{rel} resolves to {real}, outside the checkpoint folder: refused (a symbolic link must not "
                          "bring a file of this machine into the bundle; copy the file into the folder if it belongs "
                          "to the model)", path=folder)


def check_disjoint(source: str | os.PathLike, out: str | os.PathLike, source_what: str = "the source",
                   out_what: str = "the output") -> None:
    """Refuse an ``out`` that is ``source``, lies inside it, or contains it."""
    s, o = _real(source), _real(out)
    if s == o:
        raise OutputError(f"{out}: {out_what} is {source_what} ({source}); choose another output path")
    if _inside(o, s):
        raise OutputError(f"{out}: {out_what} lies inside {source_what} ({source}); choose a path outside it")
    if _inside(s, o):
        raise OutputError(f"{out}: {out_what} contains {source_what} ({source}); replacing it would delete the input")


def is_bundle_dir(path: str | os.PathLike) -> bool:
    """A folder with a ``manifest.json`` whose ``format`` is the bundle's (read cheaply)."""
    m = Path(path) / "manifest.json"
    if not m.is_file() or m.is_symlink():
        return False
    try:
        with open(m, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b'"panelpack.bundle"' in head


def check_replaceable_bundle(out: str | os.PathLike) -> None:
    """``out`` may be replaced: it does not exist, or it is a bundle folder."""
    p = Path(out)
    if not (p.exists() or p.is_symlink()):
        return
    if p.is_symlink() or not p.is_dir():
        raise OutputError(f"{out}: exists and is not a bundle folder; not replacing it")
    if not is_bundle_dir(p):
        raise OutputError(f"{out}: exists and is not a panelpack bundle (no bundle manifest.json); "
                          "not deleting it: choose another -o")
