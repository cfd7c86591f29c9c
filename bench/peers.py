"""The peers cronoq is compared with, run on the bench cluster as local processes: Kueue's
controller manager and Argo Workflows' workflow-controller.

Both are built from their published Go modules, pinned by the build modules in bench/peers/<name>/
(go.mod with a `tool` line, as hack/<component>/ pins the control plane), by hack/devcluster.py's
own Component into ~/.cache/cronoq/<name>-<hash>/. Their CRDs are read at run time from the pinned
version in the Go module cache, never copied into this repository.

They run as the operator does in the bench: outside the cluster, with the operator's token
kubeconfig (the bench's ServiceAccount, so the audit log attributes their requests exactly as it
does cronoq's; the scenarios never overlap), one process per scenario, leader election off, no
webhooks. kwok plays the pods.

- Kueue (`kueue --config`): only the batch/job integration; Jobs are created suspended with the
  `kueue.x-k8s.io/queue-name` label, so no mutating webhook is needed. Its internal certificate
  management is off (it would inject CA bundles into webhook configurations and CRDs that have no
  service here), so Kueue reads its metrics server's certificate from the fixed path
  /etc/kueue/metrics/certs: the process runs in a mount namespace of its own (`unshare -m`) with
  an overlay on /etc that holds a self-signed certificate; the machine's /etc is not touched.
- Argo (`workflow-controller --namespaced`): a minimal configmap; the executor (the pod's `wait`
  container, which reports outputs) never runs under kwok.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from bench.procstat import Running
from bench.replica import free_port

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / "bench" / "peers"

KUEUE_MODULE = "sigs.k8s.io/kueue"
ARGO_MODULE = "github.com/argoproj/argo-workflows/v3"
KUEUE_NAMESPACE = "kueue-system"
ARGO_NAMESPACE_CONFIG = "workflow-controller-configmap"


@lru_cache(maxsize=None)
def _devcluster():
    """hack/devcluster.py as a module (hack/ is no package): its Component builds and caches."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("cronoq_devcluster", REPO / "hack" / "devcluster.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def peer_component(name: str):
    """devcluster's Component, with its build module in bench/peers/<name> instead of hack/<name>."""
    base = _devcluster().Component

    class Peer(base):  # type: ignore[misc, valid-type]
        @property
        def module(self) -> Path:
            return PEERS / self.name

    return Peer(name)


def build(name: str) -> Path:
    """Build (or reuse) the peer's binary; return its path."""
    component = peer_component(name)
    component.build()
    return component.cache_dir / component.binaries()[0]


def pinned_version(go_mod: str, module: str) -> str:
    """The version of `module` a build module's go.mod requires."""
    for line in go_mod.splitlines():
        words = line.split("//")[0].split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == module:
            return words[1]
    raise ValueError(f"go.mod requires no {module}")


def module_dir(name: str, module: str) -> Path:
    """Where the Go module cache holds the pinned version of `module` (downloaded if missing)."""
    out = subprocess.run(["go", "mod", "download", "-json", module], cwd=PEERS / name, capture_output=True,
                         text=True, check=True).stdout
    return Path(json.loads(out)["Dir"])


def version(name: str, module: str) -> str:
    return pinned_version((PEERS / name / "go.mod").read_text(), module)


# ---------------------------------------------------------------- the objects each peer needs


def kueue_config(*, health_port: int, metrics_port: int, webhook_port: int, cert_dir: str) -> dict[str, Any]:
    """Kueue's Configuration: as shipped (config/components/manager) but for the batch/job integration
    only, no leader election, no internal certificate management, no visibility server, loopback ports
    of the bench's own."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": cert_dir},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "controller": {"groupKindConcurrency": {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5,
                                                "LocalQueue.kueue.x-k8s.io": 1, "Cohort.kueue.x-k8s.io": 1,
                                                "ClusterQueue.kueue.x-k8s.io": 1, "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["batch/job"]},
        # The on-demand visibility API is an aggregated API server (certificates under /visibility,
        # an APIService); nothing here asks it.
        "featureGates": {"VisibilityOnDemand": False},
    }


KUEUE_CPU_REQUEST = "10m"
"""Each Kueue Job's pod asks for this much CPU: the quota Kueue admits against."""


