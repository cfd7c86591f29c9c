"""Delayed start (issue 39, point 3): a Task may say not to start before a time (`notBefore`,
Cloud Tasks' scheduleTime, Celery's eta) or before a delay after its creation (`startDelay`,
Celery's countdown). One or the other: the API server refuses both at once (`ONE_START_TIME`),
so no rule has to say which wins."""
from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Final

from cronoq.api.common import rule
from cronoq.api.durations import DurationBounds

START_DELAY_RANGE: Final = ("0s", "720h")
StartDelay = Annotated[timedelta, DurationBounds(*START_DELAY_RANGE)]
"""How long after its creation a task may start: 0s to 30 days (Cloud Tasks' own bound)."""

ONE_START_TIME = rule(
    "!has(self.notBefore) || !has(self.startDelay)",
    "spec.notBefore and spec.startDelay: give one or the other, not both",
    field_path=".startDelay")
