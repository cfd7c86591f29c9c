"""Shared fixtures. Integration tests ask for `kubeconfig` (or anything built on it); the real
test control plane is then started once per session, or reused when CRONOQ_KUBECONFIG names
one, or when `make cluster-up` already started it. Unit tests never touch it."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.support.cluster import Kubectl, kubectl_binary, load_devcluster, namespace_name
from tests.support.waiting import wait_until

# Property tests check what is generated, not how fast: on a shared 2-core machine (clusters and
# benchmarks beside the suite) generating a Task took over Hypothesis's 1 s health check and its
# 200 ms deadline per example, failing tests whose every assertion held.
settings.register_profile("cronoq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cronoq")


@pytest.fixture(scope="session")
def devcluster():
    return load_devcluster()


@pytest.fixture(scope="session")
def prometheus_binaries(devcluster):
    """The directory holding `prometheus` and `promtool`, built from hack/prometheus into the
    cache like the control plane (`make go-tools` builds them before pytest; this only finds them)."""
    component = devcluster.Component("prometheus")
    component.build()
    return component.cache_dir


@pytest.fixture(scope="session")
def promtool(prometheus_binaries) -> str:
    return str(prometheus_binaries / "promtool")


@pytest.fixture(scope="session")
def postgres():
    """A real Postgres server of the session's own (tests/support/postgres.py), started on first
    use and stopped at the end; `postgres.database()` makes each test an empty database."""
    from tests.support.postgres import PostgresServer

    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kubeconfig(devcluster) -> str:
    given = os.environ.get("CRONOQ_KUBECONFIG")
    if given:
        yield given
        return
    already = devcluster.healthy()
    path = devcluster.up()
    yield str(path)
    if not already and os.environ.get("CRONOQ_KEEP_CLUSTER") != "1":
        devcluster.down(quiet=True)


@pytest.fixture(scope="session")
def kubectl(devcluster, kubeconfig) -> Kubectl:
    return Kubectl(kubectl_binary(devcluster), kubeconfig)


@pytest.fixture(scope="session")
def api(kubeconfig):
    """A kubernetes.client.ApiClient for the test cluster (admin)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def namespace(request, api) -> str:
    """A fresh namespace per test, with its default ServiceAccount ready; deleted afterwards."""
    yield from _namespace(request, api, "t")


@pytest.fixture
def own_namespace(request, api) -> str:
    """Like `namespace`, but outside the session operator's `t-*`: for tests running their own."""
    yield from _namespace(request, api, "o")


def _namespace(request, api, prefix: str):
    from kubernetes import client

    core = client.CoreV1Api(api)
    name = namespace_name(request.node.name, prefix)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"cronoq.io/test": "true"})))
    wait_until(lambda: core.read_namespaced_service_account("default", name), timeout=30,
               what=f"default ServiceAccount in {name}")
    yield name
    core.delete_namespace(name, propagation_policy="Background")
