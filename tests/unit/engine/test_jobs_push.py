"""The Job of a push task's attempt (DESIGN §12): the push runner from the operator image, the
request in CRONOQ_HTTP, secrets only as `valueFrom` references, and the pool's pod settings.

The golden file tests/unit/data/job-push-golden.yaml is one representative push Job. After an
intended change, regenerate it and review the diff:

    CRONOQ_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/unit/engine/test_jobs_push.py -k golden
"""
from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from cronoq.api import Task, TaskPoolSpec
from cronoq.engine.jobs import build_job, push_request

from tests.unit.builders import make_task

GOLDEN = Path(__file__).parents[1] / "data" / "job-push-golden.yaml"
OPERATOR_IMAGE = "ghcr.io/cronoq/operator:0.1.0"
HOOK = {"url": "https://hooks.example.com/orders", "headers": [
    {"name": "Authorization", "secretKeyRef": {"name": "hook-token", "key": "header"}},
    {"name": "X-Team", "value": "billing"}]}


def push_task(http: dict[str, Any] | None = HOOK, **spec: Any) -> Task:
    builder = make_task("notify", "shop").unset("image").uid("4c1d2e3f-0000-4000-8000-00000000abcd")
    return builder.spec(**({"http": http} if http else {}), **spec).obj()


def container(job: dict[str, Any]) -> dict[str, Any]:
    (only,) = job["spec"]["template"]["spec"]["containers"]
    return only


def env(job: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(job)["env"]}


def build(task: Task, pool: TaskPoolSpec | None = None, **options: Any) -> dict[str, Any]:
    return build_job(task, pool, 1, "e1-a1", push_image=OPERATOR_IMAGE, **options)


def test_the_runner_from_the_operator_image_makes_the_request() -> None:
    job = build(push_task(payload={"order": 42}))
    assert container(job)["image"] == OPERATOR_IMAGE
    assert container(job)["command"] == ["cronoq", "push"] and "args" not in container(job)
    request = json.loads(env(job)["CRONOQ_HTTP"])
    assert request == {"url": "https://hooks.example.com/orders", "method": "POST", "timeout": 30.0, "headers": [
        {"name": "Authorization", "env": "CRONOQ_HTTP_HEADER_0"}, {"name": "X-Team", "value": "billing"}]}
    assert json.loads(env(job)["CRONOQ_PAYLOAD"]) == {"order": 42}  # the default body


def test_a_secret_header_reaches_the_pod_only_as_a_reference() -> None:
    job = build(push_task())
    assert env(job)["CRONOQ_HTTP_HEADER_0"] == {"secretKeyRef": {"name": "hook-token", "key": "header"}}
    assert "hook-token" not in env(job)["CRONOQ_HTTP"]


def test_body_success_codes_and_ca_bundle_are_handed_over() -> None:
    http = {"url": "http://svc.internal:8080/run", "method": "PUT", "body": "go", "timeout": "2m",
            "successCodes": [204, 200], "caBundle": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}}
    values = env(build(push_task(http)))
    assert json.loads(values["CRONOQ_HTTP"]) == {
        "url": "http://svc.internal:8080/run", "method": "PUT", "headers": [], "timeout": 120.0, "body": "go",
        "successCodes": [200, 204], "caEnv": "CRONOQ_HTTP_CA"}
    assert values["CRONOQ_HTTP_CA"] == {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}


