"""A task's spans (engine/spans.py): each made once, by the status write that ends it, with the
times the status records and ids that follow from the task."""
from __future__ import annotations

from typing import Any

from cronoq.api import TaskStatus
from cronoq.engine.spans import Link, dependency_links, spans
from cronoq.pod_protocol.tracecontext import TaskTrace

from tests.unit.builders import T0, at, make_task

PRODUCER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def attempt(number: int, outcome: str | None = None, **more: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"number": number, "job": f"t-a{number}", "trigger": "First" if number == 1 else "Retry",
                            "dispatchedAt": at(number * 10).isoformat()}
    if outcome is not None:
        base.update(outcome=outcome, startedAt=at(number * 10 + 1).isoformat(), finishedAt=at(number * 10 + 3).isoformat())
    return {**base, **more}


def status(phase: str, *attempts: dict[str, Any], reason: str | None = None, **more: Any) -> TaskStatus:
    conditions = [{"type": "Running", "status": "False", "reason": reason, "lastTransitionTime": T0.isoformat()}] \
        if reason else []
    return TaskStatus.model_validate({"phase": phase, "attempt": len(attempts), "attempts": list(attempts),
                                      "submittedAt": at(1).isoformat(), "conditions": conditions, **more})


TASK = make_task("t").spec(pool="p", key="k").obj()
TRACE = TaskTrace.of("uid-t")


def test_the_write_that_records_an_attempt_ends_its_wait_with_why_it_waited() -> None:
    made = spans(TASK, status("Queued", reason="RateLimited"), status("Running", attempt(1)))
    assert len(made) == 1
    wait = made[0]
    assert (wait.name, wait.trace_id, wait.span_id, wait.parent_id) == (
        "wait", TRACE.trace_id, TRACE.wait_span(1), TRACE.attempt_span(1))
    assert (wait.start, wait.end) == (at(1), at(10))
    assert wait.attributes["cronoq.wait.reason"] == "RateLimited"
    assert wait.attributes["cronoq.wait.phase"] == "Queued"
    assert wait.attributes["cronoq.attempt.number"] == 1


def test_a_failed_attempt_then_a_retry_then_success_end_their_spans_once_each() -> None:
    running = status("Running", attempt(1))
    retrying = status("Retrying", attempt(1, "Retryable", exitCode=3, reason="ExitCode"), reason="BackingOff")
    first = spans(TASK, running, retrying)
    assert [s.name for s in first] == ["attempt"]
    failed = first[0]
    assert (failed.span_id, failed.parent_id, failed.start, failed.end) == (
        TRACE.attempt_span(1), TRACE.task_span, at(1), at(13))
    assert failed.error == "ExitCode"
    assert {k: failed.attributes[k] for k in ("cronoq.attempt.number", "cronoq.attempt.outcome",
                                              "cronoq.attempt.reason", "cronoq.attempt.exit_code")} == {
        "cronoq.attempt.number": 1, "cronoq.attempt.outcome": "Retryable", "cronoq.attempt.reason": "ExitCode",
        "cronoq.attempt.exit_code": 3}
    assert failed.events == (("dispatched", at(10)), ("started", at(11)))
    assert spans(TASK, retrying, retrying) == ()  # nothing ends twice

    second = status("Running", retrying.attempts[0].to_dict(), attempt(2))
    wait = spans(TASK, retrying, second)
    assert [(s.name, s.start, s.end, s.attributes["cronoq.wait.reason"]) for s in wait] == [
        ("wait", at(13), at(20), "BackingOff")]  # from the end of the attempt before
    done = status("Succeeded", retrying.attempts[0].to_dict(), attempt(2, "Success", exitCode=0, reason="Completed"),
                  reason="Succeeded", finishedAt=at(24).isoformat())
    last = spans(TASK, second, done)
    assert [s.name for s in last] == ["attempt", "task"]
    ok, task = last
    assert (ok.span_id, ok.error, ok.attributes["cronoq.attempt.trigger"]) == (TRACE.attempt_span(2), None, "Retry")
    assert (task.span_id, task.parent_id, task.start, task.end, task.error) == (TRACE.task_span, None, T0, at(24), None)
    assert task.attributes["cronoq.task.phase"] == "Succeeded" and task.attributes["cronoq.task.attempts"] == 2
    assert task.attributes["cronoq.task.key"] == "k" and task.attributes["cronoq.task.pool"] == "p"


