"""What may keep a task from its first attempt: an idempotency key matching another task (`keys`),
its dependencies (`dependencies`) and a start time not come yet (`delay`). Each answers with a Gate."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from cronoq.api import TaskPhase


@dataclass(frozen=True)
class Gate:
    """`run`: nothing holds the task back. `wait`: it stays Blocked for `reason`. `end`: it ends
    now in `phase` without running (Skipped, Failed, or a duplicate's copied outcome)."""

    verdict: Literal["run", "wait", "end"]
    reason: str = ""
    message: str = ""
    phase: TaskPhase | None = None
    output: str | None = None
    duplicate_of: str | None = None
    until: datetime | None = None
    """A wait that ends by itself at this time (a delayed start): the task is looked at again then."""

    @classmethod
    def run(cls) -> Gate:
        return cls("run")

    @classmethod
    def wait(cls, reason: str, message: str, duplicate_of: str | None = None, until: datetime | None = None) -> Gate:
        return cls("wait", reason, message, duplicate_of=duplicate_of, until=until)

    @classmethod
    def end(cls, phase: TaskPhase, reason: str, message: str, output: str | None = None,
            duplicate_of: str | None = None) -> Gate:
        return cls("end", reason, message, phase, output, duplicate_of)


RUN = Gate.run()
