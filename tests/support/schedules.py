"""Builders and reads for TaskSchedules in a test namespace.

    sc = Schedules(cq)
    sc.create("tick", every="2s", plays={"delay": "100ms"})
    sc.fires("tick")          # [(fire time in Unix seconds, Task name), ...] of scheduled fires, oldest first
"""
from __future__ import annotations

from typing import Any

from kubernetes.client.rest import ApiException

from tests.support.tasks import GROUP, VERSION, Cronoq, plays as kwok_plays

SCHEDULE_LABEL = "cronoq.io/schedule"
FIRE_TIME_LABEL = "cronoq.io/fire-time"


def manifest(name: str, *, image: str = "example.invalid/task:1", plays: dict | None = None,
             task: dict | None = None, **spec: Any) -> dict:
    template_spec = {"image": image, **(task or {})}
    annotations = kwok_plays(**(plays or {}))
    if annotations:
        template_spec["podMetadata"] = {"annotations": annotations}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskSchedule", "metadata": {"name": name},
            "spec": {"taskTemplate": {"spec": template_spec}, **spec}}


class Schedules:
    def __init__(self, cq: Cronoq) -> None:
        self.cq = cq
        self.custom = cq.custom
        self.namespace = cq.namespace

    def create(self, name: str, **kw: Any) -> dict:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "taskschedules",
                                                           manifest(name, **kw))

    def patch(self, name: str, spec: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, "taskschedules", name,
                                                          {"spec": spec})

    def get(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "taskschedules", name)

    def status(self, name: str) -> dict:
        try:
            return self.get(name).get("status") or {}
        except ApiException as err:
            if err.status == 404:
                return {}
            raise

    def tasks(self, name: str) -> list[dict]:
        return self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "tasks", label_selector=f"{SCHEDULE_LABEL}={name}")["items"]

    def fires(self, name: str) -> list[tuple[int, str]]:
        """Scheduled fires (not manual triggers) of the schedule, oldest first."""
        found = [(int(t["metadata"]["labels"][FIRE_TIME_LABEL]), t["metadata"]["name"]) for t in self.tasks(name)
                 if t["metadata"]["labels"].get("cronoq.io/trigger") == "schedule"]
        return sorted(found)
