"""MultiKueue (issue 51, item 4): a pool whose attempts Kueue runs on another cluster, for real.

Two of the project's own control planes on this machine, each with kwok nodes and a real Kueue
(v0.17): the session's cluster is the manager, where cronoq's operator, the Tasks and their
attempt Jobs live; a second one, started by this module at ports of its own, is the worker, where
MultiKueue copies each admitted Job and the Job controller there makes its pod. The manager's Job
(`spec.managedBy: kueue.x-k8s.io/multikueue`) never gets a pod; Kueue mirrors the worker Job's
status back to it, and cronoq reads the attempt's start and end from that.

What is shown: a task whose first attempt fails on the worker cluster and whose second succeeds
ends Succeeded with attempts 1 and 2, each a Job of its own number that ran on the worker cluster
and never here; an attempt that runs past its timeout (counted from the mirrored Job's start) ends
Timeout, and its Job goes on both clusters; a pool that cannot keep its promises there (heartbeats,
push tasks) is refused by the API server naming the field.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, config

from cronoq.engine.jobs import MULTIKUEUE
from tests.support.cluster import REPO, namespace_name
from tests.support.kueue import Kueue, install_crds, unique
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

# Beside the session's cluster (CRONOQ_PORT_OFFSET), test_devcluster's (+1000) and the oldest's (+1500); the bench's own is at 3000.
WORKER_OFFSET = int(os.environ.get("CRONOQ_PORT_OFFSET", "0")) + 2500
CPU = {"requests": {"cpu": "100m"}}


def devcluster(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CRONOQ_PORT_OFFSET": str(WORKER_OFFSET), "CRONOQ_CLUSTER_DIR": str(state),
           "CRONOQ_REAL_NODE": "0"}
    env.pop("CRONOQ_KUBE", None)
    return subprocess.run([sys.executable, str(REPO / "hack" / "devcluster.py"), *args],
                          env=env, capture_output=True, text=True, timeout=300)


class Worker:
    """The worker cluster: its kubeconfig, clients and Kueue."""

    def __init__(self, state: Path, api: client.ApiClient, kueue: Kueue) -> None:
        self.kubeconfig = state / "kubeconfig"
        self.api, self.kueue = api, kueue
        self.core, self.batch = client.CoreV1Api(api), client.BatchV1Api(api)

    def namespace(self, name: str) -> None:
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        wait_until(lambda: self.core.read_namespaced_service_account("default", name), timeout=30,
                   what=f"default ServiceAccount in {name} on the worker cluster")

    def pods_made(self, namespace: str) -> set[str]:
        """Jobs of `namespace` whose pod the worker cluster's Job controller made (from its Events)."""
        events = self.core.list_namespaced_event(namespace).items
        return {e.involved_object.name for e in events if e.reason == "SuccessfulCreate"}


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """The worker cluster, with Kueue's CRDs and Kueue running; torn down at the end."""
    state = tmp_path_factory.mktemp("multikueue-worker")
    kueue = None
    try:
        started = devcluster(state, "up")
        assert started.returncode == 0, started.stderr[-3000:]
        install_crds(str(state / "bin" / "kubectl"), str(state / "kubeconfig"))
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(state / "kubeconfig"), client_configuration=configuration)
        with client.ApiClient(configuration) as api:
            kueue = Kueue(api, tmp_path_factory.mktemp("kueue-worker")).start(str(state / "kubeconfig"))
            yield Worker(state, api, kueue)
            kueue.stop()
            kueue = None
    finally:
        if kueue is not None and kueue.process is not None:
            kueue.process.stop()
        stopped = devcluster(state, "down")
        assert stopped.returncode == 0, stopped.stderr[-3000:]


@pytest.fixture(scope="module")
def manager(api, kubeconfig, kubectl, crds, worker, tmp_path_factory):
    """Kueue on the session's cluster with a MultiKueue AdmissionCheck reaching the worker."""
    install_crds(kubectl.binary, kubeconfig)
    kueue = Kueue(api, tmp_path_factory.mktemp("kueue-manager")).start(kubeconfig)
    check = unique("mk")
    kueue.multikueue(check, worker.kubeconfig)
    yield kueue, check
    kueue.stop()


