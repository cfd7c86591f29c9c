"""The chart's ValidatingAdmissionPolicy, with real bound ServiceAccount tokens: a task pod may
renew its own attempt's Lease and nothing else (DESIGN §6, issue 6), and none of the bypasses of
issue 26 (point 2) works: an unlabelled Lease, a crafted pod name, a token without the pod-name
claim, an update of anything but renewTime; a task whose Job name is long still renews its own."""
from __future__ import annotations

import subprocess
from datetime import datetime, timezone

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from cronoq.engine.naming import job_name
from tests.chart.identity import refusal
from tests.support.cluster import REPO
from tests.support.waiting import wait_until

CHART = REPO / "charts" / "cronoq"


@pytest.fixture(scope="module")
def policy(devcluster, kubectl):
    """Only the policy and its binding, rendered from the chart and applied."""
    helm = str(devcluster.STATE / "bin" / "helm")
    rendered = subprocess.run([helm, "template", "leasetest", str(CHART), "--namespace", "cronoq-system",
                               "--show-only", "templates/task-lease-policy.yaml",
                               '--set-json=taskPods.leaseRole.serviceAccounts=["worker"]'],
                              check=True, capture_output=True, text=True).stdout
    kubectl("apply", "-f", "-", input=rendered)
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(rendered) if d]
    yield names
    for kind, name in zip(("validatingadmissionpolicy", "validatingadmissionpolicybinding"), names):
        kubectl("delete", kind, name, "--ignore-not-found", check=False)


def lease(name: str, holder: str, attempt: int = 1) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": {"cronoq.io/attempt": str(attempt), "cronoq.io/lease-id": holder,
                                                  "cronoq.io/task": name.rsplit("-a", 1)[0]}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30}}


def worker_with_lease_rights(api, namespace: str) -> None:
    """The `worker` ServiceAccount with every verb on Leases: only the policy stands in the way."""
    client.CoreV1Api(api).create_namespaced_service_account(namespace, {"metadata": {"name": "worker"}})
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "lease"}, "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update", "patch", "create", "delete"]}]})
    rbac.create_namespaced_role_binding(namespace, {"metadata": {"name": "lease"},
                                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
                                        "subjects": [{"kind": "ServiceAccount", "name": "worker", "namespace": namespace}]})


def pod_token(api, kubectl, namespace: str, pod_name: str) -> str:
    core = client.CoreV1Api(api)
    pod = core.create_namespaced_pod(namespace, {
        "metadata": {"name": pod_name, "annotations": {"kwok.cronoq.io/outcome": "Run"}},
        "spec": {"serviceAccountName": "worker", "containers": [{"name": "task", "image": "example.invalid/t:1"}]}})
    return kubectl("create", "token", "worker", "--bound-object-kind=Pod", f"--bound-object-name={pod_name}",
                   f"--bound-object-uid={pod.metadata.uid}", "--duration=10m", namespace=namespace).stdout.strip()


def as_token(api, token: str) -> client.CoordinationV1Api:
    admin = api.configuration
    conf = client.Configuration(host=admin.host, api_key={"authorization": f"Bearer {token}"})
    conf.ssl_ca_cert = admin.ssl_ca_cert
    return client.CoordinationV1Api(client.ApiClient(conf))


def renew(leases: client.CoordinationV1Api, namespace: str, name: str, extra: dict | None = None):
    now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    return leases.patch_namespaced_lease(name, namespace, {"spec": {"renewTime": now, **(extra or {})}})


def test_a_task_pod_renews_its_own_attempt_lease_and_no_other(api, kubectl, namespace, policy):
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    admin_leases = client.CoordinationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "worker"}})
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "lease"}, "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update", "patch", "create", "delete"]}]})
    rbac.create_namespaced_role_binding(namespace, {"metadata": {"name": "lease"},
                                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
                                        "subjects": [{"kind": "ServiceAccount", "name": "worker", "namespace": namespace}]})
    for name, holder in (("mine-a1", "e1-a1"), ("other-a1", "e1-a1")):
        admin_leases.create_namespaced_lease(namespace, lease(name, holder))
    mine = as_token(api, pod_token(api, kubectl, namespace, "mine-a1-x7k2p"))

    # A fresh policy takes a moment to be enforced: wait until the first refusal is seen.
    def refused_other() -> bool:
        try:
            renew(mine, namespace, "other-a1")
        except ApiException as err:
            return err.status in (403, 422) and "may renew only the Lease of its own attempt" in err.body
        return False

    wait_until(refused_other, timeout=30, what="the policy to refuse another attempt's Lease")
    renewed = renew(mine, namespace, "mine-a1")
    assert renewed.spec.renew_time is not None

    with pytest.raises(ApiException) as takeover:
        renew(mine, namespace, "mine-a1", {"holderIdentity": "e1-a2"})
    assert "only spec.renewTime" in takeover.value.body
    with pytest.raises(ApiException) as delete:
        mine.delete_namespaced_lease("mine-a1", namespace)
    assert "not delete" in delete.value.body
    # The admin (the operator's kind of identity) is not subject to the policy.
    renew(admin_leases, namespace, "other-a1", {"holderIdentity": "e1-a2"})


