"""Faults: a fleet of pull workers started and run under API Priority and Fairness throttling
(issue 42). The workers' ServiceAccount shares the fault suite's priority level of one seat
(tests/support/throttling.py) with a neighbour that holds that seat: all the time for the first
15 s, so the server refuses every request of the starting fleet (429, with its own Retry-After),
then 3 s at a time (4 s free between, on average) while the fleet works. The API server counts
the fleet's requests (its flow schema's): while refused outright, well under one per worker per
second, what a worker retrying every second would send; and nothing is lost, no handler runs
twice, no worker is presumed dead."""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from kubernetes import client, config

from tests.chart.identity import service_account_kubeconfig
from tests.support.faults import assert_nothing_lost
from tests.support.throttling import Neighbour, executing, requests, throttle, unthrottle
from tests.support.waiting import wait_until
from tests.support.workers import Workers, served_task

FLEET, ROOM, TASKS = 8, 4, 32
REFUSED_FOR = 15.0
"""Seconds the neighbour holds the seat all the time, from the fleet's start."""
IDLE = 4.0
"""Seconds the neighbour leaves the seat free after each 3 s hold, afterwards."""
RATE = 0.5
"""Requests per worker per second the fleet stays under while refused outright (measured: 0.3 to
0.4, as the Retry-After the server answers with settles; a worker retrying every second sends 1)."""


def service_account(kubectl, api: client.ApiClient, namespace: str, name: str, path: Path) -> str:
    """A ServiceAccount with every right in `namespace`; the path of a kubeconfig with its token."""
    client.CoreV1Api(api).create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    return str(service_account_kubeconfig(kubectl, namespace, name, path))


def test_a_throttled_fleet_of_workers_backs_off_keeps_its_leases_and_loses_nothing(cq, api, kubectl, devcluster,
                                                                                    tmp_path):
    ns, flow = cq.namespace, client.FlowcontrolApiserverV1Api(api)
    fleet = Workers(ns, service_account(kubectl, api, ns, "workers", tmp_path / "workers.kubeconfig"), tmp_path)
    neighbour_config = client.Configuration()
    config.load_kube_config(service_account(kubectl, api, ns, "neighbour", tmp_path / "neighbour.kubeconfig"),
                            client_configuration=neighbour_config)
    neighbour_config.retries = 0
    cq.pool(delivery="Workers", concurrency=FLEET * ROOM, retry={"maxAttempts": 3, "initialBackoff": "0s"})
    workers, names = [f"w{i}" for i in range(FLEET)], [f"t{i}" for i in range(TASKS)]

    unthrottle(flow)  # left over from an interrupted run
    throttle(flow, ns, "workers", "neighbour")
    try:
        with Neighbour(client.CoreV1Api(client.ApiClient(neighbour_config)), ns) as neighbour:
            wait_until(lambda: executing(devcluster, "neighbour") >= 1, timeout=10, what="the neighbour on the seat")
            before, started = requests(devcluster, "workers"), time.monotonic()
            for worker in workers:  # the shipped TTLs: the worker's 15 s, an attempt's 30 s
                fleet.start(worker, concurrency=ROOM, ttl=15.0)
            for i, name in enumerate(names):
                served_task(cq, name, {"echo": i, "sleep": 1.0})
            time.sleep(max(0.0, started + REFUSED_FOR - time.monotonic()))
            refused_outright = requests(devcluster, "workers")
            neighbour.idle = IDLE
            statuses = assert_nothing_lost(cq, names, timeout=120, jobs=False)
            after, took = requests(devcluster, "workers"), time.monotonic() - started
            exited = {worker: proc.poll() for worker, proc in fleet.procs.items() if proc.poll() is not None}
    finally:
        unthrottle(flow)
        fleet.stop()

    rate = (sum(refused_outright) - sum(before)) / REFUSED_FOR / FLEET
    sent, refused = sum(after) - sum(before), after[1] - before[1]
    print(f"\nthrottled fleet of {FLEET}: refused outright for {REFUSED_FOR:g}s, {rate:.2f} requests/s per worker "
          f"({refused_outright[0] - before[0]:.0f} let through); in all, {sent:.0f} requests in {took:.1f}s "
          f"({sent / took / FLEET:.2f}/s per worker), {refused:.0f} refused (429)")
    for i, name in enumerate(names):
        status = statuses[name]
        assert json.loads(status["output"]) == {"echo": i, "by": status["attempts"][-1]["worker"]}, status
        assert all("presumed dead" not in (attempt.get("message") or "") for attempt in status["attempts"]), status
    starts = Counter(line["task"] for line in fleet.lines() if line["event"] == "start")
    assert starts == dict.fromkeys(names, 1), ("every handler ran once", {
        name: statuses[name]["attempts"] for name, count in starts.items() if count > 1})
    assert exited == {}, {worker: fleet.log(worker) for worker in exited}
    assert 0 < rate < RATE, f"{rate:.2f} requests/s per worker while the server refused them all"
