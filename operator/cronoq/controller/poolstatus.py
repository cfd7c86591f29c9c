"""TaskPool status (counts by phase, running and queued attempts), written in the background at
most every POOL_STATUS_SECONDS per pool and only when it changed: a pool's counts move with every
task, and one write per task event would cost more than the tasks themselves.
"""
from __future__ import annotations

import logging

from cronoq.api import QueueMarks, TaskPool
from cronoq.controller.clock import Clock
from cronoq.controller.slots import Slots
from cronoq.controller.store import Key, Store
from cronoq.controller.term import Term
from cronoq.controller.writer import Writer
from cronoq.engine.admission import MARKS_FROM, marks
from cronoq.engine.pools import kueue_problem, pool_status
from cronoq.apiserver.errors import Conflict
from cronoq.kube.writes import NotLeader

log = logging.getLogger(__name__)

KUEUE_LOOK_SECONDS = 30.0
"""A pool with admission.kueue has its LocalQueue looked at (one GET) at most this often."""
POOL_STATUS_SECONDS = 5.0
"""Pool status (counts by phase) is written at most this often per pool, and only when it changed."""
MARKS_SECONDS = 60.0
"""A pool's queue marks are taken at most this often: each reads its whole queue in order (O(n log n);
0.18 s of CPU for 100,000 waiting in 5 groups, measured once on the unit fakes)."""


class PoolStatuses:
    def __init__(self, writer: Writer, store: Store, slots: Slots, term: Term, *,
                 clock: Clock, marks_from: int = MARKS_FROM) -> None:
        self.writer, self.store, self.slots, self.term, self.clock = writer, store, slots, term, clock
        self.marks_from = marks_from
        """Past this many waiting in a pool, its status carries queue marks (--queue-marks-from)."""
        self.kueue_looks: dict[Key, tuple[str, float, str | None]] = {}
        """pool → (LocalQueue, when looked at, what keeps Kueue from admitting) of admission.kueue pools."""
        self.marks: dict[Key, tuple[float, QueueMarks]] = {}
        """pool → (when taken, its queue marks), for pools where more than `marks_from` wait."""

    async def run(self) -> None:
        while True:
            await self.clock.sleep(POOL_STATUS_SECONDS)
            if not self.term.acting:
                continue
            for key in list(self.store.pools):
                try:
                    await self.write(key)
                except NotLeader:
                    self.term.acting = False
                except Exception:  # noqa: BLE001 - one pool's trouble must not stop the others
                    log.exception("writing the status of pool %s/%s failed", *key)

    async def _kueue(self, key: Key, pool: TaskPool) -> str | None:
        """What keeps Kueue from admitting the pool's Jobs (None: nothing, or no admission.kueue),
        looked at (one GET of its LocalQueue) at most every KUEUE_LOOK_SECONDS."""
        kueue = pool.spec.admission.kueue if pool.spec.admission else None
        if kueue is None:
            self.kueue_looks.pop(key, None)
            return None
        now = self.clock.monotonic()
        last = self.kueue_looks.get(key)
        if last is not None and last[0] == kueue.local_queue and now - last[1] < KUEUE_LOOK_SECONDS:
            return last[2]
        found, queue = await self.writer.read_local_queue(key[0], kueue.local_queue)
        problem = kueue_problem(kueue.local_queue, key[0], found, queue)
        self.kueue_looks[key] = (kueue.local_queue, now, problem)
        return problem

    def _marks(self, key: Key) -> QueueMarks | None:
        """The pool's queue marks, taken again when MARKS_SECONDS old (kept, with their time, when the
        queue is the same); None while few wait."""
        queue = self.slots.waiting.get(key)
        if queue is None or len(queue) <= self.marks_from:
            self.marks.pop(key, None)
            return None
        now = self.clock.monotonic()
        last = self.marks.get(key)
        if last is None or now - last[0] >= MARKS_SECONDS:
            taken = marks(queue, self.clock.now())
            if last is not None and (last[1].waiting, last[1].marks) == (taken.waiting, taken.marks):
                taken = last[1]  # the same queue: no status write to say it again
            last = self.marks[key] = (now, taken)
        return last[1]

    async def write(self, key: Key) -> None:
        pool = self.store.pools.get(key)
        if pool is None:
            return
        new = pool_status(pool, self.store.phases.get(key, {}), len(self.store.running.get(key, ())),
                          len(self.slots.waiting[key]), self.clock.now(),
                          self.store.worker_trust if pool.spec.delivery == "Workers" else None,
                          await self._kueue(key, pool), self._marks(key))
        if new is None:
            return
        try:
            written = await self.writer.replace_pool_status(pool.to_dict(), new.to_dict())
        except Conflict:
            return  # the next round writes it from the newer pool
        self.store.pools[key] = TaskPool.model_validate(written)
