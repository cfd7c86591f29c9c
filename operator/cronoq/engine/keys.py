"""Idempotency keys (DESIGN §5): among the tasks of one namespace and pool sharing a key, one is
the original and runs; the others run nothing. A duplicate of a finished original reports its
terminal phase and output at once; a duplicate of an unfinished one stays Blocked and follows
it to its end. A finished original deduplicates for its pool's keyRetention, counted from when
it finished; after that a new task with the key runs.

The original is the oldest (creation time, then name) of the tasks that are not duplicates
themselves and still deduplicate; a task that has already started always beats one that has not,
so a late-seen older task never takes over from one already running.

A finished original deleted from the cluster before its keyRetention passed (by hand, or by a
bulk delete) still holds its key when the operator keeps an archive (DESIGN §23): a keyed task
that nothing in the cluster holds back asks the archive once, before its first attempt, and ends
as the duplicate of the archived original (`archived_gate`), with its archived phase, message and
output. Only when neither the Task nor the archive holds the output is it unavailable.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable

from cronoq.api import Task, TaskPhase
from cronoq.engine import reasons
from cronoq.engine.gate import RUN, Gate


@dataclass(frozen=True)
class Holder:
    """A task holding a key, as much of it as deduplication needs."""

    name: str
    created_at: datetime
    phase: TaskPhase | None = None
    attempt: int = 0
    finished_at: datetime | None = None
    output: str | None = None
    output_available: bool = False
    duplicate_of: str | None = None
    message: str | None = None

    @classmethod
    def of(cls, task: Task, first_seen: datetime) -> Holder:
        """All of `task` that deduplication reads (`first_seen` stands in for a creation time the
        object lacks): how the operator sees a task it has read whole, and how the client does."""
        status = task.status
        return cls(
            name=task.metadata.name or "", created_at=task.metadata.creation_timestamp or first_seen,
            phase=status.phase if status else None, attempt=status.attempt if status else 0,
            finished_at=status.finished_at if status else None, output=status.output if status else None,
            output_available=status.output_available if status else False,
            duplicate_of=status.duplicate_of if status else None, message=status.message if status else None)

    @property
    def started(self) -> bool:
        return self.attempt > 0 or (self.phase is not None and self.phase.terminal)

    def deduplicates(self, retention: timedelta, now: datetime) -> bool:
        if self.duplicate_of is not None:
            return False
        if self.phase is not None and self.phase.terminal:
            return self.finished_at is None or self.finished_at + retention > now
        return True


@dataclass(frozen=True)
class Archived:
    """The archive's answer for a key: the newest finished original it holds (a task that was not a
    duplicate itself), or None; `answered` is False when the archive could not be asked (down, or
    not ready in time): the task then runs, as without an archive."""

    original: Holder | None
    answered: bool = True


@dataclass(frozen=True)
class KeyHolders:
    """What deduplication reads of a keyed task: itself, the other tasks holding its key, and the
    full record of its finished original once read (a plan's `read_original` asks for it)."""

    me: Holder
    others: tuple[Holder, ...]
    retention: timedelta
    original: Holder | None = None
    archive: bool = False
    """The operator keeps an archive: a key nothing in the cluster holds is asked of it."""
    archived: Archived | None = None
    """What the archive answered for the key (None: not asked yet)."""


def original(holders: Iterable[Holder], retention: timedelta, now: datetime) -> Holder | None:
    """The task that holds the key: the one the others are duplicates of (see the module docstring)."""
    live = [h for h in holders if h.deduplicates(retention, now)]
    if not live:
        return None
    return min(live, key=lambda h: (not h.started, h.created_at, h.name))


def reported(me: Holder, others: Iterable[Holder], retention: timedelta, now: datetime) -> Holder | None:
    """The finished original whose phase, output and message `me` ends with, as its duplicate; None
    when `me` runs or waits. The caller fetches that original's full record before `gate` decides."""
    first = original([me, *others], retention, now)
    if first is None or first.name == me.name or first.phase is None or not first.phase.terminal:
        return None
    return first


def _ended(first: Holder, note: str = "") -> Gate:
    """A duplicate of the finished original `first` ends as it did."""
    assert first.phase is not None
    return Gate.end(first.phase, reasons.DUPLICATE,
                    f"same key as task {first.name}{note}, which ended {first.phase.value}: "
                    f"{first.message or ''}".rstrip(": "),
                    output=first.output if first.output_available else None, duplicate_of=first.name)


def asks_archive(me: Holder) -> bool:
    """Whether a keyed task nothing in the cluster holds back asks the archive: not when its status
    says an earlier decision (this leader's or a former one's) let it past its key already — it
    was asked then — so a new leader asks again only for tasks never decided or waiting for an
    original."""
    return me.phase is None or me.duplicate_of is not None


def archived_gate(found: Archived, retention: timedelta, now: datetime) -> Gate:
    """A keyed task nothing in the cluster holds back, given what the archive holds of its key: it
    ends as the duplicate of an archived original still within its retention (deleted from the
    cluster since), else it runs."""
    first = found.original
    if first is None or first.duplicate_of is not None or first.phase is None or not first.phase.terminal \
            or not first.deduplicates(retention, now):
        return RUN
    return _ended(first, " (deleted; as the archive keeps it)")


def gate(me: Holder, others: Iterable[Holder], retention: timedelta, now: datetime) -> Gate:
    """Whether the keyed task `me` runs, waits for its original, or ends as its duplicate."""
    first = original([me, *others], retention, now)
    if first is None or first.name == me.name:
        return RUN
    if first.phase is not None and first.phase.terminal:
        return _ended(first)
    return Gate.wait(reasons.WAITING_FOR_ORIGINAL,
                     f"same key as task {first.name} ({first.phase.value if first.phase else 'new'}); "
                     f"this task will report its outcome", duplicate_of=first.name)
