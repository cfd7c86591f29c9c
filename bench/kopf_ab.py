"""Why not kopf, measured: the operator with its own watches (kube/watch.py) beside the same
operator with kopf's (bench/kopf_watch.py), on one bench cluster, in one run:

    .venv/bin/python bench/run.py --only kopf-ab --sizes 1000 --idle-tasks 10000 --kopf-rounds 2

Only the watch layer differs: both sides are the measured revision's Runtime, intake, store,
reconciler and writes, started with the same flags, over the same objects. Measured as the
bench's own scenarios measure cronoq (same load generator, observer, audit log, /proc):

- operator CPU per task: bursts of N Tasks (the smallest --sizes) in a fresh namespace with a
  fresh operator, the two sides alternately, --kopf-rounds times each (the order swapped every round);
- RSS over --idle-tasks finished Tasks (with their Jobs and pods), made once by the operator
  itself (bench/fill.py): a fresh operator of each side, as the idle scenario measures it (start,
  listed, CPU quiet, then at rest), alternately, --kopf-rounds times each.

The results' `kopf_ab` holds every run; `table()` gives each side's medians.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from bench.cluster import log
from bench.fill import fill
from bench.idle import IDLE_SECONDS, measure
from bench.kubeapi import tasks_path
from bench.throughput import Context, cronoq

SIDES = {"watch.py": "cronoq", "kopf": "bench.kopf_watch"}
"""Side → the module `python -m` runs as the operator."""
MIB = 2**20


def order(round_: int) -> list[str]:
    """Both sides each round, the first one swapped every round."""
    sides = list(SIDES)
    return sides if round_ % 2 == 0 else sides[::-1]


def kopf_ab(ctx: Context, tasks: int, finished: int, rounds: int, idle_seconds: float = IDLE_SECONDS) -> dict[str, Any]:
    import kopf  # in the test and bench extras

    sides = {side: dataclasses.replace(ctx, operator_module=module) for side, module in SIDES.items()}
    results: dict[str, Any] = {"kopf": kopf.__version__, "bursts": [], "idle": [],
                               "options": {"tasks": tasks, "finished": finished, "rounds": rounds,
                                           "idle_seconds": idle_seconds}}
    for r in range(rounds):
        for side in order(r):
            run = cronoq(sides[side], tasks, label=f"{side.split('.')[0]}-{r}")
            results["bursts"].append({"side": side, "round": r, **run})
            log(f"kopf A/B: {side} burst {r}: {run['operator']['cpu_seconds_per_task'] * 1000:.2f} ms/task")
    ns = ctx.cluster.namespace("bench-kopf-finished")
    made = fill(sides["watch.py"], ns, finished)
    for r in range(rounds):
        for side in order(r):
            run = measure(sides[side], [ns], {ns: ctx.cluster.api.count(tasks_path(ns))}, made, idle_seconds)
            results["idle"].append({"side": side, "round": r, **run})
            log(f"kopf A/B: {side} idle {r}: RSS {run['rss_idle'] / MIB:.0f} MiB")
    ctx.cluster.delete_namespace(ns)
    return results


def figures(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per side, the medians over its rounds of what the table shows."""
    def median(runs: list[dict[str, Any]], value) -> float | None:
        values = [value(r) for r in runs]
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    out = {}
    for side in SIDES:
        bursts = [b for b in results["bursts"] if b["side"] == side]
        idle = [i for i in results["idle"] if i["side"] == side]
        out[side] = {
            "cpu_ms_per_task": median(bursts, lambda b: b["operator"]["cpu_seconds_per_task"] * 1000),
            "writes_per_task": median(bursts, lambda b: b["api"]["writes_per_task"]),
            "throughput": median(bursts, lambda b: b["throughput"]),
            "rss_peak_burst_mib": median(bursts, lambda b: b["operator"]["rss_peak"] / MIB),
            "rss_idle_mib": median(idle, lambda i: i["rss_idle"] / MIB),
            "rss_peak_startup_mib": median(idle, lambda i: i["rss_peak_startup"] / MIB),
            "listed_seconds": median(idle, lambda i: i["listed_seconds"]),
            "cpu_seconds_to_settle": median(idle, lambda i: i["cpu_seconds_to_settle"]),
        }
    return out


ROWS = (("operator CPU per task, burst of N (ms)", "cpu_ms_per_task", 2),
        ("operator writes per task", "writes_per_task", 2),
        ("burst throughput (tasks/s)", "throughput", 1),
        ("operator RSS peak in the burst (MiB)", "rss_peak_burst_mib", 0),
        ("RSS at rest over the finished Tasks (MiB)", "rss_idle_mib", 0),
        ("RSS peak while starting over them (MiB)", "rss_peak_startup_mib", 0),
        ("start → listed and leading (s)", "listed_seconds", 1),
        ("CPU from start until quiet (s)", "cpu_seconds_to_settle", 1))


def table(results: dict[str, Any]) -> str:
    """The Markdown table: each side's median over its rounds, and kopf's over watch.py's."""
    f = figures(results)
    o = results["options"]
    a, b = f["watch.py"], f["kopf"]
    lines = [f"N = {o['tasks']} per burst, {o['finished']:,} finished Tasks, {o['rounds']} rounds of each "
             f"(medians); kopf {results['kopf']}", "",
             "| | kube/watch.py | kopf | kopf / watch.py |", "|---|---|---|---|"]
    for label, key, digits in ROWS:
        x, y = a[key], b[key]
        ratio = f"{y / x:.2f}×" if x and y is not None else "–"
        lines.append(f"| {label} | {_n(x, digits)} | {_n(y, digits)} | {ratio} |")
    return "\n".join(lines)


def _n(v: float | None, digits: int) -> str:
    return "–" if v is None else f"{v:.{digits}f}"
