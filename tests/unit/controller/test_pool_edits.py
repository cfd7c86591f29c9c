"""An edit of a pool reconciles its tasks only when it may change their decisions: resuming or
widening a pool with a deep queue looks at the pool alone, which grants the free slots (issue 56)."""
from __future__ import annotations

import asyncio
from typing import Any

from cronoq.controller.workqueue import PoolWork

from tests.unit.fakes import World, counter, pool


def _edit(world: World, concurrency: int, version: str, **spec: Any) -> None:
    raw = pool(concurrency, **spec)
    raw["metadata"].update(resourceVersion=version, generation=int(version))
    world.controller.intake.on_pool(None, raw)


def test_resuming_a_deep_queue_looks_at_the_pool_alone_and_starts_as_many_as_it_may() -> None:
    async def scenario() -> None:
        world = World(concurrency=0)
        for i in range(50):
            world.submit(f"t{i:02d}")
        await world.settle()
        assert all(world.status(f"t{i:02d}").get("phase") == "Queued" for i in range(50))
        written = len(world.writer.calls)

        _edit(world, 3, "2")
        queue = world.controller.queue
        assert len(queue) == 1 and queue.queued(PoolWork("unit", "p")), "the pool's key only"
        assert counter("cronoq_workqueue_depth") == 1
        await world.settle()
        started = [name for kind, name in world.writer.calls[written:] if kind == "job"]
        assert len(started) == 3, started
        assert {f"t{i:02d}" for i in range(3)} == {name.rsplit("-", 1)[0] for name in started}, "the oldest first"

    asyncio.run(scenario())


def test_an_edit_that_may_change_what_waiting_tasks_say_reconciles_each_of_them() -> None:
    async def scenario() -> None:
        world = World(concurrency=0)
        for i in range(5):
            world.submit(f"t{i}")
        await world.settle()
        _edit(world, 0, "2", rateLimit={"startsPerSecond": 1, "burst": 1})  # a countdown to say
        assert len(world.controller.queue) == 6 and counter("cronoq_workqueue_depth") == 6
        await world.settle()
        _edit(world, 0, "3", rateLimit={"startsPerSecond": 1, "burst": 1}, paused=True)  # rate limited: every task
        assert len(world.controller.queue) == 6

    asyncio.run(scenario())
