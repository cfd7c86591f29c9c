"""The Controller: the reconcile loop. Work keys come from the watches (controller/intake.py), the
resync and the timers; each `task` key runs the Task's decision (engine.attempts) on what the
store holds, each `pool` key grants the pool's free slots (controller/slots.py). What a decision
plans is carried out, fenced, by controller/apply.py; pool status is written by
controller/poolstatus.py, finished tasks deleted by controller/expiry.py.
"""
from __future__ import annotations

import asyncio
import logging
import random
from datetime import datetime, timedelta
from typing import Callable, Mapping

from cronoq import metrics
from cronoq.api import Task, TaskPool, TaskPoolSpec
from cronoq.controller.apply import Applier, JobRefused
from cronoq.controller.clock import Clock, LoopClock
from cronoq.controller.expiry import Expiry
from cronoq.controller.intake import Intake
from cronoq.controller.poolstatus import PoolStatuses
from cronoq.controller.slots import Slots
from cronoq.controller.store import Finished, Store, TaskEntry
from cronoq.controller.term import Term
from cronoq.controller.workqueue import WorkKey, WorkQueue
from cronoq.controller.writer import Writer
from cronoq.engine import admission, dependencies, keys
from cronoq.engine.attempts import is_ready, reconcile, settle
from cronoq.engine.plan import Effective, Observation
from cronoq.engine.gate import RUN, Gate
from cronoq.engine.retention import job_retention_of
from cronoq.engine.jobs import TaskServiceAccount
from cronoq.kube.writes import NotLeader

log = logging.getLogger(__name__)

RESYNC_SECONDS = 60.0
"""Every task is looked at again this often, whatever the watches said (level-based safety net)."""


def holder(entry: TaskEntry) -> keys.Holder:
    """What deduplication reads of a task. A finished task's output and message are not in
    memory; `full_holder` reads them when a duplicate needs them."""
    done = entry.finished
    if done is not None:
        return keys.Holder(name=entry.name, created_at=done.created_at or entry.first_seen, phase=done.phase,
                           attempt=done.attempt, finished_at=done.finished_at, output_available=done.output_available,
                           duplicate_of=done.duplicate_of)
    assert entry.task is not None, "a keyed task is readable (an unreadable one has no key)"
    return full_holder(entry.task, entry.first_seen)


def full_holder(task: Task, first_seen: datetime) -> keys.Holder:
    return keys.Holder.of(task, first_seen)


