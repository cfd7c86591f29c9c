#!/usr/bin/env python3
"""`make bench`: cronoq beside bare Jobs on a local test cluster of the bench's own.

    .venv/bin/python bench/run.py                      # N = 1000 and 5000, every scenario
    .venv/bin/python bench/run.py --sizes 1000,20000   # other sizes
    .venv/bin/python bench/run.py --quick              # a few minutes: small N, one failover round

Starts (or reuses) the cluster in --cluster-dir with the audit log on, installs the CRDs, runs
the operator from a snapshot of the committed source (git HEAD; --source worktree for the
working tree), and writes bench/results/latest.{json,md,png} plus a dated JSON copy. Targets
are reported, never asserted: the exit code is 0 whenever the bench itself ran.

`--source` may name any revision from OLDEST (c2b48ea) on: the bench relies on the operator's flags
(`--no-leader-election`, `--events`, `--trust-worker-leases`), its metrics, pull workers that
watch only their own attempts, `build_job` and the Task model, and keeps no fallback for
revisions without them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import io
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import report  # noqa: E402
from bench.backlog import backlog  # noqa: E402
from bench.cluster import DEFAULT_DIR, DEFAULT_OFFSET, BenchCluster, log  # noqa: E402
from bench.deep import deep  # noqa: E402
from bench.failover import LEASE, failover  # noqa: E402
from bench.fairness import fairness  # noqa: E402
from bench.idle import idle  # noqa: E402
from bench.load import DEFAULT_CREATORS  # noqa: E402
from bench.procstat import load_average  # noqa: E402
from bench.soak import DEFAULT_MAX_RATE, soak  # noqa: E402
from bench.pull import pull  # noqa: E402
from bench.throughput import Context, baseline, cronoq  # noqa: E402
from bench.versus import Peers, argo, kueue, kueue_probe  # noqa: E402

OLDEST = "c2b48ea"
"""The oldest operator revision the bench runs (status.worker, `--events=auto`, `--trust-worker-leases`)."""
SCENARIOS = ("baseline", "cronoq", "pull", "pull-lean", "kueue", "argo", "paced", "lean", "backlog", "kueue-backlog", "soak", "idle",
             "failover", "fairness")
EXTRA = ("deep",)
"""Scenarios run only when --only names them: `deep` holds --deep-size queued tasks (an hour at 100,000)."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,5000", help="N for the throughput runs, comma-separated")
    p.add_argument("--paced-sizes", default=None,
                   help="N for the runs paced at half the max rate (default: the smallest size)")
    p.add_argument("--paced-items", type=int, default=None, metavar="N",
                   help="items each paced run submits (default: the burst's N); the rate is still half the "
                        "slowest burst's of that N")
    p.add_argument("--paced-rate", type=float, default=None, metavar="R",
                   help="items/s of the paced runs, instead of half the slowest burst's (e.g. to match another run)")
    p.add_argument("--backlog", type=int, default=5000, help="tasks queued behind a pool of concurrency 50")
    p.add_argument("--idle-tasks", type=int, default=10_000,
                   help="finished Tasks the idle operator looks after (topped up by the fast fill if fewer)")
    p.add_argument("--idle-sizes", default=None,
                   help="several idle sizes measured in one run, filled up incrementally, e.g. 10000,50000 "
                        "(default: --idle-tasks)")
    p.add_argument("--idle-jobs-kept", type=int, default=None, metavar="N",
                   help="at most N of the idle scenario's finished Tasks keep their Job and pod (the rest finished "
                        "longer ago than jobRetention); default: all")
    p.add_argument("--soak-tasks", type=int, default=5000, help="tasks the soak streams (--quick: 1000)")
    p.add_argument("--soak-max-rate", type=float, default=DEFAULT_MAX_RATE,
                   help="max tasks/s when this run has no cronoq burst to take it from; the soak runs at a third")
    p.add_argument("--idle-namespaces", default="",
                   help="namespaces of finished Tasks (e.g. kept by --keep-cluster runs) to count for the idle scenario")
    p.add_argument("--lean", type=int, default=300, metavar="N",
                   help="tasks of the lean run: leaseTTL 0s and `--events=warnings`, for its writes per task")
    p.add_argument("--failover-rounds", type=int, default=3)
    p.add_argument("--deep-size", type=int, default=100_000, help="queued tasks of the deep scenario (--only deep)")
    p.add_argument("--deep-drain-seconds", type=float, default=None,
                   help="measure the deep queue's drain over this long only (default: until it is empty)")
    p.add_argument("--task-shape", choices=("small", "deep"), default="small",
                   help="the cronoq bursts' Tasks: small, or the deep scenario's (~2.9 KiB of spec)")
    p.add_argument("--creators", type=int, default=DEFAULT_CREATORS, help="concurrent create requests")
    p.add_argument("--pull-sweep", default="8,32", metavar="W,W,...",
                   help="pull workers at several fleet sizes of one total capacity (--pull-capacity), at the "
                        "smallest N, beside the pull scenario's 2: the API server's and the workers' CPU per task "
                        "must not grow with the workers ('' to skip)")
    p.add_argument("--pull-capacity", type=int, default=128, help="handler slots of the whole fleet in --pull-sweep")
    p.add_argument("--quick", action="store_true", help="N=200, backlog 300, one failover round, idle 500, soak 1000")
    p.add_argument("--only", default=",".join(SCENARIOS), help=f"scenarios to run, of {','.join(SCENARIOS)}")
    p.add_argument("--no-profile", dest="profile", action="store_false",
                   help="do not sample the operator with py-spy during the largest burst and the backlog")
    p.add_argument("--source", default="HEAD", help="git revision of operator/ to run, or `worktree`")
    p.add_argument("--cluster-dir", type=Path, default=DEFAULT_DIR)
    p.add_argument("--port-offset", type=int, default=DEFAULT_OFFSET)
    p.add_argument("--keep-cluster", action="store_true", help="leave a cluster this run started running")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--report-only", type=Path, metavar="JSON",
                   help="only rewrite latest.md and latest.png from a results JSON (profiles re-read if still there)")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.backlog, args.failover_rounds, args.idle_tasks = "200", 300, 1, 500
        args.soak_tasks = min(args.soak_tasks, 1000)
    args.sizes = sorted(int(s) for s in args.sizes.split(",") if s)
    args.paced_sizes = [int(s) for s in args.paced_sizes.split(",")] if args.paced_sizes else args.sizes[:1]
    args.idle_sizes = sorted(int(s) for s in args.idle_sizes.split(",") if s) if args.idle_sizes else [args.idle_tasks]
    args.pull_sweep = [int(w) for w in args.pull_sweep.split(",") if w]
    args.only = set(args.only.split(","))
    unknown = args.only - set(SCENARIOS) - set(EXTRA)
    if unknown:
        p.error(f"unknown scenarios {','.join(sorted(unknown))}; of {','.join(SCENARIOS + EXTRA)}")
    return args


