"""Fixtures for the image tests: the images built by hack/image.py (`make test` builds them
before pytest starts, so here it only finds them), containers run with podman the way the
kubelet would run the pod, and ServiceAccount credentials mounted where a pod finds them."""
from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.chart import chart
from tests.integration.conftest import crds  # noqa: F401  (the session fixture, shared)
from tests.support.cluster import REPO, load_devcluster
from tests.support.operator import free_port

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def image_tool():
    """hack/image.py, a script like hack/devcluster.py: loaded by path."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("cronoq_image", REPO / "hack" / "image.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Images:
    engine: str
    operator: str
    worker: str


@pytest.fixture(scope="session")
def images() -> Images:
    """Both images, built now unless `make image` (a prerequisite of `make test`) already did:
    then the build is all cache hits and takes a second or two."""
    tool = image_tool()
    # The containers run with podman (--network host, runc), so the images must be in its storage.
    env = {**os.environ, "CRONOQ_ENGINE": "podman"}
    built = subprocess.run(["python3", str(REPO / "hack" / "image.py"), "build"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, f"hack/image.py build failed:\n{built.stderr[-4000:]}"
    return Images("podman", tool.OPERATOR_IMAGE, tool.WORKER_IMAGE)


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(["podman", "--runtime", "runc", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


@dataclass
class Container:
    """One detached container; removed (killed first) when the test ends."""

    name: str
    started: bool = False
    _removed: bool = field(default=False, repr=False)

    def logs(self) -> str:
        out = podman("logs", self.name, check=False)
        return out.stdout + out.stderr

    def running(self) -> bool:
        out = podman("inspect", "--format={{.State.Running}}", self.name, check=False)
        return out.stdout.strip() == "true"

    def exit_code(self) -> int | None:
        """The exit code once the container stopped, else None."""
        if self.running():
            return None
        out = podman("inspect", "--format={{.State.ExitCode}}", self.name)
        return int(out.stdout.strip())

    def stop(self, timeout: int = 30) -> None:
        """SIGTERM, as the kubelet sends when the pod is deleted; SIGKILL after `timeout`."""
        podman("stop", f"--time={timeout}", self.name, timeout=timeout + 30)

    def remove(self) -> None:
        if not self._removed:
            podman("rm", "--force", "--time=0", self.name, check=False)
            self._removed = True


@pytest.fixture
def run_container(images):
    """run_container(image, *args, env={}, mounts=[]) starts a container as the kubelet would
    start the chart's pod or an attempt's pod: read-only root, user 65532, a tmpfs /tmp, every
    capability dropped, no new privileges; on the host's network (the test API server listens
    on loopback only)."""
    made: list[Container] = []

    def run(image: str, *args: str, env: dict[str, str], mounts: list[str] = (),
            entrypoint: str | None = None) -> Container:
        name = f"cronoq-test-{uuid.uuid4().hex[:10]}"
        argv = ["run", "--detach", f"--name={name}", "--network=host", "--read-only", "--user=65532:65532",
                "--tmpfs=/tmp:rw,size=64m,mode=1777", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                "--ulimit=nofile=4096:4096", "--ulimit=nproc=4096:4096"]
        argv += [f"--env={k}={v}" for k, v in env.items()]
        argv += [f"--volume={m}" for m in mounts]
        if entrypoint is not None:
            argv.append(f"--entrypoint={entrypoint}")
        container = Container(name)
        made.append(container)
        podman(*argv, image, *args)
        container.started = True
        return container

    yield run
    for container in made:
        container.remove()


def service_account_volume(directory: Path, *, token: str, namespace: str) -> str:
    """What the kubelet projects into every pod: the token, the cluster CA, the namespace;
    readable by the container's user, mounted read-only."""
    devcluster = load_devcluster()
    directory.mkdir(mode=0o755, parents=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes((devcluster.STATE / "pki" / "ca.crt").read_bytes())
    (directory / "namespace").write_text(namespace)
    for f in directory.iterdir():
        f.chmod(0o644)
    return f"{directory}:{SA_DIR}:ro"


def api_server_env() -> dict[str, str]:
    """KUBERNETES_SERVICE_HOST/PORT as a pod sees them, pointing at the loopback API server
    (its serving certificate names 127.0.0.1)."""
    devcluster = load_devcluster()
    return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(devcluster.APISERVER)}


def request_token(api, namespace: str, service_account: str, seconds: int = 3600) -> str:
    """A token for the ServiceAccount from the TokenRequest API, as the kubelet gets one."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    answer = core.create_namespaced_service_account_token(
        service_account, namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)))
    return answer.status.token


@pytest.fixture
def scratch(tmp_path_factory) -> Path:
    """A directory for mounts, outside pytest's 0700 tmp tree so the container user can read it."""
    base = Path(os.environ.get("CRONOQ_IMAGE_SCRATCH", "/tmp")) / f"cronoq-image-{uuid.uuid4().hex[:8]}"
    base.mkdir(mode=0o755)
    yield base
    import shutil

    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def release(devcluster, kubectl, crds, own_namespace, images):  # noqa: F811
    """The chart rendered for this namespace with the locally built image; everything but the
    Deployment applied (a podman container stands in for its pod). Cluster-scoped objects are
    deleted afterwards; the namespace takes the rest."""
    name = "img" + own_namespace.rsplit("-", 1)[1]
    repository, tag = images.operator.rsplit(":", 1)
    ports = {"metricsPort": free_port(), "probePort": free_port()}
    rendered = chart.parse(chart.run_helm(chart.helm_binary(devcluster), *chart.template_args(
        release=name, namespace=own_namespace,
        set_json={"watchNamespaces": [own_namespace], "operator": ports,
                  "image": {"repository": repository, "tag": tag}})).stdout)
    (deployment,) = chart.find(rendered, "Deployment")
    others = [o for o in rendered if o["kind"] != "Deployment"]
    manifest = yaml.safe_dump_all(others)
    kubectl("apply", "-f", "-", input=manifest)
    yield deployment, ports
    cluster_scoped = [o for o in others if "namespace" not in o["metadata"]]
    if cluster_scoped:
        kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=yaml.safe_dump_all(cluster_scoped),
                check=False)
