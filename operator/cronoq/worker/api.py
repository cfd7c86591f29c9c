"""The requests a pull worker and an attempt's heartbeat make, by their Kubernetes names: Leases, and
the pool's Tasks and TaskPool. A thin layer over cronoq's one blocking client (`apiserver/sync.py`:
plain JSON over urllib3, no retries of its own — the worker retries on its own schedule); answers
are dicts, refusals the seam's errors (`NotFound`, `Conflict`, `Refused`, `Throttled` with its
Retry-After).

The names are those of the generated kubernetes client the worker once called (its fakes in the
tests call the same); the generated client's own work per call was most of a worker's CPU per task
(docs/development/benchmarks.md, "Figures behind the code").
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from cronoq.apiserver.sync import JSON_PATCH, STRATEGIC_MERGE_PATCH, Api, Timeout
from cronoq.worker import metrics

if TYPE_CHECKING:
    from cronoq.apiserver.config import Connection


class WorkerApi:
    """Leases and the pool's Tasks and TaskPool, for one worker (thread-safe: urllib3's pool is)."""

    def __init__(self, connection: Connection, clock: Callable[[], float] = time.monotonic) -> None:
        self.http = Api(connection, retries=False, clock=clock)

    def _request(self, method: str, path: str, params: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        """One request; a failure is counted (`cronoq_worker_api_errors_total`) and raised."""
        try:
            return self.http.request(method, path, params, **kwargs)
        except Exception as err:
            metrics.api_error(err)
            raise

    # ------------------------------------------------------------------ Leases

    @staticmethod
    def _leases(namespace: str) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace)}/leases"

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any],
                                _request_timeout: Timeout = None) -> dict[str, Any]:
        return self._request("POST", self._leases(namespace), body=body, timeout=_request_timeout)

    def patch_namespaced_lease(self, name: str, namespace: str, body: Any, _content_type: str | None = None,
                               _request_timeout: Timeout = None) -> dict[str, Any]:
        """A JSON patch for a list of operations, else a strategic merge patch (as the generated client)."""
        content_type = _content_type or (JSON_PATCH if isinstance(body, list) else STRATEGIC_MERGE_PATCH)
        if content_type == JSON_PATCH and not isinstance(body, list):
            content_type = STRATEGIC_MERGE_PATCH
        return self._request("PATCH", f"{self._leases(namespace)}/{quote(name)}", body=body,
                                 content_type=content_type, timeout=_request_timeout)

    def delete_namespaced_lease(self, name: str, namespace: str, _request_timeout: Timeout = None) -> dict[str, Any]:
        return self._request("DELETE", f"{self._leases(namespace)}/{quote(name)}", timeout=_request_timeout)

    # ------------------------------------------------------------------ cronoq's objects

    @staticmethod
    def _custom(group: str, version: str, namespace: str, plural: str) -> str:
        return f"/apis/{group}/{version}/namespaces/{quote(namespace)}/{plural}"

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     _request_timeout: Timeout = None) -> dict[str, Any]:
        return self._request("GET", f"{self._custom(group, version, namespace, plural)}/{quote(name)}",
                                 timeout=_request_timeout)

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, *,
                                      field_selector: str | None = None,
                                      _request_timeout: Timeout = None) -> dict[str, Any]:
        return self._request("GET", self._custom(group, version, namespace, plural),
                                 {"fieldSelector": field_selector}, timeout=_request_timeout)

    def watch_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, *,
                                       field_selector: str | None, resource_version: str, timeout_seconds: int,
                                       _request_timeout: Timeout = None) -> Iterator[dict[str, Any]]:
        """The watch's events ({type, object}), parsed with orjson, until the server ends it. An
        ERROR event (e.g. 410, the version is gone) raises its error."""
        events = self.http.watch(self._custom(group, version, namespace, plural),
                                 {"fieldSelector": field_selector, "resourceVersion": resource_version,
                                  "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)},
                                 timeout=_request_timeout)
        try:
            yield from events
        except Exception as err:
            metrics.api_error(err)
            raise
