"""The pod protocol round trip: the Job `build_job` makes, read back as the pod reads it (the SDK's
env parsing, the heartbeat sidecar's, the push runner's request), gives the values the operator
meant; and the Lease the attempt then creates is the one the operator watches for."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, strategies as st

from cronoq.engine import naming
from cronoq.engine.jobs import HEARTBEAT_CONTAINER, build_job, build_lease
from cronoq.pod_protocol import PushHeader, PushRequest
from cronoq.push import request_from
from cronoq.worker.env import AttemptEnv
from cronoq.worker.lease import Owner, lease_body
from cronoq.worker.runner import Context

from tests.unit.builders import make_task

UID = "4c1d2e3f-0000-4000-8000-00000000abcd"
PAYLOAD = {"order": 42, "total": "19.90", "note": "für Q1", "items": [1, None, True]}
SECRETS = {("hook-token", "header"): "Bearer s3cret"}
CONFIG_MAPS = {("ca", "ca.crt"): "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}


def pod_environ(job: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The environment the kubelet gives `container`: values as they are, references resolved
    from the Job's namespace, this test's Secrets and ConfigMaps. An unknown reference fails."""
    environ = {}
    for entry in container["env"]:
        if "value" in entry:
            environ[entry["name"]] = entry["value"]
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            assert source["fieldRef"] == {"fieldPath": "metadata.namespace"}
            environ[entry["name"]] = job["metadata"]["namespace"]
        elif "secretKeyRef" in source:
            environ[entry["name"]] = SECRETS[source["secretKeyRef"]["name"], source["secretKeyRef"]["key"]]
        else:
            ref = source["configMapKeyRef"]
            environ[entry["name"]] = CONFIG_MAPS[ref["name"], ref["key"]]
    return environ


def task_container(job: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == naming.TASK_CONTAINER)


def test_the_sdk_reads_back_the_attempt_the_operator_meant_and_creates_the_lease_it_watches() -> None:
    task = make_task("nightly", "billing").uid(UID).spec(payload=PAYLOAD).obj()
    job = build_job(task, None, 3, "e7-a3", lease_ttl=timedelta(seconds=12.5), sidecar_image="cronoq:1")

    env = AttemptEnv.from_environ(pod_environ(job, task_container(job)))
    assert (env.task_id, env.task_name, env.namespace, env.attempt) == (UID, "nightly", "billing", 3)
    assert (env.lease_name, env.lease_id, env.lease_ttl) == (naming.lease_name("nightly", 3), "e7-a3", 12.5)
    assert env.payload == PAYLOAD

    (sidecar,) = job["spec"]["template"]["spec"]["initContainers"]
    assert sidecar["name"] == HEARTBEAT_CONTAINER
    heartbeat = AttemptEnv.from_environ(pod_environ(job, sidecar))
    assert heartbeat == AttemptEnv(**{**env.__dict__, "payload": None})  # the sidecar needs no payload

    created = lease_body(env.namespace, env.lease_name, env.lease_id, Owner(env.task_name, env.task_id, env.attempt),
                         env.lease_ttl)
    assert created == build_lease(task, 3, "e7-a3", timedelta(seconds=12.5))
    assert created["metadata"]["labels"][naming.LEASE_ID] == job["metadata"]["labels"][naming.LEASE_ID]


def test_without_heartbeats_the_sdk_reads_a_ttl_of_zero_and_no_payload() -> None:
    job = build_job(make_task("once").uid(UID).obj(), None, 1, "e1-a1")
    env = AttemptEnv.from_environ(pod_environ(job, task_container(job)))
    assert (env.lease_ttl, env.payload, env.attempt) == (0.0, None, 1)


