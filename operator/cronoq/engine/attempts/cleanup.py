"""Everything seen of a task that is not its open attempt: Jobs to stop, late reports to ignore
(and tell once), and which Job or Lease speaks for an attempt at all (`own`), so that one that
merely took an attempt's name is never adopted.

Used for a task being decided (with its open attempt, if any) and for a finished one (`settle`).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterable, Sequence

from cronoq.api import Attempt
from cronoq.engine import reasons, retention
from cronoq.engine.attempts import wording
from cronoq.engine.naming import job_name, served_lease_name
from cronoq.engine.observed import AttemptJob
from cronoq.engine.plan import Event, Plan

OPERATOR_ENDED = frozenset({reasons.TIMEOUT, reasons.START_TIMEOUT, reasons.LEASE_EXPIRED, reasons.CANCELLED})
"""Attempts the operator itself ended: a report from their Job arriving later is stale."""


@dataclass(frozen=True)
class Cleanup:
    deletes: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()
    stale: tuple[str, ...] = ()
    """uids of Jobs whose reports are ignored."""


def cleanup(name: str, n: int, open_attempt: Attempt | None, records: Sequence[Any],
            jobs: Iterable[AttemptJob]) -> Cleanup:
    """Jobs that are not the open attempt's: stop the ones still running, and ignore (and report
    once) what finished Jobs of ended, aborted or never-recorded attempts say."""
    by_number = {r.number: r for r in records}
    # Records older than the history bound are dropped from the status; their Jobs remain.
    oldest_kept = records[0].number if records else n + 1
    deletes, events, stale = [], [], []
    for job in jobs:
        record = by_number.get(job.number)
        if job.worker is not None and (record is None or not own(job, name, record)):
            continue  # a Lease no worker of this task's attempts wrote as theirs: it changes nothing
        ours = (job.name == job_name(name, job.number) and _same_lease(job, record.lease_id if record else None)
                if job.worker is None else True)
        if open_attempt is not None and job.number == n and ours:
            continue
        record = record if ours else None
        foreign = not ours or job.number > n
        if job.worker is None and (job.active or (foreign and not (job.gone or job.deleting))):
            deletes.append(job.name)
            if foreign:
                events.append(Event(reasons.FOREIGN_JOB, wording.FOREIGN_JOB.format(job=job.name, number=job.number),
                                    warning=True))
        reported = job.termination is not None or job.finished is not None
        pruned = ours and record is None and job.number < oldest_kept
        closing = (record is not None and record.reason not in OPERATOR_ENDED) or pruned
        if reported and not closing and job.uid:
            stale.append(job.uid)
            events.append(Event(reasons.STALE_COMPLETION,
                                wording.STALE_COMPLETION.format(job=job.name, number=job.number, n=n), warning=True))
    return Cleanup(tuple(deletes), tuple(events), tuple(stale))


def settle(name: str, attempt: int, records: Sequence[Any], jobs: Sequence[AttemptJob],
           job_retention: timedelta | None = None) -> Plan:
    """A finished task's plan: its leftover Jobs to stop, late reports to ignore, and its Jobs
    brought to the `job_retention` in effect (None: unknown, left as they are).
    `records` need only `number`, `lease_id`, `reason` and `worker` (a finished task is kept compact)."""
    found = cleanup(name, attempt, None, records, jobs)
    return Plan(delete_jobs=found.deletes, events=found.events, stale_jobs=found.stale,
                retime_jobs=retention.retime(jobs, job_retention, found.deletes))


def find(jobs: Iterable[AttemptJob], task: str, attempt: Any) -> AttemptJob | None:
    """What was seen of the attempt itself: its own Job (its deterministic name and, when both are
    known, its lease id, so a Job that merely took the name is never adopted), or for an attempt a
    worker serves, that worker's Lease alone (see `own`). `attempt` needs only `number`,
    `lease_id` and `worker`."""
    return next((j for j in jobs if own(j, task, attempt)), None)


def own(job: AttemptJob, task: str, attempt: Any) -> bool:
    """Whether `job` speaks for `attempt`. A Job-mode attempt takes no Lease report; a served
    attempt takes only the Lease named for the worker the status names, held by its lease id: any
    other Lease writer's claim changes nothing."""
    if job.number != attempt.number or job.worker != attempt.worker:
        return False
    if attempt.worker is None:
        return job.name == job_name(task, attempt.number) and _same_lease(job, attempt.lease_id)
    return (job.name == served_lease_name(task, attempt.number, attempt.worker)
            and job.lease_id is not None and job.lease_id == attempt.lease_id)


def _same_lease(job: AttemptJob, lease: str | None) -> bool:
    """Whether the Job carries the lease id its attempt's record names (a Job without one never
    does); with no record to compare (pruned from the history), its name alone speaks."""
    return lease is None or job.lease_id == lease
