"""One tenant of a shared cluster cannot stall or fool the operator serving everyone (issue 26,
points 4 and 5), against the real control plane: a fire's Task name taken by someone else, a Job
refused by a ResourceQuota, a pod template too big to keep."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.schedules import FIRE_TIME_LABEL, SCHEDULE_LABEL, Schedules
from tests.support.tasks import GROUP, VERSION
from tests.support.waiting import wait_until


def condition(status: dict, type_: str) -> dict | None:
    return next((c for c in status.get("conditions") or () if c["type"] == type_), None)


def owned(sc: Schedules, schedule: dict) -> list[str]:
    """Names of the schedule's Tasks that it controls, oldest fire first."""
    uid = schedule["metadata"]["uid"]
    return sorted((t["metadata"]["name"] for t in sc.tasks(schedule["metadata"]["name"]) if any(
        r["uid"] == uid and r.get("controller") for r in t["metadata"].get("ownerReferences") or ())),
        key=lambda name: int(name.rsplit("-", 1)[1]))


def test_a_task_pre_created_under_a_fires_name_is_a_fire_conflict_never_the_fire(cq):
    """Point 5: a tenant pre-creates `<schedule>-<t>` for the next fires. Before: each fire took
    it as made (AlreadyExists). Now: FireConflict, counted as missed; a later fire makes its own."""
    sc = Schedules(cq)
    now = int(time.time())
    taken = range(now, now + 4)
    for at in taken:
        cq.task(f"hj-{at}")
    schedule = sc.create("hj", every="1s")

    status = wait_until(lambda: (s := sc.status("hj")) and (c := condition(s, "FireConflict")) and c["status"] == "True"
                        and s, timeout=15, what="FireConflict")
    assert "controlled by nothing" in condition(status, "FireConflict")["message"], status
    status = wait_until(lambda: (s := sc.status("hj")).get("lastFireTime") and s, timeout=15, what="a fire of its own")
    mine = owned(sc, schedule)
    assert mine and mine[0] == f"hj-{taken[-1] + 1}", (mine, status)
    assert status["missedFires"] >= 2, status
    conflict = condition(status, "FireConflict")
    assert conflict["status"] == "False" and conflict["reason"] == "Fired", status


def test_a_task_with_forged_schedule_labels_makes_no_forbid_schedule_skip(cq):
    """Point 5: labels alone made any Task one of the schedule's: an unfinished one with forged
    labels made a Forbid schedule skip every fire."""
    sc = Schedules(cq)
    forged = cq.task("forged")
    cq.custom.patch_namespaced_custom_object(GROUP, VERSION, cq.namespace, "tasks", forged["metadata"]["name"], {
        "metadata": {"labels": {SCHEDULE_LABEL: "fb", FIRE_TIME_LABEL: str(int(time.time()) - 60),
                                "cronoq.io/trigger": "schedule"}}})
    schedule = sc.create("fb", every="1s", concurrencyPolicy="Forbid")
    status = wait_until(lambda: (s := sc.status("fb")).get("lastFireTime") and s, timeout=15, what="a fire")
    assert owned(sc, schedule), status


def no_room_for_jobs(cq) -> None:
    """A ResourceQuota `tenant-jobs` that allows no Job in the test's namespace, in force."""
    quota = client.V1ResourceQuota(metadata=client.V1ObjectMeta(name="tenant-jobs"),
                                   spec=client.V1ResourceQuotaSpec(hard={"count/jobs.batch": "0"}))
    cq.core.create_namespaced_resource_quota(cq.namespace, quota)
    wait_until(lambda: (q := cq.core.read_namespaced_resource_quota("tenant-jobs", cq.namespace)).status
               and q.status.hard, what="the quota's status")


def test_a_job_refused_by_a_quota_says_which_quota_and_runs_once_it_has_room(cq):
    """Point 4e: before, the Job was tried again every 5 s forever and the task did not say why."""
    no_room_for_jobs(cq)
    cq.pool()
    cq.task("q", delay="100ms")
    status = cq.wait_status("q", lambda s: "ResourceQuota tenant-jobs" in (s.get("message") or "") and s,
                            what="the message naming the quota")
    assert condition(status, "Running")["reason"] == "JobRefused" and status["attempt"] == 1, status
    cq.core.patch_namespaced_resource_quota("tenant-jobs", cq.namespace, {"spec": {"hard": {"count/jobs.batch": "5"}}})
    done = cq.wait_phase("q", "Succeeded", timeout=60)
    assert done["attempt"] == 1 and len(cq.jobs("q")) == 1


