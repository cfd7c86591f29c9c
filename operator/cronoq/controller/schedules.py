"""The schedule controller: keeps each TaskSchedule and compact facts of its Tasks, and while this
replica leads, fires them. Each fire is applied in the order that makes it happen exactly once:

1. cancel the unfinished Tasks (concurrencyPolicy Replace);
2. create the fire's Task, named from the schedule and the fire time: AlreadyExists of a Task
   this schedule controls means the fire happened (a crash, or an older leader, got there
   first), which is fine; any other Task of that name is a FireConflict, never taken as the fire;
3. only then write the status (lastFireTime, handledThrough, counters) with the stored
   resourceVersion as precondition; a conflict re-reads and decides again;
4. prune history, count metrics.

The decisions are `cronoq.engine.schedule.decide`; this module only observes and applies. Writes
go through the Writer's leadership guard, so a replica that lost the lease writes nothing.
"""
from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from pydantic import ValidationError

from cronoq import metrics
from cronoq.api import TaskSchedule, TaskScheduleStatus
from cronoq.engine.schedule import (Decision, Fired, conflicting, decide, fired_cleanly, lag, rejected,
                                    task_manifest)
from cronoq.kube.schedules import ScheduleWriter, controller_of, fired
from cronoq.kube.writes import Conflict, NotLeader, Rejected, Writer

log = logging.getLogger(__name__)

Key = tuple[str, str]

RETRY_SECONDS = 5.0
"""A schedule whose sync failed unexpectedly is looked at again after this long."""
IDLE_SECONDS = 60.0
"""Every schedule is looked at again at least this often (level-based safety net)."""


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _rv(raw: dict[str, Any]) -> int:
    try:
        return int(raw["metadata"].get("resourceVersion") or 0)
    except ValueError:
        return 0


