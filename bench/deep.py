"""A deep queue (issue 56): N Tasks of a realistic size (a few KiB of spec: env, args, a payload)
wait behind a paused pool, held by two replicas with leader election. Measured, in one run:

- the submission's rate, and what holding the queue costs: the leader's settled RSS before and
  after (per queued task), the API server's RSS, etcd's database file;
- failover with the queue held: the leader is SIGKILLed and the pool resumed at once; the time
  until the standby leads and until the first Job it creates (the Lease's duration is most of it);
- an urgent task (priority above every queued one) submitted while the queue drains: until its Job;
- the drain at the pool's concurrency: its rate and the new leader's CPU per task, over the whole
  drain and split in two: the takeover (from the SIGKILL until the new leader has worked down the
  backlog of decisions it starts with, one per task it holds: `cronoq_workqueue_depth` below the
  concurrency) and the steady drain after it, which is what each further task costs.

`python bench/run.py --scenarios deep --deep-size 100000`; figures in docs/operating/sizing.md.
"""
from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from bench import workload
from bench.cluster import log
from bench.failover import pair, roles, takeover
from bench.kubeapi import pools_path, tasks_path
from bench.load import submit
from bench.procstat import cpu_seconds, rss_bytes, settled_rss
from bench.throughput import Context, wait_until

POOL = "deep"
CONCURRENCY = 500
URGENT = 1_000_000
LEASE = "bench-deep-leader"
LEASE_SECONDS = 15.0
"""The operator's default Lease duration (engine/election.py): what a successor waits out."""


def realistic_task(name: str, i: int) -> dict[str, Any]:
    """A Task of ~3 KiB of spec, as a fan-out or a backfill submits: env naming where to read and
    write, args with ids, a payload of ids; values differ per task (so the queue cannot share them)."""
    task = workload.task(name, POOL)
    spec = task["spec"]
    spec["command"] = ["python", "-m", "etl.load"]
    spec["args"] = ["--partition", f"{i % 977}", "--batch", f"b-{i:08d}", "--since", "2026-11-01T00:00:00Z",
                    "--until", "2026-12-01T00:00:00Z", "--retries", "3", "--checksum", f"{(i * 2654435761) % 2**32:08x}"]
    spec["env"] = [{"name": f"ETL_{k}", "value": f"s3://warehouse-{k % 7}/tenant-{i % 311}/table-{k}/part-{i:08d}"
                    f"?v={(i * 31 + k * 17) % 100003}"} for k in range(24)]
    spec["payload"] = {"ids": [(i * 7919 + k * 104729) % 10**9 for k in range(40)], "tenant": f"tenant-{i % 311}",
                       "note": f"backfill of partition {i % 977}, batch {i}"}
    return task


