"""Waiting on conditions instead of sleeping: poll a predicate until it holds or time runs out."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


class Timeout(AssertionError):
    """The condition did not hold in time; the message says what was awaited and what was last seen."""


def wait_until(check: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.1, what: str = "") -> T:
    """Return the first truthy result of `check()`; fail with `what` and the last result after `timeout`."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = check()
        except AssertionError:  # the check knows it can never hold (e.g. the operator exited)
            raise
        except Exception as err:  # an API call racing object creation: keep polling
            last = err
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout:.0f}s waiting for {what or check!r}; last seen: {last!r}")
        time.sleep(interval)
