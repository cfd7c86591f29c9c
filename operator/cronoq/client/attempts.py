"""`Client`'s reads of what an attempt left behind: its pod and logs, the Task's Events, and what
Kueue says of a Job it holds. A pod is the API server's JSON; an Event a `TaskEvent`, what `describe`
and the dashboard show of it."""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronoq.api import Task, TaskPhase
from cronoq.api.durations import format as format_duration
from cronoq.apiserver.errors import ApiError, Forbidden, NotFound
from cronoq.client.common import core_path, objects_path
from cronoq.client.errors import (
    LogsUnavailable,
)
from cronoq.engine import naming
from cronoq.engine.observed import KueueHold
from cronoq.engine.retention import job_retention_for, job_retention_of, unfinished_job_retention
from cronoq.kube.observe import cluster_queue_of, job_facts, kueue_hold

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
KUEUE_VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
KUEUE_VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
"""Kueue's visibility API, newest first: where it is served, a pending Workload's place."""


def _time(value: Any) -> datetime | None:
    """An RFC 3339 time of the API (a MicroTime too); None when absent or unreadable."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) and value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class TaskEvent:
    """An Event about a task, as `describe` and the dashboard show it."""

    type: str | None
    reason: str | None
    message: str | None
    count: int | None
    last_timestamp: datetime | None
    event_time: datetime | None
    created: datetime | None
    resource_version: str | None
    reporting_instance: str | None

    @property
    def when(self) -> datetime | None:
        """When it was last seen (an Event written with eventTime only has no lastTimestamp)."""
        return self.last_timestamp or self.event_time or self.created

    @classmethod
    def of(cls, raw: dict[str, Any]) -> TaskEvent:
        meta = raw.get("metadata") or {}
        count = raw.get("count")
        return cls(type=raw.get("type"), reason=raw.get("reason"), message=raw.get("message"),
                   count=count if isinstance(count, int) else None, last_timestamp=_time(raw.get("lastTimestamp")),
                   event_time=_time(raw.get("eventTime")), created=_time(meta.get("creationTimestamp")),
                   resource_version=meta.get("resourceVersion"), reporting_instance=raw.get("reportingInstance"))


class AttemptReads:
    """A part of `Client` (it holds `api`, `namespace`, `path` and the reads used here)."""

    def attempt_pod(self, name: str, attempt: int | None = None) -> tuple[Task, int, dict[str, Any]]:
        """(task, attempt number, pod as the API server has it) of an attempt (default: the newest).
        LogsUnavailable when the attempt never started, or its Job and pods were already cleaned up."""
        task = self.get(name)
        newest = task.status.attempt if task.status else 0
        number = attempt or newest
        if number < 1:
            raise LogsUnavailable(f"task {name} has not started an attempt yet")
        if number > newest:
            raise LogsUnavailable(f"task {name} has no attempt {number} (its newest is {newest})")
        record = next((a for a in task.status.attempts if a.number == number), None) if task.status else None
        if record is not None and record.worker:
            raise LogsUnavailable(f"attempt {number} ran on pull worker {record.worker}, not in a pod of its own: "
                                  f"its lines are in that worker's log (the worker's pod is named by the part of "
                                  f"{record.worker} before its last dash)")
        selector = f"{naming.TASK}={name},{naming.ATTEMPT}={number}"
        if task.metadata.uid:
            selector += f",{naming.TASK_UID}={task.metadata.uid}"
        pods = self.api.request("GET", core_path("pods", self.namespace), {"labelSelector": selector})["items"]
        if not pods:
            job = next((a.job for a in task.status.attempts if a.number == number), None) if task.status else None
            job = job or naming.job_name(name, number)
            raise LogsUnavailable(f"the Job of attempt {number} ({job}) and its pods are gone: {self._retention(task)}")
        pods.sort(key=lambda p: _time(p["metadata"].get("creationTimestamp")) or datetime.min)
        return task, number, pods[-1]

    def events(self, task: Task) -> list[TaskEvent]:
        """The task's Events, oldest first. By uid: a deleted task's Events, kept for an hour,
        would otherwise show under a new one of its name. Timestamps have whole seconds; the
        resourceVersion orders Events written in the same one."""
        listed = self.api.request("GET", core_path("events", task.metadata.namespace or self.namespace),
                                  {"fieldSelector": f"involvedObject.uid={task.metadata.uid}"})["items"]
        events = [TaskEvent.of(e) for e in listed]
        return sorted(events, key=lambda e: (e.when or datetime.min, int(e.resource_version or 0)))

    def kueue_hold(self, task: Task) -> KueueHold | None:
        """What Kueue says of the task's open attempt while Kueue holds its Job (a pool with
        `admission.kueue`), read as the user: the Job, its Workload, its LocalQueue and, where
        Kueue serves its visibility API, the Workload's place. None when Kueue does not hold the
        open attempt's Job (or the Job cannot be read). Reads only; `waiting.kueue_text` words it."""
        status, namespace = task.status, task.metadata.namespace or self.namespace
        attempt = status.attempts[-1] if status is not None and status.attempts else None
        if status is None or status.phase is not TaskPhase.RUNNING or attempt is None or attempt.outcome is not None \
                or attempt.number != status.attempt or not attempt.job:
            return None
        try:
            raw = self.api.request("GET", core_path("jobs", namespace, attempt.job, api="/apis/batch/v1"))
        except (Forbidden, NotFound):
            return None
        job = job_facts(raw)
        if job is None or not job.held_by_kueue or job.kueue_queue is None:
            return None
        workloads: list[dict[str, Any]] | None
        kueue = {"group": KUEUE_GROUP, "version": KUEUE_VERSION}
        try:
            workloads = self.api.request("GET", objects_path("workloads", namespace, **kueue),
                                         {"labelSelector": f"kueue.x-k8s.io/job-uid={job.uid}"}).get("items") or []
        except (Forbidden, NotFound):
            workloads = None
        queue: dict[str, Any] | None
        try:
            queue = self.api.request("GET", objects_path("localqueues", namespace, job.kueue_queue, **kueue))
        except (Forbidden, NotFound):
            queue = None
        return kueue_hold(job.kueue_queue, workloads, cluster_queue_of(queue),
                          self._pending_workloads(namespace, job.kueue_queue))

    def _pending_workloads(self, namespace: str, local_queue: str) -> dict[str, Any] | None:
        """Kueue's visibility API's pending Workloads of a LocalQueue (their places), or None when
        the API server does not serve it (an aggregated API Kueue installs with its visibility
        server) or the user may not read it."""
        for version in KUEUE_VISIBILITY_VERSIONS:
            path = objects_path("localqueues", namespace, local_queue, group=KUEUE_VISIBILITY_GROUP,
                                version=version) + "/pendingworkloads"
            try:
                found = self.api.request("GET", path, timeout=30)
            except ApiError as err:
                if err.status in (403, 404, 503):  # not served (no APIService), or not the user's to read
                    continue
                raise
            return found if isinstance(found, dict) else None
        return None

    def _retention(self, task: Task) -> str:
        """Which jobRetention applies to the task's attempt Jobs (the one of its outcome once it
        ended, the longest it may end with before), and where to change it."""
        phase = task.phase if task.phase is not None and task.phase.terminal else None
        own = (job_retention_for(task.spec, phase) if phase is not None
               else unfinished_job_retention(task.spec, None))
        if own is not None:
            return f"attempt Jobs are kept for the task's jobRetention ({format_duration(own)}) after they finish"
        pool = self._pool_or_none(task.spec.pool)
        kept = None
        if pool is not None:
            kept = (job_retention_of(job_retention_for(task.spec, phase), pool.spec, phase)
                    if phase is not None else unfinished_job_retention(task.spec, pool.spec))
        held = f" ({format_duration(kept)})" if kept is not None else ""
        return (f"attempt Jobs are kept for the jobRetention{held} of TaskPool {task.spec.pool} after they finish; "
                "raise it there (or spec.jobRetention, jobRetentionAfterFailure on the task) to keep logs longer")

    def logs(self, name: str, attempt: int | None = None, *, follow: bool = False, tail: int | None = None,
             since: float | None = None, timestamps: bool = False) -> Iterator[str]:
        """Lines of the task container's log for an attempt (default: the newest); `follow`
        streams until the container ends; `tail` keeps the last lines, `since` those of the
        last seconds; `timestamps` prefixes each with its RFC 3339 time (as kubectl logs)."""
        _, _, pod = self.attempt_pod(name, attempt)
        pod_name = pod["metadata"]["name"]
        containers = [c["name"] for c in pod["spec"]["containers"]]
        container = naming.TASK_CONTAINER if naming.TASK_CONTAINER in containers else containers[0]
        options = {"container": container, "follow": follow, "timestamps": timestamps, "tailLines": tail,
                   "sinceSeconds": None if since is None else max(1, math.ceil(since))}
        lines = self.api.lines(core_path("pods", self.namespace, pod_name) + "/log", options, accept="*/*", chunk=4096)
        try:
            first = next(lines, None)  # the request is made: a refusal is said before any line
        except ApiError as err:
            raise LogsUnavailable(f"pod {pod_name}: {err.message}") from None
        try:
            if first is not None:
                yield first.decode(errors="replace")
            for line in lines:
                yield line.decode(errors="replace")
        finally:
            lines.close()