def kueue_queues(queue: str, namespace: str | None, cpu_quota: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, body) of a ResourceFlavor, a ClusterQueue with `cpu_quota`, and a LocalQueue in
    `namespace` (none without one)."""
    group = "/apis/kueue.x-k8s.io/v1beta2"
    return [
        (f"{group}/resourceflavors", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                      "metadata": {"name": "bench"}}),
        (f"{group}/clusterqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": queue},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu"],
                "flavors": [{"name": "bench", "resources": [{"name": "cpu", "nominalQuota": cpu_quota}]}]}]}}),
    ] + ([local_queue(queue, namespace)] if namespace else [])


def local_queue(queue: str, namespace: str) -> tuple[str, dict[str, Any]]:
    """(path, body) of LocalQueue `queue` in `namespace`, feeding the ClusterQueue of the same name."""
    return (f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": queue},
        "spec": {"clusterQueue": queue}})


def kueue_priority_class(name: str, value: int) -> tuple[str, dict[str, Any]]:
    return ("/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses",
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
             "value": value})


def kueue_job(job: dict[str, Any], queue: str, priority_class: str | None = None) -> dict[str, Any]:
    """A bare Job made Kueue's: suspended, labelled with its LocalQueue, its container asking for CPU."""
    job = json.loads(json.dumps(job))
    labels = job["metadata"].setdefault("labels", {})
    labels["kueue.x-k8s.io/queue-name"] = queue
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    job["spec"]["suspend"] = True
    for container in job["spec"]["template"]["spec"]["containers"]:
        container.setdefault("resources", {})["requests"] = {"cpu": KUEUE_CPU_REQUEST}
    return job


def argo_configmap(metrics_port: int) -> dict[str, Any]:
    """The workflow-controller's configmap: metrics off (on a port of the bench's own), nothing else."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ARGO_NAMESPACE_CONFIG},
            "data": {"metricsConfig": f"enabled: false\nport: {metrics_port}\nsecure: false\n",
                     "telemetryConfig": "enabled: false\n"}}


def argo_workflow(name: str, image: str, pod_annotations: dict[str, str]) -> dict[str, Any]:
    """One Workflow of one container step; kwok plays its pod as it plays the bench's other pods. The
    command is given: otherwise the controller asks the image's registry for its entrypoint."""
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": name},
            "spec": {"entrypoint": "main", "podMetadata": {"annotations": dict(pod_annotations)},
                     "templates": [{"name": "main", "container": {"image": image, "command": ["/task"]}}]}}


# ---------------------------------------------------------------- the processes


@dataclass
class PeerProcess(Running):
    """A peer controller running on this machine: started, measured from /proc, stopped."""
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None

    def start(self) -> PeerProcess:
        self.launch(self.argv, dict(self.env))
        return self


def self_signed(into: Path) -> None:
    """tls.crt and tls.key for 127.0.0.1, for the servers Kueue insists on starting."""
    into.mkdir(parents=True, exist_ok=True)
    if (into / "tls.crt").exists():
        return
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(into / "tls.key"),
                    "-out", str(into / "tls.crt")], check=True, capture_output=True)


def start_kueue(binary: Path, kubeconfig: Path, work: Path) -> PeerProcess:
    """Kueue in a mount namespace whose /etc (an overlay) holds /etc/kueue/metrics/certs."""
    certs = work / "kueue-certs"
    self_signed(certs)
    config = work / "kueue-config.json"
    config.write_text(json.dumps(kueue_config(health_port=free_port(), metrics_port=free_port(),
                                              webhook_port=free_port(), cert_dir=str(certs)), indent=1))
    overlay = work / "kueue-etc"
    shutil.rmtree(overlay, ignore_errors=True)
    (overlay / "upper" / "kueue" / "metrics").mkdir(parents=True)
    (overlay / "work").mkdir()
    shutil.copytree(certs, overlay / "upper" / "kueue" / "metrics" / "certs")
    script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={overlay}/upper,workdir={overlay}/work /etc && "
              f"exec {binary} --config={config} --zap-log-level=error")
    process = PeerProcess(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          work / "kueue.log", env={"KUBECONFIG": str(kubeconfig)}).start()
    return process


def start_argo(binary: Path, kubeconfig: Path, namespace: str, work: Path) -> PeerProcess:
    return PeerProcess([str(binary), f"--kubeconfig={kubeconfig}", f"--namespace={namespace}", "--namespaced",
                        f"--managed-namespace={namespace}", f"--configmap={ARGO_NAMESPACE_CONFIG}",
                        "--executor-image=example.invalid/argoexec:bench", "--loglevel=warn"],
                       work / f"argo-{namespace}.log", env={"LEADER_ELECTION_DISABLE": "true"}).start()


def crd_files(directory: Path) -> list[Path]:
    """The CRD manifests of a directory: its YAML files but the kustomization."""
    return sorted(p for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")


def apply_crds(kubectl: Path, kubeconfig: Path, directory: Path) -> None:
    files = [arg for path in crd_files(directory) for arg in ("-f", str(path))]
    done = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", "apply", "--server-side", "--force-conflicts",
                           *files], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"applying the CRDs of {directory} failed: {done.stderr[-2000:]}")
    done = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", "wait", "--for=condition=Established",
                           "--timeout=60s", *files], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the CRDs of {directory} were not established: {done.stderr[-2000:]}")


if __name__ == "__main__":  # `python -m bench.peers [kueue|argo]...`: build those named (default: both)
    for peer in sys.argv[1:] or ("kueue", "argo"):
        print(build(peer), file=sys.stderr)

