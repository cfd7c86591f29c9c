"""The Task state machine (`attempts.reconcile`, DESIGN §1–§4), scenario by scenario.

States are reached the way the operator reaches them: by reconciling and feeding each plan's
status back as the stored status (`step`), not by writing statuses by hand, except where a
test needs a status no plan of this leader would write (another leader's, a pruned history).
"""
from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import timedelta

import pytest

from cronoq.api import AttemptOutcome, AttemptTrigger, ConditionStatus, Task, TaskPhase, TaskStatus
from cronoq.engine import reasons
from cronoq.engine.attempts import HISTORY, is_ready, reconcile
from cronoq.engine.plan import Effective, JobToCreate, Plan
from cronoq.engine.naming import job_name
from cronoq.engine.observed import AttemptJob

from tests.unit.builders import T0, at, attempt_job, make_task, observe, settings, with_status


def run(task: Task, seen, effective: Effective | None = None, seed: int = 0) -> Plan:
    return reconcile(task, effective or settings(task), seen, random.Random(seed))


def step(task: Task, plan: Plan) -> Task:
    """The task as stored after the runtime wrote the plan's status (if any)."""
    return with_status(task, plan.status) if plan.status is not None else task


def started(task: Task, *, now=T0, epoch: int = 1) -> Task:
    """`task` after a reconcile that admitted it and recorded its next attempt."""
    plan = run(task, observe(now=now, epoch=epoch, admit=True))
    assert plan.create_job is not None, plan
    return step(task, plan)


def condition(status: TaskStatus, type_: str):
    return next(c for c in status.conditions if c.type == type_)


def records(task: Task):
    return task.status.attempts


# --- the first attempt ---------------------------------------------------------------------------

def test_new_task_admitted_records_attempt_one_and_creates_its_job_in_the_same_plan() -> None:
    task = make_task("hello").obj()
    plan = run(task, observe(now=at(1), epoch=7, admit=True, first_seen=T0))
    status = plan.status
    assert status.phase is TaskPhase.RUNNING and status.attempt == 1
    assert plan.create_job == JobToCreate(1, "e7-a1")
    (attempt,) = status.attempts
    assert attempt.number == 1 and attempt.lease_id == "e7-a1" and attempt.job == "hello-a1"
    assert attempt.trigger is AttemptTrigger.FIRST and attempt.outcome is None
    assert plan.started == attempt
    assert status.epoch == 7 and status.observed_generation == 1
    assert status.submitted_at == T0  # when first seen, not when admitted
    assert condition(status, "Running").status is ConditionStatus.TRUE
    assert condition(status, "Finished").status is ConditionStatus.FALSE
    assert plan.events == ()  # one Event per attempt, at its end (issue 12: fewer writes)
    assert plan.delete_jobs == () and plan.stale_jobs == ()


def test_new_task_not_admitted_is_queued_and_wants_a_slot() -> None:
    task = make_task().obj()
    plan = run(task, observe(now=at(2), admit=False))
    assert plan.status.phase is TaskPhase.QUEUED and plan.status.attempt == 0
    assert plan.status.attempts == ()
    assert plan.create_job is None and plan.wants_slot
    assert plan.status.submitted_at == at(2)
    assert condition(plan.status, "Running").reason == reasons.WAITING_FOR_SLOT


def test_queued_again_writes_nothing() -> None:
    task = make_task().obj()
    queued = step(task, run(task, observe(now=T0)))
    again = run(queued, observe(now=at(30)))
    assert again.status is None and again.create_job is None
    assert again.wants_slot


def test_queued_task_admitted_later_keeps_its_submission_time() -> None:
    task = make_task().obj()
    queued = step(task, run(task, observe(now=T0)))
    plan = run(queued, observe(now=at(60), admit=True))
    assert plan.status.phase is TaskPhase.RUNNING and plan.create_job.number == 1
    assert plan.status.submitted_at == T0


def test_missing_pool_queues_and_never_starts_even_if_admitted() -> None:
    task = make_task().pool("nowhere").obj()
    plan = run(task, observe(now=T0, admit=True, pool_found=False, pool_name="nowhere"))
    assert plan.status.phase is TaskPhase.QUEUED and plan.create_job is None
    # It waits among the pool's candidates, so all of them are weighed at once when the pool appears.
    assert plan.wants_slot
    assert condition(plan.status, "Running").reason == reasons.POOL_NOT_FOUND
    assert "nowhere" in plan.status.message


def test_pool_appearing_is_news_and_keeps_the_conditions_transition_time() -> None:
    task = make_task().obj()
    lost = step(task, run(task, observe(now=T0, pool_found=False)))
    plan = run(lost, observe(now=at(10), pool_found=True))
    assert plan.status is not None and plan.wants_slot
    running = condition(plan.status, "Running")
    assert running.reason == reasons.WAITING_FOR_SLOT
    assert running.last_transition_time == T0  # still False: only the reason changed


# --- crash recovery and adoption ------------------------------------------------------------------

def test_recorded_attempt_without_a_job_is_created_again_without_a_status_write() -> None:
    task = started(make_task().obj())
    plan = run(task, observe(now=at(5)))
    assert plan.create_job.number == 1 and plan.status is None


def test_a_new_leader_recreates_the_recorded_job_and_keeps_its_number_and_lease() -> None:
    task = started(make_task().obj(), epoch=3)
    plan = run(task, observe(now=at(5), epoch=4, admit=True))
    assert plan.status is None
    assert records(task)[-1].lease_id == "e3-a1"
    assert plan.create_job == JobToCreate(1, "e3-a1"), "the recorded lease, not one of the new leader's epoch"


