"""The chart's worker fleet (workers.fleet, issue 55): off by default; a Deployment of the user's
worker image told its concurrency and metrics port, scaled by a KEDA ScaledObject or a
HorizontalPodAutoscaler on the pool's queued depth plus the attempts its workers run. What it
renders is what the API server accepts: the ScaledObject checked against KEDA's published CRD
(tests/support/keda.py, applied to the test API server: a server-side dry run validates it with
KEDA's own schema), the HPA and the Deployment against Kubernetes' own."""
from __future__ import annotations

import copy
import re

import pytest
import yaml

from tests.chart.chart import REPO, find, only
from tests.support import keda
from tests.support.waiting import wait_until

POOL = "thumbs"


def fleet(mode: str = "keda", namespace: str = "media", **more: str) -> dict[str, str]:
    return {"workers.fleet.enabled": "true", "workers.fleet.pool": POOL, "workers.fleet.namespace": namespace,
            "workers.fleet.serviceAccount": "thumbs-worker", "workers.fleet.image.repository": "example.com/thumbs",
            "workers.fleet.concurrency": "3", "workers.fleet.autoscaling.mode": mode, **more}


QUERY = ('(sum(cronoq_queue_depth{namespace="media",pool="thumbs"}) or vector(0)) + '
         '(sum(cronoq_worker_in_flight{namespace="media",pool="thumbs"}) or vector(0))')


def test_no_fleet_by_default(render):
    objects = render()
    assert not [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "worker"]
    assert not find(objects, "ScaledObject") and not find(objects, "HorizontalPodAutoscaler")


def test_the_deployment_tells_the_workers_their_concurrency_and_metrics_port(render):
    objects = render(sets=fleet(mode=""))
    deployment = only(objects, "Deployment", "cronoq-thumbs-workers", "media")
    assert deployment["spec"]["replicas"] == 1, "no autoscaler: the replicas value"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"CRONOQ_WORKER_CONCURRENCY": "3", "CRONOQ_WORKER_METRICS_PORT": "9102"}
    assert container["ports"] == [{"name": "metrics", "containerPort": 9102, "protocol": "TCP"}]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "thumbs-worker"
    assert not find(objects, "ScaledObject") and not find(objects, "HorizontalPodAutoscaler")


def test_keda_scales_on_queued_depth_plus_in_flight_each_replica_taking_its_concurrency(render):
    objects = render(sets=fleet(**{"workers.fleet.autoscaling.minReplicas": "0"}))
    scaled = only(objects, "ScaledObject", "cronoq-thumbs-workers", "media")
    assert "replicas" not in only(objects, "Deployment", "cronoq-thumbs-workers")["spec"], "the autoscaler owns it"
    assert scaled["spec"]["scaleTargetRef"] == {"name": "cronoq-thumbs-workers"}
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (0, 10)
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["query"] == QUERY and trigger["metadata"]["threshold"] == "3"


def test_the_hpa_alternative_asks_the_adapter_for_the_pools_metric(render):
    hpa = only(render(sets=fleet(mode="hpa")), "HorizontalPodAutoscaler", "cronoq-thumbs-workers", "media")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["external"]["metric"] == {"name": "cronoq_worker_slots_wanted",
                                            "selector": {"matchLabels": {"namespace": "media", "pool": POOL}}}
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "3"}
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300


@pytest.mark.parametrize("sets, says", [
    ({"workers.fleet.autoscaling.mode": "cron"}, "mode"),
    ({"workers.fleet.autoscaling.mode": "hpa", "workers.fleet.autoscaling.minReplicas": "0"}, "minReplicas"),
    ({"workers.fleet.pool": ""}, "workers.fleet.pool"),
    ({"workers.fleet.image.repository": ""}, "workers.fleet.image.repository"),
    ({"workers.fleet.metricsPort": "0", "workers.fleet.podMonitor.enabled": "true"}, "metricsPort"),
])
def test_a_fleet_that_cannot_work_is_refused_naming_the_value(template, sets, says):
    result = template(sets={**fleet(), **sets})
    assert result.returncode != 0 and says in result.stderr, result.stderr


HOW_TO = REPO / "docs" / "how-to" / "scaling-workers.md"


def how_to_block(starts: str) -> str:
    (block,) = [m.group(1) for m in re.finditer(r"```yaml\n(.*?)```", HOW_TO.read_text(), re.S)
                if m.group(1).startswith(starts)]
    return block


