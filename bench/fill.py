"""The idle scenario's finished Tasks, made by the measured operator itself: the load generator
submits them in chunks of CHUNK to a namespace of their own, one operator (the revision measured)
runs them to success as in a burst, the Job controller makes their pods and kwok runs them, and the
operator is stopped once every task has finished. So every status, Job and Event is what that
operator writes, and nothing here knows their shape.

Tasks that are to keep no Job and pod (`jobs` fewer than `n`: those finished longer ago than their
`jobRetention`, what most of a busy install's finished Tasks look like) go to a pool with
`jobRetention: 0s`, whose Jobs the TTL controller deletes as soon as they complete; the others to
a pool that keeps them a day, longer than any fill takes. The fill returns once the Jobs and pods
left are exactly those kept, so the operator measured next finds finished attempts only.
"""
from __future__ import annotations

import time
from typing import Any

from bench import workload
from bench.cluster import log
from bench.kubeapi import jobs_path, pods_path, pools_path, tasks_path
from bench.load import submit
from bench.observer import ObserverProcess
from bench.throughput import Context, wait_until

CHUNK = 5000
"""Tasks submitted at once (the bench's largest burst); the next chunk goes when these finished."""
KEPT, PAST = "bench", "bench-past"
"""The pools of tasks that keep their Job and pod (jobRetention 24h) and of those that do not (0s)."""


def fill(ctx: Context, namespace: str, n: int, jobs: int | None = None) -> dict[str, Any]:
    """Make `n` finished Tasks in `namespace` (empty), the first `jobs` (default: all) keeping their
    Job and pod; return counts and times."""
    api = ctx.cluster.api
    jobs = n if jobs is None else min(jobs, n)
    api.create(pools_path(namespace), workload.pool(KEPT, 10_000, jobRetention="24h"))
    api.create(pools_path(namespace), workload.pool(PAST, 10_000, jobRetention="0s"))
    tasks = [workload.task(name, KEPT if i < jobs else PAST) for i, name in enumerate(workload.names("f", n))]
    log(f"fill {namespace}: {n} tasks through the operator, {jobs} of them keeping their Jobs")
    started = time.monotonic()
    operator = ctx.replica(namespace, name="cronoq-bench-fill").start()
    observer = ObserverProcess(ctx.cluster.kubeconfig, namespace, ctx.work / f"obs-{namespace}.json",
                               until=f"tasks={n}", timeout=600 + n)
    errors = 0
    try:
        for first in range(0, n, CHUNK):
            errors += len(submit(api, tasks_path(namespace), tasks[first:first + CHUNK], creators=ctx.creators).errors)
            done = min(first + CHUNK, n) - errors
            wait_until(lambda: observer.progress()["tasks_done"] >= done, timeout=600 + CHUNK, interval=1)
            log(f"fill {namespace}: {observer.progress()['tasks_done']}/{n} finished")
        seen = observer.result()
    finally:
        operator.stop()
    finished = [s for s in seen["tasks"].values() if s.get("terminal")]

    def left() -> tuple[int, int]:
        return api.count(jobs_path(namespace)), api.count(pods_path(namespace))

    wait_until(lambda: left() == (jobs, jobs), timeout=600, interval=2)  # the TTL controller and the GC
    seconds = time.monotonic() - started
    result = {"namespace": namespace, "n": n, "made": len(finished),
              "first_attempt": sum(1 for s in finished if s["terminal"] == "Succeeded" and s.get("attempt") == 1),
              "errors": errors + n - len(finished), "with_jobs": jobs, "jobs_left": left()[0],
              "seconds": seconds, "tasks_per_second": n / seconds}
    log(f"fill {namespace}: {result['made']} finished ({result['first_attempt']} on attempt 1) in {seconds:.0f}s, "
        f"{result['jobs_left']} Jobs left")
    return result
