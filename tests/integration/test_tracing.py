"""The operator's traces end to end (issue 55 item 1, docs/how-to/tracing.md): an operator with the
standard OTEL_* environment sends its spans over OTLP to a real Jaeger (built from hack/jaeger) on
loopback, and the test reads back what Jaeger stored through its query API: a task that fails once
and then succeeds, in its producer's trace, a push task, a pull task whose real worker's handler
makes a span of its own (a child of the attempt span, sent by the worker), and a schedule's fire
span linked to its Task. Parentage (producer → task → attempt → wait, attempt → handler) and
attributes (attempt number, outcome, reason, exit and response codes) are checked against the
Tasks' own statuses, and the ids the attempts' Jobs and push requests carry are the ones Jaeger
stored."""
from __future__ import annotations

import json
from typing import Any

import pytest

from cronoq.api import GROUP, VERSION
from cronoq.pod_protocol.tracecontext import TaskTrace

from tests.integration.test_push import plays as push_plays, push_task, runner_says
from tests.support.jaeger import Jaeger
from tests.support.waiting import wait_until
from tests.unit.worker.test_push_runner import Receiver, push

PRODUCER_TRACE, PRODUCER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory):
    server = Jaeger(tmp_path_factory.mktemp("jaeger"))
    yield server
    server.stop()


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span["tags"]}


