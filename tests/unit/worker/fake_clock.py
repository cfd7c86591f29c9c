"""The fake clock the pull worker's unit tests share (`cronoq.worker.clock.Clock`'s shape)."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.unit.builders import T0


class WorkerClock:
    """A pull worker's `cronoq.worker.clock.Clock` that never sleeps for real: time moves only when
    the worker sleeps or waits for an event nobody sets. `on_wait(event, seconds)` runs first at
    every wait, so a test can set the event (another thread's doing) and end the wait there."""

    def __init__(self, start: float = 1000.0, wall: datetime = T0) -> None:
        self.t = self.start = start
        self.wall_at_start = wall
        self.waits: list[float] = []
        self.on_wait: Any = lambda event, seconds: None

    def now(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return self.wall_at_start + timedelta(seconds=self.t - self.start)

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, "no negative sleep"
        self.waits.append(seconds)
        self.t += seconds

    def wait(self, event: Any, seconds: float | None) -> bool:
        assert seconds is not None, "a worker never waits for ever on its clock"
        self.on_wait(event, seconds)
        if event.is_set():
            return True
        self.waits.append(seconds)
        self.t += seconds
        return bool(event.is_set())
