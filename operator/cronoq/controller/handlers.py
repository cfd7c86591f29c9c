"""kopf wiring. kopf watches Tasks, TaskPools, and the Jobs and pods cronoq created (filtered by
label on the server); every event only updates the store and queues a key, and the
Controller's work queue does the deciding. So kopf writes nothing of its own: no
last-handled-configuration annotations, no progress records, no finalizers, no log Events.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from cronoq.controller.runtime import RUNTIME
from cronoq.engine import naming

log = logging.getLogger(__name__)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False           # kopf's log lines are not Events on our objects
    # The resources are known: no CRD or namespace scans (namespace globs are matched by cronoq).
    settings.scanning.disabled = True
    settings.batching.batch_window = 0.01      # coalesce bursts of one object's events, briefly
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.label_selectors["batch", "jobs"] = naming.TASK_UID
    settings.watching.label_selectors["v1", "pods"] = naming.TASK_UID
    settings.watching.label_selectors["coordination.k8s.io", "leases"] = naming.TASK_UID
    await RUNTIME.start()


@kopf.on.cleanup()
async def stop(**_: Any) -> None:
    await RUNTIME.stop()


def _feed(method: str, event: dict[str, Any]) -> None:
    """Hand a watch event of a watched namespace (globs are matched here) to the Controller."""
    obj = event["object"]
    if RUNTIME.options.watches(obj["metadata"]["namespace"]):
        getattr(RUNTIME.controller, method)(event.get("type"), obj)


@kopf.on.event("cronoq.io", "v1alpha1", "tasks")
def task_event(event: dict[str, Any], **_: Any) -> None:
    _feed("on_task", event)


@kopf.on.event("cronoq.io", "v1alpha1", "taskpools")
def pool_event(event: dict[str, Any], **_: Any) -> None:
    _feed("on_pool", event)


@kopf.on.event("batch", "v1", "jobs", labels={naming.TASK_UID: kopf.PRESENT})
def job_event(event: dict[str, Any], **_: Any) -> None:
    _feed("on_job", event)


@kopf.on.event("", "v1", "pods", labels={naming.TASK_UID: kopf.PRESENT})
def pod_event(event: dict[str, Any], **_: Any) -> None:
    _feed("on_pod", event)


@kopf.on.event("coordination.k8s.io", "v1", "leases", labels={naming.TASK_UID: kopf.PRESENT})
def lease_event(event: dict[str, Any], **_: Any) -> None:
    _feed("on_lease", event)
