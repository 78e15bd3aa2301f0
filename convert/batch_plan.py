"""``panelpack batch PLAN``: the plan file (TOML), read into jobs (docs/CONVERT.md, "Batches").

A plan names sources and the targets each is converted into; every job is one source into
all its targets in one read (``convert_many``), then verified and packed as the plan says::

    out_dir = "bundles"          # outputs, relative to the plan file (default: its folder)
    verify = "structure"         # none | structure | lossless | agreement | all
    pack = false                 # also write OUT.ppk.tar.zst (after verify)
    retries = 2                  # new attempts for a job whose worker died (SIGKILL, OOM)
    workers = 2                  # local executor: jobs at once
    quant = "Q4_K_M"             # target options here are every target's defaults

    [[target]]                   # the targets of every source that names none of its own
    layout = "panel64"           # out = "{name}.{layout}.ppk" unless given (":" and "/" in values as "-")
    [[target]]
    layout = "ggml-x8"

    [[source]]
    path = "models/smollm2.gguf" # a GGUF file or an HF folder, relative to the plan file
    name = "smollm2"             # the job's name (default: the file name without extension)
    verify = "all"               # any job key or target option, for this source only
    [[source.target]]            # this source's own targets
    layout = "il8-nibble"
    out = "{name}-x86.ppk"

Options cascade plan -> source -> target; an unknown key anywhere is an error naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..formats.errors import BadInputError

#: a target's own options (those of ``convert_many``'s :class:`~panelpack.convert.Target`)
TARGET_KEYS = ("layout", "quant", "requant", "digest")
#: a job's options: given at the top of the plan or per source
JOB_KEYS = ("verify", "pack", "include", "exclude", "jobs")
VERIFY_LEVELS = ("none", "structure", "lossless", "agreement", "all")
OUT_TEMPLATE = "{name}.{layout}.ppk"
#: characters a target's option may hold that a file name should not (``panel64:int8``)
_UNSAFE_IN_NAMES = str.maketrans({":": "-", "/": "-", "\\": "-"})


def _file_safe(value) -> str:
    """An option's value as it appears in an output name: ``panel64:int8`` -> ``panel64-int8``."""
    return str(value or "").translate(_UNSAFE_IN_NAMES)


_TOP_ONLY = ("out_dir", "retries", "workers", "target", "source")
_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "layout": (str,), "quant": (str,), "requant": (str,), "digest": (str,), "verify": (str,), "pack": (bool,),
    "include": (list,), "exclude": (list,), "jobs": (int,), "out_dir": (str,), "retries": (int,), "workers": (int,),
    "path": (str,), "name": (str,), "out": (str,), "target": (list,), "source": (list,),
}


@dataclass(frozen=True)
class JobTarget:
    out: str  # absolute path of the bundle
    layout: str = "panel64"
    quant: Optional[str] = None
    requant: Optional[str] = None
    digest: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return {"out": self.out, "layout": self.layout, "quant": self.quant, "requant": self.requant,
                "digest": self.digest}


