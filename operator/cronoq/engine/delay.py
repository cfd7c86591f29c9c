"""Delayed start (issue 39, point 3): when a task may start (`spec.notBefore`, or `spec.startDelay`
after its creationTimestamp), the gate that holds it Blocked until then, and its place in the
queue after.

A delayed task waits without a slot: it is Blocked (reason WaitingForStartTime, its message
saying until when), is not weighed by admission, and is looked at again by a timer set at its
time (the plan's requeue), not by polling. The time is in the spec, so a restarted operator or a
new leader reads it again and sets its own timer.

From its time on it queues in its priority class as if submitted then (`in_line_from`): a task
told to wait a day must not jump ahead of everything of its priority that waited for a slot
during that day, as Celery's eta and Cloud Tasks' scheduleTime enqueue at their time.

Writes: one more status write than a task without a delay (its Blocked status). When its time
comes it asks for a slot without saying Queued first (`QUIET`): a granted slot goes straight to
Running; only a task still not admitted `QUIET` after its time says Queued, as any task waiting
for a full pool does.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from cronoq.api import Task
from cronoq.api.durations import format as format_duration
from cronoq.engine import reasons
from cronoq.engine.gate import RUN, Gate

QUIET = timedelta(seconds=1)
"""How long after its time a task that has not been granted a slot yet keeps its Blocked status
before it says Queued: the pool's next grant takes milliseconds, so a free pool starts it without
that write."""

WAITING = "not before {at} ({why})"


def not_before(task: Task) -> datetime | None:
    """The earliest time the task may start, None when it gives none."""
    spec = task.spec
    if spec.not_before is not None:
        return spec.not_before
    created = task.metadata.creation_timestamp
    if spec.start_delay is not None and created is not None:
        return created + spec.start_delay
    return None


def gate(task: Task, now: datetime) -> Gate:
    """RUN once the task's time has come, else wait until it (the gate's `until`)."""
    at = not_before(task)
    if at is None or at <= now:
        return RUN
    why = ("spec.notBefore" if task.spec.not_before is not None
           else f"spec.startDelay {_duration(task.spec.start_delay)} after its creation")
    return Gate.wait(reasons.WAITING_FOR_START_TIME, WAITING.format(at=spelled(at), why=why), until=at)


def waiting(task: Task, now: datetime) -> bool:
    """The task's time has not come: admission passes it over."""
    return until(not_before(task), now)


def until(at: datetime | None, now: datetime) -> bool:
    """A task that may start at `at` (None: any time) waits still."""
    return at is not None and at > now


def quiet_until(task: Task, told: str | None, now: datetime) -> datetime | None:
    """Until when a task whose time has just come asks for a slot without saying Queued (its
    status still says WaitingForStartTime); None when it should say so now."""
    at = not_before(task)
    if at is None or told != reasons.WAITING_FOR_START_TIME or now >= at + QUIET:
        return None
    return at + QUIET


def in_line_from(task: Task, submitted: datetime) -> datetime:
    """The time the task queues by within its priority class: its submission, or its start time
    when that is later."""
    return in_line(not_before(task), submitted)


def in_line(at: datetime | None, submitted: datetime) -> datetime:
    """`in_line_from`, for a task whose start time (None: none) is known already."""
    return max(submitted, at) if at is not None else submitted


def spelled(at: datetime) -> str:
    """`2026-12-06T14:00:00Z` (milliseconds only when it has them)."""
    utc = at.astimezone(timezone.utc).replace(tzinfo=None)
    text = utc.isoformat(timespec="milliseconds" if utc.microsecond else "seconds")
    return text + "Z"


def _duration(delta: timedelta | None) -> str:
    return format_duration(delta) if delta is not None else "0s"
