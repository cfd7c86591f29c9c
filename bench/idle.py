"""The operator at rest with many finished Tasks present: memory after it has listed them all,
CPU and API requests while nothing happens. A finished task should cost a few hundred bytes of
facts and no requests; resyncs that write, or objects kept whole, show up here.
"""
from __future__ import annotations

import time
from typing import Any

from bench.audit import AuditLog, breakdown
from bench.cluster import OPERATOR_USER, log
from bench.kubeapi import tasks_path
from bench.procstat import load_average
from bench.throughput import Context

IDLE_SECONDS = 75.0
"""Longer than the operator's 60s resync, so one resync pass falls inside the window."""


def count_tasks(ctx: Context, namespace: str) -> int:
    listing = ctx.cluster.api.request("GET", f"{tasks_path(namespace)}?limit=1")
    return len(listing.get("items", [])) + int(listing["metadata"].get("remainingItemCount") or 0)


def idle(ctx: Context, namespaces: list[str], seconds: float = IDLE_SECONDS) -> dict[str, Any]:
    from bench.footprint import per_task
    present = {ns: count_tasks(ctx, ns) for ns in namespaces}
    footprint = per_task(ctx.cluster.api, namespaces[0])
    total = sum(present.values())
    replica = ctx.replica(namespaces[0])
    replica.namespaces = tuple(namespaces)
    replica.log_path = ctx.work / "operator-idle.log"
    audit = AuditLog(ctx.cluster.audit_log)
    started = time.monotonic()
    replica.start(timeout=600)
    startup = time.monotonic() - started
    rss_ready, cpu_ready = replica.rss(), replica.cpu()
    time.sleep(5)  # let the first reconcile pass over every task settle before the idle window
    mark, cpu0, t0, load_before = audit.mark(), replica.cpu(), time.monotonic(), load_average()
    timeline = []  # (seconds into the window, RSS, CPU seconds): growth at rest shows here
    while time.monotonic() - t0 < seconds:
        timeline.append((round(time.monotonic() - t0, 1), replica.rss(), round(replica.cpu() - cpu0, 2)))
        time.sleep(5)
    cpu1, t1, rss_idle = replica.cpu(), time.monotonic(), replica.rss()
    audit.settle()
    requests = audit.requests(mark, OPERATOR_USER)
    api = breakdown(requests, total, leader_lease=ctx.leader_lease)
    result = {
        "tasks_present": total, "by_namespace": present, "startup_seconds": startup,
        "cpu_seconds_startup": cpu_ready, "rss_ready": rss_ready, "rss_idle": rss_idle,
        "rss_bytes_per_task": rss_idle / total if total else None,
        "idle_seconds": t1 - t0, "idle_cpu_seconds": cpu1 - cpu0, "idle_cpu_fraction": (cpu1 - cpu0) / (t1 - t0),
        "rss_timeline": timeline, "task_footprint": footprint, "idle_requests": api["requests"], "idle_writes": api["writes"], "api": api,
        "load_average": {"before": load_before, "after": load_average()},
    }
    log(f"idle with {total} finished tasks: RSS {rss_idle / 2**20:.0f} MiB, "
        f"CPU {result['idle_cpu_fraction']:.3f} s/s, {api['writes']} writes in {seconds:.0f}s")
    replica.stop()
    return result
