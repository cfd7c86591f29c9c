"""The on/off scenarios (bench/onoff.py): the report puts each feature off and on side by side, and
the key-limit burst's tasks take turns over two pools and a few keys, the same tasks off and on."""
from __future__ import annotations

from bench import onoff, report


def burst(throughput: float, cpu_per_task: float, after: dict | None = None) -> dict:
    lat = {"p50": 0.5, "p99": 1.5}
    run = {"throughput": throughput, "latency": {"to_job": lat, "to_succeeded": lat},
           "operator": {"cpu_seconds_per_task": cpu_per_task, "rss_after": 100 * 2**20},
           "api": {"table": [{"write": True, "resource": "tasks/status", "per_task": 2.0},
                             {"write": True, "resource": "taskpools/status", "per_task": 0.1}]}}
    if after is not None:
        run["after"] = after
    return run


def test_the_report_puts_each_feature_off_and_on_side_by_side() -> None:
    archive = {"n": 300, "off": burst(40.0, 0.004),
               "on": burst(39.0, 0.0042, {"rows": 300, "attempt_rows": 300, "duplicate_rows": 0})}
    tracing = {"n": 300, "off": burst(40.0, 0.004), "on": burst(38.0, 0.005, {"rows": 300, "wait_seconds": 5.1})}
    lines = report._onoff({"throughput": [{"archive": archive, "tracing": tracing}, {"cronoq": {}}]})
    table = [line for line in lines if line.startswith("| 300 |")]
    assert table == ["| 300 | off | 40.0 | 0.500 / 1.500 | 0.500 / 1.500 | 4.00 | 2.00 | 100 MiB | — |",
                     "| 300 | on | 39.0 | 0.500 / 1.500 | 0.500 / 1.500 | 4.20 | 2.00 | 100 MiB | 300, 300, 0 |",
                     "| 300 | off | 40.0 | 0.500 / 1.500 | 0.500 / 1.500 | 4.00 | 2.00 | 100 MiB | — |",
                     "| 300 | on | 38.0 | 0.500 / 1.500 | 0.500 / 1.500 | 5.00 | 2.00 | 100 MiB | 300 |"]
    assert [line for line in lines if line.startswith("## ")] == [
        "## The archive (`--archive`, SQLite): off and on, same run",
        "## Tracing (OTLP to a local Jaeger): off and on, same run"]
    assert report._onoff({"throughput": [{"cronoq": {}}]}) == []


def test_the_keyed_burst_spreads_its_tasks_over_two_pools_and_a_few_keys_whose_limit_one_pool_declares():
    pools, tasks = onoff.keyed(8, keys=True)
    assert [t["spec"]["pool"] for t in tasks[:4]] == ["bench", "other", "bench", "other"]
    assert {k for t in tasks for k in t["spec"]["concurrencyKeys"]} == {f"customer-{i}" for i in range(onoff.KEYS)}
    assert [p["spec"].get("concurrencyKeyLimits") for p in pools] == [
        [{"key": "customer-*", "limit": onoff.KEY_LIMIT}], None]
    plain_pools, plain = onoff.keyed(8, keys=False)
    assert [t["spec"]["pool"] for t in plain] == [t["spec"]["pool"] for t in tasks]
    assert not any("concurrencyKeys" in t["spec"] or "concurrencyKeyLimits" in p["spec"] for t, p in zip(plain, plain_pools))
