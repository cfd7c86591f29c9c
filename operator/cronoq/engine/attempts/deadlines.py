"""Judgement of the open attempt: has it ended (by its report, or by a deadline the operator
keeps: its timeout, its lease TTL, its start timeout, its worker's Lease), and if not, when to
look at it again; and the record of an attempt that ended.

Pure, and blind to the status: it reads the attempt's record and what was seen of it. The state
machine decides what an ending means for the task.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cronoq.api import Attempt, AttemptOutcome
from cronoq.api.limits import ATTEMPT_MESSAGE_LIMIT, REASON_LIMIT
from cronoq.engine import reasons, retention
from cronoq.engine.attempts.wording import secs
from cronoq.engine.observed import AttemptJob
from cronoq.engine.outcome import Verdict, classify, sdk_report, truncate
from cronoq.engine.plan import Effective, Observation

NEVER_HEALS = frozenset({reasons.INVALID_IMAGE_NAME})
"""Reasons a pod cannot start that waiting does not cure: the attempt ends at once (Permanent)."""


@dataclass(frozen=True)
class Judgement:
    """What became of the open attempt. No verdict: it goes on, and `wait` seconds from now (if
    set) a deadline of it expires. A verdict: it ended so; `abort` when the operator ended it and
    its Job must be stopped."""

    verdict: Verdict | None = None
    wait: float | None = None
    abort: bool = False
    read_workload: str | None = None
    """Kueue stopped the attempt's Job of this name: why is to be read from its Workload first."""


def judge(job: AttemptJob | None, attempt: Attempt, settings: Effective, seen: Observation) -> Judgement:
    """The open attempt judged by what was seen of it (`job`: its Job, or its worker's Lease)."""
    now = seen.now
    if attempt.worker is not None:  # the worker reads the ended attempt in the status and aborts its handler
        verdict, wait = _served(job, attempt, settings, seen, now)
        return Judgement(verdict, wait)
    judged = _job(job, settings, seen, now)
    if judged.verdict is None and job is None and seen.job_rejected is None and retention.job_may_be_gone(
            attempt.dispatched_at, settings.job_retention, now):
        # Its Job may have run and been cleaned up while no operator watched: at least once.
        return Judgement(Verdict(
            AttemptOutcome.RETRYABLE, reasons.JOB_DELETED,
            f"the attempt's Job is gone and its outcome was never observed (its jobRetention, "
            f"{secs(settings.job_retention)}, passed while no operator watched it)"), judged.wait)
    return judged


def _job(job: AttemptJob | None, settings: Effective, seen: Observation, now: datetime) -> Judgement:
    """An attempt that runs as a Job: its pod's report, else its timeout (from the container's
    start), its lease TTL (by the operator's own clock) and its start timeout (from the Job's
    creation)."""
    if seen.job_rejected is not None:
        return Judgement(Verdict(AttemptOutcome.PERMANENT, reasons.JOB_REJECTED,
                                 truncate(f"the API server refused the attempt's Job: {seen.job_rejected}")))
    if job is None:
        return Judgement()
    if job.stopped_by_kueue:
        return _stopped_by_kueue(job)
    if job.suspended and job.finished is None:
        # Kueue holds it (not admitted yet: no start timeout, the task's startDeadline still counts),
        # or is stopping it (its pod going: the Job controller fails it next, judged then).
        return Judgement()
    verdict = classify(job, settings.retry)
    if verdict is not None:
        return Judgement(verdict)
    deadlines: list[datetime] = []
    run_started = job.run_started  # None exactly when job.started_at is
    if run_started is not None and settings.timeout is not None:
        deadline = run_started + settings.timeout
        if now >= deadline:
            return Judgement(Verdict(AttemptOutcome.RETRYABLE, reasons.TIMEOUT,
                                     f"the attempt ran longer than its timeout of {secs(settings.timeout)}"),
                             abort=True)
        deadlines.append(deadline)
    ttl = settings.lease_ttl
    if job.started_at is not None and ttl > timedelta(0) and job.running_seen_at is not None:
        # By our own clock: from when we saw the container start, or last saw a renewal.
        alive = max(filter(None, (job.running_seen_at, job.renewed_seen_at)))
        deadline = alive + ttl
        if now >= deadline:
            return Judgement(Verdict(
                AttemptOutcome.RETRYABLE, reasons.LEASE_EXPIRED,
                f"no heartbeat for {secs(ttl)} (the attempt's lease TTL): the task process or its node is gone, "
                f"or it does not heartbeat (use the cronoq SDK, or heartbeatSidecar: true)"), abort=True)
        deadlines.append(deadline)
    if job.started_at is None and job.waiting_reason in NEVER_HEALS:
        return Judgement(Verdict(AttemptOutcome.PERMANENT, job.waiting_reason, truncate(job.waiting_message or "")),
                         abort=True)
    if job.started_at is None and job.created_at is not None:
        # From when it was let run: its creation, or (a Kueue Job) its admission.
        deadline = (job.resumed_at or job.created_at) + settings.start_timeout
        if now >= deadline:
            why = (f": {job.waiting_reason}: {job.waiting_message}" if job.waiting_reason
                   else " (unschedulable, or its image could not be pulled?)")
            return Judgement(Verdict(AttemptOutcome.RETRYABLE, reasons.START_TIMEOUT, truncate(
                f"the attempt's pod did not start within {secs(settings.start_timeout)}{why}")), abort=True)
        deadlines.append(deadline)
    return Judgement(wait=min(((d - now).total_seconds() for d in deadlines), default=None))


