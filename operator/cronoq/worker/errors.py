"""The two exceptions a task handler raises to say how its attempt failed (DESIGN §3).

Any other exception is retryable too; these two add what the operator cannot guess: a
`retry_after` hint (the next attempt starts no sooner) or that retrying is pointless.
"""
from __future__ import annotations

import math
from datetime import timedelta


class Retryable(Exception):
    """The attempt failed, a later one may succeed: the task is retried after its backoff, and
    never sooner than `retry_after` seconds (a number or a `timedelta`), or dead-lettered once
    its attempts are exhausted. The process exits 1."""

    def __init__(self, message: str = "", *, retry_after: float | timedelta | None = None) -> None:
        super().__init__(message)
        self.message = str(message)
        self.retry_after = _seconds(retry_after)


class Permanent(Exception):
    """The attempt failed and no retry can help: the task ends `Failed`. The process exits 2."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = str(message)


def _seconds(value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"retry_after must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


def describe(err: BaseException) -> str:
    """An exception as its type and text (what a report says of an exception)."""
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
