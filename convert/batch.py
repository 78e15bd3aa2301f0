"""``panelpack batch PLAN``: many sources into many targets, each source read once, on a local
process pool (the default) or a Ray cluster (``convert/batch_ray.py``).

A job (``batch_plan.Job``) is one source into all its targets through :func:`convert_many`,
then ``verify`` at the plan's level and ``pack`` when asked. Every attempt of a job runs in a
process of its own, so a job cannot take another down:

* **isolated**: a bad source fails its own row with its one-line error; the others go on;
* **retried**: a worker that dies (SIGKILL, the OOM killer) fails nothing but its attempt; the
  job runs again, at most ``retries`` more times. Its outputs are atomic (a temporary name,
  renamed into place once whole), so a killed attempt leaves no valid-looking output, and the
  next attempt sweeps the partial away;
* **resumable**: a finished job leaves a record (``OUT_DIR/.panelpack-batch/NAME.json``: the
  plan entry's digest, the source's digest, each output's manifest digest and verdict); a job
  whose record matches the plan entry, whose source has the same digest and whose outputs
  exist with that valid manifest is skipped, not redone.

The bundles are those the single commands write, byte for byte (the record, not the bundle,
says which plan made them). Progress goes to a callback (the CLI draws the bar); library code
only logs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ..formats.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, EXIT_VERIFY_FAILED, BadInputError, PanelpackError
from .batch_plan import BatchPlan, Job, load

log = logging.getLogger(__name__)

__all__ = ["batch", "BatchResult", "JobRow", "run_job", "finished", "EXECUTORS"]

#: the job statuses, and the exit code each gives the batch (the worst row wins)
STATUS_EXIT = {"done": EXIT_OK, "skipped": EXIT_OK, "verify-failed": EXIT_VERIFY_FAILED, "failed": EXIT_BAD_INPUT,
               "error": EXIT_INTERNAL, "died": EXIT_INTERNAL}
#: test hook: ``kill:NAME:ATTEMPT`` makes the worker of that attempt SIGKILL itself after its
#: first tensor is written (tests/test_batch.py: a worker killed mid-job)
FAULT_ENV = "PANELPACK_BATCH_FAULT"


@dataclass
class JobRow:
    """One job's line of the final table."""

    name: str
    source: str
    status: str  # a key of STATUS_EXIT
    attempts: int = 0
    seconds: float = 0.0
    error: Optional[str] = None
    #: per output: out, layout, bytes, fallbacks (count) and fallback_reasons (tensor -> the ledger's
    #: reason), verify (verdict), pack (the archive), manifest_sha256
    outputs: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "status": self.status, "attempts": self.attempts,
                "seconds": round(self.seconds, 3), "error": self.error, "outputs": self.outputs}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "JobRow":
        return cls(d["name"], d["source"], d["status"], d.get("attempts", 0), d.get("seconds", 0.0), d.get("error"),
                   list(d.get("outputs", [])))


@dataclass
class BatchResult:
    plan: str
    executor: str
    rows: list[JobRow]
    seconds: float

    @property
    def exit_code(self) -> int:
        return max((STATUS_EXIT[r.status] for r in self.rows), default=EXIT_OK)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan, "executor": self.executor, "seconds": round(self.seconds, 3),
                "counts": self.counts(), "exit_code": self.exit_code, "jobs": [r.to_json() for r in self.rows]}

    def render(self) -> str:
        from ..formats.text import human_bytes, table

        lines = []
        for r in self.rows:
            outs = r.outputs or [{}]
            for i, o in enumerate(outs):
                lines.append((r.name if i == 0 else "", r.status if i == 0 else "", o.get("layout", "-"),
                              Path(o["out"]).name if "out" in o else "-",
                              human_bytes(o["bytes"]) if "bytes" in o else "-",
                              f"{r.seconds:.1f}" if i == 0 else "", o.get("verify", "-"),
                              str(o.get("fallbacks", "-")), r.error or "" if i == 0 else ""))
        head = ("job", "status", "layout", "output", "bytes", "s", "verify", "fallbacks", "error")
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(self.counts().items()))
        return f"{table(lines, head, right=(4, 5, 7))}\n\n{len(self.rows)} job(s) in {self.seconds:.1f} s " \
               f"({self.executor}): {counts}"


