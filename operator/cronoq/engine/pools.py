"""A TaskPool's status (counts by phase, running, queued, the Ready condition): pure, from the
counts the store keeps, and only when it changed (the status is written at most every few
seconds, and never to say the same thing again)."""
from __future__ import annotations

from datetime import datetime
from typing import Mapping

from cronoq.api import PhaseCounts, TaskPhase, TaskPool, TaskPoolStatus, snake_case
from cronoq.engine import reasons
from cronoq.engine.conditions import set_condition


def pool_status(pool: TaskPool, phases: Mapping[TaskPhase, int], running: int, queued: int,
                now: datetime) -> TaskPoolStatus | None:
    """The pool's new status, or None when the stored one already says all this."""
    counts = PhaseCounts(**{snake_case(phase.value): n for phase, n in phases.items() if n})
    old = pool.status or TaskPoolStatus()
    generation = pool.metadata.generation
    if (old.counts, old.running, old.queued, old.observed_generation) == (counts, running, queued, generation):
        return None
    if pool.spec.paused:
        conditions = set_condition(list(old.conditions), "Ready", False, reasons.PAUSED,
                                   f"paused: {running} running (concurrency {pool.spec.concurrency} kept); "
                                   f"{queued} waiting", now, generation)
    else:
        conditions = set_condition(list(old.conditions), "Ready", True, reasons.ADMITTING,
                                   f"{running} running of {pool.spec.concurrency}; {queued} waiting", now, generation)
    return TaskPoolStatus(counts=counts, running=running, queued=queued, conditions=tuple(conditions),
                          observed_generation=generation)
