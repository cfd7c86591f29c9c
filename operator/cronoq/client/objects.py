"""`Client`'s TaskPools and TaskSchedules: read them, pause a pool, suspend a schedule, backfill one."""
from __future__ import annotations

from datetime import datetime

from kubernetes.client.rest import ApiException

from cronoq.api import GROUP, VERSION, TaskPool, TaskSchedule
from cronoq.client.common import rfc3339
from cronoq.client.errors import (
    ObjectNotFound,
)


class PoolsAndSchedules:
    """A part of `Client` (it holds `custom`, `core`, `namespace` and the reads used here)."""

    def pool(self, name: str) -> TaskPool | None:
        """The TaskPool named `name`, or None if it does not exist."""
        try:
            return TaskPool.model_validate(
                self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "taskpools", name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

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
            return TaskSchedule.model_validate(
                self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "taskschedules", name))
        except ApiException as err:
            if err.status == 404:
                raise ObjectNotFound("TaskSchedule", self.namespace, name) from None
            raise

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

    def _objects(self, plural: str, all_namespaces: bool) -> list[dict]:
        if all_namespaces:
            items = self.custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]
        else:
            items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)["items"]
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    def _patch(self, plural: str, kind: str, name: str, body: dict) -> dict:
        try:
            return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name, body)
        except ApiException as err:
            if err.status == 404:
                raise ObjectNotFound(kind, self.namespace, name) from None
            raise
