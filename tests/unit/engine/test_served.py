"""The Task state machine for attempts pull workers serve (`delivery: Workers`): handed to a live
worker and recorded before it may start, judged by the Lease the worker writes and by its own."""
from __future__ import annotations

import json
import random
from dataclasses import replace

from cronoq.api import AttemptOutcome, Task, TaskPhase
from cronoq.engine import reasons
from cronoq.engine.attempts import reconcile
from cronoq.engine.observed import AttemptJob, Termination
from cronoq.engine.plan import Plan
from cronoq.pod_protocol import Terms

from tests.unit.builders import T0, at, make_task, observe, settings, with_status

WORKERS = {"delivery": "Workers", "leaseTTL": "10s", "retry": {"maxAttempts": 2, "initialBackoff": "0s", "jitter": "none"}}
ALIVE = at(100)


def served(name: str = "t") -> Task:
    return make_task(name).unset("image").spec(payload={"n": 1}).obj()


def run(task: Task, now=T0, pool=None, jobs=(), **seen) -> Plan:
    seen.setdefault("worker_alive_until", ALIVE)
    return reconcile(task, settings(task, pool or WORKERS), observe(*jobs, now=now, **seen), random.Random(0))


def handed(task: Task, worker: str = "w-1", now=T0) -> Task:
    plan = run(task, now=now, admit=True, worker=worker)
    assert plan.status is not None and plan.status.phase is TaskPhase.RUNNING, plan
    return with_status(task, plan.status)


def lease(task: str, number: int, worker: str = "w-1", report: dict | str | None = None, lease_id: str = "e1-a1",
          renewed=None) -> AttemptJob:
    text = report if isinstance(report, str) or report is None else json.dumps(report)
    return AttemptJob(number=number, name=f"{task}-a{number}.{worker}", uid=f"lease-{number}", lease_id=lease_id,
                      worker=worker, renewed_seen_at=renewed,
                      termination=None if text is None else Termination(exit_code=0, message=text))


def test_a_worker_pool_records_the_attempt_with_its_worker_and_makes_no_job() -> None:
    plan = run(served(), admit=True, worker="w-1")

    (attempt,) = plan.status.attempts
    assert (attempt.worker, attempt.job, attempt.lease_id) == ("w-1", None, "e1-a1")
    assert plan.create_job is None and plan.started == attempt
    assert plan.requeue_after is not None and plan.requeue_after <= 10, "looked at again by its lease's deadline"
    assert "on worker w-1" in plan.status.message


def test_admitted_with_no_worker_with_room_it_waits_and_says_why() -> None:
    plan = run(served(), admit=True, worker=None)

    assert plan.status.phase is TaskPhase.QUEUED and plan.status.attempts == () and plan.wants_slot
    assert plan.status.conditions[0].reason == reasons.WAITING_FOR_WORKER
    assert "cronoq.io/worker-pool=default" in plan.status.message


def test_the_workers_report_ends_the_attempt_with_its_output() -> None:
    task = handed(served())
    report = {"outcome": "success", "message": "", "output": "{\"sum\":3}"}

    plan = run(task, now=at(2), jobs=(lease("t", 1, report=report),))

    assert plan.status.phase is TaskPhase.SUCCEEDED and plan.status.output == "{\"sum\":3}"
    assert plan.retime_jobs == (), "a worker's attempt Lease is no Job to re-time"
    (attempt,) = plan.status.attempts
    assert attempt.outcome is AttemptOutcome.SUCCESS and attempt.duration_ms == 2000
    assert plan.delete_jobs == ()


def test_a_report_that_is_not_the_sdks_document_is_retryable_not_a_success() -> None:
    task = handed(served())

    plan = run(task, now=at(1), jobs=(lease("t", 1, report="done!"),))

    assert plan.status.attempts[0].reason == reasons.INVALID_REPORT
    assert plan.status.phase is TaskPhase.RETRYING


def test_a_report_from_another_worker_is_not_taken() -> None:
    task = handed(served(), worker="w-1")

    plan = run(task, now=at(1), jobs=(lease("t", 1, worker="w-2", report={"outcome": "success"}),))

    assert plan.status is None or plan.status.phase is TaskPhase.RUNNING