class Schedules:
    def __init__(self, writer: Writer, *, clock: Callable[[], datetime] = utcnow,
                 min_interval: timedelta = timedelta()) -> None:
        self.io = ScheduleWriter(writer)
        self.clock = clock
        self.min_interval = min_interval
        """Least time between two fires of a schedule (--min-schedule-interval)."""
        self.schedules: dict[Key, dict[str, Any]] = {}
        self.tasks: dict[Key, dict[str, Fired]] = defaultdict(dict)
        """(namespace, schedule) → Task name → facts."""
        self.owner: dict[Key, Key] = {}
        """(namespace, Task name) → (namespace, schedule): a deletion may come without labels."""
        self.due: dict[Key, datetime] = {}
        self.dirty: set[Key] = set()
        self.busy: set[Key] = set()
        self.acting = True
        self._inflight: set[asyncio.Task[None]] = set()
        """Running syncs, referenced so that they are not garbage-collected mid-flight."""
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ watch events

    def on_schedule(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        key = (meta["namespace"], meta["name"])
        if kind == "DELETED":
            self.schedules.pop(key, None)
            for name in self.tasks.pop(key, {}):
                self.owner.pop((key[0], name), None)
            self._touch(key)  # the loop, which owns the due times, drops its own
            return
        old = self.schedules.get(key)
        if old is not None and _rv(raw) < _rv(old):
            return  # older than what we wrote ourselves
        meta.pop("managedFields", None)
        self.schedules[key] = raw
        self._touch(key)

    def on_task(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        if kind == "DELETED":
            key = self.owner.pop((meta["namespace"], meta["name"]), None)
            if key is not None:
                self.tasks[key].pop(meta["name"], None)
                self._touch(key)
            return
        found = fired(raw)
        if found is None:
            return
        schedule, facts = found
        key = (meta["namespace"], schedule)
        if self.tasks[key].get(facts.name) == facts:
            return
        self.tasks[key][facts.name] = facts
        self.owner[(meta["namespace"], facts.name)] = key
        self._touch(key)

    def _touch(self, key: Key) -> None:
        self.dirty.add(key)
        if self._wake is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Fire what is due, then sleep until the next fire time or the next event."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while self.acting:
            self._wake.clear()
            now = self.clock()
            for key in list(self.dirty) + list(self.due):
                if key not in self.schedules:  # deleted, or a Task of a schedule we do not have
                    self.dirty.discard(key)
                    self.due.pop(key, None)
            for key in list(self.schedules):
                if key in self.busy:
                    continue
                if key in self.dirty or self.due.get(key, now) <= now:
                    self.dirty.discard(key)
                    self.busy.add(key)
                    task = asyncio.create_task(self._sync(key), name=f"cronoq-schedule-{key[0]}-{key[1]}")
                    self._inflight.add(task)
                    task.add_done_callback(self._inflight.discard)
            pending = [at for key, at in self.due.items() if key not in self.busy]
            timeout = min([(at - self.clock()).total_seconds() for at in pending] + [IDLE_SECONDS])
            if self.dirty - self.busy:
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=max(timeout, 0.0))
            except asyncio.TimeoutError:
                pass

    async def _sync(self, key: Key) -> None:
        try:
            await self.sync(key)
        except NotLeader:
            self.acting = False
        except Exception:  # noqa: BLE001 - one schedule's trouble must not stop the others
            log.exception("syncing schedule %s/%s failed; retrying in %.0fs", *key, RETRY_SECONDS)
            self.due[key] = self.clock() + timedelta(seconds=RETRY_SECONDS)
        finally:
            self.busy.discard(key)
            if self._wake is not None:
                self._wake.set()

    async def sync(self, key: Key) -> None:
        """Decide about one schedule at this instant and apply the decision."""
        raw = self.schedules.get(key)
        if raw is None or not self.acting:
            self.due.pop(key, None)
            return
        try:
            schedule = TaskSchedule.model_validate(raw)
        except ValidationError as err:
            log.error("schedule %s/%s cannot be read: %s", *key, err)
            self.due.pop(key, None)
            return
        now = self.clock()
        own = [t for t in self.tasks[key].values() if t.owner_uid == schedule.metadata.uid]
        decision = decide(schedule, own, now, self.min_interval)
        status = decision.status
        for name in decision.cancel:
            await self.io.cancel_task(key[0], name)
        if decision.create is not None:
            status = await self._fire(key, schedule, decision, decision.create)
        if status is not None:
            try:
                written = await self.io.replace_status(raw, status.to_dict())
            except Conflict:
                fresh = await self.io.read_schedule(*key)
                if fresh is None:
                    self.on_schedule("DELETED", raw)
                else:
                    self.on_schedule(None, fresh)
                return
            except Rejected as err:
                log.error("the API server refused the status of schedule %s/%s: %s", *key, err.message)
                self.due[key] = now + timedelta(seconds=RETRY_SECONDS)
                return
            self.on_schedule(None, written)
            self.dirty.discard(key)
            name = f"{key[0]}/{key[1]}"
            if decision.missed:
                metrics.SCHEDULE_FIRES.labels(name, "missed").inc(decision.missed)
            if decision.skipped:
                metrics.SCHEDULE_FIRES.labels(name, "skipped").inc(decision.skipped)
        for task in decision.delete:
            await self.io.delete_task(key[0], task)
        self.due[key] = min(decision.wake_at or now + timedelta(seconds=IDLE_SECONDS),
                            now + timedelta(seconds=IDLE_SECONDS))

    async def _fire(self, key: Key, schedule: TaskSchedule, decision: Decision,
                    fire_time: datetime) -> TaskScheduleStatus | None:
        """Create the Task of the fire at `fire_time` (`decision.create`); the status to write afterwards."""
        manifest = task_manifest(schedule, fire_time)
        try:
            existing = await self.io.create_task(manifest)
        except Rejected as err:
            log.error("the API server refused Task %s/%s of schedule %s: %s", key[0], manifest["metadata"]["name"],
                      key[1], err.message)
            return rejected(schedule, decision, err.message, self.clock())
        name = manifest["metadata"]["name"]
        uid = schedule.metadata.uid
        if existing is not None:
            controller = controller_of(existing)
            if controller is None or controller.get("uid") != uid:
                holder = f"{controller.get('kind')} {controller.get('name')}" if controller else None
                log.warning("Task %s/%s, the name of a fire of schedule %s, is not the schedule's (%s): FireConflict",
                            key[0], name, key[1], holder or "no controller")
                metrics.SCHEDULE_FIRES.labels(f"{key[0]}/{key[1]}", "conflict").inc()
                return conflicting(schedule, decision, name, holder, self.clock())
            log.info("Task %s/%s of schedule %s existed already: the fire had happened", key[0], name, key[1])
        # Known at once, so a decision before the watch event sees the fire as made.
        self.tasks[key].setdefault(name, Fired(name=name, fire_time=fire_time, owner_uid=uid))
        self.owner[(key[0], name)] = key
        if existing is None:
            metrics.SCHEDULE_FIRES.labels(f"{key[0]}/{key[1]}", "created").inc()
            metrics.SCHEDULE_LAG.observe(lag(fire_time, self.clock()))
        status = decision.status or schedule.status
        return fired_cleanly(status, self.clock(), schedule.metadata.generation) if status is not None else None