def test_a_running_job_of_the_open_attempt_is_adopted() -> None:
    task = started(make_task().obj(), epoch=3)
    plan = run(task, observe(attempt_job("t", 1, epoch=3).running(at(1)).obj(), now=at(5), epoch=4, admit=True))
    assert plan == Plan()


# --- outcomes -------------------------------------------------------------------------------------

def test_success_ends_the_task_with_the_output() -> None:
    task = started(make_task().obj())
    job = attempt_job("t", 1).exited(0, "42 rows", started=at(1), finished=at(4))
    plan = run(task, observe(job, now=at(5)))
    status = plan.status
    assert status.phase is TaskPhase.SUCCEEDED
    assert status.output == "42 rows" and status.output_available
    assert status.finished_at == at(5) and status.next_attempt_at is None
    (attempt,) = status.attempts
    assert attempt.outcome is AttemptOutcome.SUCCESS and attempt.exit_code == 0
    assert attempt.reason == reasons.COMPLETED
    assert attempt.started_at == at(1) and attempt.finished_at == at(4) and attempt.duration_ms == 3000
    assert plan.ended == (attempt,) and plan.create_job is None and plan.delete_jobs == ()
    assert condition(status, "Finished").status is ConditionStatus.TRUE
    assert condition(status, "Running").status is ConditionStatus.FALSE
    assert [e.reason for e in plan.events] == [reasons.ATTEMPT_ENDED]


def test_success_without_output_says_no_output_is_available() -> None:
    task = started(make_task().obj())
    plan = run(task, observe(attempt_job("t", 1).exited(0), now=at(5)))
    assert plan.status.phase is TaskPhase.SUCCEEDED
    assert plan.status.output is None and not plan.status.output_available


def test_push_attempts_record_their_response_code_and_honour_retry_after() -> None:
    """503 with Retry-After, then 200: each attempt's record keeps the code the endpoint answered."""
    task = started(make_task().no_jitter().retry(initialBackoff="1s").obj())
    busy = json.dumps({"outcome": "retryable", "reason": "HTTPStatus", "responseCode": 503,
                       "retryAfterSeconds": 7, "message": "HTTP 503 Service Unavailable"})
    plan = run(task, observe(attempt_job("t", 1).exited(1, busy), now=at(10), admit=True))
    assert plan.status.phase is TaskPhase.RETRYING and plan.status.next_attempt_at == at(17)
    first = plan.status.attempts[-1]
    assert (first.outcome, first.reason, first.response_code) == (AttemptOutcome.RETRYABLE, reasons.HTTP_STATUS, 503)

    retrying = step(task, plan)
    second = run(retrying, observe(attempt_job("t", 1).exited(1, busy), now=at(17), admit=True, epoch=2))
    running = step(retrying, second)
    ok = json.dumps({"outcome": "success", "responseCode": 200, "output": '{"sent":true}'})
    done = run(running, observe(attempt_job("t", 1).exited(1, busy), attempt_job("t", 2, epoch=2).created(at(17)).exited(0, ok), now=at(20),
                               epoch=2))
    assert done.status.phase is TaskPhase.SUCCEEDED and done.status.output == '{"sent":true}'
    assert [(a.number, a.response_code) for a in done.status.attempts] == [(1, 503), (2, 200)]


def test_retryable_failure_backs_off_and_no_attempt_starts_before_then() -> None:
    task = started(make_task().no_jitter().retry(initialBackoff="5s").obj())
    plan = run(task, observe(attempt_job("t", 1).exited(1, "boom"), now=at(10), admit=True))
    status = plan.status
    assert status.phase is TaskPhase.RETRYING and status.attempt == 1
    assert status.next_attempt_at == at(15)
    assert plan.create_job is None and plan.requeue_after == pytest.approx(5)
    assert status.attempts[-1].outcome is AttemptOutcome.RETRYABLE
    assert status.attempts[-1].reason == reasons.EXIT_CODE and status.attempts[-1].exit_code == 1
    assert "boom" in status.message and condition(status, "Running").reason == reasons.BACKING_OFF

    retrying = step(task, plan)
    early = run(retrying, observe(attempt_job("t", 1).exited(1, "boom"), now=at(14.9), admit=True))
    assert early.status is None and early.create_job is None and not early.wants_slot
    assert early.requeue_after == pytest.approx(0.1)

    due = run(retrying, observe(attempt_job("t", 1).exited(1, "boom"), now=at(15), admit=True, epoch=2))
    assert due.create_job.number == 2
    new = due.status.attempts[-1]
    assert (new.number, new.trigger, new.job, new.lease_id) == (2, AttemptTrigger.RETRY, "t-a2", "e2-a2")
    assert due.status.attempt == 2 and due.status.next_attempt_at is None
    assert due.status.submitted_at == T0  # a retried task keeps its place
    assert [a.number for a in due.status.attempts] == [1, 2]


@pytest.mark.parametrize("jitter", ["full", "additive", "none"])
def test_next_attempt_waits_at_least_what_the_jitter_mode_allows(jitter: str) -> None:
    task = started(make_task().retry(jitter=jitter, initialBackoff="8s", maxBackoff="1m").obj())
    for seed in range(20):
        plan = run(task, observe(attempt_job("t", 1).exited(1), now=at(10)), seed=seed)
        wait = (plan.status.next_attempt_at - at(10)).total_seconds()
        low, high = {"full": (0, 8), "additive": (8, 16), "none": (8, 8)}[jitter]
        assert low - 1e-6 <= wait <= high + 1e-6


