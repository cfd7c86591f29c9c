"""The chart's pull-worker rights (issues 31 and 37), with real bound ServiceAccount tokens of kwok
pods and impersonated users: a worker's ServiceAccount reads its pool's Tasks, may serve only the
pools workers.pools names, and writes only worker and attempt Leases (the worker policy); whoever
writes a Lease that carries a worker's keys must be allowed to serve its pool, and what it says is
bounded (the lease guard). A real worker (`cronoq.worker.serve`) runs a task through both."""
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

from tests.chart import chart
from tests.chart.identity import as_service_account, as_token, refusal
from tests.support.operator import OperatorProcess
from tests.support.tasks import Cronoq
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

ACCOUNT = "pullworker"
GROUP, VERSION = "cronoq.io", "v1alpha1"


def apply_worker_rights(helm_binary, kubectl, namespace: str, grants: list[dict]) -> list[dict]:
    """The worker roles, their RoleBindings in the test's namespace, the worker policy and the lease
    guard, rendered from the chart with these workers.grants and applied (the ServiceAccounts too)."""
    rendered = chart.run_helm(helm_binary, "template", "wtest", str(chart.CHART), "--namespace=cronoq-system",
                              "--show-only=templates/worker-rbac.yaml", "--show-only=templates/worker-lease-policy.yaml",
                              "--show-only=templates/lease-guard-policy.yaml",
                              f"--set-json=workers.grants={json.dumps(grants)}",
                              f"--set-json=workers.namespaces={json.dumps([namespace])}").stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    for grant in grants:
        kubectl("create", "serviceaccount", grant["serviceAccount"], namespace=namespace)
    kubectl("apply", "-f", "-", input=rendered)
    return objects


def remove(kubectl, objects: list[dict]) -> None:
    for o in objects:
        if "namespace" not in o["metadata"]:
            kubectl("delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found", check=False)


@pytest.fixture
def worker_rights(helm_binary, kubectl, cronoq_crds, namespace):
    """The chart's worker rights with workers.grants=[{pullworker: [mail, default]}] (default: the
    pool the real worker serves); removed afterwards."""
    objects = apply_worker_rights(helm_binary, kubectl, namespace, [{"serviceAccount": ACCOUNT, "pools": ["mail", "default"]}])
    assert sorted(o["kind"] for o in objects) == ["ClusterRole", "ClusterRole", "RoleBinding", "RoleBinding",
                                                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy",
                                                  "ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding"]
    yield objects
    remove(kubectl, objects)


def worker_pod(api, namespace: str, pod_name: str, account: str = ACCOUNT) -> client.V1Pod:
    return client.CoreV1Api(api).create_namespaced_pod(namespace, {
        "metadata": {"name": pod_name, "annotations": {"kwok.cronoq.io/outcome": "Run"}},
        "spec": {"serviceAccountName": account, "containers": [{"name": "worker", "image": "example.invalid/w:1"}]}})


def pod_token(api, kubectl, namespace: str, pod_name: str, account: str = ACCOUNT) -> str:
    """A real token of the worker ServiceAccount bound to a (new) kwok pod: it carries the pod-name claim."""
    pod = worker_pod(api, namespace, pod_name, account)
    return kubectl("create", "token", account, "--bound-object-kind=Pod", f"--bound-object-name={pod_name}",
                   f"--bound-object-uid={pod.metadata.uid}", "--duration=10m", namespace=namespace).stdout.strip()


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def worker_lease(name: str, holder: str | None = None, pool: str = "mail", capacity: str = "4",
                 duration: int = 15) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": {"cronoq.io/worker-pool": pool},
                         "annotations": {"cronoq.io/capacity": capacity}},
            "spec": {"holderIdentity": holder or name, "leaseDurationSeconds": duration, "renewTime": now()}}


def attempt_lease(task: dict, worker: str, report: str | None = None, holder: str = "e1-a1",
                  name: str | None = None, pool: str = "mail") -> dict:
    task_name, uid = task["metadata"]["name"], task["metadata"]["uid"]
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name or f"{task_name}-a1.{worker}", "labels": {
                "cronoq.io/task-uid": uid, "cronoq.io/task": task_name, "cronoq.io/attempt": "1",
                "cronoq.io/lease-id": "e1-a1", "cronoq.io/worker": worker, "cronoq.io/pool": pool},
                "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "name": task_name, "uid": uid}]},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30, "renewTime": now()}}
    if report is not None:
        body["metadata"]["annotations"] = {"cronoq.io/report": report}
    return body


