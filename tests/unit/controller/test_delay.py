"""A delayed start through the Controller on the fake clock (issue 39 point 3): no Job and no slot
before its time, a timer (not polling) that starts it at that time, one more status write than
a task without a delay, and a new leader reading the time from the spec."""
from __future__ import annotations

import asyncio

from tests.unit.fakes import NS, World, pod


def statuses(world: World, name: str) -> int:
    return world.writer.calls.count(("status", name))


def test_a_delayed_task_starts_at_its_time_by_a_timer_with_one_more_status_write() -> None:
    async def scenario() -> None:
        world = World(concurrency=1)
        world.submit("d", startDelay="10s")  # created 11:59:59, so not before 12:00:09 (T0 + 9 s)
        world.submit("plain")
        await world.settle()
        assert world.status("d")["phase"] == "Blocked"
        assert world.status("d")["message"] == "not before 2026-12-03T12:00:09Z (spec.startDelay 10s after its creation)"
        assert world.status("plain")["phase"] == "Running", "the waiting task took no slot"
        assert 9.01 in world.clock.pending, "its reconcile is timed at its start time"
        world.controller.intake.on_pod(None, pod("plain-a1", "plain", 0))  # the slot is free again
        await world.settle()
        await world.clock.advance(8.9)
        assert ("job", "d-a1") not in world.writer.calls, "not before its time"
        await world.clock.advance(0.2)
        await world.settle()
        assert ("job", "d-a1") in world.writer.calls and world.status("d")["phase"] == "Running"
        world.controller.intake.on_pod(None, pod("d-a1", "d", 0))
        await world.settle()
        assert world.status("d")["phase"] == world.status("plain")["phase"] == "Succeeded"
        assert statuses(world, "plain") == 2 and statuses(world, "d") == 3, world.writer.calls
    asyncio.run(scenario())


def test_a_delayed_task_whose_time_finds_the_pool_full_says_queued_a_second_later() -> None:
    async def scenario() -> None:
        world = World(concurrency=1)
        world.submit("busy")
        world.submit("d", startDelay="5s")
        await world.settle()
        await world.clock.advance(4.5)
        await world.settle()
        assert world.status("d")["phase"] == "Blocked"
        await world.clock.advance(1.0)  # its time and its quiet second have passed: the pool is full
        await world.settle()
        assert world.status("d")["phase"] == "Queued"
        world.controller.intake.on_pod(None, pod("busy-a1", "busy", 0))
        await world.settle()
        assert world.status("d")["phase"] == "Running" and statuses(world, "d") == 3
    asyncio.run(scenario())


def test_a_new_leader_reads_the_time_from_the_spec_and_sets_its_own_timer() -> None:
    async def scenario() -> None:
        first = World()
        first.submit("d", startDelay="30s")
        await first.settle()
        stored = first.writer.tasks["d"]
        assert stored["status"]["phase"] == "Blocked"
        second = World()  # another replica: nothing in memory but what the watch lists
        second.writer.tasks["d"] = stored
        second.controller.intake.on_task(None, stored)
        await second.settle()
        assert statuses(second, "d") == 0, "Blocked for the same time already: nothing to write"
        assert 29.01 in second.clock.pending
        await second.clock.advance(29.1)
        await second.settle()
        assert ("job", "d-a1") in second.writer.calls and NS == "unit"
    asyncio.run(scenario())
