"""The pure half of failure notifications (engine/notify.py, issue 55 item 2): which receivers a
finished task still owes, the event's id and content, the signature and the delays."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from pydantic import ValidationError

from cronoq.api import Receiver, TaskPoolSpec, TaskStatus
from cronoq.api.notify import NotificationResult, NotifyFormat
from cronoq.engine import notify
from cronoq.engine.decide import Finished

from tests.unit.builders import T0, at, make_task, with_status


def ended(phase: str = "DeadLettered", *, attempt: int = 3, finished: float = 10, notifications=(),
          message: str | None = "exit 1") -> object:
    attempts = [{"number": n, "leaseId": f"e1-a{n}", "job": f"t-a{n}", "trigger": "First" if n == 1 else "Retry",
                 "outcome": "Retryable", "reason": "Error", "exitCode": 1, "finishedAt": at(n).isoformat(),
                 "durationMs": 100} for n in range(1, attempt + 1)]
    status = TaskStatus.model_validate({"phase": phase, "attempt": attempt, "attempts": attempts,
                                        "finishedAt": at(finished).isoformat(), "message": message,
                                        "notifications": list(notifications), "epoch": 1})
    return with_status(make_task("t").spec(pool="p", payload={"secret": "s3"}).obj(), status)


def receiver(name: str = "ops", outcomes=("DeadLettered", "Failed"), **more) -> Receiver:
    return Receiver.model_validate({"name": name, "url": "https://hooks.example.com/x", "outcomes": list(outcomes), **more})


def test_the_id_is_the_uid_the_phase_and_the_attempt_and_only_finished_tasks_have_one():
    assert notify.task_event_id(ended()) == "uid-t/DeadLettered/3"
    assert notify.task_event_id(ended("Failed", attempt=1)) == "uid-t/Failed/1"
    running = with_status(make_task("t").obj(), TaskStatus.model_validate({"phase": "Running", "attempt": 1}))
    assert notify.task_event_id(running) is None
    assert notify.owed([receiver()], running, at(11)) == ()


def test_only_receivers_that_want_the_phase_and_have_nothing_recorded_are_owed():
    ops, wins = receiver("ops"), receiver("wins", outcomes=("Succeeded",))
    assert notify.owed([ops, wins], ended(), at(11)) == (ops,)
    assert notify.owed([ops, wins], ended("Succeeded"), at(11)) == (wins,)
    done = {"receiver": "ops", "id": "uid-t/DeadLettered/3", "result": "Delivered", "attempts": 2,
            "at": at(12).isoformat()}
    assert notify.owed([ops], ended(notifications=[done]), at(13)) == ()
    # A record of an earlier ending (the task was retried by hand since) owes the new one.
    earlier = {**done, "id": "uid-t/DeadLettered/1"}
    assert notify.owed([ops], ended(notifications=[earlier]), at(13)) == (ops,)
    gave_up = {**done, "result": "GaveUp"}
    assert notify.owed([ops], ended(notifications=[gave_up]), at(13)) == ()


def test_a_task_that_finished_long_ago_is_owed_nothing():
    task = ended(finished=0)
    assert notify.owed([receiver()], task, T0 + notify.WITHIN) == (receiver(),)
    assert notify.owed([receiver()], task, T0 + notify.WITHIN + timedelta(seconds=1)) == ()


def test_a_keyed_duplicate_is_owed_nothing():
    task = ended()
    assert task.status is not None
    duplicate = with_status(task, task.status.model_copy(update={"duplicate_of": "original"}))
    assert notify.owed([receiver()], duplicate, at(11)) == ()


def test_the_store_keeps_which_receivers_are_recorded_for_this_ending():
    done = {"receiver": "ops", "id": "uid-t/DeadLettered/3", "result": "Delivered", "attempts": 1,
            "at": at(12).isoformat()}
    other = {**done, "receiver": "old", "id": "uid-t/DeadLettered/1"}
    assert Finished.of(ended(notifications=[done, other])).notified == ("ops",)
    assert Finished.of(ended()).notified == ()


def test_recording_replaces_the_receivers_older_entry():
    first = notify.entry("ops", "uid/DeadLettered/1", False, 8, at(1))
    again = notify.entry("ops", "uid/DeadLettered/3", True, 2, at(2))
    other = notify.entry("wins", "uid/DeadLettered/3", True, 1, at(2))
    assert notify.recorded((first, other), again) == (other, again)
    assert again.result is NotificationResult.DELIVERED and first.result is NotificationResult.GAVE_UP


def test_delays_double_from_a_second_up_to_a_minute():
    assert [notify.delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]


def test_the_cloud_event_says_what_ended_and_why_but_never_the_payload_or_output():
    event = notify.cloud_event(notify.Note.of(ended()))
    assert event["specversion"] == "1.0" and event["id"] == "uid-t/DeadLettered/3"
    assert event["type"] == "io.cronoq.task.deadlettered"
    assert event["source"] == "/apis/cronoq.io/v1alpha1/namespaces/ns/tasks/t"
    assert event["time"] == "2026-12-03T12:00:10Z"
    data = event["data"]
    assert data["task"] == {"namespace": "ns", "name": "t", "uid": "uid-t", "pool": "p"}
    assert (data["phase"], data["attempt"], data["reason"], data["message"]) == ("DeadLettered", 3, "Error", "exit 1")
    assert [a["number"] for a in data["attempts"]] == [1, 2, 3]
    assert data["attempts"][0] == {"number": 1, "outcome": "Retryable", "reason": "Error", "exitCode": 1,
                                   "durationMs": 100, "finishedAt": "2026-12-03T12:00:01Z"}
    assert data["describe"] == "cronoq describe t -n ns"
    assert "s3" not in json.dumps(event)


def test_the_history_is_the_newest_attempts_and_the_message_is_bounded():
    data = notify.cloud_event(notify.Note.of(ended(attempt=9, message="x" * 4000)))["data"]
    assert [a["number"] for a in data["attempts"]] == [5, 6, 7, 8, 9]
    assert len(data["message"]) == notify.MESSAGE


def test_the_slack_message_is_one_escaped_text():
    message = notify.slack_message(notify.Note.of(ended(message="<b> & co")))
    assert list(message) == ["text"]
    text = message["text"]
    assert text.startswith(":skull: Task *ns/t* (pool p) ended *DeadLettered* after 3 attempts (Error)")
    assert "&lt;b&gt; &amp; co" in text and "<b>" not in text
    assert "`cronoq describe t -n ns`" in text and "uid-t/DeadLettered/3" in text
    assert json.loads(notify.body(notify.Note.of(ended()), NotifyFormat.SLACK)) == notify.slack_message(
        notify.Note.of(ended()))


def test_a_signature_verifies_for_its_key_body_and_time_only():
    body = notify.body(notify.Note.of(ended()), NotifyFormat.CLOUD_EVENT)
    now = int(T0.timestamp())
    header = notify.sign(b"k3y", body, now)
    assert header.startswith(f"t={now},v1=") and len(header.split("v1=")[1]) == 64
    assert notify.verify(b"k3y", header, body, T0)
    assert notify.verify(b"k3y", header, body, T0 + notify.TOLERANCE)
    assert not notify.verify(b"k3y", header, body, T0 + notify.TOLERANCE + timedelta(seconds=1))  # a replay
    assert not notify.verify(b"other", header, body, T0)
    assert not notify.verify(b"k3y", header, body + b" ", T0)
    forged = header.replace(f"t={now}", f"t={now + 60}")  # a fresh time on an old signature
    assert not notify.verify(b"k3y", forged, body, at(60))
    assert not notify.verify(b"k3y", "v1=abc", body, T0) and not notify.verify(b"k3y", "garbage", body, T0)


def test_a_pool_names_receivers_with_bounds():
    pool = TaskPoolSpec.model_validate({"notifications": [
        {"name": "ops", "url": "https://hooks.example.com/x", "outcomes": ["DeadLettered"],
         "signingKey": {"name": "hook", "key": "hmac"}, "format": "Slack"}]})
    (ops,) = pool.notifications
    assert (ops.max_attempts, ops.timeout, ops.format) == (8, timedelta(seconds=10), NotifyFormat.SLACK)
    for bad in ({"outcomes": []}, {"outcomes": ["Cancelled"]}, {"url": "ftp://x"}, {"maxAttempts": 0}, {"maxAttempts": 21},
                {"timeout": "2m"}, {"name": "Not_A_Label"}):
        with pytest.raises(ValidationError):
            Receiver.model_validate({"name": "ops", "url": "https://h/x", "outcomes": ["Failed"], **bad})


# --------------------------------------------------------------------------- schedules and namespace receivers

def paused(since: float = 10, *, notifications=(), reason: str = "ConsecutiveFailures", status: str = "True"):
    from cronoq.api import TaskSchedule
    return TaskSchedule.model_validate({
        "metadata": {"name": "nightly", "namespace": "shop", "uid": "uid-s", "generation": 1},
        "spec": {"every": "1h", "pauseAfterFailures": 3, "taskTemplate": {"spec": {"pool": "etl", "image": "x"}}},
        "status": {"consecutiveFailures": 3, "notifications": list(notifications), "conditions": [
            {"type": "Paused", "status": status, "reason": reason, "message": "3 Tasks in a row ended Failed",
             "lastTransitionTime": at(since).isoformat()}]}})


def test_a_pause_has_an_id_from_the_schedule_uid_and_the_transition_time():
    id = f"uid-s/Paused/{int(at(10).timestamp())}"
    assert notify.schedule_event_id(paused()) == id
    assert notify.schedule_event_id(paused()) == notify.schedule_event_id(paused()), "any leader computes the same"
    assert notify.schedule_event_id(paused(20)) != id, "a later pause (after a resume) is another notification"
    assert notify.schedule_event_id(paused(status="False", reason="Resumed")) is None
    assert len(id) <= 128


def test_only_receivers_that_want_schedule_paused_and_have_no_record_are_owed_a_pause():
    ops = receiver("ops", outcomes=("SchedulePaused",))
    tasks_only = receiver("tasks")
    assert notify.schedule_owed([ops, tasks_only], paused(), at(11)) == (ops,)
    done = {"receiver": "ops", "id": notify.schedule_event_id(paused()), "result": "Delivered", "attempts": 1,
            "at": at(12).isoformat()}
    assert notify.schedule_owed([ops], paused(notifications=[done]), at(13)) == ()
    assert notify.schedule_owed([ops], paused(notifications=[{**done, "id": "uid-s/Paused/1"}]), at(13)) == (ops,)
    assert notify.schedule_owed([ops], paused(0), T0 + notify.WITHIN + timedelta(seconds=1)) == ()
    assert notify.schedule_owed([ops], paused(status="False", reason="Resumed"), at(11)) == ()


def test_the_pause_event_names_the_schedule_its_pool_and_how_to_resume():
    note = notify.PauseNote.of(paused())
    event = json.loads(notify.body(note, NotifyFormat.CLOUD_EVENT))
    assert (event["type"], event["subject"], event["id"]) == (
        "io.cronoq.schedule.paused", "shop/nightly", notify.schedule_event_id(paused()))
    assert event["source"] == "/apis/cronoq.io/v1alpha1/namespaces/shop/taskschedules/nightly"
    data = event["data"]
    assert data["schedule"] == {"namespace": "shop", "name": "nightly", "uid": "uid-s", "pool": "etl"}
    assert (data["reason"], data["consecutiveFailures"], data["pauseAfterFailures"]) == ("ConsecutiveFailures", 3, 3)
    assert data["resume"] == "cronoq schedule resume nightly -n shop"
    slack = json.loads(notify.body(note, NotifyFormat.SLACK))["text"]
    assert "*shop/nightly*" in slack and "paused after 3 failed Tasks" in slack and note.id in slack


def test_a_pools_receivers_are_its_own_then_the_namespaces_its_own_winning_a_name():
    mine = receiver("ops", outcomes=("Failed",))
    wide = receiver("ops", outcomes=("DeadLettered",), scope="Namespace")
    chat = receiver("chat", scope="Namespace")
    other = receiver("chat", scope="Namespace", url="https://other.example.com/")
    local = receiver("local")
    pools = {"etl": ((mine, local), False), "alerts": ((wide, chat), True), "zz": ((other,), False)}
    serving = notify.receivers(pools, "etl")
    assert [(s.receiver, s.pool, s.allow_link_local) for s in serving] == [
        (mine, "etl", False), (local, "etl", False), (chat, "alerts", True)]
    # A pool naming none, or not there at all, hears the namespace's; a Pool-scoped receiver serves only its own.
    assert [(s.receiver, s.pool) for s in notify.receivers(pools, "batch")] == [(wide, "alerts"), (chat, "alerts")]
    assert [s.receiver for s in notify.receivers(pools, "alerts")] == [wide, chat]
    many = {f"p{i:02}": (tuple(receiver(f"r{i}-{j}", scope="Namespace") for j in range(8)), False) for i in range(4)}
    assert len(notify.receivers(many, "p00")) == 16, "bounded"


def test_a_receiver_scope_is_pool_or_namespace():
    assert receiver().scope.value == "Pool"
    with pytest.raises(ValidationError):
        receiver(scope="Cluster")
