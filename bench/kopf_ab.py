"""Why not kopf, measured: the operator with its own watches (kube/watch.py) beside the same
operator with kopf's (bench/kopf_watch.py), on one bench cluster, in one run:

    .venv/bin/python -m bench.kopf_ab --port-offset 3600 --cluster-dir /tmp/cronoq-bench-kopf

Only the watch layer differs: both sides are the measured revision's Runtime, intake, store,
reconciler and writes, started with the same flags, over the same objects. Measured as the
bench's own scenarios measure cronoq (same load generator, observer, audit log, /proc):

- operator CPU per task: bursts of --tasks Tasks (1000) in a fresh namespace with a fresh
  operator, the two sides alternately, --rounds times each (the order swapped every round);
- RSS over --finished finished Tasks (10,000, with their Jobs and pods), made once by the
  operator itself (bench/fill.py): a fresh operator of each side, as the idle scenario measures
  it (start, listed, CPU quiet, then --idle-seconds at rest), alternately, --rounds times each;
- with --profile, one more burst of each side sampled by py-spy (bench/profiling.py), kept apart
  from the measured ones: where each side's CPU goes.

Writes `kopf-ab-<stamp>.json` into --results and prints the table (`table()`).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.cluster import BenchCluster, log
from bench.fill import fill
from bench.idle import IDLE_SECONDS, measure
from bench.kubeapi import tasks_path
from bench.run import machine, snapshot
from bench.throughput import Context, cronoq

REPO = Path(__file__).resolve().parent.parent
SIDES = {"watch.py": "cronoq", "kopf": "bench.kopf_watch"}
"""Side → the module `python -m` runs as the operator."""
MIB = 2**20


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.kopf_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=1000, help="Tasks per burst")
    p.add_argument("--finished", type=int, default=10_000, help="finished Tasks the idle operators start over")
    p.add_argument("--rounds", type=int, default=2, help="bursts and idle measurements of each side")
    p.add_argument("--idle-seconds", type=float, default=IDLE_SECONDS)
    p.add_argument("--source", default="HEAD", help="git revision of operator/ to run, or `worktree`")
    p.add_argument("--cluster-dir", type=Path, default=Path("/tmp/cronoq-bench-kopf"))
    p.add_argument("--port-offset", type=int, default=3600)
    p.add_argument("--profile", action="store_true", help="one more burst of each side, sampled by py-spy")
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    return p.parse_args(argv)


def order(round_: int) -> list[str]:
    """Both sides each round, the first one swapped every round."""
    sides = list(SIDES)
    return sides if round_ % 2 == 0 else sides[::-1]


def main(argv: list[str] | None = None) -> int:
    import kopf

    args = parse(argv)
    cluster = BenchCluster(directory=args.cluster_dir, port_offset=args.port_offset)
    work = args.cluster_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    source, described = snapshot(args.source, work)
    started = datetime.now(timezone.utc)
    results: dict[str, Any] = {"started": started.isoformat(timespec="seconds"), "machine": machine(),
                               "operator_source": described, "kopf": kopf.__version__,
                               "options": {"tasks": args.tasks, "finished": args.finished, "rounds": args.rounds,
                                           "idle_seconds": args.idle_seconds},
                               "bursts": [], "idle": [], "profiles": {}}
    out = args.results / f"kopf-ab-{started.strftime('%Y%m%d-%H%M%S')}.json"
    cluster.up()
    try:
        ctx = {side: Context(cluster=cluster, work=work, source=source, creators=16,
                             operator_args=("--no-leader-election",), operator_module=module, profile=args.profile)
               for side, module in SIDES.items()}
        for r in range(args.rounds):
            for side in order(r):
                run = cronoq(ctx[side], args.tasks, label=f"{side.split('.')[0]}-{r}")
                results["bursts"].append({"side": side, "round": r, **run})
                log(f"kopf A/B: {side} burst {r}: {run['operator']['cpu_seconds_per_task'] * 1000:.2f} ms/task")
        for side in SIDES if args.profile else ():
            run = cronoq(ctx[side], args.tasks, label=f"{side.split('.')[0]}-profile", profile=True)
            results["profiles"][side] = run["profile"]
        ns = cluster.namespace("bench-kopf-finished")
        made = fill(ctx["watch.py"], ns, args.finished)
        for r in range(args.rounds):
            for side in order(r):
                run = measure(ctx[side], [ns], {ns: cluster.api.count(tasks_path(ns))}, made, args.idle_seconds)
                results["idle"].append({"side": side, "round": r, **run})
                log(f"kopf A/B: {side} idle {r}: RSS {run['rss_idle'] / MIB:.0f} MiB")
        cluster.delete_namespace(ns)
    finally:
        results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        args.results.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=str))
        if not args.keep_cluster:
            cluster.down()
    print(table(results))
    log(f"results: {out}")
    return 0


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
             f"(medians); kopf {results['kopf']}; operator {results['operator_source']}", "",
             "| | kube/watch.py | kopf | kopf / watch.py |", "|---|---|---|---|"]
    for label, key, digits in ROWS:
        x, y = a[key], b[key]
        ratio = f"{y / x:.2f}×" if x and y is not None else "–"
        lines.append(f"| {label} | {_n(x, digits)} | {_n(y, digits)} | {ratio} |")
    return "\n".join(lines)


def _n(v: float | None, digits: int) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