def test_retry_after_from_the_sdk_delays_the_next_attempt_at_least_that_long() -> None:
    task = started(make_task().no_jitter().obj())
    message = json.dumps({"outcome": "retryable", "message": "rate limited", "retryAfterSeconds": 90})
    plan = run(task, observe(attempt_job("t", 1).exited(1, message), now=at(10)))
    assert plan.status.next_attempt_at == at(100)
    assert plan.status.attempts[-1].reason == reasons.RETRYABLE


def test_an_absurd_retry_after_from_the_sdk_still_gives_a_plan() -> None:
    task = started(make_task().obj())
    message = '{"outcome": "retryable", "retryAfterSeconds": 1e300}'
    plan = run(task, observe(attempt_job("t", 1).exited(1, message), now=at(10)))
    assert plan.status.phase is TaskPhase.RETRYING
    assert plan.status.next_attempt_at >= at(10) + timedelta(hours=24)


def test_retrying_task_due_but_without_a_slot_goes_back_to_the_queue() -> None:
    task = started(make_task().no_jitter().obj())
    retrying = step(task, run(task, observe(attempt_job("t", 1).exited(1), now=at(10))))
    plan = run(retrying, observe(now=at(100), admit=False))
    assert plan.status.phase is TaskPhase.QUEUED and plan.wants_slot and plan.create_job is None
    assert plan.status.submitted_at == T0


def test_zero_backoff_retries_in_the_same_plan_when_admitted() -> None:
    task = started(make_task().retry(initialBackoff="0s", maxBackoff="0s").obj())
    plan = run(task, observe(attempt_job("t", 1).exited(1), now=at(10), admit=True))
    assert plan.create_job.number == 2 and plan.status.phase is TaskPhase.RUNNING
    assert [a.outcome for a in plan.status.attempts] == [AttemptOutcome.RETRYABLE, None]
    assert [a.number for a in plan.ended] == [1]


def test_exhausted_attempts_dead_letter_with_the_last_message() -> None:
    task = make_task().retries(2).retry(initialBackoff="0s").obj()
    task = started(task)
    task = step(task, run(task, observe(attempt_job("t", 1).exited(1, "first"), now=at(1), admit=True)))
    assert task.status.attempt == 2 and task.status.phase is TaskPhase.RUNNING
    plan = run(task, observe(attempt_job("t", 1).exited(1, "first"),
                             attempt_job("t", 2).exited(2, "second"), now=at(2), admit=True))
    status = plan.status
    assert status.phase is TaskPhase.DEAD_LETTERED and plan.create_job is None
    assert "second" in status.message and "2" in status.message
    assert condition(status, "Finished").reason == reasons.ATTEMPTS_EXHAUSTED
    assert [a.outcome for a in status.attempts] == [AttemptOutcome.RETRYABLE] * 2
    assert status.finished_at == at(2)


def test_max_attempts_one_disables_retries() -> None:
    task = started(make_task().retries(1).obj())
    plan = run(task, observe(attempt_job("t", 1).exited(1), now=at(1), admit=True))
    assert plan.status.phase is TaskPhase.DEAD_LETTERED and plan.create_job is None


def test_a_pool_lowering_max_attempts_under_a_retrying_task_dead_letters_it() -> None:
    """Pool specs may change at any time and apply to attempts started afterwards: a task that
    has used up the new maxAttempts gets no further attempt."""
    task = started(make_task().no_jitter().obj())
    retrying = step(task, run(task, observe(attempt_job("t", 1).exited(1, "boom"), now=at(1))))
    assert retrying.status.phase is TaskPhase.RETRYING and retrying.status.attempt == 1
    lowered = settings(retrying, {"retry": {"maxAttempts": 1}})
    plan = run(retrying, observe(attempt_job("t", 1).exited(1, "boom"), now=at(100), admit=True), lowered)
    assert plan.create_job is None and plan.started is None
    assert plan.status.phase is TaskPhase.DEAD_LETTERED and plan.status.attempt == 1
    assert "boom" in plan.status.message
    assert condition(plan.status, "Finished").reason == reasons.ATTEMPTS_EXHAUSTED
    # Also when it already went back to the queue to wait for a slot.
    queued = step(retrying, run(retrying, observe(now=at(100))))
    assert queued.status.phase is TaskPhase.QUEUED
    plan = run(queued, observe(now=at(101), admit=True), lowered)
    assert plan.create_job is None and plan.status.phase is TaskPhase.DEAD_LETTERED


def test_the_tasks_retry_fields_override_the_pools_one_by_one() -> None:
    task = make_task().retry(jitter="none").obj()
    effective = settings(task, {"retry": {"maxAttempts": 5, "initialBackoff": "3s", "jitter": "full"}})
    assert (effective.retry.max_attempts, effective.retry.initial_backoff, effective.retry.jitter) == (
        5, timedelta(seconds=3), "none")


def test_permanent_exit_code_fails_the_task() -> None:
    task = started(make_task().retry(permanentExitCodes=[42]).obj())
    plan = run(task, observe(attempt_job("t", 1).exited(42, "bad input"), now=at(1), admit=True))
    assert plan.status.phase is TaskPhase.FAILED and plan.create_job is None
    assert plan.status.attempts[-1].reason == reasons.PERMANENT_EXIT_CODE
    assert "bad input" in plan.status.message
    assert condition(plan.status, "Finished").reason == reasons.FAILED


