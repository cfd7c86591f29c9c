"""Pull delivery (`delivery: Workers`): N Tasks served by warm worker processes, with no Job and
no pod, measured as the Job-mode burst is (same load generator, observer, audit log) plus the
time from a create request to the handler's start, which the workers journal.

The workers run with the operator's credentials, so the audit counts their requests with the
operator's: writes per task are the operator's and the workers' together. The workers' own Lease
renewals cost per second, not per task, and are set apart like the leader Lease's.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import workload
from bench.audit import AuditLog, breakdown
from bench.cluster import OPERATOR_USER, log
from bench.kubeapi import pools_path, tasks_path
from bench.latency import between, summary
from bench.load import submit
from bench.observer import ObserverProcess
from bench.procstat import PeakRss, cpu_seconds, load_average
from bench.throughput import POOL, Context, _fmt, _spent, throughput, wait_until

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
    audit = AuditLog(ctx.cluster.audit_log)
    mark = audit.mark()
    observer = ObserverProcess(ctx.cluster.kubeconfig, ns, ctx.work / f"obs-{ns}.json", until=f"tasks={n}")
    cpu_before, load_before = operator.cpu(), load_average()
    workers_before = sum(cpu_seconds(p.pid) for p in procs)
    cluster_cpu = ctx.cluster.component_cpu()
    peak = PeakRss(operator.pid).start()
    sub = submit(api, tasks_path(ns), tasks, creators=ctx.creators, rate=rate)
    seen = observer.result()
    cpu_after, rss_peak = operator.cpu(), peak.stop()
    workers_cpu = sum(cpu_seconds(p.pid) for p in procs) - workers_before
    load_after, cluster_cpu = load_average(), _spent(cluster_cpu, ctx.cluster.component_cpu())
    audit.settle()
    requests = audit.requests(mark, OPERATOR_USER)

    started = read_journal(journal)
    by_task = seen["tasks"]
    succeeded = {name: s["phases"].get("Succeeded") for name, s in by_task.items()}
    first_attempt = sum(1 for s in by_task.values() if s.get("terminal") == "Succeeded" and s.get("attempt") == 1)
    result = {
        "n": n, "label": label, "paced_rate": rate, "workers": workers, "worker_concurrency": concurrency,
        "submitted": len(sub.sent), "submit_errors": len(sub.errors), "submit_rate": sub.rate,
        "timed_out": seen["timed_out"], "succeeded": sum(1 for v in succeeded.values() if v),
        "succeeded_first_attempt": first_attempt,
        "throughput": throughput(n, sub.started, [v for v in succeeded.values() if v]),
        "latency": {"to_handler": summary(between(sub.sent, started)),
                    "to_succeeded": summary(between(sub.sent, succeeded))},
        "operator": {"cpu_seconds": cpu_after - cpu_before, "cpu_seconds_per_task": (cpu_after - cpu_before) / n,
                     "rss_peak": rss_peak},
        "workers_cpu_seconds_per_task": workers_cpu / n,
        "api": breakdown(requests, n, leader_lease=(*ctx.leader_lease, *names)),
        "load_average": {"before": load_before, "after": load_after},
        "cluster_cpu_seconds": cluster_cpu,
        "namespace": ns,
    }
    log(f"pull {label} n={n}: {_fmt(result['throughput'])} tasks/s, create→handler p50 "
        f"{_fmt(result['latency']['to_handler']['p50'])}s, {_fmt(result['api']['writes_per_task'])} writes/task")
    stop_workers(procs)
    operator.stop()
    ctx.cluster.delete_namespace(ns)
    return result


def stop_workers(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every worker (they drain), then wait for each, killing one that takes over 40 s."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()


def served_task(name: str) -> dict[str, Any]:
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"pool": POOL, "payload": {"n": name}}}


def start_worker(ctx: Context, ns: str, name: str, journal: Path, concurrency: int) -> subprocess.Popen:
    env = {**os.environ, "KUBECONFIG": str(ctx.cluster.operator_kubeconfig), "CRONOQ_NAMESPACE": ns,
           "PYTHONPATH": os.pathsep.join(p for p in (ctx.source, str(REPO)) if p)}
    env.pop("POD_NAME", None)
    log_file = open(ctx.work / f"worker-{ns}-{name}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "bench.pull_worker", POOL, name, str(journal), str(concurrency)],
                            env=env, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)


def all_announced(ctx: Context, ns: str, workers: int) -> bool:
    leases = ctx.cluster.api.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases?labelSelector=cronoq.io%2Fworker-pool")
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
