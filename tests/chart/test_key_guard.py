"""One admission rule for everything that carries the keys the operator reads (issue 49, finding 2
and "One admission rule"), with real identities: bound ServiceAccount tokens of kwok pods and
impersonated users of one namespace. A Job-mode attempt's Lease (its name and lease id are public in
the Task's status) takes a checkpoint and a holder only from the attempt's own pod, not from an
application's leader election or an `edit` user; a Job or a pod carrying cronoq's keys is the
operator's or the Job controller's, so no one can pass one of theirs for an attempt's."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
import yaml
from kubernetes import client

from cronoq.pod_protocol import PROTECTED_ANNOTATIONS, PROTECTED_LABELS
from tests.chart import chart
from tests.chart.identity import as_token, as_user, refusal
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

LEASE_RULES = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                "verbs": ["get", "list", "create", "update", "patch", "delete"]}]


@pytest.fixture
def guards(helm_binary, kubectl, cronoq_crds):
    """The lease guard and the key guard, rendered from the chart and applied; removed afterwards."""
    rendered = chart.run_helm(helm_binary, "template", "ktest", str(chart.CHART), "--namespace=cronoq-system",
                              "--show-only=templates/lease-guard-policy.yaml",
                              "--show-only=templates/key-guard-policy.yaml").stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    kubectl("apply", "-f", "-", input=rendered)
    yield objects
    for o in objects:
        kubectl("delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found", check=False)


def account_with(api, namespace: str, name: str, rules: list[dict]) -> None:
    client.CoreV1Api(api).create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})


def editor(api, namespace: str, user: str = "mallory") -> None:
    """`user` holds Kubernetes' own `edit` role in the namespace (Leases, Jobs, pods and more)."""
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": f"{user}-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})


def pod_token(api, kubectl, namespace: str, account: str, pod_name: str) -> str:
    """A real token of `account` bound to a (new) kwok pod: it carries the pod-name claim."""
    pod = client.CoreV1Api(api).create_namespaced_pod(namespace, {
        "metadata": {"name": pod_name, "annotations": {"kwok.cronoq.io/outcome": "Run"}},
        "spec": {"serviceAccountName": account, "containers": [{"name": "c", "image": "example.invalid/x:1"}]}})
    return kubectl("create", "token", account, "--bound-object-kind=Pod", f"--bound-object-name={pod_name}",
                   f"--bound-object-uid={pod.metadata.uid}", "--duration=10m", namespace=namespace).stdout.strip()


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def attempt_lease(task: str, attempt: int = 1, epoch: int = 1, checkpoint: str | None = None) -> dict:
    """A Job-mode attempt's Lease as its pod writes it (pod_protocol.lease_body): named like its Job."""
    name, holder = f"{task}-a{attempt}", f"e{epoch}-a{attempt}"
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": {"cronoq.io/task-uid": "4c1d2e3f-0000-4000-8000-00000000abcd",
                                                  "cronoq.io/task": task, "cronoq.io/attempt": str(attempt),
                                                  "cronoq.io/lease-id": holder}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30, "renewTime": now()}}
    if checkpoint is not None:
        body["metadata"]["annotations"] = {"cronoq.io/checkpoint": checkpoint}
    return body


def save_checkpoint(leases: client.CoordinationV1Api, namespace: str, name: str, checkpoint: str) -> str:
    """A renewal carrying a checkpoint, as the SDK and the heartbeat sidecar make it."""
    return refusal(lambda: leases.patch_namespaced_lease(name, namespace, [
        {"op": "add", "path": "/spec/renewTime", "value": now()},
        {"op": "add", "path": "/metadata/annotations", "value": {"cronoq.io/checkpoint": checkpoint}}],
        _content_type="application/json-patch+json"))