def test_sdk_permanent_fails_the_task_even_with_attempts_left() -> None:
    task = started(make_task().retries(5).obj())
    message = json.dumps({"outcome": "permanent", "message": "no such customer"})
    plan = run(task, observe(attempt_job("t", 1).exited(1, message), now=at(1), admit=True))
    assert plan.status.phase is TaskPhase.FAILED
    assert "no such customer" in plan.status.message


# --- deadlines ------------------------------------------------------------------------------------

def test_timeout_counts_from_container_start_and_aborts_the_job() -> None:
    task = started(make_task().no_jitter().timeout("10s").obj())
    created_long_ago = attempt_job("t", 1).created(at(-300))
    early = run(task, observe(created_long_ago.running(at(100), seen=at(100)).obj(), now=at(109.5)))
    assert early.status is None and early.delete_jobs == ()
    assert early.requeue_after == pytest.approx(0.5)
    plan = run(task, observe(created_long_ago.running(at(100), seen=at(100)).obj(), now=at(110)))
    assert plan.status.phase is TaskPhase.RETRYING
    attempt = plan.status.attempts[-1]
    assert attempt.outcome is AttemptOutcome.RETRYABLE and attempt.reason == reasons.TIMEOUT
    assert attempt.duration_ms == 10_000
    assert plan.delete_jobs == ("t-a1",)


def test_pool_timeout_applies_when_the_task_sets_none() -> None:
    task = started(make_task().obj())
    effective = settings(task, {"timeout": "30s"})
    plan = run(task, observe(attempt_job("t", 1).running(T0, seen=T0).obj(), now=at(30)), effective)
    assert plan.status.attempts[-1].reason == reasons.TIMEOUT


def test_the_tasks_timeout_wins_over_the_pools() -> None:
    task = started(make_task().timeout("1m").obj())
    effective = settings(task, {"timeout": "5s"})
    assert effective.timeout == timedelta(minutes=1)
    assert run(task, observe(attempt_job("t", 1).running(T0).obj(), now=at(30)), effective).status is None


def test_pending_longer_than_the_start_timeout_is_start_timeout() -> None:
    task = started(make_task().timeout("10s").obj())
    pending = attempt_job("t", 1).created(T0).pending().obj()
    limit = settings(task).start_timeout.total_seconds()
    early = run(task, observe(pending, now=at(limit - 1)))
    assert early.status is None and early.requeue_after == pytest.approx(1)
    plan = run(task, observe(pending, now=at(limit)))
    assert plan.status.attempts[-1].reason == reasons.START_TIMEOUT
    assert plan.status.attempts[-1].outcome is AttemptOutcome.RETRYABLE
    assert plan.delete_jobs == ("t-a1",)



PULL = 'Back-off pulling image "localhost/x:1": ErrImagePull: failed to pull and unpack image'


def test_a_pod_that_cannot_start_says_why_in_one_write() -> None:
    task = started(make_task().obj())
    stuck = attempt_job("t", 1).created(T0).waiting("ImagePullBackOff", PULL).obj()
    plan = run(task, observe(stuck, now=at(2)))
    running = next(c for c in plan.status.conditions if c.type == "Running")
    assert plan.status.phase is TaskPhase.RUNNING and running.status == "True"
    assert running.reason == reasons.POD_CANNOT_START
    assert "ImagePullBackOff" in plan.status.message and "localhost/x:1" in plan.status.message
    told = task.model_copy(update={"status": plan.status})
    # Said once: the kubelet's next ErrImagePull (it alternates the two) writes nothing.
    again = attempt_job("t", 1).created(T0).waiting("ErrImagePull", "failed to pull").obj()
    assert run(told, observe(again, now=at(12))).status is None
    # The pod heals (the image was loaded): the condition goes back to running, once.
    healed = run(told, observe(attempt_job("t", 1).created(T0).running(at(20), seen=at(20)).obj(), now=at(21)))
    assert _running_reason(healed.status) == reasons.ATTEMPT_RUNNING


def test_a_different_reason_is_told_again() -> None:
    task = started(make_task().obj())
    first = run(task, observe(attempt_job("t", 1).created(T0).waiting("ImagePullBackOff", PULL).obj(), now=at(2)))
    told = task.model_copy(update={"status": first.status})
    other = attempt_job("t", 1).created(T0).waiting("CreateContainerConfigError", 'secret "s" not found').obj()
    plan = run(told, observe(other, now=at(3)))
    assert 'CreateContainerConfigError: secret "s" not found' in plan.status.message


def test_the_start_timeout_names_why_the_pod_did_not_start() -> None:
    task = started(make_task().obj())
    limit = settings(task).start_timeout.total_seconds()
    stuck = attempt_job("t", 1).created(T0).waiting("ImagePullBackOff", PULL).obj()
    attempt = run(task, observe(stuck, now=at(limit))).status.attempts[-1]
    assert attempt.reason == reasons.START_TIMEOUT
    assert attempt.message.endswith(f"ImagePullBackOff: {PULL}")


