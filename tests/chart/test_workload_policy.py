"""The chart's user roles and workload policy, asked of the real API server with impersonated
users (issue 26, point 1): whoever may only enqueue work (a producer: cronoq-edit without the
right to create Jobs) may create Tasks that set only what the pool lets vary, and nothing that
defines a pod; an editor (the built-in `edit`, which cronoq-edit aggregates into) may."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.chart.chart import CHART
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

RELEASE = "wlpolicy"
RELEASE_NAMESPACE = "cronoq-system"
OPERATOR = f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}-cronoq"  # the chart's ServiceAccount
REFUSED = "cronoq workload policy"


@pytest.fixture(scope="module")
def policy(devcluster, kubectl, cronoq_crds):
    """The user roles, the workload policy and its binding, rendered from the chart and applied."""
    helm = str(devcluster.STATE / "bin" / "helm")
    rendered = subprocess.run([helm, "template", RELEASE, str(CHART), f"--namespace={RELEASE_NAMESPACE}",
                               "--show-only=templates/user-roles.yaml", "--show-only=templates/workload-policy.yaml"],
                              check=True, capture_output=True, text=True).stdout
    kubectl("apply", "-f", "-", input=rendered)
    objects = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(rendered) if d]
    yield objects
    for kind, name in objects:
        kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)


def bind(kubectl, namespace: str, user: str, role: str, kind: str = "ClusterRole") -> None:
    name = f"{user.rsplit(':', 1)[-1]}-{role}"
    subject = ({"kind": "ServiceAccount", "name": user.rsplit(":", 1)[-1], "namespace": user.split(":")[2]}
               if user.startswith("system:serviceaccount:") else
               {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"})
    kubectl("create", "-f", "-", namespace=namespace, input=json.dumps({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [subject]}))


def job_creator_role(kubectl, namespace: str) -> str:
    kubectl("create", "role", "job-creator", "--verb=create", "--resource=jobs.batch", namespace=namespace)
    return "job-creator"


def task(name: str, **spec) -> dict:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task",
            "metadata": {"name": name, "labels": {"team": "a"}}, "spec": spec}


def create_as(kubectl, user: str, namespace: str, body: dict) -> subprocess.CompletedProcess:
    return kubectl("create", f"--as={user}", "-f", "-", namespace=namespace, input=json.dumps(body), check=False)


def refused(result: subprocess.CompletedProcess, *words: str) -> bool:
    return result.returncode != 0 and all(w in result.stderr for w in words)


TEMPLATE = {"spec": {"containers": [{"name": "task", "image": "example.invalid/mine:1"}],
                     "serviceAccountName": "deployer"}}
PRODUCED = {"pool": "queue", "payload": {"order": 42}, "priority": 5, "key": "order-42",
            "dependsOn": [{"task": "first"}]}


def test_producer_enqueues_payloads_but_cannot_define_the_pod(kubectl, namespace, policy):
    producer, editor = "producer@example.com", "editor@example.com"
    bind(kubectl, namespace, producer, "cronoq-edit")
    bind(kubectl, namespace, editor, "edit")  # the built-in role: cronoq-edit aggregates into it
    # A fresh policy takes a moment to be enforced: wait until the first refusal is seen.
    wait_until(lambda: refused(create_as(kubectl, producer, namespace, task("pod", template=TEMPLATE)),
                               REFUSED, "not spec.template", "may set only spec.pool, spec.payload"),
               timeout=30, what="the workload policy to refuse a producer's pod template")
    assert refused(create_as(kubectl, producer, namespace, task("image", image="example.invalid/mine:1",
                                                                serviceAccountName="deployer")),
                   REFUSED, "spec.image", "spec.serviceAccountName")
    assert refused(create_as(kubectl, producer, namespace, task("push", http={"url": "https://example.invalid/"})),
                   REFUSED, "spec.http")
    admitted = create_as(kubectl, producer, namespace, task("payload", **PRODUCED))
    assert admitted.returncode == 0, admitted.stderr
    stored = json.loads(kubectl("get", "task", "payload", "-o", "json", namespace=namespace).stdout)
    assert stored["spec"]["payload"] == {"order": 42} and stored["metadata"]["labels"] == {"team": "a"}
    # The editor may create Jobs in the namespace, so may define the pod.
    admitted = create_as(kubectl, editor, namespace, task("editors", template=TEMPLATE))
    assert admitted.returncode == 0, admitted.stderr


def test_a_producers_payload_task_runs_on_the_pod_its_pool_defines(kubectl, kubeconfig, namespace, policy, tmp_path):
    """Enqueued by a producer, run to the end: the pool (written by an admin) alone defines the pod."""
    from tests.support.operator import OperatorProcess

    producer = "producer@example.com"
    bind(kubectl, namespace, producer, "cronoq-edit")
    kubectl("create", "-f", "-", namespace=namespace, input=json.dumps({
        "apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool", "metadata": {"name": "orders"},
        "spec": {"template": {"image": "example.invalid/orders:1", "podMetadata": {"annotations": {
            "kwok.cronoq.io/outcome": "Succeed", "kwok.cronoq.io/message": "order done"}}}}}))
    wait_until(lambda: refused(create_as(kubectl, producer, namespace, task("pod", template=TEMPLATE)), REFUSED),
               timeout=30, what="the workload policy enforced")
    admitted = create_as(kubectl, producer, namespace, task("order-7", pool="orders", payload={"order": 7}))
    assert admitted.returncode == 0, admitted.stderr

    operator = OperatorProcess(kubeconfig, (namespace,), tmp_path / "operator.log").start()
    try:
        def succeeded():
            status = json.loads(kubectl("get", "task", "order-7", "-o", "json", namespace=namespace).stdout).get("status") or {}
            return status if status.get("phase") == "Succeeded" else None

        status = wait_until(succeeded, timeout=60, what="the producer's task succeeded")
    finally:
        operator.stop()
    assert status["output"] == "order done"
    job = json.loads(kubectl("get", "job", status["attempts"][0]["job"], "-o", "json", namespace=namespace).stdout)
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "example.invalid/orders:1"


def test_producer_schedules_only_what_a_producer_may_enqueue(kubectl, namespace, policy):
    producer = "producer@example.com"
    bind(kubectl, namespace, producer, "cronoq-edit")

    def schedule(name: str, **spec) -> dict:
        return {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule", "metadata": {"name": name},
                "spec": {"every": "1h", "taskTemplate": {"spec": spec}}}

    wait_until(lambda: refused(create_as(kubectl, producer, namespace, schedule("pod", template=TEMPLATE)),
                               REFUSED, "TaskSchedule task template", "not spec.template"),
               timeout=30, what="the workload policy to refuse a producer's schedule with a pod template")
    admitted = create_as(kubectl, producer, namespace, schedule("payload", pool="queue", payload={"n": 1}))
    assert admitted.returncode == 0, admitted.stderr
    # Updating the schedule to define a pod is refused as creating it would be.
    patched = kubectl("patch", f"--as={producer}", "taskschedule", "payload", "--type=merge", "-p",
                      json.dumps({"spec": {"taskTemplate": {"spec": {"image": "example.invalid/mine:1"}}}}),
                      namespace=namespace, check=False)
    assert refused(patched, REFUSED, "spec.image"), patched.stderr


def test_pools_need_job_rights_and_secret_headers_need_the_secret(kubectl, namespace, policy):
    pool_writer, admin, pusher = "pool-writer@example.com", "admin@example.com", "pusher@example.com"
    bind(kubectl, namespace, pool_writer, "cronoq-admin")  # may write pools, may not create Jobs
    bind(kubectl, namespace, admin, "admin")
    bind(kubectl, namespace, pusher, "cronoq-edit")
    bind(kubectl, namespace, pusher, job_creator_role(kubectl, namespace), kind="Role")  # Jobs, no Secrets
    pool = {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool", "metadata": {"name": "queue"},
            "spec": {"template": {"image": "example.invalid/worker:1"}}}
    wait_until(lambda: refused(create_as(kubectl, pool_writer, namespace, pool), REFUSED, "writing a TaskPool"),
               timeout=30, what="the workload policy to refuse a pool from a user without Job rights")
    admitted = create_as(kubectl, admin, namespace, pool)
    assert admitted.returncode == 0, admitted.stderr
    changed = kubectl("patch", f"--as={pool_writer}", "taskpool", "queue", "--type=merge", "-p",
                      '{"spec":{"concurrency":1}}', namespace=namespace, check=False)
    assert refused(changed, REFUSED, "writing a TaskPool"), changed.stderr

    headers = [{"name": "X-Trace", "value": "1"},
               {"name": "Authorization", "secretKeyRef": {"name": "api-token", "key": "token"}}]
    push = task("push", http={"url": "https://example.invalid/hook", "headers": headers})
    assert refused(create_as(kubectl, pusher, namespace, push), REFUSED, "Secret the user may get", "secret api-token")
    push["metadata"]["name"] = "push-by-admin"
    admitted = create_as(kubectl, admin, namespace, push)
    assert admitted.returncode == 0, admitted.stderr
    # The operator is exempt: its schedule fires carry the schedule's headers, and it may not
    # read Secrets.
    bind(kubectl, namespace, OPERATOR, "cronoq-edit")
    push["metadata"]["name"] = "push-fired"
    admitted = create_as(kubectl, OPERATOR, namespace, push)
    assert admitted.returncode == 0, admitted.stderr


def test_a_pools_notification_signing_key_needs_the_secret(kubectl, namespace, policy):
    writer, admin = "pool-admin@example.com", "admin@example.com"
    bind(kubectl, namespace, writer, "cronoq-admin")
    bind(kubectl, namespace, writer, job_creator_role(kubectl, namespace), kind="Role")  # Jobs, no Secrets
    bind(kubectl, namespace, admin, "admin")
    receivers = [{"name": "plain", "url": "https://hooks.example.invalid/a", "outcomes": ["Failed"]},
                 {"name": "signed", "url": "https://hooks.example.invalid/b", "outcomes": ["DeadLettered"],
                  "signingKey": {"name": "hook-hmac", "key": "hmac"}}]
    pool = {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool", "metadata": {"name": "alerts"},
            "spec": {"notifications": receivers}}
    wait_until(lambda: refused(create_as(kubectl, writer, namespace, pool), REFUSED, "signingKey",
                               "Secret the user may get", "secret hook-hmac"),
               timeout=30, what="the workload policy to refuse a signing key its writer may not read")
    pool["spec"]["notifications"] = receivers[:1]
    admitted = create_as(kubectl, writer, namespace, pool)
    assert admitted.returncode == 0, admitted.stderr
    pool["metadata"]["name"] = "alerts-by-admin"
    pool["spec"]["notifications"] = receivers
    admitted = create_as(kubectl, admin, namespace, pool)
    assert admitted.returncode == 0, admitted.stderr


def test_the_operator_creates_only_jobs_a_task_controls(kubectl, namespace, policy):
    bind(kubectl, namespace, OPERATOR, job_creator_role(kubectl, namespace), kind="Role")

    def job(owners: list[dict]) -> dict:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe", "ownerReferences": owners},
                "spec": {"template": {"spec": {"restartPolicy": "Never",
                                               "containers": [{"name": "x", "image": "example.invalid/x:1"}]}}}}

    def create(owners: list[dict]) -> subprocess.CompletedProcess:
        return kubectl("create", "--dry-run=server", f"--as={OPERATOR}", "-f", "-", namespace=namespace,
                       input=json.dumps(job(owners)), check=False)

    wait_until(lambda: refused(create([]), REFUSED, "only Jobs controlled by a Task"),
               timeout=30, what="the policy to refuse the operator a Job no Task controls")
    task_owner = {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "name": "t",
                  "uid": "4c1d2e3f-0000-4000-8000-00000000abcd", "controller": True}
    assert refused(create([{**task_owner, "kind": "ConfigMap", "apiVersion": "v1"}]), REFUSED)
    admitted = create([task_owner])
    assert admitted.returncode == 0, admitted.stderr


def test_only_the_operator_makes_a_task_owned_by_a_schedule(kubectl, namespace, policy):
    """Issue 26, point 5 follow-up: a fire counts only when the schedule controls the Task of its
    name, but the schedule's uid is readable, so a tenant could forge that ownerReference on a
    Task of their own under the next fire's name and hijack it. Only the operator may."""
    editor = "editor@example.com"
    bind(kubectl, namespace, editor, "edit")  # may create Tasks and Jobs: everything but this
    schedule = json.loads(kubectl("create", "-o", "json", "-f", "-", namespace=namespace, input=json.dumps({
        "apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule", "metadata": {"name": "nightly"},
        "spec": {"every": "1h", "suspend": True, "taskTemplate": {"spec": {"image": "example.invalid/x:1"}}}})).stdout)
    owner = {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule", "name": "nightly",
             "uid": schedule["metadata"]["uid"], "controller": True, "blockOwnerDeletion": False}

    def owned_by(name: str, owners: list[dict]) -> dict:
        body = task(name, image="example.invalid/x:1")
        body["metadata"]["ownerReferences"] = owners
        return body

    forged = owned_by("nightly-1767225600", [owner])
    wait_until(lambda: refused(create_as(kubectl, editor, namespace, forged), REFUSED,
                               "only the operator may make a Task owned by a TaskSchedule", editor,
                               "TaskSchedule nightly"),
               timeout=30, what="the workload policy to refuse a Task with a forged schedule owner")
    # Not as a mere (non-controller) owner either, nor added later to a Task of one's own.
    assert refused(create_as(kubectl, editor, namespace, owned_by("nightly-2", [{**owner, "controller": False}])),
                   REFUSED, "TaskSchedule nightly")
    assert create_as(kubectl, editor, namespace, owned_by("mine", [])).returncode == 0
    patched = kubectl("patch", f"--as={editor}", "task", "mine", "--type=merge", "-p",
                      json.dumps({"metadata": {"ownerReferences": [owner]}}), namespace=namespace, check=False)
    assert refused(patched, REFUSED, "TaskSchedule nightly"), patched.stderr

    # The operator makes the fire's Task; its users may still label it (its owners unchanged).
    bind(kubectl, namespace, OPERATOR, "edit")
    fired = create_as(kubectl, OPERATOR, namespace, forged)
    assert fired.returncode == 0, fired.stderr
    labelled = kubectl("label", f"--as={editor}", "task", forged["metadata"]["name"], "seen=yes", namespace=namespace,
                       check=False)
    assert labelled.returncode == 0, labelled.stderr


