"""The chart's pull-worker rights (issue 31, "Rights"), with real bound ServiceAccount tokens of
kwok pods: a worker's ServiceAccount reads its pool's Tasks and writes only its own worker Lease
and the attempt Leases it runs (the worker policy), and has no Job, pod, Secret or Task-write
rights (the worker role). A real worker (`cronoq.worker.serve`) runs a task through both."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.chart import chart
from tests.chart.identity import as_service_account
from tests.support.operator import OperatorProcess
from tests.support.tasks import Cronoq
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

ACCOUNT = "pullworker"
GROUP, VERSION = "cronoq.io", "v1alpha1"


@pytest.fixture
def worker_rights(helm_binary, kubectl, cronoq_crds, namespace):
    """The worker role, its RoleBinding in the test's namespace and the worker policy, rendered
    from the chart with workers.serviceAccounts=[pullworker] and applied; removed afterwards."""
    rendered = chart.run_helm(helm_binary, "template", "wtest", str(chart.CHART), "--namespace=cronoq-system",
                              "--show-only=templates/worker-rbac.yaml", "--show-only=templates/worker-lease-policy.yaml",
                              f"--set-json=workers.serviceAccounts={json.dumps([ACCOUNT])}",
                              f"--set-json=workers.namespaces={json.dumps([namespace])}").stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    assert {o["kind"] for o in objects} == {"ClusterRole", "RoleBinding", "ValidatingAdmissionPolicy",
                                            "ValidatingAdmissionPolicyBinding"}
    kubectl("create", "serviceaccount", ACCOUNT, namespace=namespace)
    kubectl("apply", "-f", "-", input=rendered)
    yield objects
    for o in objects:
        if "namespace" not in o["metadata"]:
            kubectl("delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found", check=False)


def worker_pod(api, namespace: str, pod_name: str) -> client.V1Pod:
    return client.CoreV1Api(api).create_namespaced_pod(namespace, {
        "metadata": {"name": pod_name, "annotations": {"kwok.cronoq.io/outcome": "Run"}},
        "spec": {"serviceAccountName": ACCOUNT, "containers": [{"name": "worker", "image": "example.invalid/w:1"}]}})


def pod_token(api, kubectl, namespace: str, pod_name: str) -> str:
    """A real token of the worker ServiceAccount bound to a (new) kwok pod: it carries the pod-name claim."""
    pod = worker_pod(api, namespace, pod_name)
    return kubectl("create", "token", ACCOUNT, "--bound-object-kind=Pod", f"--bound-object-name={pod_name}",
                   f"--bound-object-uid={pod.metadata.uid}", "--duration=10m", namespace=namespace).stdout.strip()


def as_token(api, token: str) -> client.ApiClient:
    admin = api.configuration
    conf = client.Configuration(host=admin.host, api_key={"authorization": f"Bearer {token}"})
    conf.ssl_ca_cert = admin.ssl_ca_cert
    return client.ApiClient(conf)


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def worker_lease(name: str, holder: str | None = None) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": {"cronoq.io/worker-pool": "mail"},
                         "annotations": {"cronoq.io/capacity": "4"}},
            "spec": {"holderIdentity": holder or name, "leaseDurationSeconds": 15, "renewTime": now()}}


def attempt_lease(task: dict, worker: str, report: str | None = None, holder: str = "e1-a1") -> dict:
    name, uid = task["metadata"]["name"], task["metadata"]["uid"]
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": f"{name}-a1", "labels": {
                "cronoq.io/task-uid": uid, "cronoq.io/task": name, "cronoq.io/attempt": "1",
                "cronoq.io/lease-id": "e1-a1", "cronoq.io/worker": worker},
                "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "name": name, "uid": uid}]},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30, "renewTime": now()}}
    if report is not None:
        body["metadata"]["annotations"] = {"cronoq.io/report": report}
    return body


def json_patch(leases: client.CoordinationV1Api, namespace: str, name: str, ops: list[dict]):
    return leases.patch_namespaced_lease(name, namespace, ops, _content_type="application/json-patch+json")


def refusal(call) -> str:
    """The API server's refusal of `call()`, or '' when it was allowed."""
    try:
        call()
    except ApiException as err:
        assert err.status in (403, 422), err.body
        return err.body
    return ""


def make_task(api, namespace: str, name: str) -> dict:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
            "spec": {"pool": "mail", "payload": {}}}
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", body)


