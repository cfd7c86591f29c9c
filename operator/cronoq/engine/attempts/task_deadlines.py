"""A task's own time limits, beside its attempts' (`deadlines` judges those):

- `startDeadline`, from submission: the first attempt must start by then, or the task ends
  without running (Failed, StartDeadlineExceeded). Time Blocked and Queued counts.
- `deadline`, from submission: the whole task must end by then. When it passes, the running
  attempt is aborted and the task ends (Failed, DeadlineExceeded); a retry whose backoff would
  end after it ends the task at once, since no attempt could run.
- `retry.maxRetryDuration`, from the first attempt's dispatch: no attempt starts after it, and a
  retry whose backoff would end after it ends the task at once (DeadLettered,
  RetryDurationExhausted). From the first attempt, not from submission: the time spent waiting
  for a slot is the startDeadline's to bound, and retrying is what this budget bounds (as Cloud
  Tasks counts it). With `maxAttempts`, the first budget used up ends the task: each is a promise
  of the most a failing task may cost, and both are kept.

Every limit is worked out from stored facts (the task's creationTimestamp, its spec, its pool's,
its status), never from memory, so one that passes while no operator runs, or during a failover,
ends the task as soon as a leader looks. Submission is the creationTimestamp (whole seconds),
sharpened by the operator's first sight of the task when that falls within the same second.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cronoq.api import Task, TaskPhase, TaskStatus
from cronoq.engine import delay, reasons
from cronoq.engine.attempts.wording import clock, secs
from cronoq.engine.plan import Effective

_SECOND = timedelta(seconds=1)

KINDS = {reasons.START_DEADLINE_EXCEEDED: "start", reasons.DEADLINE_EXCEEDED: "total",
         reasons.RETRY_DURATION_EXHAUSTED: "retry"}
"""A task's ending reason → the `kind` label of cronoq_deadlines_total."""


@dataclass(frozen=True)
class Passed:
    """A limit of the task has passed (or leaves no room for its next attempt): it ends so."""

    phase: TaskPhase
    reason: str
    message: str


def kind_of(status: TaskStatus) -> str | None:
    """The `kind` label of a finished task's own limit that ended it (None: none did)."""
    finished = next((c for c in status.conditions if c.type == "Finished"), None)
    return KINDS.get(finished.reason) if finished is not None else None


def submitted(task: Task, first_seen: datetime | None) -> datetime | None:
    """When the task was submitted: its creationTimestamp, or the operator's first sight of it
    (stored as status.submittedAt) when that falls within the creation's second."""
    created = task.metadata.creation_timestamp
    seen = (task.status.submitted_at if task.status else None) or first_seen
    if created is None:
        return seen
    if seen is not None and created <= seen < created + _SECOND:
        return seen
    return created


def start_by(task: Task, settings: Effective, first_seen: datetime | None) -> datetime | None:
    """When the first attempt must have started by (None: no startDeadline): that long after its
    submission, or after its start time when it was told to wait (notBefore, startDelay) — a task
    delayed an hour with a 5-minute start deadline means "within 5 minutes of its time", not a
    task that can never start."""
    at = submitted(task, first_seen)
    if at is not None and (start := delay.not_before(task)) is not None:
        at = max(at, start)
    return at + settings.start_deadline if at is not None and settings.start_deadline else None


def end_by(task: Task, settings: Effective, first_seen: datetime | None) -> datetime | None:
    """When the whole task must have ended by (None: no deadline)."""
    at = submitted(task, first_seen)
    return at + settings.deadline if at is not None and settings.deadline else None


def first_attempt_at(status: TaskStatus) -> datetime | None:
    """When the first attempt was dispatched: the status says so, else (a status written before it
    did) the first attempt's record, else its submission (earlier: the budget ends no later)."""
    records = status.attempts
    if status.first_attempt_at is not None:
        return status.first_attempt_at
    if records and records[0].number == 1 and records[0].dispatched_at is not None:
        return records[0].dispatched_at
    return status.submitted_at if status.attempt else None


