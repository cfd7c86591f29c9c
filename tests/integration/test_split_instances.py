"""A very large queue split across namespaces, one operator instance each (issue 56, point 5;
docs/operating/sizing.md): two instances on disjoint namespace patterns each lead over a Lease of
their own, run every task of their namespaces and touch none of the other's."""
from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from tests.support.operator import OperatorProcess
from tests.support.tasks import Cronoq
from tests.support.waiting import wait_until


@pytest.fixture
def halves(api, crds, kubeconfig, tmp_path):
    """Two namespaces per half (`s<id>-a-*`, `s<id>-b-*`), outside the session operator's `t-*`."""
    core = client.CoreV1Api(api)
    stem = f"s{uuid.uuid4().hex[:6]}"
    made = []
    for half in "ab":
        for i in (1, 2):
            name = f"{stem}-{half}-{i}"
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
                name=name, labels={"cronoq.io/test": "true"})))
            made.append(name)
    for name in made:
        wait_until(lambda name=name: core.read_namespaced_service_account("default", name), timeout=30,
                   what=f"default ServiceAccount in {name}")
    yield stem, made
    for name in made:
        core.delete_namespace(name, propagation_policy="Background")


def test_two_instances_on_disjoint_namespace_patterns_each_run_only_their_own(api, halves, kubeconfig, tmp_path):
    stem, namespaces = halves
    operators = {half: OperatorProcess(kubeconfig, (f"{stem}-{half}-*",), tmp_path / f"{half}.log",
                                       pod_name=f"cronoq-{half}") for half in "ab"}
    try:
        for op in operators.values():
            op.start()
        for op in operators.values():
            op.wait_leading()
        queues = {ns: Cronoq(api, ns, operators[ns.split("-")[1]]) for ns in namespaces}
        for cq in queues.values():
            cq.pool(concurrency=2)
            for i in range(3):
                cq.task(f"w{i}", delay="100ms")
        for ns, cq in queues.items():
            for i in range(3):
                cq.wait_phase(f"w{i}", "Succeeded", timeout=90)

        for ns, cq in queues.items():
            mine = f"cronoq-{ns.split('-')[1]}"
            reporters = {e.reporting_instance for i in range(3) for e in cq.events(f"w{i}") if e.reporting_instance}
            assert reporters == {mine}, (ns, reporters)
        for half, op in operators.items():
            counted = {dict(labels)["namespace"]: value for (name, labels), value in op.metrics().items()
                       if name == "cronoq_tasks_total" and value}
            assert counted == {f"{stem}-{half}-1": 3.0, f"{stem}-{half}-2": 3.0}, (half, counted)
            assert op.leading()
    finally:
        for op in operators.values():
            op.stop()
