"""Values and their schema: every value commented, every key known to the schema, wrong types
and unknown keys refused with a message naming the key, and `helm lint --strict` clean."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.chart import values_doc
from tests.chart.chart import CHART, DATA, REPO, run_helm

VALUES = CHART / "values.yaml"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_helm_lint_is_clean(helm_binary, strict):
    result = run_helm(helm_binary, "lint", str(CHART), *(["--strict"] if strict else []))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_helm_lint_is_clean_with_every_feature_on(helm_binary):
    result = run_helm(helm_binary, "lint", "--strict", str(CHART),
                      f"--values={DATA / 'all-features.yaml'}")
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_every_value_has_a_comment_above_it():
    uncommented = [f"line {row.line}: {row.key}" for row in values_doc.rows() if not row.commented]
    assert not uncommented, f"values without a comment: {uncommented}"


def test_the_comment_check_finds_an_uncommented_value():
    text = "# Replicas.\nreplicaCount: 2\nimage:\n  repository: x\n  # Tag.\n  tag: ''\n"
    assert [(r.key, r.commented) for r in values_doc.rows(text)] == [
        ("replicaCount", True), ("image.repository", False), ("image.tag", True)]


def walk(schema: dict, path: str = ""):
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{key}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")


def test_schema_closes_every_object_it_describes():
    # An object with named properties takes no other key. Objects without properties are maps
    # (their values typed by additionalProperties) or Kubernetes objects passed through verbatim
    # (affinity terms, tolerations, env, the pool's pod template), which the API server validates.
    open_objects = [path for path, node in walk(SCHEMA)
                    if node.get("type") == "object" and "properties" in node and node.get("additionalProperties") is not False]
    assert not open_objects, f"objects that accept unknown keys: {open_objects}"
    passthrough = [path for path, node in walk(SCHEMA)
                   if node.get("type") == "object" and "properties" not in node and "additionalProperties" not in node]
    assert set(passthrough) <= {
        ".global", ".operator.extraEnv[]", ".podSecurityContext.seLinuxOptions", ".podSecurityContext.sysctls[]",
        ".securityContext.seLinuxOptions", ".tolerations[]", ".affinity.nodeAffinity", ".affinity.podAffinity",
        ".affinity.podAntiAffinity", ".topologySpreadConstraints[]", ".metrics.serviceMonitor.relabelings[]",
        ".metrics.serviceMonitor.metricRelabelings[]", ".defaultPool.template",
        ".archive.volume",  # a pod volume source (the API server judges it)
        # the worker fleet's container and pod settings (Kubernetes objects, passed through)
        ".workers.fleet.env[]", ".workers.fleet.resources", ".workers.fleet.podSecurityContext",
        ".workers.fleet.securityContext",
        ".defaultPool.notifications[]",  # a TaskPool's receivers (the CRD's schema judges them)
        ".defaultPool.concurrencyKeyLimits[]",  # a TaskPool's key limits (likewise)
    }, passthrough


def test_every_schema_property_has_a_description():
    missing = [path for path, node in walk(SCHEMA) if path and not path.endswith(("[]", "*")) and "description" not in node]
    assert not missing, missing


@pytest.mark.parametrize("args, named", [
    (["--set=replicaCount=two"], "/replicaCount"),
    (["--set=image.pullPolicy=Sometimes"], "/image/pullPolicy"),
    (["--set-json=watchNamespaces=\"team-a\""], "/watchNamespaces"),
    (["--set=metrics.serviceMonitor.enabled=yes-please"], "/metrics/serviceMonitor/enabled"),
    (["--set=defaultPool.concurrency=-1"], "/defaultPool/concurrency"),
    (["--set=defaultPool.leaseTTL=30 seconds"], "/defaultPool/leaseTTL"),
    (["--set=podSecurityContext.runAsUser=root"], "/podSecurityContext/runAsUser"),
], ids=["integer", "enum", "list", "boolean", "minimum", "duration", "uid"])
def test_schema_refuses_a_wrong_type_naming_the_key(template, args, named):
    result = template_with(template, args)
    assert result.returncode != 0, f"helm template accepted {args}"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert f"'{named}'" in result.stderr, result.stderr


@pytest.mark.parametrize("key, parent", [
    ("replicas", "''"),
    ("image.name", "'/image'"),
    ("metrics.serviceMonitor.intervall", "'/metrics/serviceMonitor'"),
    ("taskPods.leaseRole.enable", "'/taskPods/leaseRole'"),
    ("defaultPool.retry.maxAttempt", "'/defaultPool/retry'"),
    ("securityContext.runAsRoot", "'/securityContext'"),
])
def test_schema_refuses_an_unknown_key_naming_it(template, key, parent):
    result = template_with(template, [f"--set={key}=1"])
    assert result.returncode != 0, f"helm template accepted the unknown key {key}"
    leaf = key.rsplit(".", 1)[-1]
    assert f"at {parent}: additional properties '{leaf}' not allowed" in result.stderr, result.stderr


def template_with(template, extra: list[str]):
    sets = {}
    set_json = {}
    for arg in extra:
        flag, _, assignment = arg.partition("=")
        key, _, value = assignment.partition("=")
        if flag == "--set":
            sets[key] = value
        else:
            set_json[key] = json.loads(value)
    return template(sets=sets, set_json=set_json)


def test_default_pool_values_mirror_the_taskpool_crd():
    # The chart's defaultPool is a TaskPool spec plus create/name/namespaces: when the CRD gains
    # or loses a field, the values and the schema must follow.
    crd = yaml.safe_load((REPO / "crds" / "taskpool.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    pool = SCHEMA["properties"]["defaultPool"]["properties"]
    assert set(pool) - {"create", "name", "namespaces"} == set(spec)
    assert set(pool["retry"]["properties"]) == set(spec["retry"]["properties"])
    defaults = yaml.safe_load(VALUES.read_text())["defaultPool"]
    assert set(defaults) - {"create", "name", "namespaces"} == set(spec)
    # The values' defaults are the CRD's, so creating the pool changes nothing but the concurrency one asks for.
    for field in ("leaseTTL", "keyRetention", "concurrency"):
        assert str(defaults[field]) == str(spec[field]["default"]), field
    for field, value in defaults["retry"].items():
        if "default" in spec["retry"]["properties"][field]:
            assert value == spec["retry"]["properties"][field]["default"], field