def deep(ctx: Context, n: int, drain_seconds: float | None = None) -> dict[str, Any]:
    """`drain_seconds`: measure the drain over that long only (None: until every task finished)."""
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-deep-{n}")
    api.create(pools_path(ns), workload.pool(POOL, CONCURRENCY, paused=True))
    replicas, watch = pair(ctx, ns, LEASE, "cronoq-deep")
    try:
        found = roles(replicas)
        if found is None:
            return {"n": n, "error": "no replica became leader within 90s"}
        leader, standby = found
        before = {"leader": settled_rss(leader.pid), "standby": settled_rss(standby.pid),
                  "apiserver": ctx.cluster.of("kube-apiserver", rss_bytes)}
        tasks = [realistic_task(name, i) for i, name in enumerate(workload.names("d", n))]
        spec_bytes = sum(len(str(t["spec"])) for t in tasks[:100]) / 100
        sub = submit(api, tasks_path(ns), tasks, creators=ctx.creators)
        del tasks
        log(f"deep: {len(sub.sent)} submitted at {sub.rate:.0f}/s, {len(sub.errors)} errors")
        quiet = _quiet(leader.pid)
        held = {"leader": settled_rss(leader.pid), "standby": settled_rss(standby.pid),
                "apiserver": ctx.cluster.of("kube-apiserver", rss_bytes), "etcd_db": _etcd_db(ctx)}
        log(f"deep: leader RSS {before['leader'] >> 20} → {held['leader'] >> 20} MiB with {n} queued")

        def finished() -> int:
            return int(standby.metric("cronoq_tasks_total") or 0)

        # Failover with the queue held: kill the leader, resume the pool.
        cpu_at_kill, killed = cpu_seconds(standby.pid), time.monotonic()
        leader.kill(signal.SIGKILL)
        api.patch(f"{pools_path(ns)}/{POOL}", {"spec": {"paused": False}})
        led, first_job = takeover(killed, standby, lambda: min(watch.seen.values(), default=None), 300)
        log(f"deep: the standby led {led}s and created its first Job {first_job}s after the SIGKILL")
        cpu_start, drain_start = cpu_seconds(standby.pid), time.monotonic()

        # An urgent task while the queue drains.
        wait_until(lambda: len(watch.seen) >= CONCURRENCY, timeout=600)
        urgent_sent = time.monotonic()
        api.create(tasks_path(ns), workload.task("urgent", POOL, priority=URGENT))
        wait_until(lambda: "urgent" in watch.seen, timeout=120, interval=0.02)
        urgent = watch.seen["urgent"] - urgent_sent if "urgent" in watch.seen else None
        log(f"deep: the urgent task's Job {urgent}s after it was submitted")

        # The takeover ends when the new leader has worked down the decisions it started with.
        wait_until(lambda: (standby.metric("cronoq_workqueue_depth") or 0) < CONCURRENCY, timeout=900, interval=1)
        steady_cpu, steady_start, steady_from = cpu_seconds(standby.pid), time.monotonic(), finished()
        log(f"deep: takeover {steady_start - killed:.0f}s, {steady_cpu - cpu_at_kill:.1f}s of CPU, "
            f"{steady_from} finished in it")

        done = wait_until(lambda: finished() >= n + 1, timeout=drain_seconds or 4 * 3600, interval=2)
        drained, count = time.monotonic() - drain_start, finished()
        end_cpu, end = cpu_seconds(standby.pid), time.monotonic()
        cpu = end_cpu - cpu_start
        steady = count - steady_from
        result = {
            "n": n, "concurrency": CONCURRENCY, "spec_bytes": spec_bytes, "quiet_after_submit_seconds": quiet,
            "submit_rate": sub.rate, "submit_errors": len(sub.errors),
            "rss_before": before, "rss_held": held,
            "leader_kib_per_queued_task": (held["leader"] - before["leader"]) / n / 1024,
            "apiserver_kib_per_queued_task": (held["apiserver"] - before["apiserver"]) / n / 1024
            if held["apiserver"] and before["apiserver"] else None,
            "lease_seconds": LEASE_SECONDS, "failover": {"led_seconds": led, "first_job_seconds": first_job,
                                                         "after_lease_expiry": first_job - LEASE_SECONDS
                                                         if first_job is not None else None},
            "urgent_dispatch_seconds": urgent,
            "drained": done, "drain_seconds": drained, "drained_tasks": count,
            "drain_rate": count / drained if drained else None,
            "operator_cpu_seconds_per_task": cpu / count if count else None,
            "takeover": {"seconds": steady_start - killed, "cpu_seconds": steady_cpu - cpu_at_kill,
                         "tasks_finished": steady_from},
            "steady_drain": {"seconds": end - steady_start, "tasks": steady,
                             "cpu_seconds_per_task": (end_cpu - steady_cpu) / steady if steady else None},
            "operator_rss_after_drain": rss_bytes(standby.pid),
            "namespace": ns,
        }
    finally:
        for r in replicas:
            r.stop()
    return result


def _quiet(pid: int, still: float = 0.2, window: float = 5.0, timeout: float = 3600) -> float:
    """Wait until the process spends under `still` CPU seconds in `window` (it has taken in what
    came); return how long that took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        cpu = cpu_seconds(pid)
        time.sleep(window)
        if cpu_seconds(pid) - cpu < still:
            break
    return time.monotonic() - start


def _etcd_db(ctx: Context) -> int | None:
    db = Path(ctx.cluster.directory) / "etcd" / "member" / "snap" / "db"
    return db.stat().st_size if db.exists() else None
