"""API Priority and Fairness for the fault suite: ServiceAccounts put on a priority level of one
seat that rejects what does not fit (no queuing), so their requests get the API server's real
429s, with its own Retry-After; and what that level dispatched and rejected, from /metrics."""
from __future__ import annotations

import random
import threading

from kubernetes import client
from kubernetes.client.rest import ApiException

TINY, BALLAST, SCHEMA = "cronoq-faults-tiny", "cronoq-faults-ballast", "cronoq-faults-throttle"
THROTTLE = {"cronoq.io/test": "throttle"}
"""The label of every FlowSchema and priority level `throttle` makes, so `unthrottle` finds them."""


def schema(account: str) -> str:
    """The FlowSchema that puts `account` on the tiny level: one per account, so the API server's
    metrics (labelled with the flow schema) tell their requests apart."""
    return f"{SCHEMA}-{account}"


def throttle(flow: client.FlowcontrolApiserverV1Api, namespace: str, *accounts: str) -> str:
    """One seat for all of the accounts together, on a tiny level of their namespace's own (named
    `<TINY>-<namespace>`, returned): the API server keeps the Retry-After it answers with per level
    name, doubled while the level drops many requests, so a level of a former test must not set
    it. A level's seats are the server's (3000 here) shared in proportion to
    nominalConcurrencyShares, so a ballast level takes 3000 shares (and lends them all)."""
    def level(name: str, shares: int, lendable: int) -> dict:
        return {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
                "metadata": {"name": name, "labels": THROTTLE}, "spec": {"type": "Limited", "limited": {
                    "nominalConcurrencyShares": shares, "lendablePercent": lendable, "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"}}}}

    tiny = f"{TINY}-{namespace}"
    flow.create_priority_level_configuration(level(BALLAST, 3000, 100))
    flow.create_priority_level_configuration(level(tiny, 1, 0))
    for account in accounts:
        flow.create_flow_schema({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": schema(account), "labels": THROTTLE},
            "spec": {"priorityLevelConfiguration": {"name": tiny}, "matchingPrecedence": 500,
                     "distinguisherMethod": {"type": "ByUser"},
                     "rules": [{"subjects": [{"kind": "ServiceAccount",
                                              "serviceAccount": {"namespace": namespace, "name": account}}],
                                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                   "namespaces": ["*"], "clusterScope": True}],
                                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}})
    return tiny


def unthrottle(flow: client.FlowcontrolApiserverV1Api) -> None:
    selector = ",".join(f"{k}={v}" for k, v in THROTTLE.items())
    for listing, delete in ((flow.list_flow_schema, flow.delete_flow_schema),
                            (flow.list_priority_level_configuration, flow.delete_priority_level_configuration)):
        for item in listing(label_selector=selector).items:
            try:
                delete(item.metadata.name)
            except ApiException as err:
                if err.status != 404:
                    raise


def _counters(devcluster, metric: str, label: str) -> float:
    status, body = devcluster.api_get("/metrics", timeout=10)
    assert status == 200
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith(metric + "{") and label in line)


def rejected(devcluster, level: str) -> float:
    """apiserver_flowcontrol_rejected_requests_total of a priority level so far."""
    return _counters(devcluster, "apiserver_flowcontrol_rejected_requests_total", f'priority_level="{level}"')


def executing(devcluster, account: str) -> float:
    """Requests of a throttled account the API server is executing now."""
    return _counters(devcluster, "apiserver_flowcontrol_current_executing_requests", f'flow_schema="{schema(account)}"')


def requests(devcluster, account: str) -> tuple[float, float]:
    """(dispatched, rejected) requests of a throttled account so far."""
    label = f'flow_schema="{schema(account)}"'
    return (_counters(devcluster, "apiserver_flowcontrol_dispatched_requests_total", label),
            _counters(devcluster, "apiserver_flowcontrol_rejected_requests_total", label))


class Neighbour:
    """Another tenant of the tiny level, holding its one seat for 3 s, then leaving it free for
    `idle` seconds on average (at random, so that no client's retries fall into step with it), so
    the throttled requests meet a full level: always (idle 0, the server refuses them outright) or
    often. Each hold is one LIST asking for a resourceVersion the server has not reached: it waits
    3 s for the watch cache to catch up (then answers 504), holding the seat while costing next to
    no CPU. A hold refused (the seat was taken) is asked for again soon. `idle` may change while
    it runs."""

    def __init__(self, core: client.CoreV1Api, namespace: str, idle: float = 0.0) -> None:
        self.core, self.namespace, self.idle = core, namespace, idle
        self.holds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="apf-neighbour", daemon=True)

    def __enter__(self) -> Neighbour:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.core.list_namespaced_config_map(self.namespace, resource_version="999999999999",
                                                     resource_version_match="NotOlderThan", _request_timeout=10)
            except ApiException as err:
                if err.status == 429:  # the seat is taken, for a few milliseconds
                    self._stop.wait(0.02)
                    continue
                self.holds += 1
            if self.idle:
                self._stop.wait(self.idle * 2 * random.random())