@pytest.fixture(scope="module")
def mk_operator(crds, kubeconfig, tmp_path_factory):
    """An operator of this module's own, on its own `mk-*` namespaces and Lease; supervised as the
    session's is (a term lost to a slow API server restarts it)."""
    from tests.support.operator import OperatorProcess

    proc = OperatorProcess(kubeconfig, ("mk-*",), tmp_path_factory.mktemp("mk-operator") / "operator.log",
                           supervised=True).start()
    yield proc
    proc.stop()


@pytest.fixture
def mk(request, api, manager, worker, mk_operator):
    """Tasks in a fresh `mk-` namespace (on both clusters: MultiKueue copies a Job into the
    namespace of its name) whose pool `default` hands its attempts to MultiKueue."""
    from tests.support.tasks import Cronoq

    kueue, check = manager
    core = client.CoreV1Api(api)
    name = namespace_name(request.node.name, "mk")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"cronoq.io/test": "true"})))
    wait_until(lambda: core.read_namespaced_service_account("default", name), timeout=30,
               what=f"default ServiceAccount in {name}")
    worker.namespace(name)
    queue = unique("mkq")
    worker.kueue.queue(name, queue, "1")
    kueue.queue(name, queue, "1", admission_check=check)
    cq = Cronoq(api, name, mk_operator)
    cq.pool("default", concurrency=5, leaseTTL="0s", retry={"maxAttempts": 3, "initialBackoff": "0s", "jitter": "none"},
            template={"resources": CPU}, admission={"kueue": {"localQueue": queue, "multiKueue": True}})
    yield cq
    core.delete_namespace(name, propagation_policy="Background")
    worker.core.delete_namespace(name, propagation_policy="Background")


def test_attempts_run_on_the_worker_cluster_and_end_here_by_the_mirrored_job(mk, worker):
    mk.task("flaky", outcome_a1="Fail", exit_code_a1="3", outcome_a2="Succeed", delay="1s")
    status = mk.wait_phase("flaky", "Succeeded", timeout=180)

    attempts = [(a["number"], a["outcome"], a["reason"]) for a in status["attempts"]]
    assert attempts == [(1, "Retryable", "PodFailed"), (2, "Success", "Completed")], status["attempts"]
    assert "MultiKueue worker cluster" in status["attempts"][0]["message"], status["attempts"][0]
    jobs = {j.metadata.labels["cronoq.io/attempt"]: j for j in mk.jobs("flaky")}
    assert set(jobs) == {"1", "2"}, "one Job per attempt number"
    assert all(j.spec.managed_by == MULTIKUEUE for j in jobs.values())
    assert not mk.core.list_namespaced_pod(mk.namespace).items, "no pod ran on the manager cluster"
    assert worker.pods_made(mk.namespace) == {j.metadata.name for j in jobs.values()}, \
        "each attempt's pod was made on the worker cluster"
    assert status["attempts"][1].get("startedAt"), "the start is the mirrored Job's"


def test_a_timeout_counts_from_the_mirrored_start_and_takes_the_job_off_both_clusters(mk, worker):
    mk.task("slow", delay="300s", timeout="5s", retry={"maxAttempts": 1})
    status = mk.wait_phase("slow", "DeadLettered", "Failed", timeout=180)

    assert [(a["number"], a["reason"]) for a in status["attempts"]] == [(1, "Timeout")], status["attempts"]
    job = "slow-a1"

    def gone_everywhere() -> bool:
        here = [j for j in mk.jobs("slow") if not j.metadata.deletion_timestamp]
        there = [j for j in worker.batch.list_namespaced_job(mk.namespace).items if j.metadata.name == job]
        return not here and not there

    wait_until(gone_everywhere, timeout=120, what=f"Job {job} deleted on both clusters")
    assert worker.pods_made(mk.namespace) == {job}, "it did run there"


def test_a_pool_that_cannot_keep_its_promises_on_another_cluster_is_refused(api, mk_operator, own_namespace):
    from tests.support.tasks import Cronoq

    cq = Cronoq(api, own_namespace, mk_operator)
    for spec, field, words in (
            ({}, "spec.leaseTTL", "must be 0s with admission.kueue.multiKueue"),
            ({"leaseTTL": "0s", "template": {"http": {"url": "http://127.0.0.1:9/"}}}, "spec.template.http",
             "push tasks cannot run with admission.kueue.multiKueue")):
        with pytest.raises(client.ApiException) as refused:
            cq.pool(unique("refused"), admission={"kueue": {"localQueue": "q", "multiKueue": True}}, **spec)
        assert refused.value.status == 422 and field in refused.value.body and words in refused.value.body, \
            refused.value.body
