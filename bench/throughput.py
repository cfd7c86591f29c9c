"""Throughput and latency: N bare Jobs (the limit this cluster sets), then N Tasks in one pool of
unlimited concurrency, both submitted in a burst by the same load generator; then the Tasks
again, paced at half the throughput cronoq reached, for latency without a queue in front.

Throughput is N over the time from the first create request to the last success seen
(a Job's Complete condition; a Task's Succeeded phase). Latencies run from a create request
being sent to the first watch event showing the milestone.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench import workload
from bench.audit import AuditLog, breakdown
from bench.cluster import OPERATOR_USER, BenchCluster, log
from bench.kubeapi import jobs_path, pools_path, tasks_path
from bench.latency import between, summary
from bench.load import submit
from bench.observer import ObserverProcess
from bench.procstat import PeakRss, load_average
from bench.replica import Replica

POOL = "bench"


@dataclass
class Context:
    """What every scenario needs: the cluster, where to write, how to run the operator."""
    cluster: BenchCluster
    work: Path
    source: str | None
    creators: int
    operator_args: tuple[str, ...] = ()
    leader_lease: tuple[str, ...] = ("cronoq-leader",)
    """Leader-election Leases: their renewals cost per second, so they are counted apart."""
    operator_module: str = "cronoq"
    task_shape: str = "small"
    """The cronoq bursts' Tasks: `small` (an image and kwok's annotations) or `deep` (the deep
    scenario's ~2.9 KiB of spec, bench/deep.py), to compare a drain with a burst of its own tasks.
    `operator_module`: what `python -m` runs as the operator (bench.kopf_watch: kopf's watches)."""

    def replica(self, namespace: str, name: str = "cronoq-bench-0", extra: tuple[str, ...] = ()) -> Replica:
        return Replica(kubeconfig=str(self.cluster.operator_kubeconfig), namespaces=(namespace,),
                       log_path=self.work / f"operator-{namespace}-{name}.log", source=self.source,
                       extra_args=(*self.operator_args, *extra), pod_name=name, module=self.operator_module)


def shaped(shape: str, name: str, i: int) -> dict[str, Any]:
    """A burst's Task `name` (the `i`th), of `shape` (Context.task_shape), in the burst's pool."""
    if shape == "small":
        return workload.task(name, POOL)
    from bench.deep import realistic_task  # bench.deep imports this module

    task = realistic_task(name, i)
    task["spec"]["pool"] = POOL
    return task


def throughput(n: int, first_sent: float, finished: list[float]) -> float | None:
    return n / (max(finished) - first_sent) if finished and len(finished) >= n else None


def baseline(ctx: Context, n: int) -> dict[str, Any]:
    """N bare Jobs created directly: no operator."""
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-jobs-{n}")
    jobs = [workload.bare_job(name, ns) for name in workload.names("j", n)]
    observer = ObserverProcess(ctx.cluster.kubeconfig, ns, ctx.work / f"obs-{ns}.json", until=f"jobs={n}")
    load_before, cluster_cpu = load_average(), ctx.cluster.component_cpu()
    sub = submit(api, jobs_path(ns), jobs, creators=ctx.creators)
    seen = observer.result()
    cluster_cpu = _spent(cluster_cpu, ctx.cluster.component_cpu())
    sent = {j["metadata"]["name"]: sub.sent[j["metadata"]["name"]] for j in jobs if j["metadata"]["name"] in sub.sent}
    complete = {name: s.get("Complete") for name, s in seen["jobs"].items()}
    result = {
        "n": n, "submitted": len(sub.sent), "submit_errors": len(sub.errors), "submit_rate": sub.rate,
        "completed": sum(1 for v in complete.values() if v), "timed_out": seen["timed_out"],
        "throughput": throughput(n, sub.started, [v for v in complete.values() if v]),
        "latency": {"to_running": summary(between(sent, {k: v.get("started") for k, v in seen["jobs"].items()})),
                    "to_succeeded": summary(between(sent, complete))},
        "load_average": {"before": load_before, "after": load_average()},
        "cluster_cpu_seconds": cluster_cpu,
    }
    log(f"baseline n={n}: {_fmt(result['throughput'])} jobs/s, p50 {_fmt(result['latency']['to_succeeded']['p50'])}s")
    ctx.cluster.delete_namespace(ns)
    return result


def cronoq(ctx: Context, n: int, rate: float | None = None, label: str = "burst", keep: bool = False,
           operator_args: tuple[str, ...] = (), after: Callable[[str], Any] | None = None,
           before: Callable[[str], Any] | None = None, **pool_spec: Any) -> dict[str, Any]:
    """N Tasks in one pool of concurrency 10000, with the operator running; `rate`: paced;
    `operator_args` and `pool_spec` (e.g. `leaseTTL="0s"`) change the defaults. `after(namespace)`
    runs once every task has succeeded, before the operator's CPU is read (its answer is kept as
    `after`): what the operator still does for the burst then is counted. `before(namespace)` runs
    before the pool is made (e.g. the LocalQueue a Kueue pool names)."""
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-tasks-{label}-{n}")
    if before is not None:
        before(ns)
    api.create(pools_path(ns), workload.pool(POOL, 10_000, **pool_spec))
    tasks = [shaped(ctx.task_shape, name, i) for i, name in enumerate(workload.names("t", n))]
    operator = ctx.replica(ns, extra=operator_args).start()
    wait_until(operator.leading, timeout=60)  # listed (an empty namespace): its start is not the burst's cost
    audit = AuditLog(ctx.cluster.audit_log)
    mark = audit.mark()
    observer = ObserverProcess(ctx.cluster.kubeconfig, ns, ctx.work / f"obs-{ns}.json", until=f"tasks={n}")
    cpu_before, load_before = operator.cpu(), load_average()
    cluster_cpu = ctx.cluster.component_cpu()
    peak = PeakRss(operator.pid).start()
    sub = submit(api, tasks_path(ns), tasks, creators=ctx.creators, rate=rate)
    seen = observer.result()
    afterwards = after(ns) if after is not None else None
    cpu_after, rss_after, rss_peak = operator.cpu(), operator.rss(), peak.stop()
    load_after, cluster_cpu = load_average(), _spent(cluster_cpu, ctx.cluster.component_cpu())
    audit.settle()
    requests = audit.requests(mark, OPERATOR_USER)

    by_task = seen["tasks"]
    job_added = {}
    for job in seen["jobs"].values():
        if job.get("task") and job.get("attempt") == "1":
            job_added[job["task"]] = job["added"]
    succeeded = {name: s["phases"].get("Succeeded") for name, s in by_task.items()}
    first_attempt = sum(1 for s in by_task.values() if s.get("terminal") == "Succeeded" and s.get("attempt") == 1)
    result = {
        "n": n, "label": label, "paced_rate": rate, "operator_args": list(operator_args), "pool_spec": pool_spec, "submitted": len(sub.sent), "submit_errors": len(sub.errors),
        "submit_rate": sub.rate, "timed_out": seen["timed_out"],
        "succeeded": sum(1 for v in succeeded.values() if v), "succeeded_first_attempt": first_attempt,
        "throughput": throughput(n, sub.started, [v for v in succeeded.values() if v]),
        "latency": {"to_job": summary(between(sub.sent, job_added)),
                    "to_running": summary(between(sub.sent, {k: s["phases"].get("Running") for k, s in by_task.items()})),
                    "to_succeeded": summary(between(sub.sent, succeeded))},
        "operator": {"cpu_seconds": cpu_after - cpu_before, "cpu_seconds_per_task": (cpu_after - cpu_before) / n,
                     "rss_after": rss_after, "rss_peak": rss_peak},
        "api": breakdown(requests, n, leader_lease=ctx.leader_lease),
        "load_average": {"before": load_before, "after": load_after},
        "cluster_cpu_seconds": cluster_cpu,
        "namespace": ns,
    }
    if after is not None:
        result["after"] = afterwards
    log(f"cronoq {label} n={n}: {_fmt(result['throughput'])} tasks/s, dispatch p99 "
        f"{_fmt(result['latency']['to_job']['p99'])}s, {_fmt(result['api']['writes_per_task'])} writes/task")
    operator.stop()
    if not keep:
        ctx.cluster.delete_namespace(ns)
    return result


def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 2) for k in before if k in after}


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def wait_until(check, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return False
