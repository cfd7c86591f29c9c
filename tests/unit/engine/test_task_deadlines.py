"""A task's own time limits (issue 39.4), judged by the state machine with the injected clock:
startDeadline (ends a task that has not started), deadline (aborts the running attempt and ends the
task), the retry budget in time (retry.maxRetryDuration) and how they meet retries and backoff.
States are reached by reconciling and feeding each plan's status back, as the operator does."""
from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest

from cronoq.api import AttemptOutcome, Task, TaskPhase
from cronoq.engine import reasons
from cronoq.engine.attempts import reconcile, task_deadlines
from cronoq.engine.dependencies import gate as dependency_gate
from cronoq.engine.gate import Gate
from cronoq.engine.observed import AttemptJob, Termination
from cronoq.engine.plan import Effective, Plan

from tests.unit.builders import T0, at, attempt_job, make_task, observe, settings, with_status


def run(task: Task, seen, effective: Effective | None = None) -> Plan:
    return reconcile(task, effective or settings(task), seen, random.Random(0))


def step(task: Task, plan: Plan) -> Task:
    return with_status(task, plan.status) if plan.status is not None else task


def finished_reason(plan: Plan) -> str:
    return next(c for c in plan.status.conditions if c.type == "Finished").reason


# --- startDeadline ---------------------------------------------------------------------------------

def test_a_queued_task_waits_until_its_start_deadline_then_ends_without_running() -> None:
    task = make_task().spec(startDeadline="5m").obj()
    queued = run(task, observe(now=at(10), first_seen=T0))
    assert queued.status.phase is TaskPhase.QUEUED and queued.wants_slot
    assert queued.requeue_after == pytest.approx(290), "looked at again when the deadline passes, no polling"
    task = step(task, queued)
    assert run(task, observe(now=at(299.9), first_seen=T0)).status is None
    ended = run(task, observe(now=at(300), first_seen=T0, admit=True))
    assert ended.status.phase is TaskPhase.FAILED and finished_reason(ended) == reasons.START_DEADLINE_EXCEEDED
    assert ended.create_job is None and ended.started is None and not ended.wants_slot
    assert ended.status.attempt == 0 and ended.status.attempts == ()
    assert "startDeadline of 5m" in ended.status.message and "12:05:00" in ended.status.message
    assert ended.requeue_after is None
    assert task_deadlines.kind_of(ended.status) == "start"


def test_a_blocked_task_hits_its_start_deadline_too() -> None:
    task = make_task().spec(startDeadline="1m", dependsOn=[{"task": "up"}]).obj()
    waiting = dependency_gate("t", task.spec.depends_on, {}, None)
    assert waiting.verdict == "wait"
    blocked = run(task, observe(now=at(1), gate=waiting))
    assert blocked.status.phase is TaskPhase.BLOCKED and blocked.requeue_after == pytest.approx(59)
    ended = run(step(task, blocked), observe(now=at(60), gate=waiting))
    assert ended.status.phase is TaskPhase.FAILED and finished_reason(ended) == reasons.START_DEADLINE_EXCEEDED


def test_a_gate_that_ends_the_task_wins_over_the_start_deadline() -> None:
    task = make_task().spec(startDeadline="1m").obj()
    gate = Gate.end(TaskPhase.SKIPPED, reasons.DEPENDENCY_UNMET, "up failed")
    plan = run(task, observe(now=at(120), gate=gate))
    assert plan.status.phase is TaskPhase.SKIPPED


def test_the_start_deadline_no_longer_applies_once_the_first_attempt_started() -> None:
    task = make_task().spec(startDeadline="1m", leaseTTL="0s").obj()
    task = step(task, run(task, observe(now=at(30), admit=True)))
    assert task.status.phase is TaskPhase.RUNNING
    plan = run(task, observe(attempt_job("t", 1).running(at(31), seen=at(31)).obj(), now=at(600)))
    assert plan.status is None, "running past its startDeadline is fine: it started in time"


def test_start_deadline_counts_from_the_creation_sharpened_by_the_first_sight() -> None:
    task = make_task().spec(startDeadline="10s").obj()
    effective = settings(task)
    # Seen within the creation's (whole) second: that sight is the submission.
    assert task_deadlines.start_by(task, effective, at(0.4)) == at(10.4)
    # Seen later (the operator was down): the creation time is, so downtime counts.
    assert task_deadlines.start_by(task, effective, at(3)) == at(10)
    plan = run(task, observe(now=at(40), first_seen=at(35)))
    assert plan.status.phase is TaskPhase.FAILED and finished_reason(plan) == reasons.START_DEADLINE_EXCEEDED


