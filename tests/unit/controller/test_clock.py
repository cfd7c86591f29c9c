"""FakeClock.timeout behaves as asyncio.timeout does on the operator's clock (LoopClock), so what
the leader election's tests see of its deadlines is what the operator does: each case runs on both
clocks, the loop's with deadlines short enough to be nothing."""
from __future__ import annotations

import asyncio

import pytest

from cronoq.controller.clock import Clock, FakeClock, LoopClock

from tests.unit.builders import T0


async def advance(clock: Clock, seconds: float) -> None:
    """Let `seconds` pass on `clock`: advanced when it is fake, waited for when it is the loop's."""
    if isinstance(clock, FakeClock):
        await clock.advance(seconds)
    else:
        await asyncio.sleep(seconds)


CLOCKS = pytest.mark.parametrize("make", [LoopClock, lambda: FakeClock(T0)], ids=["operator's clock", "fake clock"])


@CLOCKS
def test_a_body_past_its_time_is_cancelled_and_timeout_error_raised_in_its_place(make) -> None:
    async def scenario() -> tuple[bool, bool]:
        clock, reached = make(), []

        async def body() -> None:
            async with clock.timeout(0.001):
                await asyncio.Event().wait()
            reached.append(True)
        running = asyncio.create_task(body())
        await advance(clock, 0.005)
        with pytest.raises(TimeoutError):
            await running
        return bool(reached), running.cancelled()
    assert asyncio.run(scenario()) == (False, False), "TimeoutError, not a cancellation, and nothing after it"


@CLOCKS
def test_a_body_done_in_time_goes_on_and_is_not_cancelled_later(make) -> None:
    async def scenario() -> list[str]:
        clock, seen = make(), []

        async def body() -> None:
            async with clock.timeout(0.002):
                seen.append("inside")
            await advance(clock, 0.005)  # past the deadline: nothing may cancel it now
            seen.append("after")
        await body()
        return seen
    assert asyncio.run(scenario()) == ["inside", "after"]


@CLOCKS
def test_a_cancellation_from_outside_stays_a_cancellation(make) -> None:
    async def scenario() -> bool:
        clock = make()

        async def body() -> None:
            async with clock.timeout(60):
                await asyncio.Event().wait()
        running = asyncio.create_task(body())
        await asyncio.sleep(0)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        return running.cancelled()
    assert asyncio.run(scenario())
