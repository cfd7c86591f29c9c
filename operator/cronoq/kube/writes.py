"""Every write cronoq makes to the API server, in one place (so they can be counted and kept few).

Writes are made on the event loop through the operator's one HTTP stack (apiserver/aio.py: aiohttp,
with the kubeconfig's or the ServiceAccount's host, TLS and token). Not through the kubernetes
client: its generated methods validate every argument with pydantic, walk the body to serialize it
and build typed models of the answer (a fifth of a write's CPU), and being synchronous it needs a
thread per request, whose hand-offs of the GIL cost more than the request itself (docs/development/benchmarks.md,
"Figures behind the code"). Bodies and answers go through orjson, as watch events do. At most
CONNECTIONS writes are in flight at once; the others wait their turn (the session's pool itself is
unbounded, so watches and the leader Lease never wait behind writes). What the API server refused
arrives as apiserver/errors.py's types; the controller sees Conflict, and Rejected for an object
refused as invalid or forbidden.
"""
from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from cronoq.api import GROUP, VERSION
from cronoq.apiserver.aio import JSON, ApiSession, timeout
from cronoq.apiserver.errors import ApiError, Conflict, Forbidden, NotFound, Refused
from cronoq.engine.plan import Event

log = logging.getLogger(__name__)

TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds for every request: an API server that accepts connections but cannot
answer (its etcd away) fails the request in time, to be retried, instead of holding a worker."""
LIMITS = timeout(connect=TIMEOUT[0], read=TIMEOUT[1])
CONNECTIONS = 32
"""Most writes in flight at once."""
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


KUEUE_WORKLOADS = "kueue.x-k8s.io/v1beta2"
"""The Workload API cronoq reads (Kueue v0.15 and newer serve v1beta2)."""


class NotLeader(Exception):
    """This replica's leadership lapsed: it must not write anything."""


class Rejected(Exception):
    """The API server refused the object as invalid (422) or forbidden (403)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

    @classmethod
    def of(cls, err: Refused | Forbidden) -> Rejected:
        """The refusal, in the API server's own words (its Status message, else the HTTP reason)."""
        return cls(err.status, err.message)


def custom_objects(namespace: str, plural: str = "tasks") -> str:
    """Path of cronoq's objects of one kind in a namespace."""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"


