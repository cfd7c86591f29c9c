"""The archive writer (controller/archive.py) and the deletion gate (controller/expiry.py) over a
real SQLite archive, the fake writer and a fake clock: rows are fed off the dispatch path and
written in batches, a lost queue is caught up from the statuses, each row lands once, and a
finished task is deleted only once its rows are archived — or, the archive down, after
--archive-wait with a Warning Event."""
from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from cronoq.archive import Database, Filter
from cronoq.controller.archive import Archiver
from cronoq.controller.clock import FakeClock
from cronoq.controller.expiry import ARCHIVE_RETRY_SECONDS, Expiry
from cronoq.controller.term import Term

from tests.unit.builders import T0
from tests.unit.fakes import NS, DownDatabase, FakeWriter, World, archived_world, archiver_on, counter, direct, pod


def failed_pod(job: str, task: str, attempt: int) -> dict[str, Any]:
    made = pod(job, task, 1)
    made["metadata"]["labels"]["cronoq.io/attempt"] = str(attempt)
    return made


async def run_to_the_end(world: World, name: str) -> None:
    """Task `name` (maxAttempts 2, no backoff) fails its first attempt and succeeds its second."""
    world.submit(name, retry={"maxAttempts": 2, "backoff": {"initial": "1s"}, "jitter": "none"})
    await world.settle()
    world.controller.intake.on_pod(None, failed_pod(f"{name}-a1", name, 1))
    await world.settle()
    await world.clock.advance(2)
    await world.settle()
    second = pod(f"{name}-a2", name, 0)
    second["metadata"]["labels"]["cronoq.io/attempt"] = "2"
    world.controller.intake.on_pod(None, second)
    await world.settle()
    assert world.status(name)["phase"] == "Succeeded", world.status(name)


