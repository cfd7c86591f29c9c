"""A task's trace context (pod_protocol/tracecontext.py): the W3C `traceparent` parsed as the
recommendation says, and ids that follow from the task alone, so any leader names the same spans."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from cronoq.pod_protocol.tracecontext import SpanContext, TaskTrace, asked, parse

PRODUCER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_valid_traceparent_parses_and_prints_back() -> None:
    context = parse(PRODUCER)
    assert context == SpanContext("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", sampled=True)
    assert context.traceparent == PRODUCER
    assert parse(PRODUCER[:-2] + "00") == SpanContext("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", False)


@pytest.mark.parametrize("text", [
    None, "", "garbage", PRODUCER.upper(), "ff" + PRODUCER[2:], PRODUCER + "-extra",
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
])
def test_an_invalid_traceparent_is_ignored(text: str | None) -> None:
    assert parse(text) is None


def test_a_later_version_may_carry_more_fields() -> None:
    assert parse("01" + PRODUCER[2:] + "-more") is not None


def test_the_trace_is_the_uid_and_the_spans_follow_from_it() -> None:
    uid = "6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"
    trace = TaskTrace.of(uid)
    assert trace.trace_id == "6f1a2b3c4d5e6f708192a3b4c5d6e7f8"
    assert trace.parent is None and trace.sampled
    again = TaskTrace.of(uid, {"other": "annotation"})
    assert (again.task_span, again.attempt_span(2), again.wait_span(2)) == (
        trace.task_span, trace.attempt_span(2), trace.wait_span(2))
    spans = {trace.task_span, *(trace.attempt_span(n) for n in range(1, 101)), *(trace.wait_span(n) for n in range(1, 101))}
    assert len(spans) == 201 and all(len(s) == 16 and int(s, 16) for s in spans)
    assert trace.attempt(3).traceparent == f"00-{trace.trace_id}-{trace.attempt_span(3)}-01"


def test_a_producers_annotation_puts_the_task_in_its_trace() -> None:
    trace = TaskTrace.of("uid-1", {"cronoq.io/traceparent": PRODUCER})
    assert trace.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert trace.parent is not None and trace.parent.span_id == "b7ad6b7169203331"
    assert trace.task_span == TaskTrace.of("uid-1").task_span  # the span ids are the task's still
    unsampled = TaskTrace.of("uid-1", {"cronoq.io/traceparent": PRODUCER[:-2] + "00"})
    assert not unsampled.sampled and unsampled.attempt(1).traceparent.endswith("-00")
    assert TaskTrace.of("uid-1", {"cronoq.io/traceparent": "nonsense"}).parent is None


@given(st.text(min_size=1, max_size=40))
def test_any_uid_gives_a_valid_trace_id(uid: str) -> None:
    trace = TaskTrace.of(uid)
    assert parse(trace.attempt(1).traceparent) == SpanContext(trace.trace_id, trace.attempt_span(1))


@pytest.mark.parametrize("environ, on", [
    ({}, False), ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, True), ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
])
def test_a_pull_worker_hands_its_handlers_the_context_when_its_environment_traces(environ, on) -> None:
    assert asked(environ) is on
