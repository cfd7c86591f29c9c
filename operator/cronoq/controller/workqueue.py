"""A work queue of keys in the manner of client-go's: a key is processed by one worker at a time,
adding a key that is already waiting does nothing, and adding one that is being processed runs
it once more afterwards. Delayed adds serve backoffs and deadlines."""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Hashable


class WorkQueue:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._waiting: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._again: set[Hashable] = set()
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}

    def add(self, key: Hashable) -> None:
        if key in self._processing:
            self._again.add(key)
        elif key not in self._waiting:
            self._waiting.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: Hashable, seconds: float) -> None:
        """Add `key` after `seconds`; an earlier pending timer for the key wins over a later one."""
        if seconds <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + seconds
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def __len__(self) -> int:
        return len(self._waiting)

    async def run(self, workers: int, process: Callable[[Hashable], Awaitable[None]]) -> None:
        """Process keys with `workers` concurrent workers until cancelled."""
        await asyncio.gather(*(self._worker(process) for _ in range(workers)))

    async def _worker(self, process: Callable[[Hashable], Awaitable[None]]) -> None:
        while True:
            key = await self._queue.get()
            self._waiting.discard(key)
            self._processing.add(key)
            try:
                await process(key)
            finally:
                self._processing.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.add(key)
