"""One reconcile, one decision: `decide` takes what the controller gathered about a task (its
`Subject` and the `Observation` around it) and returns the one `Plan` the controller carries out.
It picks the decision the subject needs (a live task's next step, a finished task's settling, an
unreadable task's refusal), works out the gate of a task that has not started (its key's holders,
then its dependencies, then its start time), and builds the Job a plan creates, so the controller asks nothing more of
the engine between gathering and applying.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Union

from cronoq.api import Task, TaskPhase, TaskStatus
from cronoq.engine import delay, dependencies, keys, notify
from cronoq.engine.attempts import is_ready, reconcile, refusal, settle
from cronoq.engine.gate import Gate
from cronoq.engine.jobs import build_job
from cronoq.engine.plan import Deletion, Effective, Observation, Plan
from cronoq.engine.pools import roomiest
from cronoq.engine.retention import job_retention_for, job_retention_of, retime, task_expires_at, ttl_for
from cronoq.pod_protocol.tracecontext import TaskTrace


@dataclass(frozen=True, slots=True)
class Mark:
    """An attempt of a finished task, as much as judging its leftover Jobs needs."""

    number: int
    lease_id: str | None
    reason: str | None
    worker: str | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """A finished task, reduced to what the operator still decides on: keys, dependents, its
    leftover Jobs and when to delete it. Its output and messages stay in the API server (read
    when a duplicate needs them), so the store grows by a small record per kept task, not by its body."""

    name: str
    phase: TaskPhase
    pool: str
    created_at: datetime | None
    finished_at: datetime | None
    attempt: int = 0
    marks: tuple[Mark, ...] = ()
    key: str | None = None
    depends_on: tuple[str, ...] = ()
    duplicate_of: str | None = None
    output_available: bool = False
    ttl_after_finished: timedelta | None = None
    """The task's own ttlAfterFinished for the way it ended (None: its pool's)."""
    job_retention: timedelta | None = None
    """The task's own jobRetention for the way it ended (None: its pool's)."""
    notified: tuple[str, ...] = ()
    """The receivers whose notification of this ending the status records (delivered or given up)."""

    @classmethod
    def of(cls, task: Task) -> Finished:
        status, spec = task.status, task.spec
        assert status is not None and status.phase is not None, "only a finished task (it has a phase)"
        return cls(name=task.metadata.name or "", phase=status.phase, pool=spec.pool,
                   created_at=task.metadata.creation_timestamp, finished_at=status.finished_at,
                   attempt=status.attempt,
                   marks=tuple(Mark(a.number, a.lease_id, a.reason, a.worker) for a in status.attempts),
                   key=spec.key, depends_on=tuple(d.task for d in spec.depends_on),
                   duplicate_of=status.duplicate_of, output_available=status.output_available,
                   ttl_after_finished=ttl_for(spec, status.phase),
                   job_retention=job_retention_for(spec, status.phase),
                   notified=notify.recorded_receivers(task))


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A task the models cannot read (e.g. a payload over its limit): only its refusal is decided."""

    status: TaskStatus | None
    error: str
    generation: int | None


@dataclass(frozen=True, slots=True)
class Live:
    """An unfinished task the models read."""

    task: Task


Subject = Union[Live, Finished, Unreadable]


def decide(subject: Subject, seen: Observation, rng: random.Random) -> Plan:
    """The plan for one reconcile of the task (see the module docstring)."""
    if isinstance(subject, Unreadable):
        status = refusal(subject.status, subject.error, subject.generation, seen.epoch, seen.now)
        return Plan(status=status)
    if isinstance(subject, Finished):
        plan = settle(subject.name, subject.attempt, subject.marks, seen.jobs,
                      job_retention_of(subject.job_retention, seen.pool, subject.phase))
        return replace(plan, deletion=Deletion(None if seen.awaited else task_expires_at(
            subject.finished_at, subject.ttl_after_finished, subject.key, seen.pool, subject.phase)))
    task = subject.task
    settings = Effective.of(task, seen.pool)
    if seen.worker_room is not None and is_ready(task, seen.now):
        seen = replace(seen, worker=roomiest(seen.worker_room))
    if not (task.status and task.status.attempt):
        gate = _gate(task, seen)
        if isinstance(gate, Plan):
            return gate
        seen = replace(seen, gate=gate)
    plan = reconcile(task, settings, seen, rng)
    status = plan.status
    if status is not None and status.phase is not None and status.phase.terminal:
        plan = replace(plan, deletion=Deletion(None if seen.awaited else task_expires_at(
            status.finished_at, ttl_for(task.spec, status.phase), task.spec.key, seen.pool, status.phase)),
                       retime_jobs=_retimed_for_outcome(task, status.phase, seen, plan))
    order = plan.create_job
    if order is None:
        return plan
    if task.spec.depends_on and seen.inputs is None:
        return Plan(read_inputs=True)  # the outputs its Job hands over are not in memory
    job = build_job(task, seen.pool, order.number, order.lease_id, lease_ttl=settings.lease_ttl,
                    sidecar_image=seen.sidecar_image if settings.heartbeat_sidecar else None,
                    job_retention=settings.job_retention, push_image=seen.sidecar_image,
                    service_account=seen.service_account.in_namespace(task.metadata.namespace or ""),
                    inputs=seen.inputs if task.spec.depends_on else None,
                    checkpoint=_checkpoint(status or task.status),
                    traceparent=TaskTrace.of(task.metadata.uid or "", task.metadata.annotations).attempt(
                        order.number).traceparent if seen.traced else None)
    return replace(plan, job=job)


def _checkpoint(status: TaskStatus | None) -> str | None:
    """The newest checkpoint an attempt saved, for the next one (CRONOQ_CHECKPOINT)."""
    return status.checkpoint.data if status is not None and status.checkpoint is not None else None


def _retimed_for_outcome(task: Task, phase: TaskPhase, seen: Observation, plan: Plan) -> tuple[tuple[str, int], ...]:
    """The Jobs of a task ending in this reconcile, brought to its outcome's jobRetention in the
    same plan: the write that ends it may be the last event the task sees for a long time."""
    own = job_retention_for(task.spec, phase)
    kept = job_retention_of(own, seen.pool if seen.pool_found else None, phase)
    return retime(seen.jobs, kept, plan.delete_jobs)


def _gate(task: Task, seen: Observation) -> Gate | Plan:
    """What the task's key, then its dependencies, then its start time say about its first attempt;
    or the read to make first: its finished original's full record, or the archive's answer for a
    key nothing in the cluster holds."""
    held, now = seen.holders, seen.now
    if task.spec.key and held is not None:
        first = keys.reported(held.me, held.others, held.retention, now)
        others = held.others
        if first is not None:
            if held.original is None or held.original.name != first.name:
                return Plan(read_original=first.name)
            others = tuple(held.original if h.name == first.name else h for h in others)
        verdict = keys.gate(held.me, others, held.retention, now)
        if verdict.verdict != "run":
            return verdict
        if held.archive and keys.asks_archive(held.me):
            if held.archived is None:
                return Plan(read_archive=True)
            verdict = keys.archived_gate(held.archived, held.retention, now)
            if verdict.verdict != "run":
                return verdict
    if task.spec.depends_on:
        after = dependencies.gate(task.metadata.name or "", task.spec.depends_on, seen.dependencies or {}, seen.cycle)
        if after.verdict != "run":
            return after
    return delay.gate(task, now)
