"""What an ended attempt means (DESIGN §3): the SDK's structured message first, then the exit
code, then the ways a pod or Job can be lost; messages cut to 4 KiB, never rejected."""
from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from cronoq.api import AttemptOutcome, RetryPolicy
from cronoq.engine import reasons
from cronoq.engine.backoff import retry_delay
from cronoq.engine.observed import Termination
from cronoq.api.limits import MESSAGE_LIMIT
from cronoq.engine.outcome import classify, from_termination, sdk_report, truncate
from cronoq.pod_protocol.report import TRUNCATED

from tests.unit.builders import T0, at, attempt_job

POLICY = RetryPolicy(permanent_exit_codes=(3, 64))
S, R, P = AttemptOutcome.SUCCESS, AttemptOutcome.RETRYABLE, AttemptOutcome.PERMANENT


def end(code: int, message: str | None = None, reason: str | None = None) -> Termination:
    return Termination(exit_code=code, reason=reason, message=message, started_at=T0, finished_at=at(3))


def sdk(**fields) -> str:
    return json.dumps(fields)


# --- exit codes --------------------------------------------------------------------------------------

def test_exit_zero_succeeds_with_the_termination_message_as_output() -> None:
    verdict = from_termination(end(0, "42 rows"), POLICY)
    assert (verdict.outcome, verdict.reason, verdict.exit_code, verdict.output) == (S, reasons.COMPLETED, 0, "42 rows")


def test_exit_zero_without_a_message_has_no_output() -> None:
    assert from_termination(end(0, None), POLICY).output is None
    assert from_termination(end(0, ""), POLICY).output is None


def test_exit_zero_with_plain_json_that_is_not_an_sdk_report_is_output_as_is() -> None:
    message = '{"rows": 3}'
    verdict = from_termination(end(0, message), POLICY)
    assert verdict.outcome is S and verdict.output == message


@pytest.mark.parametrize("code", [1, 2, 137, 255])
def test_other_non_zero_exits_are_retryable_with_reason_exit_code(code: int) -> None:
    verdict = from_termination(end(code, "boom"), POLICY)
    assert (verdict.outcome, verdict.reason, verdict.exit_code) == (R, reasons.EXIT_CODE, code)
    assert str(code) in verdict.message and "boom" in verdict.message
    assert verdict.output is None


@pytest.mark.parametrize("code", [3, 64])
def test_permanent_exit_codes_are_permanent(code: int) -> None:
    verdict = from_termination(end(code, "bad input"), POLICY)
    assert (verdict.outcome, verdict.reason, verdict.exit_code) == (P, reasons.PERMANENT_EXIT_CODE, code)
    assert "bad input" in verdict.message


def test_permanent_exit_codes_come_from_the_policy() -> None:
    assert from_termination(end(3), RetryPolicy()).outcome is R


def test_oom_killed_is_retryable_with_its_own_reason() -> None:
    verdict = from_termination(end(137, None, reason="OOMKilled"), POLICY)
    assert (verdict.outcome, verdict.reason, verdict.exit_code) == (R, reasons.OOM_KILLED, 137)
    assert "memory" in verdict.message


# --- the SDK's structured message wins over the exit code -------------------------------------------------

@pytest.mark.parametrize("code", [0, 1, 3, 137])
def test_sdk_retryable_wins_over_the_exit_code(code: int) -> None:
    verdict = from_termination(end(code, sdk(outcome="retryable", message="rate limited", retryAfterSeconds=30)), POLICY)
    assert (verdict.outcome, verdict.reason, verdict.message) == (R, reasons.RETRYABLE, "rate limited")
    assert verdict.retry_after == 30.0
    assert verdict.output is None and verdict.exit_code == code


@pytest.mark.parametrize("code", [0, 1, 137])
def test_sdk_permanent_wins_over_the_exit_code(code: int) -> None:
    verdict = from_termination(end(code, sdk(outcome="permanent", message="no such customer")), POLICY)
    assert (verdict.outcome, verdict.reason, verdict.message) == (P, reasons.PERMANENT, "no such customer")
    assert verdict.output is None


@pytest.mark.parametrize("code", [0, 1, 3])
def test_sdk_success_wins_over_the_exit_code_and_carries_the_output(code: int) -> None:
    verdict = from_termination(end(code, sdk(outcome="success", output="done: 7")), POLICY)
    assert (verdict.outcome, verdict.reason, verdict.output) == (S, reasons.COMPLETED, "done: 7")


