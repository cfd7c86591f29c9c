"""`ttlAfterSuccess` (any retention) no longer deletes a finished task while an unfinished task
depends on it (issue 49, finding 6): its dependents would then see no phase, and no output. It is
kept until they finish or go, then deleted as its retention says."""
from __future__ import annotations

import asyncio

from tests.unit.fakes import NS, World, pod


def due(world: World, name: str) -> bool:
    return (NS, name) in world.controller.expiry._due


async def finished_dependency_with_waiting_dependents() -> World:
    world = World()
    world.submit("a", ttlAfterSuccess="1s")
    await world.settle()
    # b and c wait for a, and for `later`, which does not exist yet: they stay unfinished.
    world.submit("b", dependsOn=[{"task": "a"}, {"task": "later"}])
    world.submit("c", dependsOn=[{"task": "a"}, {"task": "later"}])
    world.controller.intake.on_pod(None, pod("a-a1", "a", 0))
    await world.settle()
    assert world.status("a")["phase"] == "Succeeded"
    await world.clock.advance(30)
    await world.settle()
    assert not due(world, "a"), "kept: b and c still wait on it"
    return world


def test_a_finished_task_is_kept_while_a_dependent_is_unfinished_and_deleted_once_they_go() -> None:
    async def scenario() -> None:
        world = await finished_dependency_with_waiting_dependents()
        world.controller.intake.on_task("DELETED", world.writer.tasks.pop("b"))
        await world.settle()
        assert not due(world, "a"), "c still waits on it"
        world.controller.intake.on_task("DELETED", world.writer.tasks.pop("c"))
        await world.settle()
        assert due(world, "a"), "no dependent left: its retention (long over) applies"
    asyncio.run(scenario())


def test_a_finished_task_is_deleted_once_its_dependents_finish() -> None:
    async def scenario() -> None:
        world = await finished_dependency_with_waiting_dependents()
        for name in ("b", "c"):  # cancelled by their producer: finished
            raw = world.writer.tasks[name]
            raw["spec"]["cancel"] = True
            world.controller.intake.on_task(None, dict(world.writer._bump(raw)))
            await world.settle()
        assert world.status("b")["phase"] == "Cancelled" and world.status("c")["phase"] == "Cancelled"
        assert due(world, "a")
    asyncio.run(scenario())
