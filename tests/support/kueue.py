"""A real Kueue (v0.17, its controller manager built from the Go module the bench pins in
bench/peers/kueue and cached in ~/.cache/cronoq like the other Go tools: `make go-tools` builds it)
run as a local process against the test cluster, as the bench runs it (bench/peers.py): only the
batch/job integration, Jobs created suspended with the queue-name label so no webhook is needed,
leader election off, in a mount namespace of its own for the certificate it insists on.

Its CRDs are applied from the pinned module (and left installed: they cost nothing to the other
suites, which make no Kueue objects). Queues and priority classes are cluster-scoped: each
`KueueQueues` gets names of its own and deletes them while Kueue still runs (its finalizers need it).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from bench import peers
from tests.support.waiting import wait_until

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
FLAVOR = "cronoq-tests"


def binary() -> Path:
    """Kueue's controller manager, built once (cached; `make go-tools` builds it before pytest)."""
    return peers.build("kueue")


def install_crds(kubectl: str, kubeconfig: str) -> None:
    crds = peers.module_dir("kueue", peers.KUEUE_MODULE) / "config" / "components" / "crd" / "bases"
    peers.apply_crds(Path(kubectl), Path(kubeconfig), crds)


@dataclass
class Kueue:
    """The controller manager process and the cluster-scoped objects the tests made."""

    api: client.ApiClient
    work: Path
    process: peers.PeerProcess | None = None
    made: list[tuple[str, str]] = field(default_factory=list)
    """(plural, name) of the cluster-scoped objects made, deleted in reverse order."""
    namespaces: list[str] = field(default_factory=list)
    """Namespaces holding LocalQueues: Kueue's finalizers need it running until they are gone."""

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def start(self, kubeconfig: str) -> Kueue:
        core = client.CoreV1Api(self.api)
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=peers.KUEUE_NAMESPACE)))
        except ApiException as err:
            if err.status != 409:
                raise
        self.process = peers.start_kueue(binary(), Path(kubeconfig), self.work)
        return self

    def stop(self) -> None:
        core = client.CoreV1Api(self.api)

        def namespace_gone(name: str) -> bool:
            try:
                core.read_namespace(name)
            except ApiException as err:
                if err.status == 404:
                    return True
                raise
            return False

        for namespace in self.namespaces:
            wait_until(lambda: namespace_gone(namespace), timeout=120, what=f"namespace {namespace} deleted")
        for plural, name in reversed(self.made):
            try:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except ApiException as err:
                if err.status != 404:
                    raise
        for plural, name in reversed(self.made):
            wait_until(lambda: self._gone(plural, name), timeout=60, what=f"{plural}/{name} deleted")
        if self.process is not None:
            self.process.stop()

    def _gone(self, plural: str, name: str) -> bool:
        try:
            self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def log(self) -> str:
        path = self.process.log_path if self.process else None
        return path.read_text()[-4000:] if path and path.exists() else ""

    # ------------------------------------------------------------------ objects

    def cluster_object(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        made = self.custom.create_cluster_custom_object(GROUP, VERSION, plural, {
            "apiVersion": f"{GROUP}/{VERSION}", **body})
        self.made.append((plural, body["metadata"]["name"]))
        return made

    def priority_class(self, name: str, value: int) -> None:
        self.cluster_object("workloadpriorityclasses", {"kind": "WorkloadPriorityClass", "metadata": {"name": name},
                                                        "value": value})

    def multikueue(self, name: str, worker_kubeconfig: Path) -> None:
        """An AdmissionCheck `name` of MultiKueue sending workloads to one worker cluster, reached
        with `worker_kubeconfig` (inline certificates, as Kueue requires) kept in a Secret in
        Kueue's namespace; returns once Kueue says the check is active (it connected)."""
        core = client.CoreV1Api(self.api)
        secret = client.V1Secret(metadata=client.V1ObjectMeta(name=name),
                                 string_data={"kubeconfig": worker_kubeconfig.read_text()})
        core.create_namespaced_secret(peers.KUEUE_NAMESPACE, secret)
        self.cluster_object("multikueueclusters", {"kind": "MultiKueueCluster", "metadata": {"name": name},
                                                   "spec": {"clusterSource": {"kubeConfig": {
                                                       "locationType": "Secret", "location": name}}}})
        self.cluster_object("multikueueconfigs", {"kind": "MultiKueueConfig", "metadata": {"name": name},
                                                  "spec": {"clusters": [name]}})
        self.cluster_object("admissionchecks", {"kind": "AdmissionCheck", "metadata": {"name": name}, "spec": {
            "controllerName": "kueue.x-k8s.io/multikueue",
            "parameters": {"apiGroup": GROUP, "kind": "MultiKueueConfig", "name": name}}})

        self._wait_active("admissionchecks", name, f"MultiKueue to connect AdmissionCheck {name} to its worker cluster")

    def queue(self, namespace: str, name: str, cpu: str, *, preemption: bool = False,
              cluster_queue: str | None = None, admission_check: str | None = None) -> None:
        """A ClusterQueue of `cpu` (preempting lower priorities within itself when asked; its
        workloads passing `admission_check` when given) and a LocalQueue `name` in `namespace`
        submitting to it (the ClusterQueue is named `cluster_queue`, else `name`); returns once
        Kueue says the ClusterQueue is active."""
        cluster = cluster_queue or name
        if not self._exists("resourceflavors", FLAVOR):
            try:
                self.custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
                    "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}})
            except ApiException as err:
                if err.status != 409:
                    raise
        spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu"], "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]}
        if preemption:
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        if admission_check:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": admission_check}]}
        self.cluster_object("clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": cluster}, "spec": spec})
        self.namespaces.append(namespace)
        self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": name},
            "spec": {"clusterQueue": cluster}})

        self._wait_active("clusterqueues", cluster, f"Kueue to make ClusterQueue {cluster} active")

    def _wait_active(self, plural: str, name: str, what: str) -> None:
        """Until Kueue gives the cluster-scoped object `plural`/`name` the condition Active=True
        (failing at once, with Kueue's log, if Kueue exits)."""
        def active() -> bool:
            made = self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
            if not self.alive():
                raise AssertionError(f"Kueue exited:\n{self.log()}")
            return any(c.get("type") == "Active" and c.get("status") == "True"
                       for c in (made.get("status") or {}).get("conditions") or [])

        wait_until(active, timeout=60, what=what)

    def _exists(self, plural: str, name: str) -> bool:
        return not self._gone(plural, name)

    def workloads(self, namespace: str) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]


def unique(prefix: str) -> str:
    """A cluster-scoped name no other session or module uses."""
    return f"{prefix}-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