def test_sdk_structured_output_is_compact_json() -> None:
    verdict = from_termination(end(0, sdk(outcome="success", output={"rows": [1, 2]})), POLICY)
    assert json.loads(verdict.output) == {"rows": [1, 2]} and " " not in verdict.output


def test_sdk_outcome_is_case_insensitive_and_may_be_indented() -> None:
    verdict = from_termination(end(1, "  \n" + sdk(outcome="Permanent", message="x")), POLICY)
    assert verdict.outcome is P


@pytest.mark.parametrize("message", [
    '{"outcome": "maybe"}', '{"message": "no outcome"}', '["retryable"]', '{"outcome": "retryable"',
    "not json", '{"outcome": null}',
])
def test_what_is_not_an_sdk_report_falls_back_to_the_exit_code(message: str) -> None:
    assert sdk_report(message) is None
    assert from_termination(end(3, message), POLICY).reason == reasons.PERMANENT_EXIT_CODE
    assert from_termination(end(0, message), POLICY).output == message


@pytest.mark.parametrize("hint", [0, -5, "30", None, float("nan")])
def test_retry_after_must_be_a_positive_number(hint) -> None:
    message = json.dumps({"outcome": "retryable", "retryAfterSeconds": hint})
    assert from_termination(end(1, message), POLICY).retry_after is None


def test_retry_after_true_is_not_a_number() -> None:
    # JSON `true` is a bool, which Python also counts as an int; it is no number of seconds.
    message = json.dumps({"outcome": "retryable", "retryAfterSeconds": True})
    assert from_termination(end(1, message), POLICY).retry_after is None


@pytest.mark.parametrize("hint", ["1e12", "1e300", "1e400", "Infinity", "1" + "0" * 400])
def test_an_absurd_retry_after_is_bounded_so_the_next_attempt_time_can_be_computed(hint: str) -> None:
    """A task's hint must never make the operator's own arithmetic fail (the task would be stuck
    Running forever, every reconcile raising OverflowError)."""
    message = '{"outcome": "retryable", "retryAfterSeconds": %s}' % hint
    verdict = from_termination(end(1, message), POLICY)
    assert verdict.outcome is R
    assert verdict.retry_after is not None and math.isfinite(verdict.retry_after)
    assert verdict.retry_after >= 86400  # still a long wait: honoured up to the bound
    delay = retry_delay(POLICY, 2, random.Random(0), verdict.retry_after)
    assert T0 + delay > T0


# --- truncation ----------------------------------------------------------------------------------------

def test_short_text_is_kept_whole() -> None:
    assert truncate("hello") == "hello"
    assert truncate("x" * MESSAGE_LIMIT) == "x" * MESSAGE_LIMIT
    assert truncate(None) == "" and truncate("") == ""


def test_long_text_is_cut_to_the_limit_with_a_marker() -> None:
    cut = truncate("x" * 10_000)
    assert len(cut.encode()) <= MESSAGE_LIMIT and cut.endswith(TRUNCATED)
    assert cut.startswith("x" * 4000)


@given(text=st.text(max_size=3000), limit=st.integers(len(TRUNCATED.encode()), 5000))
def test_truncate_never_exceeds_the_limit_in_utf8_bytes(text: str, limit: int) -> None:
    cut = truncate(text, limit)
    assert len(cut.encode()) <= limit
    if len(text.encode()) <= limit:
        assert cut == text
    else:
        assert cut.endswith(TRUNCATED)
        assert text.startswith(cut[: -len(TRUNCATED)])


def test_multibyte_text_is_cut_on_a_character_boundary() -> None:
    text = "€" * 2000 + "😀" * 1000  # 3 and 4 bytes each
    cut = truncate(text)
    assert len(cut.encode()) <= MESSAGE_LIMIT
    cut.encode("utf-8", errors="strict")
    assert text.startswith(cut[: -len(TRUNCATED)])


