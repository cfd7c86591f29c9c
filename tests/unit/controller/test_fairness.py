"""Fairness groups through the Controller (issue 39): a pool's groupConcurrency caps what one group
runs at once, a slot one group may not take goes to the next group, and a group's ended attempt
lets its next task in. A fake writer, no clock passing."""
from __future__ import annotations

import asyncio

from tests.unit.fakes import World, pod, pool


def started(world: World) -> list[str]:
    return [name for kind, name in world.writer.calls if kind == "job"]


def test_a_group_at_its_cap_waits_while_other_groups_use_the_free_slots() -> None:
    async def scenario() -> None:
        world = World()
        world.controller.intake.on_pool(None, pool(3, groupConcurrency=1))
        for name in ("a1", "a2", "a3"):
            world.submit(name, group="acme")
        world.submit("b1", group="bolt")
        await world.settle()
        assert sorted(started(world)) == ["a1-a1", "b1-a1"], "one of acme's, one of bolt's; a slot stays free"
        assert world.status("a2")["phase"] == "Queued"

        world.controller.intake.on_pod(None, pod("a1-a1", "a1", 0))  # acme's attempt ends: its next one starts
        await world.settle()
        assert sorted(started(world)) == ["a1-a1", "a2-a1", "b1-a1"]
        assert world.status("a3")["phase"] == "Queued"
    asyncio.run(scenario())


def test_without_a_cap_groups_take_turns_for_the_slots_that_free_up() -> None:
    async def scenario() -> None:
        world = World()
        world.controller.intake.on_pool(None, pool(1))
        for name in ("a1", "a2", "a3"):
            world.submit(name, group="acme")
        world.submit("b1", group="bolt")
        await world.settle()
        for _ in range(3):
            running = started(world)[-1]
            world.controller.intake.on_pod(None, pod(running, running.rsplit("-", 1)[0], 0))
            await world.settle()
        assert started(world) == ["a1-a1", "b1-a1", "a2-a1", "a3-a1"]
    asyncio.run(scenario())
