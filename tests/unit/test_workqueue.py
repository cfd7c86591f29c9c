"""The work queue: one worker per key at a time, no duplicates, urgent keys first."""
from __future__ import annotations

import asyncio

from cronoq.controller.workqueue import WorkQueue


def drain(queue: WorkQueue, workers: int = 1) -> list:
    seen: list = []

    async def process(key):
        seen.append(key)
        if key == "again":
            queue.add("again-done")
        await asyncio.sleep(0)

    async def main():
        runner = asyncio.create_task(queue.run(workers, process))
        while len(queue):
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)
        runner.cancel()

    asyncio.run(main())
    return seen


def test_urgent_keys_jump_ahead_and_duplicates_collapse():
    async def fill() -> WorkQueue:
        q = WorkQueue()
        for key in ("a", "b", "c", "a", "b"):
            q.add(key)
        q.add("c", urgent=True)   # already waiting: moves up, runs once
        q.add("z", urgent=True)
        return q

    queue = asyncio.run(fill())
    assert drain(queue) == ["c", "z", "a", "b"]


def test_a_key_added_while_processing_runs_once_more_after():
    seen: list = []

    async def main():
        q = WorkQueue()

        async def process(key):
            seen.append(key)
            if len(seen) == 1:
                q.add("k")   # while "k" is being processed
                q.add("k")
            await asyncio.sleep(0.001)

        q.add("k")
        runner = asyncio.create_task(q.run(2, process))
        await asyncio.sleep(0.05)
        runner.cancel()

    asyncio.run(main())
    assert seen == ["k", "k"]


def test_a_failing_key_is_retried_with_a_doubling_delay_reset_by_success():
    async def main():
        queue = WorkQueue()
        delays = [queue.retry("bad")[0] for _ in range(12)]
        assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
        assert max(delays) == 300.0 and delays[-1] == 300.0  # capped, never every 5s forever
        queue.forget("bad")
        assert queue.retry("bad") == (0.5, 1)
        assert queue.retry("other") == (0.5, 1)  # per key

    asyncio.run(main())


def test_urgent_counts_only_waiting_urgent_keys():
    async def main():
        queue = WorkQueue()
        queue.add("routine")
        assert not queue.urgent
        queue.add("grant", urgent=True)
        queue.add("routine", urgent=True)  # moved up
        assert queue.urgent
        seen = []

        async def process(key):
            seen.append(key)

        runner = asyncio.create_task(queue.run(1, process))
        while len(queue):
            await asyncio.sleep(0.001)
        runner.cancel()
        assert not queue.urgent and set(seen) == {"grant", "routine"}

    asyncio.run(main())