def snapshot(revision: str, into: Path) -> tuple[str | None, str]:
    """Export operator/ and crds/ at `revision` into `into`; return (PYTHONPATH entry, description).
    The CRDs sit beside the PYTHONPATH entry (`crds_beside`)."""
    if revision == "worktree":
        dirty = subprocess.run(["git", "status", "--porcelain", "operator"], cwd=REPO, capture_output=True,
                               text=True).stdout.strip()
        return None, f"worktree at {_git('rev-parse', '--short', 'HEAD')}{' (with uncommitted changes)' if dirty else ''}"
    commit = _git("rev-parse", revision)
    if subprocess.run(["git", "merge-base", "--is-ancestor", OLDEST, commit], cwd=REPO).returncode != 0:
        raise SystemExit(f"bench/run.py: --source {revision} is older than {OLDEST}, the oldest revision the bench runs")
    target = into / f"src-{commit[:12]}"
    if not ((target / "operator" / "cronoq").exists() and (target / "crds").exists()):
        archive = subprocess.run(["git", "archive", commit, "operator", "crds"], cwd=REPO, capture_output=True,
                                 check=True).stdout
        tarfile.open(fileobj=io.BytesIO(archive)).extractall(target)
    return str(target / "operator"), f"{commit[:12]} ({_git('log', '-1', '--format=%s', commit)[:70]})"


