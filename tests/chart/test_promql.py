"""Every PromQL expression the chart ships, the alert rules and the dashboard's queries, is
parsed by Prometheus's own parser (tests/chart/promql)."""
from __future__ import annotations

import json
import subprocess

from tests.chart.chart import CHART, DATA


def refused(promqlcheck: str, expressions: list[str]) -> str:
    """The checker's report of the expressions Prometheus refuses ('' when it accepts all)."""
    assert expressions and all("\n" not in e for e in expressions)
    result = subprocess.run([promqlcheck], input="\n".join(expressions) + "\n", capture_output=True, text=True, timeout=60)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


def test_the_checker_refuses_broken_promql(promqlcheck):
    assert "parse error" in refused(promqlcheck, ['sum(rate(cronoq_tasks_total{status="DeadLettered"[5m]))'])
    assert refused(promqlcheck, ["sum(rate(cronoq_tasks_total[5m]))"]) == ""


def test_alert_expressions_parse(promqlcheck, render):
    expressions = []
    for values in ([DATA / "all-features.yaml"], []):
        for selector in ({}, {"metrics.prometheusRule.selector": 'cluster="prod",job=~"cronoq.*"'}):
            objects = render(values=values, sets={"metrics.prometheusRule.enabled": "true"}, set_json=selector)
            (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
            expressions += [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len(expressions) == 16
    assert refused(promqlcheck, expressions) == ""


def test_dashboard_queries_parse(promqlcheck):
    dashboard = json.loads((CHART / "dashboards" / "cronoq.json").read_text())
    # Grafana replaces its variables before Prometheus sees the query.
    expressions = [t["expr"].replace("$__rate_interval", "5m") for p in dashboard["panels"] for t in p["targets"]]
    variables = [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    # label_values(metric, label) is Grafana's, not PromQL: its first argument is a selector.
    selectors = [q.removeprefix("label_values(").rsplit(",", 1)[0] for q in variables]
    assert refused(promqlcheck, expressions + selectors) == ""