def parent(span: dict[str, Any]) -> tuple[str, str] | None:
    refs = [(r["traceID"], r["spanID"]) for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
    return refs[0] if refs else None


def stored(jaeger: Jaeger, trace_id: str, count: int) -> dict[str, Any]:
    """The trace once Jaeger holds `count` spans of it."""
    found: dict[str, Any] = {}

    def holds() -> bool:
        found["trace"] = jaeger.trace(trace_id)
        return found["trace"] is not None and len(found["trace"]["spans"]) >= count
    wait_until(holds, timeout=60, what=f"{count} spans of trace {trace_id} in Jaeger")
    return found["trace"]


def by_name(trace: dict[str, Any]) -> dict[tuple[str, int | None], dict[str, Any]]:
    return {(s["operationName"], tags(s).get("cronoq.attempt.number")): s for s in trace["spans"]}


def test_a_retried_task_and_a_push_task_are_traced_as_jaeger_stores_them(own, jaeger, tmp_path) -> None:
    own.operator.env = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp, "OTEL_BSP_SCHEDULE_DELAY": "200",
                        "OTEL_SERVICE_NAME": "cronoq-test-operator"}
    own.operator.start()
    own.pool(retry={"maxAttempts": 3, "initialBackoff": "0s", "jitter": "none"})

    # A task a producer submitted inside its own trace; its first attempt fails, its second succeeds.
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task",
            "metadata": {"name": "retried", "annotations": {
                "cronoq.io/traceparent": f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"}},
            "spec": {"image": "example.invalid/task:1", "podMetadata": {"annotations": {
                "kwok.cronoq.io/outcome-a1": "Fail", "kwok.cronoq.io/exit-code-a1": "3",
                "kwok.cronoq.io/outcome-a2": "Succeed", "kwok.cronoq.io/delay": "100ms"}}}}
    own.custom.create_namespaced_custom_object(GROUP, VERSION, own.namespace, "tasks", body)
    # A push task, its attempt played with what the real push runner reports for a 200.
    ok_code, ok = runner_says(tmp_path, "/ok")
    push_task(own, "notify", {"url": "https://hooks.example.com/orders", "timeout": "10s"},
              push_plays(1, ok_code, ok))

    retried = own.wait_phase("retried", "Succeeded")
    notify = own.wait_phase("notify", "Succeeded")
    retried_uid = own.get("retried")["metadata"]["uid"]
    notify_uid = own.get("notify")["metadata"]["uid"]

    # The retried task: producer → task → attempts 1 and 2 → their waits, all in the producer's trace.
    trace = stored(jaeger, PRODUCER_TRACE, 5)
    (tmp_path / "retried-trace.json").write_text(json.dumps(trace, indent=1))  # to read when it fails
    ids = TaskTrace(retried_uid)
    spans = by_name(trace)
    assert sorted(spans) == sorted([("task", None), ("attempt", 1), ("attempt", 2), ("wait", 1), ("wait", 2)])
    task = spans[("task", None)]
    assert task["spanID"] == ids.task_span
    assert parent(task) == (PRODUCER_TRACE, PRODUCER_SPAN)
    assert trace["processes"][task["processID"]]["serviceName"] == "cronoq-test-operator"
    assert tags(task)["cronoq.task.phase"] == "Succeeded" and tags(task)["cronoq.task.attempts"] == 2
    assert tags(task)["cronoq.task.uid"] == retried_uid
    records = {a["number"]: a for a in retried["attempts"]}
    for number in (1, 2):
        attempt, wait = spans[("attempt", number)], spans[("wait", number)]
        assert attempt["spanID"] == ids.attempt_span(number)
        assert parent(attempt) == (PRODUCER_TRACE, task["spanID"])
        assert parent(wait) == (PRODUCER_TRACE, attempt["spanID"])
        record, seen = records[number], tags(attempt)
        assert seen["cronoq.attempt.outcome"] == record["outcome"]
        assert seen["cronoq.attempt.reason"] == record["reason"]
        assert seen["cronoq.attempt.exit_code"] == record["exitCode"]
        assert seen["cronoq.attempt.delivery"] == "Job"
        assert attempt["startTime"] <= wait["startTime"] + wait["duration"] <= attempt["startTime"] + attempt["duration"]
    # The first attempt was dispatched when the operator first saw the task: it waited for nothing
    # it could name. The retry waited in the phase and for the reason the status said before it.
    assert "cronoq.wait.reason" not in tags(spans[("wait", 1)])
    assert tags(spans[("wait", 2)])["cronoq.wait.phase"] == "Retrying"
    assert tags(spans[("wait", 2)])["cronoq.wait.reason"] == "BackingOff"
    assert (records[1]["outcome"], records[1]["exitCode"], records[2]["outcome"]) == ("Retryable", 3, "Success")
    assert tags(spans[("attempt", 1)]).get("error") is True
    assert "error" not in tags(spans[("attempt", 2)])

    # The attempt's container carries the attempt span's context, the one Jaeger stored.
    job = own.batch.read_namespaced_job("retried-a2", own.namespace)
    env = {e.name: e.value for e in job.spec.template.spec.containers[0].env or []}
    assert env["TRACEPARENT"] == f"00-{PRODUCER_TRACE}-{spans[('attempt', 2)]['spanID']}-01"

    # The push task: its own trace (its uid), the attempt with the response code.
    push_ids = TaskTrace(notify_uid)
    pushed = by_name(stored(jaeger, push_ids.trace_id, 3))
    assert parent(pushed[("task", None)]) is None
    attempt = pushed[("attempt", 1)]
    assert parent(attempt) == (push_ids.trace_id, push_ids.task_span)
    assert tags(attempt)["http.response.status_code"] == notify["attempts"][0]["responseCode"] == 200
    assert tags(attempt)["cronoq.attempt.delivery"] == "Push"
    # ... and the request the push runner sends from that Job's environment carries the span's context.
    push_job = own.batch.read_namespaced_job("notify-a1", own.namespace)
    push_env = {e.name: e.value for e in push_job.spec.template.spec.containers[0].env or []}
    assert push_env["TRACEPARENT"] == f"00-{push_ids.trace_id}-{attempt['spanID']}-01"
    with Receiver() as receiver:
        code, message, _ = push(tmp_path, {"url": f"{receiver.url}/ok", "timeout": 5},
                                extra={"TRACEPARENT": push_env["TRACEPARENT"]})
    assert code == 0, json.dumps(message)
    (request,) = receiver.requests
    assert ("traceparent", push_env["TRACEPARENT"]) in [(k.lower(), v) for k, v in request["headers"]]


def test_without_the_otel_environment_jobs_carry_no_traceparent(own) -> None:
    own.operator.start()
    own.pool()
    own.task("plain", delay="100ms")
    own.wait_phase("plain", "Succeeded")
    job = own.batch.read_namespaced_job("plain-a1", own.namespace)
    assert "TRACEPARENT" not in {e.name for e in job.spec.template.spec.containers[0].env or []}
    assert "tracing on" not in own.operator.log_path.read_text()


def test_a_schedule_fire_is_a_span_linked_to_the_task_it_made(own, jaeger) -> None:
    from datetime import datetime, timezone

    from cronoq.engine.spans import fire_ids

    from tests.support.schedules import Schedules

    own.operator.env = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp, "OTEL_BSP_SCHEDULE_DELAY": "200",
                        "OTEL_SERVICE_NAME": "cronoq-test-operator"}
    own.operator.start()
    own.pool()
    sc = Schedules(own)
    sc.create("tick", every="5s", plays={"delay": "100ms"})
    (at, name), *_ = wait_until(lambda: sc.fires("tick"), timeout=60, what="the schedule's first fire")
    schedule_uid = sc.get("tick")["metadata"]["uid"]
    task = own.get(name)
    fire = datetime.fromtimestamp(at, timezone.utc)
    trace_id, span_id = fire_ids(schedule_uid, fire)

    (span,) = stored(jaeger, trace_id, 1)["spans"]
    assert (span["operationName"], span["spanID"], parent(span)) == ("fire", span_id, None)
    seen = tags(span)
    assert (seen["cronoq.schedule.uid"], seen["cronoq.task.name"], seen["cronoq.task.uid"]) == (
        schedule_uid, name, task["metadata"]["uid"])
    assert seen["cronoq.fire.trigger"] == "schedule"
    assert span["startTime"] == at * 1_000_000, "the span starts at the fire time (Jaeger keeps microseconds)"
    ids = TaskTrace(task["metadata"]["uid"])
    links = [(r["traceID"], r["spanID"]) for r in span.get("references", []) if r["refType"] == "FOLLOWS_FROM"]
    assert links == [(ids.trace_id, ids.task_span)], span.get("references")


