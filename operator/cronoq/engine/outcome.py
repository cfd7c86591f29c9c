"""What an ended attempt means (DESIGN §3): success, retryable or permanent, with a reason.

The SDK's structured termination message (JSON with `outcome`, `message`,
`retryAfterSeconds`, `output`; the push runner adds `reason` and `responseCode`) wins over the
exit code. Without it: exit 0 succeeds and the
termination message is the output; an exit code in `permanentExitCodes` is permanent; every
other exit, and every way a pod can be lost (OOMKilled, evicted, node lost, deleted), is
retryable with a reason a user can act on.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cronoq.api import AttemptOutcome, RetryPolicy
from cronoq.api.limits import MESSAGE_LIMIT
from cronoq.engine import reasons
from cronoq.engine.observed import AttemptJob, Termination

"""Bytes kept of any message or output; longer ones are cut, never rejected."""
TRUNCATED = "…[truncated]"
MAX_RETRY_AFTER = 24 * 3600.0
"""Longest `retryAfterSeconds` honoured: the longest backoff a retry policy may set (24h). A
larger hint (or `Infinity`) would overflow the next attempt's time and fail every reconcile."""


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


def truncate(text: str | None, limit: int = MESSAGE_LIMIT) -> str:
    """`text` cut to at most `limit` bytes of UTF-8, with a marker when cut."""
    if not text:
        return ""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    keep = limit - len(TRUNCATED.encode())
    return raw[:keep].decode(errors="ignore") + TRUNCATED


_SDK_OUTCOMES = {"success": AttemptOutcome.SUCCESS, "retryable": AttemptOutcome.RETRYABLE,
                 "permanent": AttemptOutcome.PERMANENT}
REPORTED_REASONS = frozenset({reasons.LEASE_LOST, reasons.TIMEOUT, reasons.NETWORK_ERROR, reasons.HTTP_STATUS,
                              reasons.ADDRESS_NOT_ALLOWED})
"""Reasons a termination message may give for a failure: the SDK's self-fencing and the push
runner's. Any other word is ignored, so a container cannot pose as the operator's own verdicts."""


def sdk_report(message: str | None) -> dict[str, Any] | None:
    """The SDK's structured termination message, if `message` is one. Anything else, however it
    fails to parse (nesting deep enough to exhaust the parser's recursion included), is plain text."""
    if not message or not message.lstrip().startswith("{"):
        return None
    try:
        report = json.loads(message)
        if isinstance(report, dict) and not isinstance(report.get("output"), (str, type(None))):
            report["output"] = json.dumps(report["output"], separators=(",", ":"))
    except (ValueError, RecursionError):
        return None
    if isinstance(report, dict) and str(report.get("outcome", "")).lower() in _SDK_OUTCOMES:
        return report
    return None


def from_termination(end: Termination, policy: RetryPolicy) -> Verdict:
    report = sdk_report(end.message)
    if report is not None:
        outcome = _SDK_OUTCOMES[str(report["outcome"]).lower()]
        output = report.get("output")
        retry_after = report.get("retryAfterSeconds")
        retry_after = (float(min(retry_after, MAX_RETRY_AFTER)) if isinstance(retry_after, (int, float))
                       and not isinstance(retry_after, bool) and retry_after > 0 else None)
        reason = {AttemptOutcome.SUCCESS: reasons.COMPLETED, AttemptOutcome.RETRYABLE: reasons.RETRYABLE,
                  AttemptOutcome.PERMANENT: reasons.PERMANENT}[outcome]
        reported = str(report.get("reason", ""))
        if outcome is not AttemptOutcome.SUCCESS and reported in REPORTED_REASONS:
            reason = reported
        code = report.get("responseCode")
        code = code if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599 else None
        return Verdict(outcome, reason, truncate(str(report.get("message") or "")), end.exit_code,
                       truncate(output) if outcome is AttemptOutcome.SUCCESS and output is not None else None,
                       retry_after, code)
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
