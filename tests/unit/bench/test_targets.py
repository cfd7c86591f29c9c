"""The bench's target verdicts: a cronoq burst that did not end with every task succeeding on its
first attempt is marked invalid and judged neither met nor missed."""
from __future__ import annotations

from bench.targets import judge


def burst(n: int, first: int, writes: float) -> dict:
    return {"n": n, "succeeded_first_attempt": first, "throughput": 10.0,
            "operator": {"cpu_seconds_per_task": 0.006},
            "api": {"table": [{"write": True, "resource": "tasks/status", "per_task": writes},
                              {"write": True, "resource": "taskpools/status", "per_task": 0.01}]}}


def verdicts(cronoq: dict) -> dict[str, object]:
    results = {"throughput": [{"n": cronoq["n"], "baseline": {"n": cronoq["n"], "throughput": 16.0},
                               "cronoq": cronoq}]}
    return {v.target: v for v in judge(results)}


def test_a_clean_burst_is_judged():
    v = verdicts(burst(1000, 1000, 4.0))
    assert v["≤ 4 operator API writes per task succeeding on its first attempt"].met is True
    assert v["operator CPU ≤ 10 ms per task (N=1000)"].met is True


def test_the_ratios_to_bare_jobs_are_no_longer_targets():
    """Issue 28's goals against the peers replaced them; bare Jobs stay in the tables as the floor."""
    assert not [t for t in verdicts(burst(1000, 1000, 4.0)) if "bare Jobs" in t]


def test_a_burst_with_retries_is_invalid_neither_met_nor_missed():
    v = verdicts(burst(5000, 4760, 17.2))
    writes = v["≤ 4 operator API writes per task succeeding on its first attempt"]
    assert writes.met is None and "invalid" in writes.measured
    assert v["operator CPU ≤ 10 ms per task (N=5000)"].mark == "not measured"


def test_pull_workers_are_judged_against_twice_the_bare_jobs_of_their_run():
    pull = {**burst(1000, 1000, 4.0), "throughput": 30.0}
    lean = {**burst(1000, 999, 3.0), "throughput": 40.0}
    results = {"throughput": [{"n": 1000, "baseline": {"n": 1000, "throughput": 16.0},
                               "pull": pull, "pull_lean": lean}]}
    v = {v.target: v for v in judge(results)}
    assert v["pull workers ≥ 2× bare Jobs' throughput (N=1000)"].met is False
    assert v["pull workers ≥ 2× bare Jobs' throughput (N=1000)"].measured == "1.88× (30.0 vs 16.0/s)"
    lean_verdict = v["pull workers, `--events=warnings` ≥ 2× bare Jobs' throughput (N=1000)"]
    assert lean_verdict.met is None and "invalid" in lean_verdict.measured


def test_the_pull_sweep_is_a_row_per_fleet_size_in_the_pull_table():
    """Issue 42: the fleet sizes of `--pull-sweep` show beside bare Jobs, so a change that brings
    back the fan-out (cost growing with workers) shows in the report."""
    import json
    from pathlib import Path

    from bench import report

    run = json.loads((Path(__file__).parents[3] / "bench" / "results" / "run-20261206-010726.json").read_text())
    table = "\n".join(report._pull(run))
    assert "| 1000 | bare Jobs |" in table
    assert "| 1000 | cronoq, Workers, 2 × 64 | 76.2 |" in table and "| 1000 | cronoq, Workers, 32 × 4 | 75.8 |" in table


def test_a_burst_of_the_deep_scenarios_tasks_is_theirs_in_the_bursts_pool():
    """--task-shape deep: a drain is compared with a burst of its own tasks, not of small ones."""
    from bench.deep import realistic_task
    from bench.throughput import POOL, shaped

    small, deep = shaped("small", "t-7", 7), shaped("deep", "t-7", 7)
    assert small["spec"]["pool"] == deep["spec"]["pool"] == POOL
    assert deep["spec"]["env"] == realistic_task("t-7", 7)["spec"]["env"] and "env" not in small["spec"]
    assert deep["spec"]["podMetadata"] == small["spec"]["podMetadata"]  # kwok plays both alike
