"""Push tasks end to end (DESIGN §12, issue 18): the real operator builds each attempt's Job
for the push runner, and kwok plays the attempts with termination messages the real runner
wrote (it is run here against a local HTTP server first), so the operator judges exactly what
`cronoq push` reports."""
from __future__ import annotations

import json
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from cronoq.api import GROUP, VERSION

from tests.support.waiting import wait_until
from tests.unit.worker.test_push_runner import Receiver, push

OPERATOR_IMAGE_PREFIX = "ghcr.io/cronoq/operator:"


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def runner_says(tmp_path: Path, path: str, timeout: float = 5) -> tuple[int, str]:
    """(exit code, termination message) of the real push runner answered at `path`."""
    with Receiver() as receiver:
        code, message, _ = push(tmp_path, {"url": f"{receiver.url}{path}", "timeout": timeout}, payload={"n": 1})
    return code, json.dumps(message)


def push_task(cq, name: str, http: dict[str, Any] | None, plays: dict[str, str], **spec: Any) -> dict:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name},
            "spec": {**({"http": http} if http else {}), "podMetadata": {"annotations": plays}, **spec}}
    return cq.custom.create_namespaced_custom_object(GROUP, VERSION, cq.namespace, "tasks", body)


def plays(attempt: int, code: int, message: str) -> dict[str, str]:
    return {f"kwok.cronoq.io/outcome-a{attempt}": "Succeed" if code == 0 else "Fail",
            f"kwok.cronoq.io/exit-code-a{attempt}": str(code), f"kwok.cronoq.io/message-a{attempt}": message,
            "kwok.cronoq.io/delay": "100ms"}


def test_503_with_retry_after_then_200_succeeds_with_the_code_of_each_attempt(cq, tmp_path) -> None:
    busy_code, busy = runner_says(tmp_path, "/later-in-3s")
    ok_code, ok = runner_says(tmp_path, "/ok")
    assert (busy_code, ok_code) == (1, 0)
    cq.pool(retry={"maxAttempts": 3, "initialBackoff": "0s", "jitter": "none"})
    cq.core.create_namespaced_secret(cq.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="hook-token"), string_data={"header": "Bearer s3cret"}))
    http = {"url": "https://hooks.example.com/orders", "timeout": "10s",
            "headers": [{"name": "Authorization", "secretKeyRef": {"name": "hook-token", "key": "header"}}]}
    push_task(cq, "notify", http, {**plays(1, busy_code, busy), **plays(2, ok_code, ok)}, payload={"order": 42})

    retrying = cq.wait_status("notify", lambda s: s.get("phase") == "Retrying", "Retrying after attempt 1")
    status = cq.wait_phase("notify", "Succeeded")

    first, second = status["attempts"]
    assert (first["outcome"], first["reason"], first["responseCode"]) == ("Retryable", "HTTPStatus", 503)
    assert "HTTP 503 Service Unavailable" in first["message"]
    assert (second["outcome"], second["reason"], second["responseCode"]) == ("Success", "Completed", 200)
    assert status["output"] == '{"received":true}'
    # The backoff is 0s: only the Retry-After hint (3s) kept attempt 2 from starting at once.
    next_at = ts(retrying["nextAttemptAt"])
    assert (next_at - ts(first["finishedAt"])).total_seconds() >= 3
    job2 = next(j for j in cq.jobs("notify") if j.metadata.name == "notify-a2")
    assert job2.metadata.creation_timestamp >= next_at.replace(microsecond=0)

    (container,) = job2.spec.template.spec.containers
    assert container.image.startswith(OPERATOR_IMAGE_PREFIX) and container.command == ["cronoq", "push"]
    env = {e.name: e for e in container.env}
    assert json.loads(env["CRONOQ_HTTP"].value)["url"] == "https://hooks.example.com/orders"
    ref = env["CRONOQ_HTTP_HEADER_0"].value_from.secret_key_ref
    assert (ref.name, ref.key) == ("hook-token", "header")
    assert "s3cret" not in json.dumps(cq.batch.api_client.sanitize_for_serialization(job2))


def test_404_fails_at_once(cq, tmp_path) -> None:
    code, message = runner_says(tmp_path, "/missing")
    cq.pool(retry={"maxAttempts": 3, "initialBackoff": "0s"})
    push_task(cq, "gone", {"url": "http://hooks.example.com/gone"}, plays(1, code, message))

    status = cq.wait_phase("gone", "Failed")

    (attempt,) = status["attempts"]
    assert (attempt["outcome"], attempt["reason"], attempt["responseCode"], attempt["exitCode"]) == \
        ("Permanent", "HTTPStatus", 404, 2)
    assert "HTTP 404 Not Found" in status["message"]


