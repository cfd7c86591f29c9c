#!/usr/bin/env python3
"""`make bench`: cronoq beside bare Jobs on a local test cluster of the bench's own.

    .venv/bin/python bench/run.py                      # N = 1000 and 5000, every scenario
    .venv/bin/python bench/run.py --sizes 1000,20000   # other sizes
    .venv/bin/python bench/run.py --quick              # a few minutes: small N, one failover round

Starts (or reuses) the cluster in --cluster-dir with the audit log on, installs the CRDs, runs
the operator from a snapshot of the committed source (git HEAD; --source worktree for the
working tree), runs the scenarios of SCENARIOS named by --only in that table's order, and writes
bench/results/latest.{json,md,png} (git keeps the earlier ones). Then it checks the run's headline
figures against bench/ranges.yaml, prints the table, and exits 1 if one is outside its range.

`--source` may name any revision from OLDEST (c2b48ea) on: the bench relies on the operator's flags
(`--no-leader-election`, `--events`, `--trust-worker-leases`), its metrics, pull workers that
watch only their own attempts, `build_job` and the Task model, and keeps no fallback for
revisions without them.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import ranges, report  # noqa: E402
from bench.backlog import backlog  # noqa: E402
from bench.cluster import DEFAULT_DIR, DEFAULT_OFFSET, BenchCluster, log  # noqa: E402
from bench.deep import deep  # noqa: E402
from bench.failover import LEASE, failover  # noqa: E402
from bench.fairness import fairness, gaming  # noqa: E402
from bench.idle import idle  # noqa: E402
from bench.kopf_ab import kopf_ab  # noqa: E402
from bench import onoff  # noqa: E402
from bench.load import DEFAULT_CREATORS  # noqa: E402
from bench.procstat import load_average  # noqa: E402
from bench.soak import DEFAULT_MAX_RATE, soak  # noqa: E402
from bench.pull import pull  # noqa: E402
from bench.throughput import Context, baseline, cronoq  # noqa: E402
from bench.versus import Peers, argo, cronoq_through_kueue, kueue, kueue_probe  # noqa: E402

OLDEST = "c2b48ea"
"""The oldest operator revision the bench runs (status.worker, `--events=auto`, `--trust-worker-leases`)."""


@dataclass
class Run:
    """One invocation: what the scenarios share, and the results they fill in."""
    ctx: Context
    args: argparse.Namespace
    results: dict
    bins: Peers | None = None
    row: dict = field(default_factory=dict)  # the throughput row of the current N
    kept: list[str] = field(default_factory=list)  # namespaces the idle scenario counts


def _cronoq(b: Run, n: int) -> None:
    keep = n == b.args.sizes[-1] and "idle" in b.args.only
    b.row["cronoq"] = cronoq(b.ctx, n, keep=keep)
    if keep:
        b.kept.append(b.row["cronoq"]["namespace"])


def _pull(b: Run, n: int) -> None:
    b.row["pull"] = pull(b.ctx, n)
    for w in b.args.pull_sweep if n == b.args.sizes[0] else ():
        b.row.setdefault("pull_sweep", []).append(
            pull(b.ctx, n, label=f"w{w}", workers=w, concurrency=max(b.args.pull_capacity // w, 1)))


def _paced(b: Run, n: int) -> None:
    """Every system at the same rate: half the slowest one's max rate in this row; pull delivery at
    half its own (its dispatch latency without a queue in front)."""
    if n not in b.args.paced_sizes:
        return
    rates = [b.row[s]["throughput"] for s in ("cronoq", "kueue", "argo") if (b.row.get(s) or {}).get("throughput")]
    rate, m = b.args.paced_rate or (min(rates) / 2 if rates else None), b.args.paced_items or n
    for system, run in (("cronoq", lambda r: cronoq(b.ctx, m, rate=r, label="paced")),
                        ("kueue", lambda r: kueue(b.ctx, b.bins, m, rate=r, label="paced")),
                        ("argo", lambda r: argo(b.ctx, b.bins, m, rate=r, label="paced"))):
        if rate and system in b.args.only:
            b.results["paced"].append(run(rate))
    pull_rate = (b.row.get("pull") or {}).get("throughput")
    if pull_rate:
        b.results.setdefault("paced_pull", []).append(pull(b.ctx, m, rate=pull_rate / 2, label="paced"))


def _backlog(b: Run, _: None) -> None:
    b.results["backlog"] = backlog(b.ctx, b.args.backlog, keep="idle" in b.args.only)
    if "idle" in b.args.only:
        b.kept.append(b.results["backlog"]["namespace"])


def _soak(b: Run, _: None) -> None:
    """At a third of the largest burst's rate (no burst in the run: --soak-max-rate)."""
    bursts = [row["cronoq"]["throughput"] for row in b.results["throughput"] if (row.get("cronoq") or {}).get("throughput")]
    max_rate, rate_from = (bursts[-1], "burst") if bursts else (b.args.soak_max_rate, "flag")
    b.results["soak"] = soak(b.ctx, b.args.soak_tasks, rate=max_rate / 3)
    b.results["soak"]["max_rate"], b.results["soak"]["max_rate_from"] = max_rate, rate_from


