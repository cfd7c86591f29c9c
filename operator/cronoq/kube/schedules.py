"""API I/O of TaskSchedules: reading a schedule's Tasks into facts, and the writes the schedule
controller makes. Every write asks the Writer's leadership guard first, like the Writer's own."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cronoq.api import TERMINAL_PHASES
from cronoq.apiserver.errors import Conflict, Forbidden, NotFound, Refused
from cronoq.engine.schedule import EPOCH, FIRE_TIME, SCHEDULE, TRIGGER, Fired
from cronoq.kube.writes import JSON_PATCH, Rejected, Writer, custom_objects


_TERMINAL = {p.value for p in TERMINAL_PHASES}
_FAILED = {"Failed", "DeadLettered"}
"""The ends a schedule's pauseAfterFailures counts."""


def controller_of(raw: dict[str, Any]) -> dict[str, Any] | None:
    """The controller ownerReference of an object, if any."""
    return next((ref for ref in (raw.get("metadata") or {}).get("ownerReferences") or () if ref.get("controller")),
                None)


def fired(raw: dict[str, Any]) -> tuple[str, Fired] | None:
    """(schedule name, facts) of a Task a schedule created; None for any other Task. Only a Task
    that a TaskSchedule controls (ownerReference) counts: labels alone may be forged by anyone
    who may create Tasks."""
    meta = raw.get("metadata") or {}
    labels = meta.get("labels") or {}
    schedule, at = labels.get(SCHEDULE), labels.get(FIRE_TIME)
    owner = controller_of(raw)
    if not schedule or not at or not at.isdigit() or owner is None:
        return None
    if owner.get("kind") != "TaskSchedule" or owner.get("name") != schedule:
        return None
    status = raw.get("status") or {}
    phase = status.get("phase")
    finished_at = status.get("finishedAt")
    return schedule, Fired(
        name=meta["name"], fire_time=EPOCH + timedelta(seconds=int(at)), manual=labels.get(TRIGGER) == "manual",
        finished=phase in _TERMINAL, succeeded=phase == "Succeeded", failed=phase in _FAILED,
        finished_at=datetime.fromisoformat(finished_at.replace("Z", "+00:00")) if finished_at else None,
        cancelling=bool((raw.get("spec") or {}).get("cancel")), owner_uid=owner.get("uid"), uid=meta.get("uid"))


@dataclass
class ScheduleWriter:
    writer: Writer

    async def create_task(self, task: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create a fire's Task: (the Task stored under its name, whether this call created it). The
        create is the fence: when a Task existed already, whether it is the schedule's own decides
        if the fire happened."""
        self.writer.check()
        namespace, name = task["metadata"]["namespace"], task["metadata"]["name"]
        try:
            return await self.writer.request("POST", custom_objects(namespace), task), True
        except Conflict:
            existing = await self.writer.request("GET", f"{custom_objects(namespace)}/{name}")
            return existing or {"metadata": {"name": name}}, False
        except (Forbidden, Refused) as err:
            raise Rejected.of(err) from None

    async def replace_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """PUT the status with the stored resourceVersion as precondition (Conflict if it changed)."""
        return await self.writer.replace_status("taskschedules", raw, status)

    async def cancel_task(self, namespace: str, name: str, uid: str) -> None:
        """Cancel the Task `name` while it is the one with this `uid` (a JSON patch that tests it)."""
        self.writer.check()
        patch = [{"op": "test", "path": "/metadata/uid", "value": uid},
                 {"op": "add", "path": "/spec/cancel", "value": True}]
        try:
            await self.writer.request("PATCH", f"{custom_objects(namespace)}/{name}", patch,
                                      content_type=JSON_PATCH)
        except (NotFound, Conflict, Refused):  # gone, or its name holds another Task now
            pass

    async def delete_task(self, namespace: str, name: str, uid: str) -> None:
        """Delete the Task `name` while it is the one with this `uid`."""
        self.writer.check()
        try:
            await self.writer.request("DELETE", f"{custom_objects(namespace)}/{name}",
                                      {"propagationPolicy": "Background", "preconditions": {"uid": uid}})
        except (NotFound, Conflict):
            pass

    async def read_schedule(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.writer.request("GET", f"{custom_objects(namespace, 'taskschedules')}/{name}")
        except NotFound:
            return None