def test_a_worker_writes_its_own_leases_and_no_other(api, kubectl, namespace, worker_rights):
    admin = client.CoordinationV1Api(api)
    mine = client.CoordinationV1Api(as_token(api, pod_token(api, kubectl, namespace, "mail-7d9f-x2k4q")))
    me, other = "mail-7d9f-x2k4q-a1b2c3", "mail-7d9f-q8w3e-d4e5f6"
    # A fresh policy takes a moment to be enforced: wait for its first refusal.
    def refused_other() -> bool:
        said = refusal(lambda: mine.create_namespaced_lease(namespace, worker_lease(other)))
        if not said:  # not enforced yet, and it went through: take it back, so the next try is judged anew
            admin.delete_namespaced_lease(other, namespace)
        return "(own worker)" in said

    wait_until(refused_other, timeout=30, what="the worker policy to refuse another pod's worker Lease")
    # Prefixes do not stretch: pod `mail-7d9f` is not pod `mail-7d9f-x2k4q`.
    assert "(own worker)" in refusal(lambda: mine.create_namespaced_lease(namespace, worker_lease("mail-7d9f-x2k4q-x-a1b2c3")))

    # Its own worker Lease: created, renewed (as serve.py does), drained (room 0), deleted.
    assert "(worker holder)" in refusal(lambda: mine.create_namespaced_lease(namespace, worker_lease(me, holder="e1-a1")))
    mine.create_namespaced_lease(namespace, worker_lease(me))
    json_patch(mine, namespace, me, [{"op": "test", "path": "/spec/holderIdentity", "value": me},
                                     {"op": "add", "path": "/spec/renewTime", "value": now()}])
    mine.patch_namespaced_lease(me, namespace, {"metadata": {"annotations": {"cronoq.io/capacity": "0"}}})
    assert "(update)" in refusal(lambda: mine.patch_namespaced_lease(
        me, namespace, {"metadata": {"labels": {"cronoq.io/worker-pool": "other"}}}))
    taken = refusal(lambda: mine.patch_namespaced_lease(me, namespace, {"spec": {"holderIdentity": other}}))
    assert "(worker holder)" in taken or "(update)" in taken, taken
    assert "(no finalizers)" in refusal(lambda: mine.patch_namespaced_lease(
        me, namespace, {"metadata": {"finalizers": ["example.com/keep"]}}))

    # Attempt Leases: only labelled with its own worker name, held by their lease id, report bounded.
    short, long = make_task(api, namespace, "short"), make_task(api, namespace, "long")
    assert "(own worker)" in refusal(lambda: mine.create_namespaced_lease(namespace, attempt_lease(short, other, "{}")))
    assert "(attempt holder)" in refusal(lambda: mine.create_namespaced_lease(
        namespace, attempt_lease(short, me, "{}", holder="e1-a2")))
    big = json.dumps({"outcome": "success", "output": "é" * 2100}, ensure_ascii=False)  # fewer than 4096 characters, more bytes
    assert len(big) < 4096 < len(big.encode())
    assert "(report size)" in refusal(lambda: mine.create_namespaced_lease(namespace, attempt_lease(short, me, big)))
    report = json.dumps({"outcome": "success", "output": "é" * 1000}, ensure_ascii=False)
    created = mine.create_namespaced_lease(namespace, attempt_lease(short, me, report))  # one write: lease and report
    assert created.metadata.annotations["cronoq.io/report"] == report
    stranger = attempt_lease(long, me)
    stranger["metadata"]["ownerReferences"][0]["uid"] = short["metadata"]["uid"]
    assert "(attempt owner)" in refusal(lambda: mine.create_namespaced_lease(namespace, stranger))
    mine.create_namespaced_lease(namespace, attempt_lease(long, me))  # the first heartbeat, then the report
    holder = {"op": "test", "path": "/spec/holderIdentity", "value": "e1-a1"}
    assert "(report size)" in refusal(lambda: json_patch(mine, namespace, "long-a1", [
        holder, {"op": "add", "path": "/metadata/annotations", "value": {"cronoq.io/report": big}}]))
    json_patch(mine, namespace, "long-a1", [holder, {"op": "add", "path": "/metadata/annotations",
                                                     "value": {"cronoq.io/report": report}}])
    assert admin.read_namespaced_lease("long-a1", namespace).metadata.annotations["cronoq.io/report"] == report
    # An update changes no label (its worker's name, its lease id) and no holder, even to names of its own.
    assert "(update)" in refusal(lambda: mine.patch_namespaced_lease(
        "long-a1", namespace, {"metadata": {"labels": {"cronoq.io/worker": "mail-7d9f-x2k4q-zzzzzz"}}}))
    assert "(update)" in refusal(lambda: mine.patch_namespaced_lease(
        "long-a1", namespace, {"metadata": {"labels": {"cronoq.io/lease-id": "e1-a2"}}, "spec": {"holderIdentity": "e1-a2"}}))

    # Any other Lease is refused; so is deleting an attempt Lease or another worker's Lease.
    assert "(lease kind)" in refusal(lambda: mine.create_namespaced_lease(
        namespace, {"metadata": {"name": me + "-x"}, "spec": {"holderIdentity": me}}))
    admin.create_namespaced_lease(namespace, worker_lease(other))
    assert "(own worker)" in refusal(lambda: mine.delete_namespaced_lease(other, namespace))
    assert "(delete)" in refusal(lambda: mine.delete_namespaced_lease("long-a1", namespace))
    mine.delete_namespaced_lease(me, namespace)

    # A token of the worker ServiceAccount bound to no pod: no pod-name claim, refused (fail closed).
    unbound = client.CoordinationV1Api(as_token(api, kubectl("create", "token", ACCOUNT, "--duration=10m",
                                                              namespace=namespace).stdout.strip()))
    assert "(pod-bound token)" in refusal(lambda: unbound.create_namespaced_lease(namespace, worker_lease(me)))
    # The admin (and the operator) are none of the policy's business.
    admin.patch_namespaced_lease("long-a1", namespace, {"metadata": {"labels": {"cronoq.io/worker": "x"}}})


