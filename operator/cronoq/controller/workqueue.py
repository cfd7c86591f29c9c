"""A work queue of keys in the manner of client-go's: a key is processed by one worker at a time,
adding a key that is already waiting does nothing, and adding one that is being processed runs
it once more afterwards. Delayed adds serve backoffs and deadlines.

Urgent keys (a task just granted a pool slot, a pool with a free slot) jump ahead of the
routine ones, so with thousands of tasks waiting a high-priority task is not queued behind
all their reconciles. The periodic resync's keys come last: a safety net must never delay what
an event said (with 20,000 tasks held, a resync queued ahead of a Job's end kept that task's slot
taken for as long as the whole pass took: issue 56).

Delays are measured on the injected clock (controller/clock.py), so tests advance it instead of
sleeping.
"""
from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Awaitable, Callable, ClassVar, Generic, Hashable, TypeVar

from cronoq.controller.clock import Clock, LoopClock, Timer

URGENT, ROUTINE, RESYNC = 0, 1, 2
RETRY_BASE, RETRY_MAX = 0.5, 300.0

K = TypeVar("K", bound=Hashable)

@dataclass(frozen=True, slots=True)
class TaskWork:
    """A work key: reconcile this task."""

    namespace: str
    name: str
    kind: ClassVar[str] = "task"


@dataclass(frozen=True, slots=True)
class PoolWork:
    """A work key: grant this pool's free slots to its best waiting tasks."""

    namespace: str
    name: str
    kind: ClassVar[str] = "pool"


WorkKey = TaskWork | PoolWork
"""The Controller's keys: typed, so a task and a pool of one name are two keys, and `kind` (the
metrics' label) is the class's own."""


class WorkQueue(Generic[K]):
    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or LoopClock()
        self._queue: asyncio.PriorityQueue[tuple[int, int, K]] = asyncio.PriorityQueue()
        self._order = itertools.count()
        self._waiting: dict[K, int] = {}
        """Keys waiting to be processed → the most urgent level they were added with."""
        self._processing: set[K] = set()
        self._again: dict[K, int] = {}
        self._timers: dict[K, Timer] = {}
        self._urgent = 0
        """How many waiting keys are urgent (background work yields to them)."""
        self._failures: dict[K, int] = {}

    def add(self, key: K, urgent: bool = False, *, resync: bool = False) -> None:
        """Queue `key`: urgent, routine, or (`resync`) after everything else; a key already waiting
        moves up to the more urgent of the two, never down."""
        level = URGENT if urgent else RESYNC if resync else ROUTINE
        if key in self._processing:
            self._again[key] = min(level, self._again.get(key, RESYNC))
            return
        waiting = self._waiting.get(key)
        if waiting is not None and waiting <= level:
            return
        # New, or now more urgent: (re)enter at this level; a stale routine entry is skipped later.
        self._waiting[key] = level
        self._urgent += level == URGENT
        self._queue.put_nowait((level, next(self._order), key))

    def add_after(self, key: K, seconds: float) -> None:
        """Add `key` after `seconds`; an earlier pending timer for the key wins over a later one."""
        if seconds <= 0:
            self.add(key)
            return
        timer = self._timers.get(key)
        if timer is not None and timer.when() <= self._clock.monotonic() + seconds:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = self._clock.call_later(seconds, lambda: self._fire(key))

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def retry(self, key: K) -> tuple[float, int]:
        """Add `key` again after a delay that doubles with each failure in a row (like client-go's
        rate-limited queue: 0.5s, 1s, 2s, ... at most 5 minutes); return (delay, failures)."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = min(RETRY_BASE * 2 ** (failures - 1), RETRY_MAX)
        self.add_after(key, delay)
        return delay, failures

    def forget(self, key: K) -> None:
        """The key was processed without error: its next failure starts from the shortest delay."""
        self._failures.pop(key, None)

    def drop(self, key: K) -> None:
        """What the key is known by went: its pending timer and its failures go too (a key already
        waiting is still processed once, and finds nothing)."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._failures.pop(key, None)

    def queued(self, key: K) -> bool:
        """Whether `key` is to be processed again without waiting for a timer: waiting, or added
        while it was being processed."""
        return key in self._waiting or key in self._again

    @property
    def urgent(self) -> bool:
        """Whether urgent keys (slot grants) are waiting."""
        return self._urgent > 0

    def __len__(self) -> int:
        return len(self._waiting)

    async def run(self, workers: int, process: Callable[[K], Awaitable[None]]) -> None:
        """Process keys with `workers` concurrent workers until cancelled."""
        await asyncio.gather(*(self._worker(process) for _ in range(workers)))

    async def _worker(self, process: Callable[[K], Awaitable[None]]) -> None:
        while True:
            level, _, key = await self._queue.get()
            if self._waiting.get(key) != level:
                continue  # a duplicate entry: the key was processed already, or moved up
            del self._waiting[key]
            self._urgent -= level == URGENT
            self._processing.add(key)
            try:
                await process(key)
            finally:
                self._processing.discard(key)
                again = self._again.pop(key, None)
                if again is not None:
                    self.add(key, urgent=again == URGENT, resync=again == RESYNC)
            # Let the rest of the loop run between keys. A reconcile that writes nothing (a task
            # waiting for a slot) never suspends, and getting a key from a non-empty queue does not
            # either, so without this a pass over 100,000 waiting tasks would hold the loop for
            # tens of seconds: the leader Lease's renewals would stall past their deadline.
            await asyncio.sleep(0)