def test_only_the_attempts_own_pod_writes_a_job_attempts_lease(api, kubectl, namespace, guards):
    """Finding 2: an application's leader election (a ServiceAccount with Lease rights, its pod's
    bound token) and an `edit` user can no longer write a checkpoint on, or take the holder of, a
    Job-mode attempt's Lease; the attempt's own pod still creates and renews it with its checkpoint."""
    account_with(api, namespace, "task", LEASE_RULES)
    account_with(api, namespace, "app", LEASE_RULES)
    editor(api, namespace)
    own = client.CoordinationV1Api(as_token(api, pod_token(api, kubectl, namespace, "task", "victim-a1-x7k2p")))
    app = client.CoordinationV1Api(as_token(api, pod_token(api, kubectl, namespace, "app", "app-7d9f-q8w3e")))
    mallory = client.CoordinationV1Api(as_user(api, "mallory"))

    def enforced() -> bool:
        said = refusal(lambda: app.create_namespaced_lease(namespace, attempt_lease("squat", checkpoint='{"forged":1}')))
        if not said:
            client.CoordinationV1Api(api).delete_namespaced_lease("squat-a1", namespace)
        return "(own attempt)" in said

    wait_until(enforced, timeout=30, what="the lease guard to refuse a squatted attempt Lease")
    # The attempt's own pod: creates its Lease with a checkpoint, renews it with a newer one.
    own.create_namespaced_lease(namespace, attempt_lease("victim", checkpoint='{"done":1}'))
    assert save_checkpoint(own, namespace, "victim-a1", '{"done":2}') == ""
    # The application's leader election and the editor: no checkpoint, no holder change, no labels.
    for who, leases in (("system:serviceaccount:" + namespace + ":app", app), ("mallory", mallory)):
        said = save_checkpoint(leases, namespace, "victim-a1", '{"forged":true}')
        assert "cronoq lease guard (own attempt)" in said and f"not {who}" in said, said
        assert "(own attempt)" in refusal(lambda: leases.patch_namespaced_lease(
            "victim-a1", namespace, {"spec": {"holderIdentity": "e1-a2"}}))
        assert "(own attempt)" in refusal(lambda: leases.patch_namespaced_lease(
            "victim-a1", namespace, {"metadata": {"labels": {"team": "x"}}}))
        assert "(own attempt)" in refusal(lambda: leases.create_namespaced_lease(namespace, attempt_lease("victim", 2)))
        # Adding a report makes it a worker's Lease, which it is not, of a pool nobody may serve.
        said = refusal(lambda: leases.patch_namespaced_lease(
            "victim-a1", namespace, {"metadata": {"annotations": {"cronoq.io/report": '{"outcome":"success"}'}}}))
        assert "(lease kind)" in said or "(serve)" in said, said
    lease = client.CoordinationV1Api(api).read_namespaced_lease("victim-a1", namespace)
    assert lease.metadata.annotations == {"cronoq.io/checkpoint": '{"done":2}'} and lease.spec.holder_identity == "e1-a1"
    # The own pod stays within its attempt: another attempt's Lease, a holder change, a worker's keys.
    assert "(own attempt)" in refusal(lambda: own.create_namespaced_lease(namespace, attempt_lease("other")))
    assert "(attempt update)" in refusal(lambda: own.patch_namespaced_lease(
        "victim-a1", namespace, {"spec": {"holderIdentity": "e1-a2"}}))
    assert "(checkpoint size)" in save_checkpoint(own, namespace, "victim-a1", json.dumps("x" * 4095))
    # Leases without cronoq's keys stay theirs (leader election), and the admin is not judged.
    for leases in (app, mallory):
        leases.create_namespaced_lease(namespace, {"metadata": {"name": f"leader-{id(leases)}"},
                                                   "spec": {"holderIdentity": "me"}})
    client.CoordinationV1Api(api).patch_namespaced_lease("victim-a1", namespace, {"spec": {"holderIdentity": "e1-a2"}})