def test_an_invalid_image_name_ends_the_attempt_at_once() -> None:
    task = started(make_task().obj())
    invalid = attempt_job("t", 1).created(T0).waiting("InvalidImageName", 'couldn\'t parse image name "UPPER:x"').obj()
    plan = run(task, observe(invalid, now=at(1)))
    attempt = plan.status.attempts[-1]
    assert (attempt.outcome, attempt.reason) == (AttemptOutcome.PERMANENT, reasons.INVALID_IMAGE_NAME)
    assert plan.status.phase is TaskPhase.FAILED and "UPPER:x" in plan.status.message
    assert plan.delete_jobs == ("t-a1",)


def _running_reason(status) -> str:
    return next(c.reason for c in status.conditions if c.type == "Running")

def test_job_rejected_by_the_api_server_fails_the_task() -> None:
    task = started(make_task().retries(5).obj())
    plan = run(task, observe(now=at(1), admit=True, job_rejected='spec.template.spec.volumes[0]: Invalid value'))
    assert plan.status.phase is TaskPhase.FAILED and plan.create_job is None
    attempt = plan.status.attempts[-1]
    assert attempt.outcome is AttemptOutcome.PERMANENT and attempt.reason == reasons.JOB_REJECTED
    assert "volumes[0]" in plan.status.message


def test_the_open_attempts_job_deleted_by_someone_is_retryable() -> None:
    task = started(make_task().no_jitter().obj())
    plan = run(task, observe(attempt_job("t", 1).running(T0).with_(gone=True), now=at(3)))
    assert plan.status.phase is TaskPhase.RETRYING
    assert plan.status.attempts[-1].reason == reasons.JOB_DELETED


def test_an_attempt_whose_node_is_gone_ends_node_lost_and_its_failed_job_is_kept() -> None:
    """The pod GC fails the pods of a deleted node (their container still says running) before
    the Job controller fails the Job: the attempt ends, and its Job, running nothing, is kept
    for jobRetention like any ended attempt's, not deleted as if it still ran."""
    task = started(make_task().no_jitter().retry(initialBackoff="0s").obj())
    lost = attempt_job("t", 1).running(T0, seen=T0).with_(pod_phase="Failed", disruption="DeletionByPodGC")
    plan = run(task, observe(lost, now=at(50), admit=True))
    assert plan.status.attempts[0].reason == reasons.NODE_LOST and plan.delete_jobs == ()

    retried = step(task, plan)
    again = run(retried, observe(lost, attempt_job("t", 2).running(at(51), seen=at(51)).obj(), now=at(52)))
    assert again.delete_jobs == ()


# --- cancellation -----------------------------------------------------------------------------------

def _cancel(task: Task) -> Task:
    return task.model_copy(update={"spec": task.spec.model_copy(update={"cancel": True})})


def test_cancel_a_new_task() -> None:
    plan = run(make_task().cancelled().obj(), observe(now=at(1), admit=True))
    assert plan.status.phase is TaskPhase.CANCELLED and plan.create_job is None
    assert plan.status.attempt == 0 and plan.status.finished_at == at(1)
    assert condition(plan.status, "Finished").reason == reasons.CANCELLED


def test_cancel_a_queued_task() -> None:
    task = make_task().obj()
    queued = step(task, run(task, observe(now=T0)))
    plan = run(_cancel(queued), observe(now=at(1), admit=True))
    assert plan.status.phase is TaskPhase.CANCELLED and plan.create_job is None


def test_cancel_a_blocked_task() -> None:
    task = make_task().cancelled().status({"phase": "Blocked"}).obj()
    plan = run(task, observe(now=at(1), admit=True))
    assert plan.status.phase is TaskPhase.CANCELLED and plan.create_job is None


def test_cancel_a_retrying_task() -> None:
    task = started(make_task().obj())
    retrying = step(task, run(task, observe(attempt_job("t", 1).exited(1), now=at(1))))
    assert retrying.status.phase is TaskPhase.RETRYING
    plan = run(_cancel(retrying), observe(attempt_job("t", 1).exited(1), now=at(2), admit=True))
    assert plan.status.phase is TaskPhase.CANCELLED and plan.create_job is None
    assert plan.delete_jobs == () and plan.status.attempt == 1


def test_cancel_a_running_task_aborts_its_job() -> None:
    task = started(make_task().obj())
    plan = run(_cancel(task), observe(attempt_job("t", 1).running(T0).obj(), now=at(4)))
    assert plan.status.phase is TaskPhase.CANCELLED
    assert plan.delete_jobs == ("t-a1",) and plan.create_job is None
    attempt = plan.status.attempts[-1]
    assert attempt.outcome is AttemptOutcome.CANCELLED and attempt.reason == reasons.CANCELLED
    assert plan.ended == (attempt,)


def test_cancel_before_the_recorded_job_was_created_does_not_create_it() -> None:
    task = started(make_task().obj())
    plan = run(_cancel(task), observe(now=at(1)))
    assert plan.status.phase is TaskPhase.CANCELLED and plan.create_job is None


def test_a_late_report_of_the_cancelled_attempt_is_stale() -> None:
    task = started(make_task().obj())
    cancelled = step(task, run(_cancel(task), observe(attempt_job("t", 1).running(T0).obj(), now=at(4))))
    late = attempt_job("t", 1).exited(0, "done anyway")
    plan = run(cancelled, observe(late, now=at(5)))
    assert plan.status is None and plan.stale_jobs == (late.uid,)
    assert [e.reason for e in plan.events] == [reasons.STALE_COMPLETION]


# --- terminal phases are final --------------------------------------------------------------------