def test_ended_attempts_are_fed_without_a_database_call_and_written_in_one_batch(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/archive.db"

    async def scenario() -> None:
        world, archiver = await archived_world(url)
        await run_to_the_end(world, "a")
        db = Database.open(url)
        assert db.counts() == (0, 0), "the reconciles only queued the rows"
        assert archiver._queued_rows == 4, "attempt 1 as it ended, then attempts 1 and 2 with the task's row"
        before = counter("cronoq_archive_rows_total", kind="attempt")
        assert await archiver.flush_once()
        assert db.counts() == (2, 1) and archiver._queued_rows == 0
        assert counter("cronoq_archive_rows_total", kind="attempt") == before + 2, "a row written again is not counted"
        rows = sorted((r["attempt"], r["outcome"], r["exit_code"], r["phase"]) for r in db.query(Filter()))
        assert rows == [(1, "Retryable", 1, "Succeeded"), (2, "Success", 0, "Succeeded")]
        assert archiver.archived == {(NS, "a"): "uid-a"}
    asyncio.run(scenario())


def test_a_new_leader_writes_what_the_old_one_lost_and_nothing_twice(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/archive.db"

    async def scenario() -> None:
        world, old = await archived_world(url)
        await run_to_the_end(world, "a")
        await run_to_the_end(world, "b")
        world.submit("c", retry={"maxAttempts": 3, "backoff": {"initial": "1s"}, "jitter": "none"})
        await world.settle()
        world.controller.intake.on_pod(None, failed_pod("c-a1", "c", 1))
        await world.settle()  # c is Retrying: one ended attempt, in its parsed status
        # The old leader wrote one batch (a's rows) then died with the rest queued.
        old._queue = old._queue[:2]
        old._queued_rows = sum(len(r.attempts) + (r.task is not None) for r in old._queue)
        assert await old.flush_once()
        db = Database.open(url)
        assert db.counts() == (2, 1)

        new = Archiver(Database(url), world.clock, run_blocking=direct)  # the new leader, same store as watched
        await new.migrate()
        reads = len([c for c in world.writer.calls if c[0] == "read"])
        fed, read = await new.catch_up(world.controller.store, world.writer.read_task)
        assert (fed, read) == (1, 1), "c's attempts from the store; b read over the API; a found archived"
        assert len([c for c in world.writer.calls if c[0] == "read"]) == reads + 1
        while new._queue:
            assert await new.flush_once()
        assert db.counts() == (5, 2), "a: 2, b: 2, c: 1 attempt rows; a and b finished"
        fed, read = await new.catch_up(world.controller.store, world.writer.read_task)  # again: nothing new
        while new._queue:
            assert await new.flush_once()
        assert read == 0 and db.counts() == (5, 2)
        dupes = db.connection().execute(
            "SELECT COUNT(*) FROM (SELECT task_uid, attempt FROM cronoq_attempts GROUP BY 1, 2 HAVING COUNT(*) > 1)"
        ).fetchone()[0]
        assert dupes == 0
    asyncio.run(scenario())



def test_a_failed_write_keeps_its_rows_for_the_next(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/archive.db"

    async def scenario() -> None:
        world, archiver = await archived_world(url)
        await run_to_the_end(world, "a")
        good, archiver.db = archiver.db, DownDatabase()  # type: ignore[assignment]
        failures = counter("cronoq_archive_failures_total")
        assert not await archiver.flush_once()
        assert archiver._queued_rows == 4 and archiver.down_since is not None
        assert counter("cronoq_archive_failures_total") == failures + 1
        archiver.db = good
        assert await archiver.flush_once() and archiver.down_since is None
        assert Database.open(url).counts() == (2, 1)
    asyncio.run(scenario())


def test_deletion_waits_for_the_archive_and_writes_missing_rows_first(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/archive.db"

    async def scenario() -> None:
        world, archiver = await archived_world(url)
        await run_to_the_end(world, "a")
        archiver._queue.clear()  # lost: the gate must write them from the Task
        assert await archiver.ready(NS, "a", "uid-a", world.writer.read_task)
        assert Database.open(url).counts() == (2, 1)
        assert await archiver.ready(NS, "a", "other-uid", world.writer.read_task), \
            "another task of the name: the delete's precondition spares it"
        assert await archiver.ready(NS, "gone", "uid-gone", world.writer.read_task), "gone: nothing to wait for"
        archiver.archived.clear()
        archiver.db = DownDatabase()  # type: ignore[assignment]
        assert not await archiver.ready(NS, "a", "uid-a", world.writer.read_task)
    asyncio.run(scenario())


def test_a_deletion_held_by_a_down_archive_says_so_once_and_goes_after_the_bound() -> None:
    async def scenario() -> None:
        clock, writer, answers = FakeClock(T0), FakeWriter(), {"up": False}

        async def gate(namespace: str, name: str, uid: str) -> bool:
            return answers["up"]
        expiry = Expiry(writer, Term(), clock, gate=gate, hold=timedelta(minutes=5))
        expiry.schedule(("ns", "held"), "uid-h", T0 + timedelta(seconds=10))
        expiry.schedule(("ns", "later"), "uid-l", T0 + timedelta(seconds=20))
        runner = asyncio.create_task(expiry.run())
        unarchived = counter("cronoq_archive_deleted_unarchived_total")

        def deleted() -> list[str]:
            return [name for call, name in writer.calls if call == "delete-task"]
        await clock.advance(11)
        assert deleted() == [] and writer.events == [("held", "ArchivePending", "Warning")]
        answers["up"] = True
        await clock.advance(10)
        assert deleted() == ["later"], "the archive back: the next one goes at its time"
        await clock.advance(ARCHIVE_RETRY_SECONDS)
        assert deleted() == ["later", "held"] and len(writer.events) == 1, "the held one at its next try"

        answers["up"] = False
        expiry.schedule(("ns", "stuck"), "uid-s", clock.now() + timedelta(seconds=1))
        await clock.advance(299)
        assert "stuck" not in deleted()
        assert [e[1] for e in writer.events] == ["ArchivePending", "ArchivePending"], "once per task"
        await clock.advance(ARCHIVE_RETRY_SECONDS + 1)
        assert deleted()[-1] == "stuck", "never blocked forever"
        assert writer.events[-1] == ("stuck", "DeletedUnarchived", "Warning")
        assert counter("cronoq_archive_deleted_unarchived_total") == unarchived + 1
        runner.cancel()
    asyncio.run(scenario())


def test_a_stalled_archive_holds_up_no_dispatch(tmp_path) -> None:
    """Off the dispatch path: while the archive's write hangs in its thread, tasks are still admitted,
    their Jobs created and their ends recorded; their rows wait in the queue, and land once it answers."""
    import threading

    class Stalled(Database):
        def __init__(self, url: str) -> None:
            super().__init__(url)
            self.entered, self.release = threading.Event(), threading.Event()

        def write(self, batch: Any, now: Any = None) -> tuple[int, int]:
            self.entered.set()
            assert self.release.wait(30), "released by the test"
            return super().write(batch, now)

    url = f"sqlite:///{tmp_path}/archive.db"
    db = Stalled(url)

    async def scenario() -> None:
        world = World(concurrency=3, archiver=lambda clock: Archiver(db, clock))  # its own thread, as in the operator
        archiver = world.controller.archiver
        assert archiver is not None
        await archiver.migrate()
        await run_to_the_end(world, "first")
        writing = asyncio.create_task(archiver.flush_once())
        await asyncio.to_thread(db.entered.wait, 10)
        for name in ("a", "b", "c"):
            world.submit(name)
        await world.settle()
        for name in ("a", "b", "c"):
            world.controller.intake.on_pod(None, pod(f"{name}-a1", name, 0))
        await world.settle()
        assert [world.status(n)["phase"] for n in ("a", "b", "c")] == ["Succeeded"] * 3
        assert not writing.done() and archiver._queued_rows == 4 + 6, "first's 4 in the hanging batch, then 3 × 2"
        db.release.set()
        assert await writing
        while archiver._queue:
            assert await archiver.flush_once()
        assert Database.open(url).counts() == (5, 4)
        archiver.close()
    asyncio.run(scenario())


def test_what_the_archiver_keeps_goes_with_the_tasks_not_with_the_rows(tmp_path) -> None:
    """The operator's memory does not grow with archived rows: once written, a row is the database's;
    the archiver keeps one uid per finished task the store still holds, and forgets it with the task."""
    url = f"sqlite:///{tmp_path}/archive.db"

    async def scenario() -> None:
        world = World(concurrency=40, archiver=archiver_on(url))
        archiver = world.controller.archiver
        assert archiver is not None
        await archiver.migrate()
        names = [f"t{i}" for i in range(40)]
        for name in names:
            world.submit(name)
        await world.settle()
        for name in names:
            world.controller.intake.on_pod(None, pod(f"{name}-a1", name, 0))
        await world.settle()
        while archiver._queue:
            assert await archiver.flush_once()
        assert len(archiver.archived) == 40 and archiver._queued_rows == 0
        for name in names:  # their retention ends (or someone deletes them)
            world.controller.intake.on_task("DELETED", world.writer.tasks.pop(name))
        await world.settle()
        assert archiver.archived == {} and not archiver._queue and not archiver._asks
        assert Database.open(url).counts() == (40, 40), "the rows stay in the database"
    asyncio.run(scenario())