def job(name: str, labels: dict | None = None, template_labels: dict | None = None) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"template": {"metadata": {"labels": template_labels or {},
                                               "annotations": {"kwok.cronoq.io/outcome": "Run"}},
                                  "spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "task", "image": "example.invalid/t:1"}]}}}}


def test_only_cronoq_writes_jobs_and_pods_with_its_keys(api, kubectl, namespace, guards):
    """Finding 1's forgeries start from a Job or a pod labelled like an attempt: an `edit` user may
    create neither (on the Job, in its pod template, or as a bare pod), nor relabel an attempt's;
    a Job carrying the keys (made here by the admin, as the operator would) still gets its pod from
    the Job controller, and the editor may still add labels of its own to it."""
    editor(api, namespace)
    mallory = as_user(api, "mallory")
    jobs, pods = client.BatchV1Api(mallory), client.CoreV1Api(mallory)
    uid = {"cronoq.io/task-uid": "4c1d2e3f-0000-4000-8000-00000000abcd"}

    def enforced() -> bool:
        said = refusal(lambda: jobs.create_namespaced_job(namespace, job("victim-a2", labels=uid)))
        if not said:  # not enforced yet, and it went through: take it back, so the next try is judged anew
            client.BatchV1Api(api).delete_namespaced_job("victim-a2", namespace, propagation_policy="Background")
            wait_until(lambda: not [j for j in client.BatchV1Api(api).list_namespaced_job(namespace).items
                                    if j.metadata.name == "victim-a2"], timeout=30, what="the early Job gone")
        return "cronoq key guard (job)" in said

    wait_until(enforced, timeout=30, what="the key guard to refuse a forged Job")
    assert "(job)" in refusal(lambda: jobs.create_namespaced_job(namespace, job("victim-a3", template_labels=uid)))
    said = refusal(lambda: pods.create_namespaced_pod(namespace, {
        "metadata": {"name": "victim-a2-abcde", "labels": uid},
        "spec": {"containers": [{"name": "task", "image": "example.invalid/t:1"}]}}))
    assert "cronoq key guard (pod)" in said and "not mallory" in said, said
    assert "(pod)" in refusal(lambda: pods.create_namespaced_pod(namespace, {
        "metadata": {"name": "report", "annotations": {"cronoq.io/report": '{"outcome":"success"}'}},
        "spec": {"containers": [{"name": "task", "image": "example.invalid/t:1"}]}}))
    # Jobs and pods without the keys are none of the guard's business.
    jobs.create_namespaced_job(namespace, job("plain"))

    # The operator's kind of Job (the admin writes it here): the Job controller creates its pod.
    keys = {**uid, "cronoq.io/task": "victim", "cronoq.io/attempt": "1", "cronoq.io/lease-id": "e1-a1",
            "cronoq.io/pool": "default"}
    client.BatchV1Api(api).create_namespaced_job(namespace, job("victim-a1", labels=keys, template_labels=keys))
    (pod,) = wait_until(lambda: client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector="cronoq.io/task=victim").items, timeout=30, what="the Job controller's pod")
    assert pod.metadata.labels["cronoq.io/lease-id"] == "e1-a1"
    # The editor may not relabel it or take it over, but may add a label of its own.
    for target, read in ((jobs.patch_namespaced_job, "victim-a1"), (pods.patch_namespaced_pod, pod.metadata.name)):
        assert "key guard" in refusal(lambda: target(read, namespace, {"metadata": {"labels": {"cronoq.io/lease-id": "e1-a2"}}}))
        assert "key guard" in refusal(lambda: target(read, namespace, {"metadata": {"labels": {"cronoq.io/task-uid": None}}}))
        assert "key guard" in refusal(lambda: target(read, namespace, {"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "4c1d2e3f-0000-4000-8000-00000000abce"}]}}))
        assert refusal(lambda: target(read, namespace, {"metadata": {"labels": {"team": "blue"}}})) == ""


def test_the_guards_list_is_the_protocols():
    """What the cluster tests above rely on: the keys they forge are on the protocol's list."""
    assert {"cronoq.io/task-uid", "cronoq.io/lease-id"} <= set(PROTECTED_LABELS)
    assert {"cronoq.io/checkpoint", "cronoq.io/report"} <= set(PROTECTED_ANNOTATIONS)
