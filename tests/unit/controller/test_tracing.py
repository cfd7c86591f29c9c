"""The operator's exporter (controller/tracing.py): on only when the OTEL_* environment asks, the
SDK never imported otherwise, and engine.spans' spans handed to the SDK with their own ids, times,
parents, links and status."""
from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import StatusCode

from cronoq.controller import tracing
from cronoq.engine.spans import Link, Span

from tests.unit.builders import at


@pytest.mark.parametrize("environ, exporter", [
    ({}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "otlp"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, "otlp"),
    ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, None),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, None),
])
def test_the_environment_turns_tracing_on(environ: dict[str, str], exporter: str | None) -> None:
    assert tracing.wanted(environ) == exporter


def test_what_the_operator_cannot_do_is_refused_by_name() -> None:
    with pytest.raises(tracing.TracingError, match="OTEL_TRACES_EXPORTER=zipkin"):
        tracing.wanted({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(tracing.TracingError, match="grpc"):
        tracing.start({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_with_tracing_off_the_operator_never_imports_the_sdk() -> None:
    code = ("import sys; from cronoq.controller import runtime, tracing; assert tracing.start({}) is None; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_spans_reach_the_sdk_with_their_own_ids_times_parents_links_and_status() -> None:
    exported = InMemorySpanExporter()
    t = tracing.Tracing(SimpleSpanProcessor(exported), Resource({"service.name": "cronoq-operator"}))
    trace_id = "6f1a2b3c4d5e6f708192a3b4c5d6e7f8"
    t.emit([
        Span("attempt", trace_id, "00000000000000a1", "00000000000000f0", at(1), at(3),
             {"cronoq.attempt.number": 1, "cronoq.attempt.exit_code": 3}, events=(("started", at(2)),),
             error="ExitCode"),
        Span("task", trace_id, "00000000000000f0", None, at(0), at(4), {"cronoq.task.phase": "Succeeded"},
             links=(Link("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"),)),
    ])
    t.shutdown()
    attempt, task = exported.get_finished_spans()
    assert attempt.context.trace_id == int(trace_id, 16) and attempt.context.span_id == 0xA1
    assert attempt.parent is not None and attempt.parent.span_id == 0xF0
    assert (attempt.start_time, attempt.end_time) == (int(at(1).timestamp()) * 10**9, int(at(3).timestamp()) * 10**9)
    assert attempt.status.status_code == StatusCode.ERROR and attempt.status.description == "ExitCode"
    assert dict(attempt.attributes or {}) == {"cronoq.attempt.number": 1, "cronoq.attempt.exit_code": 3}
    assert [(e.name, e.timestamp) for e in attempt.events] == [("started", int(at(2).timestamp()) * 10**9)]
    assert task.parent is None and task.status.status_code == StatusCode.UNSET
    assert [(link.context.trace_id, link.context.span_id) for link in task.links] == [
        (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)]
    assert task.resource.attributes["service.name"] == "cronoq-operator"
