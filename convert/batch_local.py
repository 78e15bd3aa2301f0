"""The local executor of ``panelpack batch``: one process per job attempt, ``workers`` at once.

A fresh process per attempt (``spawn``: nothing of this process's threads or kernels is
inherited) keeps jobs apart: a worker that dies takes only its attempt with it, and the job
runs again while attempts remain (``convert/batch.py``).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Callable, Optional, cast

from ..formats import engine
from .batch import JobRow, died_row, run_job
from .batch_plan import Job

log = logging.getLogger(__name__)


def _child(conn, job: Job, attempt: int) -> None:
    """A worker: run the job, send its row (as JSON-able data) back, exit."""
    row = run_job(job, attempt)
    conn.send(row.to_json())
    conn.close()


def _how(exitcode: Optional[int]) -> str:
    import signal

    if exitcode is not None and exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def run(jobs: list[Job], retries: int, workers: Optional[int], on_row: Callable[[JobRow], None],
        address: Optional[str] = None) -> None:
    """Run ``jobs``, calling ``on_row`` with each job's final row."""
    ctx = mp.get_context("spawn")
    workers = workers or max(1, engine.usable_cores())
    pending = deque((job, 1) for job in jobs)
    running: dict = {}  # sentinel -> (process, connection, job, attempt)
    got: dict = {}  # sentinel -> the row its worker sent (None: it sent nothing readable)
    while pending or running:
        while pending and len(running) < workers:
            job, attempt = pending.popleft()
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(send, job, attempt), name=f"panelpack-batch-{job.name}", daemon=True)
            proc.start()
            send.close()
            running[proc.sentinel] = (proc, recv, job, attempt)
            log.debug("job %s: attempt %d in process %d", job.name, attempt, proc.pid)
        conns = {entry[1]: key for key, entry in running.items() if key not in got}
        for ready in wait([*running, *conns]):
            if ready in conns:  # the row, read before the worker exits (a full pipe would block it)
                try:
                    got[conns[ready]] = JobRow.from_json(cast(Connection, ready).recv())
                except (EOFError, OSError):
                    got[conns[ready]] = None
                continue
            if ready not in running:
                continue
            proc, recv, job, attempt = running.pop(ready)
            row = got.pop(ready, None)
            if row is None and recv.poll():
                try:
                    row = JobRow.from_json(recv.recv())
                except (EOFError, OSError):
                    row = None
            recv.close()
            proc.join()
            if row is not None:
                on_row(row)
            elif attempt <= retries:
                log.warning("job %s: worker died (%s) on attempt %d; retrying", job.name, _how(proc.exitcode), attempt)
                pending.append((job, attempt + 1))
            else:
                on_row(died_row(job, attempt, _how(proc.exitcode)))
