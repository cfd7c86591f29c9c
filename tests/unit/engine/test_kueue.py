"""A pool that hands admission to Kueue (`admission.kueue`), without a cluster: the Job an attempt
gets, its start timeout and startDeadline while Kueue holds it, and an eviction or preemption as
the attempt's own cause that by default uses up no attempt (docs/how-to/kueue.md)."""
from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from cronoq.api import Task, TaskPhase, TaskPoolSpec
from cronoq.engine import reasons
from cronoq.engine.attempts import reconcile
from cronoq.engine.jobs import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL, MULTIKUEUE, build_job
from cronoq.engine.observed import AttemptJob
from cronoq.engine.plan import Effective, Plan
from cronoq.kube.observe import job_facts, kueue_stop

from tests.unit.builders import T0, at, attempt_job, make_task, observe, settings, with_status

KUEUE_POOL = {"admission": {"kueue": {"localQueue": "gpu", "priorityClasses": [
    {"minPriority": 0, "workloadPriorityClass": "normal"}, {"minPriority": 100, "workloadPriorityClass": "urgent"}]}}}


def pool(**more) -> TaskPoolSpec:
    return TaskPoolSpec.model_validate({**KUEUE_POOL, **more})


def run(task: Task, seen, effective: Effective) -> Plan:
    return reconcile(task, effective, seen, random.Random(0))


def started(task: Task, effective: Effective) -> Task:
    plan = run(task, observe(now=T0, admit=True, pool_found=True), effective)
    assert plan.create_job is not None
    return with_status(task, plan.status)


# --- the Job ------------------------------------------------------------------------------------

def test_the_job_is_created_suspended_in_the_pools_local_queue_with_its_priority_class() -> None:
    job = build_job(make_task("a").priority(150).obj(), pool(), 1, "e1-a1")
    assert job["spec"]["suspend"] is True and job["spec"]["backoffLimit"] == 0
    labels = job["metadata"]["labels"]
    assert labels[KUEUE_QUEUE_LABEL] == "gpu" and labels[KUEUE_PRIORITY_LABEL] == "urgent"
    assert labels["cronoq.io/attempt"] == "1"  # cronoq's own labels are kept


def test_a_task_below_every_min_priority_gets_no_class_and_a_pool_without_kueue_no_suspend() -> None:
    low = build_job(make_task("a").priority(-5).obj(), pool(), 1, "e1-a1")
    assert KUEUE_PRIORITY_LABEL not in low["metadata"]["labels"]
    plain = build_job(make_task("a").obj(), TaskPoolSpec(), 1, "e1-a1")
    assert "suspend" not in plain["spec"] and KUEUE_QUEUE_LABEL not in plain["metadata"]["labels"]


def test_kueue_admission_is_refused_for_a_workers_pool() -> None:
    with pytest.raises(ValidationError, match="Kueue admits Jobs"):
        pool(delivery="Workers")


def test_job_facts_read_suspension_and_the_admission_time() -> None:
    raw = {"metadata": {"name": "a-a1", "labels": {"cronoq.io/attempt": "1"}},
           "spec": {"suspend": True}, "status": {}}
    assert job_facts(raw).suspended and job_facts(raw).resumed_at is None
    raw = {**raw, "spec": {"suspend": False}, "status": {"startTime": "2026-12-03T12:00:05Z"}}
    facts = job_facts(raw)
    assert not facts.suspended and facts.resumed_at == at(5)


# --- waiting for Kueue --------------------------------------------------------------------------

def test_no_start_timeout_while_kueue_holds_the_job_then_from_its_admission() -> None:
    task = make_task("a").obj()
    effective = settings(task, pool(startTimeout="1m"))
    task = started(task, effective)
    held = attempt_job("a", 1).with_(suspended=True)
    plan = run(task, observe(held, now=at(3600), pool_found=True), effective)
    assert plan.status is None and not plan.ended and plan.requeue_after is None  # an hour held: nothing
    admitted = attempt_job("a", 1).with_(resumed_at=at(3600), pod_phase="Pending")
    plan = run(task, observe(admitted, now=at(3630), pool_found=True), effective)
    assert not plan.ended and plan.requeue_after == pytest.approx(30)
    plan = run(task, observe(admitted, now=at(3661), pool_found=True), effective)
    (ended,) = plan.ended
    assert ended.reason == reasons.START_TIMEOUT


