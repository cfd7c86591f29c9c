"""A real Prometheus (built from hack/prometheus) scrapes a running operator with the chart's
rules loaded, as a cluster's Prometheus would: the metrics docs/reference/metrics.md documents arrive with
their documented labels, its query counts what happened, and the alerts are evaluated
by Prometheus itself, not by the test.

The scrape is what the chart's ServiceMonitor makes of the operator's Service: job
`cronoq-metrics` (release `cronoq`), `honor_labels` so per-pool series keep the pool's
namespace, and the target's namespace (the release's, cronoq-system) on the operator's own series.
Prometheus scrapes and evaluates every second rather than every 30 s and minute, so the test
waits seconds: the windows and thresholds are the shipped ones. The lease-expiry alert's `for:`
(5m by default) is set to 20s through its chart value, metrics.prometheusRule.alerts.
leaseExpirations.for, so its pending state is seen to turn firing; the dead-letter alert fires
at once by default (for: 0m, so it has no pending state) and keeps its default. What states an
alert went through is read from Prometheus's own ALERTS series.
"""
from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.chart import chart
from tests.support.operator import free_port
from tests.support.waiting import wait_until

RELEASE_NS = "cronoq-system"
JOB = "cronoq-metrics"
TARGET_LABELS = {"job", "instance", "pod"}  # what the scrape adds besides `namespace`


class Prometheus:
    def __init__(self, binary: Path, workdir: Path, target: str, rules: Path | None = None,
                 more: list[dict] = ()) -> None:
        """Scrapes the operator at `target` as the chart's ServiceMonitor would, and the scrape
        configs `more` (a pull worker's, as the chart's PodMonitor would)."""
        self.port = free_port()
        self.log = workdir / "prometheus.log"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)] if rules else [],
            "scrape_configs": [{
                "job_name": JOB, "honor_labels": True,
                "static_configs": [{"targets": [target], "labels": {"namespace": RELEASE_NS, "pod": "cronoq-0"}}],
            }, *more],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(binary), f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_until(self.ready, timeout=60, what=f"Prometheus ready (log: {self.log})")
        except BaseException:
            self.stop()
            raise

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"Prometheus exited:\n{self.log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> object:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[tuple, float]:
        """Instant query: value by sorted labels."""
        data = self.api("query", query=expr)
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}

    def alerts(self, name: str) -> list[dict]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name]

    def states(self, alert: str) -> dict[str, tuple[float, float]]:
        """From the ALERTS series Prometheus writes at each evaluation: state -> (first, last) time
        it was seen in the last 10 minutes."""
        data = self.api("query", query=f'ALERTS{{alertname="{alert}"}}[10m]')
        return {r["metric"]["alertstate"]: (float(r["values"][0][0]), float(r["values"][-1][0]))
                for r in data["result"]}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def documented_metrics() -> dict[str, tuple[str, set[str]]]:
    """The metrics reference's first table, the operator's (docs/reference/metrics.md): name ->
    (type, labels). The page's later table is cronoq.fencing's, counted in the user's own process."""
    doc = chart.REPO / "docs" / "reference" / "metrics.md"
    table = doc.read_text().split("\n\n| Metric |")[1].split("\n\n")[0]
    rows = re.findall(r"^\| `(cronoq_\w+)` \| (\w+) \|([^|]*)\|", table, re.M)
    return {name: (kind, {label.split()[0] for label in labels.replace("`", "").split(",") if label.strip()})
            for name, kind, labels in rows}


