"""What `wait` returns: the finished Task and its output, parsed."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronoq.api import Attempt, Checkpoint, Task, TaskPhase

STATUS = {
    TaskPhase.SUCCEEDED: "succeeded",
    TaskPhase.FAILED: "failed",
    TaskPhase.DEAD_LETTERED: "dead_lettered",
    TaskPhase.CANCELLED: "cancelled",
    TaskPhase.SKIPPED: "skipped",
}
"""Terminal phase → the snake_case status of the metrics' `status` label (DESIGN §7)."""


def status_of(phase: TaskPhase | None) -> str:
    return STATUS.get(phase, str(phase or "unknown").lower()) if phase else "unknown"


def parse_output(raw: str | None) -> Any:
    """JSON output as the value it encodes; anything else as the text it is."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@dataclass(frozen=True)
class Result:
    """A succeeded task: `output` is parsed JSON when the output is JSON, else the text."""

    task: Task

    @property
    def name(self) -> str:
        return self.task.metadata.name or ""

    @property
    def phase(self) -> TaskPhase | None:
        return self.task.phase

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        return self.task.status.attempts if self.task.status else ()

    @property
    def raw_output(self) -> str | None:
        return self.task.status.output if self.task.status and self.task.status.output_available else None

    @property
    def output(self) -> Any:
        return parse_output(self.raw_output)


@dataclass(frozen=True)
class SavedCheckpoint:
    """A task's newest checkpoint: its data (parsed JSON), the attempt that saved it, and when the
    operator recorded it."""

    attempt: int
    data: Any
    saved_at: datetime | None = None

    @classmethod
    def of(cls, checkpoint: Checkpoint) -> SavedCheckpoint:
        return cls(checkpoint.attempt, json.loads(checkpoint.data), checkpoint.saved_at)
