"""The bench's one HTTP client to the API server: blocking JSON requests over pooled urllib3
connections, for the load generator, the observer, the fill and the cluster's setup.

It is cronoq's own blocking client (`cronoq.apiserver.sync`, as the client library and the worker
use it) from the bench's checkout, not from the revision `--source` measures (that one runs in the
replicas' processes only): the load sent and the observer that times it stay the same whichever
revision is measured. Its own User-Agent tells the audit log its requests from the operator's.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson
import urllib3

from cronoq.apiserver.config import from_kubeconfig
from cronoq.apiserver.errors import ApiError, Conflict, NotFound
from cronoq.apiserver.sync import MERGE_PATCH
from cronoq.apiserver.sync import Api as Http

__all__ = ["LOADGEN_AGENT", "OBSERVER_AGENT", "Api", "ApiError"]

LOADGEN_AGENT = "cronoq-bench/loadgen"
OBSERVER_AGENT = "cronoq-bench/observer"


class Api:
    """A pooled, thread-safe client speaking JSON to one API server; no retries of its own (a
    create retries what an overloaded server says to retry, on the bench's schedule)."""

    def __init__(self, kubeconfig: str | Path, user_agent: str = LOADGEN_AGENT, pool_size: int = 32) -> None:
        self.http = Http(from_kubeconfig(str(kubeconfig)), user_agent=user_agent, retries=False, pool_size=pool_size,
                         block=True)

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0) -> dict[str, Any]:
        return self.http.request(method, path, body=body, timeout=timeout)

    def patch(self, path: str, body: Any) -> dict[str, Any]:
        """A JSON merge patch."""
        return self.http.request("PATCH", path, body=body, content_type=MERGE_PATCH, timeout=30.0)

    def create(self, path: str, body: Any, *, attempts: int = 5) -> dict[str, Any]:
        """POST, retrying what an overloaded API server says to retry (429, 5xx)."""
        for attempt in range(attempts):
            try:
                return self.request("POST", path, body)
            except ApiError as err:
                if err.status not in (429, 500, 503, 504) or attempt == attempts - 1:
                    raise
            except urllib3.exceptions.HTTPError:
                if attempt == attempts - 1:
                    raise
            time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def ensure(self, path: str, body: Any) -> None:
        """POST, an object already there (409) being as good."""
        try:
            self.request("POST", path, body)
        except Conflict:
            pass

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", path)
        except NotFound:
            return None

    def delete(self, path: str) -> None:
        try:
            self.request("DELETE", path, {"propagationPolicy": "Background"})
        except NotFound:
            pass

    def count(self, path: str) -> int:
        """How many objects a collection holds: one item plus the server's remainingItemCount."""
        listing = self.request("GET", f"{path}{'&' if '?' in path else '?'}limit=1")
        return len(listing.get("items", [])) + int(listing["metadata"].get("remainingItemCount") or 0)

    def watch(self, path: str, resource_version: str,
              on_connected: Callable[[], Any] | None = None) -> Iterator[dict[str, Any]]:
        """Watch events (type, object) from a resourceVersion, ERROR events too; ends when the server
        closes the stream. `on_connected()` is called once the server has answered, before any event."""
        sep = "&" if "?" in path else "?"
        url = f"{path}{sep}watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion={resource_version}"
        with self.http.streaming(url, timeout=(10, None)) as resp:
            if on_connected is not None:
                on_connected()
            buffer = b""
            for chunk in resp.stream(65536):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line:
                        yield orjson.loads(line)


# The collections the bench reads and writes, by namespace: `tasks_path(ns)`.
tasks_path = "/apis/cronoq.io/v1alpha1/namespaces/{}/tasks".format
pools_path = "/apis/cronoq.io/v1alpha1/namespaces/{}/taskpools".format
jobs_path = "/apis/batch/v1/namespaces/{}/jobs".format
pods_path = "/api/v1/namespaces/{}/pods".format
leases_path = "/apis/coordination.k8s.io/v1/namespaces/{}/leases".format
workflows_path = "/apis/argoproj.io/v1alpha1/namespaces/{}/workflows".format
