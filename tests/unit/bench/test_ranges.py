"""The bench's range check (bench/ranges.py) on fabricated results, not on real timings: a figure
inside its range passes, one outside fails the run, a burst with retries fails, and a figure the
run did not measure is "not run"."""
from __future__ import annotations

from bench import ranges, report

R = ranges.Range
RANGES = {"burst.throughput_vs_bare_jobs": R(0.45, 1.0, 1000), "burst.operator_cpu_ms_per_task": R(2.0, 10.0, 1000),
          "burst.apiserver_ms_per_task": R(15.0, 75.0, 1000), "burst.writes_per_task": R(3.95, 4.05),
          "burst.dispatch_p99_s": R(0.0, 160.0, 1000), "pull.throughput_vs_bare_jobs": R(1.5, 3.5, 1000),
          "pull.writes_per_task": R(2.95, 3.05), "failover.sigkill_max_s": R(10.0, 20.0),
          "idle.rss_mib_10k": R(60.0, 150.0), "soak.rss_slope_mib_per_1000_tasks": R(-2.0, 2.0)}


def burst(n: int, first: int, writes: float, throughput: float = 20.0, cpu_ms: float = 6.0) -> dict:
    return {"n": n, "succeeded_first_attempt": first, "throughput": throughput,
            "operator": {"cpu_seconds": cpu_ms * n / 1000, "cpu_seconds_per_task": cpu_ms / 1000},
            "cluster_cpu_seconds": {"kube-apiserver": 0.04 * n, "etcd": 0.005 * n},
            "latency": {"to_job": {"p50": 3.0, "p99": 9.0}, "to_succeeded": {"p50": 5.0, "p99": 12.0}},
            "api": {"writes_per_task": writes + 0.01, "table": [
                {"write": True, "verb": "update", "resource": "tasks/status", "per_task": writes},
                {"write": True, "verb": "update", "resource": "taskpools/status", "per_task": 0.01},
                {"write": False, "verb": "get", "resource": "tasks", "per_task": 0.002}]}}


def results(cronoq: dict, **more) -> dict:
    return {"throughput": [{"n": cronoq["n"], "baseline": {"n": cronoq["n"], "throughput": 32.0}, "cronoq": cronoq}],
            **more}


def by_figure(checks: list[ranges.Check]) -> dict[str, ranges.Check]:
    return {c.figure: c for c in checks}


def test_figures_inside_their_ranges_pass_and_the_pools_status_updates_are_not_per_task_writes():
    checks = by_figure(ranges.check(results(burst(1000, 1000, 4.0)), RANGES))
    assert all(c.ok for c in checks.values())
    assert checks["burst.writes_per_task"].value == 4.0  # not 4.01: the pool's status is per pool
    assert checks["burst.throughput_vs_bare_jobs"].value == 20.0 / 32.0
    assert checks["burst.apiserver_ms_per_task"].value == 40.0 and checks["burst.dispatch_p99_s"].value == 9.0


def test_a_figure_outside_its_range_fails_and_the_table_says_so():
    slow = results(burst(1000, 1000, 4.0, throughput=10.0, cpu_ms=12.5), failover={"max_seconds": 23.4, "rounds": [{}] * 3})
    checks = ranges.check(slow, RANGES)
    failed = {c.figure: c.value for c in checks if not c.ok}
    assert failed == {"burst.throughput_vs_bare_jobs": 10.0 / 32.0, "burst.operator_cpu_ms_per_task": 12.5,
                      "failover.sigkill_max_s": 23.4}
    lines = ranges.table(checks, RANGES)
    assert "| failover.sigkill_max_s | 3 rounds | 23.4 | 10 – 20 | **FAIL** |" in lines
    assert "| burst.writes_per_task | N=1000 | 4 | 3.95 – 4.05 | pass |" in lines


