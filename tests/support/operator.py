"""The operator under test, as a real process (`python -m cronoq operator`) against the test
cluster: started, waited on until /readyz answers, killed and restarted by tests that need to."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.waiting import wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class OperatorProcess:
    kubeconfig: str
    namespaces: tuple[str, ...]
    log_path: Path
    extra_args: tuple[str, ...] = ()
    lease: tuple[str, str] | None = None
    """(namespace, name) of the leader Lease; default: a Lease of its own, in its first namespace."""
    pod_name: str = "cronoq-test"
    metrics_port: int = field(default_factory=free_port)
    probe_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    supervised: bool = False
    """Restart the process when it exits with code 3 (it lost leadership, e.g. the API server was
    away longer than its renew deadline), as a Deployment restarts the pod."""
    restarts: int = 0
    wrapper: tuple[str, ...] = ()
    """A command the operator runs under, e.g. ("faketime", "-f", "+30s")."""
    env: dict[str, str] = field(default_factory=dict)
    trust_worker_leases: bool = True
    """Serve Workers pools without the lease guard (the test cluster has none installed, but for
    the tests that install it or show what its absence does)."""
    _stopping: bool = False

    def start(self) -> OperatorProcess:
        self._stopping = False
        self._launch()
        wait_until(self.ready, timeout=60, what=f"the operator's /readyz (log: {self.log_path})")
        if self.supervised:
            threading.Thread(target=self._supervise, daemon=True).start()
        return self

    def _supervise(self) -> None:
        while not self._stopping:
            code = self.process.wait()
            if self._stopping or code != 3:
                return
            self.restarts += 1
            self._launch()

    def _launch(self) -> None:
        argv = [*self.wrapper, sys.executable, "-m", "cronoq", "operator", f"--metrics-port={self.metrics_port}",
                f"--probe-port={self.probe_port}", *self.extra_args,
                *(["--trust-worker-leases"] if self.trust_worker_leases else [])]
        for ns in self.namespaces:
            argv.append(f"--namespace={ns}")
        lease_ns, lease_name = self.lease or ("default" if "*" in self.namespaces[0] else self.namespaces[0],
                                              "cronoq-tests-" + self.namespaces[0].replace("*", "x"))
        argv += [f"--lease-namespace={lease_ns}", f"--lease-name={lease_name}"]
        env = {**os.environ, "KUBECONFIG": self.kubeconfig, "POD_NAME": self.pod_name, **self.env}
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def leading(self) -> bool:
        return self.metric("cronoq_leader") == 1.0

    def wait_leading(self, timeout: float = 60) -> None:
        wait_until(self.leading, timeout=timeout, what=f"{self.pod_name} to lead (log: {self.log_path})")

    def ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise AssertionError(f"the operator exited; see {self.log_path}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self._stopping = True
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def exposition(self) -> str:
        """/metrics as served, in Prometheus's text format."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def metrics(self) -> dict[tuple[str, tuple], float]:
        """Samples by (name, sorted labels)."""
        text = self.exposition()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics().get((name, tuple(sorted(labels.items()))), 0.0)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