def json_patch(leases: client.CoordinationV1Api, namespace: str, name: str, ops: list[dict]):
    return leases.patch_namespaced_lease(name, namespace, ops, _content_type="application/json-patch+json")


def make_task(api, namespace: str, name: str) -> dict:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
            "spec": {"pool": "mail", "payload": {}}}
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", body)


def enforced(api, namespace: str, mine: client.CoordinationV1Api, body: dict, words: str) -> None:
    """Wait for a fresh policy to be enforced: until `body` is refused with `words`."""
    admin = client.CoordinationV1Api(api)

    def refused() -> bool:
        said = refusal(lambda: mine.create_namespaced_lease(namespace, body))
        if not said:  # not enforced yet, and it went through: take it back, so the next try is judged anew
            admin.delete_namespaced_lease(body["metadata"]["name"], namespace)
        return words in said

    wait_until(refused, timeout=30, what=f"the policy to refuse {body['metadata']['name']} ({words})")


ME, OTHER = "mail-7d9f-x2k4q-a1b2c3", "mail-7d9f-q8w3e-d4e5f6"


def test_a_worker_writes_its_own_leases_and_no_other(api, kubectl, namespace, worker_rights):
    admin = client.CoordinationV1Api(api)
    mine = client.CoordinationV1Api(as_token(api, pod_token(api, kubectl, namespace, "mail-7d9f-x2k4q")))
    me, other = ME, OTHER
    enforced(api, namespace, mine, worker_lease(other), "(own worker)")
    enforced(api, namespace, mine, {"metadata": {"name": me + "-x"}, "spec": {"holderIdentity": me}}, "(lease kind)")
    # Prefixes do not stretch: pod `mail-7d9f` is not pod `mail-7d9f-x2k4q`.
    assert "(own worker)" in refusal(lambda: mine.create_namespaced_lease(namespace, worker_lease("mail-7d9f-x2k4q-x-a1b2c3")))

    # Its own worker Lease: created, renewed (as serve.py does), drained (room 0), deleted.
    assert "(worker holder)" in refusal(lambda: mine.create_namespaced_lease(namespace, worker_lease(me, holder="e1-a1")))
    mine.create_namespaced_lease(namespace, worker_lease(me))
    json_patch(mine, namespace, me, [{"op": "test", "path": "/spec/holderIdentity", "value": me},
                                     {"op": "add", "path": "/spec/renewTime", "value": now()}])
    mine.patch_namespaced_lease(me, namespace, {"metadata": {"annotations": {"cronoq.io/capacity": "0"}}})
    moved = refusal(lambda: mine.patch_namespaced_lease(
        me, namespace, {"metadata": {"labels": {"cronoq.io/worker-pool": "default"}}}))  # a pool it may serve too
    assert "(update)" in moved, moved
    taken = refusal(lambda: mine.patch_namespaced_lease(me, namespace, {"spec": {"holderIdentity": other}}))
    assert "(worker holder)" in taken or "(update)" in taken, taken
    assert "(no finalizers)" in refusal(lambda: mine.patch_namespaced_lease(
        me, namespace, {"metadata": {"finalizers": ["example.com/keep"]}}))

    # Attempt Leases: named for and labelled with its own worker name, held by their lease id, report bounded.
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
    long_lease = f"long-a1.{me}"
    mine.create_namespaced_lease(namespace, attempt_lease(long, me))  # the first heartbeat, then the report
    holder = {"op": "test", "path": "/spec/holderIdentity", "value": "e1-a1"}
    assert "(report size)" in refusal(lambda: json_patch(mine, namespace, long_lease, [
        holder, {"op": "add", "path": "/metadata/annotations", "value": {"cronoq.io/report": big}}]))
    json_patch(mine, namespace, long_lease, [holder, {"op": "add", "path": "/metadata/annotations",
                                                      "value": {"cronoq.io/report": report}}])
    assert admin.read_namespaced_lease(long_lease, namespace).metadata.annotations["cronoq.io/report"] == report
    # Issue 40: the attempt's checkpoint rides on the same Lease, bounded like its report.
    checkpoint = json.dumps({"done": "é" * 1000}, ensure_ascii=False)
    json_patch(mine, namespace, long_lease, [holder, {"op": "add", "path": "/metadata/annotations",
                                                      "value": {"cronoq.io/checkpoint": checkpoint, "cronoq.io/report": report}}])
    assert "(checkpoint size)" in refusal(lambda: json_patch(mine, namespace, long_lease, [
        holder, {"op": "add", "path": "/metadata/annotations",
                 "value": {"cronoq.io/checkpoint": json.dumps("é" * 2100, ensure_ascii=False), "cronoq.io/report": report}}]))
    # An update changes no label (its worker's name, its lease id) and no holder, even to names of its own.
    renamed = refusal(lambda: mine.patch_namespaced_lease(
        long_lease, namespace, {"metadata": {"labels": {"cronoq.io/worker": "mail-7d9f-x2k4q-zzzzzz"}}}))
    assert "(attempt name)" in renamed or "(update)" in renamed, renamed
    assert "(update)" in refusal(lambda: mine.patch_namespaced_lease(
        long_lease, namespace, {"metadata": {"labels": {"cronoq.io/lease-id": "e1-a2"}}, "spec": {"holderIdentity": "e1-a2"}}))

    # Deleting an attempt Lease or another worker's Lease is refused; its own worker Lease it may delete.
    admin.create_namespaced_lease(namespace, worker_lease(other))
    assert "(delete)" in refusal(lambda: mine.delete_namespaced_lease(other, namespace))
    assert "(delete)" in refusal(lambda: mine.delete_namespaced_lease(long_lease, namespace))
    mine.delete_namespaced_lease(me, namespace)

    # A token of the worker ServiceAccount bound to no pod: no pod-name claim, refused (fail closed).
    unbound = client.CoordinationV1Api(as_token(api, kubectl("create", "token", ACCOUNT, "--duration=10m",
                                                              namespace=namespace).stdout.strip()))
    assert "(pod-bound token)" in refusal(lambda: unbound.create_namespaced_lease(namespace, worker_lease(me)))


