"""Deleting finished tasks when their retention ends (DESIGN §10), as background work.

Due times sit in a heap; one coroutine deletes what is due at a bounded rate (20/s, half that
while slot grants wait in the work queue), off the work queue, so a wave of expiring tasks
(100,000 finishing in the same hour a day ago) never delays a new task's Job, and a steady stream
of new work never stops the deletions. Each delete carries the task's uid as a
precondition: a new task that took the same name is never deleted in its place. Kubernetes'
garbage collector then removes what the task owns (its remaining Jobs, pods and Leases).

Due times are recomputed from the store whenever a task or its pool is reconciled, and an entry
is only acted on if it is still the task's current due time, so changing a pool's retention
applies to tasks that finished long ago. Entries left behind that way are dropped once they are
half the heap, so the heap stays within twice the tasks due (plus a little), however often
retention changes.

With an archive (controller/archive.py), a task is deleted only once its rows are in it: `gate`
answers that, writing them first if they are missing. While the archive cannot take them, the
deletion is put off (ARCHIVE_RETRY_SECONDS at a time, a Warning Event ArchivePending the first
time) for at most `hold` (`--archive-wait`); then the task is deleted all the same, with a Warning
Event DeletedUnarchived and a count: nothing is lost silently, and nothing waits forever.

It stays off the work queue on purpose (its keys would wait behind, or crowd out, reconciles), but
waits on the controller's one clock, so tests advance time through retention and the delete rate.
"""
from __future__ import annotations

import asyncio
import heapq
import logging
from datetime import datetime
from datetime import timedelta
from typing import Awaitable, Callable

from cronoq import metrics
from cronoq.api import API_VERSION, Task
from cronoq.api.durations import format as format_duration
from cronoq.controller.clock import Clock, wait_set
from cronoq.controller.store import Key
from cronoq.controller.term import Term
from cronoq.controller.writer import Writer
from cronoq.engine import reasons
from cronoq.engine.plan import Event
from cronoq.kube.writes import NotLeader

log = logging.getLogger(__name__)

DELETES_PER_SECOND = 20.0

COMPACT_SLACK = 64
"""Superseded heap entries tolerated beyond the tasks due before the heap is rebuilt."""

ARCHIVE_RETRY_SECONDS = 30.0
"""How long a deletion waiting for the archive is put off at a time."""

Gate = Callable[[str, str, str], Awaitable[bool]]
"""(namespace, name, uid) → whether the finished task may be deleted now (its rows are archived)."""


class Expiry:
    def __init__(self, writer: Writer, term: Term, clock: Clock,
                 busy: Callable[[], bool] = lambda: False, rate: float = DELETES_PER_SECOND,
                 gate: Gate | None = None, hold: timedelta = timedelta(minutes=10)) -> None:
        self._writer = writer
        self.gate = gate
        self.hold = hold
        self._held: dict[Key, datetime] = {}
        """Tasks whose deletion waits for the archive → when it first did."""
        self._term = term
        self._clock = clock
        self._busy = busy
        self._interval = 1.0 / rate
        self._heap: list[tuple[datetime, Key, str]] = []
        self._due: dict[Key, tuple[datetime, str]] = {}
        """Task → (its current due time, its uid): the only heap entry of the task acted on."""
        self._changed = asyncio.Event()

    def schedule(self, key: Key, uid: str, due: datetime | None) -> None:
        """Delete task `key` (with this uid) at `due`; None: keep it (forget an earlier due time)."""
        if due is None:
            self.forget(key)
            return
        if self._due.get(key) == (due, uid):
            return
        self._due[key] = (due, uid)
        heapq.heappush(self._heap, (due, key, uid))
        self._compact()
        if self._heap[0][1] == key:
            self._changed.set()

    def _compact(self) -> None:
        """Rebuild the heap from the current due times once superseded or forgotten entries are
        most of it."""
        if len(self._heap) > 2 * len(self._due) + COMPACT_SLACK:
            self._heap = [(at, task, uid) for task, (at, uid) in self._due.items()]
            heapq.heapify(self._heap)

    def forget(self, key: Key) -> None:
        """The task left: nothing to delete (its stale heap entry is skipped when it comes up, or
        dropped by a rebuild)."""
        self._due.pop(key, None)
        self._held.pop(key, None)
        self._compact()

    def __len__(self) -> int:
        return len(self._due)

    async def run(self) -> None:
        while True:
            while self._heap and self._due.get(self._heap[0][1]) != (self._heap[0][0], self._heap[0][2]):
                heapq.heappop(self._heap)  # superseded by a newer due time, or forgotten
            wait = None
            if self._heap:
                wait = (self._heap[0][0] - self._clock.now()).total_seconds()
            if wait is None or wait > 0:
                self._changed.clear()
                await wait_set(self._clock, self._changed, wait)
                continue
            due, key, uid = heapq.heappop(self._heap)
            if self._due.get(key) != (due, uid):
                continue
            del self._due[key]
            try:
                if not await self._archived(key, uid):
                    continue
                await self._delete(key[0], key[1], uid)
                metrics.TASKS_DELETED.inc()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - try again later; the resync schedules it anew
                log.exception("deleting expired task %s/%s failed", *key)
            # Grants first: while they wait, deletions slow to half their rate, never to a stop
            # (a steady stream keeps grants waiting, and retention must still keep up).
            await self._clock.sleep(self._interval * (2 if self._busy() else 1))

    async def _archived(self, key: Key, uid: str) -> bool:
        """Whether the task may go now as far as the archive is concerned; if not, its deletion is
        put off (within `hold` of the first time it was, then it goes unarchived, said so)."""
        if self.gate is None or not self._term.acting:
            return True
        if await self.gate(key[0], key[1], uid):
            self._held.pop(key, None)
            return True
        now = self._clock.now()
        first = self._held.setdefault(key, now)
        if now - first >= self.hold:
            self._held.pop(key, None)
            metrics.DELETED_UNARCHIVED.inc()
            log.error("task %s/%s is deleted without its rows in the archive: the archive has not taken them "
                      "for %s (--archive-wait)", *key, format_duration(self.hold))
            await self._warn(key, uid, Event(reasons.DELETED_UNARCHIVED, (
                f"deleted without its attempts in the archive: the archive could not take them for "
                f"{format_duration(self.hold)} (--archive-wait)"), warning=True))
            return True
        if first == now:
            await self._warn(key, uid, Event(reasons.ARCHIVE_PENDING, (
                f"its retention has ended, but the archive cannot take its attempts yet: deletion waits for it, "
                f"at most {format_duration(self.hold)} (--archive-wait)"), warning=True))
        self.schedule(key, uid, now + timedelta(seconds=ARCHIVE_RETRY_SECONDS))
        return False

    async def _warn(self, key: Key, uid: str, event: Event) -> None:
        raw = {"apiVersion": API_VERSION, "kind": Task.KIND, "metadata": {"namespace": key[0], "name": key[1], "uid": uid}}
        await self._writer.post_event(raw, event, self._clock.now())

    async def _delete(self, namespace: str, name: str, uid: str) -> None:
        if not self._term.acting:
            return
        try:
            await self._writer.delete_task(namespace, name, uid)
        except NotLeader:
            self._term.acting = False
            return
        log.debug("deleted finished task %s/%s (retention over)", namespace, name)
