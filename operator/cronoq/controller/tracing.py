"""The operator's traces (docs/how-to/tracing.md): engine.spans' ended spans, exported over OTLP
(HTTP/protobuf) by the OpenTelemetry SDK, the `otel` extra.

Opt-in by the standard environment: OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) or
OTEL_TRACES_EXPORTER (`otlp`, or `console` to print them) turns tracing on; OTEL_SDK_DISABLED=true
or OTEL_TRACES_EXPORTER=none keeps it off. Off, nothing of the SDK is imported and the applier
holds no Tracing: each landed status write costs one `is None`.

Spans are handed to the SDK's batch processor as already ended spans with the ids and times
engine.spans worked out, so the SDK never makes an id or reads a clock of its own; its exporter
sends them from a thread of its own (OTEL_BSP_* tune it), off the event loop.
"""
from __future__ import annotations

import logging
import os
from datetime import datetime
from typing import Any, Iterable, Mapping

from cronoq import __version__
from cronoq.engine.spans import Span

log = logging.getLogger(__name__)

SERVICE = "cronoq-operator"
"""service.name when OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names none."""
EXPORTERS = ("otlp", "console")


class TracingError(RuntimeError):
    """The OTEL_* environment asks for what the operator cannot do; the message says what."""


def wanted(environ: Mapping[str, str]) -> str | None:
    """The exporter the environment asks for (`otlp` or `console`), None for none."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        if exporter == "none":
            return None
        if exporter not in EXPORTERS:
            raise TracingError(f"OTEL_TRACES_EXPORTER={exporter}: the operator exports spans by otlp or console only")
        return exporter
    if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    return None


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000) * 1000


class Tracing:
    """Hands ended spans to the SDK's batch processor."""

    def __init__(self, processor: Any, resource: Any) -> None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self._trace, self._readable, self._event = trace, ReadableSpan, Event
        self._processor, self._resource = processor, resource
        self._scope = InstrumentationScope("cronoq", __version__)

    def _context(self, trace_id: str, span_id: str) -> Any:
        t = self._trace
        return t.SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=False,
                             trace_flags=t.TraceFlags(t.TraceFlags.SAMPLED))

    def emit(self, spans: Iterable[Span]) -> None:
        t = self._trace
        for span in spans:
            status = t.Status(t.StatusCode.ERROR, span.error) if span.error is not None else t.Status(t.StatusCode.UNSET)
            self._processor.on_end(self._readable(
                name=span.name, context=self._context(span.trace_id, span.span_id),
                parent=self._context(span.trace_id, span.parent_id) if span.parent_id else None,
                resource=self._resource, attributes=dict(span.attributes),
                events=[self._event(name, timestamp=_ns(at)) for name, at in span.events],
                links=[t.Link(self._context(link.trace_id, link.span_id)) for link in span.links],
                kind=t.SpanKind.INTERNAL, status=status, start_time=_ns(span.start), end_time=_ns(span.end),
                instrumentation_scope=self._scope))

    def shutdown(self) -> None:
        """Send what is queued (bounded by OTEL_BSP_EXPORT_TIMEOUT) and stop the exporter's thread."""
        self._processor.shutdown()


def start(environ: Mapping[str, str] | None = None) -> Tracing | None:
    """Tracing as the environment asks for it; None when it asks for none."""
    environ = os.environ if environ is None else environ
    exporter = wanted(environ)
    if exporter is None:
        return None
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if exporter == "otlp" and protocol != "http/protobuf":
        raise TracingError(f"OTLP protocol {protocol}: the operator sends spans over http/protobuf only "
                           "(a collector's port 4318)")
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError:
        raise TracingError("tracing is asked for (OTEL_*), but the OpenTelemetry SDK is not installed: "
                           "install cronoq with its otel extra (pip install 'cronoq[otel]')") from None
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        sink: SpanExporter = OTLPSpanExporter()
    else:
        sink = ConsoleSpanExporter()
    resource = Resource.create({"service.version": __version__})  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: SERVICE}))
    log.info("tracing on: spans go to %s", exporter, extra={"exporter": exporter, "service": resource.attributes.get(
        SERVICE_NAME)})
    return Tracing(BatchSpanProcessor(sink), resource)
