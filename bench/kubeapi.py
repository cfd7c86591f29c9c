"""Raw HTTPS to the API server, for the load generator and the observer.

The kubernetes Python client spends around a millisecond of CPU per call turning dicts into
models and back; on a 2-core machine that CPU would come out of what we measure. Prebuilt JSON
over a pooled urllib3 connection keeps the load generator cheap, and its own User-Agent lets
the audit log tell its requests from the operator's.
"""
from __future__ import annotations

import base64
import hashlib
import json
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import urllib3

LOADGEN_AGENT = "cronoq-bench/loadgen"
OBSERVER_AGENT = "cronoq-bench/observer"


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_file: str
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None

    @classmethod
    def from_kubeconfig(cls, path: str | Path) -> Credentials:
        """The current context's cluster and user; embedded data is written to private temp files."""
        config = json.loads(Path(path).read_text()) if str(path).endswith(".json") else _yaml(path)
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])

        def file_of(data_key: str, file_key: str, where: dict) -> str | None:
            if where.get(file_key):
                return where[file_key]
            if not where.get(data_key):
                return None
            data = base64.b64decode(where[data_key])
            # One file per distinct credential, so repeated loads (one per observer) do not pile up.
            path = Path(tempfile.gettempdir()) / f"cronoq-bench-{hashlib.sha256(data).hexdigest()[:16]}.pem"
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                tmp.touch(mode=0o600)
                tmp.write_bytes(data)
                tmp.replace(path)
            return str(path)

        return cls(server=cluster["server"],
                   ca_file=file_of("certificate-authority-data", "certificate-authority", cluster),
                   cert_file=file_of("client-certificate-data", "client-certificate", user),
                   key_file=file_of("client-key-data", "client-key", user), token=user.get("token"))


def _yaml(path: str | Path) -> dict:
    text = Path(path).read_text()
    try:
        return json.loads(text)  # devcluster writes JSON, which is YAML
    except ValueError:
        import yaml
        return yaml.safe_load(text)


class ApiError(Exception):
    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    """A pooled, thread-safe HTTPS client speaking JSON to one API server."""

    def __init__(self, creds: Credentials, user_agent: str = LOADGEN_AGENT, pool_size: int = 32) -> None:
        ctx = ssl.create_default_context(cafile=creds.ca_file)
        if creds.cert_file:
            ctx.load_cert_chain(creds.cert_file, creds.key_file)
        url = urlparse(creds.server)
        headers = {"User-Agent": user_agent, "Accept": "application/json", "Content-Type": "application/json"}
        if creds.token:
            headers["Authorization"] = f"Bearer {creds.token}"
        self.pool = urllib3.HTTPSConnectionPool(url.hostname, url.port or 443, ssl_context=ctx, maxsize=pool_size,
                                                block=True, headers=headers, retries=False)

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0) -> dict[str, Any]:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        resp = self.pool.urlopen(method, path, body=data, timeout=timeout)
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


def workflows_path(namespace: str) -> str:
    return f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows"
