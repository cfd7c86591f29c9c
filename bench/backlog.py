"""A deep queue: N Tasks behind a pool of concurrency 50. How long the backlog takes to drain,
and how soon a high-priority Task submitted into it gets its Job: priorities only matter if a
new urgent task does not wait behind the whole queue.

Three high-priority probes go in: right after the backlog is submitted (N waiting), and when a
third and two thirds of it have finished.
"""
from __future__ import annotations

import time
from typing import Any

from bench import workload
from bench.audit import AuditLog, breakdown
from bench.cluster import OPERATOR_USER, log
from bench.kubeapi import pools_path, tasks_path
from bench.latency import between, summary
from bench.load import submit
from bench.observer import ObserverProcess
from bench.procstat import PeakRss, load_average
from bench.throughput import Context, wait_until

POOL = "backlog"
CONCURRENCY = 50
PROBE_PRIORITY = 1000


def backlog(ctx: Context, n: int, keep: bool = False) -> dict[str, Any]:
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-backlog-{n}")
    api.create(pools_path(ns), workload.pool(POOL, CONCURRENCY))
    tasks = [workload.task(name, POOL) for name in workload.names("q", n)]
    operator = ctx.replica(ns).start()
    audit = AuditLog(ctx.cluster.audit_log)
    mark = audit.mark()
    probes = ["hipri-1", "hipri-2", "hipri-3"]
    observer = ObserverProcess(ctx.cluster.kubeconfig, ns, ctx.work / f"obs-{ns}.json", until=f"tasks={n + len(probes)}")
    cpu_before, load_before = operator.cpu(), load_average()
    peak = PeakRss(operator.pid).start()
    sub = submit(api, tasks_path(ns), tasks, creators=ctx.creators)

    probe_sent: dict[str, float] = {}
    probe_context: dict[str, dict[str, int]] = {}
    for probe, fraction in zip(probes, (0.0, 1 / 3, 2 / 3)):
        wait_until(lambda: observer.progress()["tasks_done"] >= fraction * n, timeout=3600, interval=0.1)
        progress = observer.progress()
        probe_context[probe] = {"finished_before": progress["tasks_done"],
                                "waiting_before": n - progress["jobs_created"]}
        probe_sent[probe] = time.monotonic()
        api.create(tasks_path(ns), workload.task(probe, POOL, priority=PROBE_PRIORITY))
        log(f"backlog: probe {probe} submitted with {probe_context[probe]['waiting_before']} tasks waiting")
    seen = observer.result()
    cpu_after, rss_peak = operator.cpu(), peak.stop()
    audit.settle()
    requests = audit.requests(mark, OPERATOR_USER)

    job_added = {j["task"]: j["added"] for j in seen["jobs"].values() if j.get("task") and j.get("attempt") == "1"}
    succeeded = {name: s["phases"].get("Succeeded") for name, s in seen["tasks"].items()}
    backlog_done = [succeeded.get(t["metadata"]["name"]) for t in tasks]
    drained = max(v for v in backlog_done if v) - sub.started if all(backlog_done) else None
    dispatch = {p: (job_added[p] - probe_sent[p]) if p in job_added else None for p in probes}
    result = {
        "n": n, "concurrency": CONCURRENCY, "submitted": len(sub.sent), "submit_errors": len(sub.errors),
        "timed_out": seen["timed_out"], "drain_seconds": drained,
        "drain_rate": n / drained if drained else None,
        "probes": [{"name": p, "dispatch_seconds": dispatch[p], **probe_context[p]} for p in probes],
        "probe_dispatch_max": max((v for v in dispatch.values() if v is not None), default=None),
        "backlog_dispatch": summary(between({t["metadata"]["name"]: sub.sent.get(t["metadata"]["name"])
                                             for t in tasks if t["metadata"]["name"] in sub.sent}, job_added)),
        "operator": {"cpu_seconds": cpu_after - cpu_before, "cpu_seconds_per_task": (cpu_after - cpu_before) / n,
                     "rss_peak": rss_peak, "rss_after": operator.rss()},
        "api": breakdown(requests, n + len(probes), leader_lease=ctx.leader_lease),
        "load_average": {"before": load_before, "after": load_average()},
        "namespace": ns,
    }
    log(f"backlog n={n}: drained in {result['drain_seconds']}s; probe dispatch {dispatch}")
    operator.stop()
    if not keep:
        ctx.cluster.delete_namespace(ns)
    return result