def test_a_delayed_tasks_start_deadline_counts_from_its_start_time() -> None:
    """Told to wait an hour, with 5 minutes to start: it must start within 5 minutes of its time,
    not 5 minutes after its submission (which it could never do)."""
    task = make_task().spec(startDelay="1h", startDeadline="5m").obj()
    assert task_deadlines.start_by(task, settings(task), None) == at(3600 + 300)
    late = make_task().spec(notBefore=at(-60).isoformat(), startDeadline="5m").obj()  # a time already past
    assert task_deadlines.start_by(late, settings(late), None) == at(300)


def test_the_pools_deadlines_apply_and_a_tasks_0s_lifts_them() -> None:
    pool = {"startDeadline": "1m", "deadline": "1h", "retry": {"maxRetryDuration": "10m"}}
    task = make_task().obj()
    effective = settings(task, pool)
    assert (effective.start_deadline, effective.deadline) == (timedelta(minutes=1), timedelta(hours=1))
    assert effective.retry.max_retry_duration == timedelta(minutes=10)
    assert run(task, observe(now=at(60)), effective).status.phase is TaskPhase.FAILED
    lifted = make_task().spec(startDeadline="0s", deadline="0s").retry(maxRetryDuration="0s").obj()
    effective = settings(lifted, pool)
    assert (effective.start_deadline, effective.deadline) == (None, None)
    assert effective.retry.max_retry_duration == timedelta(0), "0s: no budget, whatever the pool says"
    plan = run(lifted, observe(now=at(7200)), effective)
    assert plan.status.phase is TaskPhase.QUEUED and plan.requeue_after is None


def test_a_task_without_limits_is_not_queued_again() -> None:
    task = make_task().obj()
    plan = run(task, observe(now=at(5)))
    assert plan.status.phase is TaskPhase.QUEUED and plan.requeue_after is None


# --- deadline ---------------------------------------------------------------------------------------

def running(task: Task, now=T0) -> Task:
    plan = run(task, observe(now=now, admit=True))
    assert plan.create_job is not None
    return step(task, plan)


def test_the_deadline_aborts_the_running_job_and_ends_the_task() -> None:
    task = running(make_task().spec(deadline="1m", leaseTTL="0s").retries(5).obj(), now=at(5))
    job = attempt_job("t", 1).running(at(6), seen=at(6)).obj()
    before = run(task, observe(job, now=at(20)))
    assert before.status is None and before.requeue_after == pytest.approx(40)
    plan = run(task, observe(job, now=at(60)))
    assert plan.status.phase is TaskPhase.FAILED and finished_reason(plan) == reasons.DEADLINE_EXCEEDED
    assert plan.delete_jobs == ("t-a1",)
    attempt = plan.status.attempts[-1]
    assert attempt.outcome is AttemptOutcome.RETRYABLE and attempt.reason == reasons.DEADLINE_EXCEEDED
    assert attempt.finished_at == at(60)
    assert plan.ended == (attempt,)
    assert "deadline of 1m" in plan.status.message and "attempt 1 was aborted" in plan.status.message
    assert task_deadlines.kind_of(plan.status) == "total"


def test_the_deadline_aborts_an_attempt_whose_job_was_not_created_yet() -> None:
    task = running(make_task().spec(deadline="10s").obj())
    plan = run(task, observe(now=at(10)))
    assert plan.status.phase is TaskPhase.FAILED and plan.delete_jobs == ("t-a1",) and plan.create_job is None


def test_the_deadline_ends_a_served_attempt_in_the_status_for_its_worker_to_abort() -> None:
    pool = {"delivery": "Workers", "leaseTTL": "0s"}
    task = make_task().unset("image").spec(deadline="30s").obj()
    effective = settings(task, pool)
    handed = run(task, observe(now=T0, admit=True, worker="w-1", worker_alive_until=at(1000)), effective)
    assert handed.status.attempts[-1].worker == "w-1" and handed.requeue_after == pytest.approx(30)
    task = step(task, handed)
    plan = run(task, observe(now=at(30), worker_alive_until=at(1000)), effective)
    assert plan.status.phase is TaskPhase.FAILED and finished_reason(plan) == reasons.DEADLINE_EXCEEDED
    assert plan.status.attempts[-1].outcome is AttemptOutcome.RETRYABLE  # the worker aborts what has an outcome
    assert plan.status.worker is None and plan.delete_jobs == ()