# -- digests and records (resume) ---------------------------------------------------------
def _files_digest(files: list[dict[str, Any]]) -> str:
    """The source's digest: sha256 over its weight files' (name, bytes, sha256), as a manifest lists them."""
    rows = sorted((f["name"], f["bytes"], f["sha256"]) for f in files)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def source_digest(source: str | os.PathLike) -> str:
    """The digest of a source's weight files as they are now (what a bundle's manifest records)."""
    from ..formats.atomic import sha256_file
    from ..formats.checkpoint import open_checkpoint

    with open_checkpoint(source) as ckpt:
        files = sorted({t.file for t in ckpt.tensors})
    return _files_digest([{"name": os.path.basename(f), "bytes": os.path.getsize(f), "sha256": sha256_file(f)}
                          for f in files])


def _manifest_sha(out: str) -> str:
    from ..formats.atomic import sha256_file

    return sha256_file(Path(out) / "manifest.json")


def finished(job: Job, source_digests: Optional[dict[str, str]] = None) -> Optional[JobRow]:
    """The job's row from its record when the run it records still stands: the same plan entry,
    the same source digest, every output there with the manifest it recorded (sound and naming
    that source) and every archive there; else None (the job runs). ``source_digests``: a memo
    of :func:`source_digest` by path (a source several jobs share is hashed once)."""
    from ..formats.bundle import Bundle

    try:
        rec = json.loads(job.record.read_text())
        if rec.get("entry") != job.entry:
            return None
        for o in rec["row"]["outputs"]:
            b = Bundle(o["out"])  # a valid manifest (schema, checksum) or an exception
            if _manifest_sha(o["out"]) != o["manifest_sha256"] or b.check_structure(hashes=False):
                return None
            if _files_digest(b.manifest["source"]["files"]) != rec["source_digest"]:
                return None
            if o.get("pack") and not Path(o["pack"]).is_file():
                return None
        memo = source_digests if source_digests is not None else {}
        if job.source not in memo:
            memo[job.source] = source_digest(job.source)
        if memo[job.source] != rec["source_digest"]:
            return None
    except (OSError, ValueError, KeyError, TypeError, PanelpackError):
        return None
    row = JobRow.from_json(rec["row"])
    row.status, row.attempts, row.seconds = "skipped", 0, 0.0
    return row


# -- one job, in its worker --------------------------------------------------------------
class _FaultAfterFirstTensor:
    """The :data:`FAULT_ENV` hook as a convert progress: SIGKILL after the first tensor."""

    def start(self, tensors: int, nbytes: int) -> None:
        pass

    def tensor_done(self, name: str, nbytes: int) -> None:
        import signal

        log.warning("%s: killing this worker (test hook)", FAULT_ENV)
        os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        pass


def _progress_for(job: Job, attempt: int):
    if os.environ.get(FAULT_ENV) == f"kill:{job.name}:{attempt}":
        return _FaultAfterFirstTensor()
    return None


def run_job(job: Job, attempt: int = 1) -> JobRow:
    """Run one job here (a worker calls this): convert, verify, pack, write its record. Our
    exceptions become a ``failed`` row with their one line; anything else an ``error`` row."""
    t0 = time.perf_counter()
    try:
        row = _run_job(job, attempt)
    except PanelpackError as e:
        row = JobRow(job.name, job.source, "failed", error=_one_line(e))
    except Exception as e:  # a bug: its own status, so it never reads as a bad source
        log.debug("job %s", job.name, exc_info=True)
        row = JobRow(job.name, job.source, "error", error=f"internal error: {type(e).__name__}: {_one_line(e)}")
    row.attempts, row.seconds = attempt, time.perf_counter() - t0
    return row


def _one_line(e: BaseException) -> str:
    from ..formats.text import escape

    return escape((str(e).splitlines() or [""])[0][:500])


