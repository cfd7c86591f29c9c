"""One operator replica as the bench runs it: `python -m cronoq operator` on the bench cluster,
under its own ServiceAccount identity (so the audit log attributes its requests), from a snapshot
of the committed source (so a colleague's half-saved edit is not what we measure). The kopf A/B
runs the same operator through another module (`bench/kopf_watch.py`), with the same flags.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.procstat import Running

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Replica(Running):
    kubeconfig: str
    namespaces: tuple[str, ...]
    log_path: Path
    source: str | None = None
    """A directory holding the `cronoq` package to run (put first on PYTHONPATH); None: as installed."""
    extra_args: tuple[str, ...] = ()
    pod_name: str = "cronoq-bench-0"
    module: str = "cronoq"
    """What `python -m` runs: cronoq, or bench.kopf_watch (cronoq with kopf's watches)."""
    env: dict[str, str] = field(default_factory=dict)
    """The operator's environment beside the bench's, e.g. OTEL_EXPORTER_OTLP_ENDPOINT."""
    metrics_port: int = field(default_factory=free_port)
    probe_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    def start(self, wait_ready: bool = True, timeout: float = 120) -> Replica:
        argv = [sys.executable, "-m", self.module, "operator", f"--metrics-port={self.metrics_port}",
                f"--probe-port={self.probe_port}", "--log-level=warning", *self.extra_args]
        argv += [f"--namespace={ns}" for ns in self.namespaces]
        self.launch(argv, {"KUBECONFIG": self.kubeconfig, "CRONOQ_KUBECONFIG": None, "POD_NAME": self.pod_name, **self.env,
                           "PYTHONPATH": os.pathsep.join(p for p in (self.source, str(REPO)) if p)})
        self.wait(self.ready if wait_ready else self.serving, timeout, "/readyz" if wait_ready else "/metrics")
        return self

    def wait(self, check, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"the operator exited while waiting for {what}; see {self.log_path}:\n{self.tail()}")
            if check():
                return
            time.sleep(0.1)
        raise TimeoutError(f"the operator's {what} did not answer in {timeout:.0f}s; see {self.log_path}")

    def _get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, ""
        except OSError:
            return 0, ""

    def ready(self) -> bool:
        return self._get(self.probe_port, "/readyz")[0] == 200

    def serving(self) -> bool:
        return self._get(self.metrics_port, "/metrics")[0] == 200

    def metric(self, name: str) -> float | None:
        """The value of an unlabelled sample (or the sum over labels) in /metrics; None if absent."""
        status, text = self._get(self.metrics_port, "/metrics")
        if status != 200:
            return None
        total = None
        for line in text.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
        return total

    def leading(self) -> bool:
        return (self.metric("cronoq_leader") or 0.0) >= 1.0