def crds_beside(pythonpath: str | None) -> Path:
    """The CRDs of a snapshot (its PYTHONPATH entry), or the worktree's (None)."""
    return REPO / "crds" if pythonpath is None else Path(pythonpath).parent / "crds"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def machine() -> dict:
    mem = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"nproc": os.cpu_count(), "cpu": model, "mem_total_kib": int(mem.split()[1]),
            "kernel": platform.release(), "python": platform.python_version(), "load_average_start": load_average()}


def rewrite(path: Path, into: Path, work: Path) -> int:
    """Regenerate the Markdown and the chart from a finished run's JSON."""
    from bench.profiling import summarise
    results = json.loads(path.read_text())
    holders = [row.get("cronoq") or {} for row in results.get("throughput", [])] + [results.get("backlog") or {}]
    for holder in holders:
        profile = holder.get("profile")
        if profile and (work / profile["file"]).exists():
            holder["profile"] = summarise(work / profile["file"])
    stamp = path.stem.removeprefix("run-") if path.stem.startswith("run-") else \
        datetime.fromisoformat(results["started"]).strftime("%Y%m%d-%H%M%S")
    report.write(results, into, stamp)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.report_only:
        return rewrite(args.report_only, args.results, args.cluster_dir / "work")
    cluster = BenchCluster(directory=args.cluster_dir, port_offset=args.port_offset)
    work = args.cluster_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    source, described = snapshot(args.source, work)
    if source:
        sys.path.insert(0, source)  # bare Jobs are built by the measured source's Job builder
    started = datetime.now(timezone.utc)
    results: dict = {"started": started.isoformat(timespec="seconds"), "machine": machine(),
                     "operator_source": described, "options": {"sizes": args.sizes, "paced_sizes": args.paced_sizes,
                                                               "backlog": args.backlog, "creators": args.creators,
                                                               "quick": args.quick, "idle_sizes": args.idle_sizes, "paced_items": args.paced_items, "paced_rate": args.paced_rate,
                                                               "soak_tasks": args.soak_tasks,
                                                               "idle_jobs_kept": args.idle_jobs_kept},
                     "throughput": [], "paced": []}
    stamp = started.strftime("%Y%m%d-%H%M%S")

    def save() -> None:
        results["machine"]["load_average_end"] = load_average()
        report.write(results, args.results, stamp)

    cluster.up()
    try:
        # Single-replica scenarios run without leader election, so their API counts are the
        # per-task cost alone; the failover scenario turns it on.
        ctx = Context(cluster=cluster, work=work, source=source, creators=args.creators,
                      operator_args=("--no-leader-election",), leader_lease=("cronoq-leader", LEASE),
                      profile=args.profile, task_shape=args.task_shape)
        kept: list[str] = []
        largest = args.sizes[-1]
        bins = Peers.install(ctx, {"kueue" if "kueue-backlog" in args.only else "", *args.only} & {"kueue", "argo"})
        results["peers"] = bins.versions
        for n in args.sizes:
            row: dict = {"n": n}
            if "baseline" in args.only:
                row["baseline"] = baseline(ctx, n)
                save()
            if "cronoq" in args.only:
                keep = n == largest and "idle" in args.only
                row["cronoq"] = cronoq(ctx, n, keep=keep, profile=n == largest)
                if keep:
                    kept.append(row["cronoq"]["namespace"])
            if "pull" in args.only:
                row["pull"] = pull(ctx, n)
                save()
            for w in args.pull_sweep if n == args.sizes[0] and "pull" in args.only else ():
                row.setdefault("pull_sweep", []).append(
                    pull(ctx, n, label=f"w{w}", workers=w, concurrency=max(args.pull_capacity // w, 1)))
                save()
            if "pull-lean" in args.only:
                # Without the Event per attempt: 3 writes per task, where the API server's work bounds the burst.
                row["pull_lean"] = pull(ctx, n, label="lean", operator_args=("--events=warnings",))
                save()
            if "kueue" in args.only:
                row["kueue"] = kueue(ctx, bins, n)
                save()
            if "argo" in args.only:
                row["argo"] = argo(ctx, bins, n)
                save()
            if len(row) > 1:  # a run of no system has no row
                results["throughput"].append(row)
            save()
            if "paced" in args.only and n in args.paced_sizes:
                # Every system at the same rate: half the slowest one's max rate in this row.
                rates = [row[s]["throughput"] for s in ("cronoq", "kueue", "argo") if (row.get(s) or {}).get("throughput")]
                rate = args.paced_rate or (min(rates) / 2 if rates else None)
                m = args.paced_items or n
                for system, run in (("cronoq", lambda r: cronoq(ctx, m, rate=r, label="paced")),
                                    ("kueue", lambda r: kueue(ctx, bins, m, rate=r, label="paced")),
                                    ("argo", lambda r: argo(ctx, bins, m, rate=r, label="paced"))):
                    if rate and system in args.only:
                        results["paced"].append(run(rate))
                        save()
            pull_rate = (row.get("pull") or {}).get("throughput")
            if "paced" in args.only and n in args.paced_sizes and pull_rate:
                # Pull delivery at half its own max rate: its dispatch latency without a queue in front.
                results.setdefault("paced_pull", []).append(pull(ctx, args.paced_items or n, rate=pull_rate / 2,
                                                                 label="paced"))
                save()
        if "lean" in args.only:
            results["lean"] = cronoq(ctx, args.lean, label="lean", operator_args=("--events=warnings",), leaseTTL="0s")
            save()
        if "fairness" in args.only:
            results["fairness"] = fairness(ctx, args.backlog)
            save()
        if "kueue-backlog" in args.only:
            results["kueue_backlog"] = kueue_probe(ctx, bins, args.backlog)
            save()
        if "backlog" in args.only:
            results["backlog"] = backlog(ctx, args.backlog, keep="idle" in args.only, profile=True)
            if "idle" in args.only:
                kept.append(results["backlog"]["namespace"])
            save()
        if "soak" in args.only:
            bursts = [row["cronoq"]["throughput"] for row in results["throughput"]
                      if (row.get("cronoq") or {}).get("throughput")]
            max_rate, rate_from = (bursts[-1], "burst") if bursts else (args.soak_max_rate, "flag")
            results["soak"] = soak(ctx, args.soak_tasks, rate=max_rate / 3)
            results["soak"]["max_rate"], results["soak"]["max_rate_from"] = max_rate, rate_from
            save()
        if "idle" in args.only:
            given = [ns for ns in args.idle_namespaces.split(",") if ns]
            namespaces = kept + given
            results["idle"] = idle(ctx, namespaces, sizes=args.idle_sizes, jobs_kept=args.idle_jobs_kept)
            kept = [ns for ns in namespaces if ns not in given]  # delete only what this run made
            save()
        if "failover" in args.only:
            results["failover"] = failover(ctx, rounds=args.failover_rounds)
            save()
        if "deep" in args.only:
            results["deep"] = deep(ctx, args.deep_size, args.deep_drain_seconds)  # its namespace goes with the cluster, or stays
            save()
        if cluster.started_here and not args.keep_cluster:
            kept = []  # the cluster goes down, and with it what is left in it (deleting 50,000 tasks takes long)
        for ns in kept:
            cluster.delete_namespace(ns)
    finally:
        results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        save()
        if not args.keep_cluster:
            cluster.down()
    log(f"results: {args.results / 'latest.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