@pytest.mark.parametrize("blob", ["é" * 5000, "x" * 100_000, "😀" * 3000])
def test_long_messages_and_outputs_are_truncated_never_rejected(blob: str) -> None:
    assert len(from_termination(end(0, blob), POLICY).output.encode()) <= MESSAGE_LIMIT
    assert len(from_termination(end(1, blob), POLICY).message.encode()) <= MESSAGE_LIMIT
    assert len(from_termination(end(3, blob), POLICY).message.encode()) <= MESSAGE_LIMIT
    verdict = from_termination(end(0, sdk(outcome="success", output=blob, message=blob)), POLICY)
    assert len(verdict.output.encode()) <= MESSAGE_LIMIT and len(verdict.message.encode()) <= MESSAGE_LIMIT


@given(message=st.text(max_size=6000), code=st.integers(0, 255),
       reason=st.sampled_from([None, "Error", "Completed", "OOMKilled"]))
def test_from_termination_never_raises(message: str, code: int, reason: str | None) -> None:
    verdict = from_termination(end(code, message, reason), POLICY)
    assert len(verdict.message.encode()) <= MESSAGE_LIMIT
    assert verdict.output is None or len(verdict.output.encode()) <= MESSAGE_LIMIT


# --- classify: Jobs and pods ----------------------------------------------------------------------------

def test_a_running_attempt_has_no_verdict() -> None:
    assert classify(attempt_job("t", 1).running(T0).obj(), POLICY) is None
    assert classify(attempt_job("t", 1).pending().obj(), POLICY) is None
    assert classify(attempt_job("t", 1).obj(), POLICY) is None  # created, no pod seen yet


def test_a_terminated_container_is_judged_by_its_termination() -> None:
    assert classify(attempt_job("t", 1).exited(0, "out"), POLICY).output == "out"
    assert classify(attempt_job("t", 1).exited(3), POLICY).outcome is P


def test_evicted_pod_is_retryable_with_reason_evicted() -> None:
    job = attempt_job("t", 1).with_(pod_phase="Failed", pod_reason="Evicted",
                                   pod_message="The node was low on resource: memory.")
    verdict = classify(job, POLICY)
    assert (verdict.outcome, verdict.reason) == (R, reasons.EVICTED)
    assert "low on resource" in verdict.message


def test_failed_pod_without_a_reason_is_pod_failed() -> None:
    verdict = classify(attempt_job("t", 1).with_(pod_phase="Failed"), POLICY)
    assert (verdict.outcome, verdict.reason) == (R, reasons.POD_FAILED)


@pytest.mark.parametrize("disruption, reason", [
    ("DeletionByTaintManager", reasons.NODE_LOST),
    ("DeletionByPodGC", reasons.NODE_LOST),
    ("EvictionByEvictionAPI", reasons.EVICTED),
    ("PreemptionByScheduler", reasons.PREEMPTED),
    ("TerminationByKubelet", reasons.EVICTED),
])
def test_job_failed_after_a_disruption_is_retryable_with_the_disruptions_reason(disruption: str, reason: str) -> None:
    job = attempt_job("t", 1).with_(finished="Failed", disruption=disruption)
    verdict = classify(job, POLICY)
    assert (verdict.outcome, verdict.reason) == (R, reason)


def test_a_disrupted_pod_that_is_still_winding_down_has_no_verdict_yet() -> None:
    job = attempt_job("t", 1).running(T0).with_(disruption="EvictionByEvictionAPI")
    assert classify(job, POLICY) is None


def test_job_failed_without_any_pod_termination_is_pod_deleted() -> None:
    job = attempt_job("t", 1).with_(finished="Failed", failure_reason="BackoffLimitExceeded",
                                   failure_message="Job has reached the specified backoff limit")
    verdict = classify(job, POLICY)
    assert (verdict.outcome, verdict.reason) == (R, reasons.POD_DELETED)
    assert "backoff limit" in verdict.message


@pytest.mark.parametrize("facts", [{"gone": True}, {"deleting": True}, {"gone": True, "finished": "Failed"}])
def test_a_deleted_job_is_retryable_job_deleted(facts) -> None:
    verdict = classify(attempt_job("t", 1).running(T0).with_(**facts), POLICY)
    assert (verdict.outcome, verdict.reason) == (R, reasons.JOB_DELETED)


def test_a_deleted_job_whose_container_had_ended_keeps_the_containers_verdict() -> None:
    job = attempt_job("t", 1).exited(0, "result")
    assert classify(replace(job, gone=True), POLICY).output == "result"


