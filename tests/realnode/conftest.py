"""Real-node fixtures: one real node (hack/realnode.py: kubelet, containerd, runc) joined to the
session's test cluster, and one operator installed by the chart and running as a pod on it.

The whole suite is one pass: the node comes up once, the chart's operator is installed once, and
the claim tasks are submitted together so that their pods run side by side (a real container
costs seconds; one pass keeps `make test` lean). Namespaces are `r-*`: neither the integration
tests' session operator (`t-*`) nor the chart tests (`c-*`) act on them."""
from __future__ import annotations

import json

import pytest

from tests.chart import chart
from tests.support.cluster import namespace_name
from tests.support.tasks import Cronoq
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

OPERATOR_IMAGE = "localhost/cronoq/operator:dev"
WORKER_IMAGE = "localhost/cronoq/worker-example:dev"
CRD_NAMES = ("tasks.cronoq.io", "taskpools.cronoq.io", "taskschedules.cronoq.io")
RELEASE = "cronoq"


def placement(node) -> dict:
    """Pod fields that put a pod on the real node (tainted: nothing else lands there)."""
    return {"nodeSelector": {node.TAINT_KEY: "true"},
            "tolerations": [{"key": node.TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]}


@pytest.fixture(scope="session")
def real_node(devcluster, kubeconfig):
    """hack/realnode.py's module, its node Ready in the session's cluster with the project's
    images loaded; stopped (and checked to leave nothing behind) by test_teardown.py, or here."""
    node = devcluster.realnode()
    node.up()
    yield node
    node.down(quiet=True)


@pytest.fixture(scope="session")
def realnode_namespace(kubectl, real_node):
    name = namespace_name("realnode", "r")
    kubectl("create", "namespace", name)
    kubectl("label", "namespace", name, "cronoq.io/test=true")
    wait_until(lambda: kubectl("get", "serviceaccount", "default", namespace=name, check=False).returncode == 0,
               timeout=30, what=f"default ServiceAccount in {name}")
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def helm_real(devcluster, kubeconfig):
    binary = chart.helm_binary(devcluster)
    return lambda *args, check=True: chart.run_helm(binary, *args, f"--kubeconfig={kubeconfig}", check=check)


def helm_values(node, namespace: str) -> list[str]:
    """The chart's values for this cluster: the locally built image (already in the node's
    containerd), one replica on the real node, watching the suite's namespace."""
    return [f"--set=image.repository={OPERATOR_IMAGE.rsplit(':', 1)[0]}", f"--set=image.tag={OPERATOR_IMAGE.rsplit(':', 1)[1]}",
            "--set=replicaCount=1", f"--set=watchNamespaces={{{namespace}}}",
            f"--set-json=nodeSelector={json.dumps(placement(node)['nodeSelector'])}",
            f"--set-json=tolerations={json.dumps(placement(node)['tolerations'])}",
            "--skip-crds"]


@pytest.fixture(scope="session")
def chart_operator(kubectl, helm_real, real_node, realnode_namespace):
    """`helm install` of charts/cronoq in the suite's namespace; yields the namespace once the
    operator pod is Ready on the real node and leads."""
    kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=cronoq-tests", "-f", str(chart.REPO / "crds"))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in CRD_NAMES))
    helm_real("install", RELEASE, str(chart.CHART), f"--namespace={realnode_namespace}",
              *helm_values(real_node, realnode_namespace))
    wait_until(lambda: operator_pod(kubectl, realnode_namespace, ready=True), timeout=180,
               what="the chart's operator pod Ready on the real node")
    wait_until(lambda: leader(kubectl, realnode_namespace), timeout=60, what="the operator leading")
    yield realnode_namespace
    helm_real("uninstall", RELEASE, f"--namespace={realnode_namespace}", "--wait", check=False)


@pytest.fixture(scope="session")
def rq(api, chart_operator) -> Cronoq:
    """Tasks and pools in the suite's namespace, served by the chart's operator."""
    return Cronoq(api, chart_operator, None)


def get_json(kubectl, *args: str, namespace: str | None = None) -> dict:
    return json.loads(kubectl("get", *args, "-o", "json", namespace=namespace).stdout)


def operator_pod(kubectl, namespace: str, ready: bool = False) -> dict | None:
    pods = [p for p in get_json(kubectl, "pods", "-l", f"app.kubernetes.io/instance={RELEASE}",
                                namespace=namespace)["items"] if not p["metadata"].get("deletionTimestamp")]
    if len(pods) != 1:
        return None
    conditions = {c["type"]: c["status"] for c in pods[0]["status"].get("conditions", [])}
    return pods[0] if not ready or conditions.get("Ready") == "True" else None


def leader(kubectl, namespace: str) -> dict | None:
    """The operator's leader Lease (the chart's: `cronoq-leader` in the release namespace), once held."""
    result = kubectl("get", "lease", "cronoq-leader", "-o", "json", namespace=namespace, check=False)
    if result.returncode != 0:
        return None
    lease = json.loads(result.stdout)
    return lease if lease["spec"].get("holderIdentity") else None


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's reporter
    """The exactly-once run's table (test_exactly_once.py), one row per delivery."""
    from tests.support import effects

    if effects.DELIVERY_ROWS:
        write = terminalreporter.write_line
        write("")
        write("exactly-once effects on real pods (test_exactly_once.py; violations must be 0, stale writes refused "
              "at least 1, and the unfenced INSERT of the same run must duplicate):")
        for line in effects.table(effects.DELIVERY_ROWS):
            write(line)
