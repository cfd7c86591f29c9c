"""The one clock of a pull worker: every part of it (its lifecycle, its watch, its attempts and their
Leases' keepers) reads time and waits through a `Clock` it is given, so a unit test can give one
that never sleeps for real (tests/unit/worker/fake_clock.py)."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timezone


class Clock:
    """Monotonic seconds, the wall clock (UTC), and waits: the real ones."""

    def now(self) -> float:
        """Monotonic seconds."""
        return time.monotonic()

    def wall(self) -> datetime:
        """The time of day in UTC (to compare with the operator's timestamps)."""
        return datetime.now(timezone.utc)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        """Wait for `event` at most `seconds` (None: for ever); whether it is set."""
        return event.wait(seconds)


SYSTEM = Clock()
