"""The installed RBAC, asked of the API server's authorizer: the operator's ServiceAccount can do
what the operator does and nothing it does not (`kubectl auth can-i --as=...`), with
cluster-wide RBAC and with watchNamespaces; task pods can renew Leases only where bound; and
tests/chart/identity.py gives a real token for the ServiceAccount."""
from __future__ import annotations

import json

import pytest

from tests.chart.identity import as_service_account
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

RELEASE = "cronoq"


def can_i(kubectl, user: str, verb: str, resource: str, namespace: str | None = None,
          subresource: str | None = None) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={user}"]
    args.append(f"--namespace={namespace}" if namespace else "--all-namespaces")
    if subresource:
        args.append(f"--subresource={subresource}")
    result = kubectl(*args, check=False)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}"
    return answer == "yes"


def denied(kubectl, user, checks) -> list[str]:
    """The (verb, resource, namespace, subresource) checks the user is refused."""
    return [" ".join(str(p) for p in c if p) for c in checks if not can_i(kubectl, user, *c)]


def allowed(kubectl, user, checks) -> list[str]:
    return [" ".join(str(p) for p in c if p) for c in checks if can_i(kubectl, user, *c)]


LEASES = "leases.coordination.k8s.io"
LEADER = f"{LEASES}/cronoq-leader"


def operator_does(namespace: str | None):
    """What the operator needs in a namespace it watches (None: in all of them at once): the
    calls of operator/cronoq/kube/, no more."""
    return [
        ("list", "tasks.cronoq.io", namespace), ("watch", "tasks.cronoq.io", namespace),
        ("get", "tasks.cronoq.io", namespace), ("delete", "tasks.cronoq.io", namespace),
        ("update", "tasks.cronoq.io", namespace, "status"), ("update", "tasks.cronoq.io", namespace, "finalizers"),
        ("watch", "taskpools.cronoq.io", namespace), ("update", "taskpools.cronoq.io", namespace, "status"),
        ("create", "jobs.batch", namespace), ("delete", "jobs.batch", namespace), ("watch", "jobs.batch", namespace),
        ("get", "jobs.batch", namespace), ("patch", "jobs.batch", namespace), ("watch", "pods", namespace),
        ("create", "events", namespace), ("list", LEASES, namespace), ("watch", LEASES, namespace),
        ("watch", "taskschedules.cronoq.io", namespace), ("get", "taskschedules.cronoq.io", namespace),
        ("update", "taskschedules.cronoq.io", namespace, "status"),
        ("create", "tasks.cronoq.io", namespace), ("patch", "tasks.cronoq.io", namespace),
    ]


def leader_election(namespace: str):
    return [("create", LEASES, namespace), ("get", LEADER, namespace), ("update", LEADER, namespace)]


def operator_never_does(namespace: str | None):
    return [
        ("get", "secrets", namespace), ("list", "secrets", namespace), ("watch", "secrets", namespace),
        ("create", "pods", namespace, "exec"), ("get", "pods", namespace, "log"), ("create", "pods", namespace, "attach"),
        ("create", "pods", namespace), ("delete", "pods", namespace),
        ("update", "tasks.cronoq.io", namespace), ("update", "taskpools.cronoq.io", namespace),
        ("delete", "taskpools.cronoq.io", namespace),
        ("update", "taskschedules.cronoq.io", namespace), ("delete", "taskschedules.cronoq.io", namespace),
        ("update", "jobs.batch", namespace), ("create", "configmaps", namespace),
        ("patch", "tasks.cronoq.io", namespace, "status"), ("patch", "events", namespace),
        ("create", "events.events.k8s.io", namespace),
        # Leases: watched, never written, but for the leader Lease in the lease namespace.
        ("update", LEASES, namespace), ("patch", LEASES, namespace), ("delete", LEASES, namespace),
        ("get", LEASES, namespace),
        ("create", "serviceaccounts", namespace, "token"), ("impersonate", "serviceaccounts", namespace),
        ("escalate", "roles.rbac.authorization.k8s.io", namespace), ("bind", "roles.rbac.authorization.k8s.io", namespace),
        ("create", "rolebindings.rbac.authorization.k8s.io", namespace),
        ("escalate", "clusterroles.rbac.authorization.k8s.io", None), ("bind", "clusterroles.rbac.authorization.k8s.io", None),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
        ("update", "customresourcedefinitions.apiextensions.k8s.io", None),
        ("list", "customresourcedefinitions.apiextensions.k8s.io", None),
        ("list", "namespaces", None), ("create", "namespaces", None), ("list", "nodes", None),
    ]


