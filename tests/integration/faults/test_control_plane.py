"""Faults, a first part (issue 14): the control plane restarting under a running operator, and
attempt pods evicted through the Eviction API. Over every task: none lost, attempt numbers never
reused, one Job per recorded attempt.

These restart components of the shared test cluster, and wait until it answers again."""
from __future__ import annotations

from kubernetes import client

from tests.support.faults import assert_nothing_lost, running_burst
from tests.support.tasks import Cronoq
from tests.support.waiting import wait_until


def restart_mid_run(cq: Cronoq, devcluster, component: str) -> None:
    names = running_burst(cq)
    devcluster.restart(component)
    assert_nothing_lost(cq, names)
    # The operator's watches came back: a task created after the restart runs too.
    cq.task("after", delay="100ms", message="ok")
    assert_nothing_lost(cq, ["after"])


def test_the_api_server_restarted_mid_run_loses_nothing(cq, devcluster):
    restart_mid_run(cq, devcluster, "kube-apiserver")


def test_etcd_restarted_mid_run_loses_nothing(cq, devcluster):
    restart_mid_run(cq, devcluster, "etcd")


def test_an_attempt_evicted_through_the_eviction_api_is_retried(cq, api):
    cq.pool(leaseTTL="0s", retry={"initialBackoff": "0s"})
    cq.task("evicted", outcome_a1="Run", delay="100ms", message="ok")
    core = client.CoreV1Api(api)

    def running_pod():
        pods = core.list_namespaced_pod(cq.namespace, label_selector="cronoq.io/task=evicted,cronoq.io/attempt=1").items
        return next((p for p in pods if p.status.phase == "Running"), None)

    pod = wait_until(running_pod, timeout=60, what="attempt 1's pod running")
    core.create_namespaced_pod_eviction(pod.metadata.name, cq.namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=cq.namespace)))

    status = cq.wait_phase("evicted", "Succeeded", timeout=60)
    first, second = status["attempts"]
    assert (first["outcome"], second["outcome"]) == ("Retryable", "Success"), status["attempts"]
    assert first["reason"] == "Evicted", first
    assert_nothing_lost(cq, ["evicted"])
