"""Checkpoint writes are bounded by the renewal interval, not by the Lease's changes (issue 49,
finding 4), and a finished task keeps no checkpoint in memory: the controller, over the fake
writer, fed an attempt Lease that changes its 4 KiB checkpoint 200 times in 20 seconds."""
from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.unit.fakes import NS, World, pod, pool

TTL = 30.0
"""The attempt's leaseTTL: renewals (and checkpoint writes of their own) every 10s."""


def lease(world: World, name: str, i: int, checkpoint: str | None) -> dict[str, Any]:
    status = world.status(name)
    lease_id = status["attempts"][-1]["leaseId"]
    return {"metadata": {"name": f"{name}-a1", "namespace": NS, "uid": f"lease-{name}", "resourceVersion": str(1000 + i),
                         "labels": {"cronoq.io/task-uid": world.writer.tasks[name]["metadata"]["uid"],
                                    "cronoq.io/task": name, "cronoq.io/attempt": "1", "cronoq.io/lease-id": lease_id},
                         "annotations": {"cronoq.io/checkpoint": checkpoint} if checkpoint else {}},
            "spec": {"holderIdentity": lease_id, "leaseDurationSeconds": int(TTL),
                     "renewTime": world.clock.now().isoformat()}}


def big(i: int) -> str:
    """A checkpoint of about 4 KiB, different each time."""
    return json.dumps({"done": i, "pad": "x" * 4000}, separators=(",", ":"))


async def running_task(name: str = "t") -> World:
    world = World()
    world.controller.intake.on_pool(None, pool(1, leaseTTL=f"{TTL:g}s"))
    world.submit(name)
    await world.settle()
    assert world.status(name)["attempts"][-1]["leaseTTLMs"] == TTL * 1000
    return world


def status_writes(world: World, name: str = "t") -> int:
    return world.writer.calls.count(("status", name))


def test_200_checkpoint_changes_in_20_seconds_cost_3_status_writes_and_the_newest_is_kept() -> None:
    async def scenario() -> None:
        world = await running_task()
        before = status_writes(world)
        for i in range(200):
            world.controller.intake.on_lease(None, lease(world, "t", i, big(i)))
            await world.settle()
            await world.clock.advance(0.1)
            await world.settle()
        written = status_writes(world) - before
        assert written <= 3, f"{written} status writes for 200 checkpoints in 20s (one per 10s at most)"
        assert json.loads(world.status("t")["checkpoint"]["data"])["done"] >= 100, "none older than the interval"

        # The attempt ends right after its newest checkpoint: the write that closes it records that one.
        world.controller.intake.on_lease(None, lease(world, "t", 200, big(200)))
        world.controller.intake.on_pod(None, pod("t-a1", "t", 0))
        await world.settle()
        status = world.status("t")
        assert status["phase"] == "Succeeded"
        assert json.loads(status["checkpoint"]["data"])["done"] == 200
    asyncio.run(scenario())


def test_a_checkpoint_held_back_is_written_when_the_interval_is_over_without_another_change() -> None:
    async def scenario() -> None:
        world = await running_task()
        world.controller.intake.on_lease(None, lease(world, "t", 0, big(0)))
        await world.settle()
        await world.clock.advance(1)
        world.controller.intake.on_lease(None, lease(world, "t", 1, big(1)))
        await world.settle()
        assert json.loads(world.status("t")["checkpoint"]["data"])["done"] == 0, "held back for now"
        await world.clock.advance(9.1)
        await world.settle()
        assert json.loads(world.status("t")["checkpoint"]["data"])["done"] == 1, "written when its time came"
    asyncio.run(scenario())


def test_a_finished_task_keeps_no_checkpoint_in_memory() -> None:
    async def scenario() -> None:
        world = await running_task()
        world.controller.intake.on_lease(None, lease(world, "t", 0, big(0)))
        await world.settle()
        assert world.controller.store.checkpoints, "held while the attempt runs"
        world.controller.intake.on_pod(None, pod("t-a1", "t", 0))
        await world.settle()
        assert world.status("t")["phase"] == "Succeeded"
        store = world.controller.store
        assert store.checkpoints == {}, "what its Lease said is not kept for a finished task"
        record = store.tasks[(NS, "t")]
        assert "status" not in record.raw, "nor its status (the recorded checkpoint with it)"
        # Its Lease, renewed once more by a sidecar still shutting down: still nothing kept.
        world.controller.intake.on_lease(None, lease(world, "t", 1, big(1)))
        await world.settle()
        assert store.checkpoints == {}
    asyncio.run(scenario())
