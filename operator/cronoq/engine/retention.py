"""How long finished work is kept (DESIGN §10): a finished Task until `ttlAfterFinished` after its
finishedAt — and never before its key has stopped deduplicating (`keyRetention`), so a
resubmission within the window still finds the original. Attempt Jobs are left to the Job's own
`ttlSecondsAfterFinished` (set from `jobRetention` when the Job is built)."""
from __future__ import annotations

from datetime import datetime, timedelta

from cronoq.api import TaskPoolSpec


def expires_at(finished_at: datetime | None, ttl: timedelta | None, *, keyed: bool,
               key_retention: timedelta) -> datetime | None:
    """When a finished task may be deleted; None while it is unfinished or kept forever."""
    if finished_at is None or ttl is None:
        return None
    keep = max(ttl, key_retention) if keyed else ttl
    return finished_at + keep


def task_expires_at(finished_at: datetime | None, own_ttl: timedelta | None, key: str | None,
                    pool: TaskPoolSpec | None) -> datetime | None:
    """expires_at with the task's own ttlAfterFinished, else its pool's (applies to tasks that
    finished before the pool changed: the pool is read at each decision)."""
    pool = pool or TaskPoolSpec()
    ttl = own_ttl if own_ttl is not None else pool.ttl_after_finished
    return expires_at(finished_at, ttl, keyed=key is not None, key_retention=pool.key_retention)


def job_may_be_gone(dispatched_at: datetime | None, job_retention: timedelta, now: datetime) -> bool:
    """Whether an attempt's Job that the operator cannot see may have been created, finished and
    removed by its TTL meanwhile. A Job is created after its attempt is recorded and deleted no
    sooner than `job_retention` after it finishes, so before dispatched_at + job_retention the
    Job cannot have been cleaned up: it was never created (the operator stopped in between) and
    is created now. Later, the attempt's outcome is lost, and it counts as a retryable attempt."""
    return dispatched_at is not None and now >= dispatched_at + job_retention