def _terminal_tasks() -> dict[str, Task]:
    base = make_task().retries(1).retry(permanentExitCodes=[9])
    running = started(base.obj())
    out = {}
    for label, job in {"succeeded": attempt_job("t", 1).exited(0, "x"),
                       "failed": attempt_job("t", 1).exited(9),
                       "dead-lettered": attempt_job("t", 1).exited(1)}.items():
        out[label] = step(running, run(running, observe(job, now=at(1))))
    out["cancelled"] = step(running, run(_cancel(running), observe(now=at(1))))
    out["skipped"] = make_task().status({"phase": "Skipped"}).obj()
    return out


@pytest.mark.parametrize("label", ["succeeded", "failed", "dead-lettered", "cancelled", "skipped"])
def test_terminal_phases_are_final(label: str) -> None:
    task = _terminal_tasks()[label]
    assert task.status.phase.terminal
    cases = [
        observe(now=at(100), admit=True),
        observe(attempt_job("t", 1).exited(1), now=at(100), admit=True, epoch=9),
        observe(attempt_job("t", 1).with_(gone=True), now=at(100), admit=True),
        observe(now=at(100), job_rejected="nope"),
    ]
    for seen in cases:
        for candidate in (task, _cancel(task)):
            plan = run(candidate, seen)
            assert plan.status is None and plan.create_job is None and not plan.wants_slot


# --- leader epochs ------------------------------------------------------------------------------------

def test_a_status_written_by_a_newer_leader_deposes_this_one() -> None:
    task = started(make_task().obj(), epoch=5)
    for seen in [observe(now=at(1), epoch=4, admit=True),
                 observe(attempt_job("t", 1).exited(0), now=at(1), epoch=4),
                 observe(attempt_job("t", 2).running(T0).obj(), now=at(1), epoch=4)]:
        assert run(task, seen) == Plan()
        assert run(_cancel(task), seen) == Plan()


def test_a_newer_leader_stamps_its_epoch_on_what_it_writes() -> None:
    task = started(make_task().obj(), epoch=2)
    plan = run(task, observe(attempt_job("t", 1, epoch=2).exited(0), now=at(1), epoch=3))
    assert plan.status.epoch == 3


# --- jobs the status does not name ------------------------------------------------------------------------

def test_a_job_for_an_attempt_above_the_status_is_deleted_never_adopted() -> None:
    task = started(make_task().obj())
    foreign = attempt_job("t", 2).running(T0).obj()
    plan = run(task, observe(foreign, attempt_job("t", 1).running(T0).obj(), now=at(1)))
    assert plan.delete_jobs == ("t-a2",) and plan.status is None and plan.create_job is None
    assert [e.reason for e in plan.events] == [reasons.FOREIGN_JOB] and plan.events[0].warning

    # Its success is not the task's: attempt 1 is still the one that decides.
    done = attempt_job("t", 2).exited(0, "not mine")
    plan = run(task, observe(done, attempt_job("t", 1).running(T0).obj(), now=at(1)))
    assert plan.status is None and done.uid in plan.stale_jobs
    assert plan.delete_jobs == ("t-a2",)


def test_a_foreign_job_does_not_advance_a_queued_task() -> None:
    task = make_task().obj()
    queued = step(task, run(task, observe(now=T0)))
    plan = run(queued, observe(attempt_job("t", 3).exited(0, "x"), now=at(1)))
    assert plan.status is None and plan.delete_jobs == ("t-a3",)
    assert reasons.FOREIGN_JOB in [e.reason for e in plan.events]


@pytest.mark.parametrize("name", ["t-a1-copy", "impostor-a1", "T-a1"])
def test_a_job_whose_name_is_not_the_deterministic_one_is_not_adopted(name: str) -> None:
    task = started(make_task().obj())
    impostor = attempt_job("t", 1).named(name).running(T0).obj()
    plan = run(task, observe(impostor, now=at(1)))
    assert plan.delete_jobs == (name,)
    assert plan.create_job.number == 1  # the real Job of attempt 1 is still missing
    assert plan.status is None
    assert reasons.FOREIGN_JOB in [e.reason for e in plan.events]


def test_a_foreign_job_that_is_already_going_is_not_deleted_twice() -> None:
    task = started(make_task().obj())
    plan = run(task, observe(attempt_job("t", 2).with_(deleting=True), attempt_job("t", 1).running(T0).obj(),
                             now=at(1)))
    assert plan.delete_jobs == ()


# --- stale reports --------------------------------------------------------------------------------------

def _timed_out() -> tuple[Task, AttemptJob]:
    task = started(make_task().no_jitter().retry(initialBackoff="30s").timeout("10s").obj())
    job = attempt_job("t", 1).running(T0, seen=T0).obj()
    plan = run(task, observe(job, now=at(10)))
    assert plan.status.attempts[-1].reason == reasons.TIMEOUT
    return step(task, plan), job


def test_a_late_completion_of_a_timed_out_attempt_is_stale_and_changes_nothing() -> None:
    task, _ = _timed_out()
    late = attempt_job("t", 1).exited(0, "finished after all", started=T0, finished=at(12))
    plan = run(task, observe(late, now=at(12), admit=True))
    assert plan.status is None and plan.create_job is None
    assert plan.stale_jobs == (late.uid,)
    assert [e.reason for e in plan.events] == [reasons.STALE_COMPLETION]
    assert task.status.phase is TaskPhase.RETRYING and task.status.output is None


