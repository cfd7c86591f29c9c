"""Where the API server is and how to authenticate (cronoq.apiserver.config): a kubeconfig read
into a Connection, its context's namespace, and the bearer token both transports send."""
from __future__ import annotations

import asyncio
import http.server
import threading
from pathlib import Path

import pytest
import yaml

from cronoq.apiserver import config
from cronoq.apiserver.aio import ApiSession, timeout
from cronoq.apiserver.sync import Api


class Echo(http.server.ThreadingHTTPServer):
    """Answers every GET with {} and keeps the headers it was sent."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        super().__init__(("127.0.0.1", 0), _Echo)


class _Echo(http.server.BaseHTTPRequestHandler):
    server: Echo

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.seen.append(dict(self.headers))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


def kubeconfig(tmp_path: Path, host: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "c", "cluster": {"server": host}}],
        "users": [{"name": "u", "user": {"token": "s3cret"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "jobs"}},
                     {"name": "other", "context": {"cluster": "c", "user": "u"}}]}))
    return path


@pytest.fixture
def echo():
    srv = Echo()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_a_kubeconfig_gives_the_host_the_token_and_its_contexts_namespace(tmp_path, echo) -> None:
    host = f"http://127.0.0.1:{echo.server_address[1]}"
    path = kubeconfig(tmp_path, host)
    conn = config.from_kubeconfig(str(path))
    assert (conn.host, conn.token()) == (host, "Bearer s3cret")
    assert config.context_namespace(str(path)) == "jobs"
    assert config.context_namespace(str(path), "other") is None
    assert config.context_namespace(str(tmp_path / "none")) is None

    Api(conn).request("GET", "/api")

    async def aio() -> None:
        session = ApiSession(conn)
        await session.request("GET", "/api", timeout(total=5))
        await session.close()
    asyncio.run(aio())
    assert [(h["Authorization"], h["User-Agent"]) for h in echo.seen] == [("Bearer s3cret", config.USER_AGENT)] * 2


def test_no_kubeconfig_and_no_pod_is_a_config_error(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(config.ConfigError):
        config.from_kubeconfig(str(tmp_path / "none"))
    with pytest.raises(config.ConfigError):
        config.in_cluster()
