"""Chart fixtures: helm bound to the test cluster, the chart's CRDs and stand-ins for the
Prometheus Operator's CRDs installed once per session, and extra namespaces per test."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
import pytest

from tests.chart import chart
from tests.support.cluster import namespace_name
from tests.support.waiting import wait_until

CRONOQ_CRDS = ("tasks.cronoq.io", "taskpools.cronoq.io", "taskschedules.cronoq.io")
MONITORING_CRDS = ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")


@dataclass(frozen=True)
class Helm:
    """The helm built with the control plane, bound to the test cluster's kubeconfig."""

    binary: str
    kubeconfig: str

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return chart.run_helm(self.binary, *args, f"--kubeconfig={self.kubeconfig}", check=check)


@pytest.fixture(scope="session")
def helm_binary(devcluster) -> str:
    """The helm binary; needs no cluster (`helm lint` and `helm template` work offline)."""
    return chart.helm_binary(devcluster)


@pytest.fixture(scope="session")
def helm(helm_binary, kubeconfig) -> Helm:
    """helm against the test cluster."""
    return Helm(helm_binary, kubeconfig)


@pytest.fixture(scope="session")
def render(helm_binary):
    """render(**template_args) -> the chart's objects, as `helm template` prints them."""

    def render(**kwargs) -> list[dict]:
        return chart.parse(chart.run_helm(helm_binary, *chart.template_args(**kwargs)).stdout)

    return render


@pytest.fixture(scope="session")
def template(helm_binary):
    """template(**template_args) -> the completed `helm template`, which may have failed."""

    def template(**kwargs):
        return chart.run_helm(helm_binary, *chart.template_args(**kwargs), check=False)

    return template


@pytest.fixture(scope="session")
def cronoq_crds(kubectl) -> tuple[str, ...]:
    """crds/ applied server-side, as tests/integration does (same field manager), Established.
    The source of truth rather than the chart's copy: test_crds.py fails when they differ."""
    kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=cronoq-tests", "-f", str(chart.REPO / "crds"))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{name}" for name in CRONOQ_CRDS))
    wait_until(lambda: kubectl("get", "taskpools", "--all-namespaces", check=False).returncode == 0,
               timeout=30, what="taskpools served by the API server")
    return CRONOQ_CRDS


@pytest.fixture(scope="session")
def monitoring_crds(kubectl) -> tuple[str, ...]:
    """Minimal ServiceMonitor and PrometheusRule CRDs, created only when missing (real ones,
    should the cluster have them, are left alone); cluster-scoped, so shared and kept."""
    missing = [name for name in MONITORING_CRDS
               if kubectl("get", f"crd/{name}", check=False).returncode != 0]
    if missing:
        created = kubectl("create", "-f", str(chart.DATA / "monitoring-crds.yaml"), check=False)
        if created.returncode != 0 and "AlreadyExists" not in created.stderr:
            raise AssertionError(f"creating the monitoring CRDs failed: {created.stderr}")
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{name}" for name in MONITORING_CRDS))
    for plural in ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"):
        wait_until(lambda: kubectl("get", plural, "--all-namespaces", check=False).returncode == 0,
                   timeout=30, what=f"{plural} served by the API server")
    return MONITORING_CRDS


# Chart tests use `c-` namespaces: `t-` ones are served by the integration tests' session
# operator, which must not act on the pools and pods these tests install.
PREFIX = "c"


@pytest.fixture
def make_namespace(request, kubectl):
    """make_namespace(suffix) creates a namespace for the test, with its default ServiceAccount
    ready; all are deleted afterwards."""
    made: list[str] = []

    def make(suffix: str) -> str:
        name = namespace_name(f"{request.node.name}-{suffix}", PREFIX)
        kubectl("create", "namespace", name)
        made.append(name)
        kubectl("label", "namespace", name, "cronoq.io/test=true")
        wait_until(lambda: kubectl("get", "serviceaccount", "default", namespace=name, check=False).returncode == 0,
                   timeout=30, what=f"default ServiceAccount in {name}")
        return name

    yield make
    for name in made:
        kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(make_namespace) -> str:
    """The release namespace of a chart test (replaces the suite-wide fixture: see PREFIX)."""
    return make_namespace("rel")


def chart_crds_in_sync() -> bool:
    source = {p.name: p.read_bytes() for p in (chart.REPO / "crds").glob("*.yaml")}
    return source == {p.name: p.read_bytes() for p in (chart.CHART / "crds").glob("*.yaml")}


@pytest.fixture
def install(helm, cronoq_crds, make_namespace):
    """install(release, namespace, *helm_args): `helm install`, uninstalled after the test
    (helm removes the cluster-scoped objects, which namespace deletion would leave behind).

    Helm 4 server-side applies the chart's CRDs even when they exist. While the chart's copy
    lags behind crds/ (test_crds.py fails then, saying how to resync) that apply would conflict
    with, or worse replace, the current CRDs that cronoq_crds installed; it is skipped then.
    The operator pods get kwok's "keep running" annotation (data/kwok-running.yaml)."""
    installed: list[tuple[str, str]] = []
    skip_crds = [] if chart_crds_in_sync() else ["--skip-crds"]

    def install(release: str, namespace: str, *args: str) -> subprocess.CompletedProcess:
        installed.append((release, namespace))
        return helm("install", release, str(chart.CHART), f"--namespace={namespace}", *skip_crds,
                    f"--values={chart.DATA / 'kwok-running.yaml'}", *args)

    yield install
    for release, namespace in reversed(installed):
        helm("uninstall", release, f"--namespace={namespace}", check=False)


@pytest.fixture(scope="session")
def promqlcheck() -> str:
    """tests/chart/promql built with Prometheus's own PromQL parser, cached like the cluster's
    binaries in $CRONOQ_CACHE (~/.cache/cronoq) under a hash of its module files."""
    source = chart.REPO / "tests" / "chart" / "promql"
    digest = hashlib.sha256(b"".join((source / f).read_bytes() for f in ("go.mod", "go.sum", "main.go"))).hexdigest()[:12]
    cache = Path(os.environ.get("CRONOQ_CACHE", Path.home() / ".cache" / "cronoq")) / f"promqlcheck-{digest}"
    binary = cache / "promqlcheck"
    if not binary.exists():
        assert shutil.which("go"), "tests/chart/test_promql.py needs Go on PATH (as the test cluster's build does)"
        cache.mkdir(parents=True, exist_ok=True)
        built = subprocess.run(["go", "build", "-mod=readonly", "-o", str(binary.with_suffix(".tmp")), "."],
                               cwd=source, capture_output=True, text=True, timeout=900)
        assert built.returncode == 0, f"building tests/chart/promql failed:\n{built.stderr}"
        binary.with_suffix(".tmp").rename(binary)
    return str(binary)
