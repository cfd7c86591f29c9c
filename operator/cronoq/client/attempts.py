"""`Client`'s reads of what an attempt left behind: its pod and logs, the Task's Events, and what
Kueue says of a Job it holds."""
from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from cronoq.api import Task, TaskPhase
from cronoq.api.durations import format as format_duration
from cronoq.client.common import api_message
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


class AttemptReads:
    """A part of `Client` (it holds `custom`, `core`, `namespace` and the reads used here)."""

    def attempt_pod(self, name: str, attempt: int | None = None) -> tuple[Task, int, k8s.V1Pod]:
        """(task, attempt number, pod) of an attempt (default: the newest). LogsUnavailable when
        the attempt never started, or its Job and pods were already cleaned up."""
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
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        if not pods:
            job = next((a.job for a in task.status.attempts if a.number == number), None) if task.status else None
            job = job or naming.job_name(name, number)
            raise LogsUnavailable(f"the Job of attempt {number} ({job}) and its pods are gone: {self._retention(task)}")
        pods.sort(key=lambda p: p.metadata.creation_timestamp)
        return task, number, pods[-1]

    def events(self, task: Task) -> list[k8s.CoreV1Event]:
        """The task's Events, oldest first. By uid: a deleted task's Events, kept for an hour,
        would otherwise show under a new one of its name. Timestamps have whole seconds; the
        resourceVersion orders Events written in the same one."""
        events = self.core.list_namespaced_event(task.metadata.namespace or self.namespace,
                                                 field_selector=f"involvedObject.uid={task.metadata.uid}").items
        return sorted(events, key=lambda e: (e.last_timestamp or e.event_time or e.metadata.creation_timestamp,
                                             int(e.metadata.resource_version or 0)))

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
            raw = self.api_client.sanitize_for_serialization(self.batch.read_namespaced_job(attempt.job, namespace))
        except ApiException as err:
            if err.status in (403, 404):
                return None
            raise
        job = job_facts(raw)
        if job is None or not job.held_by_kueue or job.kueue_queue is None:
            return None
        workloads: list[dict[str, Any]] | None
        try:
            workloads = self.custom.list_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={job.uid}"
            ).get("items") or []
        except ApiException as err:
            if err.status not in (403, 404):
                raise
            workloads = None
        try:
            queue = self.custom.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues",
                                                             job.kueue_queue)
        except ApiException as err:
            if err.status not in (403, 404):
                raise
            queue = None
        return kueue_hold(job.kueue_queue, workloads, cluster_queue_of(queue),
                          self._pending_workloads(namespace, job.kueue_queue))

    def _pending_workloads(self, namespace: str, local_queue: str) -> dict[str, Any] | None:
        """Kueue's visibility API's pending Workloads of a LocalQueue (their places), or None when
        the API server does not serve it (an aggregated API Kueue installs with its visibility
        server) or the user may not read it."""
        for version in KUEUE_VISIBILITY_VERSIONS:
            path = f"/apis/{KUEUE_VISIBILITY_GROUP}/{version}/namespaces/{namespace}/localqueues/{local_queue}" \
                   "/pendingworkloads"
            request = self.api_client.param_serialize(method="GET", resource_path=path, auth_settings=["BearerToken"],
                                                      header_params={"Accept": "application/json"})
            try:
                response = self.api_client.call_api(*request, _request_timeout=30)
                response.read()
            except ApiException as err:
                if err.status in (403, 404, 503):
                    continue
                raise
            if response.status in (403, 404, 503):  # not served (no APIService), or not the user's to read
                continue
            if not 200 <= response.status <= 299:
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            found = json.loads(response.data or b"null")
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
        containers = [c.name for c in pod.spec.containers]
        container = naming.TASK_CONTAINER if naming.TASK_CONTAINER in containers else containers[0]
        try:
            options: dict[str, Any] = {"timestamps": timestamps}
            if tail is not None:
                options["tail_lines"] = tail
            if since is not None:
                options["since_seconds"] = max(1, math.ceil(since))
            resp = self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace, container=container,
                                                     follow=follow, _preload_content=False, **options)
        except ApiException as err:
            raise LogsUnavailable(f"pod {pod.metadata.name}: {api_message(err)}") from None
        try:
            pending = b""
            for chunk in resp.stream(4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
            if pending:
                yield pending.decode(errors="replace")
        finally:
            resp.release_conn()