class Controller:
    """Owns the store, the work queue and the slots, and wires the parts that share them:
    `intake` (watch events in), `applier` (plans out), `pool_statuses`, `expiry`. `term` is
    this replica's epoch and whether it may still act, shared by every part that writes. `clock`
    is the one clock all of them decide and wait on."""

    def __init__(self, writer: Writer, *, epoch: int = 0, workers: int = 8,
                 clock: Clock | None = None, rng: random.Random | None = None,
                 sidecar_image: str | None = None, skew: Callable[[], timedelta] = timedelta,
                 warnings_only: bool = False, served_warnings_only: bool = False,
                 task_service_account: TaskServiceAccount | None = None) -> None:
        self.writer = writer
        self.term = Term(epoch=epoch)
        self.workers = workers
        self.clock: Clock = clock or LoopClock()
        now = self.clock.now
        self.rng = rng or random.Random()
        self.store = Store()
        self.queue: WorkQueue[WorkKey] = WorkQueue(self.clock)
        self.slots = Slots(self.store)
        self.expiry = Expiry(writer, self.term, self.clock, busy=lambda: self.queue.urgent)
        self.intake = Intake(self.store, self.queue, self.slots, self.expiry, clock=now, skew=skew)
        self.applier = Applier(writer, self.store, self.queue, self.slots, self.expiry, self.term,
                               clock=now, skew=skew, sidecar_image=sidecar_image, warnings_only=warnings_only,
                               served_warnings_only=served_warnings_only, task_service_account=task_service_account)
        self.pool_statuses = PoolStatuses(writer, self.store, self.slots, self.term, clock=self.clock)

    async def run(self) -> None:
        await asyncio.gather(self.queue.run(self.workers, self.process), self._resync(), self.pool_statuses.run(),
                             self.expiry.run())

    async def process(self, key: WorkKey) -> None:
        if not self.term.acting:
            return
        kind, namespace, name = key
        try:
            if kind == "task":
                await self.reconcile_task(namespace, name)
            else:
                await self.dispatch(namespace, name)
        except NotLeader:
            self.term.acting = False
        except JobRefused as err:
            delay, failures = self.queue.retry(key)
            metrics.RETRIES.labels(kind).inc()
            log.warning("the Job of task %s/%s was refused (%d in a row): %s; trying again in %.1fs",
                        namespace, name, failures, err, delay)
            if err.first:
                self.queue.add(key)  # now, to say so in the task's status (no Job created then)
        except Exception as err:  # noqa: BLE001 - one task's trouble must not stop the others
            if getattr(err, "status", None) == 429:
                # Throttled (API Priority and Fairness): come back when the server says, not after
                # a per-key delay that doubles to minutes while the throttling lasts.
                delay = throttled_delay(getattr(err, "headers", None), self._rng.random())
                self.queue.add_after(key, delay)
                metrics.RETRIES.labels(kind).inc()
                log.warning("the API server throttled %s %s/%s (429); trying again in %.1fs", kind, namespace, name, delay)
                return
            delay, failures = self.queue.retry(key)
            metrics.RETRIES.labels(kind).inc()
            if failures == 1:
                log.exception("reconciling %s %s/%s failed; retrying in %.1fs", kind, namespace, name, delay)
            else:
                log.warning("reconciling %s %s/%s failed %d times in a row (%s); retrying in %.1fs",
                            kind, namespace, name, failures, err, delay)
        else:
            if not (kind == "task" and self._refused(namespace, name)):
                self.queue.forget(key)

    _rng = random.Random()

    def _refused(self, namespace: str, name: str) -> bool:
        """Whether the task's current attempt waits on a refused Job (its backoff goes on)."""
        entry = self.store.tasks.get((namespace, name))
        task = entry.task if entry is not None else None
        attempt = task.status.attempt if task is not None and task.status else 0
        return entry is not None and attempt in self.store.refused.get(entry.uid, {})

    async def _resync(self) -> None:
        while True:
            await self.clock.sleep(RESYNC_SECONDS)
            for namespace, name in list(self.store.tasks):
                self.queue.add(("task", namespace, name))
            for namespace, name in list(self.store.pools):
                self.queue.add(("pool", namespace, name))

    # ------------------------------------------------------------------ one task

    async def reconcile_task(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        entry = self.store.tasks.get(key)
        if entry is None:
            self.intake.forget(key)
            return
        pool_key = (namespace, entry.pool)
        pool = self.store.pools.get(pool_key)
        now = self.clock.now()
        if entry.finished is not None:
            await self._settle(entry, entry.finished, pool, now)
            return
        if entry.task is None:
            await self.applier.refuse(entry)
            return
        task = entry.task
        attempt_n = task.status.attempt if task.status else 0
        settings = Effective.of(task, pool.spec if pool else None)
        worker = alive_until = None
        last = task.status.attempts[-1] if task.status and task.status.attempts else None
        if last is not None and last.outcome is None and last.worker:  # served by a worker: is it alive?
            alive_until = self.store.worker_alive_until(namespace, last.worker)
        elif settings.workers and is_ready(task, now):  # the worker it would go to (held if admitted)
            worker = self.store.hand_to_worker(key, pool_key, now, hold=key in self.slots.grants)
        try:
            await self._decide(entry, task, pool_key, pool, settings, now, attempt_n, worker, alive_until)
        finally:
            self.store.handed(key)

    async def _decide(self, entry: TaskEntry, task: Task, pool_key: tuple[str, str], pool: TaskPool | None,
                      settings: Effective, now: datetime, attempt_n: int, worker: str | None,
                      alive_until: datetime | None) -> None:
        namespace, name = pool_key[0], entry.name
        key = (namespace, name)
        seen = Observation(
            worker=worker, worker_alive_until=alive_until,
            jobs=self.store.attempt_jobs(entry), now=now, epoch=self.term.epoch, admit=key in self.slots.grants,
            pool_found=pool is not None, pool_name=task.spec.pool, first_seen=entry.first_seen,
            job_rejected=self.store.rejected.get(entry.uid, {}).get(attempt_n),
            job_refused=self.store.refused.get(entry.uid, {}).get(attempt_n),
            gate=await self._gate(entry, task, pool.spec if pool else None, now) if attempt_n == 0 else RUN)
        plan = reconcile(task, settings, seen, self.rng)
        await self.applier.apply(entry, task, plan, pool_key, pool, now, settings)

    async def _settle(self, entry: TaskEntry, done: Finished, pool: TaskPool | None, now: datetime) -> None:
        """A finished task (`done`, its entry's `finished`): stop leftover Jobs, ignore late reports,
        keep its Jobs for the jobRetention now in effect, and delete it when its time comes."""
        plan = settle(entry.name, done.attempt, done.marks, self.store.attempt_jobs(entry),
                      job_retention_of(done.job_retention, pool.spec if pool else None))
        await self.applier.settle(entry, plan, (entry.raw["metadata"]["namespace"], done.pool), pool, now)

    async def _gate(self, entry: TaskEntry, task: Task, pool: TaskPoolSpec | None, now: datetime) -> Gate:
        """What the task's key, then its dependencies, say about its first attempt."""
        namespace = entry.raw["metadata"]["namespace"]
        if task.spec.key:
            retention = (pool or TaskPoolSpec()).key_retention
            me = holder(entry)
            others = await self._key_holders(namespace, entry, task.spec.key, me, retention, now)
            verdict = keys.gate(me, others, retention, now)
            if verdict.verdict != "run":
                return verdict
        if task.spec.depends_on:
            def phase_of(name: str) -> dependencies.DependencyPhase:
                dep = self.store.tasks.get((namespace, name))
                return dependencies.MISSING if dep is None else dep.phase

            phases = {d.task: phase_of(d.task) for d in task.spec.depends_on}
            return dependencies.gate(entry.name, task.spec.depends_on, phases,
                                     self.store.cycle_of(namespace, entry))
        return RUN

    async def _key_holders(self, namespace: str, entry: TaskEntry, key: str, me: keys.Holder,
                           retention: timedelta, now: datetime) -> list[keys.Holder]:
        """The other tasks holding the key, as the store has them; the finished original that `me`
        would end as a duplicate of is read over the API, for the output and message the store does
        not keep."""
        others = [holder(self.store.tasks[(namespace, n)]) for n in self.store.keyed.get((namespace, entry.pool, key), ())
                  if n != entry.name and (namespace, n) in self.store.tasks]
        first = keys.reported(me, others, retention, now)
        original = self.store.tasks.get((namespace, first.name)) if first is not None else None
        if original is None or original.finished is None:
            return others
        raw = await self.writer.read_task(namespace, original.name)
        full = Task.model_validate(raw) if raw is not None else None
        if full is None or full.metadata.uid != original.uid:  # gone, or its name taken by another task
            return others
        return [full_holder(full, original.first_seen) if h.name == original.name else h for h in others]

    # ------------------------------------------------------------------ one pool

    async def dispatch(self, namespace: str, name: str) -> None:
        """Grant free slots of the pool to its waiting tasks, best first."""
        pool_key = (namespace, name)
        pool = self.store.pools.get(pool_key)
        self.slots.release_drained(pool_key)
        running = self.slots.running(pool_key)
        metrics.RUNNING_ATTEMPTS.labels(namespace, name).set(running)
        metrics.QUEUE_DEPTH.labels(namespace, name).set(len(self.slots.waiting[pool_key]))
        if pool is None:
            return
        capacity = admission.capacity(pool.spec)
        if pool.spec.delivery == "Workers":  # no more than its live workers have room for
            room = self.store.worker_room(pool_key, self.clock.now())
            free = sum(max(r, 0) for r in room.values())
            metrics.WORKERS.labels(namespace, name).set(len(room))
            metrics.WORKER_ROOM.labels(namespace, name).set(free)
            capacity = min(capacity, running + free)
        for key in self.slots.admit(pool_key, capacity, self.clock.now()):
            self.queue.add(("task", *key), urgent=True)  # ahead of routine reconciles


THROTTLED_MAX = 30.0


def throttled_delay(headers: Mapping[str, str] | None, jitter: float) -> float:
    """Seconds to wait after a 429: the Retry-After the API server gave (1 s when none, at most
    30 s), plus up to a second of jitter (`jitter` in [0, 1)) so throttled keys do not return
    together."""
    value = (headers or {}).get("Retry-After") or (headers or {}).get("retry-after") or "1"
    try:
        seconds = float(value)
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.0), THROTTLED_MAX) + jitter