def test_a_late_completion_of_a_timed_out_attempt_while_the_next_runs_is_stale() -> None:
    task, _ = _timed_out()
    task = step(task, run(task, observe(now=at(40), admit=True)))
    assert task.status.attempt == 2
    late = attempt_job("t", 1).exited(0, "late")
    plan = run(task, observe(late, attempt_job("t", 2).running(at(41)).obj(), now=at(45)))
    assert plan.status is None and plan.stale_jobs == (late.uid,)


def test_a_timed_out_job_that_is_still_running_is_deleted_again() -> None:
    task, job = _timed_out()
    plan = run(task, observe(job, now=at(11)))
    assert plan.delete_jobs == ("t-a1",) and plan.status is None and plan.stale_jobs == ()


def test_the_report_that_closed_an_attempt_is_not_stale() -> None:
    task = started(make_task().no_jitter().obj())
    failed = attempt_job("t", 1).exited(1, "boom")
    task = step(task, run(task, observe(failed, now=at(1))))
    task = step(task, run(task, observe(failed, now=at(10), admit=True)))
    plan = run(task, observe(failed, attempt_job("t", 2).running(at(10)).obj(), now=at(11)))
    assert plan == Plan()


def test_old_attempts_pruned_from_the_history_are_not_reported_stale() -> None:
    """After more than HISTORY attempts the oldest records are dropped from the status. The
    Jobs of those attempts still exist (owned by the Task) with the very reports that closed
    them: they are not late reports, and must not be flagged stale on every reconcile."""
    task = make_task().retries(30).retry(initialBackoff="0s", maxBackoff="0s").obj()
    jobs = []
    task = started(task)
    for n in range(1, HISTORY + 2):
        jobs.append(attempt_job("t", n).exited(1, f"fail {n}"))
        task = step(task, run(task, observe(*jobs, now=at(n), admit=True)))
        assert task.status.attempt == n + 1
    assert task.status.attempts[0].number > 1  # attempt 1 was pruned
    plan = run(task, observe(*jobs, attempt_job("t", task.status.attempt).running(at(50)).obj(), now=at(50)))
    assert plan.stale_jobs == () and plan.events == ()
    assert plan == Plan()


# --- history and bounds -----------------------------------------------------------------------------------

def test_history_keeps_the_newest_attempts_within_the_bound() -> None:
    task = started(make_task().retries(30).retry(initialBackoff="0s", maxBackoff="0s").obj())
    for n in range(1, 26):
        task = step(task, run(task, observe(attempt_job("t", n).exited(1), now=at(n), admit=True)))
    assert task.status.attempt == 26
    numbers = [a.number for a in task.status.attempts]
    assert len(numbers) == HISTORY and numbers == list(range(26 - HISTORY + 1, 27))


def test_huge_messages_fit_the_status_bounds() -> None:
    task = started(make_task().no_jitter().obj())
    plan = run(task, observe(attempt_job("t", 1).exited(1, "€" * 10_000), now=at(1)))
    status = plan.status
    assert len(status.message.encode()) <= 4096
    assert len(status.attempts[-1].message.encode()) <= 1024
    assert len(status.summary) <= 100
    TaskStatus.model_validate(status.to_dict())  # still within the CRD's bounds


def test_a_huge_output_fits_the_status() -> None:
    task = started(make_task().obj())
    plan = run(task, observe(attempt_job("t", 1).exited(0, "😀" * 5000), now=at(1)))
    assert len(plan.status.output.encode()) <= 4096 and plan.status.output_available
    TaskStatus.model_validate(plan.status.to_dict())


def test_job_names_of_long_task_names_are_deterministic_in_the_record() -> None:
    name = "n" * 63
    task = started(make_task(name).obj())
    assert records(task)[-1].job == job_name(name, 1) and len(records(task)[-1].job) <= 63
    # Its Job, under that name, is adopted.
    job = attempt_job(name, 1).exited(0, "ok")
    assert run(task, observe(job, now=at(1))).status.phase is TaskPhase.SUCCEEDED


# --- level-based ---------------------------------------------------------------------------------------

def test_the_same_observation_gives_the_same_plan() -> None:
    task = started(make_task().obj())
    seen = observe(attempt_job("t", 1).exited(1, "x"), now=at(3), admit=True)
    assert run(task, seen, seed=4) == run(task, seen, seed=4)


def test_writing_the_plan_and_reconciling_again_is_quiet() -> None:
    """After a status write, the same world needs no second write: the decision has converged."""
    task = started(make_task().no_jitter().obj())
    seen = observe(attempt_job("t", 1).exited(1, "x"), now=at(3))
    task = step(task, run(task, seen))
    assert run(task, seen).status is None


# --- is_ready -------------------------------------------------------------------------------------------

def test_is_ready() -> None:
    new = make_task().obj()
    assert is_ready(new, T0)
    assert not is_ready(make_task().cancelled().obj(), T0)
    queued = step(new, run(new, observe(now=T0)))
    assert is_ready(queued, T0)
    running = started(make_task().no_jitter().retry(initialBackoff="5s").obj())
    assert not is_ready(running, T0)
    retrying = step(running, run(running, observe(attempt_job("t", 1).exited(1), now=at(1))))
    assert not is_ready(retrying, at(5.9)) and is_ready(retrying, at(6))
    assert not is_ready(make_task().status({"phase": "Blocked"}).obj(), T0)
    for task in _terminal_tasks().values():
        assert not is_ready(task, at(1000))


