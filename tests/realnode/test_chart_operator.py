"""The operator as users run it: installed by `helm install`, a pod on the real node with its own
ServiceAccount token and in-cluster configuration, probed by the kubelet, its metrics served
through its Service; upgraded by `helm upgrade`, the old pod handing leadership over on SIGTERM
while a task runs."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.chart import chart
from tests.realnode.conftest import OPERATOR_IMAGE, RELEASE, WORKER_IMAGE, helm_values, leader, operator_pod, placement
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_the_chart_operator_runs_as_a_pod_on_the_real_node(kubectl, real_node, chart_operator):
    namespace = chart_operator
    pod = operator_pod(kubectl, namespace, ready=True)
    assert pod["spec"]["nodeName"] == real_node.NODE
    assert pod["spec"]["serviceAccountName"] == RELEASE
    # The token the kubelet projected for its ServiceAccount is its only credential (in-cluster config).
    mounts = {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"] and status["restartCount"] == 0, "its probes pass on a real kubelet"
    assert status["imageID"], "its image came from the node's containerd"
    assert leader(kubectl, namespace)["spec"]["holderIdentity"].startswith(pod["metadata"]["name"] + "_")
    # `kubectl logs` through the API server and the kubelet (authorized by webhook, not anonymous).
    assert "leader" in kubectl("logs", pod["metadata"]["name"], namespace=namespace).stdout.lower()


def test_the_chart_operator_runs_the_worker_example_and_serves_metrics_through_its_service(kubectl, rq, real_node):
    rq.pool("example", template=placement(real_node))
    task = {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "sum"},
            "spec": {"pool": "example", "image": WORKER_IMAGE, "payload": {"numbers": [1, 2, 3, 4], "seconds": 2}}}
    kubectl("apply", "-f", "-", input=json.dumps(task), namespace=rq.namespace)
    status = rq.wait_phase("sum", "Succeeded", timeout=180)
    assert json.loads(status["output"]) == {"sum": 10, "attempt": 1}
    print(kubectl("get", "tasks", "-o", "wide", namespace=rq.namespace).stdout)
    log = kubectl("logs", f"job/{status['attempts'][0]['job']}", namespace=rq.namespace).stdout
    assert f"attempt 1 of task {rq.namespace}/sum: sum 10" in log

    # Through the Service: the API server's service proxy reaches the pod the Service selects.
    def scrape() -> str | None:
        result = kubectl("get", "--raw", f"/api/v1/namespaces/{rq.namespace}/services/{RELEASE}-metrics:metrics/proxy/metrics",
                         check=False)
        return result.stdout if result.returncode == 0 and 'status="succeeded"' in result.stdout else None

    metrics = wait_until(scrape, timeout=60, what="the operator's metrics through its Service")
    samples = [(m.name, m.labels, m.value) for family in text_string_to_metric_families(metrics) for m in family.samples]
    assert ("cronoq_leader", {}, 1.0) in samples
    assert [value for name, labels, value in samples if name == "cronoq_tasks_total"
            and labels.get("pool") == "example" and labels.get("status") == "succeeded"] == [1.0]


def test_helm_upgrade_hands_leadership_over_on_sigterm_while_a_task_runs(kubectl, rq, real_node, helm_real):
    namespace = rq.namespace
    rq.pool("handover", template=placement(real_node), heartbeatSidecar=True, leaseTTL="6s")
    # It runs until the test lets it finish (`kubectl exec`), so the handover happens while it runs;
    # the sidecar keeps its Lease alive across it.
    rq.custom.create_namespaced_custom_object("cronoq.io", "v1alpha1", namespace, "tasks", {
        "apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": "across-upgrade"},
        "spec": {"pool": "handover", "image": OPERATOR_IMAGE, "command": ["sh", "-c"],
                 "args": ["until [ -f /tmp/go ]; do sleep 0.2; done; printf finished > /dev/termination-log"]}})
    job = rq.wait_status("across-upgrade", lambda s: s.get("attempt") == 1, "attempt 1 dispatched")["attempts"][0]["job"]
    wait_until(lambda: "running" in kubectl("get", "pods", "-l", f"batch.kubernetes.io/job-name={job}", "-o",
                                            "jsonpath={.items[0].status.containerStatuses[?(@.name=='task')].state}",
                                            namespace=namespace).stdout, timeout=120, what="the task container running")
    before = leader(kubectl, namespace)
    old = operator_pod(kubectl, namespace)["metadata"]["name"]

    helm_real("upgrade", RELEASE, str(chart.CHART), f"--namespace={namespace}", *helm_values(real_node, namespace),
              "--set=operator.logLevel=debug")
    began = time.monotonic()
    deleted: list[datetime] = []

    def handed_over() -> dict | None:
        """The Lease once a new pod holds it; meanwhile, when the old pod was told to stop."""
        result = kubectl("get", "pod", old, "-o", "json", namespace=namespace, check=False)
        if result.returncode == 0 and not deleted:
            pod = json.loads(result.stdout)
            if pod["metadata"].get("deletionTimestamp"):  # now + its grace period
                grace = pod["metadata"].get("deletionGracePeriodSeconds", 30)
                deleted.append(parse_time(pod["metadata"]["deletionTimestamp"]) - timedelta(seconds=grace))
        lease = leader(kubectl, namespace)
        return lease if lease and not lease["spec"]["holderIdentity"].startswith(old + "_") else None

    after = wait_until(handed_over, timeout=180, interval=0.2, what="a new operator pod leading")
    assert after["spec"]["leaseTransitions"] == before["spec"]["leaseTransitions"] + 1
    assert deleted, "the old pod was stopped (SIGTERM) by the rollout"
    gap = (parse_time(after["spec"]["acquireTime"]) - deleted[0]).total_seconds()
    print(f"helm upgrade: new leader {time.monotonic() - began:.1f}s after the upgrade began; "
          f"{gap:.1f}s after the old pod got SIGTERM")
    # The old leader released the Lease when it got SIGTERM: the standby took it within its 2 s
    # retry, not after the 15 s lease duration an unreleased Lease would have cost.
    assert gap < 10, f"leadership passed {gap:.1f}s after SIGTERM"

    assert rq.status("across-upgrade")["phase"] == "Running"
    # `kubectl exec` through the API server and the kubelet: the task may finish now.
    kubectl("exec", f"job/{job}", "-c", "task", "--", "touch", "/tmp/go", namespace=namespace)
    status = rq.wait_phase("across-upgrade", "Succeeded", timeout=120)
    assert status["attempt"] == 1, "the running attempt was adopted by the new leader, not run again"
    assert status["output"] == "finished"
    assert status["epoch"] == after["spec"]["leaseTransitions"] + 1, "the new leader recorded the end"