def test_timeouts_and_network_errors_are_retried_then_dead_lettered(cq, tmp_path) -> None:
    slow_code, slow = runner_says(tmp_path, "/slow", timeout=1)
    with socket.socket() as bound:  # bound, never listening: connections to it are refused
        bound.bind(("127.0.0.1", 0))
        refused_code, refused, _ = push(tmp_path, {"url": f"http://127.0.0.1:{bound.getsockname()[1]}/", "timeout": 5})
    cq.pool(retry={"maxAttempts": 2, "initialBackoff": "0s"})
    push_task(cq, "unreachable", {"url": "http://hooks.example.com/slow", "timeout": "1s"},
              {**plays(1, slow_code, slow), **plays(2, refused_code, json.dumps(refused))})

    status = cq.wait_phase("unreachable", "DeadLettered")

    first, second = status["attempts"]
    assert (first["outcome"], first["reason"]) == ("Retryable", "Timeout") and "responseCode" not in first
    assert (second["outcome"], second["reason"]) == ("Retryable", "NetworkError") and "responseCode" not in second
    assert "Cannot connect to host" in second["message"]


def test_a_pool_of_push_tasks_gives_the_request_and_tasks_bring_payloads(cq, tmp_path) -> None:
    code, message = runner_says(tmp_path, "/ok")
    cq.pool("hooks", template={"http": {"url": "https://hooks.example.com/orders"}, "serviceAccountName": "default"})
    push_task(cq, "order-7", None, plays(1, code, message), pool="hooks", payload={"order": 7})

    status = cq.wait_phase("order-7", "Succeeded")

    assert status["attempts"][0]["responseCode"] == 200
    (job,) = cq.jobs("order-7")
    (container,) = job.spec.template.spec.containers
    assert container.command == ["cronoq", "push"] and job.spec.template.spec.service_account_name == "default"
    assert json.loads({e.name: e.value for e in container.env}["CRONOQ_HTTP"])["url"] == \
        "https://hooks.example.com/orders"


def test_a_push_task_succeeds_in_a_namespace_enforcing_pod_security_restricted(cq, kubectl, tmp_path) -> None:
    """The push runner's container passes `restricted` (issue 26, point 6): its pod is admitted."""
    ok_code, ok = runner_says(tmp_path, "/ok")
    kubectl("label", "namespace", cq.namespace, "pod-security.kubernetes.io/enforce=restricted")
    cq.pool(retry={"maxAttempts": 1}, startTimeout="15s")
    push_task(cq, "notify", {"url": "https://hooks.example.com/orders"}, plays(1, ok_code, ok))
    status = cq.wait_phase("notify", "Succeeded", "Failed", "DeadLettered")
    assert status["phase"] == "Succeeded", status


METADATA = "http://169.254.169.254/latest/meta-data/"
LINK_LOCAL = "http://169.254.0.1:9/hook"
"""Link-local, and no metadata service: the allowed request must not reach a real one where the tests run."""


def played_by_the_runner(cq, tmp_path: Path, probe: str, pool: str, url: str) -> tuple[str, tuple[int, str]]:
    """The CRONOQ_HTTP the operator built for a task of `pool`, and what the real runner reports
    when handed exactly that (the probe's pod never starts, so only the runner here makes the request)."""
    push_task(cq, probe, {"url": url, "timeout": "1s"}, {"kwok.cronoq.io/outcome": "Pending"}, pool=pool)
    job = wait_until(lambda: next(iter(cq.jobs(probe)), None), timeout=30, what=f"the Job of {probe}")
    (container,) = job.spec.template.spec.containers
    request = {e.name: e.value for e in container.env}["CRONOQ_HTTP"]
    code, message, _ = push(tmp_path, json.loads(request))
    return request, (code, json.dumps(message))


def test_a_push_to_a_metadata_address_fails_unless_the_pool_allows_link_local(cq, tmp_path) -> None:
    """Issue 26, point 6: without the pool's switch the runner refuses the address before any
    connection, Permanent with a reason naming the switch; with it the request is made."""
    cq.pool("hooks", retry={"maxAttempts": 1})
    cq.pool("link-local-ok", retry={"maxAttempts": 1}, allowLinkLocal=True)
    refused_request, refused = played_by_the_runner(cq, tmp_path, "probe-refused", "hooks", METADATA)
    allowed_request, allowed = played_by_the_runner(cq, tmp_path, "probe-allowed", "link-local-ok", LINK_LOCAL)
    assert "allowLinkLocal" not in json.loads(refused_request)
    assert json.loads(allowed_request)["allowLinkLocal"] is True

    push_task(cq, "steal", {"url": METADATA, "timeout": "1s"}, plays(1, *refused), pool="hooks")
    push_task(cq, "allowed", {"url": LINK_LOCAL, "timeout": "1s"}, plays(1, *allowed), pool="link-local-ok")

    status = cq.wait_phase("steal", "Failed")
    (attempt,) = status["attempts"]
    assert (attempt["outcome"], attempt["reason"], attempt["exitCode"]) == ("Permanent", "AddressNotAllowed", 2)
    assert "169.254.169.254 is a cloud metadata address" in status["message"]
    assert "unless their TaskPool sets spec.allowLinkLocal: true" in status["message"]
    # With the switch the request went out: whatever answered (nothing, or a network's egress
    # filter), it was not the runner's refusal.
    status = cq.wait_phase("allowed", "Failed", "DeadLettered", "Succeeded")
    (attempt,) = status["attempts"]
    assert attempt["reason"] in ("Timeout", "NetworkError", "HTTPStatus", "Completed"), attempt
    assert "allowLinkLocal" not in status.get("message", "")
