"""What the archive keeps of a task (DESIGN §23): one row per ended attempt and one per finished
task, read from what the Task's status records and nothing else, so whoever writes them (the
leader as attempts end, a new leader catching up, the deletion of a task whose rows may be
missing) writes the same rows. A row is named by (task uid, attempt number) — a task's row by
its uid alone — and the archive keeps the first copy of each: writing a row twice changes nothing.

Pure: no database here (cronoq/archive.py writes and reads the rows)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from cronoq.api import Attempt, Task, TaskPhase, TaskStatus

Delivery = Literal["Job", "Push", "Workers"]


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a task is, for its rows: what its metadata and spec say (the spec is fixed)."""

    uid: str
    namespace: str
    name: str
    pool: str
    key: str | None = None
    push: bool = False
    """Its spec gives an http request (a pool's template may give one too: then an answered
    attempt's response code says so)."""
    created_at: datetime | None = None

    @classmethod
    def of(cls, task: Task) -> Identity:
        meta, spec = task.metadata, task.spec
        return cls(uid=meta.uid or "", namespace=meta.namespace or "", name=meta.name or "", pool=spec.pool,
                   key=spec.key, push=spec.http is not None, created_at=meta.creation_timestamp)


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One ended attempt, as its task's status recorded it."""

    task_uid: str
    attempt: int
    namespace: str
    name: str
    pool: str
    key: str | None
    delivery: Delivery
    trigger: str
    outcome: str
    reason: str | None
    exit_code: int | None
    response_code: int | None
    message: str | None
    dispatched_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None
    job: str | None
    worker: str | None


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A finished task: how it ended, its output and final message."""

    task_uid: str
    namespace: str
    name: str
    pool: str
    key: str | None
    phase: str
    attempts: int
    """Its newest attempt number (0: it ended without running, e.g. a duplicate or a refusal)."""
    reason: str | None
    message: str | None
    output: str | None
    output_available: bool
    duplicate_of: str | None
    created_at: datetime | None
    submitted_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class Rows:
    """What a status gives the archive: its ended attempts, and the task's row once it has finished."""

    attempts: tuple[AttemptRow, ...] = ()
    task: TaskRow | None = None

    def __bool__(self) -> bool:
        return bool(self.attempts) or self.task is not None


def delivery_of(who: Identity, attempt: Attempt) -> Delivery:
    if attempt.worker is not None:
        return "Workers"
    if who.push or attempt.response_code is not None:
        return "Push"
    return "Job"


def attempt_row(who: Identity, attempt: Attempt) -> AttemptRow | None:
    """The row of an attempt, None while it has not ended (no outcome recorded)."""
    if attempt.outcome is None:
        return None
    return AttemptRow(
        task_uid=who.uid, attempt=attempt.number, namespace=who.namespace, name=who.name, pool=who.pool, key=who.key,
        delivery=delivery_of(who, attempt), trigger=attempt.trigger.value, outcome=attempt.outcome.value,
        reason=attempt.reason, exit_code=attempt.exit_code, response_code=attempt.response_code,
        message=attempt.message, dispatched_at=attempt.dispatched_at, started_at=attempt.started_at,
        finished_at=attempt.finished_at, duration_ms=attempt.duration_ms, job=attempt.job, worker=attempt.worker)


def _reason(status: TaskStatus) -> str | None:
    """The reason of a finished task: its Ready condition's (else any condition's)."""
    for kind in ("Ready", "Running"):
        for condition in status.conditions:
            if condition.type == kind and condition.reason:
                return condition.reason
    return None


def task_row(who: Identity, status: TaskStatus) -> TaskRow | None:
    """The row of a finished task, None while it has not finished."""
    if status.phase is None or not status.phase.terminal:
        return None
    return TaskRow(task_uid=who.uid, namespace=who.namespace, name=who.name, pool=who.pool, key=who.key,
                   phase=status.phase.value, attempts=status.attempt, reason=_reason(status),
                   message=status.message, output=status.output, output_available=status.output_available,
                   duplicate_of=status.duplicate_of, created_at=who.created_at, submitted_at=status.submitted_at,
                   finished_at=status.finished_at)


def rows(who: Identity, status: TaskStatus | None, only: frozenset[int] | None = None) -> Rows:
    """Every row `status` records: its ended attempts (those numbered in `only`, when given) and,
    if the task has finished, the task's row with all of them."""
    if status is None:
        return Rows()
    finished = task_row(who, status)
    wanted = None if finished is not None else only
    attempts = tuple(row for a in status.attempts
                     if (wanted is None or a.number in wanted) and (row := attempt_row(who, a)) is not None)
    return Rows(attempts, finished)


def ended(before: TaskStatus | None, after: TaskStatus) -> frozenset[int]:
    """The attempts `after` records as ended that `before` did not (by number): what a status
    write adds to the archive."""
    done = {a.number for a in before.attempts if a.outcome is not None} if before is not None else set()
    return frozenset(a.number for a in after.attempts if a.outcome is not None and a.number not in done)


def finished(phase: TaskPhase | None) -> bool:
    return phase is not None and phase.terminal