def _run_job(job: Job, attempt: int) -> JobRow:
    from ..formats import atomic
    from ..verify import gate
    from ..verify.bundle_check import verify
    from . import Target, convert_many

    targets = [Target(t.out, t.layout, t.quant, t.requant, t.digest) for t in job.targets]
    for t in targets:
        Path(t.out).parent.mkdir(parents=True, exist_ok=True)
    # force: the plan's outputs are the batch's own (an earlier attempt's, or a stale run's)
    results = convert_many(job.source, targets, include=job.include, exclude=job.exclude, jobs=job.jobs, force=True,
                           progress=_progress_for(job, attempt))
    outputs, ok = [], True
    for jt, r in zip(job.targets, results):
        fallbacks = {row["name"]: row["reason"] for row in r.ledger if row["written"] != row["requested"]}
        o: dict[str, Any] = {"out": jt.out, "layout": jt.layout, "bytes": r.bytes_out, "fallbacks": len(fallbacks),
                             "fallback_reasons": fallbacks, "verify": "-"}
        if job.verify != "none":
            rep = verify(jt.out, level=job.verify)
            o["verify"] = "ok" if rep.ok else "FAILED " + ", ".join(f"{k}: {v}" for k, v in sorted(rep.counts().items()))
            ok = ok and rep.ok
        if job.pack and ok:
            archive = jt.out + ".tar.zst"
            gate.pack(jt.out, archive, force=True)
            o["pack"] = archive
        o["manifest_sha256"] = _manifest_sha(jt.out)
        outputs.append(o)
    row = JobRow(job.name, job.source, "done" if ok else "verify-failed", outputs=outputs)
    if ok:
        src = _recorded_source(results[0].bundle)
        job.record.parent.mkdir(parents=True, exist_ok=True)
        doc = {"entry": job.entry, "job": job.to_json(), "source_digest": src, "row": row.to_json()}
        with atomic.atomic_file(job.record, force=True, mode="w") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
    return row


def _recorded_source(bundle_path) -> str:
    from ..formats.bundle import Bundle

    return _files_digest(Bundle(bundle_path).manifest["source"]["files"])


# -- the batch ------------------------------------------------------------------------------
#: executor name -> module path and function: ``run(jobs, retries, workers, on_row, address) -> rows``
EXECUTORS = {"local": ("panelpack.convert.batch_local", "run"), "ray": ("panelpack.convert.batch_ray", "run")}


def batch(plan: str | os.PathLike | BatchPlan, executor: str = "local", address: Optional[str] = None,
          workers: Optional[int] = None, retries: Optional[int] = None,
          on_row: Optional[Callable[[JobRow], None]] = None, on_start: Optional[Callable[[int], None]] = None
          ) -> BatchResult:
    """Run a plan (a TOML file, see ``batch_plan``): skip the jobs already finished, run the
    others on ``executor`` (``local``: a process per attempt, ``workers`` at once; ``ray``: a
    Ray cluster at ``address``, None: a local one), retrying a job whose worker died up to
    ``retries`` times. ``on_start(n_jobs)`` and ``on_row(row)`` (each job's row, skipped ones
    included) feed a progress display. Returns every job's row, in plan order."""
    import importlib

    t0 = time.perf_counter()
    bp = plan if isinstance(plan, BatchPlan) else load(plan)
    if executor not in EXECUTORS:
        raise BadInputError(f"unknown executor {executor!r} (known: {', '.join(EXECUTORS)})")
    module, fn = EXECUTORS[executor]
    run = getattr(importlib.import_module(module), fn)
    if on_start is not None:
        on_start(len(bp.jobs))
    rows: dict[str, JobRow] = {}

    def done(row: JobRow) -> None:
        rows[row.name] = row
        log.info("job %s: %s%s", row.name, row.status, f" ({row.error})" if row.error else "")
        if on_row is not None:
            on_row(row)

    todo = []
    memo: dict[str, str] = {}
    for job in bp.jobs:
        row = finished(job, memo)
        if row is not None:
            done(row)
        else:
            todo.append(job)
    if todo:
        run(todo, bp.retries if retries is None else retries, workers or bp.workers, done, address)
    return BatchResult(bp.path, executor, [rows[j.name] for j in bp.jobs], time.perf_counter() - t0)


def died_row(job: Job, attempt: int, how: str) -> JobRow:
    """The row of a job whose last attempt's worker died (no retries left)."""
    return JobRow(job.name, job.source, "died", attempts=attempt, error=f"worker died ({how}) on attempt {attempt}")