def test_a_task_pod_creates_only_its_own_attempts_lease(api, kubectl, namespace, policy):
    """The attempt creates its Lease at its first renewal (issue 12): only the one named after
    its own Job, held by a lease id of its own attempt number."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "worker"}})
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "lease"}, "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update", "patch"]}]})
    rbac.create_namespaced_role_binding(namespace, {"metadata": {"name": "lease"},
                                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
                                        "subjects": [{"kind": "ServiceAccount", "name": "worker", "namespace": namespace}]})
    mine = as_token(api, pod_token(api, kubectl, namespace, "job-a2-q8w3e"))

    def refused(body: dict, words: str) -> bool:
        try:
            mine.create_namespaced_lease(namespace, body)
        except ApiException as err:
            return err.status in (403, 422) and words in err.body
        return False

    wait_until(lambda: refused(lease("other-a2", "e1-a2", attempt=2), "may renew only the Lease of its own attempt"),
               timeout=30, what="the policy to refuse creating another attempt's Lease")
    assert refused(lease("job-a2", "e1-a1", attempt=2), "held by its attempt's lease id")  # another attempt's holder
    assert refused(lease("job-a2", "e1-a2", attempt=1), "held by its attempt's lease id")  # a label that lies
    # Issue 37, point 2: its own Lease, but dressed as a pull worker of pool mail with a huge room,
    # or carrying a report: refused (before, the worker pool's attempts all went to it).
    posing = lease("job-a2", "e1-a2", attempt=2)
    posing["metadata"]["labels"]["cronoq.io/worker-pool"] = "mail"
    posing["metadata"]["annotations"] = {"cronoq.io/capacity": "1000000"}
    assert refused(posing, "no worker's keys")
    reporting = lease("job-a2", "e1-a2", attempt=2)
    reporting["metadata"]["labels"]["cronoq.io/worker"] = "job-a2-q8w3e-aaaaaa"
    reporting["metadata"]["annotations"] = {"cronoq.io/report": '{"outcome":"success","output":"forged"}'}
    assert refused(reporting, "no worker's keys")
    created = mine.create_namespaced_lease(namespace, lease("job-a2", "e1-a2", attempt=2))
    assert created.spec.holder_identity == "e1-a2"
    assert renew(mine, namespace, "job-a2").spec.renew_time is not None


def test_each_bypass_of_the_lease_policy_is_refused(api, kubectl, namespace, policy):
    worker_with_lease_rights(api, namespace)
    admin_leases = client.CoordinationV1Api(api)
    admin_leases.create_namespaced_lease(namespace, lease("mine-a1", "e1-a1"))
    victim = lease("victim-a1", "e1-a1")
    unlabelled = {**victim, "metadata": {"name": "victim-a1"}}
    mine = as_token(api, pod_token(api, kubectl, namespace, "mine-a1-x7k2p"))
    # An unlabelled Lease named like another attempt's, made before that attempt's first renewal.
    wait_until(lambda: "may renew only the Lease of its own attempt" in refusal(
        lambda: mine.create_namespaced_lease(namespace, unlabelled)),
        timeout=30, what="the policy to refuse an unlabelled Lease of another attempt")
    # A pod named to pass for that attempt's under "the pod name up to its last dash".
    crafted = as_token(api, pod_token(api, kubectl, namespace, "victim-a1-x"))
    assert "may renew only the Lease of its own attempt" in refusal(lambda: crafted.create_namespaced_lease(namespace, victim))
    # A token of the task ServiceAccount bound to no pod: no pod-name claim, refused (fail closed).
    unbound = as_token(api, kubectl("create", "token", "worker", "--duration=10m", namespace=namespace).stdout.strip())
    assert "pod-bound token" in refusal(lambda: unbound.create_namespaced_lease(namespace, unlabelled))
    assert "pod-bound token" in refusal(lambda: renew(unbound, namespace, "mine-a1"))
    # Updates of anything but renewTime.
    for change in ({"metadata": {"annotations": {"x": "y"}}}, {"metadata": {"finalizers": ["example.com/keep"]}},
                   {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x",
                                                      "uid": "4c1d2e3f-0000-4000-8000-00000000abcd"}]}},
                   {"spec": {"leaseTransitions": 3}}):
        assert "only spec.renewTime" in refusal(lambda: mine.patch_namespaced_lease("mine-a1", namespace, change)), change
    assert renew(mine, namespace, "mine-a1").spec.renew_time is not None
    # Other identities' Leases, labelled like attempts or not, are none of the policy's business.
    admin_leases.create_namespaced_lease(namespace, unlabelled)


def test_a_task_with_a_long_name_renews_its_own_lease(api, kubectl, namespace, policy):
    """A 56-character task: its Job name is cut (with a hash) to 57 characters, so the Job
    controller's pod name <job>-xxxxx stays whole and maps to the attempt's Lease."""
    worker_with_lease_rights(api, namespace)
    job = job_name("t" * 56, 1)
    assert len(job) == 57
    mine = as_token(api, pod_token(api, kubectl, namespace, f"{job}-q8w3e"))
    wait_until(lambda: "may renew only" in refusal(lambda: mine.create_namespaced_lease(namespace, lease("other-a1", "e1-a1"))),
               timeout=30, what="the policy to be enforced")
    assert mine.create_namespaced_lease(namespace, lease(job, "e1-a1")).spec.holder_identity == "e1-a1"
    assert renew(mine, namespace, job).spec.renew_time is not None


def test_a_task_pod_saves_its_checkpoint_on_its_own_lease_and_nothing_more(api, kubectl, namespace, policy):
    """Issue 40, part 2: the checkpoint annotation is the one cronoq annotation a task pod may write,
    on its own attempt's Lease, at most 4096 bytes, with a renewal; nothing else changes with it."""
    worker_with_lease_rights(api, namespace)
    admin_leases = client.CoordinationV1Api(api)
    admin_leases.create_namespaced_lease(namespace, lease("other-a1", "e1-a1"))
    mine = as_token(api, pod_token(api, kubectl, namespace, "mine-a1-x7k2p"))
    with_checkpoint = lease("mine-a1", "e1-a1")
    with_checkpoint["metadata"]["annotations"] = {"cronoq.io/checkpoint": '{"done":1}'}
    wait_until(lambda: "may renew only the Lease of its own attempt" in refusal(
        lambda: mine.create_namespaced_lease(namespace, {**with_checkpoint, "metadata": {
            **with_checkpoint["metadata"], "name": "other-a2"}})),
        timeout=30, what="the policy to be enforced")
    created = mine.create_namespaced_lease(namespace, with_checkpoint)
    assert created.metadata.annotations == {"cronoq.io/checkpoint": '{"done":1}'}

    def save(name: str, annotations: dict) -> str:
        patch = [{"op": "test", "path": "/spec/holderIdentity", "value": "e1-a1"},
                 {"op": "add", "path": "/spec/renewTime", "value": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
                 {"op": "add", "path": "/metadata/annotations", "value": annotations}]
        return refusal(lambda: mine.patch_namespaced_lease(name, namespace, patch,
                                                           _content_type="application/json-patch+json"))

    assert save("mine-a1", {"cronoq.io/checkpoint": '{"done":2}'}) == ""
    assert admin_leases.read_namespaced_lease("mine-a1", namespace).metadata.annotations["cronoq.io/checkpoint"] == '{"done":2}'
    assert "may renew only the Lease of its own attempt" in save("other-a1", {"cronoq.io/checkpoint": '{"forged":1}'})
    assert "is over 4096 bytes" in save("mine-a1", {"cronoq.io/checkpoint": '"' + "x" * 4095 + '"'})
    assert "only spec.renewTime and the checkpoint" in save("mine-a1", {"cronoq.io/checkpoint": "{}", "x": "y"})
    assert "only spec.renewTime and the checkpoint" in save("mine-a1", {"cronoq.io/report": '{"outcome":"success"}'})
    # Another annotation set by someone else stays the pod's to keep, never to drop or change.
    admin_leases.patch_namespaced_lease("mine-a1", namespace, {"metadata": {"annotations": {"x": "y"}}})
    assert "only spec.renewTime and the checkpoint" in save("mine-a1", {"cronoq.io/checkpoint": '{"done":3}'})
    assert save("mine-a1", {"cronoq.io/checkpoint": '{"done":3}', "x": "y"}) == ""