@dataclass(frozen=True)
class Job:
    """One source into its targets: what a worker runs (plain data, so it pickles anywhere)."""

    name: str
    source: str  # absolute
    targets: tuple[JobTarget, ...]
    verify: str = "structure"
    pack: bool = False
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    jobs: Optional[int] = None
    record_dir: str = ""  # where the job's record of a finished run goes (resume)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "targets": [t.to_json() for t in self.targets],
                "verify": self.verify, "pack": self.pack, "include": list(self.include),
                "exclude": list(self.exclude), "jobs": self.jobs}

    @property
    def entry(self) -> str:
        """The plan entry's digest: a finished job counts only for the same entry (resume)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    @property
    def record(self) -> Path:
        return Path(self.record_dir) / f"{self.name}.json"


@dataclass
class BatchPlan:
    path: str
    out_dir: str
    jobs: list[Job]
    retries: int = 2
    workers: Optional[int] = None
    warnings: list[str] = field(default_factory=list)


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - 3.10: the tomli dependency (pyproject.toml)
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise BadInputError("no such plan file", path=path) from None
    except OSError as e:
        raise BadInputError(f"cannot read the plan: {e.strerror}", path=path) from None
    except tomllib.TOMLDecodeError as e:
        raise BadInputError(f"not a valid TOML plan: {e}", path=path) from None


def _check_keys(table: dict[str, Any], allowed: tuple[str, ...], where: str, path: Path) -> None:
    for key, value in table.items():
        if key not in allowed:
            raise BadInputError(f"unknown key {key!r} (known: {', '.join(allowed)})", path=path, where=where)
        if not isinstance(value, _KEY_TYPES[key]) or (isinstance(value, bool) and bool not in _KEY_TYPES[key]):
            raise BadInputError(f"{key} must be a {_KEY_TYPES[key][0].__name__}, got {value!r}", path=path, where=where)


def _options(*tables: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in tables:
        out.update({k: t[k] for k in keys if k in t})
    return out


def load(path: str | os.PathLike) -> BatchPlan:
    """Read a plan file into jobs (nothing else is read: sources are opened by the jobs)."""
    path = Path(path)
    doc = _load_toml(path)
    base = path.resolve().parent
    _check_keys(doc, (*_TOP_ONLY, *JOB_KEYS, *TARGET_KEYS), "plan", path)
    out_dir = (base / doc.get("out_dir", ".")).resolve()
    default_targets = doc.get("target", [])
    sources = doc.get("source", [])
    if not sources:
        raise BadInputError("the plan names no [[source]]", path=path)
    jobs: list[Job] = []
    outs: dict[str, str] = {}
    for i, src in enumerate(sources):
        where = f"source #{i + 1}"
        if not isinstance(src, dict):
            raise BadInputError("each [[source]] is a table", path=path, where=where)
        _check_keys(src, ("path", "name", *JOB_KEYS, *TARGET_KEYS, "target"), where, path)
        if "path" not in src:
            raise BadInputError("a source needs path = ...", path=path, where=where)
        source = (base / src["path"]).resolve()
        name = src.get("name") or source.name.split(".")[0]
        if not name or "/" in name or name.startswith("."):
            raise BadInputError(f"bad job name {name!r}", path=path, where=where)
        if name in {j.name for j in jobs}:
            raise BadInputError(f"two sources share the job name {name!r} (give each a name = ...)", path=path, where=where)
        opts = _options(doc, src, keys=JOB_KEYS)
        verify = opts.get("verify", "structure")
        if verify not in VERIFY_LEVELS:
            raise BadInputError(f"verify = {verify!r}: one of {', '.join(VERIFY_LEVELS)}", path=path, where=where)
        targets = []
        for j, tgt in enumerate(src.get("target") or default_targets):
            twhere = f"{where} ({name}), target #{j + 1}"
            if not isinstance(tgt, dict):
                raise BadInputError("each [[target]] is a table", path=path, where=twhere)
            _check_keys(tgt, ("out", *TARGET_KEYS), twhere, path)
            t = _options(doc, src, tgt, keys=TARGET_KEYS)
            t.setdefault("layout", "panel64")
            try:
                rel = tgt.get("out", OUT_TEMPLATE).format(name=name, **{k: _file_safe(t.get(k)) for k in TARGET_KEYS})
            except (KeyError, IndexError, ValueError) as e:
                raise BadInputError(f"out = {tgt.get('out')!r}: {e} (fields: name, {', '.join(TARGET_KEYS)})",
                                    path=path, where=twhere) from None
            out = str((out_dir / rel).resolve())
            if out in outs:
                raise BadInputError(f"{out} is written by two targets ({outs[out]} and {name})", path=path, where=twhere)
            outs[out] = name
            targets.append(JobTarget(out, **t))
        if not targets:
            raise BadInputError("no targets: give [[target]] tables (for every source) or [[source.target]]",
                                path=path, where=where)
        jobs.append(Job(name, str(source), tuple(targets), verify, bool(opts.get("pack", False)),
                        tuple(opts.get("include", ())), tuple(opts.get("exclude", ())), opts.get("jobs"),
                        str(out_dir / ".panelpack-batch")))
    retries, workers = doc.get("retries", 2), doc.get("workers")
    if retries < 0 or (workers is not None and workers < 1):
        raise BadInputError("retries must be >= 0 and workers >= 1", path=path)
    return BatchPlan(str(path), str(out_dir), jobs, retries, workers)
