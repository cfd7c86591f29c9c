"""A fast fill for the idle scenario: finished Tasks made directly, without the operator, looking
exactly like what the operator leaves after a first-attempt success.

For each task, one creator thread does what the operator would have done, in its order:

1. POST the Task (the same body the load generator submits: `workload.task`);
2. POST its heartbeat Lease (`cronoq.engine.jobs.build_lease`: owned by the Task, labelled like the
   Job, holder `e0-a1`) if the tasks would have one: `leases="auto"` makes it when the measured
   operator creates attempt Leases itself (before 378f64d it did, for every `leaseTTL` > 0); since
   then the attempt's SDK or sidecar creates it at its first renewal, so the bench's kwok pods
   leave none, and neither does the fill. `leases="yes"` makes one per task anyway (what tasks
   using the SDK leave), `"no"` never;
3. POST its attempt Job, built by cronoq's own `build_job` with the pool's effective settings
   (lease TTL, `jobRetention` → `ttlSecondsAfterFinished`) and the owner reference to the Task;
   the real Job controller creates the pod and kwok runs it to success at once
   (`kwok.cronoq.io/delay: 0s`), so Jobs and pods are real;
4. PUT the Task's status as a finished, first-attempt success: the fields and shapes the operator
   writes (one attempt record with leaseId, job, trigger First, dispatchedAt, startedAt, finishedAt,
   outcome Success, exitCode 0, reason Completed, durationMs; phase Succeeded, attempt 1,
   submittedAt, finishedAt, outputAvailable false, message and summary "succeeded on attempt 1",
   conditions Running False / Finished True, observedGeneration, epoch 0).

Not made: the two Events per task the operator posts (AttemptStarted, AttemptEnded); the
operator never reads Events, and the API server drops them after an hour.

The fill then waits until every Job is Complete (the observer process, as the throughput runs
do), so the operator that is measured next finds finished attempts only.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from bench import workload
from bench.cluster import log
from bench.kubeapi import Api, ApiError, jobs_path, pools_path, tasks_path

LEASE_ID = "e0-a1"
"""What a leader of epoch 0 names attempt 1's lease (`naming.lease_id(0, 1)`)."""
DEFAULT_FILL_CREATORS = 32
FILL_JOB_RETENTION = "24h"
"""The fill's pool keeps Jobs a day (the default `jobRetention` is 1h, less than a 50,000-task fill
takes), so every Job and pod is still there when the operator is measured."""
MESSAGE = "succeeded on attempt 1"