def test_a_worker_serves_only_the_pools_it_is_granted_with_the_room_and_life_it_announced(
        api, kubectl, namespace, worker_rights):
    """Issue 37, point 1: a worker granted pool `mail` (workers.pools) cannot announce itself for
    `payments`, and cannot raise its room or lengthen its Lease's duration once announced."""
    mine = client.CoordinationV1Api(as_token(api, pod_token(api, kubectl, namespace, "mail-7d9f-x2k4q")))
    enforced(api, namespace, mine, worker_lease(ME, pool="payments", capacity="1000000", duration=2**31 - 1), "(serve)")
    said = refusal(lambda: mine.create_namespaced_lease(namespace, worker_lease(ME, pool="payments")))
    assert f"system:serviceaccount:{namespace}:{ACCOUNT} may not serve pool payments" in said, said
    payments = make_task(api, namespace, "pay")
    assert "(serve)" in refusal(lambda: mine.create_namespaced_lease(
        namespace, attempt_lease(payments, ME, '{"outcome":"success"}', pool="payments")))
    assert "(serve)" in refusal(lambda: mine.create_namespaced_lease(
        namespace, attempt_lease(payments, ME, '{"outcome":"success"}', pool="")))  # no pool named: none served

    mine.create_namespaced_lease(namespace, worker_lease(ME, capacity="4"))
    assert "(capacity)" in refusal(lambda: mine.patch_namespaced_lease(
        ME, namespace, {"metadata": {"annotations": {"cronoq.io/capacity": "1000000"}}}))
    assert "(capacity)" in refusal(lambda: mine.patch_namespaced_lease(
        ME, namespace, {"metadata": {"annotations": {"cronoq.io/capacity": "lots"}}}))
    assert "(update)" in refusal(lambda: mine.patch_namespaced_lease(
        ME, namespace, {"spec": {"leaseDurationSeconds": 2**31 - 1}}))
    mine.patch_namespaced_lease(ME, namespace, {"metadata": {"annotations": {"cronoq.io/capacity": "1"}}})  # down: fine


