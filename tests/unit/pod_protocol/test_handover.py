"""The hand-over (cronoq.pod_protocol.handover): what the operator writes on a Task when it hands an
attempt to a pull worker, the worker parses back equal, by the same field names."""
from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from cronoq.api import Task
from cronoq.api.model import Model
from cronoq.api.task import Attempt, Checkpoint, Dependency, TaskSpec, TaskStatus
from cronoq.engine.attempts import reconcile
from cronoq.engine.plan import Plan
from cronoq.pod_protocol import Terms
from cronoq.pod_protocol.tracecontext import TaskTrace
from cronoq.pod_protocol.handover import RUNNING, AttemptRecord, HandOver, Wire

from tests.unit.builders import T0, at, make_task, observe, settings, with_status

WORKERS = {"delivery": "Workers", "leaseTTL": "10s"}


def run(task: Task, now=T0, **seen) -> Plan:
    """The operator's decision on `task` in a pool of workers (engine/attempts)."""
    seen.setdefault("worker_alive_until", at(100))
    return reconcile(task, settings(task, WORKERS), observe(now=now, **seen), random.Random(0))


def handed(task: Task, worker: str) -> Task:
    """`task` as the operator's write leaves it once it handed its attempt to `worker`."""
    plan = run(task, admit=True, worker=worker)
    assert plan.status is not None, plan
    return with_status(task, plan.status)


def worker_task() -> Task:
    return make_task("t").unset("image").spec(payload={"n": [1, 2]}, leaseTTL="2500ms", timeout="90s",
                                              dependsOn=[{"task": "extract"}, {"task": "scan"}]).obj()


def test_what_the_operator_hands_over_the_worker_parses_back_equal() -> None:
    task = handed(worker_task(), worker="w-1")
    task = with_status(task, task.status.model_copy(update={"checkpoint": Checkpoint(attempt=1, data='{"at":3}')}))
    task = task.model_copy(update={"metadata": task.metadata.model_copy(
        update={"labels": {"cronoq.io/handler": "mail"}})})
    written = task.to_dict()  # what the operator's write puts on the Task

    seen = HandOver.of_task(written)

    (attempt,) = task.status.attempts
    assert seen == HandOver(
        uid="uid-t", name="t", attempt=1,
        current=AttemptRecord(number=1, lease_id=attempt.lease_id, worker="w-1", dispatched_at=attempt.dispatched_at,
                              terms=Terms(lease_ttl=2.5, timeout=90.0)),
        phase=RUNNING, payload={"n": [1, 2]}, lease_ttl="2s500ms", depends_on=("extract", "scan"),
        first_attempt_at=written["status"]["firstAttemptAt"], checkpoint='{"at":3}', handler="mail",
        traceparent=TaskTrace.of("uid-t").attempt(1).traceparent)
    assert seen.current is not None and seen.current.lease_id == "e1-a1" and seen.current.dispatched_at == T0
    assert seen.open and seen.handed_to("w-1") and not seen.handed_to("w-2")


def test_an_ended_attempt_and_a_cancel_are_read_as_the_operator_wrote_them() -> None:
    task = handed(worker_task(), worker="w-1")
    ended = run(task, now=T0, worker_alive_until=T0)  # the worker's Lease lapsed: the attempt ends
    task = with_status(task, ended.status)
    task = task.model_copy(update={"spec": task.spec.model_copy(update={"cancel": True})})

    seen = HandOver.of_task(task.to_dict())

    (record,) = task.status.attempts
    assert record.outcome is not None and seen.current is not None
    assert (seen.current.outcome, seen.current.reason) == (record.outcome.value, record.reason)
    assert seen.cancel and not seen.open and not seen.handed_to("w-1")


def test_a_task_before_its_first_attempt_hands_nothing_over() -> None:
    seen = HandOver.of_task(make_task("t").spec(payload=None).obj().to_dict())
    assert (seen.attempt, seen.current, seen.phase, seen.open) == (0, None, None, False)


@pytest.mark.parametrize("model, fields", [
    (TaskSpec, {"payload": Wire.PAYLOAD, "lease_ttl": Wire.LEASE_TTL, "depends_on": Wire.DEPENDS_ON,
                "cancel": Wire.CANCEL}),
    (Dependency, {"task": Wire.DEPENDENCY_TASK}),
    (TaskStatus, {"phase": Wire.PHASE, "attempt": Wire.ATTEMPT, "attempts": Wire.ATTEMPTS, "worker": Wire.WORKER,
                  "first_attempt_at": Wire.FIRST_ATTEMPT_AT, "checkpoint": Wire.CHECKPOINT}),
    (Checkpoint, {"data": Wire.CHECKPOINT_DATA}),
    (Attempt, {"number": Wire.NUMBER, "lease_id": Wire.LEASE_ID, "worker": Wire.WORKER,
               "dispatched_at": Wire.DISPATCHED_AT, "outcome": Wire.OUTCOME, "reason": Wire.REASON,
               "lease_ttl_ms": Terms.LEASE_TTL_MS, "timeout_ms": Terms.TIMEOUT_MS}),
])
def test_the_operators_models_name_their_fields_by_the_hand_overs_wire_names(model: type[Model],
                                                                             fields: dict[str, str]) -> None:
    assert {name: model.model_fields[name].alias for name in fields} == fields


def test_a_record_the_api_server_would_refuse_is_read_without_raising_past_its_number() -> None:
    record = AttemptRecord.of_record({"number": 2, "leaseId": None, "dispatchedAt": "yesterday", "outcome": "",
                                      "worker": 7})
    assert record == AttemptRecord(number=2)
    naive = AttemptRecord.of_record({"number": 1, "dispatchedAt": "2026-12-03T12:00:00"})
    assert naive.dispatched_at == datetime(2026, 12, 3, 12, tzinfo=timezone.utc), "a time without a zone is UTC"