def test_a_report_that_came_in_before_the_operator_looked_wins_over_the_deadline() -> None:
    task = running(make_task().spec(deadline="1m").obj())
    done = attempt_job("t", 1).exited(0, "out", started=at(1), finished=at(59))
    plan = run(task, observe(done, now=at(70)))
    assert plan.status.phase is TaskPhase.SUCCEEDED and plan.status.output == "out"


def test_a_retrying_task_ends_when_its_deadline_passes_during_the_backoff() -> None:
    task = running(make_task().spec(deadline="1m").retries(5).retry(initialBackoff="10s", jitter="none").obj())
    failed = run(task, observe(attempt_job("t", 1).exited(1, started=at(1), finished=at(2)), now=at(2)))
    assert failed.status.phase is TaskPhase.RETRYING
    task = step(task, failed)
    # Not admitted when its backoff ended (no slot), it waits Queued... until the deadline.
    plan = run(task, observe(now=at(60)))
    assert plan.status.phase is TaskPhase.FAILED and finished_reason(plan) == reasons.DEADLINE_EXCEEDED


def test_a_retry_whose_backoff_would_end_after_the_deadline_ends_the_task_now() -> None:
    task = running(make_task().spec(deadline="1m").retries(5).retry(initialBackoff="30s", jitter="none").obj(),
                   now=at(20))
    plan = run(task, observe(attempt_job("t", 1).exited(1, "boom", started=at(21), finished=at(35)), now=at(35)))
    assert plan.status.phase is TaskPhase.FAILED and finished_reason(plan) == reasons.DEADLINE_EXCEEDED
    assert plan.status.finished_at == at(35), "ended now, not when the deadline passes"
    message = plan.status.message
    assert "attempt 1 failed (ExitCode)" in message and "no attempt 2" in message
    assert "12:01:05" in message and "12:01:00" in message  # the backoff's end, the deadline


def test_a_deadline_that_passed_while_no_operator_ran_ends_the_task_when_a_new_leader_looks() -> None:
    task = running(make_task().spec(deadline="1m").obj())
    job = attempt_job("t", 1).running(at(1), seen=at(1)).obj()
    plan = run(task, observe(job, now=at(3600), epoch=2))
    assert plan.status.phase is TaskPhase.FAILED and finished_reason(plan) == reasons.DEADLINE_EXCEEDED
    assert plan.status.epoch == 2 and plan.delete_jobs == ("t-a1",)


def test_cancellation_wins_over_a_deadline_that_passed() -> None:
    task = running(make_task().spec(deadline="1m").obj())
    plan = run(with_status(make_task().spec(deadline="1m").cancelled().obj(), task.status), observe(now=at(90)))
    assert plan.status.phase is TaskPhase.CANCELLED


# --- the retry budget in time -------------------------------------------------------------------

def budgeted(**retry) -> Task:
    return make_task().retry(maxAttempts=10, initialBackoff="4s", multiplier=2.0, jitter="none",
                             maxRetryDuration="10s", **retry).obj()


def fail(task: Task, n: int, now) -> Plan:
    return run(task, observe(attempt_job("t", n).exited(1, "boom", started=now, finished=now), now=now, admit=True))


def test_the_first_attempts_dispatch_is_recorded_and_kept() -> None:
    task = running(budgeted(), now=at(3))
    assert task.status.first_attempt_at == at(3)
    task = step(task, fail(task, 1, at(4)))
    task = step(task, run(task, observe(now=at(8), admit=True)))
    assert task.status.attempt == 2 and task.status.first_attempt_at == at(3)


def test_a_retry_whose_backoff_ends_after_the_budget_dead_letters_the_task_now() -> None:
    task = running(budgeted())                          # attempt 1 dispatched at T0: budget ends at 10s
    task = step(task, fail(task, 1, at(1)))             # backoff 4s → attempt 2 at 5s: in budget
    assert task.status.phase is TaskPhase.RETRYING and task.status.next_attempt_at == at(5)
    task = step(task, run(task, observe(now=at(5), admit=True)))
    assert task.status.attempt == 2
    plan = fail(task, 2, at(6))                         # backoff 8s → attempt 3 at 14s: past 10s
    assert plan.status.phase is TaskPhase.DEAD_LETTERED
    assert finished_reason(plan) == reasons.RETRY_DURATION_EXHAUSTED
    assert plan.status.finished_at == at(6) and plan.status.next_attempt_at is None
    message = plan.status.message
    assert "attempt 2 failed (ExitCode)" in message and "no attempt 3" in message
    assert "maxRetryDuration 10s" in message and "12:00:14" in message and "12:00:10" in message
    assert task_deadlines.kind_of(plan.status) == "retry"