# Other components' Leases: taking them would make the operator kube-scheduler's leader, or
# forge node heartbeats.
OTHERS_LEASES = [("update", f"{LEASES}/kube-scheduler", "kube-system"),
                 ("update", f"{LEASES}/kube-controller-manager", "kube-system"),
                 ("create", LEASES, "kube-system"), ("update", LEASES, "kube-node-lease"),
                 ("create", LEASES, "kube-node-lease"), ("update", LEASES, None), ("create", LEASES, None)]


def test_cluster_wide_operator_can_do_its_work_everywhere_and_nothing_more(kubectl, install, namespace, make_namespace):
    other = make_namespace("tasks")
    install(RELEASE, namespace)
    user = f"system:serviceaccount:{namespace}:{RELEASE}"
    assert denied(kubectl, user, [*operator_does(other), *operator_does(namespace), *operator_does(None),
                                  *leader_election(namespace)]) == []
    # The leader Lease by name only, in its own namespace; every other Lease only read.
    assert allowed(kubectl, user, [*operator_never_does(other), ("get", f"{LEASES}/other", namespace),
                                   ("update", f"{LEASES}/other", namespace), ("delete", LEADER, namespace),
                                   ("create", LEASES, other), ("update", LEADER, other), *OTHERS_LEASES]) == []


def test_watch_namespaces_confine_the_operator_to_them(kubectl, install, namespace, make_namespace):
    watched, unwatched = make_namespace("watched"), make_namespace("unwatched")
    install(RELEASE, namespace, f"--set-json=watchNamespaces={json.dumps([watched])}")
    user = f"system:serviceaccount:{namespace}:{RELEASE}"
    # Leader election in the release namespace, which is not watched.
    assert denied(kubectl, user, [*operator_does(watched), *leader_election(namespace)]) == []
    assert allowed(kubectl, user, [
        ("list", "tasks.cronoq.io", unwatched), ("update", "tasks.cronoq.io", unwatched, "status"),
        ("create", "jobs.batch", unwatched), ("watch", "pods", unwatched), ("create", "events", unwatched),
        ("create", LEASES, unwatched), ("list", LEASES, unwatched),
        ("list", "tasks.cronoq.io", None), ("create", "jobs.batch", None), ("list", LEASES, None),
        # The release namespace is only for the leader Lease.
        ("list", "tasks.cronoq.io", namespace), ("create", "jobs.batch", namespace), ("create", "events", namespace),
        ("create", LEASES, watched), ("update", LEADER, watched),
        *operator_never_does(watched), *OTHERS_LEASES,
    ]) == []


def test_task_pods_renew_leases_only_in_namespaces_they_are_bound_in(kubectl, install, namespace, make_namespace):
    tasks, elsewhere = make_namespace("tasks"), make_namespace("elsewhere")
    install(RELEASE, namespace, f"--set-json=taskPods.leaseRole.namespaces={json.dumps([tasks])}",
            "--set-json=taskPods.leaseRole.serviceAccounts=[\"default\",\"worker\"]")
    for account in ("default", "worker", "cronoq-task"):  # cronoq-task: the chart's own
        user = f"system:serviceaccount:{tasks}:{account}"
        assert denied(kubectl, user, [("get", "leases.coordination.k8s.io", tasks),
                                      ("create", "leases.coordination.k8s.io", tasks),
                                      ("update", "leases.coordination.k8s.io", tasks),
                                      ("patch", "leases.coordination.k8s.io", tasks)]) == []
        assert allowed(kubectl, user, [("delete", "leases.coordination.k8s.io", tasks),
                                       ("list", "leases.coordination.k8s.io", tasks),
                                       ("update", "leases.coordination.k8s.io", elsewhere),
                                       ("update", "leases.coordination.k8s.io", namespace),
                                       ("update", "leases.coordination.k8s.io", "kube-node-lease"),
                                       ("get", "secrets", tasks), ("patch", "tasks.cronoq.io", tasks, "status")]) == []
    unbound = f"system:serviceaccount:{elsewhere}:default"
    assert allowed(kubectl, unbound, [("update", "leases.coordination.k8s.io", elsewhere)]) == []


