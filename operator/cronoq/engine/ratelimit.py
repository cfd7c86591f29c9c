"""A pool's rate limit on attempt starts (`spec.rateLimit`): a token bucket as a pure value,
refilled by the time that passed, on a clock the caller passes in (seconds of a monotonic clock,
so a step of the wall clock neither stalls nor floods a pool).

The leader alone starts attempts, so one bucket per pool in the leader's memory makes the limit
exact across the pool: in any window of t seconds at most burst + rate × t attempts start. A new
leader starts with an empty bucket (never a full one), so a failover adds no burst to the one its
predecessor may have just spent. Taking a token is admission's business (controller/slots.py
grants slots; the bucket says how many of them may be granted now).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from cronoq.api import RateLimit

EPSILON = 1e-9
"""Tokens counted whole although float arithmetic left them a hair short (a timer fires at the
very instant a token is due; it must find it)."""


@dataclass(frozen=True)
class TokenBucket:
    """`tokens` (fractional) as of `at`; `burst` at most, refilled at `rate` per second."""

    rate: float
    burst: int
    tokens: float
    at: float

    @classmethod
    def empty(cls, limit: RateLimit, now: float) -> TokenBucket:
        """A bucket that starts now with no token: the first start is due 1/rate seconds later."""
        return cls(limit.starts_per_second, limit.burst, 0.0, now)

    def refilled(self, now: float) -> TokenBucket:
        """As of `now` (a time before `at`, which a monotonic clock never gives, adds nothing)."""
        if now <= self.at:
            return self
        return replace(self, tokens=min(float(self.burst), self.tokens + (now - self.at) * self.rate), at=now)

    def available(self, now: float) -> int:
        """Whole tokens now: how many attempts may start at once."""
        return int(math.floor(self.refilled(now).tokens + EPSILON))

    def take(self, n: int, now: float) -> TokenBucket:
        """`n` tokens fewer (n at most `available(now)`)."""
        refilled = self.refilled(now)
        assert n <= refilled.tokens + EPSILON, f"{n} tokens taken of {refilled.tokens}"
        return replace(refilled, tokens=max(refilled.tokens - n, 0.0))

    def given_back(self, n: int, now: float) -> TokenBucket:
        """`n` tokens taken for starts that did not happen (a grant its reconcile gave back), up to
        `burst`: what did not start does not count against the limit."""
        refilled = self.refilled(now)
        return replace(refilled, tokens=min(float(self.burst), refilled.tokens + n))

    def wait(self, now: float) -> float:
        """Seconds from `now` until a whole token is there (0: one is)."""
        tokens = self.refilled(now).tokens
        return 0.0 if tokens + EPSILON >= 1 else (1 - tokens) / self.rate

    def retuned(self, limit: RateLimit, now: float) -> TokenBucket:
        """The bucket under a changed limit, from `now` on: what it earned until now at the old
        rate is kept, up to the new burst."""
        if (limit.starts_per_second, limit.burst) == (self.rate, self.burst):
            return self
        refilled = self.refilled(now)
        return TokenBucket(limit.starts_per_second, limit.burst, min(refilled.tokens, float(limit.burst)),
                           max(refilled.at, now))


def next_start(due: float, rate: float, now: float) -> float:
    """When the next start of a pool that stays rate-limited is due, seen at `now`, given that one
    was due at `due`: starts then follow every 1/rate seconds (the bucket never fills). What
    `cronoq describe` counts down to from a task's `nextStartAt`."""
    if now <= due:
        return due
    return due + math.ceil((now - due) * rate - EPSILON) / rate
