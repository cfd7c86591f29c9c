"""Faults: a node goes away under running attempts. The pod GC fails and deletes the pods it
left behind (after its 40s quarantine); their attempts end NodeLost and are retried elsewhere."""
from __future__ import annotations

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.faults import assert_nothing_lost, assert_one_at_a_time
from tests.support.podwatch import PodWatch
from tests.support.waiting import wait_until

DOOMED, SPARE = "kwok-node-1", "kwok-node-0"


def _cordon(core: client.CoreV1Api, node: str, on: bool) -> None:
    core.patch_node(node, {"spec": {"unschedulable": on or None}})


def test_attempts_on_a_deleted_node_end_node_lost_and_are_retried(cq, api, devcluster):
    core = client.CoreV1Api(api)
    cq.pool(concurrency=10, leaseTTL="0s", retry={"initialBackoff": "0s"})
    names = [f"n{i}" for i in range(4)]
    # Attempt 1 runs until its node is gone; attempt 2 succeeds at once.
    _cordon(core, SPARE, True)  # every first attempt lands on the doomed node
    try:
        with PodWatch(api, cq.namespace) as pods:
            for name in names:
                cq.task(name, delay_a1="600s", delay="100ms", message="ok")
            wait_until(lambda: all(pods.pods.get(f"{n}-a1") and pods.pods[f"{n}-a1"].running for n in names),
                       timeout=60, what="every first attempt running")
            on = {p.spec.node_name for p in core.list_namespaced_pod(cq.namespace, label_selector="cronoq.io/task").items}
            assert on == {DOOMED}, on
            _cordon(core, SPARE, False)
            core.delete_node(DOOMED)

            statuses = assert_nothing_lost(cq, names, timeout=150)
        assert_one_at_a_time(pods, names)
        for name, status in statuses.items():
            first, second = status["attempts"]
            assert (first["outcome"], first["reason"], second["outcome"]) == ("Retryable", "NodeLost", "Success"), \
                (name, status["attempts"])
    finally:
        _cordon(core, SPARE, False)
        _restore(core, devcluster)


def _restore(core: client.CoreV1Api, devcluster) -> None:
    """The shared cluster gets its node back, once the pods bound to the old one are gone (a node
    back too soon would keep them from the pod GC)."""
    wait_until(lambda: not core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={DOOMED}").items,
               timeout=120, what=f"the pods of {DOOMED} gone")
    try:
        core.create_node(devcluster.node_manifest(int(DOOMED.rsplit("-", 1)[1])))
    except ApiException as err:
        if err.status != 409:
            raise
    wait_until(lambda: devcluster.ready_nodes() >= devcluster.NODES, timeout=60, what="the nodes Ready again")
