"""Throughput and latency: N bare Jobs (the limit this cluster sets), then N Tasks in one pool of
unlimited concurrency, both submitted in a burst by the same load generator; then the Tasks
again, paced at half the throughput cronoq reached, for latency without a queue in front.

Throughput is N over the time from the first create request to the last success seen
(a Job's Complete condition; a Task's Succeeded phase). Latencies run from a create request
being sent to the first watch event showing the milestone.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench import workload
from bench.audit import AuditLog, breakdown
from bench.cluster import OPERATOR_USER, BenchCluster, log
from bench.kubeapi import jobs_path, pools_path, tasks_path
from bench.latency import between, summary
from bench.load import Submission, submit
from bench.observer import ObserverProcess
from bench.procstat import PeakRss, cpu_seconds, load_average, rss_bytes, wait_until
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

    def replica(self, namespace: str, name: str = "cronoq-bench-0", extra: tuple[str, ...] = (),
                env: dict[str, str] | None = None) -> Replica:
        return Replica(kubeconfig=str(self.cluster.operator_kubeconfig), namespaces=(namespace,),
                       log_path=self.work / f"operator-{namespace}-{name}.log", source=self.source,
                       extra_args=(*self.operator_args, *extra), pod_name=name, module=self.operator_module,
                       env=env or {})


def shaped(shape: str, name: str, i: int) -> dict[str, Any]:
    """A burst's Task `name` (the `i`th), of `shape` (Context.task_shape), in the burst's pool."""
    if shape == "small":
        return workload.task(name, POOL)
    from bench.deep import realistic_task  # bench.deep imports this module

    task = realistic_task(name, i)
    task["spec"]["pool"] = POOL
    return task


class Window:
    """One measured burst, the bench's one way to measure it: opened before the first create (the
    audit log marked, the observer watching, the controller's CPU and the control plane's read),
    closed once the observer's goal is met, with what every burst reports."""

    def __init__(self, ctx: Context, ns: str, pid: int, until: str, workflows: bool = False) -> None:
        self.ctx, self.pid, self.audit = ctx, pid, AuditLog(ctx.cluster.audit_log)
        self.mark = self.audit.mark()
        self.observer = ObserverProcess(ctx.cluster.kubeconfig, ns, ctx.work / f"obs-{ns}.json", until=until,
                                        workflows=workflows)
        self.cpu, self.rss, self.load = cpu_seconds(pid), rss_bytes(pid), load_average()
        self.cluster_cpu = ctx.cluster.component_cpu()
        self.peak = PeakRss(pid).start()

    def close(self, n: int, sub: Submission, *, leader_lease: tuple[str, ...] | None = None,
              after: Callable[[], Any] | None = None, requests_per: int | None = None) -> tuple[dict, dict]:
        """(the observer's milestones, the figures per item of `n`, requests per `requests_per`
        items if given): `after()` runs once the goal is met, before the controller's CPU is read,
        and its answer is kept as `after`."""
        seen = self.observer.result()
        afterwards = after() if after is not None else None
        cpu, rss, peak = cpu_seconds(self.pid) - self.cpu, rss_bytes(self.pid), self.peak.stop()
        load, cluster = load_average(), self.ctx.cluster.component_cpu()
        self.audit.settle()
        requests = self.audit.requests(self.mark, OPERATOR_USER)
        lease = self.ctx.leader_lease if leader_lease is None else leader_lease
        return seen, {
            "submitted": len(sub.sent), "submit_errors": len(sub.errors), "submit_rate": sub.rate,
            "timed_out": seen["timed_out"],
            "operator": {"cpu_seconds": cpu, "cpu_seconds_per_task": cpu / n, "rss_before": self.rss,
                         "rss_after": rss, "rss_peak": peak},
            "api": breakdown(requests, requests_per or n, leader_lease=lease),
            "load_average": {"before": self.load, "after": load},
            "cluster_cpu_seconds": _spent(self.cluster_cpu, cluster),
            **({"after": afterwards} if after is not None else {})}


