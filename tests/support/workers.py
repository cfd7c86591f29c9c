"""Pull workers for the tests as real processes (tests/support/pull_worker.py), and the Tasks they
serve: what tests/integration/test_pull_workers.py and the fault suite's throttled fleet share."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kubernetes import client

from tests.support.waiting import wait_until

GROUP, VERSION = "cronoq.io", "v1alpha1"
ROOT = Path(__file__).resolve().parents[2]


class Workers:
    """Worker processes of one test, stopped (SIGKILL) at its end."""

    def __init__(self, namespace: str, kubeconfig: str, tmp: Path) -> None:
        self.namespace, self.kubeconfig, self.tmp = namespace, kubeconfig, tmp
        self.journal = tmp / "journal.jsonl"
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, pool: str = "default", concurrency: int = 4, ttl: float = 3.0,
              kubeconfig: str | None = None, grace: float = 30.0, env: dict[str, str] | None = None) -> subprocess.Popen:
        env = {**os.environ, "KUBECONFIG": kubeconfig or self.kubeconfig, "CRONOQ_NAMESPACE": self.namespace,
               "PYTHONPATH": f"{ROOT}:{ROOT / 'operator'}", **(env or {})}
        log = open(self.tmp / f"{name}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "tests.support.pull_worker", pool, name, str(self.journal),
                                 str(concurrency), str(ttl), str(grace)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def lines(self) -> list[dict]:
        if not self.journal.exists():
            return []
        return [json.loads(line) for line in self.journal.read_text().splitlines() if line.strip()]

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def served_task(cq, name: str, payload: dict | None = None, pool: str = "default", **spec) -> dict:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name, "labels": spec.pop("labels", {})},
            "spec": {"pool": pool, "payload": payload or {}, **spec}}
    return cq.custom.create_namespaced_custom_object(GROUP, VERSION, cq.namespace, "tasks", body)


def wait_worker(api, namespace: str, name: str) -> None:
    leases = client.CoordinationV1Api(api)
    wait_until(lambda: any(lease.metadata.name == name for lease in leases.list_namespaced_lease(
        namespace, label_selector="cronoq.io/worker-pool").items), timeout=30, what=f"worker {name}'s Lease")
