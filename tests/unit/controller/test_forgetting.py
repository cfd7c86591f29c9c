"""Run for months (DESIGN §10): what the controller learns about a task from its own writes (a
Job the API server rejected or refused, late reports already counted) goes when the task goes,
so memory follows the tasks that exist, not every task ever seen."""
from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from cronoq.controller.clock import FakeClock
from cronoq.controller.reconciler import Controller
from cronoq.kube.writes import Rejected
from cronoq.controller.workqueue import TaskWork

from tests.unit.builders import T0
from tests.unit.fakes import NS, QUOTA_REFUSAL, FakeWriter, World, counter, pod, pool, task

TASKS = 2_000
BATCH = 1_000
"""Two batches, each with every kind of leftover, each checked forgotten to the last name: 10,000
tasks took 38 s of CPU (4 minutes on the shared 2-core machine, past pytest-timeout's 5 at a load of
16, issue 52 item 7) and checked nothing two batches do not."""


class RefusingWorld(World):
    """The reconciler tests' world, over a writer that can refuse Jobs."""

    def __init__(self, concurrency: int) -> None:
        self.writer: RefusingWriter = RefusingWriter()
        self.clock = FakeClock(T0)
        self.controller = Controller(self.writer, epoch=1, clock=self.clock)
        self.controller.intake.on_pool(None, pool(concurrency))


class RefusingWriter(FakeWriter):
    """The fake API server, refusing the Jobs named in `refuse` every time they are created."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: dict[str, Rejected] = {}

    async def create_job(self, job: dict[str, Any]) -> dict[str, Any]:
        refusal = self.refuse.get(job["metadata"]["name"])
        if refusal is not None:
            raise refusal
        return await super().create_job(job)


def foreign_job(name: str) -> dict[str, Any]:
    """A finished Job claiming attempt 2 of task `name`, which ran one attempt: a late report."""
    return {"metadata": {"name": f"{name}-a2", "namespace": NS, "uid": f"job-{name}-a2",
                         "creationTimestamp": "2026-12-03T12:00:00Z",
                         "labels": {"cronoq.io/attempt": "2", "cronoq.io/lease-id": "e0-a2", "cronoq.io/task": name,
                                    "cronoq.io/task-uid": f"uid-{name}", "cronoq.io/pool": "p"}},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]}}


def test_thousands_of_tasks_created_finished_and_deleted_leave_nothing_behind() -> None:
    """Every tenth task's Job is rejected (422), every tenth refused by a quota (403, and deleted
    while refused), every tenth gets a late report; the rest just succeed."""
    async def scenario() -> None:
        world = RefusingWorld(concurrency=BATCH)
        writer = world.writer
        store = world.controller.store
        stale_before = counter("cronoq_stale_completions_total")
        for start in range(0, TASKS, BATCH):
            names = [f"t{i}" for i in range(start, start + BATCH)]
            for i, name in enumerate(names):
                if i % 10 == 1:
                    writer.refuse[f"{name}-a1"] = Rejected(422, "spec.template.spec.containers[0].image: Required value")
                elif i % 10 == 2:
                    writer.refuse[f"{name}-a1"] = Rejected(403, QUOTA_REFUSAL)
                world.submit(name)
            await world.settle()
            for i, name in enumerate(names):
                if i % 10 not in (1, 2):
                    world.controller.intake.on_pod(None, pod(f"{name}-a1", name, 0))
            await world.settle()
            late = [name for i, name in enumerate(names) if i % 10 == 3]
            for name in late:
                assert writer.tasks[name]["status"]["phase"] == "Succeeded"
                world.controller.intake.on_job(None, foreign_job(name))
                world.controller.intake.on_job(None, foreign_job(name))  # a relist: counted once all the same
            await world.settle()
            records = store.tasks.values()
            assert sum(bool(r.stale_counted) for r in records) == len(late)
            assert sum(bool(r.refused) for r in records) == BATCH // 10
            assert sum(bool(r.rejected) for r in records) == 0, "a rejected Job's task has failed: done with"
            for name in names:
                world.controller.intake.on_task("DELETED", task(name))
            await world.settle()
            left = mentions(world.controller, {s for n in names for s in (n, f"uid-{n}", f"{n}-a1", f"{n}-a2")})
            assert not left, f"forgotten tasks are still held: {sorted(left)[:10]}"
        assert counter("cronoq_stale_completions_total") - stale_before == TASKS // 10
        assert world.clock.pending == [], "the refused tasks' retry timers went with them"
    asyncio.run(scenario())


def mentions(controller: Controller, names: set[str]) -> set[str]:
    """Which of `names` anything the controller keeps by task still holds: every container reachable
    from its store, slots, deletion schedule and work queue is walked (so a new index cannot
    escape this test by not being named in it)."""
    found: set[str] = set()
    seen = {id(controller.writer), id(controller.clock)}  # the (fake) API server and time: not ours

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if value in names:
                found.add(value)
            return
        if id(value) in seen or callable(value) or isinstance(value, (int, float, bool, type(None))):
            return
        seen.add(id(value))
        if isinstance(value, BaseModel):
            walk(value.model_dump())
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k)
                walk(v)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                walk(item)
        elif hasattr(value, "__dict__") or hasattr(value, "__slots__"):
            attrs = dict(getattr(value, "__dict__", {}))
            for slot in getattr(type(value), "__slots__", ()):
                if hasattr(value, slot):
                    attrs[slot] = getattr(value, slot)
            for v in attrs.values():
                walk(v)

    for part in (controller.store, controller.slots, controller.expiry, controller.queue):
        walk(part)
    return found


def test_a_task_replaced_under_its_name_starts_with_nothing_of_the_old_one() -> None:
    """Deleted and created again while no watch said so (a relist shows only the new uid): the new
    task waits for its own turn from its own arrival, and the old one's timers go."""
    async def scenario() -> None:
        world = World(concurrency=1)
        world.submit("a")
        world.submit("b")
        await world.settle()
        slots, key = world.controller.slots, (NS, "b")
        assert slots.ready_since[key] == T0 and key in slots.waiting[(NS, "p")]
        world.controller.queue.add_after(TaskWork(*key), 300)  # e.g. a backoff of the old task
        await world.clock.advance(60)
        replacement = task("b")
        replacement["metadata"]["uid"] = "uid-b-2"
        world.writer.tasks["b"] = replacement
        world.controller.intake.on_task(None, replacement)
        assert slots.ready_since[key] == world.clock.now(), "waiting since it came, not since the old one did"
        assert world.clock.pending == [], "the old task's timer went with it"
        assert world.controller.store.tasks[key].uid == "uid-b-2"
    asyncio.run(scenario())