def test_the_worker_role_reads_its_pool_and_writes_no_workload(kubectl, namespace, worker_rights, tmp_path):
    worker = as_service_account(kubectl, namespace, ACCOUNT, tmp_path / "worker.kubeconfig")

    def can(*args: str) -> bool:
        answer = worker("auth", "can-i", *args, namespace=namespace, check=False).stdout.strip()
        assert answer in ("yes", "no"), answer
        return answer == "yes"

    for verb in ("get", "list", "watch"):
        assert can(verb, "tasks.cronoq.io")
    assert can("get", "taskpools.cronoq.io")
    for verb in ("get", "create", "update", "patch", "delete"):
        assert can(verb, "leases.coordination.k8s.io")
    for args in (("create", "jobs.batch"), ("create", "pods"), ("get", "secrets"), ("list", "secrets"),
                 ("create", "tasks.cronoq.io"), ("update", "tasks.cronoq.io"), ("patch", "tasks.cronoq.io"),
                 ("delete", "tasks.cronoq.io"), ("update", "tasks.cronoq.io", "--subresource=status"),
                 ("patch", "tasks.cronoq.io", "--subresource=status"), ("update", "taskpools.cronoq.io"),
                 ("list", "taskpools.cronoq.io"), ("create", "pods", "--subresource=exec"),
                 ("create", "serviceaccounts", "--subresource=token")):
        assert not can(*args), args
    # Nothing outside the worker namespaces.
    assert worker("get", "tasks.cronoq.io", namespace="default", check=False).returncode != 0


def test_a_real_worker_runs_a_task_through_the_policy(api, kubectl, kubeconfig, namespace, worker_rights, tmp_path):
    """cronoq.worker.serve, run with a kubeconfig holding a pod-bound token of the worker
    ServiceAccount, serves a Workers pool: its Lease, its attempts' heartbeats and reports all pass
    the policy. The pod name is cut at 56 characters on a dot, which the worker's name trims."""
    pod_name = "w" * 55 + ".pool-7d9f"
    token = pod_token(api, kubectl, namespace, pod_name)
    admin = json.loads(kubectl("config", "view", "--raw", "--minify", "--flatten", "-o", "json").stdout)
    (cluster,) = admin["clusters"]
    config = tmp_path / "worker.kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": "worker", "user": {"token": token}}],
        "contexts": [{"name": "worker", "context": {"cluster": cluster["name"], "user": "worker", "namespace": namespace}}],
        "current-context": "worker"}))
    config.chmod(0o600)
    operator = OperatorProcess(kubeconfig, (namespace,), tmp_path / "operator.log").start()
    root = Path(chart.REPO)
    log = tmp_path / "worker.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.pull_worker", "default", "", str(tmp_path / "journal.jsonl"), "2", "3"],
        cwd=root, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": str(config), "CRONOQ_NAMESPACE": namespace, "POD_NAME": pod_name,
             "PYTHONPATH": f"{root}:{root / 'operator'}"})
    try:
        cq = Cronoq(api, namespace, operator)
        cq.pool(delivery="Workers", leaseTTL="3s", retry={"maxAttempts": 1})
        leases = client.CoordinationV1Api(api)
        wait_until(lambda: leases.list_namespaced_lease(namespace, label_selector="cronoq.io/worker-pool").items,
                   timeout=30, what=f"the worker's Lease (log: {log})")
        for name, sleep in (("quick", 0.1), ("slow", 2.5)):  # report on create; heartbeats, then a report patch
            cq.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
                "spec": {"pool": "default", "payload": {"sleep": sleep, "echo": name}}})
        for name in ("quick", "slow"):
            status = cq.wait_phase(name, "Succeeded", timeout=60)
            (attempt,) = status["attempts"]
            assert attempt["worker"].startswith("w" * 55 + "-") and len(attempt["worker"]) == 62, attempt
            assert json.loads(status["output"])["echo"] == name
        quick, slow = (leases.read_namespaced_lease(f"{name}-a1", namespace) for name in ("quick", "slow"))
        assert quick.spec.renew_time == quick.spec.acquire_time, "one write: the Lease with its report"
        assert (slow.spec.renew_time - slow.spec.acquire_time).total_seconds() >= 0.5, "renewed after it was created"
        for lease in (quick, slow):
            assert json.loads(lease.metadata.annotations["cronoq.io/report"])["outcome"] == "success"
        assert "Forbidden" not in log.read_text() and "forbidden" not in log.read_text()
        proc.send_signal(2)  # SIGINT drains: room 0 on its Lease, then the Lease deleted
        assert proc.wait(30) == 0
        assert not leases.list_namespaced_lease(namespace, label_selector="cronoq.io/worker-pool").items
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        operator.stop()
