"""The Task state machine: from the observed Task and its attempts' Jobs, decide the next status
and what to do (DESIGN §1–§4). Pure: the clock, randomness, the leader epoch and the pool's
admission decision are passed in.

The decision is level-based: it reads what is, not which event arrived, so running it twice on
the same observation plans the same thing, and running it after a crash or a failover picks up
where the status says the task is. The status is the write-ahead log of attempts: attempt n is
recorded (with a precondition on the write) before Job n is created, and an attempt is recorded
as ended before its Job is deleted, so nothing the operator does is lost if it dies between the
two steps.

This module walks the phases; it asks `cleanup` what else was seen of the task, `deadlines`
whether the open attempt ended, `retryrules` what the retry rules make of its end, `workers` what
a Workers pool changes, `waiting` why a ready task has no slot, and `wording` what to say and
whether it is said already. None of them calls back into it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Iterable

from cronoq.api import Attempt, AttemptOutcome, AttemptTrigger, Task, TaskPhase, TaskStatus
from cronoq.api.limits import ATTEMPTS_KEPT
from cronoq.engine import admission, delay, keylimits, reasons, retention, retryrules
from cronoq.engine.attempts import checkpoints, deadlines, task_deadlines, waiting, wording
from cronoq.engine.attempts.cleanup import cleanup, find
from cronoq.engine.attempts.workers import pod_fields, serving_worker
from cronoq.engine.backoff import retry_delay
from cronoq.engine.naming import job_name, lease_id
from cronoq.engine.observed import AttemptJob
from cronoq.engine.outcome import Verdict
from cronoq.engine.plan import Effective, Event, JobToCreate, Observation, Plan

HISTORY = ATTEMPTS_KEPT
"""Attempt records kept in the status (the CRD's bound); the newest are kept."""


def is_ready(task: Task, now: datetime) -> bool:
    """Waiting only for a pool slot: new or Blocked by its start time (that time come), queued, or
    retrying with its backoff over."""
    if task.spec.cancel or delay.waiting(task, now):
        return False
    status = task.status
    if status is None or status.phase in (None, TaskPhase.QUEUED):
        return True
    if status.phase is TaskPhase.BLOCKED:  # only by its start time, now come (see engine.delay.QUIET)
        return wording.told(status) == reasons.WAITING_FOR_START_TIME and status.attempt == 0
    return status.phase is TaskPhase.RETRYING and (status.next_attempt_at is None or status.next_attempt_at <= now)


@dataclass(frozen=True)
class _Draft:
    """What a reconcile has decided so far: the status being built and the side effects. Each
    step returns a new draft rather than changing the one it was given."""

    task: Task
    seen: Observation
    status: TaskStatus
    records: tuple[Attempt, ...]
    deletes: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()
    stale: tuple[str, ...] = ()
    ended: tuple[Attempt, ...] = ()
    requeue: float | None = None

    @property
    def n(self) -> int:
        return self.status.attempt

    @property
    def generation(self) -> int | None:
        return self.task.metadata.generation

    def plan(self, status: TaskStatus | None = None, **fields: Any) -> Plan:
        return Plan(status=status, delete_jobs=_uniq(self.deletes), events=self.events,
                    stale_jobs=self.stale, ended=self.ended, **{"requeue_after": self.requeue, **fields})

    def say(self, status: TaskStatus, reason: str, message: str) -> _Draft:
        return replace(self, status=wording.say(status, reason, message, self.generation, self.seen.now))

    def stamped(self) -> TaskStatus:
        return wording.stamp(self.status, self.generation, self.seen.epoch)

    def written(self, **fields: Any) -> Plan:
        """The plan that writes the status as drafted (computed from this generation, by this leader)."""
        return self.plan(self.stamped(), **fields)

    def close(self, open_attempt: Attempt, verdict: Verdict, job: AttemptJob | None, *, abort: str | None = None,
              told: Event | None = None, rule: str | None = None, ignored: bool = False) -> _Draft:
        """The open attempt (the newest record) ended with `verdict`: recorded, told in an Event
        (`told`, else the record's own account), and its Job `abort` stopped when the operator ended it.
        `rule` names the retry rule that decided, `ignored` says it did not count."""
        closed = deadlines.close(open_attempt, verdict, job, self.seen.now)
        if rule is not None or ignored:
            closed = closed.model_copy(update={"rule": rule, "ignored": ignored or None})
        told = told or Event(reasons.ATTEMPT_ENDED, wording.ended(closed),
                             warning=verdict.outcome is not AttemptOutcome.SUCCESS)
        return replace(self, records=(*self.records[:-1], closed), ended=(closed,),
                       deletes=self.deletes + ((abort,) if abort else ()), events=(*self.events, told))

    def finished(self, phase: TaskPhase, reason: str, message: str, output: str | None = None) -> TaskStatus:
        """The drafted status, finished in `phase` (with the newest records)."""
        status, now = self.status, self.seen.now
        update: dict[str, Any] = {"phase": phase, "attempts": self.records[-HISTORY:], "next_attempt_at": None,
                                  "next_start_at": None,
                                  "finished_at": now, "submitted_at": status.submitted_at or self.seen.first_seen or now}
        if phase is TaskPhase.SUCCEEDED:
            update.update(output=output, output_available=output is not None)
        return self.say(status.model_copy(update=update), reason, message).stamped()

    def finish(self, phase: TaskPhase, reason: str, message: str, output: str | None = None) -> Plan:
        return self.plan(self.finished(phase, reason, message, output))

    def last(self, settings: Effective) -> int:
        """The number of the last attempt the task may run (maxAttempts plus those ignored)."""
        return retryrules.last_attempt(settings.retry, self.status.ignored_attempts or 0)


@dataclass(frozen=True)
class Decided:
    """`_end`'s answer when the open attempt decides this reconcile: it goes on, or it ended and
    so did the task."""

    plan: Plan


@dataclass(frozen=True)
class Retrying:
    """`_end`'s answer when the open attempt ended and the task backs off: the draft, now
    Retrying, goes on to `_next` (whose backoff may be over already)."""

    draft: _Draft


def reconcile(task: Task, settings: Effective, seen: Observation, rng: random.Random) -> Plan:
    """The plan for `task` given what was observed. See the module docstring."""
    status = task.status or TaskStatus()
    if status.epoch > seen.epoch:
        # Written by a newer leader: this replica is deposed and must not act at all.
        return Plan()
    plan = _decide(task, status, settings, seen, rng)
    plan = _until_next_limit(task, status, settings, seen, plan)
    plan = checkpoints.record(task.metadata.name or "", status, plan, seen.jobs, seen.now,
                              task.metadata.generation, seen.epoch)
    if plan.status is not None and plan.status.worker != (serving := serving_worker(plan.status)):
        plan = replace(plan, status=plan.status.model_copy(update={"worker": serving}))
    known = seen.pool_found or retention.unfinished_job_retention(task.spec, None) is not None
    return replace(plan, retime_jobs=retention.retime(seen.jobs, settings.job_retention if known else None,
                                                      plan.delete_jobs))


def _until_next_limit(task: Task, status: TaskStatus, settings: Effective, seen: Observation, plan: Plan) -> Plan:
    """The plan, queued again when the task's next own limit passes (startDeadline, deadline, retry
    budget), unless it ends the task or something sooner wakes it."""
    status = plan.status or status
    if status.phase is not None and status.phase.terminal:
        return plan
    wait = task_deadlines.next_look(task, status, settings, seen.now, seen.first_seen,
                                    waiting_for_kueue(task.metadata.name or "", status, seen, or_unseen=True))
    if wait is None or (plan.requeue_after is not None and plan.requeue_after <= wait):
        return plan
    return replace(plan, requeue_after=wait)


def _decide(task: Task, status: TaskStatus, settings: Effective, seen: Observation, rng: random.Random) -> Plan:
    records = status.attempts
    n = status.attempt
    current = records[-1] if records and records[-1].number == n else None
    open_attempt = current if current is not None and current.outcome is None else None
    name = task.metadata.name or ""

    found = cleanup(name, n, open_attempt, records, seen.jobs)
    draft = _Draft(task, seen, status, records, found.deletes, found.events, found.stale)
    phase = status.phase
    if phase is not None and phase.terminal:
        return draft.plan()
    if task.spec.cancel:  # cancellation wins over everything but an outcome already recorded
        return _cancel(draft, open_attempt)
    if seen.superseded is not None:  # a newer task naming its concurrency key ends it
        return _cancel(draft, open_attempt, reasons.SUPERSEDED, seen.superseded.message())
    kueue_wait = waiting_for_kueue(name, status, seen)
    limit = task_deadlines.passed(task, status, settings, seen.now, seen.first_seen, kueue_wait)
    if limit is not None and not (n == 0 and seen.gate.verdict == "end"):  # ending anyway, without running
        expired = _expire(draft, open_attempt, limit)
        if expired is not None:
            return expired
    if phase in (None, TaskPhase.BLOCKED) and n == 0 and seen.gate.verdict != "run":
        return _gated(draft)
    if open_attempt is not None:
        ended = _end(draft, open_attempt, settings, rng)
        if isinstance(ended, Decided):
            return ended.plan
        draft = ended.draft
    return _next(draft, settings)


def waiting_for_kueue(name: str, status: TaskStatus, seen: Observation, or_unseen: bool = False) -> bool:
    """The first attempt is recorded and its Job waits, suspended, for Kueue to admit it: the task
    has not started yet, so its startDeadline still counts. `or_unseen`: or its Job is not seen yet
    (just created: the watch brings nothing new of it, so the look at the startDeadline is timed now)."""
    records = status.attempts
    if status.attempt != 1 or not records or records[-1].number != 1 or records[-1].outcome is not None:
        return False
    job = find(seen.jobs, name, records[-1])
    if job is None:
        return or_unseen and records[-1].worker is None
    return job.suspended and job.started_at is None and job.finished is None


def _cancel(draft: _Draft, open_attempt: Attempt | None, reason: str = reasons.CANCELLED,
            message: str = wording.CANCELLED) -> Plan:
    if open_attempt is not None:
        n, name = draft.n, draft.task.metadata.name or ""
        verdict = Verdict(AttemptOutcome.CANCELLED, reason, message)
        # A worker sees the cancellation in the status and aborts its handler; a Job is deleted.
        abort = None if open_attempt.worker is not None else open_attempt.job or job_name(name, n)
        draft = draft.close(open_attempt, verdict, find(draft.seen.jobs, name, open_attempt), abort=abort,
                            told=Event(reasons.ATTEMPT_ENDED, wording.ATTEMPT_CANCELLED.format(n=n)))
    return draft.finish(TaskPhase.CANCELLED, reason, message)


def _expire(draft: _Draft, open_attempt: Attempt | None, limit: task_deadlines.Passed) -> Plan | None:
    """The task's startDeadline or deadline passed: it ends, its running attempt aborted (a worker
    sees the ended attempt in the status and aborts its handler; a Job is deleted). None when the
    attempt had reported its end already: that report is judged first."""
    if open_attempt is None:
        return draft.finish(limit.phase, limit.reason, limit.message)
    n, name = draft.n, draft.task.metadata.name or ""
    job = find(draft.seen.jobs, name, open_attempt)
    if job is not None and job.termination is not None and job.worker == open_attempt.worker:
        return None
    verdict = Verdict(AttemptOutcome.RETRYABLE, reasons.DEADLINE_EXCEEDED, limit.message)
    abort = None if open_attempt.worker is not None else open_attempt.job or job_name(name, n)
    if job is not None and job.suspended and job.started_at is None and limit.reason == reasons.START_DEADLINE_EXCEEDED:
        limit = replace(limit, message=f"{limit.message}; attempt {n} was still waiting for Kueue to admit it")
    else:
        limit = task_deadlines.aborted(limit, n)
    return draft.close(open_attempt, verdict, job, abort=abort).finish(limit.phase, limit.reason, limit.message)


def _gated(draft: _Draft) -> Plan:
    """A task its key or dependencies hold back (Blocked) or end without running."""
    gate, status, seen = draft.seen.gate, draft.status, draft.seen
    if gate.verdict == "end":
        assert gate.phase is not None  # Gate.end always gives one
        new = draft.finished(gate.phase, gate.reason, gate.message, gate.output)
        return draft.plan(new.model_copy(update={"duplicate_of": gate.duplicate_of}))
    if gate.until is not None:  # a delayed start: looked at again at its time, by a timer
        draft = replace(draft, requeue=max((gate.until - seen.now).total_seconds(), 0.0))
    if wording.blocked_said(status, gate, draft.generation):
        return draft.plan()
    blocked = status.model_copy(update={"phase": TaskPhase.BLOCKED, "duplicate_of": gate.duplicate_of,
                                        "submitted_at": status.submitted_at or seen.first_seen or seen.now})
    return draft.say(blocked, gate.reason, gate.message).written()


def _end(draft: _Draft, open_attempt: Attempt, settings: Effective, rng: random.Random) -> Decided | Retrying:
    """Judge the open attempt: it goes on, or it ended and so did the task (Decided), or it
    ended and the task retries (Retrying, its draft backing off)."""
    seen, now, n = draft.seen, draft.seen.now, draft.n
    job = find(seen.jobs, draft.task.metadata.name or "", open_attempt)
    judged = deadlines.judge(job, open_attempt, settings, seen)
    verdict = judged.verdict
    if judged.read_workload is not None:
        return Decided(draft.plan(read_workload=judged.read_workload))
    if verdict is None:
        draft = replace(draft, requeue=judged.wait)
        if open_attempt.worker is not None:
            return Decided(draft.plan())  # its worker runs it: no Job to create, no pod to tell of
        return Decided(_goes_on(draft, open_attempt, job, settings))
    ruled = retryrules.judge(verdict, settings.rules)
    if ruled.rule is None and job is not None and job.stopped_by_kueue:
        # Kueue took the quota back: not the task's failure. By default it uses up no attempt
        # (bounded by maxIgnoredAttempts, like an Ignore rule); a rule naming the reason decides otherwise.
        ruled = replace(ruled, ignored=True)
    verdict, ignored = ruled.verdict, draft.status.ignored_attempts or 0
    ignore = ruled.ignored and ignored < settings.retry.max_ignored_attempts
    draft = replace(draft.close(open_attempt, verdict, job, abort=job.name if judged.abort and job else None,
                                rule=ruled.rule, ignored=ignore), requeue=None)
    if ruled.ignored and not ignore:
        return Decided(draft.finish(TaskPhase.DEAD_LETTERED, reasons.IGNORED_ATTEMPTS_EXHAUSTED,
                                    wording.IGNORED_EXHAUSTED.format(n=n, reason=verdict.reason,
                                                                     message=verdict.message, ignored=ignored)))
    if ignore:
        draft = replace(draft, status=draft.status.model_copy(update={"ignored_attempts": ignored + 1}))
    most = draft.last(settings)
    if verdict.outcome is AttemptOutcome.SUCCESS:
        return Decided(draft.finish(TaskPhase.SUCCEEDED, reasons.SUCCEEDED, wording.SUCCEEDED.format(n=n),
                                    verdict.output))
    if verdict.outcome is AttemptOutcome.PERMANENT:
        return Decided(draft.finish(TaskPhase.FAILED, reasons.FAILED,
                                    wording.FAILED.format(n=n, reason=verdict.reason, message=verdict.message)))
    if n >= most:
        return Decided(draft.finish(TaskPhase.DEAD_LETTERED, reasons.ATTEMPTS_EXHAUSTED,
                                    wording.EXHAUSTED.format(n=n, reason=verdict.reason, message=verdict.message)))
    delay = retry_delay(settings.retry, n + 1, rng, verdict.retry_after)
    limit = task_deadlines.no_room(draft.task, draft.status, settings, seen.first_seen, now + delay, n,
                                   f"attempt {n} failed ({verdict.reason}): {verdict.message}")
    if limit is not None:  # a retry that could not start in time: ended now, not when the limit passes
        return Decided(draft.finish(limit.phase, limit.reason, limit.message))
    retrying = draft.status.model_copy(update={
        "phase": TaskPhase.RETRYING, "attempts": draft.records, "next_attempt_at": now + delay,
    })
    draft = draft.say(retrying, reasons.BACKING_OFF, (wording.IGNORED if ignore else wording.BACKING_OFF).format(
        n=n, reason=verdict.reason, message=verdict.message, next=n + 1, most=most, delay=delay.total_seconds(),
        at=now + delay))
    return Retrying(replace(draft, requeue=max(delay.total_seconds(), 0.0)))


def _goes_on(draft: _Draft, open_attempt: Attempt, job: AttemptJob | None, settings: Effective) -> Plan:
    """The open attempt of a Job goes on: create its Job if it was recorded but not (yet)
    created, and say what changed about it (a refused Job, a pod held back or no longer)."""
    seen, n, most = draft.seen, draft.n, draft.last(settings)
    if job is None and seen.job_rejected is None:
        # Recorded but not (yet) created: create it. AlreadyExists is ours and fine.
        if seen.job_refused is not None and wording.told(draft.status) != reasons.JOB_REFUSED:
            # Said once (the quota's usage in the message changes on every refusal); the
            # work queue's backoff, not this write, times the next creation.
            return draft.say(draft.status, reasons.JOB_REFUSED,
                             wording.JOB_REFUSED.format(n=n, refusal=seen.job_refused)).written()
        return draft.plan(create_job=JobToCreate(n, open_attempt.lease_id or lease_id(seen.epoch, n)),
                          requeue_after=_first_kueue_look(seen))
    told = wording.told(draft.status)
    if job is not None and job.held_by_kueue:
        return _held_by_kueue(draft, job, most, told == reasons.JOB_REFUSED)
    write = job is not None and told in (reasons.JOB_REFUSED, reasons.WAITING_FOR_KUEUE)
    if write:  # its Job exists at last, or Kueue let it run (or it ended): say so, once
        draft = draft.say(draft.status, reasons.ATTEMPT_RUNNING, wording.running(n, most))
    if job is not None:
        told = wording.told(draft.status)
        if job.waiting_reason is None or job.started_at is not None:
            if told == reasons.POD_CANNOT_START:  # it starts after all: say so, once
                return draft.say(draft.status, reasons.ATTEMPT_RUNNING, wording.running(n, most)).written()
        else:
            # Held back: one write per change of the kubelet's reason, never per event (it
            # alternates ErrImagePull and ImagePullBackOff: both are told as ImagePullBackOff).
            why = "ImagePullBackOff" if job.waiting_reason == "ErrImagePull" else job.waiting_reason
            if not wording.held_back_said(draft.status, most, why):
                return draft.say(draft.status, reasons.POD_CANNOT_START, wording.held_back(
                    n, most, why, job.waiting_message, settings.start_timeout)).written()
    return draft.written() if write else draft.plan()


def _held_by_kueue(draft: _Draft, job: AttemptJob, most: int, refused: bool) -> Plan:
    """Kueue holds the open attempt's Job: look at what Kueue says of it when a look is due (a
    read, then decide again), and say it when that is news (`waiting.kueue_said`): one write per
    change of Kueue's reason, never one per look. Looked at again after `waiting.KUEUE_LOOK`.
    `refused`: the status still says its Job was refused, which it no longer is."""
    now, n = draft.seen.now, draft.n
    look = waiting.kueue_look_at(job)
    if look is not None and look <= now:
        return draft.plan(look_kueue=job.name)
    if look is not None:
        wait = (look - now).total_seconds()
        draft = replace(draft, requeue=wait if draft.requeue is None else min(draft.requeue, wait))
    if job.kueue_hold is not None:
        message = waiting.kueue_message(n, most, job.kueue_hold)
        if not waiting.kueue_said(draft.status, message):
            return draft.say(draft.status, reasons.WAITING_FOR_KUEUE, message).written()
    if refused:
        return draft.say(draft.status, reasons.ATTEMPT_RUNNING, wording.running(n, most)).written()
    return draft.plan()


def _next(draft: _Draft, settings: Effective) -> Plan:
    """No attempt runs: start the next one when admitted, else wait (for a slot or a backoff)."""
    seen, now, n, status, task = draft.seen, draft.seen.now, draft.n, draft.status, draft.task
    phase, most = status.phase, draft.last(settings)
    ready = phase in (None, TaskPhase.QUEUED, TaskPhase.BLOCKED) or (
        phase is TaskPhase.RETRYING and (status.next_attempt_at is None or status.next_attempt_at <= now))

    if ready and n > 0 and n >= most:
        # The pool's maxAttempts was lowered under a task waiting for its next attempt.
        last = draft.records[-1] if draft.records else None
        return draft.finish(TaskPhase.DEAD_LETTERED, reasons.ATTEMPTS_EXHAUSTED,
                            wording.exhausted_lowered(n, most, last))

    if ready and n > 0 and not draft.ended:
        last = draft.records[-1] if draft.records else None
        failed = f"attempt {n} failed ({last.reason}): {last.message}" if last is not None else f"attempt {n} failed"
        limit = task_deadlines.no_room(task, status, settings, seen.first_seen, now, n, failed)
        if limit is not None:  # waited for a slot past the retry budget
            return draft.finish(limit.phase, limit.reason, limit.message)

    if ready and settings.workers and (given := pod_fields(task)):
        return draft.finish(TaskPhase.FAILED, reasons.INVALID_SPEC,
                            wording.POD_FIELDS_GIVEN.format(pool=seen.pool_name, fields=", ".join(given)))

    if ready and n == 0 and seen.debounce is not None and not draft.ended:
        return _debounce(draft, seen.debounce)

    if ready and seen.pool_found and seen.admit and (seen.worker is not None or not settings.workers):
        return _start(draft, settings)

    if ready and not draft.ended:
        # Waiting for a slot (or for the pool to exist). Write Queued only when that is news.
        fair = seen.pool.fair_share if seen.pool is not None else None
        wait = waiting.wait(seen.pool_name, seen.pool, found=seen.pool_found,
                            no_worker=settings.workers and seen.worker is None, next_start_at=seen.next_start_at,
                            group=admission.fair_group(task.spec.group, admission.submitter_of(task), fair))
        reason, message = wait.reason, waiting.message(wait)
        if seen.key_wait is not None and reason == reasons.WAITING_FOR_SLOT:
            reason, message = reasons.WAITING_FOR_KEY, keylimits.message(seen.key_wait)
            if wording.said(status, TaskPhase.QUEUED, reason, draft.generation) \
                    and keylimits.waits_for(status.message) == seen.key_wait.key:
                return draft.plan(wants_slot=True)  # its key changing hands is no news
        elif wording.said(status, TaskPhase.QUEUED, reason, draft.generation):
            return draft.plan(wants_slot=True)
        if seen.pool_found and (quiet := delay.quiet_until(task, wording.told(status), now)) is not None:
            # Its start time just came: a slot granted now takes it to Running without a Queued write.
            return draft.plan(wants_slot=True, requeue_after=(quiet - now).total_seconds())
        queued = status.model_copy(update={"phase": TaskPhase.QUEUED, "next_attempt_at": None,
                                           "next_start_at": wait.next_start_at,
                                           "submitted_at": status.submitted_at or seen.first_seen or now})
        return draft.say(queued, reason, message).written(wants_slot=True)

    if draft.ended:
        return draft.written(wants_slot=ready)
    if phase is TaskPhase.RETRYING and status.next_attempt_at is not None:
        draft = replace(draft, requeue=max((status.next_attempt_at - now).total_seconds(), 0.0))
    if not wording.acknowledged(status, draft.generation):  # a priority change: say it was seen
        return draft.written(wants_slot=ready)
    return draft.plan(wants_slot=ready)


def _debounce(draft: _Draft, debounce: keylimits.Debouncing) -> Plan:
    """A task held by a Debounce concurrency key: Queued with reason Debouncing, asking for no slot
    (a grant it got before its first look goes back); the newest looked at again at its start
    time, an older one when the newest is released (it then ends Superseded)."""
    seen, status = draft.seen, draft.status
    wait = waiting.wait(seen.pool_name, seen.pool, found=seen.pool_found, debounce=debounce)
    message = waiting.message(wait)
    due = keylimits.due(debounce, seen.now)
    requeue = due.total_seconds() if due is not None else None
    if wording.said(status, TaskPhase.QUEUED, wait.reason, draft.generation) and status.message == message:
        return draft.plan(requeue_after=requeue)
    queued = status.model_copy(update={"phase": TaskPhase.QUEUED, "next_attempt_at": None, "next_start_at": None,
                                       "submitted_at": status.submitted_at or seen.first_seen or seen.now})
    return draft.say(queued, wait.reason, message).written(requeue_after=requeue)


def _start(draft: _Draft, settings: Effective) -> Plan:
    """Record the next attempt (handed to the observed worker in a Workers pool): the status is
    written before its Job is created or its worker may start it."""
    seen, now, status, task = draft.seen, draft.seen.now, draft.status, draft.task
    number = draft.n + 1
    served = seen.worker if settings.workers else None
    lease = lease_id(seen.epoch, number)
    attempt = Attempt(number=number, lease_id=lease, worker=served,
                      job=None if served else job_name(task.metadata.name or "", number),
                      trigger=AttemptTrigger.FIRST if number == 1 else AttemptTrigger.RETRY,
                      # A Job's: its grant (the rate limit's spacing); a worker's: its hand-over, which
                      # its timeout and lease count from.
                      dispatched_at=now if served else min(seen.admitted_at or now, now),
                      **settings.terms())
    records = (*draft.records, attempt)
    running = status.model_copy(update={
        "phase": TaskPhase.RUNNING, "attempt": number, "attempts": records[-HISTORY:],
        "next_attempt_at": None, "next_start_at": None, "submitted_at": status.submitted_at or seen.first_seen or now,
        "first_attempt_at": status.first_attempt_at or (now if number == 1 else None),
    })
    draft = draft.say(running, reasons.ATTEMPT_RUNNING, wording.running(number, draft.last(settings), served))
    return draft.written(create_job=None if served else JobToCreate(number, lease), started=attempt,
                         requeue_after=deadlines.served_deadline(settings, seen, now) if served
                         else _first_kueue_look(seen))


def _first_kueue_look(seen: Observation) -> float | None:
    """A Job about to be created in a pool that hands admission to Kueue: when to look at what
    Kueue says of it, if it holds it then (its watch event may bring nothing the creation did not)."""
    kueue = seen.pool is not None and seen.pool.admission is not None and seen.pool.admission.kueue is not None
    return waiting.KUEUE_FIRST_LOOK.total_seconds() if kueue else None


def refusal(stored: TaskStatus | None, error: str, generation: int | None, epoch: int,
            now: datetime) -> TaskStatus | None:
    """The status of a task the models cannot read (a payload over its limit): Failed with
    InvalidSpec and the reason, written once. None when it has finished already, or when a newer
    leader wrote it (this replica is deposed and must not act)."""
    status = stored or TaskStatus()
    if status.epoch > epoch or (status.phase is not None and status.phase.terminal):
        return None
    new = status.model_copy(update={"phase": TaskPhase.FAILED, "finished_at": now, "next_attempt_at": None,
                                    "submitted_at": status.submitted_at or now})
    return wording.stamp(wording.say(new, reasons.INVALID_SPEC, wording.CANNOT_RUN.format(error=error), generation,
                                     now), generation, epoch)


def _uniq(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))
