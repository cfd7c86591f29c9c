"""How a pull worker waits before it asks the API server again after a failure: exponentially
longer each time, with jitter (a fleet throttled at once must not come back at once), and never
sooner than the server's own `Retry-After` (API Priority and Fairness answers 429 with one; a 503
may carry one too), with jitter on top of it too: every client it refused is told the same. What
must land before a lease lapses (its renewals, an attempt's report) waits for the server only as
long as the lease can afford (`Backoff.until`)."""
from __future__ import annotations

import random
from typing import Callable

from cronoq.apiserver.errors import ApiError
from cronoq.worker.errors import describe

FIRST = 0.5
"""Seconds before the first retry (half to all of it, with jitter)."""
MOST = 30.0
"""Seconds a retry never waits longer than (unless the server asks for more)."""
GAP = 1.0
"""Seconds between two tries of a write that must land in time, however close its last chance."""


class Backoff:
    """`wait(retry_after(err))` (or `until(...)`) after each failure, `reset()` after a success."""

    def __init__(self, first: float = FIRST, most: float = MOST, rng: Callable[[], float] = random.random) -> None:
        self.first, self.most, self.rng = first, most, rng
        self.failures = 0

    def wait(self, asked: float | None = None) -> float:
        """Seconds to wait before the next try: in [d/2, d] for d = first × 2^failures (at most
        `most`), or, when the server `asked` (its Retry-After) for longer, in [asked, 1.5 × asked]."""
        ceiling = min(self.first * 2 ** min(self.failures, 32), self.most)
        self.failures += 1
        delay = ceiling * (0.5 + self.rng() / 2)
        return max(delay, (asked or 0.0) * (1 + self.rng() / 2))

    def until(self, now: float, asked: float | None, last: float) -> float:
        """When to try again a write that must land by `last` (its lease's last chance): after
        `wait(asked)`, but no later than a quarter to a half of the time left before `last` (and
        no sooner than GAP), so it gets several more tries, not one or two, before its lease
        lapses: a lapsed lease costs a rerun of the attempt, or a worker presumed dead, more than
        a few requests sooner than the server asked. Less than GAP before `last`, or past it,
        after `wait(asked)`: too late to hurry."""
        wait, left = self.wait(asked), last - now
        if left < GAP:
            return now + wait
        return now + min(wait, max(GAP, left * (1 + self.rng()) / 4))

    def reset(self) -> None:
        self.failures = 0


def retry_after(err: BaseException | None) -> float | None:
    """The seconds of a Retry-After header on a refused request (429 or 5xx), if it gives any (an
    HTTP date, rare from the API server, gives none: the backoff stands)."""
    return err.retry_after if isinstance(err, ApiError) else None


def brief(err: BaseException) -> str:
    """An API error in a line (its status and reason), not its headers and body."""
    status = getattr(err, "status", None)
    return f"{status} {getattr(err, 'reason', '')}".strip() if status is not None else describe(err)
