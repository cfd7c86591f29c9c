"""The archive writer (DESIGN §23): the leader's background work that keeps every ended attempt and
finished task in the archive's database (cronoq/archive.py), off the dispatch path.

- `feed(rows)`: the applier hands over what a landed status write added (engine.history: its newly
  ended attempts; a finished task's row with all of its attempts). Never awaited: the rows join an
  in-memory queue, and one coroutine writes them in batches (up to BATCH rows, or what came within
  FLUSH_SECONDS) in one transaction, from a thread of its own. A write that fails keeps its rows
  and is tried again with a growing delay; a queue grown past QUEUE_LIMIT while the database is down
  drops its oldest rows (counted), which the deletion gate writes again from the task's status.
- `ready(namespace, name, uid)`: the deletion gate (controller/expiry.py asks it before deleting a
  finished task): true once the task's row is in the archive — known written, or found there, or
  written now from the Task as read over the API. False while the archive cannot answer: the
  deletion waits (bounded, with an Event: expiry.py).
- `ask(namespace, pool, key)`: a keyed task nothing in the cluster holds back asks whether the
  archive holds a finished original of its key (deleted from the cluster since). Asks are answered
  in batches by one coroutine (`on_answer`), from the database and from the rows still queued; one
  the archive cannot answer within ASK_WAIT is answered "unanswered" (the task then runs).
- At start (once the schema is migrated), `catch_up`: what a previous leader may have left
  unwritten. Running tasks' ended attempts are written again from their status (a row already
  there is left alone), and the finished tasks the archive has no row of are read and written.

Rows are only ever the status's: any writer writes the same row, so a failover or a retried
batch never duplicates one, and the table's key (task uid, attempt) keeps the first copy.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, TypeVar

from cronoq import metrics
from cronoq.api import Task, TaskPhase, TaskStatus
from cronoq.archive import Database, redact
from cronoq.controller.clock import Clock, wait_set
from cronoq.controller.store import Key, Store
from cronoq.engine import history, keys
from cronoq.engine.history import Identity, Rows

log = logging.getLogger(__name__)

BATCH = 500
"""Rows written in one transaction at most."""
FLUSH_SECONDS = 1.0
"""How long rows wait for more to join their batch."""
QUEUE_LIMIT = 200_000
"""Rows held while the database is down, at most (then the oldest are dropped, and counted)."""
RETRY_SECONDS = (1.0, 60.0)
"""The delay between failing writes: from the first, doubling, up to the second."""
PRUNE_SECONDS = 600.0
"""How often rows older than the archive's retention are deleted."""
ASK_WAIT = 10.0
"""Seconds an ask waits for the archive to be ready (migrated) before it is answered unanswered."""

T = TypeVar("T")
Reader = Callable[[str, str], Awaitable[dict[str, Any] | None]]
KeyId = tuple[str, str, str]
"""(namespace, pool, key)."""
Answer = Callable[[KeyId, "dict[str, Any] | None", bool], None]
"""What an ask is answered with: the key, the archived original's task row (None: none), and
whether the archive answered at all."""


def archived_holder(row: dict[str, Any]) -> keys.Holder:
    """An archived task row as deduplication reads a holder of its key."""
    finished = row["finished_at"]
    return keys.Holder(name=row["name"], created_at=row["created_at"] or finished, phase=TaskPhase(row["phase"]),
                       attempt=int(row["attempts"] or 0), finished_at=finished, output=row["output"],
                       output_available=bool(row["output_available"]) and row["output"] is not None,
                       duplicate_of=row["duplicate_of"], message=row["message"])


