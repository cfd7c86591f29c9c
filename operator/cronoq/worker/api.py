"""The pull worker's requests to the API server, as plain JSON over the kubernetes client's connection
pool (its urllib3 PoolManager, set up from the kubeconfig or the pod's ServiceAccount: TLS, proxy).

A worker makes few kinds of requests, but one per attempt at least (its report) and an event or two
per attempt on its watch. Through the generated client each call validated its arguments with
pydantic, walked the body to serialise it, re-ran the credentials' refresh hook and built a typed
model of the answer that nobody read; its watch parsed every event with the standard library's
json. That was most of a worker's CPU per task (docs/development/benchmarks.md, "Figures behind the code"). The
methods keep the generated client's names and arguments, so the worker (and its tests' fakes)
call either the same way; answers are dicts, errors the client's ApiException (status, reason,
body, headers: Retry-After).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import urllib3
from kubernetes.client.exceptions import ApiException

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
TOKEN_FRESH = 10.0
"""Seconds a bearer token is used before the configuration's refresh hook is asked again (it sets
the whole configuration again: too dear per request); at once after a 401."""


def _timeout(seconds: Any) -> urllib3.Timeout | None:
    if seconds is None:
        return None
    if isinstance(seconds, tuple):
        return urllib3.Timeout(connect=seconds[0], read=seconds[1])
    return urllib3.Timeout(total=seconds)


class WorkerApi:
    """Leases and the pool's Tasks and TaskPool, for one worker (thread-safe: urllib3's pool is)."""

    def __init__(self, api_client: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.configuration = api_client.configuration
        self.pool = api_client.rest_client.pool_manager
        self.user_agent = api_client.user_agent
        self._token: str | None = None
        self._token_read: float | None = None

    # ------------------------------------------------------------------ HTTP

    def _headers(self, content_type: str = JSON) -> dict[str, str]:
        now = self._clock()
        if self._token_read is None or now - self._token_read >= TOKEN_FRESH:
            self._token = self.configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
            self._token_read = now
        headers = {"Accept": JSON, "Content-Type": content_type, "User-Agent": self.user_agent}
        if self._token:
            headers["Authorization"] = self._token
        return headers

    def _open(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None, *,
              content_type: str = JSON, timeout: Any = None, stream: bool = False) -> urllib3.BaseHTTPResponse:
        url = self.configuration.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        response: urllib3.BaseHTTPResponse = self.pool.request(method, url, body=None if body is None else orjson.dumps(body),
                                     headers=self._headers(content_type), timeout=_timeout(timeout),
                                     preload_content=not stream, retries=False)
        if not 200 <= response.status <= 299:
            if response.status == 401:
                self._token_read = None  # the token may have rotated
            data = response.data if not stream else response.read()
            err = ApiException(status=response.status, reason=response.reason, body=data.decode("utf-8", "replace"))
            err.headers = dict(response.headers)  # Retry-After of a throttled request (429)
            raise err
        return response

    def request(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None, *,
                content_type: str = JSON, timeout: Any = None) -> dict[str, Any]:
        data = self._open(method, path, query, body, content_type=content_type, timeout=timeout).data
        return orjson.loads(data) if data else {}

    # ------------------------------------------------------------------ Leases

    @staticmethod
    def _leases(namespace: str) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace)}/leases"

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any], _request_timeout: Any = None) -> dict[str, Any]:
        return self.request("POST", self._leases(namespace), body=body, timeout=_request_timeout)

    def patch_namespaced_lease(self, name: str, namespace: str, body: Any, _content_type: str | None = None,
                               _request_timeout: Any = None) -> dict[str, Any]:
        """A JSON patch for a list of operations, else a strategic merge patch (as the generated client)."""
        content_type = _content_type or (JSON_PATCH if isinstance(body, list) else STRATEGIC_MERGE_PATCH)
        if content_type == JSON_PATCH and not isinstance(body, list):
            content_type = STRATEGIC_MERGE_PATCH
        return self.request("PATCH", f"{self._leases(namespace)}/{quote(name)}", body=body, content_type=content_type,
                            timeout=_request_timeout)

    def delete_namespaced_lease(self, name: str, namespace: str, _request_timeout: Any = None) -> dict[str, Any]:
        return self.request("DELETE", f"{self._leases(namespace)}/{quote(name)}", timeout=_request_timeout)

    # ------------------------------------------------------------------ cronoq's objects

    @staticmethod
    def _custom(group: str, version: str, namespace: str, plural: str) -> str:
        return f"/apis/{group}/{version}/namespaces/{quote(namespace)}/{plural}"

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     _request_timeout: Any = None) -> dict[str, Any]:
        return self.request("GET", f"{self._custom(group, version, namespace, plural)}/{quote(name)}",
                            timeout=_request_timeout)

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, *,
                                      field_selector: str | None = None, _request_timeout: Any = None) -> dict[str, Any]:
        return self.request("GET", self._custom(group, version, namespace, plural),
                            {"fieldSelector": field_selector}, timeout=_request_timeout)

    def watch_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, *,
                                       field_selector: str | None, resource_version: str, timeout_seconds: int,
                                       _request_timeout: Any = None) -> Iterator[dict[str, Any]]:
        """The watch's events ({type, object}), parsed with orjson, until the server ends it. An
        ERROR event (e.g. 410, the version is gone) raises ApiException with its code."""
        response = self._open("GET", self._custom(group, version, namespace, plural),
                              {"watch": "true", "fieldSelector": field_selector, "resourceVersion": resource_version,
                               "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)},
                              timeout=_request_timeout, stream=True)
        pending, ended = b"", False
        try:
            for chunk in response.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _event(line)
            if pending.strip():
                yield _event(pending)
            ended = True
        finally:
            if not ended:  # left before its end: the connection still carries the stream
                response.close()
            response.release_conn()


def _event(line: bytes) -> dict[str, Any]:
    event: dict[str, Any] = orjson.loads(line)
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise ApiException(status=int(status.get("code") or 500), reason=str(status.get("reason") or "watch error"),
                           body=str(status.get("message") or ""))
    return event
