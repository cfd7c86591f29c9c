"""The Task state machine: from the observed Task and its attempts' Jobs, decide the next status
and what to do (DESIGN §1–§4). Pure: the clock, randomness, the leader epoch and the pool's
admission decision are passed in.

The decision is level-based: it reads what is, not which event arrived, so running it twice on
the same observation plans the same thing, and running it after a crash or a failover picks up
where the status says the task is. The status is the write-ahead log of attempts: attempt n is
recorded (with a precondition on the write) before Job n is created, and an attempt is recorded
as ended before its Job is deleted, so nothing the operator does is lost if it dies between the
two steps.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Iterable, Sequence

from cronoq.api import (
    Attempt, AttemptOutcome, AttemptTrigger, Task, TaskPhase,
    TaskStatus,
)
from cronoq.api.limits import ATTEMPT_MESSAGE_LIMIT, ATTEMPTS_KEPT, REASON_LIMIT, SUMMARY_LIMIT
from cronoq.engine import reasons, retention
from cronoq.engine.backoff import retry_delay
from cronoq.engine.conditions import set_condition
from cronoq.engine.naming import job_name, lease_id, served_lease_name
from cronoq.engine.observed import AttemptJob
from cronoq.engine.outcome import Verdict, classify, sdk_report, truncate
from cronoq.engine.plan import Effective, Event, JobToCreate, Observation, Plan

HISTORY = ATTEMPTS_KEPT
"""Attempt records kept in the status (the CRD's bound); the newest are kept."""

# Attempts the operator itself ended: a report from their Job arriving later is stale.
OPERATOR_ENDED = frozenset({reasons.TIMEOUT, reasons.START_TIMEOUT, reasons.LEASE_EXPIRED, reasons.CANCELLED})


def is_ready(task: Task, now: datetime) -> bool:
    """Waiting only for a pool slot: new, queued, or retrying with its backoff over."""
    if task.spec.cancel:
        return False
    status = task.status
    if status is None or status.phase in (None, TaskPhase.QUEUED):
        return True
    return status.phase is TaskPhase.RETRYING and (status.next_attempt_at is None or status.next_attempt_at <= now)


@dataclass
class _Draft:
    """What a reconcile has decided so far: the status being built and the side effects."""

    task: Task
    seen: Observation
    status: TaskStatus
    records: list[Attempt]
    deletes: list[str]
    events: list[Event]
    stale: tuple[str, ...]
    ended: tuple[Attempt, ...] = ()
    requeue: float | None = None

    @property
    def n(self) -> int:
        return self.status.attempt

    def plan(self, status: TaskStatus | None = None, **fields: Any) -> Plan:
        return Plan(status=status, delete_jobs=_uniq(self.deletes), events=tuple(self.events),
                    stale_jobs=self.stale, ended=self.ended, **{"requeue_after": self.requeue, **fields})

    def finish(self, phase: TaskPhase, reason: str, message: str, output: str | None = None) -> Plan:
        return self.plan(_finish(self.status, self.records, phase, reason, message, self.task, self.seen, output))

    def stamped(self) -> TaskStatus:
        return _stamp(self.status, self.task, self.seen)


def reconcile(task: Task, settings: Effective, seen: Observation, rng: random.Random) -> Plan:
    """The plan for `task` given what was observed. See the module docstring."""
    status = task.status or TaskStatus()
    if status.epoch > seen.epoch:
        # Written by a newer leader: this replica is deposed and must not act at all.
        return Plan()
    plan = _decide(task, status, settings, seen, rng)
    if plan.status is not None and plan.status.worker != (serving := serving_worker(plan.status)):
        plan = replace(plan, status=plan.status.model_copy(update={"worker": serving}))
    known = seen.pool_found or task.spec.job_retention is not None
    return replace(plan, retime_jobs=retention.retime(seen.jobs, settings.job_retention if known else None,
                                                      plan.delete_jobs))


def _decide(task: Task, status: TaskStatus, settings: Effective, seen: Observation, rng: random.Random) -> Plan:
    records = list(status.attempts)
    n = status.attempt
    current = records[-1] if records and records[-1].number == n else None
    open_attempt = current if current is not None and current.outcome is None else None
    name = task.metadata.name or ""

    cleanup = _cleanup(name, n, open_attempt, records, seen.jobs)
    draft = _Draft(task, seen, status, records, list(cleanup.deletes), list(cleanup.events), cleanup.stale)
    phase = status.phase
    if phase is not None and phase.terminal:
        return draft.plan()
    if task.spec.cancel:  # cancellation wins over everything but an outcome already recorded
        return _cancel(draft, open_attempt)
    if phase in (None, TaskPhase.BLOCKED) and n == 0 and seen.gate.verdict != "run":
        return _gated(draft.plan(), status, records, task, seen)
    if open_attempt is not None:
        ended = _end(draft, open_attempt, settings, rng)
        if ended is not None:
            return ended
    return _next(draft, settings)


def _cancel(draft: _Draft, open_attempt: Attempt | None) -> Plan:
    if open_attempt is not None:
        n, name = draft.n, draft.task.metadata.name or ""
        verdict = Verdict(AttemptOutcome.CANCELLED, reasons.CANCELLED, "cancelled by spec.cancel")
        closed = _close(open_attempt, verdict, _job(draft.seen.jobs, name, open_attempt), draft.seen.now)
        draft.records[-1] = closed
        draft.ended = (closed,)
        if open_attempt.worker is None:  # a worker sees the cancellation in the status and aborts
            draft.deletes.append(open_attempt.job or job_name(name, n))
        draft.events.append(Event(reasons.ATTEMPT_ENDED, f"attempt {n} cancelled"))
    return draft.finish(TaskPhase.CANCELLED, reasons.CANCELLED, "cancelled by spec.cancel")


def _end(draft: _Draft, open_attempt: Attempt, settings: Effective, rng: random.Random) -> Plan | None:
    """Judge the running attempt. A plan when that decides this reconcile (still running, or the
    task finished); None when it ended retryably and the draft now waits out its backoff."""
    seen, now, n = draft.seen, draft.seen.now, draft.n
    job = _job(seen.jobs, draft.task.metadata.name or "", open_attempt)
    if open_attempt.worker is not None:
        verdict, draft.requeue = _judge_served(job, open_attempt, settings, seen, now)
        if verdict is None:
            return draft.plan()
        abort = False  # the worker reads the ended attempt in the status and aborts its handler
    else:
        verdict, draft.requeue, abort = _judge(job, open_attempt, settings, seen, now)
    if verdict is None and job is None and seen.job_rejected is None and retention.job_may_be_gone(
            open_attempt.dispatched_at, settings.job_retention, now):
        # Its Job may have run and been cleaned up while no operator watched: at least once.
        verdict = Verdict(AttemptOutcome.RETRYABLE, reasons.JOB_DELETED,
                          f"the attempt's Job is gone and its outcome was never observed (its jobRetention, "
                          f"{_secs(settings.job_retention)}, passed while no operator watched it)")
    if verdict is None:
        if job is None and seen.job_rejected is None:
            # Recorded but not (yet) created: create it. AlreadyExists is ours and fine.
            if seen.job_refused is not None and _reason(draft.status) != reasons.JOB_REFUSED:
                # Said once (the quota's usage in the message changes on every refusal); the
                # work queue's backoff, not this write, times the next creation.
                draft.status = _say(draft.status, reasons.JOB_REFUSED,
                                    f"attempt {n} waits: its Job was refused, and is created again with backoff: "
                                    f"{seen.job_refused}", draft.task, now)
                return draft.plan(draft.stamped())
            return draft.plan(create_job=JobToCreate(n, open_attempt.lease_id or lease_id(seen.epoch, n)))
        refused = job is not None and _reason(draft.status) == reasons.JOB_REFUSED
        if refused:  # its Job exists at last: say so
            draft.status = _say(draft.status, reasons.ATTEMPT_RUNNING,
                                f"attempt {n} of {settings.retry.max_attempts} running", draft.task, now)
        told = _tell_waiting(draft.status, job, settings, draft.task, now)
        if told is not None or refused:
            draft.status = told or draft.status
            return draft.plan(draft.stamped())
        return draft.plan()
    closed = _close(open_attempt, verdict, job, now)
    draft.records[-1] = closed
    draft.ended = (closed,)
    if abort and job is not None:
        draft.deletes.append(job.name)
    draft.events.append(Event(reasons.ATTEMPT_ENDED, _ended_message(closed),
                              warning=verdict.outcome is not AttemptOutcome.SUCCESS))
    draft.requeue = None
    if verdict.outcome is AttemptOutcome.SUCCESS:
        return draft.finish(TaskPhase.SUCCEEDED, reasons.SUCCEEDED, f"succeeded on attempt {n}", verdict.output)
    if verdict.outcome is AttemptOutcome.PERMANENT:
        return draft.finish(TaskPhase.FAILED, reasons.FAILED,
                            f"attempt {n} failed permanently ({verdict.reason}): {verdict.message}")
    if n >= settings.retry.max_attempts:
        return draft.finish(TaskPhase.DEAD_LETTERED, reasons.ATTEMPTS_EXHAUSTED,
                            f"all {n} attempts failed; last ({verdict.reason}): {verdict.message}")
    delay = retry_delay(settings.retry, n + 1, rng, verdict.retry_after)
    status = draft.status.model_copy(update={
        "phase": TaskPhase.RETRYING, "attempts": tuple(draft.records), "next_attempt_at": now + delay,
    })
    draft.status = _say(status, reasons.BACKING_OFF,
                        f"attempt {n} failed ({verdict.reason}): {verdict.message}; attempt {n + 1} of "
                        f"{settings.retry.max_attempts} after {delay.total_seconds():.1f}s "
                        f"(at {(now + delay).strftime('%H:%M:%SZ')})", draft.task, now)
    draft.requeue = max(delay.total_seconds(), 0.0)
    return None


def _next(draft: _Draft, settings: Effective) -> Plan:
    """No attempt runs: start the next one when admitted, else wait (for a slot or a backoff)."""
    seen, now, n, status, task = draft.seen, draft.seen.now, draft.n, draft.status, draft.task
    phase = status.phase
    ready = phase in (None, TaskPhase.QUEUED, TaskPhase.BLOCKED) or (
        phase is TaskPhase.RETRYING and (status.next_attempt_at is None or status.next_attempt_at <= now))

    if ready and n > 0 and n >= settings.retry.max_attempts:
        # The pool's maxAttempts was lowered under a task waiting for its next attempt.
        last = draft.records[-1] if draft.records else None
        detail = f"; last ({last.reason}): {last.message}" if last is not None and last.reason else ""
        return draft.finish(TaskPhase.DEAD_LETTERED, reasons.ATTEMPTS_EXHAUSTED,
                            f"all {n} attempts used (maxAttempts is {settings.retry.max_attempts}){detail}")

    if ready and settings.workers and (given := _pod_fields(task)):
        return draft.finish(TaskPhase.FAILED, reasons.INVALID_SPEC, (
            f"pool {seen.pool_name} delivers to workers (delivery: Workers), which run the payload with their own "
            f"code; this task gives {', '.join(given)}, which only a Job can run: remove them, or submit it to a "
            f"pool with delivery: Job"))

    if ready and seen.pool_found and seen.admit and (seen.worker is not None or not settings.workers):
        number = n + 1
        served = seen.worker if settings.workers else None
        lease = lease_id(seen.epoch, number)
        attempt = Attempt(number=number, lease_id=lease, worker=served,
                          job=None if served else job_name(task.metadata.name or "", number),
                          trigger=AttemptTrigger.FIRST if number == 1 else AttemptTrigger.RETRY, dispatched_at=now,
                          **settings.terms())
        draft.records.append(attempt)
        draft.status = _say(status.model_copy(update={
            "phase": TaskPhase.RUNNING, "attempt": number, "attempts": tuple(draft.records[-HISTORY:]),
            "next_attempt_at": None, "submitted_at": status.submitted_at or seen.first_seen or now,
        }), reasons.ATTEMPT_RUNNING, f"attempt {number} of {settings.retry.max_attempts} running"
            + (f" on worker {served}" if served else ""), task, now)
        return draft.plan(draft.stamped(), create_job=None if served else JobToCreate(number, lease), started=attempt,
                          requeue_after=_served_deadline(settings, seen, now) if served else None)

    if ready and not draft.ended:
        # Waiting for a slot (or for the pool to exist). Write Queued only when that is news.
        reason, message = ((reasons.WAITING_FOR_SLOT, f"queued in pool {seen.pool_name}") if seen.pool_found else
                           (reasons.POOL_NOT_FOUND, f"TaskPool {seen.pool_name} does not exist; the task starts once it does"))
        if seen.pool_found and settings.workers and seen.worker is None:
            reason, message = (reasons.WAITING_FOR_WORKER, f"queued in pool {seen.pool_name}: no live worker of "
                               f"the pool has room (workers announce themselves with a Lease labelled "
                               f"cronoq.io/worker-pool={seen.pool_name})")
        if phase is TaskPhase.QUEUED and _reason(status) == reason and _acknowledged(status, task):
            return draft.plan(wants_slot=True)
        draft.status = _say(status.model_copy(update={
            "phase": TaskPhase.QUEUED, "next_attempt_at": None,
            "submitted_at": status.submitted_at or seen.first_seen or now,
        }), reason, message, task, now)
        return draft.plan(draft.stamped(), wants_slot=True)

    if draft.ended:
        return draft.plan(draft.stamped(), wants_slot=ready)
    if phase is TaskPhase.RETRYING and status.next_attempt_at is not None:
        draft.requeue = max((status.next_attempt_at - now).total_seconds(), 0.0)
    if not _acknowledged(status, task):  # a priority change: say it was seen
        return draft.plan(draft.stamped(), wants_slot=ready)
    return draft.plan(wants_slot=ready)


POD_FIELDS = ("image", "command", "args", "env", "resources", "service_account_name", "node_selector",
              "tolerations", "priority_class_name", "pod_metadata", "template", "http", "heartbeat_sidecar",
              "start_timeout", "job_retention")
"""Task fields only a Job-delivered attempt can honour."""


def _pod_fields(task: Task) -> list[str]:
    """The pod fields a task sets (by their API names), which a worker-served attempt cannot honour."""
    spec = task.spec
    given = [name for name in POD_FIELDS if getattr(spec, name) not in (None, (), {})]
    fields = type(spec).model_fields
    return [fields[name].alias or _camel(name) for name in given]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def settle(name: str, attempt: int, records: Sequence[Any], jobs: Sequence[AttemptJob],
           job_retention: timedelta | None = None) -> Plan:
    """A finished task's plan: its leftover Jobs to stop, late reports to ignore, and its Jobs
    brought to the `job_retention` in effect (None: unknown, left as they are).
    `records` need only `number`, `lease_id`, `reason` and `worker` (a finished task is kept compact)."""
    cleanup = _cleanup(name, attempt, None, records, jobs)
    return Plan(delete_jobs=cleanup.deletes, events=cleanup.events, stale_jobs=cleanup.stale,
                retime_jobs=retention.retime(jobs, job_retention, cleanup.deletes))


def refusal(stored: TaskStatus | None, error: str, generation: int | None, epoch: int,
            now: datetime) -> TaskStatus | None:
    """The status of a task the models cannot read (a payload over its limit): Failed with
    InvalidSpec and the reason, written once. None when it has finished already, or when a newer
    leader wrote it (this replica is deposed and must not act)."""
    status = stored or TaskStatus()
    if status.epoch > epoch or (status.phase is not None and status.phase.terminal):
        return None
    new = status.model_copy(update={"phase": TaskPhase.FAILED, "finished_at": now, "next_attempt_at": None,
                                    "submitted_at": status.submitted_at or now, "epoch": epoch,
                                    "observed_generation": generation})
    conditions = set_condition(list(new.conditions), "Running", False, TaskPhase.FAILED.value, "", now, generation)
    message = truncate(f"the task cannot run: {error}")
    conditions = set_condition(conditions, "Finished", True, reasons.INVALID_SPEC, message, now, generation)
    return new.model_copy(update={"message": message, "summary": _summary(message), "conditions": tuple(conditions)})


def _gated(base: Plan, status: TaskStatus, records: list[Attempt], task: Task, seen: Observation) -> Plan:
    """A task its key or dependencies hold back (Blocked) or end without running."""
    gate = seen.gate
    if gate.verdict == "end":
        assert gate.phase is not None  # Gate.end always gives one
        new = _finish(status, records, gate.phase, gate.reason, gate.message, task, seen, output=gate.output)
        return replace(base, status=new.model_copy(update={"duplicate_of": gate.duplicate_of}))
    if (status.phase is TaskPhase.BLOCKED and _reason(status) == gate.reason and _acknowledged(status, task)
            and status.message == truncate(gate.message) and status.duplicate_of == gate.duplicate_of):
        return base
    new = status.model_copy(update={"phase": TaskPhase.BLOCKED, "duplicate_of": gate.duplicate_of,
                                    "submitted_at": status.submitted_at or seen.first_seen or seen.now})
    return replace(base, status=_stamp(_say(new, gate.reason, gate.message, task, seen.now), task, seen))


# --------------------------------------------------------------------------- attempt judgement


def _judge(job: AttemptJob | None, attempt: Attempt, settings: Effective, seen: Observation,
           now: datetime) -> tuple[Verdict | None, float | None, bool]:
    """(verdict, seconds until the next deadline, whether to abort the Job) for the open attempt."""
    if seen.job_rejected is not None:
        return Verdict(AttemptOutcome.PERMANENT, reasons.JOB_REJECTED,
                       truncate(f"the API server refused the attempt's Job: {seen.job_rejected}")), None, False
    if job is None:
        return None, None, False
    verdict = classify(job, settings.retry)
    if verdict is not None:
        return verdict, None, False
    deadlines: list[datetime] = []
    run_started = job.run_started  # None exactly when job.started_at is
    if run_started is not None and settings.timeout is not None:
        deadline = run_started + settings.timeout
        if now >= deadline:
            return Verdict(AttemptOutcome.RETRYABLE, reasons.TIMEOUT,
                           f"the attempt ran longer than its timeout of {_secs(settings.timeout)}"), None, True
        deadlines.append(deadline)
    ttl = settings.lease_ttl
    if job.started_at is not None and ttl > timedelta(0) and job.running_seen_at is not None:
        # By our own clock: from when we saw the container start, or last saw a renewal.
        alive = max(filter(None, (job.running_seen_at, job.renewed_seen_at)))
        deadline = alive + ttl
        if now >= deadline:
            return Verdict(AttemptOutcome.RETRYABLE, reasons.LEASE_EXPIRED,
                           f"no heartbeat for {_secs(ttl)} (the attempt's lease TTL): the task process or its node "
                           f"is gone, or it does not heartbeat (use the cronoq SDK, or heartbeatSidecar: true)"), None, True
        deadlines.append(deadline)
    if job.started_at is None and job.waiting_reason in NEVER_HEALS:
        return Verdict(AttemptOutcome.PERMANENT, job.waiting_reason, truncate(job.waiting_message or "")), None, True
    if job.started_at is None and job.created_at is not None:
        deadline = job.created_at + settings.start_timeout
        if now >= deadline:
            why = (f": {job.waiting_reason}: {job.waiting_message}" if job.waiting_reason
                   else " (unschedulable, or its image could not be pulled?)")
            return Verdict(AttemptOutcome.RETRYABLE, reasons.START_TIMEOUT, truncate(
                f"the attempt's pod did not start within {_secs(settings.start_timeout)}{why}")), None, True
        deadlines.append(deadline)
    wait = min(((d - now).total_seconds() for d in deadlines), default=None)
    return None, wait, False


def _judge_served(facts: AttemptJob | None, attempt: Attempt, settings: Effective, seen: Observation,
                  now: datetime) -> tuple[Verdict | None, float | None]:
    """(verdict, seconds until the next deadline) for an attempt a pull worker serves. It counts as
    started when it was handed over (a live worker starts it within a watch event), so its timeout
    and its lease TTL count from then; its worker's own Lease must stay alive throughout."""
    if facts is not None and facts.termination is not None and facts.worker == attempt.worker:
        report = facts.termination.message
        if sdk_report(report) is None:
            return Verdict(AttemptOutcome.RETRYABLE, reasons.INVALID_REPORT, truncate(
                f"worker {attempt.worker} reported something that is not a report: {report!r}")), None
        return classify(facts, settings.retry), None
    start = attempt.dispatched_at or now
    if settings.timeout is not None and now >= start + settings.timeout:
        return Verdict(AttemptOutcome.RETRYABLE, reasons.TIMEOUT,
                       f"the attempt ran longer than its timeout of {_secs(settings.timeout)}"), None
    alive_until = seen.worker_alive_until
    if alive_until is None or now >= alive_until:
        return Verdict(AttemptOutcome.RETRYABLE, reasons.LEASE_EXPIRED,
                       f"worker {attempt.worker} stopped renewing its Lease (or deleted it): it is presumed "
                       f"dead"), None
    ttl = settings.lease_ttl
    if ttl > timedelta(0):
        alive = max(filter(None, (start, facts.renewed_seen_at if facts is not None else None)))
        if now >= alive + ttl:
            return Verdict(AttemptOutcome.RETRYABLE, reasons.LEASE_EXPIRED,
                           f"no heartbeat for {_secs(ttl)} (the attempt's lease TTL) from worker "
                           f"{attempt.worker}"), None
    return None, _served_deadline(settings, seen, now, start, facts)


def _served_deadline(settings: Effective, seen: Observation, now: datetime, start: datetime | None = None,
                     facts: AttemptJob | None = None) -> float | None:
    """Seconds until a served attempt's next deadline: its timeout, its worker's Lease, its own."""
    start = start or now
    deadlines = [d for d in (seen.worker_alive_until, start + settings.timeout if settings.timeout else None) if d]
    if settings.lease_ttl > timedelta(0):
        deadlines.append(max(filter(None, (start, facts.renewed_seen_at if facts else None))) + settings.lease_ttl)
    return max(min((d - now).total_seconds() for d in deadlines), 0.0) if deadlines else None


# Reasons a pod cannot start that waiting does not cure: the attempt ends at once (Permanent).
NEVER_HEALS = frozenset({reasons.INVALID_IMAGE_NAME})


def _tell_waiting(status: TaskStatus, job: AttemptJob | None, settings: Effective, task: Task,
                  now: datetime) -> TaskStatus | None:
    """The status to write when the open attempt's pod starts being held back (or stops being):
    the Running condition and the message say why, within a watch event of the kubelet saying it.
    None when that is already said: one write per change of reason, never per event (the kubelet
    alternates ErrImagePull and ImagePullBackOff: both are told as ImagePullBackOff)."""
    if job is None:
        return None
    told = _reason(status)
    n, most = status.attempt, settings.retry.max_attempts
    if job.waiting_reason is None or job.started_at is not None:
        if told != reasons.POD_CANNOT_START:
            return None
        return _say(status, reasons.ATTEMPT_RUNNING, f"attempt {n} of {most} running", task, now)
    reason = "ImagePullBackOff" if job.waiting_reason == "ErrImagePull" else job.waiting_reason
    message = (f"attempt {n} of {most}: its pod cannot start: {reason}: {job.waiting_message}; retried when its "
               f"startTimeout ({_secs(settings.start_timeout)}) passes, unless it starts before")
    if told == reasons.POD_CANNOT_START and (status.message or "").startswith(f"attempt {n} of {most}: its pod cannot start: {reason}:"):
        return None
    return _say(status, reasons.POD_CANNOT_START, message, task, now)


@dataclass(frozen=True)
class _Cleanup:
    deletes: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()
    stale: tuple[str, ...] = ()


def _cleanup(name: str, n: int, open_attempt: Attempt | None, records: Sequence[Attempt],
             jobs: Iterable[AttemptJob]) -> _Cleanup:
    """Jobs that are not the open attempt's: stop the ones still running, and ignore (and report
    once) what finished Jobs of ended, aborted or never-recorded attempts say."""
    by_number = {r.number: r for r in records}
    # Records older than the history bound are dropped from the status; their Jobs remain.
    oldest_kept = records[0].number if records else n + 1
    deletes, events, stale = [], [], []
    for job in jobs:
        record = by_number.get(job.number)
        if job.worker is not None and (record is None or not _own(job, name, record)):
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
                events.append(Event(reasons.FOREIGN_JOB, f"Job {job.name} claims attempt {job.number}, which the "
                                    f"status does not name; it is not adopted and is deleted", warning=True))
        reported = job.termination is not None or job.finished is not None
        pruned = ours and record is None and job.number < oldest_kept
        closing = (record is not None and record.reason not in OPERATOR_ENDED) or pruned
        if reported and not closing and job.uid:
            stale.append(job.uid)
            events.append(Event(reasons.STALE_COMPLETION, f"ignored a late report from Job {job.name} "
                                f"(attempt {job.number}); the current attempt is {n}", warning=True))
    return _Cleanup(tuple(deletes), tuple(events), tuple(stale))


def _job(jobs: Iterable[AttemptJob], task: str, attempt: Any) -> AttemptJob | None:
    """What was seen of the attempt itself: its own Job (its deterministic name and, when both are
    known, its lease id, so a Job that merely took the name is never adopted), or for an attempt a
    worker serves, that worker's Lease alone (see `_own`). `attempt` needs only `number`,
    `lease_id` and `worker`."""
    return next((j for j in jobs if _own(j, task, attempt)), None)


def _own(job: AttemptJob, task: str, attempt: Any) -> bool:
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
    return lease is None or job.lease_id is None or job.lease_id == lease


def _close(attempt: Attempt, verdict: Verdict, job: AttemptJob | None, now: datetime) -> Attempt:
    started = (job.start_estimate if job else None) or attempt.started_at
    if attempt.worker is not None:  # handed over is started: a live worker starts it at once
        started = attempt.dispatched_at
    if started is not None and attempt.dispatched_at is not None:
        # Nothing ran before its Job existed: a kubelet second truncated below the dispatch (the
        # operator saw the container late) would put this start before what it waited for.
        started = max(started, attempt.dispatched_at)
    finished = (job.end_estimate if job else None) or now
    duration = int(max((finished - started).total_seconds(), 0) * 1000) if started else None
    return attempt.model_copy(update={
        "started_at": started, "finished_at": finished, "outcome": verdict.outcome, "exit_code": verdict.exit_code,
        # model_copy does not validate: keep within the CRD's bounds here, or the write would fail.
        "reason": verdict.reason[:REASON_LIMIT], "message": truncate(verdict.message, ATTEMPT_MESSAGE_LIMIT) or None, "duration_ms": duration,
        "response_code": verdict.response_code,
    })


def _ended_message(attempt: Attempt) -> str:
    """One Event per attempt, at its end, telling its start too (one write instead of two)."""
    ran = f"worker {attempt.worker}" if attempt.worker else f"Job {attempt.job}"
    if attempt.started_at is not None:
        ran += f", started {attempt.started_at.isoformat(timespec='milliseconds')}"
    if attempt.duration_ms is not None:
        ran += f", ran {attempt.duration_ms / 1000:.3f}s"
    assert attempt.outcome is not None  # _close sets it
    text = f"attempt {attempt.number} ({ran}) ended: {attempt.outcome.value} ({attempt.reason})"
    return f"{text}: {attempt.message}" if attempt.message else text


# --------------------------------------------------------------------------- status helpers


def _finish(status: TaskStatus, records: list[Attempt], phase: TaskPhase, reason: str, message: str,
            task: Task, seen: Observation, output: str | None = None) -> TaskStatus:
    update: dict[str, Any] = {"phase": phase, "attempts": tuple(records[-HISTORY:]), "next_attempt_at": None,
              "finished_at": seen.now, "submitted_at": status.submitted_at or seen.first_seen or seen.now}
    if phase is TaskPhase.SUCCEEDED:
        update.update(output=output, output_available=output is not None)
    new = _say(status.model_copy(update=update), reason, message, task, seen.now)
    return _stamp(new, task, seen)


def serving_worker(status: TaskStatus) -> str | None:
    """The worker running the task's open attempt, if a worker does: what `status.worker` says
    (and the store's load per worker counts)."""
    last = status.attempts[-1] if status.attempts else None
    if status.phase is not TaskPhase.RUNNING or last is None or last.number != status.attempt or last.outcome:
        return None
    return last.worker


def _stamp(status: TaskStatus, task: Task, seen: Observation) -> TaskStatus:
    return status.model_copy(update={"epoch": seen.epoch, "observed_generation": task.metadata.generation})


def _say(status: TaskStatus, reason: str, message: str, task: Task, now: datetime) -> TaskStatus:
    """Set the message, the summary column, and the conditions for the status' phase."""
    message = truncate(message)
    phase = status.phase
    conditions = list(status.conditions)
    generation = task.metadata.generation
    running = phase is TaskPhase.RUNNING
    finished = phase is not None and phase.terminal
    conditions = set_condition(conditions, "Running", running, reason if running else _idle_reason(phase, reason),
                               message if running else "", now, generation)
    conditions = set_condition(conditions, "Finished", finished, reason if finished else "NotFinished",
                               message if finished else "", now, generation)
    return status.model_copy(update={"message": message, "summary": _summary(message), "conditions": tuple(conditions)})


def _idle_reason(phase: TaskPhase | None, reason: str) -> str:
    return reason if phase is not None and not phase.terminal else (phase.value if phase else reason)


def _acknowledged(status: TaskStatus, task: Task) -> bool:
    return status.observed_generation == task.metadata.generation


def _reason(status: TaskStatus) -> str | None:
    running = next((c for c in status.conditions if c.type == "Running"), None)
    return running.reason if running else None


def _summary(message: str) -> str:
    line = message.splitlines()[0] if message else ""
    return line if len(line) <= SUMMARY_LIMIT else line[:SUMMARY_LIMIT - 1] + "…"


def _secs(delta: timedelta) -> str:
    from cronoq.api.durations import format as fmt
    try:
        return fmt(delta)
    except ValueError:
        return f"{delta.total_seconds():g}s"


def _uniq(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))