def test_a_burst_of_deep_tasks_is_shown_beside_the_small_tasks_ranges_not_judged_by_them():
    deep = results(burst(1000, 1000, 4.0, cpu_ms=11.4), options={"task_shape": "deep"})
    checks = by_figure(ranges.check(deep, RANGES))
    cpu = checks["burst.operator_cpu_ms_per_task"]
    assert cpu.value == 11.4 and not cpu.judged and cpu.where == "N=1000, deep tasks"
    assert checks["burst.writes_per_task"].judged, "writes per task do not depend on the shape"
    assert "| burst.operator_cpu_ms_per_task | N=1000, deep tasks | 11.4 | 2 – 10 | deep tasks: not judged |" in (
        ranges.table(list(checks.values()), RANGES))
    small = by_figure(ranges.check(results(burst(1000, 1000, 4.0, cpu_ms=11.4)), RANGES))
    assert not small["burst.operator_cpu_ms_per_task"].ok, "the same figure of small tasks fails"


def test_a_burst_with_retries_fails_every_figure_of_it():
    checks = ranges.check(results(burst(5000, 4760, 4.0)), RANGES)
    burst_checks = [c for c in checks if c.figure.startswith("burst.")]
    assert burst_checks and all(not c.ok and c.note == ranges.INVALID for c in burst_checks)


def test_a_figure_the_run_did_not_measure_is_not_run_and_not_a_failure():
    checks = ranges.check(results(burst(1000, 1000, 4.0)), RANGES)
    lines = ranges.table(checks, RANGES)
    assert "| soak.rss_slope_mib_per_1000_tasks | | | -2 – 2 | not run |" in lines
    assert all(c.ok for c in checks)


def test_idle_is_judged_only_at_its_scale():
    """500 finished Tasks prove nothing about 10,000: no idle figure is checked."""
    small = {"tasks_present": 500, "rss_idle": 200 * ranges.MIB, "listed_seconds": 1.0}
    at_scale = {**small, "tasks_present": 10_003}
    assert [c for c in ranges.check({"idle": [small]}, {**RANGES, "idle.leading_s_10k": R(0, 15)})] == []
    checks = by_figure(ranges.check({"idle": [at_scale]}, {**RANGES, "idle.leading_s_10k": R(0, 15)}))
    assert checks["idle.rss_mib_10k"].value == 200.0 and not checks["idle.rss_mib_10k"].ok


def test_a_run_smaller_than_a_ranges_min_n_is_reported_but_not_judged():
    """The bounds cite bursts of 1,000 and 5,000; a smoke run of 50 is mostly fixed costs."""
    checks = by_figure(ranges.check(results(burst(50, 50, 4.3, cpu_ms=12.0)), RANGES))
    cpu = checks["burst.operator_cpu_ms_per_task"]
    assert not cpu.judged and cpu.ok and cpu.value == 12.0
    assert checks["burst.writes_per_task"].judged and not checks["burst.writes_per_task"].ok  # no min_n: judged
    lines = ranges.table(list(checks.values()), RANGES)
    assert "| burst.operator_cpu_ms_per_task | N=50 | 12 | 2 – 10 | below N=1,000: not judged |" in lines


def test_a_figure_with_no_range_is_an_error_of_the_bench():
    try:
        ranges.check(results(burst(1000, 1000, 4.0)), {})
    except KeyError as err:
        assert "burst.throughput_vs_bare_jobs" in str(err)
    else:
        raise AssertionError("a figure with no range passed")


def test_the_range_file_bounds_every_figure_and_cites_a_run_for_each():
    text = ranges.RANGES.read_text()
    loaded = ranges.load()
    assert set(RANGES) <= set(loaded)
    assert all(r.low < r.high for r in loaded.values())
    for name in loaded:
        block = text.split(f"\n{name}:", 1)[1].split("\n\n", 1)[0]
        assert "#" in block, f"{name} has no comment citing the runs behind it"