def test_the_push_runner_reads_back_the_request_the_operator_meant() -> None:
    http = {"url": "https://hooks.example.com/orders?x=1", "method": "PUT", "body": "go", "timeout": "2m",
            "successCodes": [204, 200], "caBundle": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}},
            "headers": [{"name": "Authorization", "secretKeyRef": {"name": "hook-token", "key": "header"}},
                        {"name": "X-Team", "value": "billing"}]}
    task = make_task("notify", "shop").unset("image").uid(UID).spec(http=http, payload=PAYLOAD).obj()
    job = build_job(task, None, 2, "e3-a2", lease_ttl=timedelta(seconds=30), push_image="cronoq:1")
    environ = pod_environ(job, task_container(job))
    env = AttemptEnv.from_environ(environ)
    context = Context(id=env.task_id, name=env.task_name, namespace=env.namespace, attempt=env.attempt,
                      payload=env.payload, lease_name=env.lease_name, lease_id=env.lease_id, lease_ttl=env.lease_ttl)

    request = request_from(environ, context)
    assert (request.url, request.method, request.body, request.timeout) == (http["url"], "PUT", b"go", 120.0)
    assert request.success_codes == {200, 204} and request.ca_bundle == CONFIG_MAPS["ca", "ca.crt"]
    headers = dict(request.headers)
    assert headers["Authorization"] == "Bearer s3cret" and headers["X-Team"] == "billing"
    assert (headers["Idempotency-Key"], headers["X-Cronoq-Task"], headers["X-Cronoq-Attempt"]) == \
        (UID, "shop/notify", "2")


def test_a_push_request_without_a_body_sends_the_payload() -> None:
    task = make_task("notify", "shop").unset("image").uid(UID).spec(http={"url": "http://svc/"}, payload=PAYLOAD).obj()
    job = build_job(task, None, 1, "e1-a1", push_image="cronoq:1")
    environ = pod_environ(job, task_container(job))
    env = AttemptEnv.from_environ(environ)
    context = Context(id=env.task_id, name=env.task_name, namespace=env.namespace, attempt=env.attempt,
                      payload=env.payload, lease_name=env.lease_name, lease_id=env.lease_id, lease_ttl=env.lease_ttl)
    request = request_from(environ, context)
    assert (request.method, request.timeout, request.success_codes) == ("POST", 30.0, frozenset())
    assert ("Content-Type", "application/json") in request.headers
    assert request.body == '{"order":42,"total":"19.90","note":"für Q1","items":[1,null,true]}'.encode()


headers = st.builds(PushHeader, name=st.text(min_size=1), value=st.text(),
                    env=st.none() | st.text(min_size=1)).map(
    lambda h: PushHeader(h.name, "", h.env) if h.env is not None else h)


@given(st.builds(PushRequest, url=st.text(), method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
                 headers=st.lists(headers, max_size=4).map(tuple),
                 timeout=st.floats(min_value=0.001, max_value=3600), body=st.none() | st.text(),
                 success_codes=st.lists(st.integers(100, 599), max_size=4).map(tuple),
                 ca_env=st.none() | st.text(min_size=1), allow_link_local=st.booleans()))
def test_a_push_request_survives_its_json(sent: PushRequest) -> None:
    assert PushRequest.from_json(sent.to_json()) == sent


@pytest.mark.parametrize("text, field", [
    ('{"method": "GET"}', "url is missing"),
    ('["a list"]', "not a JSON object"),
    ('{"url": 7}', "url has the wrong type"),
    ('{"url": "u", "timeout": "5"}', "timeout has the wrong type"),
    ('{"url": "u", "timeout": -1}', "timeout must be"),
    ('{"url": "u", "headers": [{"value": "v"}]}', "headers[0].name is missing"),
    ('{"url": "u", "headers": ["h"]}', "headers[0] is not an object"),
    ('{"url": "u", "successCodes": ["200"]}', "successCodes must be whole numbers"),
    ('{"url": "u", "allowLinkLocal": "yes"}', "allowLinkLocal must be true or false"),
    ("{", "not JSON"),
])
def test_a_bad_push_request_names_the_field(text: str, field: str) -> None:
    with pytest.raises(ValueError) as err:
        PushRequest.from_json(text)
    assert field in str(err.value)