def _jobs(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


@dataclass
class Writer:
    http: ApiSession
    component: str = "cronoq"
    instance: str = ""
    guard: Callable[[], bool] = field(default=lambda: True)
    """Asked right before every write: False once leadership lapsed (then NotLeader is raised)."""
    _slots: asyncio.Semaphore | None = field(default=None, repr=False)

    def check(self) -> None:
        if not self.guard():
            log.error("refusing to write: this replica's leadership lapsed")
            raise NotLeader()

    async def request(self, method: str, path: str, body: dict[str, Any] | list[Any] | None = None,
                      content_type: str = JSON) -> dict[str, Any]:
        """One request, its JSON answer as a dict; a non-2xx answer raises its apiserver error."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(CONNECTIONS)
        async with self._slots:
            return await self.http.request(method, path, LIMITS, body, content_type)

    async def create_job(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """Create the attempt's Job and return it as stored; when it already exists (ours: same
        deterministic name), return the existing one, or None if it is gone again."""
        self.check()
        namespace = job["metadata"]["namespace"]
        try:
            return await self.request("POST", _jobs(namespace), job)
        except Conflict:
            return await self._read_job(namespace, job["metadata"]["name"])
        except (Forbidden, Refused) as err:
            raise Rejected.of(err) from None

    async def _read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._read(f"{_jobs(namespace)}/{name}")

    async def _read(self, path: str) -> dict[str, Any] | None:
        """The object at `path`, or None when it is gone."""
        try:
            return await self.request("GET", path)
        except NotFound:
            return None

    async def replace_task_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return await self.replace_status("tasks", raw, status)

    async def replace_pool_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return await self.replace_status("taskpools", raw, status)

    async def replace_status(self, plural: str, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """PUT the status subresource with the stored resourceVersion as precondition: a change
        since we read the object raises Conflict; a CEL refusal (e.g. an older epoch) Rejected."""
        self.check()
        meta = raw["metadata"]
        body = {"apiVersion": raw["apiVersion"], "kind": raw["kind"], "metadata": meta,
                "spec": raw.get("spec", {}), "status": status}
        try:
            return await self.request("PUT", f"{custom_objects(meta['namespace'], plural)}/{meta['name']}/status", body)
        except (Forbidden, Refused) as err:
            raise Rejected.of(err) from None

    async def read_task(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._read(f"{custom_objects(namespace)}/{name}")

    async def read_schedule(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._read(f"{custom_objects(namespace, 'taskschedules')}/{name}")

    async def replace_schedule_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return await self.replace_status("taskschedules", raw, status)

    async def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        """One key of a Secret, decoded (a notification's signing key); None when the Secret or
        the key is not there. Forbidden (no right to read Secrets) is raised."""
        try:
            secret = await self.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        except NotFound:
            return None
        value = (secret.get("data") or {}).get(key)
        try:
            return base64.b64decode(value, validate=True) if isinstance(value, str) else None
        except ValueError:
            return None

    async def read_workloads(self, namespace: str, job_uid: str) -> list[dict[str, Any]] | None:
        """Kueue's Workloads of the Job of this uid (Kueue labels each with its Job's uid); None when
        they cannot be read (Kueue not installed, or the operator not allowed to)."""
        try:
            found = await self.request("GET", f"/apis/{KUEUE_WORKLOADS}/namespaces/{namespace}/workloads"
                                              f"?labelSelector=kueue.x-k8s.io/job-uid={job_uid}")
        except (Forbidden, NotFound):
            return None
        items = found.get("items")
        return items if isinstance(items, list) else []

    async def read_local_queue(self, namespace: str, name: str) -> tuple[str, dict[str, Any] | None]:
        """Kueue's LocalQueue: ("found", it), ("missing", None), ("no-kueue", None) when the API
        server serves no Kueue API, or ("forbidden", None) when the operator may not read it."""
        try:
            return "found", await self.request("GET", f"/apis/{KUEUE_WORKLOADS}/namespaces/{namespace}/localqueues/{name}")
        except Forbidden:
            return "forbidden", None
        except NotFound:
            pass
        try:
            await self.request("GET", f"/apis/{KUEUE_WORKLOADS}")
        except NotFound:
            return "no-kueue", None
        return "missing", None

    async def delete_task(self, namespace: str, name: str, uid: str) -> None:
        """Delete a finished task, only if it is still the one with this uid (not a new task that
        took its name). Its Jobs, pods and Leases go with it (owner references)."""
        self.check()
        try:
            await self.request("DELETE", f"{custom_objects(namespace)}/{name}",
                               {"propagationPolicy": "Background", "preconditions": {"uid": uid}})
        except (NotFound, Conflict):  # gone already, or the name now holds another task
            pass

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        """Abort an attempt: the Job `name`, only while it is still the one with this `uid` (the one
        the decision saw, never another that took its name). Foreground: the Job stays (with a
        deletionTimestamp) until its pod is gone, so the attempt's pool slot stays taken while its
        container may still run."""
        self.check()
        try:
            await self.request("DELETE", f"{_jobs(namespace)}/{name}",
                               {"propagationPolicy": "Foreground", "preconditions": {"uid": uid}})
        except (NotFound, Conflict):  # gone already, or the name now holds another Job
            pass

    async def retime_job(self, namespace: str, name: str, uid: str, seconds: int) -> dict[str, Any] | None:
        """Set a Job's ttlSecondsAfterFinished, only while it is the one with this `uid` (a JSON
        patch whose first operation tests the uid; nothing read first): the TTL controller then
        deletes it (and its pod) that long after it finished, at once if that has passed. Returns
        the Job as stored, or None when it is gone (or its name holds another Job)."""
        self.check()
        patch = [{"op": "test", "path": "/metadata/uid", "value": uid},
                 {"op": "add", "path": "/spec/ttlSecondsAfterFinished", "value": seconds}]
        try:
            return await self.request("PATCH", f"{_jobs(namespace)}/{name}", patch, JSON_PATCH)
        except (NotFound, Conflict, Refused):  # Refused: the uid test failed, another Job has the name
            return None

    async def post_event(self, raw: dict[str, Any], event: Event, now: datetime) -> None:
        self.check()
        meta = raw["metadata"]
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": raw["apiVersion"], "kind": raw["kind"], "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "reason": event.reason, "message": event.message[:1024],
            "type": "Warning" if event.warning else "Normal",
            "source": {"component": self.component},
            "reportingComponent": self.component, "reportingInstance": self.instance or self.component,
            "firstTimestamp": now.isoformat(), "lastTimestamp": now.isoformat(), "count": 1,
        }
        try:
            await self.request("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body)
        except ApiError as err:  # an Event is worth a log line, never a failed reconcile
            log.warning("could not post event %s on task %s/%s: %s", event.reason, meta["namespace"], meta["name"],
                        err.message)
