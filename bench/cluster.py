"""The bench's own test cluster: started with hack/devcluster.py in a directory and on ports of
its own (so the shared cluster others test on is left alone), with the audit log on, the CRDs
installed, and an identity for the operator.

The operator needs its own identity because the load generator and kwok both use the admin
client certificate: the operator runs as ServiceAccount cronoq-bench-system/cronoq-bench
(bound to cluster-admin; the bench measures cost, not least privilege), with a token in a
kubeconfig of its own, and every audit event of that user is the operator's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from bench.kubeapi import Api
from bench.procstat import cpu_seconds, wait_until

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DIR = Path("/tmp/cronoq-bench")
DEFAULT_OFFSET = 3000
IDENTITY_NAMESPACE = "cronoq-bench-system"
IDENTITY = "cronoq-bench"
OPERATOR_USER = f"system:serviceaccount:{IDENTITY_NAMESPACE}:{IDENTITY}"
T = TypeVar("T")
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


@dataclass
class BenchCluster:
    directory: Path = DEFAULT_DIR
    port_offset: int = DEFAULT_OFFSET
    nodes: int = 2
    started_here: bool = False
    crds: Path | None = None
    """The CRDs applied last (use_crds)."""

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CRONOQ_CLUSTER_DIR": str(self.directory), "CRONOQ_PORT_OFFSET": str(self.port_offset),
                "CRONOQ_AUDIT": "1", "CRONOQ_KWOK_NODES": str(self.nodes)}

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def operator_kubeconfig(self) -> Path:
        return self.directory / "bench-operator.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.directory / "logs" / "audit.log"

    @property
    def kubectl(self) -> Path:
        return self.directory / "bin" / "kubectl"

    def devcluster(self, *command: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "hack" / "devcluster.py"), *command], env=self.env,
                              capture_output=True, text=True)

    def up(self) -> None:
        """Start the cluster, or reuse it when it already runs (and then leave it running)."""
        if self._healthy_or_absent():
            log(f"reusing the cluster in {self.directory}")
        else:
            log(f"starting a cluster in {self.directory} (port offset {self.port_offset}, audit log on)")
            done = self.devcluster("up")
            if done.returncode != 0:
                raise RuntimeError(f"devcluster up failed:\n{done.stderr[-3000:]}")
            self.started_here = True
        if not self.audit_log.exists():
            raise RuntimeError(f"{self.audit_log} is missing: the cluster was started without CRONOQ_AUDIT=1")
        self.api = Api(self.kubeconfig)
        self.use_crds(REPO / "crds")
        self.make_identity()

    def use_crds(self, directory: Path) -> None:
        """Apply these CRDs (a revision's own: its schema's rules are part of its API-server cost)."""
        if directory == self.crds:
            return
        subprocess.run([str(self.kubectl), f"--kubeconfig={self.kubeconfig}", "apply", "--server-side",
                        "--force-conflicts", "-f", str(directory)], check=True, capture_output=True)
        for crd in ("tasks.cronoq.io", "taskpools.cronoq.io", "taskschedules.cronoq.io"):
            wait_until(lambda: _established(self.api, crd), 30, what=f"CRD {crd} established")
        self.crds = directory

    def _healthy_or_absent(self) -> bool:
        """True: a healthy cluster runs. False: none does. A cluster whose processes run but that
        does not answer (a loaded API server can miss devcluster's 2s checks) is asked again, and
        never wiped: `devcluster up` would start afresh and lose what a kept run left there."""
        for _ in range(10):
            if self.devcluster("status").returncode == 0:
                return True
            if not self._processes_alive():
                return False
            time.sleep(3)
        raise RuntimeError(f"the cluster in {self.directory} runs but is not healthy; stop it with "
                           f"CRONOQ_CLUSTER_DIR={self.directory} CRONOQ_PORT_OFFSET={self.port_offset} "
                           "python3 hack/devcluster.py down")

    def of(self, component: str, read: Callable[[int], T]) -> T | None:
        """`read(pid)` of a control-plane component (its pid from devcluster's file); None if it does not run."""
        try:
            return read(int((self.directory / "run" / f"{component}.pid").read_text()))
        except (OSError, ValueError):
            return None

    def _processes_alive(self) -> bool:
        return any(self.of(name, lambda pid: os.kill(pid, 0) or True) for name in COMPONENTS)

    def down(self) -> None:
        if self.started_here:
            log("stopping the bench cluster")
            self.devcluster("down")

    def component_cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each control-plane process (the bench's share of the machine)."""
        return {name: cpu for name in COMPONENTS if (cpu := self.of(name, cpu_seconds)) is not None}

    # ---------------------------------------------------------------- namespaces

    def namespace(self, name: str) -> str:
        """A fresh namespace (deleted first if a previous run left it), ready for pods."""
        self.delete_namespace(name)
        self.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": name, "labels": {"cronoq.io/bench": "true"}}})
        wait_until(lambda: self.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default") is not None, 60, what=f"the default ServiceAccount of {name}")
        return name

    def delete_namespace(self, name: str, wait: float = 900) -> None:
        """Delete and wait until it is gone, so the garbage collector's work is not measured next."""
        if self.api.get(f"/api/v1/namespaces/{name}") is None:
            return
        self.api.delete(f"/api/v1/namespaces/{name}")
        wait_until(lambda: self.api.get(f"/api/v1/namespaces/{name}") is None, wait, what=f"namespace {name} to go")

    # ---------------------------------------------------------------- the operator's identity

    def make_identity(self) -> None:
        api = self.api
        for path, body in (
            ("/api/v1/namespaces", {"metadata": {"name": IDENTITY_NAMESPACE}}),
            (f"/api/v1/namespaces/{IDENTITY_NAMESPACE}/serviceaccounts", {"metadata": {"name": IDENTITY}}),
            ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                "metadata": {"name": IDENTITY},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": IDENTITY, "namespace": IDENTITY_NAMESPACE}]}),
        ):
            api.ensure(path, body)
        token = api.request("POST", f"/api/v1/namespaces/{IDENTITY_NAMESPACE}/serviceaccounts/{IDENTITY}/token",
                            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                             "spec": {"expirationSeconds": 8 * 3600}})["status"]["token"]
        admin = json.loads(self.kubeconfig.read_text())
        cluster = admin["clusters"][0]
        config = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
                  "users": [{"name": IDENTITY, "user": {"token": token}}],
                  "contexts": [{"name": IDENTITY, "context": {"cluster": cluster["name"], "user": IDENTITY}}],
                  "current-context": IDENTITY}
        self.operator_kubeconfig.write_text(json.dumps(config, indent=2))
        self.operator_kubeconfig.chmod(0o600)
        who = Api(self.operator_kubeconfig).request(
            "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert who["status"]["userInfo"]["username"] == OPERATOR_USER, who


def _established(api: Api, crd: str) -> bool:
    obj = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
    # A CRD just created may have no status, or a status without conditions, yet.
    return bool(obj) and any(c["type"] == "Established" and c["status"] == "True"
                             for c in (obj.get("status") or {}).get("conditions") or [])
