"""Why a task waits for Kueue, in Kueue's words (issue 51 item 3), without a cluster: what is read
of a Workload, its LocalQueue and Kueue's visibility API (`kube.observe.kueue_hold`); the one
explanation `describe`, the dashboard and the Task's message share (`engine.attempts.waiting`);
and when the state machine looks at Kueue and writes (once per change of Kueue's reason)."""
from __future__ import annotations

import random
from dataclasses import replace

from cronoq.api import Task, TaskPoolSpec
from cronoq.engine import reasons
from cronoq.engine.attempts import reconcile, waiting, wording
from cronoq.engine.observed import AttemptJob, KueueHold
from cronoq.engine.plan import Effective, Plan
from cronoq.kube.observe import cluster_queue_of, job_facts, kueue_hold

from tests.unit.builders import T0, at, attempt_job, make_task, observe, settings, with_status

POOL = TaskPoolSpec.model_validate({"admission": {"kueue": {"localQueue": "gpu"}}})
PENDING = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor a100, "
           "3 more needed")


def workload(message: str = PENDING, **status) -> dict:
    return {"metadata": {"name": "job-a-a1-3f2e1", "labels": {"kueue.x-k8s.io/job-uid": "u1"}},
            "spec": {"queueName": "gpu", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "task", "resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "4"}}},
                               {"name": "heartbeat", "resources": {"requests": {"cpu": "500m"}}}]}}}]},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                       "message": message}], **status}}


# --- what is read -------------------------------------------------------------------------------

def test_kueue_hold_reads_the_workloads_reason_the_cluster_queue_and_what_it_needs() -> None:
    hold = kueue_hold("gpu", [workload()], cluster_queue_of({"spec": {"clusterQueue": "team-a"}}))
    assert hold == KueueHold("gpu", "team-a", "job-a-a1-3f2e1", True, "Pending", PENDING,
                             (("cpu", "1000m"), ("nvidia.com/gpu", "4")), None)


def test_with_its_quota_reserved_the_admitted_condition_says_what_holds_it() -> None:
    checks = workload()
    checks["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in team-a"},
        {"type": "Admitted", "status": "False", "reason": "AdmissionChecksPending",
         "message": "The workload has pending admission checks: provisioning"}]
    hold = kueue_hold("gpu", [checks], "team-a")
    assert (hold.reason, hold.message) == ("AdmissionChecksPending",
                                           "The workload has pending admission checks: provisioning")


def test_kueues_own_count_of_the_requests_wins_over_the_pod_sets() -> None:
    given = workload(resourceRequests=[{"name": "main", "resources": {"cpu": "1100m", "nvidia.com/gpu": "4"}}])
    assert kueue_hold("gpu", [given], "team-a").needs == (("cpu", "1100m"), ("nvidia.com/gpu", "4"))
    counted = workload()
    counted["spec"]["podSets"][0]["count"] = 2
    counted["spec"]["podSets"][0]["template"]["spec"]["containers"][1]["resources"]["requests"]["cpu"] = "1"
    assert kueue_hold("gpu", [counted], None).needs == (("cpu", "(500m + 500m + 1 + 1)"), ("nvidia.com/gpu", "8"))


def test_the_position_comes_from_the_visibility_api_counted_from_one() -> None:
    pending = {"items": [{"metadata": {"name": "other"}, "positionInClusterQueue": 0},
                         {"metadata": {"name": "job-a-a1-3f2e1"}, "positionInClusterQueue": 11,
                          "positionInLocalQueue": 3}]}
    assert kueue_hold("gpu", [workload()], "team-a", pending).position == 12
    assert kueue_hold("gpu", [workload()], "team-a", None).position is None
    assert kueue_hold("gpu", [workload()], "team-a", {"items": [{"metadata": {"name": "other"}}]}).position is None


def test_no_workload_yet_and_workloads_not_readable_are_told_apart() -> None:
    assert kueue_hold("gpu", [], "team-a") == KueueHold("gpu", "team-a")
    assert kueue_hold("gpu", None, None) == KueueHold("gpu", None, readable=False)
    assert cluster_queue_of(None) is None


def test_a_jobs_queue_label_makes_it_a_kueue_job_held_while_suspended_and_never_let_run() -> None:
    raw = {"metadata": {"name": "a-a1", "labels": {"cronoq.io/attempt": "1", "kueue.x-k8s.io/queue-name": "gpu"}},
           "spec": {"suspend": True}, "status": {}}
    held = job_facts(raw)
    assert held is not None and held.kueue_queue == "gpu" and held.held_by_kueue
    plain = job_facts({**raw, "metadata": {"name": "a-a1", "labels": {"cronoq.io/attempt": "1"}}})
    assert plain is not None and not plain.held_by_kueue  # suspended, but not by Kueue's label
    admitted = job_facts({**raw, "spec": {"suspend": False}, "status": {"startTime": "2026-12-03T12:00:05Z"}})
    assert admitted is not None and not admitted.held_by_kueue
    assert not replace(held, kueue_stopping=True).held_by_kueue  # stopped again: a preemption, judged elsewhere


# --- the one explanation ------------------------------------------------------------------------

HOLD = KueueHold("gpu", "team-a", "w", True, "Pending", "couldn't assign flavors…", (("nvidia.com/gpu", "4"),), 12)


def test_describe_and_the_dashboard_say_it_as_the_issue_asks() -> None:
    assert waiting.kueue_text(HOLD, position=True) == (
        "waiting for Kueue: LocalQueue gpu, ClusterQueue team-a, position 12, needs 4 nvidia.com/gpu; "
        "Kueue says: couldn't assign flavors…")


