"""Toxiproxy (a TCP fault proxy) between an operator and the API server, driven through its HTTP
API with the standard library.

    with Toxiproxy.start(log_path) as toxi:
        proxy = toxi.proxy("apiserver", upstream="127.0.0.1:31443")
        operator_kubeconfig = through(kubeconfig, proxy, tmp_path / "proxied.kubeconfig")
        with proxy.toxic("timeout", stream="downstream", timeout=0):
            ...  # every answer the API server sends is dropped on the floor

TLS passes through untouched (the proxy sees bytes, not HTTP): the client still talks to
https://127.0.0.1:<port> and the API server's certificate is valid for 127.0.0.1. A toxic applies
to every connection of its proxy, those open when it is added and those opened while it is in
place; toxiproxy cannot single out one connection (its `toxicity` is a random draw per connection).

The binary is built from hack/toxiproxy/ (pinned go.mod + go.sum) by hack/devcluster.py, like the
control plane, and cached in ~/.cache/cronoq.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import yaml

from tests.support.cluster import load_devcluster
from tests.support.operator import free_port
from tests.support.waiting import wait_until


def binary() -> Path:
    """toxiproxy-server, built (or found in the cache) from hack/toxiproxy."""
    devcluster = load_devcluster()
    component = devcluster.Component("toxiproxy")
    component.build()
    return component.cache_dir / "toxiproxy-server"


@dataclass
class Toxiproxy:
    process: subprocess.Popen
    port: int

    @classmethod
    @contextlib.contextmanager
    def start(cls, log_path: Path) -> Iterator[Toxiproxy]:
        port = free_port()
        log = open(log_path, "ab")
        process = subprocess.Popen([str(binary()), "-host", "127.0.0.1", "-port", str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        toxi = cls(process, port)
        try:
            wait_until(toxi._up, timeout=20, what=f"toxiproxy's API on {port} (log: {log_path})")
            yield toxi
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()

    def _up(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"toxiproxy-server exited with {self.process.returncode}")
        try:
            self.request("GET", "/version")
            return True
        except OSError:
            return False

    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                text = resp.read()
        except urllib.error.HTTPError as err:
            raise AssertionError(f"toxiproxy {method} {path}: {err.code} {err.read()!r}") from err
        return json.loads(text) if text.strip().startswith((b"{", b"[")) else text

    def proxy(self, name: str, upstream: str) -> Proxy:
        """A proxy listening on a free loopback port, forwarding to `upstream` (host:port)."""
        listen = f"127.0.0.1:{free_port()}"
        self.request("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True})
        return Proxy(self, name, listen)


@dataclass
class Proxy:
    toxi: Toxiproxy
    name: str
    listen: str

    def add(self, kind: str, *, stream: str = "downstream", name: str | None = None, toxicity: float = 1.0,
            **attributes: Any) -> str:
        """Add a toxic (`latency`, `timeout`, `reset_peer`, `bandwidth`, `limit_data`, ...); its name."""
        name = name or f"{kind}-{stream}"
        self.toxi.request("POST", f"/proxies/{self.name}/toxics", {
            "name": name, "type": kind, "stream": stream, "toxicity": toxicity, "attributes": attributes})
        return name

    def remove(self, name: str) -> None:
        self.toxi.request("DELETE", f"/proxies/{self.name}/toxics/{name}")

    @contextlib.contextmanager
    def toxic(self, kind: str, **kw: Any) -> Iterator[str]:
        """The toxic in place for the `with` block."""
        name = self.add(kind, **kw)
        try:
            yield name
        finally:
            self.remove(name)

    def enabled(self, on: bool) -> None:
        """Disabling closes every connection at once and refuses new ones until enabled again."""
        self.toxi.request("POST", f"/proxies/{self.name}", {"enabled": on})

    def cut(self, seconds: float) -> None:
        """The network gone for a moment: every open connection closed, new ones refused."""
        self.enabled(False)
        time.sleep(seconds)
        self.enabled(True)


def server_of(kubeconfig: str | Path) -> str:
    """host:port of the API server the kubeconfig's current context names."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    url = urlsplit(cluster["server"])
    return f"{url.hostname}:{url.port or 443}"


def through(kubeconfig: str | Path, proxy: Proxy, out: Path) -> str:
    """A copy of the kubeconfig whose API server is the proxy's listen address (same CA, same
    credentials: TLS is end to end, and the serving certificate names 127.0.0.1)."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    for c in config["clusters"]:
        if c["name"] == context["cluster"]:
            c["cluster"]["server"] = f"https://{proxy.listen}"
    out.write_text(json.dumps(config, indent=2))
    out.chmod(0o600)
    return str(out)