def _stopped_by_kueue(job: AttemptJob) -> Judgement:
    """Kueue suspended the admitted Job again (a preemption or another eviction): the attempt
    ended for that cause, which its Workload names (read first), and its Job is deleted, so that
    Kueue, admitting it again, cannot run it a second time under the same attempt number."""
    if job.kueue_stop is None:
        return Judgement(read_workload=job.name)
    reason, message = job.kueue_stop
    if reason == reasons.PREEMPTED:
        return Judgement(Verdict(AttemptOutcome.RETRYABLE, reasons.PREEMPTED,
                                 truncate(f"Kueue preempted the attempt's Workload: {message}")), abort=True)
    return Judgement(Verdict(AttemptOutcome.RETRYABLE, reasons.EVICTED_BY_KUEUE,
                             truncate(f"Kueue evicted the attempt's Workload ({reason}): {message}")), abort=True)


def _served(facts: AttemptJob | None, attempt: Attempt, settings: Effective, seen: Observation,
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
                       f"the attempt ran longer than its timeout of {secs(settings.timeout)}"), None
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
                           f"no heartbeat for {secs(ttl)} (the attempt's lease TTL) from worker "
                           f"{attempt.worker}"), None
    return None, served_deadline(settings, seen, now, start, facts)


def served_deadline(settings: Effective, seen: Observation, now: datetime, start: datetime | None = None,
                    facts: AttemptJob | None = None) -> float | None:
    """Seconds until a served attempt's next deadline: its timeout, its worker's Lease, its own."""
    start = start or now
    deadlines = [d for d in (seen.worker_alive_until, start + settings.timeout if settings.timeout else None) if d]
    if settings.lease_ttl > timedelta(0):
        deadlines.append(max(filter(None, (start, facts.renewed_seen_at if facts else None))) + settings.lease_ttl)
    return max(min((d - now).total_seconds() for d in deadlines), 0.0) if deadlines else None


def close(attempt: Attempt, verdict: Verdict, job: AttemptJob | None, now: datetime) -> Attempt:
    """The attempt's record once it ended so: its start and end as best seen, and the verdict."""
    started = (job.start_estimate if job else None) or attempt.started_at
    if attempt.worker is not None:  # handed over is started: a live worker starts it at once
        started = attempt.dispatched_at
    if started is not None and attempt.dispatched_at is not None:
        # Nothing ran before its Job existed: a kubelet second truncated below the dispatch (the
        # operator saw the container late) would put this start before what it waited for.
        started = max(started, attempt.dispatched_at)
    finished = (job.end_estimate if job else None) or now
    if started is not None and finished < started:
        # The end was seen too late to sharpen the kubelet's (truncated) second, the start in time:
        # 100.15 → "100" would read as an end before the start. It ended after it started.
        finished = started
    duration = int(max((finished - started).total_seconds(), 0) * 1000) if started else None
    return attempt.model_copy(update={
        "started_at": started, "finished_at": finished, "outcome": verdict.outcome, "exit_code": verdict.exit_code,
        # model_copy does not validate: keep within the CRD's bounds here, or the write would fail.
        "reason": verdict.reason[:REASON_LIMIT], "message": truncate(verdict.message, ATTEMPT_MESSAGE_LIMIT) or None,
        "duration_ms": duration, "response_code": verdict.response_code,
    })
