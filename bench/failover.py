"""Failover: two replicas with leader election; stop the leader — SIGTERM, as a rolling upgrade
does (it releases its Lease), then SIGKILL (it cannot) — and time until the new leader creates a
Job. Right after the kill the load generator submits a marker Task every
quarter second; a marker's Job can only come from the replica that leads after the kill, so
the first one seen ends the measurement. The killed replica is restarted as the new standby
and the round repeats.
"""
from __future__ import annotations

import signal
import threading
import time
from typing import Any, Callable

from bench import workload
from bench.cluster import log
from bench.kubeapi import OBSERVER_AGENT, Api, jobs_path, pools_path, tasks_path
from bench.observer import follow
from bench.procstat import wait_until
from bench.replica import Replica
from bench.throughput import Context

POOL = "failover"
LEASE = "bench-leader"
MARKER_INTERVAL = 0.25


class JobWatch:
    """First-seen time of every Job in a namespace, by its task label (the observer's watch, in process)."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        self.seen: dict[str, float] = {}
        connected = threading.Event()
        api = Api(kubeconfig, user_agent=OBSERVER_AGENT, pool_size=2)
        threading.Thread(target=follow, args=(api, jobs_path(namespace), self._feed, connected, threading.Event()),
                         daemon=True).start()
        if not connected.wait(30):
            raise RuntimeError("the Job watch did not connect")

    def _feed(self, obj: dict[str, Any], now: float) -> None:
        task = (obj["metadata"].get("labels") or {}).get("cronoq.io/task")
        if task:
            self.seen.setdefault(task, now)


def pair(ctx: Context, ns: str, lease: str, prefix: str) -> tuple[list[Replica], JobWatch]:
    """Two replicas of the operator electing a leader on Lease `lease`, started, and a watch on the Jobs."""
    election = ("--leader-election", f"--lease-namespace={ns}", f"--lease-name={lease}")
    replicas = [ctx.replica(ns, name=f"{prefix}-{x}", extra=election) for x in "ab"]
    for r in replicas:
        r.start(wait_ready=False)
    return replicas, JobWatch(str(ctx.cluster.kubeconfig), ns)


def roles(replicas: list[Replica]) -> tuple[Replica, Replica] | None:
    """(leader, standby) once exactly one replica leads; None if none does within 90 s."""
    if not wait_until(lambda: sum(r.leading() for r in replicas) == 1, timeout=90):
        return None
    leader = next(r for r in replicas if r.leading())
    return leader, next(r for r in replicas if r is not leader)


def takeover(killed: float, standby: Replica, first_job: Callable[[], float | None],
             timeout: float) -> tuple[float | None, float | None]:
    """Seconds from `killed` until the standby leads, and until `first_job()` (a Job's first-seen time)."""
    led = first = None
    while time.monotonic() < killed + timeout and first is None:
        if led is None and standby.leading():
            led = time.monotonic() - killed
        seen = first_job()
        first = None if seen is None else seen - killed
        time.sleep(0.05)
    return led, first


def failover(ctx: Context, rounds: int = 3) -> dict[str, Any]:
    """`rounds` rounds of SIGTERM, then `rounds` of SIGKILL."""
    api = ctx.cluster.api
    ns = ctx.cluster.namespace("bench-failover")
    api.create(pools_path(ns), workload.pool(POOL, 10_000))
    replicas, watch = pair(ctx, ns, LEASE, "cronoq-bench")
    results = []
    try:
        if roles(replicas) is None:
            return {"error": "no replica became leader within 90s"}
        _warm(api, ns, watch)
        for round_, sig in enumerate([signal.SIGTERM] * rounds + [signal.SIGKILL] * rounds):
            found = roles(replicas)
            if found is None:
                raise RuntimeError(f"failover round {round_ + 1}: no replica leads")
            leader, standby = found
            marks: dict[str, float] = {}
            stop = threading.Event()

            def markers(round_=round_, marks=marks, stop=stop) -> None:
                i = 0
                while not stop.is_set():
                    name = f"m{round_}-{i:04d}"
                    marks[name] = time.monotonic()
                    api.create(tasks_path(ns), workload.task(name, POOL))
                    i += 1
                    stop.wait(MARKER_INTERVAL)

            killed = time.monotonic()
            leader.kill(sig)
            thread = threading.Thread(target=markers, daemon=True)
            thread.start()
            took_over, first_job = takeover(killed, standby, lambda: min(
                (watch.seen[m] for m in list(marks) if m in watch.seen), default=None), 120)
            stop.set()
            thread.join()
            results.append({"round": round_ + 1, "signal": sig.name, "seconds_to_first_job": first_job,
                            "seconds_to_leader_metric": took_over})
            log(f"failover round {round_ + 1}: first Job by the new leader {first_job}s after {sig.name}")
            leader.start(wait_ready=False)  # back as the standby
            time.sleep(3)
    finally:
        for r in replicas:
            r.stop()
    ctx.cluster.delete_namespace(ns)

    def worst(sig: str) -> float | None:
        values = [r["seconds_to_first_job"] for r in results if r["signal"] == sig and r["seconds_to_first_job"] is not None]
        return max(values) if values else None

    return {"rounds": results, "max_seconds": worst("SIGKILL"), "sigterm_max_seconds": worst("SIGTERM")}


def _warm(api: Api, ns: str, watch: JobWatch) -> None:
    """A few tasks through the leader first, so the first round does not time its warm-up."""
    for name in workload.names("warm", 5):
        api.create(tasks_path(ns), workload.task(name, POOL))
    wait_until(lambda: all(n in watch.seen for n in workload.names("warm", 5)), timeout=60)
