"""Pool names that do not exist cost nothing lasting (issue 49, finding 5): `spec.pool` is the task
producer's word, so tasks naming 2,000 made-up pools, once they go, leave no queue, no counter, no
index entry and no Prometheus series behind; while they wait, the registry holds no series per
name either (what they do counts under `metrics.NO_POOL`). A TaskPool's own series come with it
and go with it."""
from __future__ import annotations

import asyncio
from typing import Any

from cronoq import metrics
from cronoq.controller.reconciler import Controller

from tests.unit.fakes import NS, World, counter, task

NAMES = 2000


def per_pool(controller: Controller) -> dict[str, int]:
    """The size of everything the operator keeps by pool."""
    store, slots = controller.store, controller.slots
    return {"queues": len(slots.waiting), "waits_in": len(slots.waits_in), "in_pool": len(store.in_pool),
            "phases": len(store.phases), "running": len(store.running), "fresh": len(store.fresh),
            "keyed": len(store.keyed), "draining": len(slots.draining), "grants": len(slots.grants),
            "buckets": len(controller.rate_limits._buckets), "token_timers": len(controller._token_timers)}


def samples() -> int:
    return sum(len(family.samples) for family in metrics.REGISTRY.collect())


def made_up(i: int, **spec: Any) -> dict[str, Any]:
    raw = task(f"t{i}")
    raw["spec"].update(pool=f"nowhere-{i}", **spec)
    return raw


def submit(world: World, raw: dict[str, Any]) -> None:
    world.writer.tasks[raw["metadata"]["name"]] = raw
    world.controller.intake.on_task(None, raw)


def delete(world: World, name: str) -> None:
    world.controller.intake.on_task("DELETED", world.writer.tasks.pop(name))


def test_tasks_naming_2000_made_up_pools_leave_nothing_once_deleted() -> None:
    asyncio.run(_tasks_naming_2000_made_up_pools_leave_nothing_once_deleted())


async def _tasks_naming_2000_made_up_pools_leave_nothing_once_deleted() -> None:
    world = World()
    await world.settle()
    before, series_before = per_pool(world.controller), samples()

    for i in range(NAMES):
        submit(world, made_up(i))
    await world.settle()
    assert world.status("t0")["phase"] == "Queued", "it waits for a pool that does not exist"
    assert samples() == series_before, "no series for a pool no TaskPool has"
    assert len(world.controller.slots.waiting) == NAMES + 0, "a queue per name only while its task waits"

    for i in range(NAMES):
        delete(world, f"t{i}")
    await world.settle()

    assert per_pool(world.controller) == before
    assert samples() == series_before


def test_tasks_that_end_in_made_up_pools_are_counted_in_one_series() -> None:
    asyncio.run(_tasks_that_end_in_made_up_pools_are_counted_in_one_series())


async def _tasks_that_end_in_made_up_pools_are_counted_in_one_series() -> None:
    world = World()
    await world.settle()
    series_before = samples()  # the NO_POOL series may exist already (another test)
    cancelled = counter("cronoq_tasks_total", namespace=NS, pool=metrics.NO_POOL, status="cancelled")

    for i in range(200):
        submit(world, made_up(i))
    await world.settle()
    for i in range(200):  # a producer's own cancellation ends them without any pool
        raw = world.writer.tasks[f"t{i}"]
        raw["spec"]["cancel"] = True
        world.controller.intake.on_task(None, dict(world.writer._bump(raw)))
    await world.settle()

    assert world.status("t0")["phase"] == "Cancelled"
    assert counter("cronoq_tasks_total", namespace=NS, pool=metrics.NO_POOL, status="cancelled") == cancelled + 200
    pools = {s.labels.get("pool") for family in metrics.REGISTRY.collect() for s in family.samples}
    assert not any(p and p.startswith("nowhere-") for p in pools), "no series per made-up name"
    assert samples() - series_before <= 19, "at most the NO_POOL series of a task count and its duration"
    before = per_pool(world.controller)
    for i in range(200):
        delete(world, f"t{i}")
    await world.settle()
    assert per_pool(world.controller) == {**before, "phases": before["phases"] - 200, "in_pool": before["in_pool"] - 200}
    assert before["queues"] == 0, "a cancelled task waits in no queue"


def test_a_pools_series_come_and_go_with_the_taskpool() -> None:
    asyncio.run(_a_pools_series_come_and_go_with_the_taskpool())


async def _a_pools_series_come_and_go_with_the_taskpool() -> None:
    world = World()
    await world.settle()
    pool = {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool",
            "metadata": {"name": "brief", "namespace": NS, "uid": "brief-uid", "resourceVersion": "1", "generation": 1},
            "spec": {"concurrency": 1, "leaseTTL": "0s"}}
    series_before = samples()
    world.controller.intake.on_pool(None, pool)
    await world.settle()
    assert metrics.REGISTRY.get_sample_value("cronoq_tasks_total",
                                             {"namespace": NS, "pool": "brief", "status": "succeeded"}) == 0.0
    assert samples() > series_before

    world.controller.intake.on_pool("DELETED", pool)
    await world.settle()

    assert samples() == series_before
    assert metrics.REGISTRY.get_sample_value("cronoq_queue_depth", {"namespace": NS, "pool": "brief"}) is None


def test_a_task_that_goes_is_taken_out_of_its_queue_without_a_scan() -> None:
    asyncio.run(_a_task_that_goes_is_taken_out_of_its_queue_without_a_scan())


async def _a_task_that_goes_is_taken_out_of_its_queue_without_a_scan() -> None:
    world = World(concurrency=0)  # nothing is admitted: every task waits
    for i in range(3):
        world.submit(f"w{i}")
    await world.settle()
    slots = world.controller.slots
    assert len(slots.waiting[(NS, "p")]) == 3 and set(slots.waits_in) == {(NS, f"w{i}") for i in range(3)}

    delete(world, "w1")
    assert (NS, "w1") not in slots.waiting[(NS, "p")] and (NS, "w1") not in slots.waits_in
    delete(world, "w0")
    delete(world, "w2")
    await world.settle()
    assert slots.waiting == {} and slots.waits_in == {}