def test_the_pull_sweep_is_a_row_per_fleet_size_in_the_pull_table():
    """Issue 42: the fleet sizes of `--pull-sweep` show beside bare Jobs, so a change that brings
    back the fan-out (cost growing with workers) shows in the report."""
    def pull(workers: int, concurrency: int, throughput: float) -> dict:
        run = {**burst(1000, 1000, 3.0, throughput=throughput), "workers": workers, "worker_concurrency": concurrency,
               "workers_cpu_seconds_per_task": 0.002}
        run["latency"] = {"to_handler": {"p50": 3.0, "p99": 6.0}, "to_succeeded": {"p50": 4.0, "p99": 7.0}}
        return run

    row = {"n": 1000, "baseline": {"n": 1000, "throughput": 35.5, "latency": {"to_succeeded": {"p50": 9.0, "p99": 14.0}},
                                   "completed": 1000, "cluster_cpu_seconds": {}},
           "pull": pull(2, 64, 87.2), "pull_sweep": [pull(8, 16, 104.7), pull(32, 4, 76.0)]}
    table = "\n".join(report._pull({"throughput": [row]}))
    assert "| 1000 | bare Jobs | 35.5 |" in table
    assert "| 1000 | cronoq, Workers, 8 × 16 | 104.7 |" in table and "| 1000 | cronoq, Workers, 32 × 4 | 76.0 |" in table


def test_a_burst_of_the_deep_scenarios_tasks_is_theirs_in_the_bursts_pool():
    """--task-shape deep: a drain is compared with a burst of its own tasks, not of small ones."""
    from bench.deep import realistic_task
    from bench.throughput import POOL, shaped

    small, deep = shaped("small", "t-7", 7), shaped("deep", "t-7", 7)
    assert small["spec"]["pool"] == deep["spec"]["pool"] == POOL
    assert deep["spec"]["env"] == realistic_task("t-7", 7)["spec"]["env"] and "env" not in small["spec"]
    assert deep["spec"]["podMetadata"] == small["spec"]["podMetadata"]  # kwok plays both alike


def test_the_gaming_tenants_share_is_judged_by_submitter_and_the_default_is_shown_beside_it():
    """Issue 54: the figure is the gamer's share of the starts under fairShare by submitter; the
    default order's share (the gamer takes nearly all) is in the report, not judged."""
    def run(label: str, share: float | None) -> dict:
        return {"label": label, "a_tasks": 300, "b_tasks": 50, "concurrency": 20, "fair_share": None,
                "timed_out": False, "submit_errors": 0, "gamer_share": share, "b_last_finished_seconds": 30.0}

    gaming = {"default": run("default", 0.93), "shares": run("shares", 0.51)}
    bounds = {"gaming.gamer_share": R(0.4, 0.6)}
    checks = by_figure(ranges.check({"gaming": gaming}, bounds))
    assert checks["gaming.gamer_share"].ok and checks["gaming.gamer_share"].value == 0.51
    assert not by_figure(ranges.check({"gaming": {**gaming, "shares": run("shares", 0.9)}}, bounds))[
        "gaming.gamer_share"].ok
    text = "\n".join(report._gaming(gaming))
    assert "| default (no fairShare) | 0.93 |" in text and "| fairShare by submitter | 0.51 |" in text


def test_a_feature_off_and_on_is_judged_by_the_ratio_of_its_two_bursts_and_the_on_bursts_writes():
    ranges_ = {**RANGES, "keys.throughput_vs_off": R(0.5, 1.1), "keys.operator_cpu_vs_off": R(0.9, 1.5),
               "keys.writes_per_task": R(3.95, 4.6)}
    ab = {"n": 200, "off": burst(200, 200, 4.0, throughput=20.0, cpu_ms=5.0),
          "on": burst(200, 200, 4.5, throughput=15.0, cpu_ms=8.0)}
    checks = by_figure(ranges.check({"throughput": [{"n": 200, "keys": ab}]}, ranges_))
    assert checks["keys.throughput_vs_off"].value == 0.75 and checks["keys.writes_per_task"].value == 4.5
    assert checks["keys.operator_cpu_vs_off"].value == 8.0 / 5.0 and not checks["keys.operator_cpu_vs_off"].ok
    ab["on"] = burst(200, 199, 4.5)  # a retry in either burst: no figure
    checks = by_figure(ranges.check({"throughput": [{"n": 200, "keys": ab}]}, ranges_))
    assert checks["keys.throughput_vs_off"].value is None and not checks["keys.throughput_vs_off"].ok
