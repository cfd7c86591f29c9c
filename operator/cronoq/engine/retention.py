"""How long finished work is kept (DESIGN §10): a finished Task until `ttlAfterFinished` after its
finishedAt — and never before its key has stopped deduplicating (`keyRetention`), so a
resubmission within the window still finds the original. Attempt Jobs are left to the Job's own
`ttlSecondsAfterFinished`: set from `jobRetention` when the Job is built, and brought to the new
value on the Jobs already there when the jobRetention in effect changes (`retime`).

Both can depend on how the task ended (`ttlAfterSuccess`/`ttlAfterFailure`,
`jobRetentionAfterSuccess`/`jobRetentionAfterFailure`): success is the phase Succeeded, failure
every other terminal phase (Failed, DeadLettered, Cancelled, Skipped), so each finished task has
exactly one outcome. The task's own fields win over its pool's; on each, the outcome's field wins
over the general one. A Job is created before its task's outcome is known, so an unfinished
task's Jobs are kept for the longest retention it may end with, and re-timed when it ends."""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Collection, Iterable, Protocol

from cronoq.api import TaskPhase, TaskPoolSpec
from cronoq.engine.observed import AttemptJob


class Retention(Protocol):
    """The retention fields a TaskSpec and a TaskPoolSpec share."""

    @property
    def ttl_after_finished(self) -> timedelta | None: ...
    @property
    def ttl_after_success(self) -> timedelta | None: ...
    @property
    def ttl_after_failure(self) -> timedelta | None: ...
    @property
    def job_retention(self) -> timedelta | None: ...
    @property
    def job_retention_after_success(self) -> timedelta | None: ...
    @property
    def job_retention_after_failure(self) -> timedelta | None: ...


def succeeded(phase: TaskPhase) -> bool:
    """Whether a finished task counts as a success for retention; every other end is a failure."""
    return phase is TaskPhase.SUCCEEDED


def ttl_for(spec: Retention, phase: TaskPhase) -> timedelta | None:
    """The ttlAfterFinished `spec` (a task's or a pool's) gives a task that ended in `phase`."""
    specific = spec.ttl_after_success if succeeded(phase) else spec.ttl_after_failure
    return specific if specific is not None else spec.ttl_after_finished


def job_retention_for(spec: Retention, phase: TaskPhase) -> timedelta | None:
    """The jobRetention `spec` (a task's or a pool's) gives the Jobs of a task that ended in `phase`."""
    specific = spec.job_retention_after_success if succeeded(phase) else spec.job_retention_after_failure
    return specific if specific is not None else spec.job_retention


def unfinished_job_retention(own: Retention, pool: TaskPoolSpec | None) -> timedelta | None:
    """The jobRetention of an unfinished task's Jobs: the longest it may end with, so an attempt's
    logs outlive it until the outcome is known (then `retime` brings them to the outcome's).
    None when a value depends on a pool that is not known."""
    values = [job_retention_of(job_retention_for(own, phase), pool, phase)
              for phase in (TaskPhase.SUCCEEDED, TaskPhase.FAILED)]
    return None if None in values else max(v for v in values if v is not None)


def expires_at(finished_at: datetime | None, ttl: timedelta | None, *, keyed: bool,
               key_retention: timedelta) -> datetime | None:
    """When a finished task may be deleted; None while it is unfinished or kept forever."""
    if finished_at is None or ttl is None:
        return None
    keep = max(ttl, key_retention) if keyed else ttl
    return finished_at + keep


def task_expires_at(finished_at: datetime | None, own_ttl: timedelta | None, key: str | None,
                    pool: TaskPoolSpec | None, phase: TaskPhase) -> datetime | None:
    """expires_at with the task's own ttl for its outcome (`ttl_for` of its spec), else its
    pool's (applies to tasks that finished before the pool changed: the pool is read at each
    decision)."""
    pool = pool or TaskPoolSpec()
    ttl = own_ttl if own_ttl is not None else ttl_for(pool, phase)
    return expires_at(finished_at, ttl, keyed=key is not None, key_retention=pool.key_retention)


def job_may_be_gone(dispatched_at: datetime | None, job_retention: timedelta, now: datetime) -> bool:
    """Whether an attempt's Job that the operator cannot see may have been created, finished and
    removed by its TTL meanwhile. A Job is created after its attempt is recorded and deleted no
    sooner than `job_retention` after it finishes, so before dispatched_at + job_retention the
    Job cannot have been cleaned up: it was never created (the operator stopped in between) and
    is created now. Later, the attempt's outcome is lost, and it counts as a retryable attempt."""
    return dispatched_at is not None and now >= dispatched_at + job_retention


def ttl_seconds(job_retention: timedelta) -> int:
    """A jobRetention as a Job's ttlSecondsAfterFinished (whole seconds, never shorter)."""
    return math.ceil(job_retention.total_seconds())


def job_retention_of(own: timedelta | None, pool: TaskPoolSpec | None, phase: TaskPhase) -> timedelta | None:
    """The jobRetention in effect for the Jobs of a task that ended in `phase`: its own (for that
    outcome), else its pool's; None while the pool is not known (then the Jobs keep what they
    have, rather than a default the pool may not mean)."""
    if own is not None:
        return own
    return job_retention_for(pool, phase) if pool is not None else None


def retime(jobs: Iterable[AttemptJob], job_retention: timedelta | None,
           deleting: Collection[str] = ()) -> tuple[tuple[str, int], ...]:
    """(Job name, seconds) of the task's Jobs whose ttlSecondsAfterFinished is not the jobRetention
    in effect, finished ones included: a retention lowered because etcd fills up applies to the
    Jobs already there, a raised one keeps them longer. Jobs that are going (or that the same
    plan deletes) are left alone; a Job already in line costs no write."""
    if job_retention is None:
        return ()
    seconds = ttl_seconds(job_retention)
    return tuple((job.name, seconds) for job in jobs
                 if job.worker is None  # a pull worker's attempt Lease: no Job to re-time
                 and not (job.gone or job.deleting or job.name in deleting) and job.ttl_after_finished != seconds)
