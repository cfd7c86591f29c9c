"""TaskPool status (counts by phase, running and queued attempts), written in the background at
most every POOL_STATUS_SECONDS per pool and only when it changed: a pool's counts move with every
task, and one write per task event would cost more than the tasks themselves.
"""
from __future__ import annotations

import logging

from cronoq.api import TaskPool
from cronoq.controller.clock import Clock
from cronoq.controller.slots import Slots
from cronoq.controller.store import Key, Store
from cronoq.controller.term import Term
from cronoq.controller.writer import Writer
from cronoq.engine.pools import pool_status
from cronoq.kube.writes import Conflict, NotLeader

log = logging.getLogger(__name__)

POOL_STATUS_SECONDS = 5.0
"""Pool status (counts by phase) is written at most this often per pool, and only when it changed."""


class PoolStatuses:
    def __init__(self, writer: Writer, store: Store, slots: Slots, term: Term, *,
                 clock: Clock) -> None:
        self.writer, self.store, self.slots, self.term, self.clock = writer, store, slots, term, clock

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

    async def write(self, key: Key) -> None:
        pool = self.store.pools.get(key)
        if pool is None:
            return
        new = pool_status(pool, self.store.phases.get(key, {}), len(self.store.running.get(key, ())),
                          len(self.slots.waiting[key]), self.clock.now(),
                          self.store.worker_trust if pool.spec.delivery == "Workers" else None)
        if new is None:
            return
        try:
            written = await self.writer.replace_pool_status(pool.to_dict(), new.to_dict())
        except Conflict:
            return  # the next round writes it from the newer pool
        self.store.pools[key] = TaskPool.model_validate(written)
