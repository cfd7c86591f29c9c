"""Fairness groups through the Controller (issue 39): a pool's groupConcurrency caps what one group
runs at once, a slot one group may not take goes to the next group, and a group's ended attempt
lets its next task in. A fake writer, no clock passing."""
from __future__ import annotations

import asyncio
import copy
from collections import Counter

from tests.unit.fakes import World, pod, pool, task


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


# --- fair shares by submitter (issue 54, item 1) --------------------------------------------------

def submit_as(world: World, name: str, submitter: str, **spec) -> None:
    """A task the chart's admission policy stamped with its creator (cronoq.io/submitter)."""
    raw = task(name)
    raw["metadata"]["annotations"] = {"cronoq.io/submitter": submitter}
    raw["spec"].update(spec)
    world.writer.tasks[name] = copy.deepcopy(raw)
    world.controller.intake.on_task(None, raw)


def test_by_submitter_a_tenant_with_many_groups_and_raised_priority_gets_half_the_slots() -> None:
    async def scenario() -> None:
        world = World()
        world.controller.intake.on_pool(None, pool(4, fairShare={"by": "Submitter"}))
        for i in range(8):
            submit_as(world, f"g{i}", "gamer", group=f"name-{i}", priority=100)
        for i in range(4):
            submit_as(world, f"h{i}", "honest")
        await world.settle()
        assert sorted(started(world)) == ["g0-a1", "g1-a1", "h0-a1", "h1-a1"]
        assert world.status("g2")["message"] == "queued in pool p, in the share of submitter gamer (weight 1)"

        # Two of the gamer's end: the slots go back to it (it holds fewer than the honest tenant).
        for name in ("g0", "g1"):
            world.controller.intake.on_pod(None, pod(f"{name}-a1", name, 0))
        await world.settle()
        assert started(world)[-2:] == ["g2-a1", "g3-a1"] and len(started(world)) == 6
        # One of the honest tenant's ends: its next task, not the gamer's raised ones.
        world.controller.intake.on_pod(None, pod("h0-a1", "h0", 0))
        await world.settle()
        assert started(world)[-1] == "h2-a1"
    asyncio.run(scenario())


def test_weights_split_the_slots_and_the_cap_holds_per_submitter() -> None:
    async def scenario(cap: int | None) -> Counter[str]:
        world = World()
        capped = {"groupConcurrency": cap} if cap else {}
        world.controller.intake.on_pool(None, pool(6, **capped, fairShare={"by": "Submitter", "weights": {"heavy": 2}}))
        for i in range(6):
            submit_as(world, f"l{i}", "light", group=f"x{i}")
            submit_as(world, f"w{i}", "heavy")
        await world.settle()
        return Counter(name[0] for name in started(world))

    assert asyncio.run(scenario(None)) == {"w": 4, "l": 2}, "2:1"
    assert asyncio.run(scenario(3)) == {"w": 3, "l": 3}, "heavy stops at its cap; light takes the slot"