def rows_of_raw(raw: dict[str, Any]) -> tuple[str, Rows]:
    """(uid, rows) of a Task as read over the API; a task the models cannot read gives what its
    metadata and status say (its status is the operator's, so it parses when its spec does not)."""
    try:
        task = Task.model_validate(raw)
        return task.metadata.uid or "", history.rows(Identity.of(task), task.status)
    except ValueError:
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        pool = str(spec["pool"]) if isinstance(spec.get("pool"), str) else "default"
        key = spec.get("key") if isinstance(spec.get("key"), str) else None
        who = Identity(uid=str(meta.get("uid", "")), namespace=str(meta.get("namespace", "")),
                       name=str(meta.get("name", "")), pool=pool, key=key, push=bool(spec.get("http")))
        try:
            status = TaskStatus.model_validate(raw["status"]) if raw.get("status") else None
        except ValueError:
            status = None
        return who.uid, history.rows(who, status)


class Archiver:
    def __init__(self, db: Database, clock: Clock, *, keep: timedelta | None = None,
                 keep_success: timedelta | None = None,
                 run_blocking: Callable[..., Awaitable[Any]] | None = None) -> None:
        self.db = db
        self.clock = clock
        self.keep, self.keep_success = keep, keep_success
        self._executor: ThreadPoolExecutor | None = None
        self._run_blocking = run_blocking or self._in_thread
        self._queue: list[Rows] = []
        self._queued_rows = 0
        self._wake = asyncio.Event()
        self.archived: dict[Key, str] = {}
        """Finished tasks of the store whose row is known to be in the archive → their uid."""
        self.migrated = False
        self.down_since: float | None = None
        """When the archive last stopped answering (monotonic), None while it answers."""
        self._asks: dict[KeyId, float] = {}
        """Keys asked and not answered yet → when first asked (monotonic)."""
        self._asked = asyncio.Event()
        self.on_answer: Answer | None = None
        """Told each answer (the controller hands it to the tasks that asked)."""

    # ------------------------------------------------------------------ fed by the applier

    def feed(self, rows: Rows) -> None:
        """Queue rows to write; returns at once (the dispatch path never waits on the database)."""
        if not rows:
            return
        self._queue.append(rows)
        self._queued_rows += _count(rows)
        while self._queued_rows > QUEUE_LIMIT and len(self._queue) > 1:
            dropped = self._queue.pop(0)
            self._queued_rows -= _count(dropped)
            metrics.ARCHIVE_DROPPED.inc(_count(dropped))
        metrics.ARCHIVE_QUEUE.set(self._queued_rows)
        if len(self._queue) == 1 or self._queued_rows >= BATCH:  # the writer waits for a first row, or a full batch
            self._wake.set()

    def ask(self, keyed: KeyId) -> None:
        """Ask, off the dispatch path, for the archived original of a key; `on_answer` is told."""
        self._asks.setdefault(keyed, self.clock.monotonic())
        self._asked.set()

    def forget(self, key: Key) -> None:
        """The task left the store."""
        self.archived.pop(key, None)

    # ------------------------------------------------------------------ the writer

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="cronoq-archive")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """A database call; its failure marks the archive down (and drops the connection)."""
        try:
            result: T = await self._run_blocking(fn, *args)
        except asyncio.CancelledError:
            raise
        except Exception:
            metrics.ARCHIVE_FAILURES.inc()
            if self.down_since is None:
                self.down_since = self.clock.monotonic()
            await self._run_blocking(self.db.close)
            raise
        self.down_since = None
        return result

    async def migrate(self) -> None:
        """Bring the schema up to date, trying again until it works (nothing is written before)."""
        delay = RETRY_SECONDS[0]
        while not self.migrated:
            try:
                applied = await self._call(self.db.migrate, self.clock.now())
                self.migrated = True
                log.info("the archive %s is at schema version %d%s", redact(self.db.url), await self._call(
                    self.db.version), f" (applied {applied})" if applied else "")
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - the database may come later
                log.error("the archive %s cannot be migrated (%s); trying again in %.0fs",
                          redact(self.db.url), err, delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, RETRY_SECONDS[1])

    async def run(self, store: Store | None = None, read: Reader | None = None) -> None:
        """Migrate, catch up what a previous leader left (when given the store and a reader), then
        write batches and prune old rows, until cancelled."""
        async def migrated_then() -> None:
            await self.migrate()
            tasks: list[Awaitable[object]] = [self._write_loop(), self._prune_loop()]
            if store is not None and read is not None:
                tasks.append(self.catch_up(store, read))
            await asyncio.gather(*tasks)

        await asyncio.gather(migrated_then(), self._ask_loop())

    async def _ask_loop(self) -> None:
        while True:
            if not self._asks:
                self._asked.clear()
                await self._asked.wait()
            if not self.migrated:  # not ready: what has waited ASK_WAIT is answered unanswered
                now = self.clock.monotonic()
                late = [k for k, since in self._asks.items() if now - since >= ASK_WAIT]
                if late:
                    log.warning("the archive is not ready: %d keyed tasks go on without asking it", len(late))
                for keyed in late:
                    self._answer(keyed, None, False)
                await self.clock.sleep(1.0)
                continue
            await self.answer_once()

    async def answer_once(self) -> None:
        """Answer up to BATCH asks: from the database in one call, and from the rows still queued."""
        batch = list(self._asks)[:BATCH]
        try:
            found = await self._call(self.db.originals, batch)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - the tasks go on without it
            log.warning("the archive could not be asked about %d keys (%s): those tasks go on without it",
                        len(batch), err)
            for keyed in batch:
                self._answer(keyed, None, False)
            return
        queued = self._queued_originals(set(batch))
        for keyed in batch:
            rows = [r for r in (found.get(keyed), queued.get(keyed)) if r is not None]
            self._answer(keyed, max(rows, key=_finished_order) if rows else None, True)

    def _queued_originals(self, wanted: set[KeyId]) -> dict[KeyId, dict[str, Any]]:
        """The newest finished original of each wanted key among the rows not written yet."""
        found: dict[KeyId, dict[str, Any]] = {}
        for rows in self._queue:
            row = rows.task
            if row is None or row.key is None or row.duplicate_of is not None:
                continue
            keyed = (row.namespace, row.pool, row.key)
            if keyed in wanted:
                item = asdict(row)
                if keyed not in found or _finished_order(item) > _finished_order(found[keyed]):
                    found[keyed] = item
        return found

    def _answer(self, keyed: KeyId, row: dict[str, Any] | None, answered: bool) -> None:
        self._asks.pop(keyed, None)
        if self.on_answer is not None:
            self.on_answer(keyed, row, answered)

    async def _write_loop(self) -> None:
        delay = RETRY_SECONDS[0]
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
            if self._queued_rows < BATCH:  # let a batch gather
                self._wake.clear()
                await wait_set(self.clock, self._wake, FLUSH_SECONDS)
            if await self.flush_once():
                delay = RETRY_SECONDS[0]
            else:
                await self.clock.sleep(delay)
                delay = min(delay * 2, RETRY_SECONDS[1])

    async def flush_once(self) -> bool:
        """Write one batch from the head of the queue; False when the database refused it (its
        rows stay queued)."""
        batch: list[Rows] = []
        rows = 0
        for item in self._queue:
            if batch and rows + _count(item) > BATCH:
                break
            batch.append(item)
            rows += _count(item)
        if not batch:
            return True
        try:
            attempts, tasks = await self._call(self.db.write, batch, self.clock.now())
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - kept, and written again
            log.warning("writing %d rows to the archive failed (%s); they stay queued", rows, err)
            return False
        del self._queue[:len(batch)]
        self._queued_rows -= rows
        metrics.ARCHIVE_QUEUE.set(self._queued_rows)
        metrics.ARCHIVED.labels("attempt").inc(attempts)
        metrics.ARCHIVED.labels("task").inc(tasks)
        for item in batch:
            if item.task is not None:
                self.archived[(item.task.namespace, item.task.name)] = item.task.task_uid
        return True

    async def drain(self, timeout: float) -> bool:
        """Write what is queued (at a clean stop, once the writer is stopped), at most `timeout`
        seconds; whether all of it was."""
        try:
            async with self.clock.timeout(timeout):
                while self._queue:
                    if not await self.flush_once():
                        return False
            return True
        except TimeoutError:
            return False

    async def _prune_loop(self) -> None:
        if self.keep is None and self.keep_success is None:
            return
        while True:
            try:
                attempts, tasks = await self._call(self.db.prune, self.clock.now(), self.keep, self.keep_success)
                if attempts or tasks:
                    log.info("the archive's retention deleted %d attempt rows and %d task rows", attempts, tasks)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - next time
                log.warning("pruning the archive failed: %s", err)
            await self.clock.sleep(PRUNE_SECONDS)

    # ------------------------------------------------------------------ catching up

    async def catch_up(self, store: Store, read: Reader) -> tuple[int, int]:
        """What a previous leader may not have written: every running task's ended attempts (from
        the status in the store), and each finished task the archive has no row of (read over the
        API). Returns (running tasks fed, finished tasks read)."""
        fed = 0
        finished: dict[Key, str] = {}
        for key, record in list(store.tasks.items()):
            task = record.parsed
            if task is not None and task.status is not None and task.status.attempts:
                self.feed(history.rows(Identity.of(task), task.status))
                fed += 1
            elif record.finished is not None:
                finished[key] = record.uid
        found: set[str] = set()
        delay = RETRY_SECONDS[0]
        while True:
            try:
                found = await self._call(self.db.archived, list(finished.values()))
                break
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - the deletion gate covers a task meanwhile
                log.warning("catching up the archive failed (%s); trying again in %.0fs", err, delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, RETRY_SECONDS[1])
        read_count = 0
        for key, uid in finished.items():
            if uid in found:
                self.archived[key] = uid
                continue
            if self.archived.get(key) == uid or key not in store.tasks:
                continue
            raw = await read(*key)
            read_count += 1
            if raw is None:
                continue
            got_uid, rows = rows_of_raw(raw)
            if got_uid == uid:
                self.feed(rows)
        if fed or read_count:
            log.info("archive catch-up: %d running tasks' attempts queued again, %d finished tasks read",
                     fed, read_count)
        return fed, read_count

    # ------------------------------------------------------------------ the deletion gate

    async def ready(self, namespace: str, name: str, uid: str, read: Reader) -> bool:
        """Whether finished task (namespace, name) of this uid may be deleted: its row is in the
        archive (written now from the Task if it was not). False while the archive cannot say."""
        key = (namespace, name)
        if self.archived.get(key) == uid:
            return True
        if not self.migrated:
            return False
        try:
            if uid in await self._call(self.db.archived, [uid]):
                self.archived[key] = uid
                return True
            raw = await read(namespace, name)
            if raw is None:
                return True  # gone already: nothing to delete
            got_uid, rows = rows_of_raw(raw)
            if got_uid != uid:
                return True  # another task took the name: the delete's precondition spares it
            if rows.task is None:
                return False  # not finished as read: not for deleting (the next decision says)
            attempts, tasks = await self._call(self.db.write, [rows], self.clock.now())
            metrics.ARCHIVED.labels("attempt").inc(attempts)
            metrics.ARCHIVED.labels("task").inc(tasks)
            self.archived[key] = uid
            return True
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - the deletion waits
            log.warning("the archive cannot take task %s/%s (%s): its deletion waits", namespace, name, err)
            return False

    def close(self) -> None:
        self.db.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False)


def _finished_order(row: dict[str, Any]) -> datetime:
    return row["finished_at"] or datetime.min.replace(tzinfo=timezone.utc)


def _count(rows: Rows) -> int:
    return len(rows.attempts) + (rows.task is not None)


def fed_rows(task: Task, before: TaskStatus | None, after: TaskStatus) -> Rows:
    """What a landed status write hands the archive: the attempts it records as ended that the
    status before it did not, and the task's row (with all its attempts) when it finished."""
    return history.rows(Identity.of(task), after, history.ended(before, after))