def retry_until(status: TaskStatus, settings: Effective) -> datetime | None:
    """When the retry budget in time ends (None: none, or no attempt yet)."""
    budget = settings.retry.max_retry_duration
    first = first_attempt_at(status) if budget else None
    return first + budget if first is not None and budget else None


def passed(task: Task, status: TaskStatus, settings: Effective, now: datetime,
           first_seen: datetime | None, waiting_for_kueue: bool = False) -> Passed | None:
    """The startDeadline (before the first attempt, or while the first attempt's Job waits for
    Kueue to admit it) or the deadline, if one has passed: the earlier, when both have."""
    due = []
    start = start_by(task, settings, first_seen) if status.attempt == 0 or waiting_for_kueue else None
    if start is not None and now >= start:
        assert settings.start_deadline is not None
        due.append((start, Passed(TaskPhase.FAILED, reasons.START_DEADLINE_EXCEEDED, (
            f"not started within its startDeadline of {secs(settings.start_deadline)} of its submission "
            f"(by {clock(start)}): ended without running"))))
    end = end_by(task, settings, first_seen)
    if end is not None and now >= end:
        assert settings.deadline is not None
        due.append((end, Passed(TaskPhase.FAILED, reasons.DEADLINE_EXCEEDED,
                                f"its deadline of {secs(settings.deadline)} from submission passed at {clock(end)}")))
    return min(due, key=lambda d: d[0])[1] if due else None


def aborted(limit: Passed, n: int) -> Passed:
    """The deadline passed while attempt `n` ran: it was aborted."""
    return Passed(limit.phase, limit.reason, f"{limit.message}; attempt {n} was aborted")


def no_room(task: Task, status: TaskStatus, settings: Effective, first_seen: datetime | None, next_at: datetime,
            n: int, failed: str) -> Passed | None:
    """Attempt `n` + 1 could start at `next_at` at the earliest (its backoff's end, or now): if
    that is not before the retry budget or the deadline ends, no attempt can run in time and the
    task ends now. `failed` says how attempt `n` ended."""
    budget_end = retry_until(status, settings)
    if budget_end is not None and next_at >= budget_end:
        budget = settings.retry.max_retry_duration
        assert budget is not None
        first = first_attempt_at(status)
        return Passed(TaskPhase.DEAD_LETTERED, reasons.RETRY_DURATION_EXHAUSTED, (
            f"{failed}; no attempt {n + 1}: it could start at {clock(next_at)} at the earliest, not before the "
            f"retry budget (maxRetryDuration {secs(budget)} from the first attempt at {clock(first)}) ends at "
            f"{clock(budget_end)}"))
    end = end_by(task, settings, first_seen)
    if end is not None and next_at >= end:
        assert settings.deadline is not None
        return Passed(TaskPhase.FAILED, reasons.DEADLINE_EXCEEDED, (
            f"{failed}; no attempt {n + 1}: it could start at {clock(next_at)} at the earliest, not before "
            f"its deadline of {secs(settings.deadline)} from submission passes at {clock(end)}"))
    return None


def next_look(task: Task, status: TaskStatus, settings: Effective, now: datetime,
              first_seen: datetime | None, waiting_for_kueue: bool = False) -> float | None:
    """Seconds until the task's next limit passes (None: it has none ahead): the reconcile is
    queued again then, so nothing polls. A limit already passed is not ahead: the retry budget
    passes while an attempt runs, and is judged when that attempt ends."""
    limits = [end_by(task, settings, first_seen), retry_until(status, settings)]
    if status.attempt == 0 or waiting_for_kueue:
        limits.append(start_by(task, settings, first_seen))
    ahead = [(at - now).total_seconds() for at in limits if at is not None and at > now]
    return min(ahead) if ahead else None
