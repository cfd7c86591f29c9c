"""Retention deletes on a fake clock: nothing before the due time, then 20 a second, half that
while slot grants wait, and only the task's current due time counts."""
from __future__ import annotations

import asyncio
from datetime import timedelta

from cronoq.controller.clock import FakeClock
from cronoq.controller.expiry import Expiry
from cronoq.controller.term import Term

from tests.unit.builders import T0
from tests.unit.fakes import FakeWriter


def test_expired_tasks_are_deleted_from_their_due_time_at_the_bounded_rate() -> None:
    async def scenario() -> None:
        clock, writer, busy = FakeClock(T0), FakeWriter(), [False]
        expiry = Expiry(writer, Term(), clock, busy=lambda: busy[0])

        def deleted() -> list[str]:
            return [name for call, name in writer.calls if call == "delete-task"]
        for i in range(30):
            expiry.schedule(("ns", f"t{i}"), f"uid-{i}", T0 + timedelta(hours=1))
        expiry.schedule(("ns", "moved"), "uid-m", T0 + timedelta(minutes=30))
        expiry.schedule(("ns", "moved"), "uid-m", T0 + timedelta(hours=2))  # its pool's retention grew
        runner = asyncio.create_task(expiry.run())
        await clock.advance(3599)
        assert deleted() == []
        await clock.advance(1.025)  # (times between two deletes, clear of rounding)
        assert len(deleted()) == 1
        await clock.advance(0.45)
        assert len(deleted()) == 10, "20 a second"
        busy[0] = True
        await clock.advance(0.5)
        assert len(deleted()) == 15, "half that while grants wait"
        busy[0] = False
        await clock.advance(10)
        assert len(deleted()) == 30 and "moved" not in deleted()
        await clock.advance(3600)
        assert deleted()[-1] == "moved" and len(expiry) == 0
        runner.cancel()
    asyncio.run(scenario())


def test_the_heap_does_not_grow_with_updates_and_the_current_due_time_still_counts() -> None:
    """Issue 49: an entry per retention change, never dropped until it came up, grew the heap by
    every update. Now it stays within twice the tasks due (plus COMPACT_SLACK)."""
    from cronoq.controller.expiry import COMPACT_SLACK

    async def scenario() -> None:
        clock, writer = FakeClock(T0), FakeWriter()
        expiry = Expiry(writer, Term(), clock)
        for change in range(10_000):  # ten tasks, each re-timed 1,000 times (their pool's retention moving)
            task = change % 10
            expiry.schedule(("ns", f"t{task}"), f"uid-{task}", T0 + timedelta(hours=1, seconds=change))
            assert len(expiry._heap) <= 2 * len(expiry) + COMPACT_SLACK + 1
        for gone in range(5, 10):  # tasks deleted before their time: their entries go too
            expiry.forget(("ns", f"t{gone}"))
        for i in range(1000):  # and others come and go
            expiry.schedule(("ns", f"brief{i}"), f"uid-b{i}", T0 + timedelta(days=365))
            expiry.forget(("ns", f"brief{i}"))
        assert len(expiry) == 5 and len(expiry._heap) <= 2 * 5 + COMPACT_SLACK + 1

        runner = asyncio.create_task(expiry.run())
        await clock.advance(3600 + 9989)
        assert [n for c, n in writer.calls if c == "delete-task"] == [], "none before its current due time"
        await clock.advance(10)
        assert sorted(n for c, n in writer.calls if c == "delete-task") == [f"t{i}" for i in range(5)]
        runner.cancel()
    asyncio.run(scenario())
