"""Trust by construction against the real control plane (issue 49), with real identities: a tenant
bound to its own namespace by Kubernetes' `edit` role (an impersonated user), attacking a task of
another namespace that the same operator watches, with no admission policy installed (the session
operator runs without the chart): what the API server lets the tenant do must be harmless to the
victim by the operator's own construction. The chart's policies, which refuse these objects at
admission, are tested in tests/chart/test_key_guard.py."""
from __future__ import annotations

import pytest
from kubernetes import client

from tests.chart.identity import as_user
from tests.support.tasks import GROUP, VERSION, plays
from tests.support.waiting import wait_until


@pytest.fixture
def tenant_namespace(api, namespace):
    """A second namespace the session operator watches, where the user `mallory` holds `edit`."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    name = f"{namespace[:55]}-tenant"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"cronoq.io/test": "true"})))
    rbac.create_namespaced_role_binding(name, {
        "metadata": {"name": "mallory-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]})
    yield name
    core.delete_namespace(name, propagation_policy="Background")


def forged_job(name: str, labels: dict[str, str], message: str) -> dict:
    """A Job labelled like an attempt, whose pod kwok completes at once with `message`."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": labels, "annotations": plays(outcome="Succeed", delay="200ms", message=message)},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "task", "image": "example.invalid/x:1"}]}}}}


def seen_since(cq, name: str) -> None:
    """Wait until the operator has seen everything that happened to Jobs and pods before now: a
    task created now has run to its end (the operator's watches deliver each kind in order)."""
    cq.task(name, outcome="Succeed", delay="100ms")
    cq.wait_phase(name, "Succeeded", timeout=60)


def test_a_tenants_jobs_labelled_with_another_namespaces_task_end_and_delete_nothing_of_it(cq, api, tenant_namespace):
    """Finding 1 (a), (b) and (d): with the victim's uid and lease id (any `view` user reads them),
    a tenant's completed Job `<victim>-a1` in its own namespace ended the victim's running attempt
    Succeeded with the tenant's output; a Job named like an unrelated Job of the victim's namespace
    got that Job deleted; deleting the forgery ended the real attempt JobDeleted. Now each is
    someone else's object: the victim runs on and ends with its own output."""
    cq.pool("default", concurrency=2)
    batch = client.BatchV1Api(api)
    unrelated = batch.create_namespaced_job(cq.namespace, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly-report"},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                        "containers": [{"name": "c", "image": "example.invalid/r:1"}]}}}})
    cq.task("victim", outcome="Succeed", delay="25s", message="the victim's own output")
    status = cq.wait_status("victim", lambda s: s.get("phase") == "Running" and s, what="victim running")
    victim = cq.get("victim")
    uid, lease_id = victim["metadata"]["uid"], status["attempts"][-1]["leaseId"]
    labels = {"cronoq.io/task-uid": uid, "cronoq.io/task": "victim", "cronoq.io/attempt": "1",
              "cronoq.io/lease-id": lease_id, "cronoq.io/pool": "default"}

    mallory = client.BatchV1Api(as_user(api, "mallory"))
    mallory.create_namespaced_job(tenant_namespace, forged_job("victim-a1", labels, "forged"))
    mallory.create_namespaced_job(tenant_namespace, forged_job("nightly-report", {**labels, "cronoq.io/attempt": "7"},
                                                               "forged"))
    for name in ("victim-a1", "nightly-report"):
        wait_until(lambda: (batch.read_namespaced_job(name, tenant_namespace).status.succeeded or 0) >= 1,
                   timeout=60, what=f"the tenant's {name} completed")
    seen_since(cq, "barrier-1")

    status = cq.status("victim")
    assert status["phase"] == "Running" and status["attempt"] == 1, status
    assert batch.read_namespaced_job("nightly-report", cq.namespace).metadata.uid == unrelated.metadata.uid
    assert batch.read_namespaced_job("nightly-report", cq.namespace).metadata.deletion_timestamp is None
    assert batch.read_namespaced_job("victim-a1", cq.namespace).metadata.deletion_timestamp is None

    mallory.delete_namespaced_job("victim-a1", tenant_namespace, propagation_policy="Background")
    wait_until(lambda: not batch.list_namespaced_job(tenant_namespace, field_selector="metadata.name=victim-a1").items,
               timeout=30, what="the forgery gone")
    seen_since(cq, "barrier-2")
    assert cq.status("victim")["phase"] == "Running", "the forgery's deletion is not the attempt's"

    done = cq.wait_phase("victim", "Succeeded", timeout=90)
    assert done["attempt"] == 1 and done["output"] == "the victim's own output", done
    assert "ForeignJob" not in cq.reasons("victim"), "the tenant's Jobs are not the victim's to judge"
    tenant_events = client.CoreV1Api(api).list_namespaced_event(cq.namespace).items
    assert not [e for e in tenant_events if e.involved_object.namespace == tenant_namespace]


def test_a_dependency_output_of_deep_json_neither_stalls_nor_fails_its_dependent(cq):
    """Finding 3: an output of `"[" * 3000` (under the 4 KiB output bound) raised RecursionError
    after the dependent was granted its slot, which it then held forever with no status; a pool
    of concurrency 1 ran nothing more. Now the dependent receives it as text and runs."""
    cq.pool("default", concurrency=1)
    cq.task("deep", outcome="Succeed", delay="100ms", message="[" * 3000)
    cq.task("dependent", outcome="Succeed", delay="100ms", dependsOn=[{"task": "deep", "on": "Success"}])
    cq.task("after", outcome="Succeed", delay="100ms", priority=-1)
    assert cq.wait_phase("deep", "Succeeded")["output"] == "[" * 3000
    assert cq.wait_phase("dependent", "Succeeded", timeout=60)["attempt"] == 1
    cq.wait_phase("after", "Succeeded", timeout=60)
    job = client.BatchV1Api(cq.api).read_namespaced_job("dependent-a1", cq.namespace)
    env = {e.name: e.value for e in job.spec.template.spec.containers[0].env or ()}
    assert '"output":"' + "[" * 3000 + '"' in env["CRONOQ_INPUTS"].replace(" ", ""), "handed over as text"


def test_a_spec_too_big_to_keep_ends_failed_saying_its_size(cq):
    """Finding 6: each field within the CRD's bounds, 64 env values of 32 KiB made one queued task
    weigh ~1.5 MiB in the operator. Now the task ends Failed (InvalidSpec) saying why."""
    cq.pool("default", concurrency=1)
    env = [{"name": f"E{i}", "value": "x" * 32768} for i in range(8)]
    cq.custom.create_namespaced_custom_object(GROUP, VERSION, cq.namespace, "tasks", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "heavy"},
        "spec": {"image": "example.invalid/x:1", "env": env}})
    status = cq.wait_phase("heavy", "Failed", timeout=60)
    assert "more than 131072" in status["message"], status
    assert not cq.jobs("heavy")