def test_complete_job_without_a_termination_seen_succeeds_without_output() -> None:
    verdict = classify(attempt_job("t", 1).with_(finished="Complete"), POLICY)
    assert (verdict.outcome, verdict.reason, verdict.output) == (S, reasons.COMPLETED, None)


def test_long_pod_messages_are_truncated() -> None:
    job = attempt_job("t", 1).with_(pod_phase="Failed", pod_reason="Evicted", pod_message="ü" * 5000)
    assert len(classify(job, POLICY).message.encode()) <= MESSAGE_LIMIT
    job = attempt_job("t", 1).with_(finished="Failed", failure_message="ü" * 5000)
    assert len(classify(job, POLICY).message.encode()) <= MESSAGE_LIMIT


# --- the push runner's reports ---------------------------------------------------------------------------

@pytest.mark.parametrize("report, code, want", [
    (sdk(outcome="success", output="ok", responseCode=201), 0, (S, reasons.COMPLETED, 201)),
    (sdk(outcome="retryable", reason="HTTPStatus", responseCode=503, retryAfterSeconds=3), 1,
     (R, reasons.HTTP_STATUS, 503)),
    (sdk(outcome="permanent", reason="HTTPStatus", responseCode=404), 2, (P, reasons.HTTP_STATUS, 404)),
    (sdk(outcome="retryable", reason="Timeout"), 1, (R, reasons.TIMEOUT, None)),
    (sdk(outcome="retryable", reason="NetworkError", message="connection refused"), 1, (R, reasons.NETWORK_ERROR, None)),
    (sdk(outcome="permanent", reason="AddressNotAllowed"), 2, (P, reasons.ADDRESS_NOT_ALLOWED, None)),
], ids=["2xx", "503", "404", "timeout", "refused", "link-local"])
def test_push_reports_carry_their_reason_and_response_code(report: str, code: int, want) -> None:
    verdict = from_termination(end(code, report), POLICY)
    assert (verdict.outcome, verdict.reason, verdict.response_code) == want


@pytest.mark.parametrize("reason", ["JobRejected", "Cancelled", "StaleCompletion", "Completed", ""])
def test_a_report_cannot_claim_the_operators_own_reasons(reason: str) -> None:
    verdict = from_termination(end(1, sdk(outcome="retryable", reason=reason)), POLICY)
    assert verdict.reason == reasons.RETRYABLE


def test_success_keeps_reason_completed_whatever_the_report_says() -> None:
    verdict = from_termination(end(0, sdk(outcome="success", reason="Timeout", responseCode=200)), POLICY)
    assert (verdict.reason, verdict.response_code) == (reasons.COMPLETED, 200)


@pytest.mark.parametrize("code", [99, 600, "200", True, 200.0, None, -1])
def test_a_response_code_outside_http_is_dropped(code) -> None:
    assert from_termination(end(1, sdk(outcome="retryable", responseCode=code)), POLICY).response_code is None


# --- reports that cannot be parsed (issue 26, point 4b) ---------------------------------------------------

NESTED = '{"outcome": "retryable", "x": ' + "[" * 2000 + "]" * 2000 + "}"
"""Fits the kubelet's 4 KiB and nests deeper than the JSON parser's recursion limit."""
DEEP_OUTPUT = '{"outcome": "success", "output": ' + "[" * 900 + "]" * 900 + "}"
"""Parses, but re-encoding its output from deeper in the stack can exhaust the recursion limit."""


@pytest.mark.parametrize("message", [NESTED, NESTED[:3000], "{" * 4096, '{"outcome": "success"' + "[" * 4000])
def test_a_report_too_deep_or_broken_to_parse_is_plain_text(message: str) -> None:
    failed = from_termination(end(1, message), POLICY)
    assert failed.outcome is R and failed.reason == reasons.EXIT_CODE and message[:100] in failed.message
    succeeded = from_termination(end(0, message), POLICY)
    assert succeeded.outcome is S and succeeded.output == message


def test_a_deep_output_is_kept_as_json_text_or_taken_as_plain_text_never_raising() -> None:
    import sys
    def nested(depth: int):  # parse and classify from deep in the stack, as a busy reconcile might
        return nested(depth - 1) if depth else from_termination(end(0, DEEP_OUTPUT), POLICY)
    verdict = nested(sys.getrecursionlimit() - 200)
    assert verdict.outcome is S and verdict.output is not None and verdict.output.count("[") == 900
