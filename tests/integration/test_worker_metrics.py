"""A pull worker's own metrics, scraped by a real Prometheus (built from hack/prometheus, as in
test_prometheus.py) from a real worker process (tests/support/pull_worker.py) serving on a
loopback port, beside the operator it works with: every documented worker metric is served, and
the query the chart's ScaledObject scales on (rendered by helm for this pool) returns the pool's
queued depth plus the attempts its workers run, on Prometheus, while a backlog comes and goes.
KEDA itself is not run: tests/chart/test_worker_fleet.py checks the ScaledObject against its CRD."""
from __future__ import annotations

import math
import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.chart import chart
from tests.integration.test_prometheus import Prometheus
from tests.support.operator import free_port
from tests.support.waiting import wait_until
from tests.support.workers import Workers, served_task, wait_worker

POOL, WORKER, CONCURRENCY = "thumbs", "w-metered", 2


def documented_worker_metrics() -> dict[str, str]:
    """docs/reference/metrics.md's table of a pull worker's own metrics: name -> type."""
    doc = (chart.REPO / "docs" / "reference" / "metrics.md").read_text()
    table = doc.split("**A pull worker's own.**", 1)[1].split("\n\n| Metric |", 1)[1].split("\n\n")[0]
    return dict(re.findall(r"^\| `(cronoq_worker_\w+)` \| (\w+) \|", table, re.M))


def scaling_rule(devcluster, namespace: str) -> tuple[str, float]:
    """The query and threshold of the ScaledObject the chart renders for this pool."""
    manifest = chart.run_helm(chart.helm_binary(devcluster), *chart.template_args(sets={
        "workers.fleet.enabled": "true", "workers.fleet.pool": POOL, "workers.fleet.namespace": namespace,
        "workers.fleet.serviceAccount": "worker", "workers.fleet.image.repository": "example.com/w",
        "workers.fleet.concurrency": str(CONCURRENCY), "workers.fleet.autoscaling.mode": "keda"})).stdout
    (trigger,) = chart.only(chart.parse(manifest), "ScaledObject")["spec"]["triggers"]
    return trigger["metadata"]["query"], float(trigger["metadata"]["threshold"])


def test_prometheus_scrapes_a_worker_and_the_scaling_query_follows_the_backlog(own, devcluster, kubeconfig,
                                                                                 prometheus_binaries, tmp_path):
    ns = own.namespace
    query, threshold = scaling_rule(devcluster, ns)
    own.operator.start()
    own.operator.wait_leading()
    own.pool(POOL, delivery="Workers", leaseTTL="3s", retry={"maxAttempts": 1})
    port = free_port()
    workers = Workers(ns, kubeconfig, tmp_path)
    workers.start(WORKER, pool=POOL, concurrency=CONCURRENCY, env={"CRONOQ_WORKER_METRICS_PORT": str(port)})
    scrape = {"job_name": "cronoq-workers", "honor_labels": True,
              "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": ns, "pod": WORKER}}]}
    prom = Prometheus(prometheus_binaries / "prometheus", tmp_path, f"127.0.0.1:{own.operator.metrics_port}",
                      more=[scrape])
    try:
        wait_worker(own.api, ns, WORKER)
        where = f'namespace="{ns}",pool="{POOL}"'

        def value(expr: str) -> float | None:
            found = list(prom.query(expr).values())
            return found[0] if len(found) == 1 else None

        # Idle: the fleet wants nothing, and the worker has all its room.
        wait_until(lambda: value(f"cronoq_worker_free_slots{{{where}}}") == CONCURRENCY, timeout=30,
                   what="the worker's free slots scraped")
        assert value(query) == 0

        # A backlog: 5 tasks, 2 run (held until released) and 3 wait for room. The rule wants
        # ceil(5 / 2) = 3 workers.
        release = tmp_path / "release"
        for i in range(5):
            served_task(own, f"t-{i}", {"until": str(release)}, pool=POOL)
        wait_until(lambda: value(query) == 5, timeout=60,
                   what=f"the scaling query at 5 (now {prom.query(query)}; "
                        f"queued {prom.query(f'cronoq_queue_depth{{{where}}}')})")
        assert value(f"cronoq_queue_depth{{{where}}}") == 3
        assert value(f"cronoq_worker_in_flight{{{where}}}") == CONCURRENCY
        assert value(f"cronoq_worker_free_slots{{{where}}}") == 0
        assert math.ceil(value(query) / threshold) == 3

        # The backlog goes: every task succeeds, and the rule wants no more than its minimum.
        release.touch()
        for i in range(5):
            own.wait_phase(f"t-{i}", "Succeeded", timeout=60)
        wait_until(lambda: value(query) == 0 and value(f"cronoq_worker_free_slots{{{where}}}") == CONCURRENCY,
                   timeout=30, what="the scaling query back at 0")
        wait_until(lambda: value(f'cronoq_worker_attempts_total{{{where},outcome="success"}}') == 5, timeout=30,
                   what="5 successes scraped")
        assert value(f'cronoq_worker_handler_duration_seconds_count{{{where},outcome="success"}}') == 5
        assert value(f'sum(cronoq_worker_handler_duration_seconds_bucket{{{where},le="+Inf"}})') == 5

        # Every documented worker metric is served, of its documented type, and nothing else.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            served = {f.name: f.type for f in text_string_to_metric_families(resp.read().decode())
                      if not f.name.endswith("_created")}  # prometheus_client's, beside each counter and histogram
        documented = {name.removesuffix("_total"): kind for name, kind in documented_worker_metrics().items()}
        assert served == documented
    finally:
        prom.stop()
        workers.stop()
