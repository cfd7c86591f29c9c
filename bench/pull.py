"""Pull delivery (`delivery: Workers`): N Tasks served by warm worker processes, with no Job and
no pod, measured as the Job-mode burst is (same load generator, observer, audit log) plus the
time from a create request to the handler's start, which the workers journal.

The workers run with the operator's credentials, so the audit counts their requests with the
operator's: writes per task are the operator's and the workers' together. The workers' own Lease
renewals cost per second, not per task, and are set apart like the leader Lease's.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from bench import workload
from bench.cluster import log
from bench.kubeapi import leases_path, pools_path, tasks_path
from bench.latency import between, summary
from bench.load import submit
from bench.procstat import Running, wait_until
from bench.throughput import POOL, Context, Window, _fmt, outcomes

REPO = Path(__file__).resolve().parent.parent
WORKERS = 2
CONCURRENCY = 64
"""Attempts each worker runs at once: its handler returns at once, so this bounds requests in flight."""


def pull(ctx: Context, n: int, rate: float | None = None, label: str = "burst", workers: int = WORKERS,
         concurrency: int = CONCURRENCY, operator_args: tuple[str, ...] = ()) -> dict[str, Any]:
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-pull-{label}-{n}")
    api.create(pools_path(ns), workload.pool(POOL, 10_000, delivery="Workers", leaseTTL="30s"))
    tasks = [served_task(name) for name in workload.names("p", n)]
    operator = ctx.replica(ns, extra=(*operator_args, "--trust-worker-leases")).start()
    journal = ctx.work / f"pull-{ns}.journal"
    journal.unlink(missing_ok=True)
    names = [f"bench-worker-{i}" for i in range(workers)]
    procs = [start_worker(ctx, ns, name, journal, concurrency) for name in names]
    wait_until(lambda: (operator.metric("cronoq_workers") or 0) >= workers or all_announced(ctx, ns, workers), 60)
    window = Window(ctx, ns, operator.pid, until=f"tasks={n}")
    workers_before = sum(p.cpu() for p in procs)  # read as the operator's is: from the window's opening
    sub = submit(api, tasks_path(ns), tasks, creators=ctx.creators, rate=rate)
    seen, figures = window.close(n, sub, leader_lease=(*ctx.leader_lease, *names),
                                 after=lambda: sum(p.cpu() for p in procs) - workers_before)
    succeeded, counts = outcomes(seen, sub, n)
    workers_cpu = figures.pop("after")
    result = {
        "n": n, "label": label, "paced_rate": rate, "workers": workers, "worker_concurrency": concurrency,
        **counts, **figures, "workers_cpu_seconds_per_task": workers_cpu / n, "namespace": ns,
        "latency": {"to_handler": summary(between(sub.sent, read_journal(journal))),
                    "to_succeeded": summary(between(sub.sent, succeeded))},
    }
    log(f"pull {label} n={n}: {_fmt(result['throughput'])} tasks/s, create→handler p50 "
        f"{_fmt(result['latency']['to_handler']['p50'])}s, {_fmt(result['api']['writes_per_task'])} writes/task")
    stop_workers(procs)
    operator.stop()
    ctx.cluster.delete_namespace(ns)
    return result


def stop_workers(procs: list[Running]) -> None:
    """SIGTERM every worker (they drain), then wait for each, killing one that takes over 40 s."""
    for proc in procs:
        if proc.process and proc.alive():
            proc.process.terminate()
    for proc in procs:
        proc.stop(40)


def served_task(name: str) -> dict[str, Any]:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"pool": POOL, "payload": {"n": name}}}


def start_worker(ctx: Context, ns: str, name: str, journal: Path, concurrency: int) -> Running:
    worker = Running(ctx.work / f"worker-{ns}-{name}.log")
    worker.launch([sys.executable, "-m", "bench.pull_worker", POOL, name, str(journal), str(concurrency)],
                  {"KUBECONFIG": str(ctx.cluster.operator_kubeconfig), "CRONOQ_NAMESPACE": ns, "POD_NAME": None,
                   "PYTHONPATH": os.pathsep.join(p for p in (ctx.source, str(REPO)) if p)}, cwd=REPO)
    return worker


def all_announced(ctx: Context, ns: str, workers: int) -> bool:
    leases = ctx.cluster.api.get(leases_path(ns) + "?labelSelector=cronoq.io%2Fworker-pool")
    return len((leases or {}).get("items", [])) >= workers


def read_journal(path: Path) -> dict[str, float]:
    """task → when its handler started (the first start, should a retry start it again)."""
    started: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, t = line.partition(" ")
            if name and t:
                started.setdefault(name, float(t))
    return started
