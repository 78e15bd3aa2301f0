"""The Ray executor of ``panelpack batch --ray [ADDRESS]`` (``pip install 'panelpack[ray]'``).

Each job attempt is a Ray task (``run_job`` in a Ray worker process); Ray's own retries are off,
so a worker that dies (``WorkerCrashedError``: SIGKILL, the OOM killer) is retried here, with
the same bound as the local executor. Ray is imported only when this executor runs.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from ..formats.errors import BadInputError
from .batch import JobRow, died_row, run_job
from .batch_plan import Job

log = logging.getLogger(__name__)

MISSING = "--ray needs Ray, an optional extra: pip install 'panelpack[ray]'"
#: what a driver that cannot join a cluster is told (Ray's own message follows)
UNREACHABLE = ("cannot join the Ray cluster at {address}: {why}. Check the address (`ray status` on the head "
               "node prints it); a cluster started by `ray start` uses token authentication by default, which "
               "a driver joins with RAY_AUTH_MODE=token and the cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN")


def _ray():
    try:
        import ray
    except ImportError:
        raise BadInputError(MISSING) from None
    return ray


def _task(job: Job, attempt: int) -> dict[str, Any]:
    return run_job(job, attempt).to_json()


def run(jobs: list[Job], retries: int, workers: Optional[int], on_row: Callable[[JobRow], None],
        address: Optional[str] = None) -> None:
    """Run ``jobs`` as Ray tasks on the cluster at ``address`` (None or "": a local cluster,
    unless this process already joined one), calling ``on_row`` with each job's final row."""
    ray = _ray()
    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=address or None, log_to_driver=False, include_dashboard=False)
        except (ConnectionError, ray.exceptions.AuthenticationError) as e:
            # a user's address (or its credentials) is bad input, not an internal error
            raise BadInputError(UNREACHABLE.format(address=address or "the default address", why=e)) from None
        started = True
    try:
        remote = ray.remote(max_retries=0, num_cpus=1)(_task)
        refs: dict = {}
        for job in jobs:
            refs[remote.remote(job, 1)] = (job, 1)
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            job, attempt = refs.pop(ready[0])
            try:
                on_row(JobRow.from_json(ray.get(ready[0])))
            except ray.exceptions.RayError as e:
                how = type(e).__name__
                if attempt <= retries:
                    log.warning("job %s: Ray worker died (%s) on attempt %d; retrying", job.name, how, attempt)
                    refs[remote.remote(job, attempt + 1)] = (job, attempt + 1)
                else:
                    on_row(died_row(job, attempt, how))
    finally:
        if started:
            ray.shutdown()
