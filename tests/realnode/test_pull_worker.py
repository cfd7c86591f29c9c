"""Pull delivery on real pods: the example worker Deployment (examples/real-node/pull-worker.yaml,
examples/worker/pull.py in the example image) serves its pool on the real node, with the chart's
operator; a worker pod deleted without grace mid-task (its container killed within seconds, too soon
to drain) has its attempt retried on a live worker once its Lease lapses."""
from __future__ import annotations

import json

import pytest

from tests.realnode.conftest import get_json
from tests.support.cluster import REPO
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

EXAMPLE = REPO / "examples" / "real-node" / "pull-worker.yaml"


def worker_pods(kubectl, namespace: str) -> list[dict]:
    pods = get_json(kubectl, "pods", "-l", "app=sum-worker", namespace=namespace)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


def served(rq, name: str, **payload) -> None:
    rq.custom.create_namespaced_custom_object("cronoq.io", "v1alpha1", rq.namespace, "tasks", {
        "apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
        "spec": {"pool": "sums", "payload": payload}})


def test_the_example_worker_deployment_serves_its_pool_and_survives_a_killed_worker(rq, kubectl, real_node):
    kubectl("apply", "-f", str(EXAMPLE), namespace=rq.namespace)
    try:
        wait_until(lambda: len(worker_pods(kubectl, rq.namespace)) == 2, timeout=180,
                   what="both example worker pods Ready on the real node")
        pods = {p["metadata"]["name"]: p for p in worker_pods(kubectl, rq.namespace)}
        assert {p["spec"]["nodeName"] for p in pods.values()} == {real_node.NODE}

        example = rq.wait_phase("sum-by-worker", "Succeeded", timeout=120)
        for i in range(6):
            served(rq, f"sum-{i}", numbers=[i, i], seconds=0)
        quick = [rq.wait_phase(f"sum-{i}", "Succeeded", timeout=60) for i in range(6)]

        assert json.loads(example["output"])["sum"] == 10
        for i, status in enumerate(quick):
            (attempt,) = status["attempts"]
            assert json.loads(status["output"]) == {"sum": 2 * i, "attempt": 1, "worker": attempt["worker"]}
            assert any(attempt["worker"].startswith(pod + "-") for pod in pods), "named after its pod"
        assert rq.batch.list_namespaced_job(rq.namespace, label_selector="cronoq.io/pool=sums").items == []

        served(rq, "sum-long", numbers=[5], seconds=60)
        running = rq.wait_status("sum-long", lambda s: s.get("phase") == "Running", "handed to a worker", timeout=60)
        worker = running["attempts"][0]["worker"]
        victim = next(pod for pod in pods if worker.startswith(pod + "-"))
        kubectl("delete", "pod", victim, "--grace-period=0", "--force", namespace=rq.namespace)
        done = rq.wait_phase("sum-long", "Succeeded", timeout=180)

        first, second = done["attempts"]
        assert (first["worker"], first["reason"]) == (worker, "LeaseExpired")
        assert not second["worker"].startswith(victim + "-"), "retried on a live worker"
        assert json.loads(done["output"])["sum"] == 5
    finally:
        kubectl("delete", "-f", str(EXAMPLE), "--wait=false", namespace=rq.namespace, check=False)
