"""Waiting on conditions instead of sleeping: poll a predicate until it holds or time runs out."""
from __future__ import annotations

import subprocess
import time
from typing import Callable, TypeVar

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

T = TypeVar("T")

TRANSIENT: tuple[type[BaseException], ...] = (ApiException, OSError, HTTPError, subprocess.CalledProcessError,
                                              LookupError)
"""What a check may raise while the world catches up with it (an object not there yet, a field not
yet set, a connection refused while a server restarts): keep polling. Anything else is a bug in
the check or the code under test, and surfaces at once instead of as a timeout."""


class Timeout(AssertionError):
    """The condition did not hold in time; the message says what was awaited and what was last seen."""


def wait_until(check: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.1, what: str = "") -> T:
    """Return the first truthy result of `check()`; fail with `what` and the last result after `timeout`."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = check()
        except TRANSIENT as err:
            last = err
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            error = last if isinstance(last, BaseException) else None
            raise Timeout(f"timed out after {timeout:.0f}s waiting for {what or check!r}; last seen: {last!r}") from error
        time.sleep(interval)