def _idle(b: Run, _: None) -> None:
    given = [ns for ns in b.args.idle_namespaces.split(",") if ns]
    namespaces = b.kept + given
    b.results["idle"] = idle(b.ctx, namespaces, sizes=b.args.idle_sizes, jobs_kept=b.args.idle_jobs_kept)
    b.kept = [ns for ns in namespaces if ns not in given]  # delete only what this run made


@dataclass(frozen=True)
class Scenario:
    name: str
    per_size: bool  # once for each of --sizes (into that N's throughput row), or once per run
    run: Callable[[Run, Any], None]
    what: str


def _row(key: str, fn: Callable[[Run, int], dict]) -> Callable[[Run, int], None]:
    return lambda b, n: b.row.__setitem__(key, fn(b, n))


def _once(key: str, fn: Callable[[Run], dict]) -> Callable[[Run, None], None]:
    return lambda b, _: b.results.__setitem__(key, fn(b))


SCENARIOS = (
    Scenario("baseline", True, _row("baseline", lambda b, n: baseline(b.ctx, n)), "N bare Jobs: the floor"),
    Scenario("cronoq", True, _cronoq, "N Tasks in one pool, Job mode"),
    Scenario("pull", True, _pull, "N Tasks served by 2 warm pull workers; at the smallest N also --pull-sweep"),
    Scenario("pull-lean", True, _row("pull_lean", lambda b, n: pull(b.ctx, n, label="lean",
                                                                    operator_args=("--events=warnings",))),
             "the pull burst with --events=warnings"),
    Scenario("kueue", True, _row("kueue", lambda b, n: kueue(b.ctx, b.bins, n)), "N Kueue Jobs (Kueue v0.17.0)"),
    Scenario("cronoq-kueue", True, _row("cronoq_kueue", lambda b, n: cronoq_through_kueue(b.ctx, b.bins, n)),
             "N Tasks in a pool whose attempts Kueue admits (admission.kueue), the same quota as kueue"),
    Scenario("argo", True, _row("argo", lambda b, n: argo(b.ctx, b.bins, n)), "N Argo Workflows (v3.7.14)"),
    Scenario("paced", True, _paced, "each system again at half the slowest one's burst rate (--paced-sizes)"),
    *(Scenario(name, True, _row(name, lambda b, n, f=getattr(onoff, name): f(b.ctx, n)), what + " (only when --only names it)")
      for name, what in (("archive", "N Tasks with the operator's --archive off, then on (SQLite)"),
                         ("keys", "N Tasks over two pools without, then with, 4 concurrency keys of limit 25"),
                         ("tracing", "N Tasks with the operator's tracing off, then on (OTLP to a local Jaeger)"))),
    Scenario("lean", False, _once("lean", lambda b: cronoq(b.ctx, b.args.lean, label="lean", leaseTTL="0s",
                                                           operator_args=("--events=warnings",))),
             "--lean Tasks, leaseTTL 0s, --events=warnings: writes per task"),
    Scenario("fairness", False, _once("fairness", lambda b: fairness(b.ctx, b.args.backlog)),
             "two tenants' groups on one pool"),
    Scenario("gaming", False, _once("gaming", lambda b: gaming(b.ctx, b.args.backlog)),
             "a gaming tenant (60 group names, priority 1000) beside an honest one, with and without fair shares"),
    Scenario("kueue-backlog", False, _once("kueue_backlog", lambda b: kueue_probe(b.ctx, b.bins, b.args.backlog)),
             "priority probes behind Kueue's backlog"),
    Scenario("backlog", False, _backlog, "--backlog Tasks behind concurrency 50, three priority probes"),
    Scenario("soak", False, _soak, "--soak-tasks streamed at a third of the max rate: RSS slope"),
    Scenario("idle", False, _idle, "a fresh operator over finished Tasks (--idle-sizes)"),
    Scenario("failover", False, _once("failover", lambda b: failover(b.ctx, rounds=b.args.failover_rounds)),
             "SIGKILL and SIGTERM the leader of two replicas"),
    Scenario("deep", False, _once("deep", lambda b: deep(b.ctx, b.args.deep_size, b.args.deep_drain_seconds)),
             "--deep-size queued Tasks, two replicas (only when --only names it)"),
    Scenario("kopf-ab", False, _once("kopf_ab", lambda b: kopf_ab(b.ctx, b.args.sizes[0], b.args.idle_tasks,
                                                                  b.args.kopf_rounds)),
             "the operator's watches beside kopf's (only when --only names it)"),
)
NAMED = ("deep", "kopf-ab", "archive", "keys", "tracing")
"""Run only when --only names them: a run of their own, or the burst twice."""
DEFAULT = tuple(s.name for s in SCENARIOS if s.name not in NAMED)


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
    p.add_argument("--kopf-rounds", type=int, default=2, help="bursts and idle measurements of each side of kopf-ab")
    p.add_argument("--quick", action="store_true", help="N=200, backlog 300, one failover round, idle 500, soak 1000")
    p.add_argument("--only", default=",".join(DEFAULT),
                   help=f"scenarios to run, of {','.join(s.name for s in SCENARIOS)} (default: all but {','.join(NAMED)})")
    p.add_argument("--source", default="HEAD", help="git revision of operator/ to run, or `worktree`")
    p.add_argument("--cluster-dir", type=Path, default=DEFAULT_DIR)
    p.add_argument("--port-offset", type=int, default=DEFAULT_OFFSET)
    p.add_argument("--keep-cluster", action="store_true", help="leave a cluster this run started running")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--report-only", type=Path, metavar="JSON",
                   help="only rewrite latest.md and latest.png from a results JSON, and check its ranges")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.backlog, args.failover_rounds, args.idle_tasks = "200", 300, 1, 500
        args.soak_tasks = min(args.soak_tasks, 1000)
    args.sizes = sorted(int(s) for s in args.sizes.split(",") if s)
    args.paced_sizes = [int(s) for s in args.paced_sizes.split(",")] if args.paced_sizes else args.sizes[:1]
    args.idle_sizes = sorted(int(s) for s in args.idle_sizes.split(",") if s) if args.idle_sizes else [args.idle_tasks]
    args.pull_sweep = [int(w) for w in args.pull_sweep.split(",") if w]
    args.only = set(args.only.split(","))
    unknown = args.only - {s.name for s in SCENARIOS}
    if unknown:
        p.error(f"unknown scenarios {','.join(sorted(unknown))}; of {','.join(s.name for s in SCENARIOS)}")
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


