"""What an ended attempt means (DESIGN §3): success, retryable or permanent, with a reason.

The report (`pod_protocol.report.Report`: the SDK's structured termination message, a pull
worker's Lease annotation, the push runner's answer) wins over the exit code. Without it: exit 0
succeeds and the termination message is the output; an exit code in `permanentExitCodes` is
permanent; every other exit, and every way a pod can be lost (OOMKilled, evicted, node lost,
deleted), is retryable with a reason a user can act on.
"""
from __future__ import annotations

from dataclasses import dataclass

from cronoq.api import AttemptOutcome, RetryPolicy
from cronoq.engine import reasons
from cronoq.engine.observed import AttemptJob, Termination
from cronoq.pod_protocol import report as protocol
from cronoq.pod_protocol.report import Report, truncate as truncate


@dataclass(frozen=True)
class Verdict:
    """The classification of an ended attempt."""

    outcome: AttemptOutcome
    reason: str
    message: str = ""
    exit_code: int | None = None
    output: str | None = None
    retry_after: float | None = None
    response_code: int | None = None
    """The HTTP status a push task's endpoint answered with."""


_OUTCOMES = {protocol.SUCCESS: AttemptOutcome.SUCCESS, protocol.RETRYABLE: AttemptOutcome.RETRYABLE,
             protocol.PERMANENT: AttemptOutcome.PERMANENT}


def sdk_report(message: str | None) -> Report | None:
    """The report in a termination message or a worker's annotation, if it is one (the engine's
    name for `Report.parse`)."""
    return Report.parse(message)


def from_termination(end: Termination, policy: RetryPolicy) -> Verdict:
    report = Report.parse(end.message)
    if report is not None:
        outcome = _OUTCOMES[report.outcome]
        reason = {AttemptOutcome.SUCCESS: reasons.COMPLETED, AttemptOutcome.RETRYABLE: reasons.RETRYABLE,
                  AttemptOutcome.PERMANENT: reasons.PERMANENT}[outcome]
        if outcome is not AttemptOutcome.SUCCESS and report.reason is not None:
            reason = report.reason  # one of the report's own words, never one of the operator's verdicts
        # The report comes whole; what the status keeps of it is bounded here.
        return Verdict(outcome, reason, truncate(report.message), end.exit_code,
                       truncate(report.output) if outcome is AttemptOutcome.SUCCESS and report.output is not None
                       else None, report.retry_after, report.response_code)
    if end.exit_code == 0:
        return Verdict(AttemptOutcome.SUCCESS, reasons.COMPLETED, "", 0, truncate(end.message) or None)
    detail = f": {end.message}" if end.message else ""
    if end.exit_code in policy.permanent_exit_codes:
        return Verdict(AttemptOutcome.PERMANENT, reasons.PERMANENT_EXIT_CODE,
                       truncate(f"exited with code {end.exit_code}, listed in permanentExitCodes{detail}"), end.exit_code)
    if end.reason == reasons.OOM_KILLED:
        return Verdict(AttemptOutcome.RETRYABLE, reasons.OOM_KILLED,
                       truncate(f"the container ran out of memory (exit code {end.exit_code}){detail}"), end.exit_code)
    return Verdict(AttemptOutcome.RETRYABLE, reasons.EXIT_CODE,
                   truncate(f"exited with code {end.exit_code}{detail}"), end.exit_code)


def classify(job: AttemptJob, policy: RetryPolicy) -> Verdict | None:
    """The verdict on an attempt whose Job or pod has ended, or None while it may still run."""
    if job.termination is not None:
        return from_termination(job.termination, policy)
    if job.pod_phase == "Failed" or job.disruption:
        reason = job.pod_reason or _disruption_reason(job.disruption) or reasons.POD_FAILED
        if job.pod_phase == "Failed" or job.finished == "Failed":
            return Verdict(AttemptOutcome.RETRYABLE, reason,
                           truncate(job.pod_message or f"the pod failed before its container ended ({reason})"))
    if job.finished == "Failed" and job.remote and not (job.gone or job.deleting):
        return Verdict(AttemptOutcome.RETRYABLE, reasons.POD_FAILED, truncate(
            f"the attempt's Job failed on a MultiKueue worker cluster ({job.failure_reason or 'no reason'}: "
            f"{job.failure_message or 'no message'}); its pod, exit code and output stay on that cluster"))
    if job.finished == "Failed" or job.gone or (job.deleting and not job.finished):
        if job.gone or job.deleting:
            return Verdict(AttemptOutcome.RETRYABLE, reasons.JOB_DELETED,
                           "the attempt's Job was deleted before it finished")
        reason = _disruption_reason(job.disruption) or reasons.POD_DELETED
        message = job.failure_message or "the attempt's pod was deleted or lost before its container ended"
        return Verdict(AttemptOutcome.RETRYABLE, reason, truncate(message))
    if job.finished == "Complete":
        return Verdict(AttemptOutcome.SUCCESS, reasons.COMPLETED)
    return None


def _disruption_reason(disruption: str | None) -> str | None:
    return {
        "EvictionByEvictionAPI": reasons.EVICTED,
        "DeletionByTaintManager": reasons.NODE_LOST,
        "DeletionByPodGC": reasons.NODE_LOST,
        "PreemptionByScheduler": reasons.PREEMPTED,
        "TerminationByKubelet": reasons.EVICTED,
    }.get(disruption or "", disruption)