def test_a_pull_workers_handler_span_is_a_child_of_the_attempt_span(own, jaeger, api, kubeconfig, tmp_path) -> None:
    from tests.support.workers import Workers, served_task, wait_worker

    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp, "OTEL_BSP_SCHEDULE_DELAY": "200"}
    own.operator.env = {**otel, "OTEL_SERVICE_NAME": "cronoq-test-operator"}
    own.operator.start()
    own.pool(delivery="Workers", leaseTTL="3s")
    workers = Workers(own.namespace, kubeconfig, tmp_path)
    try:
        workers.start("w-traced", env={**otel, "OTEL_SERVICE_NAME": "test-worker"})
        wait_worker(api, own.namespace, "w-traced")
        served_task(own, "pulled", {"span": "handle-order"})
        status = own.wait_phase("pulled", "Succeeded", timeout=60)
    finally:
        workers.stop()
    uid = own.get("pulled")["metadata"]["uid"]
    ids = TaskTrace(uid)
    assert json.loads(status["output"]) == {"traceparent": f"00-{ids.trace_id}-{ids.attempt_span(1)}-01"}, \
        "the handler was given the attempt span's context"

    trace = stored(jaeger, ids.trace_id, 4)
    (tmp_path / "pulled-trace.json").write_text(json.dumps(trace, indent=1))
    spans = by_name(trace)
    assert sorted(spans) == sorted([("task", None), ("attempt", 1), ("wait", 1), ("handle-order", None)])
    attempt, handler = spans[("attempt", 1)], spans[("handle-order", None)]
    assert attempt["spanID"] == ids.attempt_span(1)
    assert tags(attempt)["cronoq.attempt.delivery"] == "Workers"
    assert tags(attempt)["cronoq.attempt.worker"] == "w-traced"
    assert parent(handler) == (ids.trace_id, attempt["spanID"]), "the handler's span is the attempt's child"
    assert trace["processes"][handler["processID"]]["serviceName"] == "test-worker"
    assert tags(handler)["handler.task"] == "pulled"
    assert attempt["startTime"] <= handler["startTime"] <= attempt["startTime"] + attempt["duration"]
