"""Integration fixtures: cronoq's CRDs installed in the test cluster, once per session."""
from __future__ import annotations

import pytest

from cronoq.api.crdgen import CRD_DIR
from tests.support.waiting import wait_until

CRD_NAMES = ("tasks.cronoq.io", "taskpools.cronoq.io", "taskschedules.cronoq.io")


@pytest.fixture(scope="session")
def crds(kubectl) -> tuple[str, ...]:
    """crds/ applied server-side (as the chart will), Established, and served by discovery.

    Left installed after the session: other suites need them too, and a fresh cluster starts
    without them anyway."""
    kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=cronoq-tests", "-f", str(CRD_DIR))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{name}" for name in CRD_NAMES))
    for plural in ("tasks", "taskpools", "taskschedules"):
        wait_until(lambda: kubectl("get", plural, "--all-namespaces", check=False).returncode == 0,
                   timeout=30, what=f"{plural} served by the API server")
    return CRD_NAMES


@pytest.fixture(scope="session")
def operator(crds, kubeconfig, tmp_path_factory):
    """The operator, running for the whole session, watching every test namespace (`t-*`)."""
    from tests.support.operator import OperatorProcess

    log = tmp_path_factory.mktemp("operator") / "operator.log"
    proc = OperatorProcess(kubeconfig, ("t-*",), log, supervised=True, extra_args=("--notifications",)).start()
    yield proc
    proc.stop()


@pytest.fixture
def cq(api, namespace, operator):
    """Tasks and pools in this test's namespace, with the session operator acting on them."""
    from tests.support.tasks import Cronoq

    return Cronoq(api, namespace, operator)


@pytest.fixture
def own(api, own_namespace, crds, kubeconfig, tmp_path):
    """Tasks and pools in a namespace of their own, with an operator of their own that the test
    starts (`own.operator.start()`), kills and restarts; stopped afterwards."""
    from tests.support.operator import OperatorProcess
    from tests.support.tasks import Cronoq

    proc = OperatorProcess(kubeconfig, (own_namespace,), tmp_path / "operator.log")
    yield Cronoq(api, own_namespace, proc)
    proc.stop()


@pytest.fixture
def pair(api, own_namespace, crds, kubeconfig, tmp_path):
    """Two operator replicas electing a leader over one Lease in a namespace of their own: replica
    a leads when the test starts, b stands by. Yields (tasks of a, a, b)."""
    from tests.support.operator import OperatorProcess
    from tests.support.tasks import Cronoq

    lease = (own_namespace, "cronoq-leader")
    a = OperatorProcess(kubeconfig, (own_namespace,), tmp_path / "a.log", lease=lease, pod_name="replica-a",
                        extra_args=("--notifications",))
    b = OperatorProcess(kubeconfig, (own_namespace,), tmp_path / "b.log", lease=lease, pod_name="replica-b",
                        extra_args=("--notifications",))
    a.start()
    a.wait_leading()
    b.start()
    yield Cronoq(api, own_namespace, a), a, b
    a.stop()
    b.stop()
