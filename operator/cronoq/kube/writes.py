"""Every write cronoq makes to the API server, in one place (so they can be counted and kept few).

The kubernetes client is synchronous; the controller calls these through a thread pool.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.rest import ApiException

from cronoq.api import GROUP, VERSION
from cronoq.engine.plan import Event

log = logging.getLogger(__name__)

TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds for every request: an API server that accepts connections but cannot
answer (its etcd away) fails the request in time, to be retried, instead of holding a worker."""


class NotLeader(Exception):
    """This replica's leadership lapsed: it must not write anything."""


class Conflict(Exception):
    """The object changed since we read it: re-read and decide again."""


class Rejected(Exception):
    """The API server refused the object as invalid (422) or forbidden (403)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def api_message(err: ApiException) -> str:
    """The API server's own message of a refusal (its Status body), else the HTTP reason."""
    import json
    try:
        return json.loads(err.body).get("message", err.reason)
    except (ValueError, TypeError, AttributeError):
        return str(err.reason)


@dataclass
class Writer:
    api: client.ApiClient
    component: str = "cronoq"
    instance: str = ""
    guard: Callable[[], bool] = field(default=lambda: True)
    """Asked right before every write: False once leadership lapsed (then NotLeader is raised)."""

    def check(self) -> None:
        if not self.guard():
            log.error("refusing to write: this replica's leadership lapsed")
            raise NotLeader()

    def __post_init__(self) -> None:
        self.custom = client.CustomObjectsApi(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.core = client.CoreV1Api(self.api)
        self.coordination = client.CoordinationV1Api(self.api)

    def replace_task_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return self.replace_status("tasks", raw, status)

    def replace_pool_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return self.replace_status("taskpools", raw, status)

    def replace_status(self, plural: str, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """PUT the status subresource with the stored resourceVersion as precondition: a change
        since we read the object raises Conflict; a CEL refusal (e.g. an older epoch) Rejected."""
        self.check()
        meta = raw["metadata"]
        body = {"apiVersion": raw["apiVersion"], "kind": raw["kind"], "metadata": meta,
                "spec": raw.get("spec", {}), "status": status}
        try:
            return self.custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], plural, meta["name"], body, _request_timeout=TIMEOUT)
        except ApiException as err:
            if err.status == 409:
                raise Conflict(api_message(err)) from None
            if err.status in (403, 422):
                raise Rejected(err.status, api_message(err)) from None
            raise

    def read_task(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", name,
                                                            _request_timeout=TIMEOUT)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def create_job(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """Create the attempt's Job and return it as stored; when it already exists (ours: same
        deterministic name), return the existing one, or None if it is gone again."""
        self.check()
        namespace = job["metadata"]["namespace"]
        try:
            return self._raw(self.batch.create_namespaced_job(namespace, job, _preload_content=False,
                                                                      _request_timeout=TIMEOUT))
        except ApiException as err:
            if err.status == 409:
                return self._read_job(namespace, job["metadata"]["name"])
            if err.status in (403, 422):
                raise Rejected(err.status, api_message(err)) from None
            raise

    def _read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._raw(self.batch.read_namespaced_job(name, namespace, _preload_content=False,
                                                                    _request_timeout=TIMEOUT))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    @staticmethod
    def _raw(response: Any) -> dict[str, Any]:
        import json
        return json.loads(response.data)

    def delete_task(self, namespace: str, name: str, uid: str) -> None:
        """Delete a finished task, only if it is still the one with this uid (not a new task that
        took its name). Its Jobs, pods and Leases go with it (owner references)."""
        self.check()
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, "tasks", name, propagation_policy="Background", _request_timeout=TIMEOUT,
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)))
        except ApiException as err:
            if err.status not in (404, 409):  # gone already, or the name now holds another task
                raise

    def delete_job(self, namespace: str, name: str) -> None:
        """Abort an attempt. Foreground: the Job stays (with a deletionTimestamp) until its pod is
        gone, so the attempt's pool slot stays taken while its container may still run."""
        self.check()
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Foreground", _request_timeout=TIMEOUT)
        except ApiException as err:
            if err.status != 404:
                raise

    def post_event(self, raw: dict[str, Any], event: Event, now: datetime) -> None:
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
            self.core.create_namespaced_event(meta["namespace"], body, _request_timeout=TIMEOUT)
        except ApiException as err:  # an Event is worth a log line, never a failed reconcile
            log.warning("could not post event %s on task %s/%s: %s", event.reason, meta["namespace"], meta["name"],
                        api_message(err))
