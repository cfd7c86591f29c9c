"""The hand-over: what the operator tells a pull worker about an attempt it hands it, on the Task
(`delivery: Workers`, DESIGN §17). The operator records the attempt in the Task's status
(`status.attempts[]`, `status.worker`); a worker watching its Tasks reads it back from there.

`Wire` names the fields on both sides: the operator's models (`api/task.py`) take their aliases from
it, and a worker parses a Task once, with `HandOver.of_task`, into typed values. So the record a
worker reads cannot drift from the one the operator writes (tests/unit/pod_protocol/test_handover.py writes one
with the operator's models and parses it back). Standard library only, as the rest of the protocol.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, Mapping

from cronoq.pod_protocol import Label, Terms
from cronoq.pod_protocol.tracecontext import TaskTrace


class Wire:
    """Field names of a Task that a hand-over travels in (camelCase, as the API server stores them)."""

    # spec
    PAYLOAD: Final = "payload"
    LEASE_TTL: Final = "leaseTTL"
    DEPENDS_ON: Final = "dependsOn"
    DEPENDENCY_TASK: Final = "task"
    """The name of the task a `dependsOn` entry names."""
    CANCEL: Final = "cancel"
    # status
    PHASE: Final = "phase"
    ATTEMPT: Final = "attempt"
    """The number of the newest attempt."""
    ATTEMPTS: Final = "attempts"
    WORKER: Final = "worker"
    """On the status (a selectable field) and on an attempt's record: the worker it is handed to."""
    FIRST_ATTEMPT_AT: Final = "firstAttemptAt"
    CHECKPOINT: Final = "checkpoint"
    CHECKPOINT_DATA: Final = "data"
    # an attempt's record (status.attempts[]); its terms are `Terms.LEASE_TTL_MS`, `Terms.TIMEOUT_MS`
    NUMBER: Final = "number"
    LEASE_ID: Final = "leaseId"
    DISPATCHED_AT: Final = "dispatchedAt"
    OUTCOME: Final = "outcome"
    REASON: Final = "reason"


RUNNING: Final = "Running"
"""The phase of a task whose attempt runs."""


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt as the operator recorded it in the Task's status."""

    number: int
    lease_id: str = ""
    worker: str | None = None
    """The worker it is handed to (None: a Job runs it)."""
    dispatched_at: datetime | None = None
    """When the operator handed it over (its clock, UTC)."""
    terms: Terms | None = None
    """Its lease TTL and timeout; None on a record an operator older than the terms wrote."""
    outcome: str | None = None
    """How it ended; None while it runs."""
    reason: str | None = None

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> AttemptRecord:
        return cls(number=int(record[Wire.NUMBER]), lease_id=str(record.get(Wire.LEASE_ID) or ""),
                   worker=_text(record.get(Wire.WORKER)), dispatched_at=_time(record.get(Wire.DISPATCHED_AT)),
                   terms=Terms.of_record(record), outcome=_text(record.get(Wire.OUTCOME)) or None,
                   reason=_text(record.get(Wire.REASON)))


@dataclass(frozen=True)
class HandOver:
    """One look at a Task a worker watches: which attempt is open, and what it needs to run it."""

    uid: str
    name: str
    attempt: int
    """The number of the newest attempt (0 before the first)."""
    current: AttemptRecord | None
    """The record of that attempt, when the status holds it."""
    phase: str | None = None
    cancel: bool = False
    payload: Any = None
    lease_ttl: str | None = None
    """The task's `spec.leaseTTL` (a duration's text), for a record without its terms."""
    depends_on: tuple[str, ...] = ()
    first_attempt_at: str | None = None
    """When its first attempt was dispatched (the operator's RFC 3339 text, compared as such)."""
    checkpoint: str | None = None
    """The newest checkpoint an earlier attempt saved (compact JSON)."""
    handler: str = ""
    """Its `cronoq.io/handler` label: which of a worker's handlers runs it."""
    traceparent: str | None = None
    """The open attempt's span context (pod_protocol.tracecontext: it follows from the task's uid,
    its producer's annotation and the attempt's number), None before the first attempt."""

    @classmethod
    def of_task(cls, task: Mapping[str, Any]) -> HandOver:
        """The hand-over in a Task as the API server returns it (a dict)."""
        meta, spec, status = task["metadata"], task.get("spec") or {}, task.get("status") or {}
        number = int(status.get(Wire.ATTEMPT) or 0)
        records = status.get(Wire.ATTEMPTS) or []
        last = records[-1] if records else None
        current = AttemptRecord.of_record(last) if last and last.get(Wire.NUMBER) == number else None
        return cls(uid=meta["uid"], name=meta["name"], attempt=number, current=current,
                   phase=_text(status.get(Wire.PHASE)), cancel=bool(spec.get(Wire.CANCEL)),
                   payload=spec.get(Wire.PAYLOAD), lease_ttl=_text(spec.get(Wire.LEASE_TTL)),
                   depends_on=tuple(d.get(Wire.DEPENDENCY_TASK, "") for d in spec.get(Wire.DEPENDS_ON) or ()),
                   first_attempt_at=_text(status.get(Wire.FIRST_ATTEMPT_AT)),
                   checkpoint=_text((status.get(Wire.CHECKPOINT) or {}).get(Wire.CHECKPOINT_DATA)),
                   handler=str((meta.get("labels") or {}).get(Label.HANDLER, "")),
                   traceparent=TaskTrace.of(str(meta["uid"]), meta.get("annotations")).attempt(number).traceparent
                   if number else None)

    @property
    def open(self) -> bool:
        """Its newest attempt is recorded and has not ended."""
        return self.current is not None and not self.current.outcome

    def handed_to(self, worker: str) -> bool:
        """Its newest attempt runs, handed to `worker`."""
        return self.open and self.current is not None and self.current.worker == worker and self.phase == RUNNING


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _time(value: Any) -> datetime | None:
    """An RFC 3339 time (UTC when it has no zone); None when absent or unreadable."""
    if value is None:
        return None
    try:
        found = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo is not None else found.replace(tzinfo=timezone.utc)