def test_a_timeout_counts_from_a_start_that_cannot_be_early() -> None:
    """Issue 19: the kubelet's startedAt is whole seconds, rounded down. A container that really
    started at 100.9 is reported at 100; the operator saw it at 101.0. A 2s timeout must not end
    it before 102.9: it counts from min(reported + 1s, first sight) = 101.0."""
    task = started(make_task().no_jitter().timeout("2s").obj())
    job = attempt_job("t", 1).running(at(100), seen=at(101.0)).obj()
    assert job.run_started == at(101.0)
    assert run(task, observe(job, now=at(102.95))).status is None
    assert run(task, observe(job, now=at(103.0))).status.attempts[-1].reason == reasons.TIMEOUT
    # Never seen running (a restarted operator reading a listing): the reported second + 1.
    unseen = attempt_job("t", 1).running(at(100), seen=None).obj()
    assert unseen.run_started == at(101)
    assert run(task, observe(unseen, now=at(102.99))).status is None
    # Seen long after (the operator was down): still the reported second + 1, not the sighting.
    late = attempt_job("t", 1).running(at(100), seen=at(500)).obj()
    assert late.run_started == at(101)


def test_attempt_times_are_the_operators_sightings_within_the_kubelets_seconds() -> None:
    """Issue 19: a 500 ms run from 100.7 to 101.2, reported by the kubelet as whole seconds
    100 → 101 (1000 ms), is recorded from the operator's sightings, 100.75 → 101.25: 500 ms."""
    task = started(make_task().obj())
    job = attempt_job("t", 1).exited(0, "ok", started=at(100), finished=at(101))
    seen = replace(job, running_seen_at=at(100.75), ended_seen_at=at(101.25))
    attempt = run(task, observe(seen, now=at(102))).status.attempts[-1]
    assert attempt.started_at == at(100.75) and attempt.finished_at == at(101.25)
    assert attempt.duration_ms == 500
    # Sightings outside the reported second (late, after a restart) are not used.
    late = replace(job, running_seen_at=at(300), ended_seen_at=at(300))
    attempt = run(task, observe(late, now=at(302))).status.attempts[-1]
    assert (attempt.started_at, attempt.finished_at, attempt.duration_ms) == (at(100), at(101), 1000)


def test_an_attempt_never_ends_before_it_started() -> None:
    """A run of 100.15 → 100.6 (the kubelet: 100 → 100), its start seen in time and its end late
    (a busy operator): the end's second, 100, is before the start's sighting. It is recorded as
    ending when it started, never before (a negative run was written as 0 ms from an end earlier
    than its start)."""
    task = started(make_task().obj())
    job = attempt_job("t", 1).exited(0, "ok", started=at(100), finished=at(100))
    seen = replace(job, running_seen_at=at(100.15), ended_seen_at=at(101.1))
    attempt = run(task, observe(seen, now=at(102))).status.attempts[-1]
    assert attempt.started_at == at(100.15) and attempt.finished_at >= attempt.started_at
    assert attempt.duration_ms == 0


def test_an_attempt_never_starts_before_it_was_dispatched() -> None:
    """Seen late, the start is the kubelet's second, truncated: 100 for a container the operator
    dispatched at 100.5. Recorded as 100.5, so a dependent's start never precedes what it awaited."""
    task = started(make_task().obj(), now=at(100.5))
    job = attempt_job("t", 1).exited(0, "ok", started=at(100), finished=at(101))
    late = replace(job, running_seen_at=at(103), ended_seen_at=at(103))
    attempt = run(task, observe(late, now=at(104))).status.attempts[-1]
    assert (attempt.started_at, attempt.finished_at, attempt.duration_ms) == (at(100.5), at(101), 500)


# --- a task the models cannot read (issue 13) ------------------------------------------------------

def test_a_refusal_is_written_with_this_replicas_own_epoch() -> None:
    from cronoq.engine.attempts import refusal
    stored = TaskStatus.model_validate({"phase": "Queued", "epoch": 3})
    new = refusal(stored, "payload is 40000 bytes of JSON", 2, epoch=5, now=at(1))
    assert new.phase is TaskPhase.FAILED and new.epoch == 5 and new.observed_generation == 2
    assert new.message == "the task cannot run: payload is 40000 bytes of JSON"
    assert new.summary == new.message  # the same summary rule as every other status
    assert condition(new, "Finished").reason == reasons.INVALID_SPEC


def test_a_deposed_replica_writes_no_refusal_over_a_newer_leaders_status() -> None:
    """The old code stamped max(own epoch, stored epoch): a stale leader's write then passed the
    API server's 'epoch never decreases' rule."""
    from cronoq.engine.attempts import refusal
    stored = TaskStatus.model_validate({"phase": "Queued", "epoch": 9})
    assert refusal(stored, "bad", 1, epoch=5, now=at(1)) is None
    assert refusal(TaskStatus.model_validate({"phase": "Failed", "epoch": 1}), "bad", 1, epoch=5, now=at(1)) is None


def test_a_backoff_says_until_when() -> None:
    task = started(make_task().obj())
    plan = run(task, observe(attempt_job("t", 1).exited(1), now=at(5)), settings(task, {"retry": {"jitter": "none"}}))
    assert plan.status.phase is TaskPhase.RETRYING
    assert plan.status.message.endswith(f"after 1.0s (at {(at(5) + timedelta(seconds=1)).strftime('%H:%M:%SZ')})")