@pytest.fixture
def rules(devcluster, tmp_path) -> Path:
    """The chart's PrometheusRule as a rule file, rendered for release `cronoq` in cronoq-system."""
    manifest = chart.run_helm(chart.helm_binary(devcluster), *chart.template_args(
        namespace=RELEASE_NS, sets={"metrics.prometheusRule.enabled": "true",
                                    "metrics.prometheusRule.alerts.leaseExpirations.for": "20s"})).stdout
    rule = chart.only(chart.parse(manifest), "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def test_a_real_prometheus_scrapes_the_operator_and_fires_its_alerts(own, prometheus_binaries, rules, tmp_path):
    started = time.monotonic()
    own.operator.start()
    own.operator.wait_leading()
    prom = Prometheus(prometheus_binaries / "prometheus", tmp_path, f"127.0.0.1:{own.operator.metrics_port}", rules)
    try:
        ns, pool = own.namespace, "default"
        own.pool(pool, leaseTTL="2s", retry={"maxAttempts": 1})
        # The pool's series at 0 in Prometheus first, as a scrape of a running operator has them.
        dead = f'cronoq_tasks_total{{namespace="{ns}",pool="{pool}",status="dead_lettered"}}'
        wait_until(lambda: list(prom.query(dead).values()) == [0.0], timeout=30, what="the pool's series scraped at 0")
        assert prom.alerts("CronoqDeadLettersRising") == []

        own.task("ok-1", delay="100ms")
        own.task("ok-2", delay="100ms")
        own.task("fails", outcome="Fail", delay="100ms")
        own.task("silent", outcome="Run")  # its heartbeat Lease is never renewed
        for name in ("ok-1", "ok-2"):
            own.wait_phase(name, "Succeeded")
        own.wait_phase("fails", "DeadLettered")
        own.wait_phase("silent", "DeadLettered", timeout=60)

        # The dead-letter alert, evaluated by Prometheus: firing with the pool's labels, and
        # counting both dead letters (increase() reads a little over 2, the text rounds it).
        (alert,) = wait_until(lambda: [a for a in prom.alerts("CronoqDeadLettersRising")
                                       if a["annotations"]["description"].startswith("About 2 tasks of pool")],
                              timeout=30, what="the dead-letter alert, counting 2")
        assert alert["state"] == "firing", alert
        assert alert["labels"] == {"alertname": "CronoqDeadLettersRising", "namespace": ns, "pool": pool,
                                   "severity": "warning"}
        assert alert["annotations"]["summary"] == f"Tasks of pool {ns}/{pool} are dead-lettering."

        # The lease-expiry alert: pending, then firing once its `for:` (20s) has passed, as
        # Prometheus's own ALERTS series record it (so the test's pace cannot miss the pending
        # state); the dead-letter alert (for: 0m) was never pending.
        firing = wait_until(lambda: [a for a in prom.alerts("CronoqLeaseExpirationsRising") if a["state"] == "firing"],
                            timeout=90, what="the lease-expiry alert firing")
        assert firing[0]["labels"] == {"alertname": "CronoqLeaseExpirationsRising", "severity": "warning"}
        assert firing[0]["annotations"]["description"].startswith("About 1 attempts were aborted in the last 15m")
        lease = prom.states("CronoqLeaseExpirationsRising")
        assert set(lease) == {"pending", "firing"}, lease
        assert lease["pending"][1] < lease["firing"][0] and lease["firing"][0] - lease["pending"][0] >= 20, lease
        assert set(prom.states("CronoqDeadLettersRising")) == {"firing"}
        assert prom.alerts("CronoqNoLeader") == []

        # Every documented metric, of its documented type (Prometheus scrapes OpenMetrics, whose
        # counter families drop `_total`), and every served one documented; each series with
        # the documented labels, plus the scrape's.
        documented = documented_metrics()
        metadata = prom.api("metadata")
        assert set(metadata) == {name.removesuffix("_total") for name in documented}
        series = prom.api("series", **{"match[]": '{__name__=~"cronoq_.+"}'})
        for name, (kind, labels) in documented.items():
            assert [m["type"] for m in metadata[name.removesuffix("_total")]] == [kind], (name, metadata)
            names = {name} if kind != "histogram" else {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
            for s in (s for s in series if s["__name__"] in names):
                assert set(s) - {"__name__", "le"} == labels | TARGET_LABELS | {"namespace"}, (name, s)
                assert s["namespace"] == (ns if "namespace" in labels else RELEASE_NS), (name, s)
        seen = {s["__name__"] for s in series}
        assert {"cronoq_tasks_total", "cronoq_attempts_total", "cronoq_lease_expirations_total", "cronoq_leader",
                "cronoq_task_duration_seconds_bucket", "cronoq_dispatch_latency_seconds_bucket"} <= seen

        # What the documented query and the scenario say: 2 dead letters (one failed, one
        # silent), 2 successes, 1 lease expiry, a leader.
        per_status = {dict(k)["status"]: v for k, v in prom.query(
            f'sum by (status) (cronoq_tasks_total{{namespace="{ns}"}})').items()}
        assert per_status == {"succeeded": 2, "dead_lettered": 2, "failed": 0, "cancelled": 0, "skipped": 0}
        (counted,) = prom.query(f'increase(cronoq_tasks_total{{namespace="{ns}",status="dead_lettered"}}[1h])').values()
        assert round(counted) == 2, counted
        assert list(prom.query("cronoq_lease_expirations_total").values()) == [1.0]
        assert list(prom.query("max(cronoq_leader)").values()) == [1.0]

        # Every panel of the Grafana dashboard has data, its variables set as Grafana would:
        # the operator's namespace, the task namespace and all pools.
        dashboard = json.loads((chart.CHART / "dashboards" / "cronoq.json").read_text())
        variables = {"$namespace": RELEASE_NS, "$task_namespace": ns, "$pool": ".*", "$__rate_interval": "1m"}
        assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "namespace", "task_namespace", "pool"}
        empty = []
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                for name, value in variables.items():
                    expr = expr.replace(name, value)
                if not prom.query(expr):
                    empty.append((panel["title"], expr))
        assert empty == []
        assert ns in {s["namespace"] for s in prom.api("series", **{"match[]": "cronoq_queue_depth"})}
    finally:
        prom.stop()
    print(f"\nreal Prometheus scenario: {time.monotonic() - started:.1f}s")