def checked(results: dict) -> int:
    """Print the range check of a run's results; 1 if a figure is outside its range."""
    checks = ranges.check(results)
    print("\n".join(ranges.table(checks)))
    judged, failed = [c for c in checks if c.judged], [c for c in checks if not c.ok]
    log(f"ranges: {len(judged) - len(failed)} of {len(judged)} judged figures within bench/ranges.yaml"
        + (f"; outside: {', '.join(f'{c.figure} ({c.where})' for c in failed)}" if failed else ""))
    return 1 if failed else 0


def rewrite(path: Path, into: Path) -> int:
    """Regenerate the Markdown and the chart from a finished run's JSON, and check it."""
    results = json.loads(path.read_text())
    report.write(results, into)
    return checked(results)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.report_only:
        return rewrite(args.report_only, args.results)
    cluster = BenchCluster(directory=args.cluster_dir, port_offset=args.port_offset)
    work = args.cluster_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    source, described = snapshot(args.source, work)
    if source:
        sys.path.insert(0, source)  # bare Jobs are built by the measured source's Job builder
    started = datetime.now(timezone.utc)
    options = {k: getattr(args, k) for k in ("sizes", "paced_sizes", "backlog", "creators", "quick", "idle_sizes",
                                             "paced_items", "paced_rate", "soak_tasks", "idle_jobs_kept",
                                             "task_shape")}
    results: dict = {"started": started.isoformat(timespec="seconds"), "machine": machine(),
                     "operator_source": described, "options": options, "throughput": [], "paced": []}

    def save() -> None:
        results["machine"]["load_average_end"] = load_average()
        report.write(results, args.results)

    cluster.up()
    try:
        # Single-replica scenarios run without leader election, so their API counts are the
        # per-task cost alone; the failover scenario turns it on.
        ctx = Context(cluster=cluster, work=work, source=source, creators=args.creators,
                      operator_args=("--no-leader-election",), leader_lease=("cronoq-leader", LEASE),
                      task_shape=args.task_shape)
        b = Run(ctx, args, results)
        b.bins = Peers.install(ctx, {"kueue" if args.only & {"kueue-backlog", "cronoq-kueue"} else "", *args.only} & {"kueue", "argo"})
        results["peers"] = b.bins.versions
        chosen = [s for s in SCENARIOS if s.name in args.only]
        for n in args.sizes:
            b.row = {"n": n}
            results["throughput"].append(b.row)
            for s in [s for s in chosen if s.per_size]:
                s.run(b, n)
                save()
            if len(b.row) == 1:  # a run of no system has no row
                results["throughput"].remove(b.row)
        for s in [s for s in chosen if not s.per_size]:
            s.run(b, None)
            save()
        if cluster.started_here and not args.keep_cluster:
            b.kept = []  # the cluster goes down, and with it what is left in it (deleting 50,000 tasks takes long)
        for ns in b.kept:
            cluster.delete_namespace(ns)
    finally:
        results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        save()
        if not args.keep_cluster:
            cluster.down()
    log(f"results: {args.results / 'latest.md'}")
    return checked(results)


if __name__ == "__main__":
    sys.exit(main())
