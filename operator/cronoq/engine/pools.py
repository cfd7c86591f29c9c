"""A TaskPool's status (counts by phase, running, queued, the Ready condition): pure, from the
counts the store keeps, and only when it changed (the status is written at most every few
seconds, and never to say the same thing again)."""
from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any, Mapping

from cronoq.api import PhaseCounts, QueueMarks, TaskPhase, TaskPool, TaskPoolStatus, snake_case
from cronoq.engine import reasons
from cronoq.engine.conditions import set_condition


class WorkerTrust(str, Enum):
    """Whether the operator may believe pull workers' Leases about who serves a pool (DESIGN §17)."""

    GUARDED = "guarded"
    """The lease guard (the chart's admission policy) is installed: only a writer the cluster admin
    allowed to `serve` a pool can write its workers' Leases."""
    TRUSTED = "trusted"
    """Not checked: the operator runs with --trust-worker-leases (a cluster of one trusted team)."""
    UNGUARDED = "unguarded"
    """The lease guard is not installed (or cannot be read): Workers pools are handed nothing."""


def roomiest(room: Mapping[str, int]) -> str | None:
    """The worker with the most room (ties: the last name), None when none has room: where the
    next attempt of a Workers pool goes."""
    best = max(room, key=lambda w: (room[w], w), default=None)
    return best if best is not None and room[best] > 0 else None


def kueue_problem(local_queue: str, namespace: str, found: str, queue: Mapping[str, Any] | None) -> str | None:
    """What keeps Kueue from admitting a pool's Jobs, from a look at its LocalQueue (`found`:
    "found", "missing", "no-kueue" or "forbidden"); None when the LocalQueue is there and active."""
    waits = "the pool's Jobs wait suspended, never started"
    if found == "no-kueue":
        return f"Kueue is not installed (the API server serves no kueue.x-k8s.io/v1beta2): {waits}"
    if found == "missing":
        return f"LocalQueue {local_queue} not found in namespace {namespace}: {waits}"
    if found == "forbidden":
        return None  # the operator may not look (an older chart): nothing to say, rather than a false alarm
    conditions = ((queue or {}).get("status") or {}).get("conditions") or []
    active = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Active"), None)
    if active is not None and active.get("status") == "False":
        why = str(active.get("message") or active.get("reason") or "")[:256]
        return f"LocalQueue {local_queue} is not active ({why}): {waits}"
    return None


def pool_status(pool: TaskPool, phases: Mapping[TaskPhase, int], running: int, queued: int,
                now: datetime, trust: WorkerTrust | None = None, kueue: str | None = None,
                queue_marks: QueueMarks | None = None) -> TaskPoolStatus | None:
    """The pool's new status, or None when the stored one already says all this. `trust` is the
    operator's about worker Leases, for a Workers pool (None: a Job pool); `kueue` what keeps Kueue
    from admitting the Jobs of a pool with admission.kueue (`kueue_problem`; None: nothing);
    `queue_marks` the marks of its admission order (`admission.marks`; None: too few wait)."""
    counts = PhaseCounts(**{snake_case(phase.value): n for phase, n in phases.items() if n})
    old = pool.status or TaskPoolStatus()
    generation = pool.metadata.generation
    ready = next((c for c in old.conditions if c.type == "Ready"), None)
    was_unguarded = ready is not None and ready.reason == reasons.LEASE_GUARD_MISSING
    was_kueue = ready.message if ready is not None and ready.reason == reasons.KUEUE_NOT_READY else None
    if ((old.counts, old.running, old.queued, old.observed_generation, old.queue_marks)
            == (counts, running, queued, generation, queue_marks)
            and was_unguarded == (trust is WorkerTrust.UNGUARDED) and was_kueue == kueue):
        return None
    if trust is WorkerTrust.UNGUARDED:
        conditions = set_condition(list(old.conditions), "Ready", False, reasons.LEASE_GUARD_MISSING,
                                   "no attempt is handed to workers: the lease guard (the chart's admission policy "
                                   "workers.leaseGuard) is not installed, so any Lease writer could pose as this "
                                   "pool's worker; install it, or run the operator with --trust-worker-leases if "
                                   f"every Lease writer of the namespace is trusted; {queued} waiting", now, generation)
    elif kueue is not None:
        conditions = set_condition(list(old.conditions), "Ready", False, reasons.KUEUE_NOT_READY, kueue, now,
                                   generation)
    elif pool.spec.paused:
        conditions = set_condition(list(old.conditions), "Ready", False, reasons.PAUSED,
                                   f"paused: {running} running (concurrency {pool.spec.concurrency} kept); "
                                   f"{queued} waiting", now, generation)
    else:
        trusted = ("; worker Leases trusted without the lease guard (--trust-worker-leases)"
                   if trust is WorkerTrust.TRUSTED else "")
        limit = pool.spec.rate_limit
        limited = (f"; at most {limit.starts_per_second:g} starts/s (burst {limit.burst})" if limit else "")
        conditions = set_condition(list(old.conditions), "Ready", True, reasons.ADMITTING,
                                   f"{running} running of {pool.spec.concurrency}; {queued} waiting{limited}{trusted}",
                                   now, generation)
    return TaskPoolStatus(counts=counts, running=running, queued=queued, queue_marks=queue_marks,
                          conditions=tuple(conditions), observed_generation=generation)
