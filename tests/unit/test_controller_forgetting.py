"""Run for months (DESIGN §10): what the controller learns about a task from its own writes (a
Job the API server rejected or refused, late reports already counted) goes when the task goes,
so memory follows the tasks that exist, not every task ever seen."""
from __future__ import annotations

import asyncio
from typing import Any

from cronoq.controller.clock import FakeClock
from cronoq.controller.reconciler import Controller
from cronoq.kube.writes import Rejected

from tests.unit.builders import T0
from tests.unit.fakes import NS, QUOTA_REFUSAL, FakeWriter, World, counter, pod, pool, task

TASKS = 10_000
BATCH = 1_000


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


async def quiet(world: World) -> None:
    """Run the work queue until nothing is queued or being processed (timers of refused Jobs may wait)."""
    queue = world.controller.queue
    worker = asyncio.create_task(queue.run(1, world.controller.process))
    try:
        for _ in range(100_000):
            await asyncio.sleep(0)
            if len(queue) == 0 and not queue._processing:
                return
        raise AssertionError("the work queue never went quiet")
    finally:
        worker.cancel()


def test_ten_thousand_tasks_created_finished_and_deleted_leave_nothing_behind() -> None:
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
            await quiet(world)
            for i, name in enumerate(names):
                if i % 10 not in (1, 2):
                    world.controller.intake.on_pod(None, pod(f"{name}-a1", name, 0))
            await quiet(world)
            late = [name for i, name in enumerate(names) if i % 10 == 3]
            for name in late:
                assert writer.tasks[name]["status"]["phase"] == "Succeeded"
                world.controller.intake.on_job(None, foreign_job(name))
                world.controller.intake.on_job(None, foreign_job(name))  # a relist: counted once all the same
            await quiet(world)
            assert len(store.stale_counted) == len(late) and len(store.refused) == BATCH // 10
            for name in names:
                world.controller.intake.on_task("DELETED", task(name))
            await quiet(world)
            assert (store.rejected, store.refused, store.stale_counted) == ({}, {}, {})
            assert not store.tasks and not store.jobs and not store.job_owner and not store.pods
        assert counter("cronoq_stale_completions_total") - stale_before == TASKS // 10
        for timer in world.controller.queue._timers.values():  # the refused tasks' retries, now moot
            timer.cancel()
    asyncio.run(scenario())
