"""Checkpoints across attempts (docs/how-to/checkpoints.md): which checkpoint a reconcile records in the
Task's status.

Fenced like a report: a checkpoint counts only from the open attempt's own Job Lease (or, served,
the Lease named for the worker the status names), held by that attempt's lease id, and only while
the attempt is open in the status the decision started from. The reconcile that closes the attempt
still records what it saved before it ended (in the same write); anything its Lease says after
that, or what an older attempt's Lease says, changes nothing.

Rated like a renewal: a checkpoint gets a status write of its own at most once per the attempt's
renewal interval (its leaseTTL/3, the SDK's and the sidecar's period), however often its Lease
changes — a Lease writer who renews in a loop must not turn each value into a Task status PUT.
A newer one seen sooner waits for the interval to pass (the reconcile is queued again then), or
rides along with any status the reconcile writes anyway, the one that closes the attempt included:
the newest checkpoint saved before the attempt ended is never dropped.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Iterable

from cronoq.api import Attempt, Checkpoint, TaskStatus
from cronoq.engine.attempts.cleanup import find
from cronoq.engine.attempts.wording import stamp
from cronoq.engine.observed import AttemptJob
from cronoq.engine.plan import Plan


def saved(task: str, status: TaskStatus, jobs: Iterable[AttemptJob]) -> str | None:
    """The checkpoint the open attempt of `status` saved on its own Lease (None: none, or no open
    attempt)."""
    open_attempt = status.attempts[-1] if status.attempts else None
    if open_attempt is None or open_attempt.number != status.attempt or open_attempt.outcome is not None:
        return None
    job = find(jobs, task, open_attempt)
    if job is None or job.lease_id is None or job.lease_id != open_attempt.lease_id:
        return None
    return job.checkpoint


DEFAULT_INTERVAL = timedelta(seconds=10)
"""The renewal interval of an attempt recorded without its leaseTTL (an older operator's): the
default pool leaseTTL (30s) over 3."""


def interval(attempt: Attempt) -> timedelta:
    """How often the attempt's Lease is renewed (leaseTTL/3): its checkpoints' rate."""
    if not attempt.lease_ttl_ms:
        return DEFAULT_INTERVAL
    return timedelta(milliseconds=attempt.lease_ttl_ms) / 3


def record(task: str, status: TaskStatus, plan: Plan, jobs: Iterable[AttemptJob], now: datetime,
           generation: int | None, epoch: int) -> Plan:
    """`plan` with the open attempt's new checkpoint in the status it writes, or with a status
    write of its own when it writes none and the attempt's last one is an interval old (else the
    plan comes back when it is): at most one write of its own per renewal interval, none for a
    task that never checkpoints."""
    text = saved(task, status, jobs)
    known = status.checkpoint
    if text is None or (known is not None and known.attempt == status.attempt and known.data == text):
        return plan
    checkpoint = Checkpoint(attempt=status.attempt, data=text, saved_at=now)
    if plan.status is not None:
        return replace(plan, status=plan.status.model_copy(update={"checkpoint": checkpoint}))
    if known is not None and known.attempt == status.attempt and known.saved_at is not None:
        due = known.saved_at + interval(status.attempts[-1])
        if due > now:
            wait = (due - now).total_seconds()
            return replace(plan, requeue_after=min(wait, plan.requeue_after if plan.requeue_after is not None
                                                   else wait))
    return replace(plan, status=stamp(status.model_copy(update={"checkpoint": checkpoint}), generation, epoch))