def test_the_how_tos_values_render_the_fleet_it_describes(render):
    values = yaml.safe_load(how_to_block("workers:\n  grants:"))
    objects = render(set_json={"workers": values["workers"]})
    scaled = only(objects, "ScaledObject", "cronoq-thumbs-workers", "media")
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (1, 20)
    assert scaled["spec"]["triggers"][0]["metadata"] == {
        "serverAddress": "http://prometheus-operated.monitoring.svc:9090", "query": QUERY, "threshold": "4"}
    assert only(objects, "PodMonitor", "cronoq-thumbs-workers", "media")["spec"]["podMetricsEndpoints"][0]["honorLabels"]
    assert only(objects, "Deployment", "cronoq-thumbs-workers", "media")["spec"]["template"]["spec"][
        "serviceAccountName"] == "thumbs-worker"
    assert only(objects, "RoleBinding", namespace="media", name="cronoq-worker-serve-thumbs-worker")


def test_the_how_tos_adapter_rule_asks_the_charts_query_for_the_hpas_pool(render):
    (rule,) = yaml.safe_load(how_to_block("# prometheus-adapter's rules"))
    hpa = only(render(sets=fleet(mode="hpa")), "HorizontalPodAutoscaler")
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]
    assert rule["name"]["as"] == metric["name"]
    # The adapter fills <<.LabelMatchers>> with the HPA's selector (and its namespace).
    matchers = ",".join(f'{k}="{v}"' for k, v in sorted(metric["selector"]["matchLabels"].items()))
    assert rule["metricsQuery"].replace("<<.LabelMatchers>>", matchers) == QUERY


@pytest.fixture(scope="session")
def keda_crd(kubectl) -> str:
    """KEDA's ScaledObject CRD (its published schema) on the test API server; cluster-scoped, kept."""
    kubectl("apply", "--server-side", "--field-manager=cronoq-tests", "-f", str(keda.scaledobject_crd()))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{keda.NAME}")
    wait_until(lambda: kubectl("get", "scaledobjects.keda.sh", "--all-namespaces", check=False).returncode == 0,
               timeout=30, what="ScaledObjects served by the API server")
    return keda.VERSION


def dry_run(kubectl, objects: list[dict], check: bool = True):
    return kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict", "--field-manager=helm",
                   "-f", "-", input=yaml.safe_dump_all(objects), check=check)


@pytest.mark.cluster
def test_the_scaledobject_is_valid_by_kedas_published_schema(render, kubectl, keda_crd, namespace):
    fleet_objects = [o for o in render(sets=fleet(namespace=namespace)) if o["kind"] in ("Deployment", "ScaledObject")
                     and o["metadata"]["namespace"] == namespace]
    applied = dry_run(kubectl, fleet_objects).stdout.splitlines()
    assert sorted(applied) == sorted([
        "deployment.apps/cronoq-thumbs-workers serverside-applied (server dry run)",
        "scaledobject.keda.sh/cronoq-thumbs-workers serverside-applied (server dry run)"]), applied

    # The same check refuses what KEDA's schema refuses, naming the field: the schema is really applied.
    scaled = only(fleet_objects, "ScaledObject")
    untargeted, unquoted = copy.deepcopy(scaled), copy.deepcopy(scaled)
    del untargeted["spec"]["scaleTargetRef"]
    unquoted["spec"]["triggers"][0]["metadata"]["threshold"] = 3  # KEDA's trigger metadata are strings
    for broken, says in ((untargeted, "spec.scaleTargetRef: Required value"),
                         (unquoted, ".spec.triggers[0].metadata.threshold: expected string")):
        refused = dry_run(kubectl, [broken], check=False)
        assert refused.returncode != 0 and says in refused.stderr, refused.stderr


@pytest.mark.cluster
def test_the_hpa_alternative_is_accepted_by_the_api_server(render, kubectl, namespace):
    objects = [o for o in render(sets=fleet(mode="hpa", namespace=namespace))
               if o["kind"] in ("Deployment", "HorizontalPodAutoscaler") and o["metadata"]["namespace"] == namespace]
    applied = dry_run(kubectl, objects).stdout.splitlines()
    assert sorted(applied) == sorted([
        "deployment.apps/cronoq-thumbs-workers serverside-applied (server dry run)",
        "horizontalpodautoscaler.autoscaling/cronoq-thumbs-workers serverside-applied (server dry run)"]), applied