def test_the_timeout_counts_from_the_container_start_not_from_the_wait() -> None:
    task = make_task("a").timeout("10s").obj()
    effective = settings(task, pool())
    task = started(task, effective)
    job = attempt_job("a", 1).running(at(500), seen=at(500)).with_(resumed_at=at(499))
    plan = run(task, observe(job, now=at(505), pool_found=True), effective)
    assert not plan.ended
    plan = run(task, observe(job, now=at(512), pool_found=True), effective)
    assert plan.ended[0].reason == reasons.TIMEOUT


def test_the_start_deadline_counts_the_time_waiting_for_kueue() -> None:
    task = make_task("a").spec(startDeadline="5m").obj()
    effective = settings(task, pool())
    task = started(task, effective)
    held = attempt_job("a", 1).with_(suspended=True)
    early = run(task, observe(held, now=at(60), pool_found=True), effective)
    assert early.status is None and early.requeue_after == pytest.approx(240)
    plan = run(task, observe(held, now=at(301), pool_found=True), effective)
    assert plan.status.phase is TaskPhase.FAILED
    assert any(c.reason == reasons.START_DEADLINE_EXCEEDED for c in plan.status.conditions)
    assert "waiting for Kueue" in plan.status.message
    assert plan.delete_jobs == ("a-a1",)


def test_once_admitted_the_start_deadline_no_longer_applies() -> None:
    task = make_task("a").spec(startDeadline="5m").obj()
    effective = settings(task, pool(leaseTTL="0s"))
    task = started(task, effective)
    job = attempt_job("a", 1).running(at(200), seen=at(200)).obj()
    plan = run(task, observe(job, now=at(400), pool_found=True), effective)
    assert not plan.ended and (plan.status is None or plan.status.phase is TaskPhase.RUNNING)


def test_cancel_while_kueue_holds_the_job_deletes_it() -> None:
    task = make_task("a").obj()
    effective = settings(task, pool())
    task = started(task, effective)
    cancelled = task.model_copy(update={"spec": task.spec.model_copy(update={"cancel": True})})
    plan = run(cancelled, observe(attempt_job("a", 1).with_(suspended=True), now=at(10), pool_found=True), effective)
    assert plan.status.phase is TaskPhase.CANCELLED and plan.delete_jobs == ("a-a1",)


# --- eviction and preemption --------------------------------------------------------------------

def stopped(reason: str | None, message: str = "") -> AttemptJob:
    """Attempt 1's Job as Kueue leaves it after an eviction: suspended again, and failed by the Job
    controller for the pod the suspension deleted; `reason` (None: not read yet) from its Workload."""
    return attempt_job("a", 1).running(at(10), seen=at(10)).with_(
        suspended=True, finished="Failed", failure_reason="BackoffLimitExceeded",
        kueue_stop=(reason, message) if reason else None)


def test_a_job_kueue_stopped_is_judged_only_once_its_workload_is_read() -> None:
    task = make_task("a").obj()
    effective = settings(task, pool())
    task = started(task, effective)
    plan = run(task, observe(stopped(None), now=at(20), pool_found=True), effective)
    assert plan.read_workload == "a-a1" and plan.status is None and not plan.ended


def test_a_preemption_ends_the_attempt_preempted_and_uses_up_no_attempt() -> None:
    task = make_task("a").retries(1).no_jitter().obj()
    effective = settings(task, pool())
    task = started(task, effective)
    plan = run(task, observe(stopped("Preempted", "Preempted to accommodate a workload (UID: x)"),
                             now=at(20), pool_found=True), effective)
    (ended,) = plan.ended
    assert ended.reason == reasons.PREEMPTED and "Kueue preempted" in ended.message and ended.ignored
    assert plan.delete_jobs == ("a-a1",)  # deleted: Kueue, admitting it again, cannot run it twice
    assert plan.status.phase is TaskPhase.RETRYING and plan.status.ignored_attempts == 1
    # maxAttempts 1, yet attempt 2 comes, under a new number and a new Job.
    task = with_status(task, plan.status)
    later = run(task, observe(stopped("Preempted"), now=at(30), admit=True, pool_found=True), effective)
    assert later.create_job is not None and later.create_job.number == 2
    assert later.status.attempts[-1].job == "a-a2"


