"""The chart's alerts, as shipped (`helm template`), evaluated by Prometheus's own rule engine
through `promtool test rules` (hack/prometheus): for each alert a series history that fires it,
at the minute it should and with the labels and annotations a receiver gets, and histories that
must not fire it (a restarted operator, whose counters start again at 0; a quiet pool; another
release's series).

The series are named and labelled as the chart's ServiceMonitor scrapes them: `job` is the
metrics Service, `namespace` the release's for the operator's own series (cronoq_leader, the
stale-completion and lease-expiry counters) and the pool's for the per-pool series (the scrape
honours the label the operator exports). Values come every 30 s, the ServiceMonitor's default
interval; Prometheus evaluates the rules every minute.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

import pytest
import yaml

from tests.chart.chart import only

RELEASE_NS = "cronoq-system"
JOB = "cronoq-metrics"  # the metrics Service of release `cronoq`
# One operator pod's target labels, and those of the pod that replaces it.
POD_A = f'job="{JOB}",instance="10.0.0.7:9090",pod="cronoq-5d8f-a",service="{JOB}",endpoint="metrics"'
POD_B = f'job="{JOB}",instance="10.0.0.9:9090",pod="cronoq-5d8f-b",service="{JOB}",endpoint="metrics"'


def dead_letters(pool_ns: str, pool: str, pod: str = POD_A) -> str:
    return f'cronoq_tasks_total{{{pod},namespace="{pool_ns}",pool="{pool}",status="dead_lettered"}}'


def own(metric: str, pod: str = POD_A) -> str:
    """One of the operator's own series (no namespace label of its own: the target's is the release's)."""
    return f'{metric}{{{pod},namespace="{RELEASE_NS}"}}'


def dead_letter_annotations(value: str, ns: str, pool: str) -> dict[str, str]:
    return {"summary": f"Tasks of pool {ns}/{pool} are dead-lettering.",
            "description": f"About {value} tasks of pool {pool} in namespace {ns} ran out of attempts in the last 15m. "
                           f"`kubectl get tasks -n {ns}` shows them in phase DeadLettered; their status.attempts "
                           "says why each attempt failed."}


NO_LEADER = {"summary": "No cronoq operator replica is the leader.",
             "description": "No replica has held the leader Lease for 5m (or none is scraped): no task is being "
                            f"started, retried or timed out. Check the operator pods in {RELEASE_NS} and the Lease "
                            f"in {RELEASE_NS}."}


def stale_annotations(value: str) -> dict[str, str]:
    return {"summary": "Outcomes of superseded attempts keep arriving.",
            "description": f"About {value} outcomes of attempts that were no longer current arrived in the last 15m. "
                           "They were ignored (the fencing works), but they mean attempts outlive their timeout "
                           "or lease: look at the Events of the tasks concerned."}


def lease_annotations(value: str) -> dict[str, str]:
    return {"summary": "Attempts are losing their heartbeat lease.",
            "description": f"About {value} attempts were aborted in the last 15m because their heartbeat Lease was not "
                           "renewed within the pool's leaseTTL: task pods are stuck, starved of CPU, or cannot "
                           "reach the API server."}


@dataclass
class Case:
    """A series history and what the alert does at given minutes: `alerts[minute]` is the list
    of firing alerts then, each (labels, annotations); [] means none fires (pending is not firing)."""

    alert: str
    series: dict[str, str]
    alerts: dict[int, list[tuple[dict[str, str], dict[str, str]]]]
    values: dict[str, object] = field(default_factory=dict)

    def promtool_test(self) -> dict:
        return {
            "interval": "30s",
            "input_series": [{"series": s, "values": v} for s, v in self.series.items()],
            "alert_rule_test": [
                {"eval_time": f"{minute}m", "alertname": self.alert,
                 "exp_alerts": [{"exp_labels": {"alertname": self.alert, **labels}, "exp_annotations": annotations}
                                for labels, annotations in expected]}
                for minute, expected in sorted(self.alerts.items())],
        }


def quiet(minutes: int) -> dict[int, list]:
    """No alert at any evaluation over `minutes` (every 5 minutes is enough: nothing changes between)."""
    return {m: [] for m in range(0, minutes + 1, 5)}


