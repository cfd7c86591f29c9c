"""The work queue: one worker per key at a time, no duplicates, urgent keys first, delayed adds on
the injected clock (a fake one here: time passes only when a test advances it)."""
from __future__ import annotations

import asyncio

from cronoq.controller.clock import FakeClock
from cronoq.controller.workqueue import WorkQueue

from tests.unit.builders import T0


async def quiet(queue: WorkQueue) -> None:
    """Yield to the workers until nothing waits or is being processed (no time passes)."""
    for _ in range(1000):
        await asyncio.sleep(0)
        if len(queue) == 0 and not queue._processing:
            return
    raise AssertionError("the work queue never went quiet")


def drain(queue: WorkQueue, workers: int = 1) -> list:
    seen: list = []

    async def process(key):
        seen.append(key)
        if key == "again":
            queue.add("again-done")
        await asyncio.sleep(0)

    async def main():
        runner = asyncio.create_task(queue.run(workers, process))
        await quiet(queue)
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


def test_resync_keys_come_after_every_event_and_an_event_moves_one_up():
    """Issue 56: the resync's safety net never delays what an event said."""
    async def fill() -> WorkQueue:
        q = WorkQueue()
        for key in ("r1", "r2", "r3"):
            q.add(key, resync=True)
        q.add("event")            # added after the resync's keys, processed before them
        q.add("r3")               # an event for a key the resync queued: moved up
        q.add("event", resync=True)  # the resync for a key an event queued: not moved down
        q.add("grant", urgent=True)
        return q

    queue = asyncio.run(fill())
    assert drain(queue) == ["grant", "event", "r3", "r1", "r2"]


def test_a_key_added_while_processing_runs_once_more_after():
    seen: list = []
    clock = FakeClock(T0)

    async def main():
        q = WorkQueue(clock)

        async def process(key):
            seen.append(key)
            if len(seen) == 1:
                q.add("k")   # while "k" is being processed
                q.add("k")
            await clock.sleep(0.001)

        q.add("k")
        runner = asyncio.create_task(q.run(2, process))
        await clock.idle()
        assert seen == ["k"], "two workers, but one key runs once at a time"
        await clock.advance(0.001)
        assert seen == ["k", "k"], "then once more, for the adds made meanwhile"
        await clock.advance(0.001)
        await quiet(q)
        runner.cancel()

    asyncio.run(main())
    assert seen == ["k", "k"]


def test_a_failing_key_is_retried_with_a_doubling_delay_reset_by_success():
    async def main():
        queue = WorkQueue(FakeClock(T0))
        delays = [queue.retry("bad")[0] for _ in range(12)]
        assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
        assert max(delays) == 300.0 and delays[-1] == 300.0  # capped, never every 5s forever
        queue.forget("bad")
        assert queue.retry("bad") == (0.5, 1)
        assert queue.retry("other") == (0.5, 1)  # per key

    asyncio.run(main())


def test_a_delayed_key_comes_at_its_time_and_the_earlier_of_two_timers_wins():
    async def main():
        clock = FakeClock(T0)
        queue = WorkQueue(clock)
        queue.add_after("k", 10)
        queue.add_after("k", 30)   # later: the 10 s timer stands
        queue.add_after("j", 5)
        queue.add_after("j", 2)    # earlier: replaces the 5 s one
        assert clock.pending == [2.0, 10.0]
        await clock.advance(1.9)
        assert len(queue) == 0
        await clock.advance(0.1)
        assert len(queue) == 1 and clock.pending == [8.0]
        await clock.advance(8)
        assert len(queue) == 2 and clock.pending == []

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
        await quiet(queue)
        runner.cancel()
        assert not queue.urgent and set(seen) == {"grant", "routine"}

    asyncio.run(main())


def test_a_backlog_of_keys_that_never_suspend_does_not_hold_the_loop():
    """Issue 56: reconciles of tasks waiting for a slot write nothing, so they never suspend; a
    resync over 100,000 of them must still let the leader Lease's renewal run between keys."""
    queue: WorkQueue = WorkQueue(FakeClock(T0))
    done: list[int] = []
    ran_after: list[int] = []
    for key in range(1000):
        queue.add(key)

    async def process(key: int) -> None:
        done.append(key)  # no await: what a reconcile that writes nothing does
        if key == 0:  # a renewal's answer arrives: its callback is ready to run
            asyncio.get_running_loop().call_soon(lambda: ran_after.append(len(done)))

    async def main() -> None:
        runner = asyncio.create_task(queue.run(8, process))
        await quiet(queue)
        runner.cancel()

    asyncio.run(main())
    assert len(done) == 1000
    assert ran_after[0] < 50, f"a callback ready beside the queue ran only after {ran_after[0]} keys"