def test_a_worker_serves_only_the_pools_of_its_own_grant_and_none_without_one(
        api, kubectl, helm_binary, cronoq_crds, namespace):
    """Issue 49, finding 7: grants per worker, closed by default. `thumbs-worker`, granted pool
    thumbs (workers.grants), may announce itself for thumbs but not for payments, nor write an
    attempt Lease of payments; `idle-worker`, listed without pools, serves none."""
    objects = apply_worker_rights(helm_binary, kubectl, namespace, [
        {"serviceAccount": "thumbs-worker", "pools": ["thumbs"]}, {"serviceAccount": "idle-worker"}])
    try:
        thumbs = client.CoordinationV1Api(as_token(api, pod_token(api, kubectl, namespace, "thumbs-6c4f-x2k4q",
                                                                  "thumbs-worker")))
        idle = client.CoordinationV1Api(as_token(api, pod_token(api, kubectl, namespace, "idle-6c4f-x2k4q", "idle-worker")))
        me, lazy = "thumbs-6c4f-x2k4q-a1b2c3", "idle-6c4f-x2k4q-a1b2c3"
        enforced(api, namespace, thumbs, worker_lease(me, pool="payments"), "(serve)")
        said = refusal(lambda: thumbs.create_namespaced_lease(namespace, worker_lease(me, pool="payments")))
        assert f"system:serviceaccount:{namespace}:thumbs-worker may not serve pool payments" in said, said
        payments = make_task(api, namespace, "pay")
        assert "(serve)" in refusal(lambda: thumbs.create_namespaced_lease(
            namespace, attempt_lease(payments, me, '{"outcome":"success"}', pool="payments")))
        created = thumbs.create_namespaced_lease(namespace, worker_lease(me, pool="thumbs"))
        assert created.metadata.labels == {"cronoq.io/worker-pool": "thumbs"}
        for pool in ("thumbs", "payments", "default"):
            said = refusal(lambda: idle.create_namespaced_lease(namespace, worker_lease(lazy, pool=pool)))
            assert f"system:serviceaccount:{namespace}:idle-worker may not serve pool {pool}" in said, said
        # Both still read their pools' Tasks (the worker role), and the worker policy judges both.
        assert "(lease kind)" in refusal(lambda: idle.create_namespaced_lease(
            namespace, {"metadata": {"name": "app-leader"}, "spec": {"holderIdentity": "x"}}))
    finally:
        remove(kubectl, objects)