def test_a_retry_left_waiting_for_a_slot_past_the_budget_ends_when_it_passes() -> None:
    task = running(budgeted())
    task = step(task, fail(task, 1, at(1)))
    assert task.status.phase is TaskPhase.RETRYING
    waiting = run(task, observe(now=at(5)))             # its backoff is over, no slot
    assert waiting.status.phase is TaskPhase.QUEUED and waiting.requeue_after == pytest.approx(5)
    task = step(task, waiting)
    plan = run(task, observe(now=at(10), admit=True))
    assert plan.status.phase is TaskPhase.DEAD_LETTERED and plan.create_job is None
    assert finished_reason(plan) == reasons.RETRY_DURATION_EXHAUSTED


def test_the_budget_counts_from_the_first_attempt_not_from_submission() -> None:
    task = budgeted()
    task = step(task, run(task, observe(now=at(1), first_seen=T0)))   # queued for a long time
    task = running(task, now=at(300))
    task = step(task, fail(task, 1, at(301)))
    assert task.status.phase is TaskPhase.RETRYING, "the time in the queue is not the retry budget's"


def test_attempts_exhausted_first_ends_the_task_as_attempts_exhausted() -> None:
    task = running(make_task().retry(maxAttempts=1, maxRetryDuration="1h").obj())
    plan = fail(task, 1, at(1))
    assert finished_reason(plan) == reasons.ATTEMPTS_EXHAUSTED


def test_with_attempts_left_the_time_budget_ends_the_task_first() -> None:
    task = running(make_task().retry(maxAttempts=100, initialBackoff="20s", jitter="none",
                                     maxRetryDuration="15s").obj())
    plan = fail(task, 1, at(1))
    assert plan.status.phase is TaskPhase.DEAD_LETTERED and finished_reason(plan) == reasons.RETRY_DURATION_EXHAUSTED


def test_a_retry_after_hint_counts_in_the_backoff_against_the_budget() -> None:
    task = running(make_task().retry(maxAttempts=5, initialBackoff="1s", jitter="none",
                                     maxRetryDuration="30s").obj())
    hint = json.dumps({"outcome": "retryable", "message": "later", "retryAfterSeconds": 60})
    end = AttemptJob(number=1, name="t-a1", created_at=T0, termination=Termination(exit_code=1, message=hint),
                     finished="Failed", pod_phase="Failed", lease_id="e1-a1")
    plan = run(task, observe(end, now=at(2)))
    assert finished_reason(plan) == reasons.RETRY_DURATION_EXHAUSTED


def test_a_status_written_before_first_attempt_at_reads_the_first_records_dispatch() -> None:
    task = running(budgeted(), now=at(2))
    old = task.status.model_copy(update={"first_attempt_at": None})
    assert task_deadlines.first_attempt_at(old) == at(2)
    assert task_deadlines.retry_until(old, settings(task)) == at(12)


def test_a_push_tasks_attempt_is_aborted_at_the_deadline_like_any_job() -> None:
    task = make_task().unset("image").spec(http={"url": "https://hooks.example.com/x"}, deadline="20s",
                                           leaseTTL="0s").obj()
    task = running(task)
    plan = run(task, observe(attempt_job("t", 1).running(at(1), seen=at(1)).obj(), now=at(20)))
    assert plan.status.phase is TaskPhase.FAILED and finished_reason(plan) == reasons.DEADLINE_EXCEEDED
    assert plan.delete_jobs == ("t-a1",)


def test_an_attempt_running_past_the_retry_budget_runs_on_and_is_not_woken_in_a_loop() -> None:
    task = running(make_task().spec(leaseTTL="0s").retry(maxAttempts=3, maxRetryDuration="10s").obj())
    plan = run(task, observe(attempt_job("t", 1).running(at(1), seen=at(1)).obj(), now=at(60)))
    assert plan.status is None and plan.requeue_after is None, "the budget bounds retries, not the attempt running"
    ended = run(task, observe(attempt_job("t", 1).exited(1, started=at(1), finished=at(61)), now=at(61)))
    assert finished_reason(ended) == reasons.RETRY_DURATION_EXHAUSTED
