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

It stays off the work queue on purpose (its keys would wait behind, or crowd out, reconciles), but
waits on the controller's one clock, so tests advance time through retention and the delete rate.
"""
from __future__ import annotations

import asyncio
import heapq
import logging
from datetime import datetime
from typing import Callable

from cronoq import metrics
from cronoq.controller.clock import Clock, wait_set
from cronoq.controller.store import Key
from cronoq.controller.term import Term
from cronoq.controller.writer import Writer
from cronoq.kube.writes import NotLeader

log = logging.getLogger(__name__)

DELETES_PER_SECOND = 20.0

COMPACT_SLACK = 64
"""Superseded heap entries tolerated beyond the tasks due before the heap is rebuilt."""


class Expiry:
    def __init__(self, writer: Writer, term: Term, clock: Clock,
                 busy: Callable[[], bool] = lambda: False, rate: float = DELETES_PER_SECOND) -> None:
        self._writer = writer
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
                await self._delete(key[0], key[1], uid)
                metrics.TASKS_DELETED.inc()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - try again later; the resync schedules it anew
                log.exception("deleting expired task %s/%s failed", *key)
            # Grants first: while they wait, deletions slow to half their rate, never to a stop
            # (a steady stream keeps grants waiting, and retention must still keep up).
            await self._clock.sleep(self._interval * (2 if self._busy() else 1))

    async def _delete(self, namespace: str, name: str, uid: str) -> None:
        if not self._term.acting:
            return
        try:
            await self._writer.delete_task(namespace, name, uid)
        except NotLeader:
            self._term.acting = False
            return
        log.debug("deleted finished task %s/%s (retention over)", namespace, name)
