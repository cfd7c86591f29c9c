"""The leader's token buckets, one per pool with a `rateLimit` (engine/ratelimit.py), kept on the
controller's monotonic clock. Slots are granted (controller/slots.py) no faster than a pool's
bucket has tokens; each grant takes one.

A bucket is made empty the first time this operator dispatches the pool (so after a failover the
new leader's, never full), again when the pool is deleted and created anew (another uid) or its
limit is removed and set again; a changed limit applies at once (`TokenBucket.retuned`).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from cronoq.api import TaskPool
from cronoq.controller.clock import Clock
from cronoq.controller.store import Key
from cronoq.engine.ratelimit import TokenBucket


class RateLimits:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._buckets: dict[Key, tuple[str, TokenBucket]] = {}
        """Pool key → (the pool's uid, its bucket)."""

    def _current(self, key: Key, pool: TaskPool) -> TokenBucket | None:
        """The pool's bucket as of now, under its limit now (a new one is empty); None: no limit."""
        limit = pool.spec.rate_limit
        if limit is None:
            return None
        now, uid = self.clock.monotonic(), pool.metadata.uid or ""
        kept = self._buckets.get(key)
        if kept is None or kept[0] != uid:
            return TokenBucket.empty(limit, now)
        return kept[1].retuned(limit, now).refilled(now)

    def allowance(self, key: Key, pool: TaskPool) -> int | None:
        """How many attempts the pool may start now (None: no limit). The bucket is kept from here
        on: the first look of a dispatch makes it."""
        bucket = self._current(key, pool)
        if bucket is None:
            self._buckets.pop(key, None)
            return None
        self._buckets[key] = (pool.metadata.uid or "", bucket)
        return bucket.available(bucket.at)

    def spend(self, key: Key, n: int) -> None:
        kept = self._buckets.get(key)
        if kept is not None and n:
            self._buckets[key] = (kept[0], kept[1].take(n, self.clock.monotonic()))

    def refund(self, key: Key, n: int) -> None:
        """`n` tokens spent on grants that went unused come back (controller/slots.py `release`)."""
        kept = self._buckets.get(key)
        if kept is not None and n:
            self._buckets[key] = (kept[0], kept[1].given_back(n, self.clock.monotonic()))

    def wait(self, key: Key, pool: TaskPool) -> float | None:
        """Seconds until the pool's next token (0: one is there; None: no limit)."""
        bucket = self._current(key, pool)
        return None if bucket is None else bucket.wait(bucket.at)

    def next_start_at(self, key: Key, pool: TaskPool, now: datetime) -> datetime | None:
        """When the pool's next token is due, in wall time, if none is there now."""
        wait = self.wait(key, pool)
        return now + timedelta(seconds=wait) if wait else None

    def forget(self, key: Key) -> None:
        self._buckets.pop(key, None)