def test_a_forged_lease_report_never_ends_a_job_mode_attempt(cq):
    """Issue 37, point 3: while a Job-mode attempt's Job is refused by a quota (no pod runs), Leases
    named like its attempt with a success report (as a worker, with and without the lease-id label,
    written by the admin, whom no policy stops) end nothing and start no dependent; once the quota
    has room the Job runs and its own outcome is recorded."""
    no_room_for_jobs(cq)
    cq.pool()
    task = cq.task("victim", delay="100ms")
    cq.task("after", dependsOn=[{"task": "victim", "on": "Success"}])
    status = cq.wait_status("victim", lambda s: "ResourceQuota tenant-jobs" in (s.get("message") or "") and s,
                            what="the attempt waiting for its Job")
    lease_id = status["attempts"][-1]["leaseId"]
    leases = client.CoordinationV1Api(cq.api)
    uid = task["metadata"]["uid"]
    report = json.dumps({"outcome": "success", "output": "forged"})
    for name, labels in (("victim-a1", {"cronoq.io/lease-id": lease_id, "cronoq.io/worker": "w"}),
                         ("victim-a1.w", {"cronoq.io/lease-id": lease_id, "cronoq.io/worker": "w"}),
                         ("victim-a1.x", {"cronoq.io/worker": "x"})):
        leases.create_namespaced_lease(cq.namespace, {
            "metadata": {"name": name, "annotations": {"cronoq.io/report": report}, "labels": {
                "cronoq.io/task-uid": uid, "cronoq.io/task": "victim", "cronoq.io/attempt": "1",
                "cronoq.io/pool": "default", **labels}},
            "spec": {"holderIdentity": labels.get("cronoq.io/lease-id", "x"), "leaseDurationSeconds": 30}})
    # The operator hears of each Lease (the task is queued for a decision) within a watch event;
    # the task must still be waiting for its Job a few decisions later.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert cq.status("victim")["phase"] == "Running" and cq.status("after").get("phase") == "Blocked"
        time.sleep(0.5)
    cq.core.patch_namespaced_resource_quota("tenant-jobs", cq.namespace, {"spec": {"hard": {"count/jobs.batch": "5"}}})
    done = cq.wait_phase("victim", "Succeeded", timeout=60)
    assert done["attempt"] == 1 and done.get("output") != "forged" and len(cq.jobs("victim")) == 1, done


def test_a_task_whose_pod_template_is_too_big_fails_naming_the_field(cq):
    """Point 4c: the operator keeps unfinished tasks in memory, so a template is bounded."""
    cq.pool()
    cq.task("huge", template={"spec": {"containers": [{"name": "task", "args": ["x" * 70_000]}]}})
    status = cq.wait_phase("huge", "Failed", timeout=30)
    assert "spec.template is" in status["message"] and "65536" in status["message"], status


def test_max_active_tasks_caps_a_schedules_unfinished_tasks(cq):
    """Point 4d: `every: 1s` with Allow made a Task a second, however many were still unfinished."""
    sc = Schedules(cq)
    schedule = sc.create("cap", every="1s", maxActiveTasks=2)  # no pool: its Tasks never finish
    status = wait_until(lambda: (s := sc.status("cap")).get("skippedFires", 0) >= 2 and s, timeout=15,
                        what="fires skipped at the cap")
    assert len(owned(sc, schedule)) == 2 and status["active"] == 2, status


def test_the_quota_the_security_page_gives_bounds_a_tenants_tasks(cq):
    """Point 4f: the ResourceQuota of "Sharing a cluster between tenants", as written (its Task
    count lowered to 2 to keep the test short), refuses a tenant's third Task."""
    doc = (Path(__file__).parents[2] / "docs" / "operating" / "security.md").read_text()
    blocks = [b.split("```", 1)[0] for b in doc.split("```yaml\n")[1:]]
    block = next(b for b in blocks if "count/tasks.cronoq.io" in b)
    quota = yaml.safe_load(block)
    quota["spec"]["hard"]["count/tasks.cronoq.io"] = "2"
    cq.core.create_namespaced_resource_quota(cq.namespace, quota)

    touches = iter(range(1_000_000))

    def counted() -> bool:
        q = cq.core.read_namespaced_resource_quota("cronoq", cq.namespace)
        if "count/tasks.cronoq.io" in ((q.status and q.status.used) or {}):
            return True
        # The quota controller learns of CRDs by discovery every 30 s, and recounts a quota when
        # its spec changes (or every 5 min): change it until it is counted.
        cq.core.patch_namespaced_resource_quota("cronoq", cq.namespace, {
            "spec": {"hard": {"count/configmaps": str(100 + next(touches) % 2)}}})
        return False
    wait_until(counted, timeout=60, interval=2, what="the quota's usage counted")
    cq.task("one")
    cq.task("two")
    with pytest.raises(ApiException) as refused:
        cq.task("three")
    assert refused.value.status == 403 and "exceeded quota: cronoq" in refused.value.body


def test_attempt_pods_naming_no_service_account_run_as_the_task_service_account(own):
    """Point 2: with the chart's `--task-service-account`, a task whose pool names no ServiceAccount
    runs as the one holding the lease role, not as the namespace's `default`; one that names its
    own keeps it. Before, every such pod ran as `default`, which then needed the lease role."""
    namespace = own.namespace
    own.operator.extra_args = ("--task-service-account=cronoq-task", f"--task-service-account-namespace={namespace}")
    own.operator.start()
    own.core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name="cronoq-task")))
    own.pool()
    own.task("plain")
    own.task("named", serviceAccountName="default")

    for name, account in (("plain", "cronoq-task"), ("named", "default")):
        assert own.wait_phase(name, "Succeeded")["phase"] == "Succeeded"
        (job,) = own.jobs(name)
        assert job.spec.template.spec.service_account_name == account, name
        (pod,) = own.core.list_namespaced_pod(namespace, label_selector=f"cronoq.io/task={name}").items
        assert pod.spec.service_account_name == account, name


def test_the_task_service_account_is_not_used_where_it_does_not_exist(own):
    """A namespace the chart created no task ServiceAccount in keeps `default`: a pod naming a
    missing ServiceAccount would never be created."""
    own.operator.extra_args = ("--task-service-account=cronoq-task", "--task-service-account-namespace=elsewhere")
    own.operator.start()
    own.pool()
    own.task("plain")
    assert own.wait_phase("plain", "Succeeded")["phase"] == "Succeeded"
    (job,) = own.jobs("plain")
    assert job.spec.template.spec.service_account_name is None