def test_no_other_lease_writer_can_report_or_squat_an_attempt(api, kubectl, namespace, worker_rights):
    """Issue 37, points 2 and 5. A user with Kubernetes' own `edit` role (which writes Leases),
    impersonated, can neither create an attempt's Lease with a success report nor add one to the
    worker's; a second worker of the same pool cannot take the rightful worker's attempt Lease
    first, under its name or under its own label."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "mallory-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]})
    mine = client.CoordinationV1Api(as_token(api, pod_token(api, kubectl, namespace, "mail-7d9f-x2k4q")))
    second = client.CoordinationV1Api(as_token(api, pod_token(api, kubectl, namespace, "mail-7d9f-q8w3e")))
    task = make_task(api, namespace, "invoice")
    success = json.dumps({"outcome": "success", "output": "forged"})
    enforced(api, namespace, second, attempt_lease(task, OTHER, success, name=f"invoice-a1.{ME}"), "(attempt name)")
    assert "(own worker)" in refusal(lambda: second.create_namespaced_lease(namespace, attempt_lease(task, ME, success)))
    rightful = mine.create_namespaced_lease(namespace, attempt_lease(task, ME))
    assert rightful.metadata.name == f"invoice-a1.{ME}"

    forged = json.dumps(attempt_lease(task, ME, success, name=f"invoice-a1.{ME}-2"))
    made = kubectl("create", "--as=mallory", "-f", "-", namespace=namespace, input=forged, check=False)
    assert made.returncode != 0 and "cronoq lease guard (serve): mallory may not serve pool mail" in made.stderr, made.stderr
    as_job = attempt_lease(task, ME, success, name="invoice-a1")
    made = kubectl("create", "--as=mallory", "-f", "-", namespace=namespace, input=json.dumps(as_job), check=False)
    assert made.returncode != 0 and "(serve)" in made.stderr, made.stderr
    patched = kubectl("annotate", "--as=mallory", "lease", f"invoice-a1.{ME}", f"cronoq.io/report={success}",
                      namespace=namespace, check=False)
    assert patched.returncode != 0 and "(serve)" in patched.stderr, patched.stderr
    # Mallory still writes Leases that are none of cronoq's business (an application's leader election).
    kubectl("create", "--as=mallory", "-f", "-", namespace=namespace, input=json.dumps(
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "app-leader"},
         "spec": {"holderIdentity": "app-0"}}))


def test_the_worker_role_reads_its_pool_and_writes_no_workload(kubectl, namespace, worker_rights, tmp_path):
    worker = as_service_account(kubectl, namespace, ACCOUNT, tmp_path / "worker.kubeconfig")

    def can(*args: str) -> bool:
        answer = worker("auth", "can-i", *args, namespace=namespace, check=False).stdout.strip()
        assert answer in ("yes", "no"), answer
        return answer == "yes"

    for verb in ("get", "list", "watch"):
        assert can(verb, "tasks.cronoq.io")
    assert can("get", "taskpools.cronoq.io")
    assert can("serve", "taskpools.cronoq.io/mail") and not can("serve", "taskpools.cronoq.io/payments")
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
        # Issue 40: attempt 1 saves a checkpoint and fails (one write: its Lease, report and checkpoint);
        # attempt 2, on the same worker or another, starts from it (ctx.checkpoint_data).
        cq.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "resume"},
            "spec": {"pool": "default", "payload": {"checkpoint": True, "echo": "resume"},
                     "retry": {"maxAttempts": 2, "initialBackoff": "0s"}}})
        resumed = cq.wait_phase("resume", "Succeeded", timeout=60)
        assert json.loads(resumed["output"])["resumed"] == {"savedBy": 1}
        assert (resumed["checkpoint"]["attempt"], resumed["checkpoint"]["data"]) == (1, '{"savedBy":1}')
        for name in ("quick", "slow"):
            status = cq.wait_phase(name, "Succeeded", timeout=60)
            (attempt,) = status["attempts"]
            assert attempt["worker"].startswith("w" * 55 + "-") and len(attempt["worker"]) == 62, attempt
            assert json.loads(status["output"])["echo"] == name
        quick, slow = (leases.read_namespaced_lease(f"{name}-a1.{cq.status(name)['attempts'][0]['worker']}", namespace)
                       for name in ("quick", "slow"))
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


def test_the_operator_hands_workers_nothing_until_the_lease_guard_is_in_force(
        api, kubectl, kubeconfig, helm_binary, cronoq_crds, namespace, tmp_path):
    """Issue 37: fail closed. Without the lease guard any Lease writer could pose as a worker, so
    an operator not told to trust worker Leases hands a live worker nothing and its pool's Ready
    condition says why; with the guard installed (the name the chart passes), the same worker
    serves the task."""
    rendered = chart.run_helm(helm_binary, "template", "gtest", str(chart.CHART), "--namespace=cronoq-system",
                              "--show-only=templates/lease-guard-policy.yaml").stdout
    guard = [d for d in yaml.safe_load_all(rendered) if d]
    name = guard[0]["metadata"]["name"]
    assert name == "cronoq-system-gtest-cronoq-lease-guard"
    root = Path(chart.REPO)
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.support.pull_worker", "default", "w-local", str(tmp_path / "journal.jsonl")],
        cwd=root, stdout=(tmp_path / "worker.log").open("ab"), stderr=subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": kubeconfig, "CRONOQ_NAMESPACE": namespace,
             "PYTHONPATH": f"{root}:{root / 'operator'}"})

    def operator() -> OperatorProcess:
        return OperatorProcess(kubeconfig, (namespace,), tmp_path / "operator.log", trust_worker_leases=False,
                               extra_args=(f"--lease-guard={name}",)).start()

    def ready(cq: Cronoq) -> dict:
        pool = cq.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "taskpools", "default")
        return next((c for c in (pool.get("status") or {}).get("conditions", ()) if c["type"] == "Ready"), {})

    unguarded = operator()
    try:
        cq = Cronoq(api, namespace, unguarded)
        cq.pool(delivery="Workers", retry={"maxAttempts": 1})
        cq.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": "held"},
            "spec": {"pool": "default", "payload": {"echo": "held"}}})
        said = wait_until(lambda: (c := ready(cq)).get("reason") == "LeaseGuardMissing" and c, timeout=30,
                          what="the pool's Ready condition to say the lease guard is missing")
        assert said["status"] == "False" and "--trust-worker-leases" in said["message"], said
        wait_until(lambda: client.CoordinationV1Api(api).list_namespaced_lease(
            namespace, label_selector="cronoq.io/worker-pool").items, timeout=30, what="the worker's Lease")
        status = cq.wait_status("held", lambda s: s.get("phase") == "Queued" and s, what="the task queued")
        assert not status.get("attempts") and unguarded.metric("cronoq_workers", namespace=namespace, pool="default") == 0, status
        unguarded.stop()
        kubectl("apply", "-f", "-", input=rendered)
        guarded = operator()
        try:
            done = Cronoq(api, namespace, guarded).wait_phase("held", "Succeeded", timeout=60)
            assert done["attempts"][0]["worker"] == "w-local"
            wait_until(lambda: ready(cq).get("reason") == "Admitting", timeout=30, what="the pool Ready again")
        finally:
            guarded.stop()
    finally:
        unguarded.stop()
        worker.kill()
        worker.wait(10)
        for o in guard:
            kubectl("delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found", check=False)
