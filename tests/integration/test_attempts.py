"""The attempt engine end to end: the real operator process, the real control plane, kwok playing
each attempt's outcome (DESIGN §2–§4, issue 4)."""
from __future__ import annotations

import json
from datetime import datetime

from tests.support.waiting import wait_until


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_success_on_the_first_attempt_keeps_the_termination_message_as_output(cq):
    cq.pool()
    cq.task("hello", message="hello, world", delay="200ms")

    status = cq.wait_phase("hello", "Succeeded")

    assert status["output"] == "hello, world" and status["outputAvailable"] is True
    assert status["attempt"] == 1
    (attempt,) = status["attempts"]
    assert attempt["outcome"] == "Success" and attempt["job"] == "hello-a1" and attempt["trigger"] == "First"
    assert attempt["leaseId"].startswith("e") and attempt["leaseId"].endswith("-a1")
    (job,) = cq.jobs("hello")
    assert job.spec.backoff_limit == 0 and job.spec.template.spec.restart_policy == "Never"
    owner = job.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("Task", "hello", True)
    labels = job.metadata.labels
    assert labels["cronoq.io/attempt"] == "1" and labels["cronoq.io/task-uid"] == cq.get("hello")["metadata"]["uid"]
    env = {e.name: e.value for e in job.spec.template.spec.containers[0].env}
    assert env["CRONOQ_ATTEMPT"] == "1" and env["CRONOQ_TASK_ID"] == labels["cronoq.io/task-uid"]
    ended = wait_until(lambda: [e for e in cq.events("hello") if e.reason == "AttemptEnded"], timeout=10,
                       what="the attempt's Event")
    assert len(ended) == 1 and "started 20" in ended[0].message and "ended: Success" in ended[0].message
    assert "AttemptStarted" not in cq.reasons("hello")  # one Event per attempt, at its end


def test_exit_1_then_exit_0_succeeds_on_attempt_2_after_the_backoff(cq):
    cq.pool(retry={"maxAttempts": 3, "initialBackoff": "2s", "jitter": "none"})
    cq.task("flaky", outcome_a1="Fail", exit_code_a1=1, delay="100ms", message="done")

    retrying = cq.wait_status("flaky", lambda s: s.get("phase") == "Retrying", "Retrying after attempt 1")
    status = cq.wait_phase("flaky", "Succeeded")

    first, second = status["attempts"]
    assert (first["outcome"], first["exitCode"], first["reason"]) == ("Retryable", 1, "ExitCode")
    assert (second["outcome"], second["trigger"], status["output"]) == ("Success", "Retry", "done")
    # The policy's 2s, measured between what the status recorded: attempt 1's end (second
    # precision, rounded down) and the earliest start it allowed, which Job 2 did not beat.
    next_at = ts(retrying["nextAttemptAt"])
    assert (next_at - ts(first["finishedAt"])).total_seconds() >= 2.0
    job2 = next(j for j in cq.jobs("flaky") if j.metadata.name == "flaky-a2")
    assert job2.metadata.creation_timestamp >= next_at.replace(microsecond=0)


def test_a_permanent_exit_code_fails_without_another_attempt(cq):
    cq.pool(retry={"permanentExitCodes": [42]})
    cq.task("bad", outcome="Fail", exit_code=42, message="bad input", delay="100ms")

    status = cq.wait_phase("bad", "Failed")

    assert status["attempt"] == 1 and status["attempts"][0]["reason"] == "PermanentExitCode"
    assert "bad input" in status["message"]
    assert [j.metadata.name for j in cq.jobs("bad")] == ["bad-a1"]


def test_always_failing_is_dead_lettered_after_max_attempts_with_the_last_message(cq):
    cq.pool(retry={"maxAttempts": 3, "initialBackoff": "0s"})
    cq.task("doomed", outcome="Fail", exit_code=2, message="still broken", message_a3="broken at last", delay="50ms")

    status = cq.wait_phase("doomed", "DeadLettered")

    assert status["attempt"] == 3 and [a["number"] for a in status["attempts"]] == [1, 2, 3]
    assert all(a["outcome"] == "Retryable" for a in status["attempts"])
    assert "broken at last" in status["message"]
    assert len(cq.jobs("doomed")) == 3


def test_an_attempt_that_overruns_its_timeout_is_aborted_and_retried(cq):
    cq.pool(retry={"maxAttempts": 2, "initialBackoff": "0s"})
    cq.task("slow", outcome_a1="Run", delay="100ms", timeout="2s")

    status = cq.wait_phase("slow", "Succeeded")

    first = status["attempts"][0]
    assert (first["outcome"], first["reason"]) == ("Retryable", "Timeout")
    assert first["durationMs"] >= 2000
    wait_until(lambda: "slow-a1" not in [j.metadata.name for j in cq.jobs("slow")], timeout=30,
               what="the timed-out attempt's Job deleted")


def test_a_retry_after_hint_delays_the_next_attempt_beyond_the_policy(cq):
    cq.pool(retry={"initialBackoff": "1s", "jitter": "none"})
    hint = json.dumps({"outcome": "retryable", "message": "rate limited", "retryAfterSeconds": 5})
    cq.task("polite", outcome_a1="Fail", exit_code_a1=1, message_a1=hint, delay="100ms")

    retrying = cq.wait_status("polite", lambda s: s.get("phase") == "Retrying", "Retrying after attempt 1")
    status = cq.wait_phase("polite", "Succeeded", timeout=60)

    first = status["attempts"][0]
    assert (first["reason"], first["message"]) == ("Retryable", "rate limited")
    next_at = ts(retrying["nextAttemptAt"])
    assert (next_at - ts(first["finishedAt"])).total_seconds() >= 5.0
    job2 = next(j for j in cq.jobs("polite") if j.metadata.name == "polite-a2")
    assert job2.metadata.creation_timestamp >= next_at.replace(microsecond=0)


def test_a_late_report_from_an_aborted_attempt_changes_nothing_and_is_counted(cq):
    cq.pool(retry={"maxAttempts": 2, "initialBackoff": "0s"})
    before = cq.operator.metric("cronoq_stale_completions_total")
    # Attempt 1 runs past its timeout; deleted, its pod still exits 0 ("finished after SIGTERM").
    cq.task("late", outcome="Run", on_delete="Succeed", timeout="2s")

    running = cq.wait_status("late", lambda s: s.get("attempt") == 2 and s.get("phase") == "Running",
                             "attempt 2 running", timeout=60)
    wait_until(lambda: "StaleCompletion" in cq.reasons("late"), timeout=30, what="a StaleCompletion Event")

    assert cq.operator.metric("cronoq_stale_completions_total") >= before + 1
    now = cq.status("late")
    assert (now["phase"], now["attempt"]) == ("Running", 2)
    assert now["attempts"][0]["reason"] == "Timeout"
    assert now["attempts"] == running["attempts"], "the late report changed no attempt record"


def test_a_pod_stuck_pending_past_the_start_timeout_is_retried_with_its_own_reason(cq):
    cq.pool(startTimeout="2s", retry={"maxAttempts": 2, "initialBackoff": "0s"}, timeout="1s")
    # Attempt 1 never starts; attempt 2 starts at once. The 1s timeout never applies to Pending time.
    cq.task("stuck", outcome_a1="Pending", delay="100ms")

    status = cq.wait_phase("stuck", "Succeeded", timeout=60)

    first = status["attempts"][0]
    assert (first["outcome"], first["reason"]) == ("Retryable", "StartTimeout")
    assert first.get("startedAt") is None and "did not start within 2s" in first["message"]
