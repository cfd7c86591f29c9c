"""The bench's one HTTP client to the API server: blocking JSON requests over a pooled urllib3
connection, for the load generator, the observer, the fill and the cluster's setup.

It is not the operator's HTTP stack (`cronoq.kube.session`) because that comes from the revision
`--source` measures, and the load sent and the observer that times it must stay the same whichever
revision is measured. Credentials are read by the kubernetes client's kubeconfig loader, as the
operator reads them; its own User-Agent tells the audit log its requests from the operator's.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import urllib3
from kubernetes import client, config

LOADGEN_AGENT = "cronoq-bench/loadgen"
OBSERVER_AGENT = "cronoq-bench/observer"


class ApiError(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    """A pooled, thread-safe HTTPS client speaking JSON to one API server."""

    def __init__(self, kubeconfig: str | Path, user_agent: str = LOADGEN_AGENT, pool_size: int = 32) -> None:
        conf = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=conf)
        url = urlparse(conf.host)
        headers = {"User-Agent": user_agent, "Accept": "application/json", "Content-Type": "application/json"}
        token = conf.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers["Authorization"] = token
        self.pool = urllib3.HTTPSConnectionPool(url.hostname, url.port or 443, ca_certs=conf.ssl_ca_cert,
                                                cert_file=conf.cert_file, key_file=conf.key_file, maxsize=pool_size,
                                                block=True, headers=headers, retries=False)

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0) -> dict[str, Any]:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        resp = self.pool.urlopen(method, path, body=data, timeout=timeout)
        if resp.status >= 300:
            raise ApiError(resp.status, resp.data.decode(errors="replace"))
        return json.loads(resp.data) if resp.data else {}

    def patch(self, path: str, body: Any) -> dict[str, Any]:
        """A JSON merge patch."""
        resp = self.pool.urlopen("PATCH", path, body=json.dumps(body).encode(), timeout=30.0,
                                 headers={**self.pool.headers, "Content-Type": "application/merge-patch+json"})
        if resp.status >= 300:
            raise ApiError(resp.status, resp.data.decode(errors="replace"))
        return json.loads(resp.data) if resp.data else {}

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
        except ApiError as err:
            if err.status != 409:
                raise

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def delete(self, path: str) -> None:
        try:
            self.request("DELETE", path, {"propagationPolicy": "Background"})
        except ApiError as err:
            if err.status != 404:
                raise

    def count(self, path: str) -> int:
        """How many objects a collection holds: one item plus the server's remainingItemCount."""
        listing = self.request("GET", f"{path}{'&' if '?' in path else '?'}limit=1")
        return len(listing.get("items", [])) + int(listing["metadata"].get("remainingItemCount") or 0)

    def watch(self, path: str, resource_version: str, on_connected=None) -> Iterator[dict[str, Any]]:
        """Watch events (type, object) from a resourceVersion; ends when the server closes the stream.
        `on_connected()` is called once the server has answered, before any event."""
        sep = "&" if "?" in path else "?"
        url = f"{path}{sep}watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion={resource_version}"
        resp = self.pool.urlopen("GET", url, preload_content=False, timeout=urllib3.Timeout(connect=10, read=None))
        if resp.status != 200:
            raise ApiError(resp.status, resp.read().decode(errors="replace"))
        if on_connected is not None:
            on_connected()
        buffer = b""
        try:
            for chunk in resp.stream(65536):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line:
                        yield json.loads(line)
        finally:
            resp.release_conn()


def tasks_path(namespace: str) -> str:
    return f"/apis/cronoq.io/v1alpha1/namespaces/{namespace}/tasks"


def pools_path(namespace: str) -> str:
    return f"/apis/cronoq.io/v1alpha1/namespaces/{namespace}/taskpools"


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def leases_path(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def workflows_path(namespace: str) -> str:
    return f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows"
