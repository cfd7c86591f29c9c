"""How a pull worker waits before it asks the API server again after a failure: exponentially
longer each time, with jitter (a fleet throttled at once must not come back at once), and never
sooner than the server's own `Retry-After` (API Priority and Fairness answers 429 with one; a 503
may carry one too). Its own Lease is not paced by this: it is renewed on its own schedule
(`lease.Schedule`), so throttling never makes a healthy worker look dead."""
from __future__ import annotations

import random
from typing import Callable

FIRST = 0.5
"""Seconds before the first retry (half to all of it, with jitter)."""
MOST = 30.0
"""Seconds a retry never waits longer than (unless the server asks for more)."""


class Backoff:
    """`wait(err)` after each failure, `reset()` after a success."""

    def __init__(self, first: float = FIRST, most: float = MOST, rng: Callable[[], float] = random.random) -> None:
        self.first, self.most, self.rng = first, most, rng
        self.failures = 0

    def wait(self, err: BaseException | None = None) -> float:
        """Seconds to wait before the next try: in [d/2, d] for d = first × 2^failures (at most
        `most`), or the server's Retry-After when that is longer."""
        ceiling = min(self.first * 2 ** min(self.failures, 32), self.most)
        self.failures += 1
        delay = ceiling * (0.5 + self.rng() / 2)
        return max(delay, retry_after(err) or 0.0)

    def reset(self) -> None:
        self.failures = 0


def retry_after(err: BaseException | None) -> float | None:
    """The seconds of a Retry-After header on a refused request (429 or 5xx), if it gives any."""
    status = getattr(err, "status", None)
    headers = getattr(err, "headers", None) or {}
    if not isinstance(status, int) or not (status == 429 or status >= 500):
        return None
    value = next((v for k, v in dict(headers).items() if str(k).lower() == "retry-after"), None)
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare from the API server; the backoff stands
