"""Retention by outcome through the controller (issue 40), over the fake writer: an unfinished
task's Job is created for the longest retention it may end with and re-timed once, when it ends,
to its outcome's; the expiry is scheduled by the outcome's TTL."""
from __future__ import annotations

import asyncio
import copy
from datetime import timedelta

from cronoq.controller.workqueue import TaskWork

from tests.unit.fakes import NS, World, pod, pool

BY_OUTCOME = {"jobRetention": "1h", "jobRetentionAfterSuccess": "0s", "jobRetentionAfterFailure": "168h",
              "ttlAfterSuccess": "1h", "ttlAfterFailure": "168h"}


def _retimes(world: World) -> list[tuple[str, ...]]:
    return [c for c in world.writer.calls if c[0] == "retime-job"]


def test_jobs_are_kept_for_the_longest_outcome_then_retimed_to_the_one_that_came() -> None:
    async def scenario() -> None:
        world = World(concurrency=2)
        world.controller.intake.on_pool(None, {**pool(2, **BY_OUTCOME),
                                               "metadata": {**pool(2)["metadata"], "resourceVersion": "5"}})
        world.submit("ok", retry={"maxAttempts": 1})
        world.submit("dead", retry={"maxAttempts": 1})
        await world.settle()
        week = int(timedelta(days=7).total_seconds())
        assert [world.writer.jobs[j]["spec"]["ttlSecondsAfterFinished"] for j in ("ok-a1", "dead-a1")] == [week, week]

        world.controller.intake.on_pod(None, pod("ok-a1", "ok", 0))
        world.controller.intake.on_pod(None, pod("dead-a1", "dead", 1))
        await world.settle()
        assert world.status("ok")["phase"] == "Succeeded" and world.status("dead")["phase"] == "DeadLettered"
        assert _retimes(world) == [("retime-job", "ok-a1=0")]  # the dead letter's Job already holds its week
        due = {key[1]: at for key, (at, _) in world.controller.expiry._due.items()}
        finished = {name: world.status(name)["finishedAt"] for name in ("ok", "dead")}
        assert (due["dead"] - due["ok"]) > timedelta(days=6), (due, finished)

        world.controller.intake.on_job(None, copy.deepcopy(world.writer.jobs["ok-a1"]))  # its watch event
        for name in ("ok", "dead"):  # and a resync: nothing more to write
            world.controller.queue.add(TaskWork(NS, name))
        await world.settle()
        assert _retimes(world) == [("retime-job", "ok-a1=0")]
    asyncio.run(scenario())