def outcomes(seen: dict[str, Any], sub: Submission, n: int) -> tuple[dict[str, float | None], dict[str, Any]]:
    """(task → when it was seen Succeeded, the counts and throughput of a burst of Tasks)."""
    tasks = seen["tasks"].values()
    succeeded = {name: s["phases"].get("Succeeded") for name, s in seen["tasks"].items()}
    done = [v for v in succeeded.values() if v]
    return succeeded, {"succeeded": len(done), "throughput": throughput(n, sub.started, done),
                       "succeeded_first_attempt": sum(1 for s in tasks if s.get("terminal") == "Succeeded"
                                                      and s.get("attempt") == 1)}


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
    complete = {name: s.get("Complete") for name, s in seen["jobs"].items()}
    result = {
        "n": n, "submitted": len(sub.sent), "submit_errors": len(sub.errors), "submit_rate": sub.rate,
        "completed": sum(1 for v in complete.values() if v), "timed_out": seen["timed_out"],
        "throughput": throughput(n, sub.started, [v for v in complete.values() if v]),
        "latency": {"to_running": summary(between(sub.sent, {k: v.get("started") for k, v in seen["jobs"].items()})),
                    "to_succeeded": summary(between(sub.sent, complete))},
        "load_average": {"before": load_before, "after": load_average()},
        "cluster_cpu_seconds": cluster_cpu,
    }
    log(f"baseline n={n}: {_fmt(result['throughput'])} jobs/s, p50 {_fmt(result['latency']['to_succeeded']['p50'])}s")
    ctx.cluster.delete_namespace(ns)
    return result


def cronoq(ctx: Context, n: int, rate: float | None = None, label: str = "burst", keep: bool = False,
           operator_args: tuple[str, ...] = (), after: Callable[[str], Any] | None = None,
           before: Callable[[str], Any] | None = None, pools: list[dict[str, Any]] | None = None,
           tasks: list[dict[str, Any]] | None = None, env: dict[str, str] | None = None,
           **pool_spec: Any) -> dict[str, Any]:
    """N Tasks in one pool of concurrency 10000, with the operator running; `rate`: paced;
    `operator_args`, `env` (the operator's) and `pool_spec` (e.g. `leaseTTL="0s"`) change the
    defaults; `pools` and `tasks` replace the burst's pool and Tasks. `after(namespace)`
    runs once every task has succeeded, before the operator's CPU is read (its answer is kept as
    `after`): what the operator still does for the burst then is counted. `before(namespace)` runs
    before the pool is made (e.g. the LocalQueue a Kueue pool names)."""
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-tasks-{label}-{n}")
    if before is not None:
        before(ns)
    for pool in pools or [workload.pool(POOL, 10_000, **pool_spec)]:
        api.create(pools_path(ns), pool)
    tasks = tasks or [shaped(ctx.task_shape, name, i) for i, name in enumerate(workload.names("t", n))]
    operator = ctx.replica(ns, extra=operator_args, env=env).start()
    wait_until(operator.leading, timeout=60)  # listed (an empty namespace): its start is not the burst's cost
    window = Window(ctx, ns, operator.pid, until=f"tasks={n}")
    sub = submit(api, tasks_path(ns), tasks, creators=ctx.creators, rate=rate)
    seen, figures = window.close(n, sub, after=(lambda: after(ns)) if after is not None else None)
    by_task = seen["tasks"]
    job_added = {j["task"]: j["added"] for j in seen["jobs"].values() if j.get("task") and j.get("attempt") == "1"}
    succeeded, counts = outcomes(seen, sub, n)
    result = {
        "n": n, "label": label, "paced_rate": rate, "operator_args": list(operator_args), "pool_spec": pool_spec,
        **counts, **figures, "namespace": ns,
        "latency": {"to_job": summary(between(sub.sent, job_added)),
                    "to_running": summary(between(sub.sent, {k: s["phases"].get("Running") for k, s in by_task.items()})),
                    "to_succeeded": summary(between(sub.sent, succeeded))},
    }
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
