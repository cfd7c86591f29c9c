"""Delayed start (issue 39, point 3): a Task may say not to start before a time (`notBefore`,
Cloud Tasks' scheduleTime, Celery's eta) or before a delay after its creation (`startDelay`,
Celery's countdown). One or the other: the API server refuses both at once (`ONE_START_TIME`),
so no rule has to say which wins."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Annotated, Final

from cronoq.api.model import rule
from cronoq.api.durations import DurationBounds

START_DELAY_RANGE: Final = ("0s", "720h")
StartDelay = Annotated[timedelta, DurationBounds(*START_DELAY_RANGE)]
"""How long after its creation a task may start: 0s to 30 days (Cloud Tasks' own bound)."""

ONE_START_TIME = rule(
    "!has(self.notBefore) || !has(self.startDelay)",
    "spec.notBefore and spec.startDelay: give one or the other, not both",
    field_path=".startDelay")


NOT_BEFORE_RANGE: Final = (datetime(2, 1, 1, tzinfo=timezone.utc), datetime(9999, 1, 1, tzinfo=timezone.utc))
"""The notBefore times the operator can count to and from, in UTC (the second one excluded): a time
with a zone may lie beyond the years Python's datetime holds once read in UTC
(`9999-12-31T23:59:59-23:59` is year 10000 there), and a day of room on either side keeps every
sum the operator makes with it (a second of quiet, a requeue) inside them too."""


def check_not_before(at: datetime | None) -> None:
    """ValueError when `at` lies outside NOT_BEFORE_RANGE: the task is refused (InvalidSpec) with
    this message instead of failing every reconcile."""
    earliest, latest = NOT_BEFORE_RANGE
    if at is not None and not earliest <= at < latest:
        raise ValueError(f"spec.notBefore: {at.isoformat()} is out of range: give a time from "
                         f"{earliest.date().isoformat()} to {(latest - timedelta(days=1)).date().isoformat()} (UTC)")
