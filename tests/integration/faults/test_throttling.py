"""Faults: the API server throttles the operator (API Priority and Fairness). A FlowSchema puts
the operator's ServiceAccount on a priority level of one seat that rejects what does not fit
(no queuing), so it gets real 429s; it backs off and catches up with a burst of tasks."""
from __future__ import annotations

from kubernetes import client

from tests.chart.identity import service_account_kubeconfig
from tests.support.faults import assert_nothing_lost, assert_one_at_a_time
from tests.support.podwatch import PodWatch
from tests.support.throttling import rejected, throttle, unthrottle


def test_a_throttled_operator_backs_off_and_catches_up_with_a_burst(own, api, kubectl, devcluster, tmp_path):
    core, rbac, flow = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api), client.FlowcontrolApiserverV1Api(api)
    ns = own.namespace
    core.create_namespaced_service_account(ns, {"metadata": {"name": "operator"}})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "operator"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                      "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": ns}]})
    own.operator.kubeconfig = str(service_account_kubeconfig(kubectl, ns, "operator", tmp_path / "sa.kubeconfig"))
    own.operator.supervised = True  # a Lease renewal refused for 10 s in a row ends the term; restarted

    unthrottle(flow)  # left over from an interrupted run
    tiny = throttle(flow, ns, "operator")
    before = rejected(devcluster, tiny)
    try:
        own.operator.start()
        own.pool(concurrency=30, leaseTTL="0s", retry={"initialBackoff": "0s"})
        names = [f"b{i}" for i in range(30)]
        with PodWatch(api, ns) as pods:
            for i, name in enumerate(names):  # a few fail once: their retries are throttled too
                own.task(name, delay="100ms", message="ok", **({"outcome_a1": "Fail"} if i % 5 == 0 else {}))
            statuses = assert_nothing_lost(own, names, timeout=150)
        assert_one_at_a_time(pods, names)
        assert all(len(statuses[n]["attempts"]) == (2 if i % 5 == 0 else 1) for i, n in enumerate(names)), statuses
        refused = rejected(devcluster, tiny) - before
        print(f"429s sent to the operator: {refused:.0f}; operator restarts: {own.operator.restarts}")
        assert refused > 0, "the operator was throttled"
    finally:
        unthrottle(flow)
