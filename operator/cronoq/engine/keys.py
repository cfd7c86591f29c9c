"""Idempotency keys (DESIGN §5): among the tasks of one namespace and pool sharing a key, one is
the original and runs; the others run nothing. A duplicate of a finished original reports its
terminal phase and output at once; a duplicate of an unfinished one stays Blocked and follows
it to its end. A finished original deduplicates for its pool's keyRetention, counted from when
it finished; after that a new task with the key runs.

The original is the oldest (creation time, then name) of the tasks that are not duplicates
themselves and still deduplicate; a task that has already started always beats one that has not,
so a late-seen older task never takes over from one already running.
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
class KeyHolders:
    """What deduplication reads of a keyed task: itself, the other tasks holding its key, and the
    full record of its finished original once read (a plan's `read_original` asks for it)."""

    me: Holder
    others: tuple[Holder, ...]
    retention: timedelta
    original: Holder | None = None


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


def gate(me: Holder, others: Iterable[Holder], retention: timedelta, now: datetime) -> Gate:
    """Whether the keyed task `me` runs, waits for its original, or ends as its duplicate."""
    first = original([me, *others], retention, now)
    if first is None or first.name == me.name:
        return RUN
    if first.phase is not None and first.phase.terminal:
        return Gate.end(first.phase, reasons.DUPLICATE,
                        f"same key as task {first.name}, which ended {first.phase.value}: "
                        f"{first.message or ''}".rstrip(": "),
                        output=first.output if first.output_available else None, duplicate_of=first.name)
    return Gate.wait(reasons.WAITING_FOR_ORIGINAL,
                     f"same key as task {first.name} ({first.phase.value if first.phase else 'new'}); "
                     f"this task will report its outcome", duplicate_of=first.name)
