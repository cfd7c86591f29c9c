"""Why a task waits for Kueue, through the Controller with the fake writer and the fake clock:
the Job Kueue holds is looked at (its Workload read) a second after its creation and then every
10 s, its Task's message written once per change of Kueue's reason (not once per look), and the
time Kueue held it counted in cronoq_kueue_wait_seconds, apart from the pool's own wait."""
from __future__ import annotations

import asyncio
import copy

from tests.unit.fakes import NS, World, counter, pod, pool

PENDING = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f, {n} more needed"


def workload(message: str) -> dict:
    return {"metadata": {"name": "job-a-a1-x"}, "spec": {"podSets": []},
            "status": {"resourceRequests": [{"name": "main", "resources": {"cpu": "1"}}],
                       "conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                       "message": message}]}}


def kueue_world() -> World:
    world = World(concurrency=2)
    raw = pool(2, admission={"kueue": {"localQueue": "gpu"}})
    raw["metadata"]["resourceVersion"] = "2"
    world.controller.intake.on_pool(None, raw)
    world.writer.local_queues["gpu"] = ("found", {"spec": {"clusterQueue": "team-a"}})
    return world


def test_kueues_words_are_written_once_per_reason_and_its_wait_is_counted_apart() -> None:
    async def scenario() -> None:
        world = kueue_world()
        world.writer.workloads["uid-a-a1"] = [workload(PENDING.format(n=1))]
        waited = counter("cronoq_kueue_wait_seconds_count", namespace=NS, pool="p")
        waited_sum = counter("cronoq_kueue_wait_seconds_sum", namespace=NS, pool="p")
        dispatched = counter("cronoq_dispatch_latency_seconds_count", namespace=NS, pool="p")
        world.submit("a")
        await world.settle()
        assert world.writer.jobs["a-a1"]["spec"]["suspend"] is True
        assert ("read-workloads", "uid-a-a1") not in world.writer.calls, "not before a second has passed"
        assert counter("cronoq_dispatch_latency_seconds_count", namespace=NS, pool="p") == dispatched + 1

        await world.clock.advance(1.1)
        await world.settle()
        status = world.status("a")
        running = next(c for c in status["conditions"] if c["type"] == "Running")
        assert (status["phase"], running["reason"]) == ("Running", "WaitingForKueue")
        assert status["message"] == ("attempt 1 of 3 is waiting for Kueue: LocalQueue gpu, ClusterQueue team-a, "
                                     "needs 1 cpu; Kueue says: " + PENDING.format(n=1))
        assert running["message"] == status["message"]
        writes = world.writer.calls.count(("status", "a"))
        assert writes == 2  # Running (attempt 1 recorded), then Kueue's words

        # Three more looks, 10 s apart; Kueue's count of what is missing moves, its reason does not.
        world.writer.workloads["uid-a-a1"] = [workload(PENDING.format(n=2))]
        for _ in range(3):
            await world.clock.advance(10.1)
            await world.settle()
        assert world.writer.calls.count(("read-workloads", "uid-a-a1")) == 4
        assert world.writer.calls.count(("status", "a")) == writes, "a look is not a write"
        assert world.writer.calls.count(("read-local-queue", "gpu")) <= 3  # the pool's look, and one per 30 s

        # Kueue admits it at 12:00:40Z: said once; it succeeds; Kueue held it 40 s.
        job = copy.deepcopy(world.writer.jobs["a-a1"])
        job["spec"]["suspend"] = False
        job["status"] = {"startTime": "2026-12-03T12:00:40Z"}
        world.controller.intake.on_job(None, job)
        await world.settle()
        assert world.status("a")["message"] == "attempt 1 of 3 running"
        world.controller.intake.on_pod(None, pod("a-a1", "a", 0))
        await world.settle()
        assert world.status("a")["phase"] == "Succeeded"
        assert world.writer.calls.count(("status", "a")) == writes + 2
        assert counter("cronoq_kueue_wait_seconds_count", namespace=NS, pool="p") == waited + 1
        assert counter("cronoq_kueue_wait_seconds_sum", namespace=NS, pool="p") == waited_sum + 40.0
        assert counter("cronoq_dispatch_latency_seconds_count", namespace=NS, pool="p") == dispatched + 1
    asyncio.run(scenario())


def test_a_task_without_kueue_is_never_looked_at_and_counts_no_kueue_wait() -> None:
    async def scenario() -> None:
        world = World()
        waited = counter("cronoq_kueue_wait_seconds_count", namespace=NS, pool="p")
        world.submit("a")
        await world.settle()
        await world.clock.advance(15)
        await world.settle()
        world.controller.intake.on_pod(None, pod("a-a1", "a", 0))
        await world.settle()
        assert world.status("a")["phase"] == "Succeeded"
        assert not [c for c in world.writer.calls if c[0] == "read-workloads"]
        assert counter("cronoq_kueue_wait_seconds_count", namespace=NS, pool="p") == waited
    asyncio.run(scenario())