def test_by_default_a_namespaces_default_service_account_writes_no_leases(kubectl, install, namespace, make_namespace):
    """Issue 26, point 2: the default values bind the lease role to the chart's task ServiceAccount
    only (the operator runs attempt pods that name none as it), not to every pod running as `default`."""
    tasks = make_namespace("tasks")
    install(RELEASE, namespace, f"--set-json=watchNamespaces={json.dumps([tasks])}")
    lease_writes = [(verb, "leases.coordination.k8s.io", tasks) for verb in ("get", "create", "update", "patch")]
    assert denied(kubectl, f"system:serviceaccount:{tasks}:cronoq-task", lease_writes) == []
    assert allowed(kubectl, f"system:serviceaccount:{tasks}:default", lease_writes) == []
    args = json.loads(kubectl("get", "deployment", RELEASE, "-o", "json", namespace=namespace).stdout)[
        "spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--task-service-account=cronoq-task" in args and f"--task-service-account-namespace={tasks}" in args


def test_identity_kubeconfig_acts_as_the_service_account_with_a_real_token(kubectl, install, namespace, make_namespace, tmp_path):
    other = make_namespace("tasks")
    install(RELEASE, namespace)
    operator = as_service_account(kubectl, namespace, RELEASE, tmp_path / "operator.kubeconfig")
    review = json.loads(operator("auth", "whoami", "-o", "json").stdout)
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:{RELEASE}"
    assert f"system:serviceaccounts:{namespace}" in review["status"]["userInfo"]["groups"]
    # Real requests, not can-i: allowed ones succeed, the rest are Forbidden.
    assert operator("get", "tasks.cronoq.io", "--all-namespaces").returncode == 0
    # A Job only when a Task controls it (the chart's workload policy).
    def unowned_refused() -> bool:
        unowned = operator("create", "job", "probe", "--image=example.invalid/x:1", "--dry-run=server",
                           namespace=other, check=False)
        return unowned.returncode != 0 and "only Jobs controlled by a Task" in unowned.stderr

    # A fresh policy takes a moment to be enforced.
    wait_until(unowned_refused, timeout=30, what="the workload policy to refuse the operator a Job no Task controls")
    operator("create", "--dry-run=server", "-f", "-", namespace=other, input=json.dumps(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe", "ownerReferences": [
            {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "name": "t", "uid": "4c1d2e3f-0000-4000-8000-00000000abcd",
             "controller": True}]},
         "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "example.invalid/x:1"}]}}}}))
    def lease(name: str) -> str:
        return json.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": {}})

    operator("create", "--dry-run=server", "-f", "-", namespace=namespace, input=lease("cronoq-leader"))
    elsewhere = operator("create", "--dry-run=server", "-f", "-", namespace=other, input=lease("probe"), check=False)
    assert elsewhere.returncode != 0 and "Forbidden" in elsewhere.stderr, elsewhere.stderr
    forbidden = operator("get", "secrets", namespace=namespace, check=False)
    assert forbidden.returncode != 0 and "Forbidden" in forbidden.stderr, forbidden.stderr


def test_notifications_let_the_operator_get_secrets_and_nothing_more_of_them(kubectl, install, namespace,
                                                                              make_namespace):
    watched = make_namespace("notified")
    install(RELEASE, namespace, f"--set-json=watchNamespaces={json.dumps([watched])}", "--set=notifications.enabled=true")
    user = f"system:serviceaccount:{namespace}:{RELEASE}"
    # A receiver's signing key is read by name when a notification is sent (kube/writes.py read_secret_key).
    assert denied(kubectl, user, [("get", "secrets", watched), *operator_does(watched)]) == []
    assert allowed(kubectl, user, [("list", "secrets", watched), ("watch", "secrets", watched),
                                   ("create", "secrets", watched), ("update", "secrets", watched),
                                   ("get", "secrets", namespace), ("get", "secrets", None)]) == []
