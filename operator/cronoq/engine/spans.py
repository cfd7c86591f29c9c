"""A task's spans (docs/how-to/tracing.md), read from what a status write adds and nothing else.

A task lives through many reconciles and maybe failovers, so no span is held open: each is made
once, when it ends, from the times the Task's status records, with ids that follow from the task
(pod_protocol.tracecontext): whoever emits it names the same span, and a span emitted twice (a
write replayed by a new leader) is the same span twice.

- the wait before an attempt (`wait`): from when the task began to wait for it (submitted, or the
  attempt before ended) to its dispatch, with why it waited last (the condition's reason: the
  pool's slots, its rate limit, a worker, ...); made by the write that records the attempt.
- an attempt (`attempt`): from the same start to its end, with its number, outcome, reason and exit
  or response code, and `dispatched` and `started` events; made by the write that ends it.
- the task (`task`): from its creation to its end, child of the producer's span when the Task
  carries one; made by the write that finishes it.
- a schedule's fire (`fire`): from the fire time to the creation of its Task, linked to the Task's
  task span; a trace of its own whose ids follow from the schedule's uid and the fire time, so any
  leader that makes (or finds made) the fire's Task sends the same span.

Pure: the exporter (controller/tracing.py) turns these into OpenTelemetry's spans."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

from cronoq.api import Attempt, AttemptOutcome, Task, TaskPhase, TaskSchedule, TaskStatus
from cronoq.engine.history import Identity, delivery_of
from cronoq.pod_protocol.tracecontext import TaskTrace

Value = str | int | bool
FAILED_PHASES = frozenset({TaskPhase.FAILED, TaskPhase.DEAD_LETTERED})


@dataclass(frozen=True, slots=True)
class Link:
    trace_id: str
    span_id: str


@dataclass(frozen=True, slots=True)
class Span:
    """One ended span, ids as lowercase hex."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    start: datetime
    end: datetime
    attributes: Mapping[str, Value]
    events: tuple[tuple[str, datetime], ...] = ()
    links: tuple[Link, ...] = ()
    error: str | None = None
    """Set when the span ended in error: what went wrong (its status's description)."""


def _reason(status: TaskStatus | None) -> str | None:
    """Why a task is where it is: its Running condition's reason (else its Ready one's)."""
    if status is None:
        return None
    for kind in ("Running", "Ready"):
        for condition in status.conditions:
            if condition.type == kind and condition.reason:
                return condition.reason
    return None


def _task_attributes(who: Identity) -> dict[str, Value]:
    found: dict[str, Value] = {"cronoq.task.namespace": who.namespace, "cronoq.task.name": who.name,
                               "cronoq.task.uid": who.uid, "cronoq.task.pool": who.pool}
    if who.key is not None:
        found["cronoq.task.key"] = who.key
    return found


def _waited_from(task: Task, status: TaskStatus, attempt: Attempt) -> datetime | None:
    """When the task began to wait for this attempt: the attempt before it ended, else the task
    was submitted (else created)."""
    before = next((a for a in status.attempts if a.number == attempt.number - 1), None)
    if before is not None and before.finished_at is not None:
        return before.finished_at
    return status.submitted_at or task.metadata.creation_timestamp


def _clamped(start: datetime | None, end: datetime) -> datetime:
    """A start no later than its end (recorded times come from clocks a second apart at worst)."""
    return end if start is None or start > end else start


def wait_span(task: Task, trace: TaskTrace, before: TaskStatus | None, status: TaskStatus,
              attempt: Attempt) -> Span | None:
    if attempt.dispatched_at is None:
        return None
    who = Identity.of(task)
    attributes = {**_task_attributes(who), "cronoq.attempt.number": attempt.number}
    if (reason := _reason(before)) is not None:
        attributes["cronoq.wait.reason"] = reason
    if before is not None and before.phase is not None:
        attributes["cronoq.wait.phase"] = before.phase.value
    return Span("wait", trace.trace_id, trace.wait_span(attempt.number), trace.attempt_span(attempt.number),
                _clamped(_waited_from(task, status, attempt), attempt.dispatched_at), attempt.dispatched_at,
                attributes)


def attempt_span(task: Task, trace: TaskTrace, status: TaskStatus, attempt: Attempt) -> Span | None:
    if attempt.outcome is None:
        return None
    who = Identity.of(task)
    end = attempt.finished_at or attempt.started_at or attempt.dispatched_at
    if end is None:
        return None
    attributes: dict[str, Value] = {
        **_task_attributes(who), "cronoq.attempt.number": attempt.number,
        "cronoq.attempt.trigger": attempt.trigger.value, "cronoq.attempt.outcome": attempt.outcome.value,
        "cronoq.attempt.delivery": delivery_of(who, attempt)}
    optional: dict[str, Value | None] = {
        "cronoq.attempt.reason": attempt.reason, "cronoq.attempt.exit_code": attempt.exit_code,
        "http.response.status_code": attempt.response_code, "cronoq.attempt.job": attempt.job,
        "cronoq.attempt.worker": attempt.worker, "cronoq.attempt.rule": attempt.rule,
        "cronoq.attempt.ignored": attempt.ignored, "cronoq.attempt.message": attempt.message}
    attributes.update({k: v for k, v in optional.items() if v is not None})
    events = tuple((name, at) for name, at in (("dispatched", attempt.dispatched_at), ("started", attempt.started_at))
                   if at is not None)
    error = None if attempt.outcome in (AttemptOutcome.SUCCESS, AttemptOutcome.CANCELLED) \
        else attempt.reason or attempt.outcome.value
    return Span("attempt", trace.trace_id, trace.attempt_span(attempt.number), trace.task_span,
                _clamped(_waited_from(task, status, attempt), end), end, attributes, events, error=error)


