"""The rendered chart is what the API server accepts: `helm template | kubectl apply
--server-side --dry-run=server`, with the defaults and with every optional feature on."""
from __future__ import annotations

import pytest

from tests.chart.chart import DATA, run_helm, template_args

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("cronoq_crds", "monitoring_crds")]


def dry_run(kubectl, manifest: str) -> list[str]:
    result = kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict",
                     "--field-manager=helm", "-f", "-", input=manifest)
    return [line for line in result.stdout.splitlines() if line.strip()]


def test_default_rendering_is_accepted_by_the_api_server(helm_binary, kubectl, namespace):
    manifest = run_helm(helm_binary, *template_args(namespace=namespace)).stdout
    applied = dry_run(kubectl, manifest)
    assert all(line.endswith("serverside-applied (server dry run)") for line in applied), applied
    kinds = {line.split("/")[0] for line in applied}
    assert {"serviceaccount", "deployment.apps", "service", "poddisruptionbudget.policy",
            "clusterrole.rbac.authorization.k8s.io", "clusterrolebinding.rbac.authorization.k8s.io"} <= kinds, kinds


def test_every_optional_feature_is_accepted_by_the_api_server(helm_binary, kubectl, namespace, make_namespace):
    watched = [make_namespace("a"), make_namespace("b")]
    manifest = run_helm(helm_binary, *template_args(
        namespace=namespace, values=[DATA / "all-features.yaml"], set_json={"watchNamespaces": watched})).stdout
    applied = dry_run(kubectl, manifest)
    assert all(line.endswith("serverside-applied (server dry run)") for line in applied), applied
    kinds = {line.split("/")[0] for line in applied}
    assert {"servicemonitor.monitoring.coreos.com", "prometheusrule.monitoring.coreos.com", "configmap",
            "taskpool.cronoq.io", "role.rbac.authorization.k8s.io", "rolebinding.rbac.authorization.k8s.io",
            "poddisruptionbudget.policy"} <= kinds, kinds
    assert sum(line.startswith("taskpool.cronoq.io/default") for line in applied) == 2


def test_dry_run_refuses_a_pool_the_crd_refuses(helm_binary, kubectl, namespace):
    # The dry run really validates: a pool the chart's schema lets through but the CRD's CEL
    # rule refuses (maxBackoff below initialBackoff) fails.
    manifest = run_helm(helm_binary, *template_args(namespace=namespace, sets={
        "defaultPool.create": "true", "defaultPool.retry.initialBackoff": "1m", "defaultPool.retry.maxBackoff": "1s"})).stdout
    result = kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", "-",
                     input=manifest, check=False)
    assert result.returncode != 0
    assert "maxBackoff must be at least initialBackoff" in result.stderr, result.stderr
