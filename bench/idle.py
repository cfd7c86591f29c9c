"""The operator at rest with many finished Tasks present: what a fresh operator costs to start
over them (list, first reconcile of each), and then memory, CPU and API requests while nothing
happens. A finished task should cost a few hundred bytes of facts and no requests; resyncs that
write, or objects kept whole, show up here.

Measured at each of several sizes (e.g. 10,000 then 50,000) in one run: the finished Tasks of
this run's burst and backlog count, and the rest is made by the operator itself (`bench/fill.py`),
one namespace per increment, so each size adds to the previous one.

/readyz answers before the operator has listed anything (a standby counts as available), so
"started" is judged by the `cronoq_leader` metric (set once the initial listing is in) and
then by the operator's CPU falling quiet; the idle window opens only after that.
"""
from __future__ import annotations

import time
from typing import Any

from bench.audit import AuditLog, breakdown
from bench.cluster import OPERATOR_USER, log
from bench.fill import fill
from bench.kubeapi import jobs_path, tasks_path
from bench.procstat import PeakRss, load_average
from bench.throughput import Context, wait_until

IDLE_SECONDS = 75.0
"""Longer than the operator's 60s resync, so one resync pass falls inside the window."""
QUIET = 0.05
"""CPU seconds per second under which the operator counts as settled (5% of a core)."""
SETTLE_TIMEOUT = 900.0


def idle(ctx: Context, namespaces: list[str], sizes: list[int] = (10_000,), seconds: float = IDLE_SECONDS,
         jobs_kept: int | None = None) -> list[dict[str, Any]]:
    """Measure a fresh operator over the finished Tasks in `namespaces`, topped up by the fill to
    each of `sizes` in turn (the fill namespaces are appended to `namespaces`, for the caller to
    delete). One result per size. With `jobs_kept`, no more than that many finished Tasks in all
    have their Job and pod (the rest finished longer ago than `jobRetention`)."""
    api = ctx.cluster.api
    present = {ns: api.count(tasks_path(ns)) for ns in namespaces}
    jobs = sum(api.count(jobs_path(ns)) for ns in namespaces)
    runs = []
    for size in sorted(sizes):
        made = None
        if sum(present.values()) < size:
            missing = size - sum(present.values())
            with_jobs = missing if jobs_kept is None else max(0, min(missing, jobs_kept - jobs))
            ns = ctx.cluster.namespace(f"bench-tasks-fill-{size}")
            namespaces.append(ns)
            made = fill(ctx, ns, missing, jobs=with_jobs)
            present[ns] = api.count(tasks_path(ns))
            jobs += made["jobs_left"]
        run = measure(ctx, namespaces, dict(present), made, seconds)
        run["jobs_present"] = jobs
        runs.append(run)
    return runs


def measure(ctx: Context, namespaces: list[str], present: dict[str, int], fill_result: dict[str, Any] | None,
            seconds: float) -> dict[str, Any]:
    total = sum(present.values())
    replica = ctx.replica(namespaces[0])
    replica.namespaces = tuple(namespaces)
    replica.log_path = ctx.work / f"operator-idle-{total}.log"
    audit = AuditLog(ctx.cluster.audit_log)
    started = time.monotonic()
    replica.start(wait_ready=False, timeout=600)
    peak = PeakRss(replica.pid, interval=0.25).start()
    replica.wait(replica.ready, 600, "/readyz")
    ready = time.monotonic() - started
    warmed = wait_until(replica.leading, timeout=SETTLE_TIMEOUT)
    warm = time.monotonic() - started if warmed else None
    settled, last = None, replica.cpu()
    while time.monotonic() - started < SETTLE_TIMEOUT:
        time.sleep(5)
        now = replica.cpu()
        if (now - last) / 5 < QUIET:
            settled = time.monotonic() - started
            break
        last = now
    cpu_settle, rss_peak_start = replica.cpu(), peak.stop()
    log(f"idle: operator over {total} tasks ready {ready:.1f}s, listed {warm}s, settled {settled}s, "
        f"peak RSS {rss_peak_start / 2**20:.0f} MiB")

    mark, cpu0, t0, load_before = audit.mark(), replica.cpu(), time.monotonic(), load_average()
    timeline = []  # (seconds into the window, RSS, CPU seconds): growth at rest shows here
    while time.monotonic() - t0 < seconds:
        timeline.append((round(time.monotonic() - t0, 1), replica.rss(), round(replica.cpu() - cpu0, 2)))
        time.sleep(5)
    cpu1, t1, rss_idle = replica.cpu(), time.monotonic(), replica.rss()
    audit.settle()
    api = breakdown(audit.requests(mark, OPERATOR_USER), total, leader_lease=ctx.leader_lease)
    result = {
        "tasks_present": total, "by_namespace": present, "fill": fill_result,
        "startup_seconds": ready, "listed_seconds": warm, "settled_seconds": settled,
        "cpu_seconds_to_settle": cpu_settle, "rss_peak_startup": rss_peak_start,
        "rss_idle": rss_idle, "rss_bytes_per_task": rss_idle / total if total else None,
        "idle_seconds": t1 - t0, "idle_cpu_fraction": (cpu1 - cpu0) / (t1 - t0),
        "rss_timeline": timeline, "idle_requests": api["requests"], "idle_writes": api["writes"],
        "load_average": {"before": load_before, "after": load_average()},
    }
    log(f"idle with {total} finished tasks: RSS {rss_idle / 2**20:.0f} MiB, "
        f"CPU {result['idle_cpu_fraction']:.3f} s/s, {api['writes']} writes in {seconds:.0f}s")
    replica.stop()
    return result
