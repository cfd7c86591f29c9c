"""`describe`'s Retention lines: how long a task (or a pool's tasks) and their attempt Jobs are
kept, by outcome (`engine.retention`), worded from the same resolution the operator uses, so what
`cronoq describe` says is what the operator does."""
from __future__ import annotations

from datetime import timedelta

from cronoq.api import Task, TaskPhase, TaskPoolSpec
from cronoq.api.durations import format as format_duration
from cronoq.engine import retention

SUCCESS, FAILURE = TaskPhase.SUCCEEDED, TaskPhase.FAILED
"""One phase standing for each outcome (every unsuccessful end resolves alike)."""


def _kept(value: timedelta | None) -> str:
    return "until deleted" if value is None else format_duration(value)


def _by_outcome(success: timedelta | None, failure: timedelta | None) -> str:
    if success == failure:
        return _kept(success)
    return f"{_kept(success)} after success, {_kept(failure)} after failure"


def pool_line(pool: TaskPoolSpec) -> str:
    """`tasks 1h after success, 168h after failure; Jobs 1h; keys 1h`."""
    tasks = _by_outcome(retention.ttl_for(pool, SUCCESS), retention.ttl_for(pool, FAILURE))
    jobs = _by_outcome(retention.job_retention_for(pool, SUCCESS), retention.job_retention_for(pool, FAILURE))
    return f"tasks {tasks}; Jobs {jobs}; keys {format_duration(pool.key_retention)}"


def task_line(task: Task, pool: TaskPoolSpec | None) -> str:
    """A finished task: when it goes and what its Jobs are kept for; an unfinished one: both by
    outcome. `pool` None: the pool could not be read (its values are then left out)."""
    spec, status = task.spec, task.status
    phase = status.phase if status else None
    keyed = spec.key is not None and pool is not None

    def ttl(outcome: TaskPhase) -> timedelta | None:
        own = retention.ttl_for(spec, outcome)
        value = own if own is not None else (retention.ttl_for(pool, outcome) if pool else None)
        if value is not None and keyed:
            value = max(value, pool.key_retention)  # type: ignore[union-attr]
        return value

    def jobs(outcome: TaskPhase) -> timedelta | None:
        return retention.job_retention_of(retention.job_retention_for(spec, outcome), pool, outcome)

    if phase is not None and phase.terminal:
        outcome = "success" if retention.succeeded(phase) else "failure"
        expires = retention.task_expires_at(status.finished_at if status else None, retention.ttl_for(spec, phase),
                                            spec.key, pool, phase)
        when = f"deleted at {expires:%Y-%m-%dT%H:%M:%SZ}" if expires else "kept until deleted"
        return f"{when} ({outcome}: task {_kept(ttl(phase))}, Jobs {_kept(jobs(phase))})"
    line = f"task {_by_outcome(ttl(SUCCESS), ttl(FAILURE))}; Jobs {_by_outcome(jobs(SUCCESS), jobs(FAILURE))}"
    return line + ("" if pool is not None else f" (TaskPool {spec.pool} not readable: its defaults left out)")
