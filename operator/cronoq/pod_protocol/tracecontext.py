"""A task's trace context (W3C Trace Context), worked out from the task alone: its trace id and the
span ids of the task and of each attempt follow from the task's uid (and the attempt's number), so
whoever emits a span (any leader, after any failover) and whoever joins one (the attempt's
container through TRACEPARENT, a push request's `traceparent` header, a pull worker's handler)
names the same ids without asking anyone. A producer's trace context on the Task (the annotation
ANNOTATION) makes the task span its child: then the trace id is the producer's.

Standard library only: the operator, the push runner and the pull worker import it.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Mapping

ANNOTATION = "cronoq.io/traceparent"
"""A Task annotation a producer may set to its own `traceparent` (W3C): the task's span becomes a
child of that span, in the producer's trace."""
ENV = "TRACEPARENT"
"""The attempt container's variable holding the attempt span's `traceparent` (OpenTelemetry SDKs
read it as the parent of what the code traces, given the environment propagator)."""
HEADER = "traceparent"
"""The header a push request carries the attempt span's context in."""

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


@dataclass(frozen=True, slots=True)
class SpanContext:
    """A span's place in a trace, as `traceparent` carries it: ids as lowercase hex."""

    trace_id: str
    span_id: str
    sampled: bool = True

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


def parse(text: str | None) -> SpanContext | None:
    """A `traceparent` value, None when it is not a valid one (then it is ignored, as the W3C
    recommendation says a receiver does)."""
    if not text:
        return None
    found = _TRACEPARENT.match(text.strip())
    if found is None:
        return None
    version, trace_id, span_id, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return SpanContext(trace_id, span_id, sampled=bool(int(flags, 16) & 1))


def asked(environ: Mapping[str, str]) -> bool:
    """Whether an OTEL_* environment turns traces on (an OTLP endpoint, or an exporter other than
    none, and the SDK not disabled): a pull worker then hands its handlers the attempt's context."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def _id(*parts: object, length: int) -> str:
    text = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:length]
    return text if text.strip("0") else "1".rjust(length, "0")  # an all-zero id is invalid


def producer(annotations: Mapping[str, str] | None) -> SpanContext | None:
    """The producer's trace context a Task carries, if any (a valid one)."""
    return parse((annotations or {}).get(ANNOTATION))


@dataclass(frozen=True, slots=True)
class TaskTrace:
    """The ids of one task's spans: its trace, its task span, each attempt's span and the span of
    the wait that came before each attempt."""

    uid: str
    parent: SpanContext | None = None
    """The producer's span (the annotation), the task span's parent."""

    @classmethod
    def of(cls, uid: str, annotations: Mapping[str, str] | None = None) -> TaskTrace:
        return cls(uid, producer(annotations))

    @property
    def trace_id(self) -> str:
        if self.parent is not None:
            return self.parent.trace_id
        digits = self.uid.replace("-", "").lower()  # a Kubernetes uid is a UUID: 128 bits already
        return digits if re.fullmatch(r"[0-9a-f]{32}", digits) and digits != _ZERO_TRACE \
            else _id(self.uid, "trace", length=32)

    @property
    def sampled(self) -> bool:
        """False when the producer's context says it is not sampled: then nothing is recorded."""
        return self.parent is None or self.parent.sampled

    @property
    def task_span(self) -> str:
        return _id(self.uid, "task", length=16)

    def attempt_span(self, number: int) -> str:
        return _id(self.uid, "attempt", number, length=16)

    def wait_span(self, number: int) -> str:
        return _id(self.uid, "attempt", number, "wait", length=16)

    def attempt(self, number: int) -> SpanContext:
        """The attempt span's context: the parent of what the attempt's own code traces."""
        return SpanContext(self.trace_id, self.attempt_span(number), self.sampled)