# Promtool's notation: `a+bxn` is a, a+b, ... (n+1 values), `axn` is a repeated n+1 times, `_` a
# missed scrape, `stale` the marker Prometheus writes when a target (a deleted pod) disappears.
# At 30 s a value, 20 values are 10 minutes.
CASES = {
    # A task dead-letters at 10m30s, two more at 21m: the alert fires at the first evaluation
    # that sees it (for: 0m) with the count of the last 15 minutes, and resolves when the window
    # has passed them.
    "dead-letters-fire": Case("CronoqDeadLettersRising", {
        dead_letters("team-a", "batch"): "0x20 1x20 3x60",
        dead_letters("team-a", "quiet"): "0x100",
        dead_letters("team-b", "batch"): "0x100",
    }, {
        10: [],
        11: [({"namespace": "team-a", "pool": "batch", "severity": "warning"},
              dead_letter_annotations("1", "team-a", "batch"))],
        21: [({"namespace": "team-a", "pool": "batch", "severity": "warning"},
              dead_letter_annotations("3", "team-a", "batch"))],
        36: [],
        45: [],
    }),
    # Dead letters counted by two operator pods in turn (a failover or a rollout): each pod's
    # counter is its own series, and the alert sums them per pool.
    "dead-letters-across-a-failover": Case("CronoqDeadLettersRising", {
        dead_letters("team-a", "batch", POD_A): "0x20 1x10 stale",
        dead_letters("team-a", "batch", POD_B): "_x31 0x10 1x30",
    }, {
        10: [],
        11: [({"namespace": "team-a", "pool": "batch", "severity": "warning"},
              dead_letter_annotations("1", "team-a", "batch"))],
        21: [({"namespace": "team-a", "pool": "batch", "severity": "warning"},
              dead_letter_annotations("2", "team-a", "batch"))],
    }),
    # An operator that restarts (its container, so the same series) at 61m, half an hour after
    # 4 dead letters: its counters start again at 0, which is no dead letter (increase() takes a
    # drop for a reset); the first dead letter after the restart, at 91m30s, is one.
    "dead-letters-not-on-a-restart": Case("CronoqDeadLettersRising", {
        dead_letters("team-a", "batch"): "0x60 4x60 0x60 1x60",
    }, {31: [({"namespace": "team-a", "pool": "batch", "severity": "warning"},
              dead_letter_annotations("4", "team-a", "batch"))],
        **{m: [] for m in range(50, 91, 5)}, 61: [], 62: [],
        91: [], 92: [({"namespace": "team-a", "pool": "batch", "severity": "warning"},
              dead_letter_annotations("1", "team-a", "batch"))], 110: []}),
    # A busy pool whose tasks all succeed, and pools with no task at all.
    "dead-letters-not-in-a-quiet-pool": Case("CronoqDeadLettersRising", {
        dead_letters("team-a", "batch"): "0x240",
        dead_letters("team-b", "idle"): "0x240",
        'cronoq_tasks_total{%s,namespace="team-a",pool="batch",status="succeeded"}' % POD_A: "0+3x240",
    }, quiet(120)),
    # Every replica reports it is not the leader from 10m30s (the Lease cannot be taken):
    # pending from 11m, firing 5 minutes later.
    "no-leader-fires": Case("CronoqNoLeader", {
        own("cronoq_leader", POD_A): "1x20 0x60",
        own("cronoq_leader", POD_B): "0x80",
    }, {10: [], 15: [], 16: [({"severity": "critical"}, NO_LEADER)], 30: [({"severity": "critical"}, NO_LEADER)]}),
    # No operator is scraped from 10m30s (its pods are gone: the scrape writes stale markers):
    # the absent() branch, which names the release it looked for.
    "no-leader-fires-when-none-is-scraped": Case("CronoqNoLeader", {
        own("cronoq_leader", POD_A): "1x20 stale",
        own("cronoq_stale_completions_total", POD_A): "0x20 stale",
    }, {10: [], 14: [],
        16: [({"severity": "critical", "job": JOB, "namespace": RELEASE_NS}, NO_LEADER)]}),
    # The leader's pod is replaced: its series ends, the new pod's starts at 0 and takes the
    # Lease 1m30s later; the lone standby of another release reports 0 all along.
    "no-leader-not-on-a-restart": Case("CronoqNoLeader", {
        own("cronoq_leader", POD_A): "1x20 stale",
        own("cronoq_leader", POD_B): "_x22 0x2 1x60",
        f'cronoq_leader{{job="other-metrics",instance="10.0.1.1:9090",namespace="{RELEASE_NS}"}}': "0x80",
    }, quiet(40)),
    # One stale completion at 10m30s: pending from 11m, firing at 16m (for: 5m), resolved at 25m,
    # when the 15-minute window no longer holds the sample before it.
    "stale-completions-fire": Case("CronoqStaleCompletionsRising", {
        own("cronoq_stale_completions_total"): "0x20 1x60",
    }, {11: [], 15: [], 16: [({"severity": "warning"}, stale_annotations("1"))],
        24: [({"severity": "warning"}, stale_annotations("1"))], 25: []}),
    # Two stale completions at 10m30s (they fire at 16m), then the operator restarts at 31m: its
    # counter's drop to 0 fires nothing, nor does another release's operator counting all along.
    "stale-completions-not-on-a-restart": Case("CronoqStaleCompletionsRising", {
        own("cronoq_stale_completions_total"): "0x20 2x40 0x120",
        f'cronoq_stale_completions_total{{job="other-metrics",instance="10.0.1.1:9090",namespace="{RELEASE_NS}"}}':
            "0+1x180",
    }, {**{m: [] for m in range(35, 91, 5)}, 31: [], 32: []}),
    "stale-completions-not-when-quiet": Case("CronoqStaleCompletionsRising", {
        own("cronoq_stale_completions_total"): "0x240",
    }, quiet(120)),
    # Two attempts lose their lease at 10m30s, three more at 13m.
    "lease-expirations-fire": Case("CronoqLeaseExpirationsRising", {
        own("cronoq_lease_expirations_total"): "0x20 2x4 5x60",
    }, {15: [], 16: [({"severity": "warning"}, lease_annotations("5"))],
        # the two of 10m30s have left the window: increase() reads 3.103 for the other three
        27: [({"severity": "warning"}, lease_annotations("3"))], 29: []}),
    # Three expirations at 10m30s, then the operator's pod is replaced at 31m: the new pod's
    # counter is a new series, from 0.
    "lease-expirations-not-on-a-restart": Case("CronoqLeaseExpirationsRising", {
        own("cronoq_lease_expirations_total", POD_A): "0x20 3x40 stale",
        own("cronoq_lease_expirations_total", POD_B): "_x61 0x120",
    }, {**{m: [] for m in range(35, 91, 5)}, 31: [], 32: []}),
    "lease-expirations-not-when-quiet": Case("CronoqLeaseExpirationsRising", {
        own("cronoq_lease_expirations_total"): "0x240",
    }, quiet(120)),
}


