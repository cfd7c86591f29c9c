"""A keyed duplicate whose original Task was deleted (issue 53, item 3), through the Controller over
the fake writer and a real SQLite archive: a keyed task nothing in the cluster holds back asks the
archive once, off the dispatch path, and ends as the duplicate of the archived original (its phase,
message and output) while the key's retention lasts; only when neither the Task nor the archive
holds the output does the duplicate say it is unavailable (the client's OutputUnavailable). When
the archive has nothing, or cannot answer, the task runs as it would without one."""
from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from cronoq.api import Task
from cronoq.archive import Database
from cronoq.client import OutputUnavailable
from cronoq.client.waiting import Waiting
from cronoq.controller.archive import Archiver

from tests.unit.fakes import NS, DownDatabase, World, archived_world, direct, pod, task


def succeeded_pod(job: str, name: str, output: str | None) -> dict[str, Any]:
    """A pod of `job` whose container succeeded, leaving `output` in its report (None: no output)."""
    made = pod(job, name, 0)
    report: dict[str, Any] = {"outcome": "success", "message": "done"}
    if output is not None:
        report["output"] = output
    made["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = json.dumps(report)
    return made


async def ask_and_answer(world: World) -> None:
    """Settle, answer what was asked of the archive, settle again."""
    archiver = world.controller.archiver
    assert archiver is not None
    await world.settle()
    await archiver.answer_once()
    await world.settle()


async def original_ran(world: World, name: str, output: str | None, *, flush: bool = True) -> str:
    """Task `name` with key k ran once and succeeded with `output`, its rows archived (or only
    queued: `flush` False), then it was deleted from the cluster. Returns its uid."""
    archiver = world.controller.archiver
    assert archiver is not None
    world.submit(name, key="k")
    await ask_and_answer(world)  # the archive holds nothing of k: it runs
    assert ("job", f"{name}-a1") in world.writer.calls
    world.controller.intake.on_pod(None, succeeded_pod(f"{name}-a1", name, output))
    await world.settle()
    assert world.status(name)["phase"] == "Succeeded"
    if flush:
        while archiver._queue:
            assert await archiver.flush_once()
    gone = world.writer.tasks.pop(name)
    world.controller.intake.on_task("DELETED", gone)
    await world.settle()
    return str(gone["metadata"]["uid"])


def test_a_duplicate_of_a_deleted_original_ends_with_the_archived_outcome_and_output(tmp_path) -> None:
    async def scenario() -> None:
        world, archiver = await archived_world(f"sqlite:///{tmp_path}/archive.db")
        await original_ran(world, "orig", '{"rows": 12}')

        world.submit("dup", key="k")
        await world.settle()
        record = world.controller.store.tasks[(NS, "dup")]
        assert record.asking and world.status("dup") == {}, "nothing decided before the archive answers"
        assert not world.controller.slots.waits_in and not world.controller.slots.grants, \
            "and it waits for no slot meanwhile, nor holds one"
        await archiver.answer_once()
        await world.settle()
        status = world.status("dup")
        assert (status["phase"], status["duplicateOf"], status["output"], status["outputAvailable"]) == \
            ("Succeeded", "orig", '{"rows": 12}', True)
        assert "archive" in status["message"]
        assert ("job", "dup-a1") not in world.writer.calls
        assert Waiting.result(Task.model_validate(world.writer.tasks["dup"])).output == {"rows": 12}

        # The same manifest applied again (same name, a new uid) is a duplicate of its former self.
        again = task("orig")
        again["metadata"]["uid"] = "uid-orig-2"
        again["spec"]["key"] = "k"
        world.writer.tasks["orig"] = copy.deepcopy(again)
        world.controller.intake.on_task(None, again)
        await ask_and_answer(world)
        assert (world.status("orig")["phase"], world.status("orig")["duplicateOf"]) == ("Succeeded", "orig")
        assert world.writer.calls.count(("job", "orig-a1")) == 1, "the first one's Job only"
    asyncio.run(scenario())


def test_rows_not_written_yet_answer_as_well(tmp_path) -> None:
    async def scenario() -> None:
        world, archiver = await archived_world(f"sqlite:///{tmp_path}/archive.db")
        await original_ran(world, "orig", "7", flush=False)
        assert Database.open(f"sqlite:///{tmp_path}/archive.db").counts() == (0, 0)
        world.submit("dup", key="k")
        await ask_and_answer(world)
        assert (world.status("dup")["phase"], world.status("dup")["output"]) == ("Succeeded", "7")
    asyncio.run(scenario())


def test_with_no_output_in_the_task_nor_the_archive_the_output_is_unavailable(tmp_path) -> None:
    async def scenario() -> None:
        world, archiver = await archived_world(f"sqlite:///{tmp_path}/archive.db")
        await original_ran(world, "orig", None)
        world.submit("dup", key="k")
        await ask_and_answer(world)
        status = world.status("dup")
        assert (status["phase"], status["duplicateOf"], status.get("outputAvailable", False)) == \
            ("Succeeded", "orig", False)
        with pytest.raises(OutputUnavailable):
            Waiting.result(Task.model_validate(world.writer.tasks["dup"]))
    asyncio.run(scenario())


def test_after_the_keys_retention_the_task_runs(tmp_path) -> None:
    async def scenario() -> None:
        world, archiver = await archived_world(f"sqlite:///{tmp_path}/archive.db")
        await original_ran(world, "orig", "1")
        await world.clock.advance(3600)  # the pool's keyRetention: 1h
        world.submit("later", key="k")
        await ask_and_answer(world)
        assert ("job", "later-a1") in world.writer.calls and "duplicateOf" not in world.status("later")
    asyncio.run(scenario())


def test_a_key_the_cluster_holds_is_not_asked_of_the_archive(tmp_path) -> None:
    async def scenario() -> None:
        world, archiver = await archived_world(f"sqlite:///{tmp_path}/archive.db")
        world.submit("orig", key="k")
        await ask_and_answer(world)
        world.submit("dup", key="k")
        await world.settle()
        assert not world.controller.store.tasks[(NS, "dup")].asking and not archiver._asks
        assert (world.status("dup")["phase"], world.status("dup")["duplicateOf"]) == ("Blocked", "orig")
    asyncio.run(scenario())



def test_an_archive_that_cannot_answer_lets_the_task_run() -> None:
    async def scenario() -> None:
        world = World(archiver=lambda clock: Archiver(DownDatabase(), clock, run_blocking=direct))  # type: ignore[arg-type]
        archiver = world.controller.archiver
        assert archiver is not None
        archiver.migrated = True
        world.submit("a", key="k")
        await ask_and_answer(world)
        assert ("job", "a-a1") in world.writer.calls
        assert world.controller.store.tasks[(NS, "a")].archived is not None
        assert not world.controller.store.tasks[(NS, "a")].archived.answered  # type: ignore[union-attr]
    asyncio.run(scenario())


def test_asks_wait_for_a_migrated_archive_then_go_on_without_it() -> None:
    async def scenario() -> None:
        world = World(archiver=lambda clock: Archiver(DownDatabase(), clock, run_blocking=direct))  # type: ignore[arg-type]
        archiver = world.controller.archiver
        assert archiver is not None
        loop = asyncio.create_task(archiver._ask_loop())
        try:
            world.submit("a", key="k")
            await world.settle()
            await world.clock.advance(5)
            await world.settle()
            assert ("job", "a-a1") not in world.writer.calls, "asked, the archive not ready yet"
            await world.clock.advance(6)
            await world.settle()
            assert ("job", "a-a1") in world.writer.calls, "ASK_WAIT passed: it runs"
        finally:
            loop.cancel()
    asyncio.run(scenario())


def test_a_task_a_former_leader_let_past_its_key_does_not_ask_again(tmp_path) -> None:
    """At a failover, only keyed tasks never decided (or waiting for an original) ask the archive:
    a Queued one was asked by the leader that queued it."""
    async def scenario() -> None:
        world, archiver = await archived_world(f"sqlite:///{tmp_path}/archive.db")
        queued = task("queued")
        queued["spec"]["key"] = "k"
        queued["status"] = {"phase": "Queued", "submittedAt": "2026-12-03T11:59:59Z"}
        world.writer.tasks["queued"] = copy.deepcopy(queued)
        world.controller.intake.on_task(None, queued)
        await world.settle()
        assert not archiver._asks and ("job", "queued-a1") in world.writer.calls
    asyncio.run(scenario())