def leases_path(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def _ts(t: datetime) -> str:
    """The operator's timestamp format: microseconds, `Z`."""
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def finished_status(created: dict[str, Any], job: str, dispatched: datetime, started: datetime,
                    finished: datetime) -> dict[str, Any]:
    """The status the operator writes for a task whose attempt 1 succeeded (no output)."""
    generation = created["metadata"].get("generation", 1)
    submitted = dispatched - timedelta(milliseconds=100)
    done = _ts(finished)
    return {
        "phase": "Succeeded", "attempt": 1,
        "attempts": [{"number": 1, "leaseId": LEASE_ID, "job": job, "trigger": "First",
                      "dispatchedAt": _ts(dispatched), "startedAt": _ts(started), "finishedAt": done,
                      "outcome": "Success", "exitCode": 0, "reason": "Completed",
                      "durationMs": int((finished - started).total_seconds() * 1000)}],
        "submittedAt": _ts(submitted), "finishedAt": done, "outputAvailable": False,
        "message": MESSAGE, "summary": MESSAGE,
        "conditions": [
            {"type": "Running", "status": "False", "reason": "Succeeded", "message": "",
             "lastTransitionTime": done, "observedGeneration": generation},
            {"type": "Finished", "status": "True", "reason": "Succeeded", "message": MESSAGE,
             "lastTransitionTime": done, "observedGeneration": generation},
        ],
        "observedGeneration": generation, "epoch": 0,
    }


def operator_creates_leases() -> bool:
    """Whether the operator on the path writes attempt Leases itself (its reconciler, or since
    the split its plan applier, uses `build_lease`), rather than leaving them to the attempt's
    SDK or sidecar."""
    import importlib
    import inspect
    for module in ("cronoq.controller.reconciler", "cronoq.controller.apply"):
        try:
            if "build_lease" in inspect.getsource(importlib.import_module(module)):
                return True
        except (ImportError, OSError):
            pass
    return False


class Builder:
    """cronoq's own builders, with the pool's effective settings (as the reconciler calls them)."""

    def __init__(self, pool_body: dict[str, Any], leases: str = "auto") -> None:
        from cronoq.api import Task
        from cronoq.api.pool import TaskPoolSpec
        from cronoq.engine.jobs import build_job, build_lease
        self.Task, self.build_job, self.build_lease = Task, build_job, build_lease
        self.pool = TaskPoolSpec.model_validate(pool_body["spec"])
        self.leases = operator_creates_leases() if leases == "auto" else leases == "yes"
        try:
            try:
                from cronoq.engine.plan import Effective
            except ImportError:  # before engine/plan.py
                from cronoq.engine.attempts import Effective  # type: ignore[no-redef]
            self.effective = Effective.of
        except ImportError:  # an operator without it: DESIGN's defaults
            self.effective = None

    def objects(self, created: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        task = self.Task.model_validate(created)
        if self.effective is not None:
            eff = self.effective(task, self.pool)
            ttl, retention, sidecar = eff.lease_ttl, eff.job_retention, eff.heartbeat_sidecar
        else:
            ttl, retention, sidecar = self.pool.lease_ttl, getattr(self.pool, "job_retention", None), False
        if sidecar:
            raise ValueError("the fill makes no heartbeat sidecars (the operator's image is not known here)")
        lease = self.build_lease(task, 1, LEASE_ID, ttl) if self.leases and ttl > timedelta(0) else None
        kwargs = {"job_retention": retention} if retention is not None else {}
        job = self.build_job(task, self.pool, 1, LEASE_ID, lease_ttl=ttl, **kwargs)
        return lease, job


def fill(api: Api, namespace: str, n: int, *, pool: str = "bench", creators: int = DEFAULT_FILL_CREATORS,
         prefix: str = "f", leases: str = "auto", jobs: int | None = None) -> dict[str, Any]:
    """Make `n` finished Tasks (with Lease, Job, pod) in `namespace`, which must hold pool `pool`
    (created here if absent); return counts and times. Does not wait for the Jobs.

    Only the first `jobs` (default: all) get their Lease, Job and pod; the others are Tasks whose
    attempt Job the TTL controller has already removed (finished longer ago than `jobRetention`,
    1h by default): what most of a busy install's finished Tasks look like."""
    pool_body = api.get(f"{pools_path(namespace)}/{pool}")
    if pool_body is None:
        pool_body = api.create(pools_path(namespace), workload.pool(pool, 10_000, jobRetention=FILL_JOB_RETENTION))
    builder = Builder(pool_body, leases)
    names = workload.names(prefix, n)
    with_jobs = set(names[:n if jobs is None else jobs])
    lock = threading.Lock()
    cursor = iter(names)
    errors: dict[str, str] = {}
    done = [0]
    started = time.monotonic()

    def one(name: str) -> None:
        created = api.create(tasks_path(namespace), workload.task(name, pool))
        dispatched = datetime.now(timezone.utc)
        lease, job = builder.objects(created)
        if name in with_jobs:
            if lease is not None:
                api.create(leases_path(namespace), lease)
            api.create(jobs_path(namespace), job)
        begun = datetime.now(timezone.utc)
        status = finished_status(created, job["metadata"]["name"], dispatched, begun,
                                 begun + timedelta(milliseconds=60))
        body = {**created, "status": status}
        for attempt in range(5):
            try:
                api.request("PUT", f"{tasks_path(namespace)}/{name}/status", body)
                return
            except ApiError as err:
                if err.status not in (429, 500, 503, 504) or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def work() -> None:
        while True:
            with lock:
                name = next(cursor, None)
            if name is None:
                return
            try:
                one(name)
            except Exception as err:  # noqa: BLE001 - counted, reported
                with lock:
                    errors[name] = repr(err)[:300]
                continue
            with lock:
                done[0] += 1
                if done[0] % 2000 == 0:
                    log(f"fill {namespace}: {done[0]}/{n} tasks made, {done[0] / (time.monotonic() - started):.0f}/s")

    threads = [threading.Thread(target=work, daemon=True) for _ in range(creators)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - started
    if errors:
        log(f"fill {namespace}: {len(errors)} of {n} failed, e.g. {next(iter(errors.values()))}")
    return {"namespace": namespace, "n": n, "made": done[0], "errors": len(errors),
            "error_sample": list(errors.items())[:3], "create_seconds": seconds, "creators": creators,
            "with_jobs": len(with_jobs),
            "lease": builder.leases and builder.pool.lease_ttl > timedelta(0)}