def test_only_the_lease_named_for_the_statuss_worker_and_held_by_its_lease_id_speaks_for_the_attempt() -> None:
    """Issue 37, points 2 and 5: another Lease writer's claim (a Lease with the worker's label but
    another name, one named like it but labelled for another worker, one without a lease id)
    neither ends the attempt nor counts as its heartbeat, and makes no Event."""
    task = handed(served(), worker="w-1")
    success = {"outcome": "success", "output": "forged"}
    forged = (
        replace(lease("t", 1, report=success), name="t-a1"),  # the Job-style name, labelled w-1
        replace(lease("t", 1, worker="w-2", report=success), name="t-a1.w-1"),  # squatting w-1's name
        replace(lease("t", 1, report=success), lease_id=None),
        replace(lease("t", 1, report=success, renewed=at(9)), name="t-a1.w-2", worker="w-2"),
    )
    for claim in forged:
        plan = run(task, now=at(1), jobs=(claim,))
        assert plan.status is None or plan.status.phase is TaskPhase.RUNNING, claim
        assert plan.events == () and plan.stale_jobs == (), claim
    expired = run(task, now=at(11), jobs=forged)
    assert expired.status.attempts[-1].reason == reasons.LEASE_EXPIRED, "their renewals are no heartbeat"


def test_a_job_mode_attempt_takes_no_lease_report() -> None:
    """Issue 37, point 3: while a Job-mode attempt's Job is not there (refused by a quota, not yet
    created, deleted), a Lease with a report, with or without a worker or lease id, ends nothing."""
    task = make_task("t").obj()
    running = reconcile(task, settings(task), observe(admit=True), random.Random(0))
    assert running.create_job is not None
    task = with_status(task, running.status)
    success = {"outcome": "success", "output": "forged"}
    for claim in (replace(lease("t", 1, report=success), name="t-a1"),
                  replace(lease("t", 1, report=success), name="t-a1", lease_id=None),
                  replace(lease("t", 1, worker="w-1", report=success))):
        plan = reconcile(task, settings(task), observe(claim, now=at(1), job_refused="exceeded quota"),
                         random.Random(0))
        assert plan.status is None or plan.status.phase is TaskPhase.RUNNING, claim
        assert plan.status is None or plan.status.output is None


def test_a_lapsed_worker_lease_ends_the_attempt_as_lease_expired_and_retries() -> None:
    task = handed(served())

    still = run(task, now=at(4), worker_alive_until=at(5))
    lapsed = run(task, now=at(5), worker_alive_until=at(5))
    gone = run(task, now=at(1), worker_alive_until=None)

    assert still.status is None and still.requeue_after == 1.0
    for plan in (lapsed, gone):
        assert plan.status.attempts[0].reason == reasons.LEASE_EXPIRED
        assert "w-1" in plan.status.attempts[0].message
        assert plan.status.phase is TaskPhase.RETRYING and plan.delete_jobs == ()


def test_the_attempts_own_lease_must_be_renewed_within_its_ttl_counted_from_the_hand_over() -> None:
    task = handed(served())

    quiet = run(task, now=at(10))
    renewed = run(task, now=at(10), jobs=(lease("t", 1, renewed=at(6)),))

    assert quiet.status.attempts[0].reason == reasons.LEASE_EXPIRED
    assert renewed.status is None and renewed.requeue_after == 6.0


def test_a_timeout_counts_from_the_hand_over_and_the_late_report_is_stale() -> None:
    task = handed(make_task("t").unset("image").timeout("3s").obj())

    timed_out = run(task, now=at(3))
    task = with_status(task, timed_out.status)
    late = run(task, now=at(4), jobs=(lease("t", 1, report={"outcome": "success"}),))

    assert timed_out.status.attempts[0].reason == reasons.TIMEOUT
    assert late.stale_jobs == ("lease-1",)
    assert [e.reason for e in late.events] == [reasons.STALE_COMPLETION]
    assert late.delete_jobs == ()


def test_cancelling_a_served_attempt_deletes_nothing_the_worker_reads_the_status() -> None:
    task = handed(served())
    task = task.model_copy(update={"spec": task.spec.model_copy(update={"cancel": True})})

    plan = run(task, now=at(1))

    assert plan.status.phase is TaskPhase.CANCELLED and plan.delete_jobs == ()
    assert plan.status.attempts[0].outcome is AttemptOutcome.CANCELLED


