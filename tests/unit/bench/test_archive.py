"""The archive scenario's part of the report: the same N off and on, side by side, with the rows
the archive held."""
from __future__ import annotations

from bench import report


def burst(throughput: float, cpu_per_task: float, after: dict | None = None) -> dict:
    lat = {"p50": 0.5, "p99": 1.5}
    run = {"throughput": throughput, "latency": {"to_job": lat, "to_succeeded": lat},
           "operator": {"cpu_seconds_per_task": cpu_per_task, "rss_after": 100 * 2**20}}
    if after is not None:
        run["after"] = after
    return run


def test_the_report_puts_the_archive_off_and_on_side_by_side() -> None:
    rows = {"n": 300, "off": burst(40.0, 0.004),
            "on": burst(39.0, 0.0042, {"task_rows": 300, "attempt_rows": 300, "duplicate_rows": 0})}
    lines = report._archive({"throughput": [{"archive": rows}, {"cronoq": {}}]})
    table = [line for line in lines if line.startswith("| 300 |")]
    assert table == ["| 300 | off | 40.0 | 0.500 / 1.500 | 0.500 / 1.500 | 4.00 | 100 MiB | — |",
                     "| 300 | on | 39.0 | 0.500 / 1.500 | 0.500 / 1.500 | 4.20 | 100 MiB | 300, 300, 0 |"]
    assert report._archive({"throughput": [{"cronoq": {}}]}) == []
