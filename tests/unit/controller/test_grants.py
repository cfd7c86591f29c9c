"""A reconcile that fails never keeps what it was granted (issue 49): a task whose reconcile
raises, however and wherever, gives its pool slot and its rate-limit token back, and another task
of the pool runs. With the fake writer and the fake clock; the failures are injected at each step
of a reconcile (the decision, the detour that reads a dependency's output, the status write)."""
from __future__ import annotations

import asyncio
import copy
import random
from typing import Any, Callable

import pytest

from cronoq.controller import reconciler
from cronoq.engine.decide import Live, Subject
from cronoq.engine.plan import Observation, Plan
from cronoq.apiserver.errors import Conflict
from cronoq.kube.writes import Rejected

from tests.unit.fakes import NS, FakeWriter, World, pod, pool, task


class FailingFor(FakeWriter):
    """Fails every status write of one task, and every read of another."""

    def __init__(self, write: str | None = None, read: str | None = None) -> None:
        super().__init__()
        self.write, self.read = write, read

    async def replace_task_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        if raw["metadata"]["name"] == self.write:
            self.calls.append(("status-failed", self.write))
            raise RuntimeError("the API server is unwell for this task")
        return await super().replace_task_status(raw, status)

    async def read_task(self, namespace: str, name: str) -> dict[str, Any] | None:
        if name == self.read:
            raise RuntimeError("the API server is unwell for this read")
        return await super().read_task(namespace, name)


def world_with(writer: FakeWriter, concurrency: int = 1, **spec: Any) -> World:
    world = World(concurrency)
    world.writer = writer
    world.controller.writer = world.controller.applier.writer = writer
    world.controller.intake.on_pool(None, pool(concurrency, **spec))
    return world


def finished_dependency(world: World, name: str = "dep", output: str = '{"rows": 12}') -> None:
    raw = task(name)
    raw["status"] = {"phase": "Succeeded", "attempt": 1, "finishedAt": "2026-12-03T11:59:59Z",
                     "output": output, "outputAvailable": True}
    world.writer.tasks[name] = copy.deepcopy(raw)
    world.controller.intake.on_task(None, raw)


def raising_decide(name: str) -> Callable[[Subject, Observation, random.Random], Plan]:
    """The engine's decision, but one that raises for `name` once it is granted a slot (a parse
    that is not total, a bug): before any write."""
    decide = reconciler.decide

    def decide_or_raise(subject: Subject, seen: Observation, rng: random.Random) -> Plan:
        if isinstance(subject, Live) and subject.task.metadata.name == name and seen.admit:
            raise RecursionError("maximum recursion depth exceeded")
        return decide(subject, seen, rng)
    return decide_or_raise


async def retry_for(world: World, seconds: float) -> None:
    """Let the failing task's retries (their backoff) run for `seconds` of the fake clock."""
    await world.settle()
    end = world.clock.monotonic() + seconds
    while (pending := world.clock.pending) and world.clock.monotonic() + pending[0] <= end:
        await world.clock.advance(pending[0])
        await world.settle()


def jobs(world: World) -> list[str]:
    return [name for kind, name in world.writer.calls if kind == "job"]


@pytest.mark.parametrize("where", ["decision", "reading inputs", "status write"])
def test_a_task_whose_reconcile_raises_keeps_no_slot_and_another_task_of_the_pool_runs(
        where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        writer = FailingFor(write="a" if where == "status write" else None,
                            read="dep" if where == "reading inputs" else None)
        world = world_with(writer, concurrency=1)
        if where == "decision":
            monkeypatch.setattr(reconciler, "decide", raising_decide("a"))
        finished_dependency(world)
        world.submit("a", priority=10, **({"dependsOn": [{"task": "dep"}]} if where == "reading inputs" else {}))
        await world.settle()
        assert (NS, "a") not in world.controller.slots.grants, "given back when its reconcile raised"
        world.submit("b")  # lower priority: runs only if "a" keeps no slot
        await retry_for(world, 120)
        assert jobs(world) == ["b-a1"], world.writer.calls
        assert world.status("b")["phase"] == "Running"
        assert (NS, "a") not in world.controller.slots.grants
        assert "phase" not in world.status("a") or world.status("a")["phase"] != "Running"
        # and once "b" is done, "a" has its turn again (and still cannot take it for good)
        world.controller.intake.on_pod(None, pod("b-a1", "b", 0))
        world.submit("c")
        await retry_for(world, 600)
        assert jobs(world) == ["b-a1", "c-a1"], world.writer.calls
    asyncio.run(scenario())


def test_a_reconcile_that_asks_for_the_next_one_hands_its_grant_on() -> None:
    """A detour (the dependency's output is read) and a conflicting write end a reconcile without
    booking the grant, with the next reconcile queued: that one starts the attempt, with no
    Queued status written in between."""
    class ConflictingStart(FakeWriter):
        """The write that records attempt 1 conflicts, once."""

        async def replace_task_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
            if status.get("attempt") and ("status-failed", "a") not in self.calls:
                self.calls.append(("status-failed", "a"))
                raise Conflict("the object has been modified")
            return await super().replace_task_status(raw, status)

    async def scenario() -> None:
        world = world_with(ConflictingStart(), concurrency=1)
        finished_dependency(world)
        world.submit("a", dependsOn=[{"task": "dep"}])
        await world.settle()
        calls = world.writer.calls
        after = calls[calls.index(("read", "dep")):]
        assert after == [("read", "dep"), ("status-failed", "a"), ("read", "a"), ("status", "a"), ("job", "a-a1")], \
            calls
        assert world.status("a")["phase"] == "Running" and not world.controller.slots.grants
    asyncio.run(scenario())


def test_a_refused_status_write_gives_the_slot_back_to_a_task_already_waiting() -> None:
    """It used to drop the grant without dispatching the pool: the waiting task ran only when
    something else happened to dispatch it."""
    async def scenario() -> None:
        world = World(concurrency=1)
        world.writer.fail = [Rejected(422, "status.epoch: epoch may not decrease")]
        world.submit("a", priority=10)
        world.submit("b")
        await world.settle()
        assert jobs(world) == ["b-a1"], world.writer.calls
    asyncio.run(scenario())


def test_a_grant_given_back_returns_its_rate_limit_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """One token per 10 s: "a" takes the first at 10 s and fails; "b" starts with the token "a"
    gave back, at 10 s, not at 20 s."""
    async def scenario() -> None:
        monkeypatch.setattr(reconciler, "decide", raising_decide("a"))
        world = World(concurrency=5)
        world.controller.intake.on_pool(None, pool(5, rateLimit={"startsPerSecond": 0.1, "burst": 1}))
        world.submit("a", priority=10)
        world.submit("b")
        await retry_for(world, 10)
        assert jobs(world) == ["b-a1"], world.writer.calls
        assert world.status("b")["attempts"][0]["dispatchedAt"] == "2026-12-03T12:00:10Z"
    asyncio.run(scenario())


def test_a_deleted_task_gives_back_the_token_of_its_unused_grant() -> None:
    async def scenario() -> None:
        world = World(concurrency=5)
        world.controller.intake.on_pool(None, pool(5, rateLimit={"startsPerSecond": 0.1, "burst": 1}))
        world.submit("a", priority=10)
        world.submit("b")
        await world.settle()
        await world.clock.advance(10)  # the token's timer grants "a"; its reconcile has not run yet
        assert (NS, "a") in world.controller.slots.grants
        world.controller.intake.on_task("DELETED", world.writer.tasks.pop("a"))
        await world.settle()
        assert jobs(world) == ["b-a1"], world.writer.calls
    asyncio.run(scenario())
