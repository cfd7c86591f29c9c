"""Faults: the API server throttles the operator (API Priority and Fairness). A FlowSchema puts
the operator's ServiceAccount on a priority level of one seat that rejects what does not fit
(no queuing), so it gets real 429s; it backs off and catches up with a burst of tasks."""
from __future__ import annotations

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.chart.identity import service_account_kubeconfig
from tests.support.faults import assert_nothing_lost, assert_one_at_a_time
from tests.support.podwatch import PodWatch

TINY, BALLAST, SCHEMA = "cronoq-faults-tiny", "cronoq-faults-ballast", "cronoq-faults-throttle"


def rejected(devcluster) -> float:
    """apiserver_flowcontrol_rejected_requests_total of the tiny priority level, from /metrics."""
    status, body = devcluster.api_get("/metrics", timeout=10)
    assert status == 200
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith("apiserver_flowcontrol_rejected_requests_total{")
               and f'priority_level="{TINY}"' in line)


def throttle(flow: client.FlowcontrolApiserverV1Api, namespace: str, account: str) -> None:
    """One seat for the account. A level's seats are the server's (3000 here) shared in proportion
    to nominalConcurrencyShares, so a ballast level takes 3000 shares (and lends them all)."""
    def level(name: str, shares: int, lendable: int) -> dict:
        return {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
                "metadata": {"name": name}, "spec": {"type": "Limited", "limited": {
                    "nominalConcurrencyShares": shares, "lendablePercent": lendable, "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"}}}}

    flow.create_priority_level_configuration(level(BALLAST, 3000, 100))
    flow.create_priority_level_configuration(level(TINY, 1, 0))
    flow.create_flow_schema({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": SCHEMA},
        "spec": {"priorityLevelConfiguration": {"name": TINY}, "matchingPrecedence": 500,
                 "distinguisherMethod": {"type": "ByUser"},
                 "rules": [{"subjects": [{"kind": "ServiceAccount",
                                          "serviceAccount": {"namespace": namespace, "name": account}}],
                            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                               "namespaces": ["*"], "clusterScope": True}],
                            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}})


def unthrottle(flow: client.FlowcontrolApiserverV1Api) -> None:
    for delete, name in ((flow.delete_flow_schema, SCHEMA), (flow.delete_priority_level_configuration, TINY),
                         (flow.delete_priority_level_configuration, BALLAST)):
        try:
            delete(name)
        except ApiException as err:
            if err.status != 404:
                raise


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
    before = rejected(devcluster)
    throttle(flow, ns, "operator")
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
        refused = rejected(devcluster) - before
        print(f"429s sent to the operator: {refused:.0f}; operator restarts: {own.operator.restarts}")
        assert refused > 0, "the operator was throttled"
    finally:
        unthrottle(flow)