def test_another_eviction_is_evicted_by_kueue_with_kueues_reason() -> None:
    task = make_task("a").obj()
    effective = settings(task, pool())
    task = started(task, effective)
    plan = run(task, observe(stopped("PodsReadyTimeout", "Exceeded the PodsReady timeout"), now=at(20),
                             pool_found=True), effective)
    (ended,) = plan.ended
    assert ended.reason == reasons.EVICTED_BY_KUEUE and "PodsReadyTimeout" in ended.message


def test_a_retry_rule_naming_preempted_decides_instead_of_the_default() -> None:
    task = make_task("a").retry(maxAttempts=3, rules=[{"reasons": ["Preempted"], "action": "Fail"}]).obj()
    effective = settings(task, pool())
    task = started(task, effective)
    plan = run(task, observe(stopped("Preempted", "by urgent"), now=at(20), pool_found=True), effective)
    assert plan.status.phase is TaskPhase.FAILED and plan.ended[0].reason == reasons.PREEMPTED


def test_evictions_that_use_up_no_attempt_are_bounded_by_max_ignored_attempts() -> None:
    task = make_task("a").retry(maxAttempts=2, maxIgnoredAttempts=0).obj()
    effective = settings(task, pool())
    task = started(task, effective)
    plan = run(task, observe(stopped("Preempted"), now=at(20), pool_found=True), effective)
    assert plan.status.phase is TaskPhase.DEAD_LETTERED
    assert any(c.reason == reasons.IGNORED_ATTEMPTS_EXHAUSTED for c in plan.status.conditions)