@pytest.fixture(scope="module")
def shipped_rules(render, tmp_path_factory):
    """The rule file Prometheus gets from the chart's PrometheusRule (its spec is a rule file's
    content), rendered with the default values in release `cronoq` of namespace cronoq-system."""
    objects = render(namespace=RELEASE_NS, sets={"metrics.prometheusRule.enabled": "true"})
    rule = only(objects, "PrometheusRule")
    path = tmp_path_factory.mktemp("rules") / "cronoq-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def promtool_test_rules(promtool: str, rules, tests: list[dict], tmp_path) -> subprocess.CompletedProcess:
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests},
                                   sort_keys=False))
    return subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120)


def test_the_shipped_rules_pass_promtools_check(promtool, shipped_rules):
    result = subprocess.run([promtool, "check", "rules", str(shipped_rules)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 4 rules found" in result.stdout


def test_every_alert_has_a_firing_and_a_quiet_case(shipped_rules):
    alerts = {r["alert"] for g in yaml.safe_load(shipped_rules.read_text())["groups"] for r in g["rules"]}
    assert alerts == {"CronoqDeadLettersRising", "CronoqNoLeader", "CronoqStaleCompletionsRising",
                      "CronoqLeaseExpirationsRising"}
    for alert in alerts:
        cases = [c for c in CASES.values() if c.alert == alert]
        assert any(any(expected for expected in c.alerts.values()) for c in cases), f"{alert} never fires"
        assert any(not any(expected for expected in c.alerts.values()) for c in cases), f"{alert} has no quiet case"


@pytest.mark.parametrize("name", CASES)
def test_alert(name, promtool, shipped_rules, tmp_path):
    result = promtool_test_rules(promtool, shipped_rules, [CASES[name].promtool_test()], tmp_path)
    assert result.returncode == 0, f"promtool test rules:\n{result.stdout}{result.stderr}"


def test_promtool_fails_a_wrong_expectation(promtool, shipped_rules, tmp_path):
    """The harness can fail: the dead letters fire at 11m, not 10m."""
    case = CASES["dead-letters-fire"]
    wrong = Case(case.alert, case.series, {10: case.alerts[11]})
    result = promtool_test_rules(promtool, shipped_rules, [wrong.promtool_test()], tmp_path)
    assert result.returncode == 1 and "CronoqDeadLettersRising" in result.stdout + result.stderr


def test_selector_and_alert_labels_of_the_values(render, promtool, tmp_path):
    """With metrics.prometheusRule.selector and alertLabels set, only the selected series count
    and every alert carries the extra labels."""
    objects = render(namespace=RELEASE_NS, sets={"metrics.prometheusRule.enabled": "true"},
                     set_json={"metrics.prometheusRule.selector": 'cluster="prod"',
                               "metrics.prometheusRule.alertLabels": {"team": "platform"}})
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": only(objects, "PrometheusRule")["spec"]["groups"]}, sort_keys=False))
    prod = 'cronoq_tasks_total{cluster="prod",namespace="team-a",pool="batch",status="dead_lettered"}'
    staging = 'cronoq_tasks_total{cluster="staging",namespace="team-a",pool="etl",status="dead_lettered"}'
    labels = {"alertname": "CronoqDeadLettersRising", "namespace": "team-a", "pool": "batch",
              "severity": "warning", "team": "platform"}
    case = Case("CronoqDeadLettersRising", {prod: "0x20 1x20", staging: "0x10 5x30"},
                {11: [(labels, dead_letter_annotations("1", "team-a", "batch"))]})
    leaderless = Case("CronoqNoLeader", {'cronoq_leader{cluster="prod"}': "0x20", 'cronoq_leader{cluster="staging"}': "1x20"},
                      {5: [({"alertname": "CronoqNoLeader", "severity": "critical", "team": "platform"}, NO_LEADER)]})
    result = promtool_test_rules(promtool, rules, [case.promtool_test(), leaderless.promtool_test()], tmp_path)
    assert result.returncode == 0, f"promtool test rules:\n{result.stdout}{result.stderr}"