def test_built_in_roles_carry_cronoqs_view_edit_admin(kubectl, namespace, policy):
    """Aggregation, asked of the authorizer: view reads, edit enqueues, only admin writes pools."""
    for user, role in (("viewer@example.com", "view"), ("editor@example.com", "edit"), ("admin@example.com", "admin")):
        bind(kubectl, namespace, user, role)

    def can(user: str, verb: str, resource: str, *more: str) -> bool:
        return kubectl("auth", "can-i", verb, resource, f"--as={user}", *more, namespace=namespace,
                       check=False).stdout.strip() == "yes"

    def grants(user: str) -> set[tuple[str, str]]:
        checks = [(v, r) for r in ("tasks.cronoq.io", "taskschedules.cronoq.io", "taskpools.cronoq.io")
                  for v in ("get", "list", "watch", "create", "update", "delete")]
        return {c for c in checks if can(user, *c)}

    reads = {(v, r) for r in ("tasks.cronoq.io", "taskschedules.cronoq.io", "taskpools.cronoq.io")
             for v in ("get", "list", "watch")}
    enqueue = {(v, r) for r in ("tasks.cronoq.io", "taskschedules.cronoq.io") for v in ("create", "update", "delete")}
    pools = {(v, "taskpools.cronoq.io") for v in ("create", "update", "delete")}
    wait_until(lambda: grants("admin@example.com") == reads | enqueue | pools, timeout=30,
               what="the aggregated admin role to grant cronoq's kinds")
    assert grants("editor@example.com") == reads | enqueue
    assert grants("viewer@example.com") == reads
    assert not can("admin@example.com", "update", "tasks.cronoq.io", "--subresource=status")  # the operator's alone
