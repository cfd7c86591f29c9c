"""A real Jaeger v2 (built from hack/jaeger, run with hack/jaeger/config.yaml) receiving OTLP over
HTTP on loopback and answering its query API: the tracing test sends the operator's spans to it
and reads back what it stored. Its ports are shifted by CRONOQ_PORT_OFFSET like the cluster's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "hack" / "jaeger" / "config.yaml"
_OFFSET = int(os.environ.get("CRONOQ_PORT_OFFSET", "0"))
OTLP_PORT, QUERY_PORT, QUERY_GRPC_PORT = 24318 + _OFFSET, 26686 + _OFFSET, 26685 + _OFFSET


def binary() -> Path:
    """The cached Jaeger binary (built once, like the cluster's binaries)."""
    sys.path.insert(0, str(REPO / "hack"))
    import devcluster

    component = devcluster.Component("jaeger")
    component.build()
    return component.cache_dir / "jaeger"


class Jaeger:
    def __init__(self, workdir: Path) -> None:
        self.log = workdir / "jaeger.log"
        self.otlp = f"http://127.0.0.1:{OTLP_PORT}"
        self.query = f"http://127.0.0.1:{QUERY_PORT}"
        env = {**os.environ, "JAEGER_OTLP_PORT": str(OTLP_PORT), "JAEGER_QUERY_PORT": str(QUERY_PORT),
               "JAEGER_QUERY_GRPC_PORT": str(QUERY_GRPC_PORT)}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen([str(binary()), f"--config={CONFIG}"], env=env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_until(self.ready, timeout=60, what=f"Jaeger's query API (log: {self.log})")
        except BaseException:
            self.stop()
            raise

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"Jaeger exited:\n{self.log.read_text()}")
        try:
            with urllib.request.urlopen(f"{self.query}/api/services", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The trace as Jaeger stored it (its query API's JSON), None while it has none."""
        try:
            with urllib.request.urlopen(f"{self.query}/api/traces/{trace_id}", timeout=10) as answer:
                data = json.load(answer)["data"]
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise
        return data[0] if data else None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
