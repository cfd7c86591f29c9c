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
from bench.cluster import log
from bench.kubeapi import pools_path, tasks_path
from bench.latency import between, summary
from bench.load import submit
from bench.procstat import wait_until
from bench.throughput import Context, Window

POOL = "backlog"
CONCURRENCY = 50
PROBE_PRIORITY = 1000


def backlog(ctx: Context, n: int, keep: bool = False) -> dict[str, Any]:
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-backlog-{n}")
    api.create(pools_path(ns), workload.pool(POOL, CONCURRENCY))
    tasks = [workload.task(name, POOL) for name in workload.names("q", n)]
    operator = ctx.replica(ns).start()
    probes = ["hipri-1", "hipri-2", "hipri-3"]
    window = Window(ctx, ns, operator.pid, until=f"tasks={n + len(probes)}")
    sub = submit(api, tasks_path(ns), tasks, creators=ctx.creators)

    probe_sent: dict[str, float] = {}
    probe_context: dict[str, dict[str, int]] = {}
    for probe, fraction in zip(probes, (0.0, 1 / 3, 2 / 3)):
        wait_until(lambda: window.observer.progress()["tasks_done"] >= fraction * n, timeout=3600, interval=0.1)
        progress = window.observer.progress()
        probe_context[probe] = {"finished_before": progress["tasks_done"],
                                "waiting_before": n - progress["jobs_created"]}
        probe_sent[probe] = time.monotonic()
        api.create(tasks_path(ns), workload.task(probe, POOL, priority=PROBE_PRIORITY))
        log(f"backlog: probe {probe} submitted with {probe_context[probe]['waiting_before']} tasks waiting")
    seen, figures = window.close(n, sub, requests_per=n + len(probes))

    job_added = {j["task"]: j["added"] for j in seen["jobs"].values() if j.get("task") and j.get("attempt") == "1"}
    succeeded = {name: s["phases"].get("Succeeded") for name, s in seen["tasks"].items()}
    backlog_done = [succeeded.get(t["metadata"]["name"]) for t in tasks]
    drained = max(v for v in backlog_done if v) - sub.started if all(backlog_done) else None
    dispatch = {p: (job_added[p] - probe_sent[p]) if p in job_added else None for p in probes}
    result = {
        "n": n, "concurrency": CONCURRENCY, **figures, "drain_seconds": drained,
        "drain_rate": n / drained if drained else None,
        "probes": [{"name": p, "dispatch_seconds": dispatch[p], **probe_context[p]} for p in probes],
        "probe_dispatch_max": max((v for v in dispatch.values() if v is not None), default=None),
        "backlog_dispatch": summary(between(sub.sent, job_added)), "namespace": ns,
    }
    log(f"backlog n={n}: drained in {result['drain_seconds']}s; probe dispatch {dispatch}")
    operator.stop()
    if not keep:
        ctx.cluster.delete_namespace(ns)
    return result
