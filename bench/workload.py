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


def pool(name: str, concurrency: int, **spec: Any) -> dict[str, Any]:
    """A TaskPool; `spec` adds fields, e.g. `ttlAfterFinished="60s"`, `jobRetention="30s"`."""
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool", "metadata": {"name": name},
            "spec": {"concurrency": concurrency, **spec}}


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