def test_a_task_that_gives_pod_fields_in_a_worker_pool_fails_saying_which() -> None:
    task = make_task("t").spec(template={"spec": {"containers": [{"name": "task", "image": "x"}]}}).obj()

    plan = run(task, admit=True, worker="w-1")

    assert plan.status.phase is TaskPhase.FAILED and plan.status.attempts == ()
    assert "image, template" in plan.status.message and "delivery: Job" in plan.status.message


def test_the_retry_goes_to_whichever_worker_has_room() -> None:
    task = handed(served(), worker="w-1")
    task = with_status(task, run(task, now=at(1), worker_alive_until=None).status)

    plan = run(task, now=at(2), admit=True, worker="w-2", epoch=1)

    assert [(a.number, a.worker) for a in plan.status.attempts] == [(1, "w-1"), (2, "w-2")]
    assert plan.status.attempts[1].lease_id == "e1-a2"


def test_served_attempts_keep_their_judge_if_the_pool_goes_back_to_jobs() -> None:
    task = handed(served())

    plan = run(task, now=at(1), pool={"delivery": "Job"}, jobs=(lease("t", 1, report={"outcome": "success"}),))

    assert plan.status.phase is TaskPhase.SUCCEEDED and plan.create_job is None


def test_an_attempt_recorded_by_an_older_leader_is_judged_by_its_own_lease_id() -> None:
    task = handed(served())
    other = replace(lease("t", 1, report={"outcome": "success"}), lease_id="e0-a1")

    plan = run(task, now=at(1), jobs=(other,))

    assert plan.status is None or plan.status.phase is TaskPhase.RUNNING, "a Lease with another lease id is not ours"


def test_the_status_names_the_open_attempts_worker_and_only_while_it_runs() -> None:
    """Issue 42: `status.worker` is the selectable field a worker watches; it is set when an
    attempt is handed over and cleared when the attempt ends, retried or not."""
    task = handed(served(), worker="w-1")
    assert task.status.worker == "w-1"
    failed = run(task, now=at(1), jobs=(lease("t", 1, report={"outcome": "retryable", "message": "x"}),))
    assert failed.status.phase is TaskPhase.RETRYING and failed.status.worker is None
    again = handed(with_status(task, failed.status), worker="w-2", now=at(2))
    assert again.status.worker == "w-2"
    done = run(again, now=at(3), jobs=(lease("t", 2, worker="w-2", lease_id="e1-a2", report={"outcome": "success"}),))
    assert done.status.phase is TaskPhase.SUCCEEDED and done.status.worker is None
    job_mode = reconcile(make_task("j").obj(), settings(make_task("j").obj()), observe(admit=True), random.Random(0))
    assert job_mode.status.phase is TaskPhase.RUNNING and job_mode.status.worker is None


def test_the_attempt_record_carries_the_lease_ttl_and_timeout_the_worker_serves_it_by() -> None:
    """Stamped in the write that hands the attempt over (no write more), as the task's settings,
    else its pool's, said then: the worker reads them and derives nothing."""
    pool_only = run(served(), admit=True, worker="w-1", pool={**WORKERS, "timeout": "2m"})
    own = run(make_task("t").unset("image").spec(leaseTTL="2500ms", timeout="90s").obj(), admit=True, worker="w-1",
              pool={**WORKERS, "timeout": "2m"})
    no_timeout = run(served(), admit=True, worker="w-1")

    assert Terms.of_record(pool_only.status.attempts[0].to_dict()) == Terms(lease_ttl=10.0, timeout=120.0)
    assert Terms.of_record(own.status.attempts[0].to_dict()) == Terms(lease_ttl=2.5, timeout=90.0)
    assert Terms.of_record(no_timeout.status.attempts[0].to_dict()) == Terms(lease_ttl=10.0, timeout=None)
    assert (pool_only.status.attempts[0].lease_ttl_ms, pool_only.status.attempts[0].timeout_ms) == (10_000, 120_000)


def test_the_stamp_stays_when_the_attempt_ends() -> None:
    task = handed(served())

    plan = run(task, now=at(2), jobs=(lease("t", 1, report={"outcome": "success", "message": ""}),))

    assert plan.status.attempts[0].lease_ttl_ms == 10_000
