"""A task's own time limits through the Controller, with the fake writer and the fake clock: a
task without limits writes what it wrote before (4 writes, no timer), a start deadline wakes the
task when it passes (a timer, not polling) and is counted, and the deadline deletes the Job."""
from __future__ import annotations

import asyncio

from tests.unit.fakes import NS, World, counter, pod

WRITES = ("status", "job", "event", "delete-job", "retime-job")


def writes(world: World, name: str) -> list[tuple[str, str]]:
    return [c for c in world.writer.calls if c[0] in WRITES and (c[1] == name or c[1].startswith(f"{name}-a")
                                                                  or c[0] == "event")]


def test_a_task_without_limits_writes_four_times_and_sets_no_timer() -> None:
    async def scenario() -> None:
        world = World()
        world.submit("a")
        await world.settle()
        assert world.clock.pending == [], "no limit, nothing to wake it"
        world.controller.intake.on_pod(None, pod("a-a1", "a", 0))
        await world.settle()
        assert world.status("a")["phase"] == "Succeeded"
        assert writes(world, "a") == [("status", "a"), ("job", "a-a1"), ("status", "a"), ("event", "AttemptEnded")]
    asyncio.run(scenario())


def test_a_start_deadline_wakes_the_waiting_task_when_it_passes_and_is_counted() -> None:
    async def scenario() -> None:
        world = World(concurrency=1)
        world.submit("hog")
        await world.settle()
        # created 11:59:59Z, first seen at 12:00:00Z (T0): outside the creation's second, so the
        # creation time is the submission, and the deadline 12:00:09Z.
        world.submit("late", startDeadline="10s")
        await world.settle()
        assert world.status("late")["phase"] == "Queued"
        before = counter("cronoq_deadlines_total", namespace=NS, pool="p", kind="start")
        await world.clock.advance(8.9)
        await world.settle()
        assert world.status("late")["phase"] == "Queued", "not before its time"
        await world.clock.advance(0.2)
        await world.settle()
        status = world.status("late")
        assert status["phase"] == "Failed", status
        assert next(c for c in status["conditions"] if c["type"] == "Finished")["reason"] == "StartDeadlineExceeded"
        assert ("job", "late-a1") not in world.writer.calls
        assert world.writer.calls.count(("status", "late")) == 2  # Queued, then Failed: one write per change
        assert counter("cronoq_deadlines_total", namespace=NS, pool="p", kind="start") == before + 1
    asyncio.run(scenario())


def test_the_deadline_deletes_the_running_job_when_it_passes() -> None:
    async def scenario() -> None:
        world = World()
        world.submit("a", deadline="30s")  # created 11:59:59Z: due at 12:00:29Z
        await world.settle()
        assert world.status("a")["phase"] == "Running"
        before = counter("cronoq_deadlines_total", namespace=NS, pool="p", kind="total")
        await world.clock.advance(29.5)
        await world.settle()
        assert ("delete-job", "a-a1") in world.writer.calls
        assert world.status("a")["phase"] == "Failed"
        assert world.status("a")["attempts"][0]["reason"] == "DeadlineExceeded"
        assert counter("cronoq_deadlines_total", namespace=NS, pool="p", kind="total") == before + 1
    asyncio.run(scenario())