def test_kueue_stop_reads_the_workloads_evicted_condition() -> None:
    workload = {"status": {"conditions": [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate x"}]}}
    assert kueue_stop([workload]) == ("Preempted", "Preempted to accommodate x")
    counted = {"status": {"schedulingStats": {"evictions": [
        {"reason": "PodsReadyTimeout", "underlyingCause": "", "count": 2}]}}}
    assert kueue_stop([counted])[0] == "PodsReadyTimeout"
    assert kueue_stop(None)[0] == "EvictedByKueue" and kueue_stop([])[0] == "EvictedByKueue"


def test_a_job_suspended_again_after_it_ran_is_kueues_stop_whatever_its_pod_says() -> None:
    """The suspension deletes the pod (not counted failed: the Job could run again): seen by its
    pod, or by Kueue's stopping annotation alone (after a restart, the pod gone), the attempt waits
    for the Workload's reason, never ends PodFailed."""
    task = make_task("a").obj()
    effective = settings(task, pool())
    task = started(task, effective)
    going = attempt_job("a", 1).running(at(10), seen=at(10)).with_(suspended=True, pod_phase="Failed")
    marked = attempt_job("a", 1).with_(suspended=True, kueue_stopping=True)
    for job in (going, marked):
        plan = run(task, observe(job, now=at(20), pool_found=True), effective)
        assert not plan.ended and plan.status is None and plan.read_workload == "a-a1"


def test_kueue_stop_read_after_readmission_still_names_the_eviction() -> None:
    readmitted = {"status": {"conditions": [
        {"type": "Evicted", "status": "False", "reason": "QuotaReserved"},
        {"type": "Requeued", "status": "True", "reason": "Preempted", "message": "requeued"}]}}
    assert kueue_stop([readmitted])[0] == "Preempted"


# --- the pool's Ready condition -------------------------------------------------------------------

def test_the_pool_says_what_keeps_kueue_from_admitting() -> None:
    from cronoq.api import TaskPool
    from cronoq.engine.pools import kueue_problem, pool_status

    assert "not installed" in kueue_problem("gpu", "ns", "no-kueue", None)
    assert "LocalQueue gpu not found in namespace ns" in kueue_problem("gpu", "ns", "missing", None)
    inactive = {"status": {"conditions": [{"type": "Active", "status": "False", "reason": "ClusterQueueDoesNotExist",
                                           "message": "Can't submit new workloads to clusterQueue"}]}}
    assert "is not active (Can't submit" in kueue_problem("gpu", "ns", "found", inactive)
    active = {"status": {"conditions": [{"type": "Active", "status": "True"}]}}
    assert kueue_problem("gpu", "ns", "found", active) is None and kueue_problem("gpu", "ns", "forbidden", None) is None

    pool = TaskPool.model_validate({"metadata": {"name": "p", "namespace": "ns", "generation": 1}, "spec": KUEUE_POOL})
    problem = kueue_problem("gpu", "ns", "missing", None)
    status = pool_status(pool, {}, 0, 3, T0, kueue=problem)
    (ready,) = [c for c in status.conditions if c.type == "Ready"]
    assert (ready.status.value, ready.reason, ready.message) == ("False", reasons.KUEUE_NOT_READY, problem)
    stored = pool.model_copy(update={"status": status})
    assert pool_status(stored, {}, 0, 3, at(5), kueue=problem) is None  # said once
    healed = pool_status(stored, {}, 0, 3, at(10))
    assert [c.reason for c in healed.conditions if c.type == "Ready"] == [reasons.ADMITTING]


def test_recording_the_first_attempt_times_a_look_at_the_start_deadline() -> None:
    """The watch brings nothing new of a Job the operator just created (its own write): the plan
    that records attempt 1 must time the look at the startDeadline itself."""
    task = make_task("a").spec(startDeadline="5m").obj()
    effective = settings(task, pool())
    plan = run(task, observe(now=at(10), admit=True, pool_found=True, first_seen=T0), effective)
    assert plan.create_job is not None and plan.requeue_after == pytest.approx(290)


# --- MultiKueue: the attempt runs on a worker cluster --------------------------------------------

MULTI = {"admission": {"kueue": {"localQueue": "gpu", "multiKueue": True}}, "leaseTTL": "0s"}


def test_a_multikueue_pools_job_is_managed_by_multikueue_and_needs_heartbeats_off() -> None:
    job = build_job(make_task("a").obj(), TaskPoolSpec.model_validate(MULTI), 1, "e1-a1")
    assert job["spec"]["managedBy"] == MULTIKUEUE and job["spec"]["suspend"] is True
    assert "managedBy" not in build_job(make_task("a").obj(), pool(), 1, "e1-a1")["spec"], "a local Kueue pool: ours"


def test_a_remote_job_starts_when_its_mirrored_status_says_and_never_waits_for_a_pod() -> None:
    raw = {"metadata": {"name": "a-a1", "labels": {"cronoq.io/attempt": "1"}},
           "spec": {"suspend": False, "managedBy": MULTIKUEUE}, "status": {"startTime": "2026-12-03T12:00:05Z"}}
    facts = job_facts(raw)
    assert facts.remote and facts.started_at == at(5) and facts.resumed_at == at(5)
    local = job_facts({**raw, "spec": {"suspend": False}})
    assert not local.remote and local.started_at is None, "a local Job's start is its pod's"

    task = make_task("a").timeout("10s").obj()
    effective = settings(task, TaskPoolSpec.model_validate({**MULTI, "startTimeout": "1m"}))
    task = started(task, effective)
    remote = attempt_job("a", 1).with_(remote=True, resumed_at=at(5), started_at=at(5))
    plan = run(task, observe(remote, now=at(3600), pool_found=True), effective)
    (ended,) = plan.ended
    assert ended.reason == reasons.TIMEOUT, "its timeout, from the mirrored start; no start timeout for a pod"


def test_a_remote_job_that_failed_ends_the_attempt_with_the_jobs_words() -> None:
    task = make_task("a").obj()
    effective = settings(task, TaskPoolSpec.model_validate(MULTI))
    task = started(task, effective)
    failed = attempt_job("a", 1).with_(remote=True, resumed_at=at(5), started_at=at(5), finished="Failed",
                                      failure_reason="BackoffLimitExceeded", failure_message="Job has reached the specified backoff limit")
    plan = run(task, observe(failed, now=at(9), pool_found=True), effective)
    (ended,) = plan.ended
    assert ended.reason == reasons.POD_FAILED and ended.outcome == "Retryable"
    assert "MultiKueue worker cluster (BackoffLimitExceeded: Job has reached" in (ended.message or "")
    done = attempt_job("a", 1).with_(remote=True, resumed_at=at(5), started_at=at(5), finished="Complete")
    (ok,) = run(task, observe(done, now=at(9), pool_found=True), effective).ended
    assert ok.reason == reasons.COMPLETED and ok.outcome == "Success"


@pytest.mark.parametrize("more, field", [({"leaseTTL": "30s"}, "leaseTTL: must be 0s"),
                                         ({"template": {"http": {"url": "http://example.com/"}}}, "template.http")])
def test_a_multikueue_pool_refuses_what_needs_the_pod(more, field) -> None:
    """As the API server's CEL rules do (tests/integration/test_multikueue.py)."""
    with pytest.raises(ValidationError, match=field):
        TaskPoolSpec.model_validate({**MULTI, **more})
