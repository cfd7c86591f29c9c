"""A pool's rate limit in the Controller, with the fake writer and the fake clock: the leader grants
slots no faster than the pool's bucket has tokens (a burst, then the rate), retries take tokens
too, priorities choose who gets the next one, a new leader's bucket starts empty, a change applies
at once, and a waiting task says so in one write, with the due time, not a countdown."""
from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timedelta
from typing import Any, Callable

import pytest

from tests.unit.builders import T0
from tests.unit.fakes import NS, World, counter, pod, pool, task


def limited(rate: float, burst: int = 1, concurrency: int = 100, **spec: Any) -> World:
    world = World(concurrency)
    world.controller.intake.on_pool(None, pool(concurrency, rateLimit={"startsPerSecond": rate, "burst": burst},
                                               **spec))
    return world


async def run_until(world: World, done: Callable[[], bool], horizon: float = 120.0) -> None:
    """Process what is queued, then jump to the next timer, until `done` (time passes only so)."""
    await world.settle()
    while not done():
        pending = world.clock.pending
        assert pending and world.clock.monotonic() + pending[0] <= horizon, "nothing left to wait for"
        await world.clock.advance(pending[0])
        await world.settle()


def started(world: World, name: str) -> list[float]:
    """Seconds after T0 at which the task's attempts were recorded (dispatched)."""
    return [(datetime.fromisoformat(a["dispatchedAt"]) - T0).total_seconds()
            for a in world.status(name).get("attempts", [])]


def running(world: World, *names: str) -> Callable[[], bool]:
    return lambda: all(world.status(n).get("phase") == "Running" for n in names)


def test_a_full_bucket_starts_a_burst_then_one_task_per_token() -> None:
    async def scenario() -> None:
        world = limited(2, burst=3)
        await world.settle()
        await world.clock.advance(5)  # idle: the bucket fills up to its burst
        names = [f"t{i}" for i in range(8)]
        for name in names:
            world.submit(name)
        await run_until(world, running(world, *names))
        times = sorted(t for n in names for t in started(world, n))
        assert times == pytest.approx([5, 5, 5, 5.5, 6, 6.5, 7, 7.5])
    asyncio.run(scenario())


def test_a_new_leaders_bucket_starts_empty_however_long_it_stood_by() -> None:
    async def scenario() -> None:
        world = limited(1, burst=5)
        await world.clock.advance(30)  # a follower: it dispatches nothing, its bucket is not filling
        for name in ("a", "b"):
            world.submit(name)
        await run_until(world, running(world, "a", "b"))
        assert started(world, "a") + started(world, "b") == pytest.approx([31, 32])
    asyncio.run(scenario())


def test_retries_take_tokens_too() -> None:
    async def scenario() -> None:
        world = limited(1, retry={"initialBackoff": "0s", "jitter": "none"})
        world.submit("a")
        await run_until(world, running(world, "a"))
        world.controller.intake.on_pod(None, pod("a-a1", "a", 1))  # fails at once; no backoff
        await run_until(world, lambda: world.status("a").get("attempt") == 2)
        assert started(world, "a") == pytest.approx([1, 2]), "attempt 2 waited for the next token"
    asyncio.run(scenario())


def test_the_next_token_goes_to_the_highest_priority() -> None:
    async def scenario() -> None:
        world = limited(1)
        for name in ("low1", "low2"):
            world.submit(name)
        await world.settle()
        await world.clock.advance(0.5)
        world.submit("high", priority=10)
        await run_until(world, running(world, "low1", "low2", "high"))
        assert (started(world, "high"), started(world, "low1"), started(world, "low2")) == ([1.0], [2.0], [3.0])
    asyncio.run(scenario())


def test_a_waiting_task_says_so_once_with_the_due_time_and_no_loop_spins_meanwhile() -> None:
    async def scenario() -> None:
        world = limited(0.5, burst=1)
        before = counter("cronoq_dispatch_rate_limited_total", namespace=NS, pool="p")
        for name in ("a", "b", "c"):
            world.submit(name)
        await world.settle()
        status = world.status("c")
        assert status["phase"] == "Queued" and status["conditions"][0]["reason"] == "RateLimited"
        assert status["nextStartAt"] == "2026-12-03T12:00:02Z"
        assert status["message"] == ("rate-limited: pool p starts at most 0.5 attempts/s (burst 1); "
                                     "next start due at 12:00:02.000Z")
        assert counter("cronoq_dispatch_rate_limited_total", namespace=NS, pool="p") == before + 3
        assert world.clock.pending == [2.0], "one timer: the pool's, when its next token is due"
        await run_until(world, running(world, "a", "b", "c"))
        assert world.writer.calls.count(("status", "c")) == 2, "Queued (RateLimited) once, then Running"
        assert world.status("c").get("nextStartAt") is None
        assert counter("cronoq_dispatch_rate_limited_total", namespace=NS, pool="p") == before + 3
    asyncio.run(scenario())


def test_a_task_that_finds_a_token_costs_the_writes_of_an_unlimited_pool() -> None:
    async def scenario() -> None:
        world = limited(1, burst=1)
        await world.settle()
        await world.clock.advance(1)
        world.submit("a")
        await world.settle()
        world.controller.intake.on_pod(None, pod("a-a1", "a", 0))
        await world.settle()
        assert world.status("a")["phase"] == "Succeeded"
        assert world.writer.calls == [
            ("status", "a"), ("job", "a-a1"), ("status", "a"), ("event", "AttemptEnded")]
    asyncio.run(scenario())