def test_a_push_attempt_carries_its_response_code_and_a_dead_letter_is_an_error() -> None:
    push = make_task("t").unset("image").spec(http={"url": "https://example.com/x"}).obj()
    before = status("Running", attempt(1))
    after = status("DeadLettered", attempt(1, "Permanent", responseCode=404, reason="HTTPStatus"),
                   reason="Failed", finishedAt=at(14).isoformat(), message="404 Not Found")
    ended, task = spans(push, before, after)
    assert ended.attributes["http.response.status_code"] == 404
    assert ended.attributes["cronoq.attempt.delivery"] == "Push"
    assert task.error == "404 Not Found"


def test_a_producers_span_is_the_task_spans_parent_and_an_unsampled_one_records_nothing() -> None:
    traced = make_task("t").obj()
    traced.metadata.annotations["cronoq.io/traceparent"] = PRODUCER
    done = status("Succeeded", attempt(1, "Success"), finishedAt=at(14).isoformat())
    made = spans(traced, status("Running", attempt(1)), done)
    assert {s.trace_id for s in made} == {"0af7651916cd43dd8448eb211c80319c"}
    assert made[-1].name == "task" and made[-1].parent_id == "b7ad6b7169203331"
    traced.metadata.annotations["cronoq.io/traceparent"] = PRODUCER[:-2] + "00"
    assert spans(traced, status("Running", attempt(1)), done) == ()


def test_a_finished_task_links_to_its_dependencies_spans() -> None:
    links = dependency_links({"b": TaskTrace.of("uid-b"), "a": TaskTrace.of("uid-a")})
    assert links == (Link(TaskTrace.of("uid-a").trace_id, TaskTrace.of("uid-a").task_span),
                     Link(TaskTrace.of("uid-b").trace_id, TaskTrace.of("uid-b").task_span))
    done = status("Succeeded", attempt(1, "Success"), finishedAt=at(14).isoformat())
    assert spans(TASK, status("Running", attempt(1)), done, links)[-1].links == links


def test_a_task_that_ends_without_running_has_only_its_task_span() -> None:
    made = spans(TASK, status("Queued"), status("Cancelled", finishedAt=at(5).isoformat()))
    assert [(s.name, s.start, s.end, s.error) for s in made] == [("task", T0, at(5), None)]


def test_a_fire_span_has_ids_from_the_schedule_and_the_fire_time_and_links_to_its_task() -> None:
    from datetime import timedelta

    from cronoq.api import TaskSchedule
    from cronoq.engine.spans import fire_ids, fire_span

    schedule = TaskSchedule.model_validate({
        "metadata": {"name": "nightly", "namespace": "shop", "uid": "uid-s"},
        "spec": {"every": "1h", "taskTemplate": {"spec": {"pool": "etl", "image": "x"}}}})
    fire = at(0)
    span = fire_span(schedule, fire, "nightly-1", "uid-t", None, fire + timedelta(seconds=2), "schedule")
    again = fire_span(schedule, fire, "nightly-1", "uid-t", None, fire + timedelta(seconds=2), "schedule")
    assert span is not None and span == again, "any leader sends the same span"
    assert (span.trace_id, span.span_id) == fire_ids("uid-s", fire)
    assert fire_ids("uid-s", fire + timedelta(hours=1)) != fire_ids("uid-s", fire)
    assert fire_ids("uid-other", fire) != fire_ids("uid-s", fire)
    assert len(span.trace_id) == 32 and len(span.span_id) == 16 and span.parent_id is None
    assert (span.name, span.start, span.end) == ("fire", fire, fire + timedelta(seconds=2))
    task = TaskTrace("uid-t")
    assert span.links == (Link(task.trace_id, task.task_span),)
    assert span.attributes["cronoq.schedule.uid"] == "uid-s" and span.attributes["cronoq.task.uid"] == "uid-t"
    assert span.attributes["cronoq.fire.trigger"] == "schedule" and span.attributes["cronoq.task.pool"] == "etl"
    # A Task created before its fire time by a clock a little off: the span does not end before it starts.
    early = fire_span(schedule, fire, "nightly-1", "uid-t", None, fire - timedelta(seconds=1), "schedule")
    assert early is not None and early.end == early.start
    # A Task in a producer's trace: the link goes to its task span there.
    traced = fire_span(schedule, fire, "nightly-1", "uid-t",
                       {"cronoq.io/traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, None,
                       "backfill")
    assert traced is not None and traced.links[0].trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
