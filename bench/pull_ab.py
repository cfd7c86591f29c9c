"""Pull delivery of two (or more) revisions beside bare Jobs, on one bench cluster, in one run,
interleaved (issue 42: pull ≥ 2x bare Jobs with the shipped defaults, at 2 and at 32 workers):

    .venv/bin/python -m bench.pull_ab --source before=01627fb --source after=HEAD \\
        --cluster-dir /tmp/cronoq-bench-ab --port-offset 3150

Every round runs N bare Jobs, then the bench's pull burst (bench/pull.py: N Tasks, a fresh
namespace, operator and fleet) for every fleet (`--fleets`, workers x concurrency: 2x64 and 32x4,
128 handler slots each) and every revision, the revisions' order swapped every round; operator and
workers both come from the revision (`--source NAME=REV`, as bench/run.py's --source), with the
shipped defaults (the bench's own flags only: no leader election, --trust-worker-leases), and so do
the CRDs (applied before each of its bursts: the API server's rules are part of a revision's cost). A pull
burst's ratio is to the bare Jobs of its own round. With --profile, one more burst per revision
and fleet, sampled (bench/pull_profile.py; a cluster this run starts serves the API server's
profile), kept apart from the measured ones.

Writes `pull-ab-<stamp>.json` and `.md` into --results (never latest.*).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.cluster import BenchCluster, log
from bench.failover import LEASE
from bench.procstat import load_average
from bench.pull import pull
from bench.run import crds_beside, machine, snapshot
from bench.throughput import Context, baseline

REPO = Path(__file__).resolve().parent.parent


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.pull_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--source", action="append", required=True, metavar="NAME=REV",
                   help="a revision to run (git revision or `worktree`), named; give two or more")
    p.add_argument("--fleets", default="2x64,32x4", help="workers x concurrency of each fleet, comma-separated")
    p.add_argument("--tasks", type=int, default=1000, help="N of every burst (bare Jobs and pull)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--profile", action="store_true", help="one more sampled burst per revision and fleet")
    p.add_argument("--creators", type=int, default=16)
    p.add_argument("--cluster-dir", type=Path, default=Path("/tmp/cronoq-bench-ab"))
    p.add_argument("--port-offset", type=int, default=3150)
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    args.source = [s.split("=", 1) for s in args.source]
    args.fleets = [tuple(int(x) for x in f.split("x")) for f in args.fleets.split(",") if f]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    cluster = BenchCluster(directory=args.cluster_dir, port_offset=args.port_offset)
    work = args.cluster_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    sources = {name: snapshot(rev, work) for name, rev in args.source}
    crds = {name: crds_beside(path) for name, (path, _) in sources.items()}
    if args.profile:
        os.environ["CRONOQ_APISERVER_PROFILING"] = "1"  # read by hack/devcluster.py when it starts the cluster
    started = datetime.now(timezone.utc)
    stamp = started.strftime("%Y%m%d-%H%M%S")
    results: dict[str, Any] = {"started": started.isoformat(timespec="seconds"), "machine": machine(),
                               "sources": {name: described for name, (_, described) in sources.items()},
                               "options": {"tasks": args.tasks, "rounds": args.rounds, "fleets": args.fleets,
                                           "creators": args.creators},
                               "rounds": [], "profiles": []}
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / f"pull-ab-{stamp}"

    def save() -> None:
        results["machine"]["load_average_end"] = load_average()
        out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))
        out.with_suffix(".md").write_text(table(results))

    base = Context(cluster=cluster, work=work, source=None, creators=args.creators,
                   operator_args=("--no-leader-election",), leader_lease=("cronoq-leader", LEASE))
    ctx = {name: replace(base, source=path) for name, (path, _) in sources.items()}
    names = list(sources)
    n = args.tasks
    cluster.up()
    try:
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            row: dict[str, Any] = {"round": r, "baseline": baseline(base, n), "pull": []}
            results["rounds"].append(row)
            for workers, concurrency in args.fleets:
                for name in order:
                    cluster.use_crds(crds[name])
                    run = pull(ctx[name], n, label=f"{name}-w{workers}", workers=workers, concurrency=concurrency)
                    run["source"] = name
                    row["pull"].append(run)
                    save()
            save()
        if args.profile:
            for workers, concurrency in args.fleets:
                for name in names:
                    cluster.use_crds(crds[name])
                    run = pull(ctx[name], n, label=f"prof-{name}-w{workers}", workers=workers,
                               concurrency=concurrency, profile=True)
                    run["source"] = name
                    results["profiles"].append(run)
                    save()
    finally:
        results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        save()
        if not args.keep_cluster:
            cluster.down()
    print(table(results))
    log(f"results: {out.with_suffix('.md')}")
    return 0


def figures(run: dict[str, Any], jobs: float | None) -> dict[str, Any]:
    n = run["n"]
    cpu = run.get("cluster_cpu_seconds") or {}
    lat = run["latency"]["to_handler"]
    return {"tasks_per_s": run["throughput"], "ratio": run["throughput"] / jobs if run["throughput"] and jobs else None,
            "apiserver_ms": 1000 * cpu.get("kube-apiserver", 0) / n, "etcd_ms": 1000 * cpu.get("etcd", 0) / n,
            "apiserver_s": cpu.get("kube-apiserver"),
            "workers_ms": 1000 * run["workers_cpu_seconds_per_task"],
            "operator_ms": 1000 * run["operator"]["cpu_seconds_per_task"],
            "writes": run["api"]["writes_per_task"], "handler_p50": lat.get("p50"), "handler_p99": lat.get("p99"),
            "first_attempt": run["succeeded_first_attempt"], "load": (run.get("load_average") or {}).get("before")}


COLUMNS = (("tasks/s", "tasks_per_s", 1), ("vs bare Jobs", "ratio", 2), ("API server ms/task", "apiserver_ms", 1),
           ("etcd ms/task", "etcd_ms", 1), ("workers ms/task", "workers_ms", 2), ("operator ms/task", "operator_ms", 2),
           ("writes/task", "writes", 2), ("create → handler p50 s", "handler_p50", 2),
           ("p99 s", "handler_p99", 2))


def table(results: dict[str, Any]) -> str:
    """Every burst, then the medians per revision and fleet."""
    lines = [f"# Pull delivery A/B, {results['started']}", ""]
    lines += [f"- `{name}`: {described}" for name, described in results["sources"].items()]
    m = results["machine"]
    lines += [f"- machine: {m.get('nproc')} × {m.get('cpu')}; load average at the start "
              f"{_load(m.get('load_average_start'))}, at the end {_load(m.get('load_average_end'))}", ""]
    head = "| round | run | load | " + " | ".join(c[0] for c in COLUMNS) + " | first attempt |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for row in results["rounds"]:
        jobs = row["baseline"]["throughput"]
        lines.append(f"| {row['round']} | bare Jobs | {_load(row['baseline']['load_average']['before'])} | "
                     f"{_n(jobs, 1)} | 1.00 |" + " |" * (len(COLUMNS) - 2) + " |")
        for run in row["pull"]:
            f = figures(run, jobs)
            groups.setdefault((run["source"], run["workers"], run["worker_concurrency"]), []).append(f)
            lines.append(f"| {row['round']} | {run['source']} {run['workers']}×{run['worker_concurrency']} | "
                         f"{_load(f['load'])} | " + " | ".join(_n(f[k], d) for _, k, d in COLUMNS)
                         + f" | {f['first_attempt']}/{run['n']} |")
    jobs_all = [row["baseline"]["throughput"] for row in results["rounds"] if row["baseline"]["throughput"]]
    lines += ["", f"Medians over the rounds (bare Jobs: {_n(statistics.median(jobs_all), 1) if jobs_all else '–'}/s):", ""]
    head = "| run | " + " | ".join(c[0] for c in COLUMNS) + " |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for (source, w, c), fs in groups.items():
        med = {k: _median([f[k] for f in fs]) for _, k, _ in COLUMNS}
        lines.append(f"| {source} {w}×{c} | " + " | ".join(_n(med[k], d) for _, k, d in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _n(v: float | None, digits: int) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _load(v: Any) -> str:
    return "–" if not v else f"{v[0]:.1f}"


if __name__ == "__main__":
    raise SystemExit(main())
