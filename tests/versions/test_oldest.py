"""The oldest Kubernetes release cronoq supports (docs/install.md), smoke-tested on a control plane
of its own: hack/controlplane-1.31 (`CRONOQ_KUBE=1.31`), kwok nodes only, started beside the
session's cluster at ports of its own and torn down at the end of this module.

One pass over what differs between releases: the CRDs (schema, CEL rules, selectable fields,
`kubectl explain`), the chart's ValidatingAdmissionPolicies (they install, and one refuses), the
examples run to their documented ends, and a leader failover."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from tests.integration.test_examples import EXPECTED, kwok_examples
from tests.integration.test_failover import fenced
from tests.support.cluster import REPO, Kubectl
from tests.support.operator import OperatorProcess
from tests.support.tasks import TERMINAL, Cronoq
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

KUBE = "1.31"
RELEASE = "v1.31.14"
# Beside the session's cluster (CRONOQ_PORT_OFFSET) and test_devcluster's (+1000).
OFFSET = int(os.environ.get("CRONOQ_PORT_OFFSET", "0")) + 1500
POLICIES = ("user-roles", "workload-policy", "task-lease-policy", "worker-lease-policy", "lease-guard-policy")


@dataclass(frozen=True)
class Cluster:
    kubeconfig: str
    kubectl: Kubectl
    helm: str
    api: client.ApiClient

    def namespace(self, name: str) -> str:
        self.kubectl("create", "namespace", name)
        wait_until(lambda: self.kubectl("get", "serviceaccount", "default", namespace=name, check=False).returncode == 0,
                   timeout=30, what=f"default ServiceAccount in {name}")
        return name


def devcluster(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CRONOQ_KUBE": KUBE, "CRONOQ_PORT_OFFSET": str(OFFSET), "CRONOQ_CLUSTER_DIR": str(state),
           "CRONOQ_REAL_NODE": "0"}
    return subprocess.run([sys.executable, str(REPO / "hack" / "devcluster.py"), *args],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def oldest(tmp_path_factory):
    """The 1.31 cluster with crds/ installed (built by `make go-tools`, so no build runs here)."""
    state = tmp_path_factory.mktemp("kube-1.31")
    try:
        started = devcluster(state, "up")
        assert started.returncode == 0, started.stderr
        kubeconfig = str(state / "kubeconfig")
        kubectl = Kubectl(str(state / "bin" / "kubectl"), kubeconfig)
        kubectl("apply", "--server-side", "--field-manager=cronoq-tests", "-f", str(REPO / "crds"))
        kubectl("wait", "--for=condition=Established", "--timeout=60s",
                "crd/tasks.cronoq.io", "crd/taskpools.cronoq.io", "crd/taskschedules.cronoq.io")
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        with client.ApiClient(configuration) as api:
            yield Cluster(kubeconfig, kubectl, str(state / "bin" / "helm"), api)
    finally:
        stopped = devcluster(state, "down")
        assert stopped.returncode == 0, stopped.stderr


def test_the_api_server_is_the_oldest_supported_release(oldest):
    version = json.loads(oldest.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == RELEASE
    assert version["clientVersion"]["gitVersion"] == RELEASE, "kubectl is built with its control plane"


def test_crds_validate_explain_and_select_fields(oldest):
    kubectl = oldest.kubectl
    ns = oldest.namespace("crds")
    refused = kubectl("create", "-f", "-", namespace=ns, check=False, input=json.dumps(
        {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "both"},
         "spec": {"image": "busybox:1.36", "http": {"url": "https://hooks.example.com/orders"}}}))
    assert refused.returncode != 0 and "spec.http" in refused.stderr and "not both" in refused.stderr, refused.stderr
    for name, pool in (("a", "batch"), ("b", "other")):
        kubectl("create", "-f", "-", namespace=ns, input=json.dumps(
            {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
             "spec": {"image": "busybox:1.36", "pool": pool}}))
    selected = kubectl("get", "tasks", "--field-selector=spec.pool=batch", "-o", "name", namespace=ns).stdout.split()
    assert selected == ["task.cronoq.io/a"]
    explained = kubectl("explain", "taskpool.spec.rateLimit").stdout
    assert "startsPerSecond" in explained and "how fast the pool starts" in explained


def test_the_charts_policies_install_and_refuse(oldest):
    """Every ValidatingAdmissionPolicy of the chart is accepted (its CEL compiles on this release)
    and the workload policy refuses a producer's pod template."""
    kubectl = oldest.kubectl
    rendered = subprocess.run([oldest.helm, "template", "smoke", str(REPO / "charts" / "cronoq"),
                               "--namespace=cronoq-system", *(f"--show-only=templates/{p}.yaml" for p in POLICIES),
                               '--set-json=taskPods.leaseRole.serviceAccounts=["task"]',
                               '--set-json=workers.serviceAccounts=["worker"]'],
                              check=True, capture_output=True, text=True).stdout
    kubectl("apply", "-f", "-", input=rendered)
    policies = [d["metadata"]["name"] for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ValidatingAdmissionPolicy"]
    assert len(policies) == 6, policies
    ns = oldest.namespace("policy")
    producer = "producer@example.com"
    kubectl("create", "rolebinding", "producer", "--clusterrole=cronoq-edit", f"--user={producer}", namespace=ns)
    pod_task = json.dumps({"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "pod"},
                           "spec": {"template": {"spec": {"containers": [{"name": "task", "image": "example.invalid/mine:1"}]}}}})

    def refused() -> bool:
        result = kubectl("create", f"--as={producer}", "-f", "-", namespace=ns, input=pod_task, check=False)
        return result.returncode != 0 and "cronoq workload policy" in result.stderr and "not spec.template" in result.stderr

    wait_until(refused, timeout=30, what="the workload policy to refuse a producer's pod template")
    for name in policies:
        status = json.loads(kubectl("get", "validatingadmissionpolicy", name, "-o", "json").stdout).get("status") or {}
        assert not (status.get("typeChecking") or {}).get("expressionWarnings"), (name, status)


def test_the_examples_run_to_their_documented_ends(oldest, tmp_path):
    ns = oldest.namespace("examples")
    operator = OperatorProcess(oldest.kubeconfig, (ns,), tmp_path / "operator.log").start()
    try:
        oldest.kubectl("apply", *(arg for path in kwok_examples() for arg in ("-f", path)), namespace=ns)
        custom = client.CustomObjectsApi(oldest.api)

        def all_ended():
            statuses = {t["metadata"]["name"]: t.get("status") or {} for t in
                        custom.list_namespaced_custom_object("cronoq.io", "v1alpha1", ns, "tasks")["items"]
                        if "cronoq.io/schedule" not in t["metadata"].get("labels", {})}
            return statuses if statuses and all(s.get("phase") in TERMINAL for s in statuses.values()) else None

        statuses = wait_until(all_ended, timeout=120, what="every example task ended")
    finally:
        operator.stop()
    assert {n: (s["phase"], s.get("attempt", 0)) for n, s in statuses.items()} == EXPECTED
    assert statuses["hello-world"]["output"] == "hello, world"


def test_a_killed_leader_is_replaced(oldest, tmp_path):
    ns = oldest.namespace("failover")
    lease = (ns, "cronoq-leader")
    a = OperatorProcess(oldest.kubeconfig, (ns,), tmp_path / "a.log", lease=lease, pod_name="replica-a")
    b = OperatorProcess(oldest.kubeconfig, (ns,), tmp_path / "b.log", lease=lease, pod_name="replica-b")
    try:
        a.start()
        a.wait_leading()
        b.start()
        cq = Cronoq(oldest.api, ns, a)
        cq.pool(concurrency=2, retry={"initialBackoff": "0s"})
        names = [f"w{i}" for i in range(4)]
        for i, name in enumerate(names):
            cq.task(name, delay="3s" if i < 2 else "500ms", outcome_a1="Fail" if i % 2 else "Succeed")
        wait_until(lambda: len(cq.jobs()) >= 2, timeout=30, what="attempts running")
        a.kill(signal.SIGKILL)
        b.wait_leading(timeout=40)
        wait_until(lambda: all(cq.status(n).get("phase") in TERMINAL for n in names), timeout=120, what="all finished")
    finally:
        a.stop()
        b.stop()
    assert all(cq.status(n)["phase"] == "Succeeded" for n in names)
    fenced(cq, names)
    assert max(cq.status(n)["epoch"] for n in names) >= 2
