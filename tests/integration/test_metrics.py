"""Every metric of DESIGN §7 is served after a task has run, with honest values."""
from __future__ import annotations

import subprocess

from tests.support.waiting import wait_until

NAMES = ("cronoq_tasks_total", "cronoq_attempts_total", "cronoq_stale_completions_total",
         "cronoq_lease_expirations_total", "cronoq_queue_depth", "cronoq_running_attempts",
         "cronoq_task_duration_seconds", "cronoq_dispatch_latency_seconds", "cronoq_leader")


def test_the_metrics_endpoint_serves_every_metric_after_a_task_ran(cq):
    pool, ns = "default", ("namespace", cq.namespace)  # series are per namespace and pool
    cq.pool(pool, retry={"maxAttempts": 2, "initialBackoff": "0s"})
    dead = ("cronoq_tasks_total", (ns, ("pool", pool), ("status", "dead_lettered")))
    wait_until(lambda: cq.operator.metrics().get(dead) == 0.0, timeout=10,
               what="the pool's series to start at 0 (so increase() sees the first dead letter)")
    cq.task("m", pool=pool, outcome_a1="Fail", delay="100ms")
    cq.wait_phase("m", "Succeeded")

    samples = wait_until(lambda: (lambda m: m if m.get(("cronoq_tasks_total", (ns, ("pool", pool), ("status", "succeeded")))) == 1.0
                                  else None)(cq.operator.metrics()), timeout=10, what="the task counted")
    names = {name for name, _ in samples}
    for metric in NAMES:
        assert any(n == metric or n.startswith(metric + "_") for n in names), metric
    attempts = {dict(labels)["outcome"]: v for (n, labels), v in samples.items()
                if n == "cronoq_attempts_total" and ns in labels and dict(labels).get("pool") == pool}
    assert attempts["retryable"] == 1.0 and attempts["success"] == 1.0
    # Label values in the requirement's snake_case, every one of them served from the start.
    statuses = {dict(labels)["status"] for (n, labels) in samples
                if n == "cronoq_tasks_total" and ns in labels and dict(labels)["pool"] == pool}
    assert statuses == {"succeeded", "failed", "dead_lettered", "cancelled", "skipped"}, statuses
    assert set(attempts) == {"success", "retryable", "permanent", "cancelled"}, attempts
    assert samples[("cronoq_dispatch_latency_seconds_count", (ns, ("pool", pool)))] == 2.0, "one per attempt"
    assert samples[("cronoq_leader", ())] == 1.0


def test_pools_of_one_name_in_two_namespaces_have_series_of_their_own(cq, api):
    """Issue 26, point 7: the chart makes a pool `default` in every namespace; series labelled by
    pool alone jumped between namespaces and their counters merged."""
    from kubernetes import client

    from tests.support.tasks import Cronoq

    other = f"{cq.namespace[:55]}-other"
    cq.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    try:
        wait_until(lambda: cq.core.read_namespaced_service_account("default", other), what="the other namespace")
        neighbour = Cronoq(api, other, cq.operator)
        cq.pool("default")
        neighbour.pool("default", concurrency=0)
        neighbour.task("waits")
        cq.task("runs", delay="100ms")
        cq.wait_phase("runs", "Succeeded")

        def series(namespace: str) -> dict:
            return {(n, dict(labels).get("status")): v for (n, labels), v in cq.operator.metrics().items()
                    if ("namespace", namespace) in labels and ("pool", "default") in labels}
        mine = wait_until(lambda: (s := series(cq.namespace)).get(("cronoq_tasks_total", "succeeded")) == 1.0 and s,
                          timeout=10, what="this namespace's task counted")
        theirs = wait_until(lambda: (s := series(other)).get(("cronoq_queue_depth", None)) == 1.0 and s,
                            timeout=10, what="the other namespace's queue depth")
        assert mine[("cronoq_queue_depth", None)] == 0.0 and theirs[("cronoq_tasks_total", "succeeded")] == 0.0
    finally:
        cq.core.delete_namespace(other, propagation_policy="Background")


def test_the_exposition_passes_promtools_lint(cq, promtool):
    """`promtool check metrics` (Prometheus's lint of names, units, suffixes and help) finds
    nothing in /metrics once a pool's series exist and tasks have ended, dead-lettered included."""
    cq.pool("default", retry={"maxAttempts": 1})
    cq.task("ok", delay="100ms")
    cq.task("dead", outcome_a1="Fail", delay="100ms")
    cq.wait_phase("ok", "Succeeded")
    cq.wait_phase("dead", "DeadLettered")
    ns = ("namespace", cq.namespace)
    dead = ("cronoq_tasks_total", (ns, ("pool", "default"), ("status", "dead_lettered")))
    wait_until(lambda: cq.operator.metrics().get(dead) == 1.0, timeout=10, what="the dead letter counted")
    exposition = cq.operator.exposition()
    assert "cronoq_task_duration_seconds_bucket" in exposition
    result = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, ""), result.stdout + result.stderr