def test_the_pool_image_does_not_run_a_push_task_but_its_pod_settings_apply() -> None:
    pool = TaskPoolSpec.model_validate({"template": {
        "image": "pool/worker:1", "command": ["work"], "args": ["--all"], "serviceAccountName": "hooks",
        "resources": {"limits": {"memory": "64Mi"}}, "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]}})
    job = build(push_task(), pool)
    assert container(job)["image"] == OPERATOR_IMAGE and container(job)["command"] == ["cronoq", "push"]
    assert "args" not in container(job)
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "hooks"
    assert container(job)["resources"] == {"limits": {"memory": "64Mi"}}
    assert env(job)["HTTPS_PROXY"] == "http://proxy:3128"


def test_a_pool_of_push_tasks_supplies_the_request_to_tasks_without_a_container() -> None:
    pool = TaskPoolSpec.model_validate({"template": {"http": HOOK}})
    bare = push_task(None, payload={"order": 7})
    assert push_request(bare, pool) == pool.template.http
    assert json.loads(env(build(bare, pool))["CRONOQ_HTTP"])["url"] == HOOK["url"]
    own = push_task({"url": "http://other.example/x"})
    assert push_request(own, pool).url == "http://other.example/x"  # the task's own http replaces the pool's
    container_task = push_task(None, image="worker:1")
    assert push_request(container_task, pool) is None
    assert container(build(container_task, pool))["image"] == "worker:1"


def test_a_container_task_is_unchanged() -> None:
    job = build(make_task().obj())
    assert "CRONOQ_HTTP" not in env(job) and container(job)["image"] != OPERATOR_IMAGE


def test_a_push_pod_gets_no_heartbeat_sidecar_the_runner_heartbeats_itself() -> None:
    job = build(push_task(), lease_ttl=timedelta(seconds=30), sidecar_image=OPERATOR_IMAGE)
    assert "initContainers" not in job["spec"]["template"]["spec"]
    assert env(job)["CRONOQ_LEASE_TTL"] == "30"


@pytest.mark.parametrize("spec, words", [
    ({"http": HOOK, "image": "worker:1"}, "either http or a container"),
    ({"http": {"url": "ftp://files.example/x"}}, "spec.http.url"),
    ({"http": {"url": "https:///no-host"}}, "with a host"),
    ({"http": {"url": "https://x.example", "method": "GET", "body": "no"}}, "GET"),
    ({"http": {"url": "https://x.example", "headers": [{"name": "Idempotency-Key", "value": "mine"}]}}, "set by cronoq"),
    ({"http": {"url": "https://x.example", "headers": [{"name": "A", "value": "v",
                                                         "secretKeyRef": {"name": "s", "key": "k"}}]}}, "exactly one"),
])
def test_the_models_refuse_what_the_api_server_refuses(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        make_task().unset("image").spec(**spec).obj()


def golden_job() -> dict[str, Any]:
    pool = TaskPoolSpec.model_validate({"template": {
        "image": "ghcr.io/acme/worker:1.4", "serviceAccountName": "hooks",
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "podMetadata": {"labels": {"team": "shop"}}}})
    task = push_task({**HOOK, "timeout": "10s", "successCodes": [200, 202]}, pool="hooks",
                     payload={"order": 42, "total": "19.90"}, podMetadata={"annotations": {"kwok.cronoq.io/delay": "1s"}})
    return build_job(task, pool, 2, "e3-a2", push_image=OPERATOR_IMAGE, lease_ttl=timedelta(seconds=30),
                     job_retention=timedelta(hours=1))


def test_golden_push_job() -> None:
    job = golden_job()
    if os.environ.get("CRONOQ_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text("# Generated by tests/unit/engine/test_jobs_push.py (see its docstring to regenerate).\n"
                          + yaml.safe_dump(job, sort_keys=False, allow_unicode=True))
    assert yaml.safe_load(GOLDEN.read_text()) == job


def restricted(security_context: dict[str, Any]) -> bool:
    """What Pod Security `restricted` asks of a container whose pod sets nothing."""
    return (security_context.get("allowPrivilegeEscalation") is False
            and security_context.get("capabilities", {}).get("drop") == ["ALL"]
            and security_context.get("runAsNonRoot") is True and security_context.get("runAsUser") != 0
            and security_context.get("seccompProfile") == {"type": "RuntimeDefault"})


def test_the_push_runner_and_the_heartbeat_sidecar_pass_pod_security_restricted() -> None:
    assert restricted(container(build(push_task(), lease_ttl=timedelta(seconds=30)))["securityContext"])
    job = build_job(make_task().obj(), None, 1, "e1-a1", lease_ttl=timedelta(seconds=30), sidecar_image=OPERATOR_IMAGE)
    (sidecar,) = job["spec"]["template"]["spec"]["initContainers"]
    assert restricted(sidecar["securityContext"])


def test_the_push_runner_takes_proxy_variables_from_its_pool_only() -> None:
    pool = TaskPoolSpec.model_validate({"template": {"env": [{"name": "HTTPS_PROXY", "value": "http://corp:3128"},
                                                             {"name": "NO_PROXY", "value": ".svc"}]}})
    task = push_task(env=[{"name": "HTTPS_PROXY", "value": "http://attacker:8080"},
                          {"name": "http_proxy", "value": "http://attacker:8080"}, {"name": "MINE", "value": "1"}])
    variables = env(build(task, pool))
    assert (variables["HTTPS_PROXY"], variables["NO_PROXY"], variables["MINE"]) == ("http://corp:3128", ".svc", "1")
    assert "http_proxy" not in variables
    assert not {"HTTPS_PROXY", "http_proxy"} & env(build(task)).keys()
    # A container task keeps its own environment: it runs its own code anyway.
    assert env(build_job(make_task().spec(env=[{"name": "HTTPS_PROXY", "value": "x"}]).obj(), None, 1, "e1-a1"))[
        "HTTPS_PROXY"] == "x"


def test_the_push_runner_drops_the_tasks_proxy_and_resolver_variables_in_any_case() -> None:
    # urllib and aiohttp read Http_Proxy as http_proxy; the resolver variables steer name lookups.
    pool = TaskPoolSpec.model_validate({"template": {"env": [{"name": "Https_Proxy", "value": "http://corp:3128"},
                                                             {"name": "RES_OPTIONS", "value": "timeout:2"}]}})
    steering = ["Http_Proxy", "hTTps_PROXY", "no_Proxy", "All_Proxy", "LOCALDOMAIN", "res_options", "HostAliases"]
    task = push_task(env=[{"name": n, "value": "http://attacker:8080"} for n in steering] + [{"name": "MINE", "value": "1"}])
    assert env(build(task)).keys() >= {"MINE"} and not {n.upper() for n in env(build(task))} & {n.upper() for n in steering}
    variables = env(build(task, pool))
    assert {n: v for n, v in variables.items() if n.upper() in {s.upper() for s in steering}} == {
        "Https_Proxy": "http://corp:3128", "RES_OPTIONS": "timeout:2"}


def test_a_push_pod_without_heartbeats_gets_no_service_account_token() -> None:
    assert build(push_task(), lease_ttl=timedelta(0))["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    # With heartbeats the runner renews its Lease with the pod's token.
    assert "automountServiceAccountToken" not in build(push_task(), lease_ttl=timedelta(seconds=30))["spec"]["template"]["spec"]


def test_only_the_pool_lets_a_push_task_reach_link_local_addresses() -> None:
    """Issue 26, point 6: the switch is the pool's (its writers are admins); a Task has no such field."""
    allowed = TaskPoolSpec.model_validate({"allowLinkLocal": True})
    assert json.loads(env(build(push_task(), allowed))["CRONOQ_HTTP"])["allowLinkLocal"] is True
    assert "allowLinkLocal" not in json.loads(env(build(push_task(), TaskPoolSpec()))["CRONOQ_HTTP"])
    assert "allowLinkLocal" not in json.loads(env(build(push_task()))["CRONOQ_HTTP"])
    # The API server prunes the unknown field from a Task; the model ignores it too.
    assert "allowLinkLocal" not in json.loads(env(build(push_task(allowLinkLocal=True)))["CRONOQ_HTTP"])