def test_an_unknown_position_is_said_to_be_unknown_never_made_up() -> None:
    text = waiting.kueue_text(replace(HOLD, position=None), position=True)
    assert "position unknown (Kueue's visibility API is not served)" in text and "position 1" not in text


def test_the_tasks_message_leaves_the_position_out_it_moves_without_being_news() -> None:
    message = waiting.kueue_message(1, 3, HOLD)
    assert message == ("attempt 1 of 3 is waiting for Kueue: LocalQueue gpu, ClusterQueue team-a, "
                       "needs 4 nvidia.com/gpu; Kueue says: couldn't assign flavors…")


def test_what_is_not_known_is_said_so() -> None:
    assert waiting.kueue_text(KueueHold("gpu")) == (
        "waiting for Kueue: LocalQueue gpu, ClusterQueue unknown; Kueue has made no Workload for it yet")
    assert "could not be read" in waiting.kueue_text(KueueHold("gpu", readable=False))
    assert waiting.kueue_text(KueueHold("gpu", "cq", "w", reason="Pending")).endswith("; Kueue says: Pending")


# --- looks and writes ---------------------------------------------------------------------------

def run(task: Task, seen, effective: Effective) -> Plan:
    return reconcile(task, effective, seen, random.Random(0))


def running(name: str = "a") -> tuple[Task, Effective]:
    task = make_task(name).obj()
    effective = settings(task, POOL)
    plan = run(task, observe(now=T0, admit=True, pool_found=True), effective)
    assert plan.create_job is not None
    return with_status(task, plan.status), effective


def held(**facts) -> AttemptJob:
    return attempt_job("a", 1).with_(suspended=True, kueue_queue="gpu", **facts)


def test_a_held_job_is_first_looked_at_a_second_after_its_creation() -> None:
    task, effective = running()
    plan = run(task, observe(held(), now=at(0.5), pool_found=True), effective)
    assert plan.look_kueue is None and plan.status is None and plan.requeue_after == 0.5
    plan = run(task, observe(held(), now=at(1), pool_found=True), effective)
    assert plan == Plan(look_kueue="a-a1")


def test_what_kueue_says_is_written_once_then_only_when_its_reason_changes() -> None:
    task, effective = running()
    hold = kueue_hold("gpu", [workload()], "team-a")
    plan = run(task, observe(held(kueue_hold=hold, kueue_looked_at=at(1)), now=at(1), pool_found=True), effective)
    assert plan.status is not None and plan.requeue_after == 10.0
    assert wording.told(plan.status) == reasons.WAITING_FOR_KUEUE == plan.status.conditions[0].reason
    assert plan.status.message == waiting.kueue_message(1, 3, hold)
    assert "LocalQueue gpu, ClusterQueue team-a" in plan.status.message and PENDING in plan.status.message
    task = with_status(task, plan.status)

    # Looked at again 10 s later: only the amount Kueue quotes moved. No write.
    again = kueue_hold("gpu", [workload(PENDING.replace("3 more", "1 more"))], "team-a")
    plan = run(task, observe(held(kueue_hold=again, kueue_looked_at=at(11)), now=at(11), pool_found=True), effective)
    assert plan.status is None and plan.requeue_after == 10.0

    # Kueue's reason changes (a stopped ClusterQueue): news, one write.
    stopped = kueue_hold("gpu", [workload("ClusterQueue team-a is inactive")], "team-a")
    plan = run(task, observe(held(kueue_hold=stopped, kueue_looked_at=at(21)), now=at(21), pool_found=True), effective)
    assert plan.status is not None and plan.status.message.endswith("Kueue says: ClusterQueue team-a is inactive")
    task = with_status(task, plan.status)

    # A look is due again: only the read is planned.
    plan = run(task, observe(held(kueue_hold=stopped, kueue_looked_at=at(21)), now=at(31), pool_found=True), effective)
    assert plan == Plan(look_kueue="a-a1")

    # Kueue admits it: said once, then nothing more.
    admitted = attempt_job("a", 1).with_(kueue_queue="gpu", resumed_at=at(40), pod_phase="Pending")
    plan = run(task, observe(admitted, now=at(40), pool_found=True), effective)
    assert plan.status is not None and wording.told(plan.status) == reasons.ATTEMPT_RUNNING
    assert plan.status.message == "attempt 1 of 3 running" and plan.look_kueue is None
    task = with_status(task, plan.status)
    assert run(task, observe(admitted, now=at(41), pool_found=True), effective).status is None


def test_a_job_admitted_before_any_look_costs_no_read_and_no_write() -> None:
    task, effective = running()
    admitted = attempt_job("a", 1).with_(kueue_queue="gpu", resumed_at=at(0.2), pod_phase="Pending")
    plan = run(task, observe(admitted, now=at(5), pool_found=True), effective)
    assert plan.status is None and plan.look_kueue is None


def test_the_start_deadline_still_ends_a_task_kueue_holds() -> None:
    task = make_task("a").obj()
    effective = settings(task, TaskPoolSpec.model_validate({"admission": {"kueue": {"localQueue": "gpu"}},
                                                            "startDeadline": "5s"}))
    plan = run(task, observe(now=T0, admit=True, pool_found=True), effective)
    task = with_status(task, plan.status)
    hold = kueue_hold("gpu", [workload()], "team-a")
    plan = run(task, observe(held(kueue_hold=hold, kueue_looked_at=at(1)), now=at(6), pool_found=True,
                             first_seen=T0), effective)
    assert plan.status is not None and plan.status.phase is not None and plan.status.phase.terminal
    assert "waiting for Kueue" in (plan.status.message or "") and plan.delete_jobs == ("a-a1",)