def test_a_changed_limit_applies_at_once() -> None:
    async def scenario() -> None:
        world = limited(0.1)  # one start every 10 s
        for name in ("a", "b", "c"):
            world.submit(name)
        await world.settle()
        await world.clock.advance(1)
        faster = pool(100, rateLimit={"startsPerSecond": 10, "burst": 1})
        faster["metadata"]["resourceVersion"] = "2"
        world.controller.intake.on_pool(None, faster)
        await run_until(world, running(world, "a", "b", "c"))
        assert started(world, "a") + started(world, "b") + started(world, "c") == pytest.approx([1.09, 1.19, 1.29])
    asyncio.run(scenario())


def test_a_removed_limit_lets_the_waiting_start_and_the_slots_still_bound_them() -> None:
    async def scenario() -> None:
        world = limited(0.01, concurrency=2)
        for name in ("a", "b", "c"):
            world.submit(name)
        await world.settle()
        unlimited = pool(2)
        unlimited["metadata"]["resourceVersion"] = "2"
        world.controller.intake.on_pool(None, unlimited)
        await world.settle()
        phases = sorted(world.status(n)["phase"] for n in ("a", "b", "c"))
        assert phases == ["Queued", "Running", "Running"]
        queued = next(n for n in ("a", "b", "c") if world.status(n)["phase"] == "Queued")
        assert world.status(queued)["conditions"][0]["reason"] == "WaitingForSlot"
        assert "nextStartAt" not in world.status(queued)
        assert world.writer.calls.count(("status", queued)) == 2, "one write per reason: RateLimited, WaitingForSlot"
    asyncio.run(scenario())


def test_a_pool_deleted_and_created_again_starts_with_an_empty_bucket() -> None:
    async def scenario() -> None:
        world = limited(1, burst=3)
        await world.settle()
        await world.clock.advance(10)  # full
        again = pool(100, rateLimit={"startsPerSecond": 1, "burst": 3})
        world.controller.intake.on_pool("DELETED", again)
        again["metadata"].update(uid="pool-uid-2", resourceVersion="5")
        world.controller.intake.on_pool(None, again)
        world.submit("a")
        await run_until(world, running(world, "a"))
        assert started(world, "a") == pytest.approx([11.0])
    asyncio.run(scenario())


def test_a_pool_full_by_concurrency_says_waiting_for_a_slot_not_rate_limited() -> None:
    async def scenario() -> None:
        world = limited(1, burst=1, concurrency=1)
        await world.settle()
        await world.clock.advance(timedelta(seconds=5).total_seconds())
        for name in ("a", "b"):
            world.submit(name)
        await world.settle()
        waiting = world.status("b")
        assert waiting["phase"] == "Queued" and waiting["conditions"][0]["reason"] == "WaitingForSlot"
        assert "nextStartAt" not in waiting
    asyncio.run(scenario())


def test_the_token_is_granted_when_due_even_with_every_worker_busy_and_the_start_is_recorded_at_it() -> None:
    async def scenario() -> None:
        world = limited(1)
        for name in ("a", "b"):
            world.submit(name)
        await world.settle()
        await world.clock.advance(1.0)  # the token's timer fires; no worker runs meanwhile (no settle)
        assert (NS, "a") in world.controller.slots.grants, "granted by the timer, not by a queued dispatch"
        await world.clock.advance(0.3)  # the reconcile comes late
        await world.settle()
        assert started(world, "a") == [1.0], "dispatchedAt is the grant's time, not the late reconcile's"
        await run_until(world, running(world, "b"))
        assert started(world, "b") == [2.0], "the next token is due 1/rate after the grant, not after the reconcile"
    asyncio.run(scenario())


def test_a_workers_pool_hands_attempts_over_no_faster_than_its_tokens() -> None:
    async def scenario() -> None:
        from cronoq.engine.pools import WorkerTrust

        world = World(4)
        world.controller.store.worker_trust = WorkerTrust.GUARDED
        world.controller.intake.on_pool(None, pool(4, delivery="Workers", rateLimit={"startsPerSecond": 2}))
        world.controller.intake.on_worker_lease(None, {
            "metadata": {"name": "w", "namespace": NS, "labels": {"cronoq.io/worker-pool": "p"},
                         "annotations": {"cronoq.io/capacity": "4"}},
            "spec": {"holderIdentity": "w", "leaseDurationSeconds": 30, "renewTime": T0.isoformat()}})
        for name in ("a", "b", "c"):  # a payload, no pod fields
            raw = task(name)
            raw["spec"].pop("image")
            world.writer.tasks[name] = copy.deepcopy(raw)
            world.controller.intake.on_task(None, raw)
        await run_until(world, running(world, "a", "b", "c"))
        assert sorted(t for n in ("a", "b", "c") for t in started(world, n)) == [0.5, 1.0, 1.5]
        assert {world.status(n)["worker"] for n in ("a", "b", "c")} == {"w"}
        assert not [c for c in world.writer.calls if c[0] == "job"], "handed to the worker, no Job"
    asyncio.run(scenario())