def task_span(task: Task, trace: TaskTrace, status: TaskStatus, links: tuple[Link, ...] = ()) -> Span | None:
    if status.phase is None or not status.phase.terminal:
        return None
    end = status.finished_at or (status.attempts[-1].finished_at if status.attempts else None)
    if end is None:
        return None
    who = Identity.of(task)
    attributes: dict[str, Value] = {**_task_attributes(who), "cronoq.task.phase": status.phase.value,
                                    "cronoq.task.attempts": status.attempt}
    reason = _reason(status)
    if reason is not None:
        attributes["cronoq.task.reason"] = reason
    if status.duplicate_of is not None:
        attributes["cronoq.task.duplicate_of"] = status.duplicate_of
    error = (status.message or reason or status.phase.value) if status.phase in FAILED_PHASES else None
    start = task.metadata.creation_timestamp or status.submitted_at
    return Span("task", trace.trace_id, trace.task_span, trace.parent.span_id if trace.parent else None,
                _clamped(start, end), end, attributes, links=links, error=error)


def spans(task: Task, before: TaskStatus | None, after: TaskStatus, links: tuple[Link, ...] = ()) -> tuple[Span, ...]:
    """The spans a status write from `before` to `after` ends: the waits of the attempts it records,
    the attempts it ends and, when it finishes the task, the task's. `links`: the spans of the
    tasks it depends on. None when the producer's context says it is not sampled."""
    trace = TaskTrace.of(task.metadata.uid or "", task.metadata.annotations)
    if not trace.sampled or not task.metadata.uid:
        return ()
    known = {a.number: a for a in before.attempts} if before is not None else {}
    made: list[Span | None] = []
    for attempt in after.attempts:
        seen = known.get(attempt.number)
        if seen is None or seen.dispatched_at is None:
            made.append(wait_span(task, trace, before, after, attempt))
        if attempt.outcome is not None and (seen is None or seen.outcome is None):
            made.append(attempt_span(task, trace, after, attempt))
    if after.phase is not None and after.phase.terminal and not (before and before.phase and before.phase.terminal):
        made.append(task_span(task, trace, after, links))
    return tuple(s for s in made if s is not None)


def dependency_links(traces: Mapping[str, TaskTrace]) -> tuple[Link, ...]:
    """Links to the task spans of a task's dependencies (by name → their trace)."""
    return tuple(Link(t.trace_id, t.task_span) for _, t in sorted(traces.items()))


def fire_ids(schedule_uid: str, fire_time: datetime) -> tuple[str, str]:
    """(trace id, span id) of a schedule's fire: from the schedule's uid and the fire time alone."""
    digest = hashlib.sha256(f"{schedule_uid}/fire/{int(fire_time.timestamp())}".encode()).hexdigest()
    trace_id, span_id = digest[:32], digest[32:48]
    return (trace_id if trace_id.strip("0") else "1".rjust(32, "0"),
            span_id if span_id.strip("0") else "1".rjust(16, "0"))


def fire_span(schedule: TaskSchedule, fire_time: datetime, task_name: str, task_uid: str | None,
              task_annotations: Mapping[str, str] | None, created_at: datetime | None, trigger: str) -> Span | None:
    """The span of a schedule's fire that made (or found made) its Task: from the fire time to the
    Task's creation (its lag), linked to the Task's task span. None without the schedule's uid."""
    uid = schedule.metadata.uid
    if not uid:
        return None
    trace_id, span_id = fire_ids(uid, fire_time)
    attributes: dict[str, Value] = {
        "cronoq.schedule.namespace": schedule.metadata.namespace or "", "cronoq.schedule.name": schedule.metadata.name
        or "", "cronoq.schedule.uid": uid, "cronoq.fire.time": fire_time.isoformat().replace("+00:00", "Z"),
        "cronoq.fire.trigger": trigger, "cronoq.task.name": task_name,
        "cronoq.task.pool": schedule.spec.task_template.spec.pool}
    links: tuple[Link, ...] = ()
    if task_uid:
        attributes["cronoq.task.uid"] = task_uid
        task = TaskTrace.of(task_uid, task_annotations)
        if task.sampled:
            links = (Link(task.trace_id, task.task_span),)
    end = created_at if created_at is not None and created_at >= fire_time else fire_time
    return Span("fire", trace_id, span_id, None, fire_time, end, attributes, links=links)
