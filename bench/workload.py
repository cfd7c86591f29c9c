"""What the bench submits: Tasks whose pods succeed at once, their pool, and bare Jobs with the
same pod spec as the Jobs cronoq creates for those Tasks (cronoq's own Job builder makes them,
minus the owner reference to a Task that does not exist).
"""
from __future__ import annotations

import uuid
from typing import Any

IMAGE = "example.invalid/bench:1"
PLAY = {"kwok.cronoq.io/outcome": "Succeed", "kwok.cronoq.io/delay": "0s"}
"""kwok: the container exits 0 as soon as it starts."""


def task(name: str, pool: str, priority: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"pool": pool, "image": IMAGE, "podMetadata": {"annotations": dict(PLAY)}}
    if priority:
        spec["priority"] = priority
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": name}, "spec": spec}


LEASE_TTL = "1h"
"""Heartbeats stay on (the default, as the targets ask), but kwok's pods never heartbeat: with the
default 30 s TTL, a pod kwok leaves Running for over 30 s under a 5000-task burst ends its attempt
LeaseExpired (the run at 1572d66: 240 dead letters, 17 writes per task). An hour never expires here."""


def pool(name: str, concurrency: int, **spec: Any) -> dict[str, Any]:
    """A TaskPool; `spec` adds fields, e.g. `ttlAfterFinished="60s"`, `jobRetention="30s"`."""
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool", "metadata": {"name": name},
            "spec": {"concurrency": concurrency, "leaseTTL": LEASE_TTL, **spec}}


def bare_job(name: str, namespace: str, pool_name: str = "bench") -> dict[str, Any]:
    """The Job cronoq would create for attempt 1 of Task `name`, without its owner."""
    from cronoq.api import Task
    from cronoq.engine.jobs import build_job

    model = Task.model_validate({**task(name, pool_name), "metadata": {"name": name, "namespace": namespace,
                                                                      "uid": str(uuid.uuid4())}})
    job = build_job(model, None, 1, "e0-a1")
    job["metadata"].pop("ownerReferences", None)
    return job


def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(n)]
