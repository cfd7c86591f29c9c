"""The one clock of the controller: wall time for decisions, and the monotonic time that every
wait of the controller (requeue delays, the resync, pool status rounds, retention deletes, schedule
fires, the leader Lease's renewals and their deadlines) is measured on. The operator runs on
`LoopClock`, the event loop's own; tests run on `FakeClock` and advance it, so hours of backoffs
and fire times pass without a real sleep.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Callable, Protocol


class Timer(Protocol):
    def when(self) -> float:
        """The monotonic time it fires at."""
        ...

    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall time, timezone-aware (UTC)."""
        ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Timer: ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        """As `asyncio.timeout`, on this clock: the body is cancelled once `seconds` have passed,
        and TimeoutError raised in its place."""
        ...


class LoopClock:
    """The event loop's clock (asyncio's own timers), and the system's wall time."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(seconds, callback)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)


async def wait_set(clock: Clock, event: asyncio.Event, timeout: float | None) -> None:
    """Wait until `event` is set, or `timeout` seconds have passed on `clock` (None: no limit)."""
    if timeout is None:
        await event.wait()
        return
    timer = clock.call_later(max(timeout, 0.0), event.set)
    try:
        await event.wait()
    finally:
        timer.cancel()


class _FakeTimer:
    def __init__(self, at: float, callback: Callable[[], None]) -> None:
        self.at, self.callback, self.cancelled = at, callback, False

    def when(self) -> float:
        return self.at

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that stands still until a test advances it (as kueue's testingclock): timers and
    sleeps due by then fire in order of their times, and what they woke runs before time moves on."""

    def __init__(self, start: datetime) -> None:
        self._start = start
        self._now = 0.0
        self._timers: list[tuple[float, int, _FakeTimer]] = []
        self._order = itertools.count()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._now)

    def monotonic(self) -> float:
        return self._now

    def call_later(self, seconds: float, callback: Callable[[], None]) -> Timer:
        timer = _FakeTimer(self._now + max(seconds, 0.0), callback)
        heapq.heappush(self._timers, (timer.at, next(self._order), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await woken
        finally:
            timer.cancel()

    @asynccontextmanager
    async def timeout(self, seconds: float) -> AsyncIterator[None]:
        """As `asyncio.timeout` does it (Python 3.11): cancel the task when the time is up, and
        turn that cancellation, and only that one, into TimeoutError."""
        task = asyncio.current_task()
        assert task is not None, "a timeout is for a task"
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = self.call_later(seconds, expire)
        try:
            yield
        except asyncio.CancelledError:
            if expired:
                expired = False
                if task.uncancel() == 0:  # no other cancellation pending: it was ours
                    raise TimeoutError from None
            raise
        finally:
            timer.cancel()
            if expired:  # the body ended otherwise before our cancellation reached it
                task.uncancel()

    @property
    def pending(self) -> list[float]:
        """Seconds from now to each timer not yet fired nor cancelled, soonest first."""
        return sorted(t.at - self._now for _, _, t in self._timers if not t.cancelled)

    async def advance(self, seconds: float) -> None:
        """Move time on by `seconds`, firing each timer due on the way at its own time."""
        until = self._now + seconds
        while True:
            await self.idle()
            while self._timers and self._timers[0][2].cancelled:
                heapq.heappop(self._timers)
            if not self._timers or self._timers[0][0] > until:
                break
            at, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, at)
            timer.callback()
        self._now = until
        await self.idle()

    @staticmethod
    async def idle(rounds: int = 20) -> None:
        """Let what is ready on the event loop run (no time passes)."""
        for _ in range(rounds):
            await asyncio.sleep(0)
