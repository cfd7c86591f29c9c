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

Schedules are keys of a work queue (controller/workqueue.py) on the controller's clock: an event
adds the key, the next fire time is a delayed add, one sync per schedule at a time, and a failing
sync is retried with the queue's per-key doubling delay and counted as a retry of kind "schedule".
"""
from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any, Callable

from pydantic import ValidationError

from cronoq import metrics
from cronoq.api import TaskSchedule, TaskScheduleStatus
from cronoq.controller.clock import Clock, LoopClock
from cronoq.controller.tracing import Tracing
from cronoq.controller.workqueue import WorkQueue
from cronoq.engine.spans import fire_span
from cronoq.engine.schedule import (Decision, Fired, conflicting, decide, fired_cleanly, lag, paused_after_failures,
                                    rejected, task_manifest)
from cronoq.kube.schedules import ScheduleWriter, controller_of, fired
from cronoq.apiserver.errors import Conflict
from cronoq.kube.writes import NotLeader, Rejected, Writer

log = logging.getLogger(__name__)

Key = tuple[str, str]

IDLE_SECONDS = 60.0
"""Every schedule is looked at again at least this often (level-based safety net)."""


def _rv(raw: dict[str, Any]) -> int:
    try:
        return int(raw["metadata"].get("resourceVersion") or 0)
    except ValueError:
        return 0


class Schedules:
    def __init__(self, writer: Writer, *, clock: Clock | None = None, min_interval: timedelta = timedelta(),
                 workers: int = 8, tracing: Tracing | None = None) -> None:
        self.io = ScheduleWriter(writer)
        self.clock: Clock = clock or LoopClock()
        self.workers = workers
        self.min_interval = min_interval
        """Least time between two fires of a schedule (--min-schedule-interval)."""
        self.schedules: dict[Key, dict[str, Any]] = {}
        self.tasks: dict[Key, dict[str, Fired]] = defaultdict(dict)
        """(namespace, schedule) → Task name → facts."""
        self.owner: dict[Key, Key] = {}
        """(namespace, Task name) → (namespace, schedule): a deletion may come without labels."""
        self.due: dict[Key, datetime] = {}
        """(namespace, schedule) → when its next sync is queued for (its next fire, at most IDLE_SECONDS on)."""
        self.queue: WorkQueue[Key] = WorkQueue(self.clock)
        self.acting = True
        self.tracing = tracing
        """Sends each fire's span (engine.spans.fire_span) when traces are on."""
        self.on_pause: Callable[[str, str, str, str], None] | None = None
        """Told (namespace, name, uid, pool) when a status write pauses a schedule after failures
        (the notifier's offer_schedule, with --notifications)."""

    # ------------------------------------------------------------------ watch events

    def on_schedule(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        key = (meta["namespace"], meta["name"])
        if kind == "DELETED":
            self.schedules.pop(key, None)
            for name in self.tasks.pop(key, {}):
                self.owner.pop((key[0], name), None)
            self.due.pop(key, None)
            self._touch(key)  # its sync finds it gone and queues nothing more
            return
        if self._keep(key, raw):
            self._touch(key)

    def _keep(self, key: Key, raw: dict[str, Any]) -> bool:
        """Hold this version of the schedule unless it is older than the one held."""
        old = self.schedules.get(key)
        if old is not None and _rv(raw) < _rv(old):
            return False  # older than what we wrote ourselves
        raw["metadata"].pop("managedFields", None)
        self.schedules[key] = raw
        return True

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
        self.queue.add(key)

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Sync the schedules whose key comes up (an event, their fire time, a retry) until cancelled."""
        await self.queue.run(self.workers, self._sync)

    async def _sync(self, key: Key) -> None:
        try:
            await self.sync(key)
        except NotLeader:
            self.acting = False
        except Exception as err:  # noqa: BLE001 - one schedule's trouble must not stop the others
            delay, failures = self.queue.retry(key)
            metrics.RETRIES.labels("schedule").inc()
            if isinstance(err, Rejected):
                log.error("the API server refused a write for schedule %s/%s (%d in a row): %s; retrying in %.1fs",
                          *key, failures, err.message, delay)
            elif failures == 1:
                log.exception("syncing schedule %s/%s failed; retrying in %.1fs", *key, delay)
            else:
                log.warning("syncing schedule %s/%s failed %d times in a row (%s); retrying in %.1fs",
                            *key, failures, err, delay)
        else:
            self.queue.forget(key)

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
        now = self.clock.now()
        own = [t for t in self.tasks[key].values() if t.owner_uid == schedule.metadata.uid]
        decision = decide(schedule, own, now, self.min_interval)
        status = decision.status
        for name in decision.cancel:
            if (uid := self._uid_of(key, name)) is not None:
                await self.io.cancel_task(key[0], name, uid)
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
            self._keep(key, written)  # decided on already: no sync again for it
            if self.on_pause is not None and paused_after_failures(status) is not None and \
                    paused_after_failures(schedule.status) is None:
                self.on_pause(key[0], key[1], schedule.metadata.uid or "", schedule.spec.task_template.spec.pool)
            name = f"{key[0]}/{key[1]}"
            if decision.missed:
                metrics.SCHEDULE_FIRES.labels(name, "missed").inc(decision.missed)
            if decision.skipped:
                metrics.SCHEDULE_FIRES.labels(name, "skipped").inc(decision.skipped)
        for task in decision.delete:
            if (uid := self._uid_of(key, task)) is not None:
                await self.io.delete_task(key[0], task, uid)
        due = self.due[key] = min(decision.wake_at or now + timedelta(seconds=IDLE_SECONDS),
                                  now + timedelta(seconds=IDLE_SECONDS))
        self.queue.add_after(key, (due - self.clock.now()).total_seconds())

    def _uid_of(self, key: Key, name: str) -> str | None:
        """The uid of the schedule's Task `name`, as seen (every cancel and delete carries it)."""
        facts = self.tasks[key].get(name)
        return facts.uid if facts is not None else None

    def _trace(self, schedule: TaskSchedule, fire_time: datetime, stored: dict[str, Any], trigger: str) -> None:
        """Send the fire's span, linked to its Task (a fire found made sends the same span again)."""
        assert self.tracing is not None
        meta = stored.get("metadata") or {}
        created = meta.get("creationTimestamp")
        try:
            created_at = datetime.fromisoformat(created.replace("Z", "+00:00")) if created else None
        except ValueError:
            created_at = None
        span = fire_span(schedule, fire_time, meta.get("name") or "", meta.get("uid"), meta.get("annotations"),
                         created_at, trigger)
        if span is not None:
            self.tracing.emit((span,))

    async def _fire(self, key: Key, schedule: TaskSchedule, decision: Decision,
                    fire_time: datetime) -> TaskScheduleStatus | None:
        """Create the Task of the fire at `fire_time` (`decision.create`); the status to write afterwards."""
        manifest = task_manifest(schedule, fire_time, backfill=decision.backfill)
        try:
            stored, created = await self.io.create_task(manifest)
        except Rejected as err:
            log.error("the API server refused Task %s/%s of schedule %s: %s", key[0], manifest["metadata"]["name"],
                      key[1], err.message)
            return rejected(schedule, decision, err.message, self.clock.now())
        name = manifest["metadata"]["name"]
        uid = schedule.metadata.uid
        if not created:
            controller = controller_of(stored)
            if controller is None or controller.get("uid") != uid:
                holder = f"{controller.get('kind')} {controller.get('name')}" if controller else None
                log.warning("Task %s/%s, the name of a fire of schedule %s, is not the schedule's (%s): FireConflict",
                            key[0], name, key[1], holder or "no controller")
                metrics.SCHEDULE_FIRES.labels(f"{key[0]}/{key[1]}", "conflict").inc()
                return conflicting(schedule, decision, name, holder, self.clock.now())
            log.info("Task %s/%s of schedule %s existed already: the fire had happened", key[0], name, key[1])
        if self.tracing is not None:
            self._trace(schedule, fire_time, stored, "backfill" if decision.backfill else "schedule")
        # Known at once, so a decision before the watch event sees the fire as made.
        self.tasks[key].setdefault(name, Fired(name=name, fire_time=fire_time, owner_uid=uid,
                                               uid=(stored.get("metadata") or {}).get("uid")))
        self.owner[(key[0], name)] = key
        if created:
            metrics.SCHEDULE_FIRES.labels(f"{key[0]}/{key[1]}", "backfilled" if decision.backfill else "created").inc()
            if not decision.backfill:  # a backfilled fire is late by design, not by the operator
                metrics.SCHEDULE_LAG.observe(lag(fire_time, self.clock.now()))
        status = decision.status or schedule.status
        return fired_cleanly(status, self.clock.now(), schedule.metadata.generation) if status is not None else None
