"""`Client`'s TaskPools and TaskSchedules: read them, pause a pool, suspend a schedule, backfill one,
trigger one now."""
from __future__ import annotations

from datetime import datetime, timezone

from cronoq.api import TaskPool, TaskSchedule
from cronoq.apiserver.errors import Conflict, NotFound
from cronoq.apiserver.sync import MERGE_PATCH
from cronoq.client.common import rfc3339
from cronoq.client.errors import (
    ObjectNotFound,
)


class PoolsAndSchedules:
    """A part of `Client` (it holds `api`, `namespace`, `_path` and the reads used here)."""

    def pool(self, name: str) -> TaskPool | None:
        """The TaskPool named `name`, or None if it does not exist."""
        try:
            return TaskPool.model_validate(self.api.request("GET", self.path("taskpools", name)))
        except NotFound:
            return None

    def pools(self, *, all_namespaces: bool = False) -> list[TaskPool]:
        """The TaskPools of the namespace (or of every one), by namespace and name."""
        return [TaskPool.model_validate(o) for o in self._objects("taskpools", all_namespaces)]

    def pause(self, pool: str, paused: bool = True) -> TaskPool:
        """Pause a pool (spec.paused: no new attempts start; those running go on; its
        concurrency is kept), or with `paused=False` resume it. ObjectNotFound if there is none."""
        return TaskPool.model_validate(self._patch("taskpools", "TaskPool", pool, {"spec": {"paused": paused}}))

    def schedules(self, *, all_namespaces: bool = False) -> list[TaskSchedule]:
        """The TaskSchedules of the namespace (or of every one), by namespace and name."""
        return [TaskSchedule.model_validate(o) for o in self._objects("taskschedules", all_namespaces)]

    def schedule(self, name: str) -> TaskSchedule:
        """The TaskSchedule named `name`; ObjectNotFound if there is none."""
        try:
            return TaskSchedule.model_validate(self.api.request("GET", self.path("taskschedules", name)))
        except NotFound:
            raise ObjectNotFound("TaskSchedule", self.namespace, name) from None

    def suspend(self, schedule: str, suspended: bool = True) -> TaskSchedule:
        """Suspend a schedule (spec.suspend: no fires; the times that pass are not caught up on),
        or with `suspended=False` resume it. ObjectNotFound if there is none."""
        return TaskSchedule.model_validate(
            self._patch("taskschedules", "TaskSchedule", schedule, {"spec": {"suspend": suspended}}))

    def backfill(self, schedule: str, start: datetime, end: datetime) -> tuple[TaskSchedule, bool]:
        """Ask the schedule's operator to run its fire times in [start, end] (spec.backfills gets
        the range; each fire time without a Task gets one, once). Returns the schedule and whether
        the range was added (False: the same range is there already). The write carries the
        resourceVersion read, so two backfills asked at once cannot drop each other's range."""
        found = self.schedule(schedule)
        ranges = [b.to_dict() for b in found.spec.backfills]
        wanted = {"start": rfc3339(start), "end": rfc3339(end)}
        if any(b.start == start and b.end == end for b in found.spec.backfills):
            return found, False
        body = {"metadata": {"resourceVersion": found.metadata.resource_version},
                "spec": {"backfills": [*ranges, wanted]}}
        return TaskSchedule.model_validate(self._patch("taskschedules", "TaskSchedule", schedule, body)), True

    def trigger(self, schedule: str) -> tuple[str, bool]:
        """Create the schedule's Task for this second, as a fire would: the same template, owner and
        labels, a name and key of its own (a second trigger within the same second is the same fire).
        Returns (the Task's name, whether it was created now). ObjectNotFound if there is none."""
        from cronoq.engine.schedule import task_manifest

        found = self.schedule(schedule)
        task = task_manifest(found, datetime.now(timezone.utc).replace(microsecond=0), manual=True)
        try:
            self.api.request("POST", self.path("tasks"), body=task)
        except Conflict:
            return task["metadata"]["name"], False
        return task["metadata"]["name"], True

    def _objects(self, plural: str, all_namespaces: bool) -> list[dict]:
        items = self.api.request("GET", self.path(plural, all_namespaces=all_namespaces))["items"]
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    def _patch(self, plural: str, kind: str, name: str, body: dict) -> dict:
        try:
            return self.api.request("PATCH", self.path(plural, name), body=body, content_type=MERGE_PATCH)
        except NotFound:
            raise ObjectNotFound(kind, self.namespace, name) from None
