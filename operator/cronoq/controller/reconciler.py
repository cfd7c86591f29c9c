"""The Controller: the reconcile loop. Work keys come from the watches (controller/intake.py), the
resync and the timers; each `task` key gathers what the store holds of the task
(controller/gather.py), asks the engine for one plan (engine.decide) and has it carried out,
fenced, by controller/apply.py; each `pool` key grants the pool's free slots
(controller/slots.py). Pool status is written by controller/poolstatus.py, finished tasks deleted
by controller/expiry.py.
"""
from __future__ import annotations

import asyncio
import logging
import random
from datetime import timedelta
from typing import Any, Callable

from cronoq import metrics
from cronoq.api import TaskPool
from cronoq.controller.apply import Applier
from cronoq.controller.archive import Archiver, KeyId, archived_holder
from cronoq.controller.clock import Clock, LoopClock, Timer
from cronoq.controller.expiry import Expiry
from cronoq.controller.gather import JobSettings, gather
from cronoq.controller.intake import Intake
from cronoq.controller.notify import Notifier
from cronoq.controller.outcome import (DONE, STILL_REFUSED, Deposed, Done, Failed, Outcome, Refused, StillRefused,
                                      Throttled, outcome_of, succeeded)
from cronoq.controller.poolstatus import PoolStatuses
from cronoq.controller.tracing import Tracing
from cronoq.controller.ratelimits import RateLimits
from cronoq.controller.slots import Grant, Slots
from cronoq.controller.store import Store, TaskRecord
from cronoq.controller.term import Term
from cronoq.controller.workqueue import PoolWork, TaskWork, WorkKey, WorkQueue
from cronoq.controller.writer import Writer
from cronoq.engine import admission, keys
from cronoq.engine.decide import Live, decide
from cronoq.engine.jobs import TaskServiceAccount

log = logging.getLogger(__name__)

RESYNC_SECONDS = 60.0
"""Every task is looked at again this often, whatever the watches said (level-based safety net)."""
WAITING_RESYNC_EVERY = 10
"""Tasks waiting for their first attempt (kept packed: store.Brief) and finished ones are looked at
by every WAITING_RESYNC_EVERY-th resync only: nothing but an event, a grant or a timer of their own
changes their decision (a finished task's deletion and its archiving have timers of their own), and
each look parses a waiting one again (~150 µs): 100,000 queued tasks every minute would keep a
quarter of a core busy for nothing, and 20,000 finished ones kept a pool's drain waiting behind
their looks (issue 56)."""


class Controller:
    """Owns the store, the work queue and the slots, and wires the parts that share them:
    `intake` (watch events in), `applier` (plans out), `pool_statuses`, `expiry`. `term` is
    this replica's epoch and whether it may still act, shared by every part that writes. `clock`
    is the one clock all of them decide and wait on."""

    def __init__(self, writer: Writer, *, epoch: int = 0, workers: int = 8,
                 clock: Clock | None = None, rng: random.Random | None = None,
                 sidecar_image: str | None = None, skew: Callable[[], timedelta] = timedelta,
                 warnings_only: bool = False, served_warnings_only: bool = False,
                 task_service_account: TaskServiceAccount | None = None, archiver: Archiver | None = None,
                 archive_wait: timedelta = timedelta(minutes=10), queue_marks_from: int = admission.MARKS_FROM,
                 tracing: Tracing | None = None) -> None:
        self.writer = writer
        self.term = Term(epoch=epoch)
        self.workers = workers
        self.clock: Clock = clock or LoopClock()
        now = self.clock.now
        self.rng = rng or random.Random()
        self.store = Store()
        self.queue: WorkQueue[WorkKey] = WorkQueue(self.clock)
        metrics.WORK_QUEUE_DEPTH.set_function(lambda: len(self.queue))
        self.slots = Slots(self.store)
        self.rate_limits = RateLimits(self.clock)
        self._token_timers: dict[tuple[str, str], Timer] = {}
        """Pool key → the timer of its rate limit's next token."""
        self.archiver = archiver
        """Writes ended attempts and finished tasks to the archive (--archive), when there is one."""
        self.notifier: Notifier | None = None
        """Sends the outcome notifications pools ask for (`notify_with`), when there is one."""
        gate = None
        if archiver is not None:
            archive = archiver

            async def gate(namespace: str, name: str, uid: str) -> bool:
                return await archive.ready(namespace, name, uid, writer.read_task)
        self.expiry = Expiry(writer, self.term, self.clock, busy=lambda: self.queue.urgent, gate=gate,
                             hold=archive_wait)
        if archiver is not None:
            archiver.on_answer = self._archive_answered
        self.store.forgetters.append(self._forgotten)
        self.intake = Intake(self.store, self.queue, self.slots, clock=now, skew=skew)
        self.job_settings = JobSettings(sidecar_image, task_service_account or TaskServiceAccount(),
                                        traced=tracing is not None)
        self.applier = Applier(writer, self.store, self.queue, self.slots, self.expiry, self.term,
                               clock=now, skew=skew, warnings_only=warnings_only,
                               served_warnings_only=served_warnings_only, archiver=archiver,
                               tracing=tracing)
        self.pool_statuses = PoolStatuses(writer, self.store, self.slots, self.term, clock=self.clock,
                                          marks_from=queue_marks_from)

    def notify_with(self, notifier: Notifier) -> None:
        """Have `notifier` send the outcome notifications of the tasks this controller ends."""
        self.notifier = self.applier.notifier = notifier

    async def run(self) -> None:
        background = [self.archiver.run(self.store, self.writer.read_task)] if self.archiver is not None else []
        if self.notifier is not None:
            background.append(self.notifier.run())
        await asyncio.gather(self.queue.run(self.workers, self.process), self._resync(), self.pool_statuses.run(),
                             self.expiry.run(), *background)

    async def process(self, key: WorkKey) -> None:
        """One work key: reconcile it, and have the queue act on how that ended."""
        if not self.term.acting:
            return
        self.settle(key, await self.reconcile(key))

    async def reconcile(self, key: WorkKey) -> Outcome:
        """Reconcile a task, or grant a pool's free slots; what it raises becomes its outcome here."""
        try:
            if isinstance(key, TaskWork):
                return await self.reconcile_task(key.namespace, key.name)
            await self.dispatch(key.namespace, key.name)
            return DONE
        except Exception as err:  # noqa: BLE001 - one key's trouble must not stop the others
            return outcome_of(err)

    def settle(self, key: WorkKey, outcome: Outcome) -> None:
        """The one place the work queue acts on a reconcile's outcome."""
        kind, namespace, name = key.kind, key.namespace, key.name
        match outcome:
            case Done():
                self.queue.forget(key)
            case StillRefused():
                pass  # the refusal's backoff goes on: its timer is set, its failures kept
            case Deposed():
                self.term.acting = False
            case Refused(message=message, first=first):
                delay, failures = self.queue.retry(key)
                metrics.RETRIES.labels(kind).inc()
                log.warning("the Job of task %s/%s was refused (%d in a row): %s; trying again in %.1fs",
                            namespace, name, failures, message, delay)
                if first:
                    self.queue.add(key)  # now, to say so in the task's status (no Job created then)
            case Throttled(retry_after=seconds):
                # Plus up to a second of jitter, so that throttled keys do not come back together.
                delay = seconds + self._rng.random()
                self.queue.add_after(key, delay)
                metrics.RETRIES.labels(kind).inc()
                log.warning("the API server throttled %s %s/%s (429); trying again in %.1fs", kind, namespace, name, delay)
            case Failed(error=error):
                delay, failures = self.queue.retry(key)
                metrics.RETRIES.labels(kind).inc()
                if failures == 1:
                    log.error("reconciling %s %s/%s failed; retrying in %.1fs", kind, namespace, name, delay,
                              exc_info=error)
                else:
                    log.warning("reconciling %s %s/%s failed %d times in a row (%s); retrying in %.1fs",
                                kind, namespace, name, failures, error, delay)

    _rng = random.Random()

    def _forgotten(self, key: tuple[str, str]) -> None:
        """A task left the store: its slot (and the token its grant took), its due deletion and its
        timers go too."""
        grant = self.slots.forget(key)
        self.expiry.forget(key)
        if self.archiver is not None:
            self.archiver.forget(key)
        if self.notifier is not None:
            self.notifier.forget(key)
        self.queue.drop(TaskWork(*key))
        if grant is not None:
            if grant.token:
                self.rate_limits.refund(grant.pool, 1)
            self.queue.add(PoolWork(*grant.pool))

    def _archive_answered(self, keyed: KeyId, row: dict[str, Any] | None, answered: bool) -> None:
        """The archive's answer for a key, handed to the tasks of the key that asked, which are
        decided again. An archived task still in the store is not a deleted original (the store
        judges it)."""
        namespace, _, _ = keyed
        names = self.store.keyed.get(keyed, ())
        if row is not None and any((r := self.store.tasks.get((namespace, n))) is not None and r.uid == row["task_uid"]
                                   for n in names):
            row = None
        found = keys.Archived(archived_holder(row) if row is not None else None, answered)
        for name in names:
            record = self.store.tasks.get((namespace, name))
            if record is not None and record.asking:
                record.archived, record.asking = found, False
                self.queue.add(TaskWork(namespace, name))

    def resynced(self, passes: int) -> list[tuple[str, str]]:
        """The tasks the `passes`-th resync looks at: all of them every WAITING_RESYNC_EVERY-th pass,
        else those that have started an attempt and not finished."""
        every = passes % WAITING_RESYNC_EVERY == 0
        return [key for key, record in self.store.tasks.items()
                if every or (record.packed is None and record.finished is None)]

    async def _resync(self) -> None:
        passes = 0
        while True:
            await self.clock.sleep(RESYNC_SECONDS)
            passes += 1
            for namespace, name in self.resynced(passes):
                self.queue.add(TaskWork(namespace, name), resync=True)
            for namespace, name in list(self.store.pools):
                self.queue.add(PoolWork(namespace, name), resync=True)

    # ------------------------------------------------------------------ one task

    async def reconcile_task(self, namespace: str, name: str) -> Outcome:
        """One reconcile of the task (`_reconcile_task`), answering for the slot grant it starts
        with: the grant is booked when its status lands (controller/apply.py); a reconcile that
        has already asked for the next one (a detour to read, a conflicting write) hands it on;
        whatever else ends it — an exception, a refused write or Job, a return without booking —
        gives the grant and its rate-limit token back, and the pool grants the slot again. So a
        task whose reconcile fails never holds a slot, whichever way it fails. A status write that
        failed without an answer may yet have landed: its slot is then counted among the running
        when the watch brings the task back, as a scheduler forgets an assumed placement whose
        write failed."""
        key = (namespace, name)
        grant = self.slots.grants.get(key)
        outcome: Outcome | None = None
        try:
            outcome = await self._reconcile_task(key)
            return outcome
        finally:
            failed = outcome is None or not succeeded(outcome)
            if grant is not None and (failed or not self.queue.queued(TaskWork(namespace, name))):
                self._give_back(key, grant)

    def _give_back(self, key: tuple[str, str], grant: Grant) -> None:
        """An unused grant: its slot and its token go back to the pool, which grants again."""
        if not self.slots.release(key, grant):
            return
        if grant.token:
            self.rate_limits.refund(grant.pool, 1)
        self.queue.add(PoolWork(*grant.pool), urgent=True)

    async def _reconcile_task(self, key: tuple[str, str]) -> Outcome:
        """Gather, decide once, apply: what the store holds of the task and around it, the one
        plan the engine makes of it, carried out."""
        record = self.store.tasks.get(key)
        if record is None:
            self.store.forget(key)
            return DONE
        subject, seen = gather(self.store, self.slots, record, self.clock.now(), self.term.epoch, self.job_settings,
                               self.rate_limits, archive=self.archiver is not None)
        plan = decide(subject, seen, self.rng)
        refused = await self.applier.apply(record, subject.task if isinstance(subject, Live) else None, plan, seen.now)
        if refused is not None:
            return refused
        return STILL_REFUSED if _waits_on_refused_job(record) else DONE

    # ------------------------------------------------------------------ one pool

    async def dispatch(self, namespace: str, name: str) -> None:
        """Grant free slots of the pool to its waiting tasks, best first."""
        self.grant(namespace, name)

    def grant(self, namespace: str, name: str) -> None:
        """`dispatch`, without an await: also run straight from the timer of a pool's next token."""
        pool_key = (namespace, name)
        pool = self.store.pools.get(pool_key)
        self.slots.release_drained(pool_key)
        for other in self.slots.unpark(namespace) - {pool_key}:  # a concurrency key has room again
            self.queue.add(PoolWork(*other), urgent=True)
        if pool is None:  # no series, no queue kept for a pool name no TaskPool has
            return
        running = self.slots.running(pool_key)
        metrics.RUNNING_ATTEMPTS.labels(namespace, name).set(running)
        metrics.QUEUE_DEPTH.labels(namespace, name).set(len(self.slots.waiting[pool_key]))
        capacity = admission.capacity(pool.spec)
        if pool.spec.delivery == "Workers":  # no more than its live workers have room for
            room = self.store.worker_room(pool_key, self.clock.now())
            free = sum(max(r, 0) for r in room.values())
            metrics.WORKERS.labels(namespace, name).set(len(room))
            metrics.WORKER_ROOM.labels(namespace, name).set(free)
            capacity = min(capacity, running + free)
        tokens = self.rate_limits.allowance(pool_key, pool)
        granted = self.slots.admit(pool_key, capacity, self.clock.now(), most=tokens,
                                   group_cap=pool.spec.group_concurrency, fair=pool.spec.fair_share)
        for key in granted:
            self.queue.add(TaskWork(*key), urgent=True)  # ahead of routine reconciles
        for key in self.slots.take_newly_parked():  # to say which key it waits for
            self.queue.add(TaskWork(*key))
        if tokens is not None:
            self.rate_limits.spend(pool_key, len(granted))
            self._next_token(pool_key, pool, capacity)

    def _next_token(self, pool_key: tuple[str, str], pool: TaskPool, capacity: int) -> None:
        """A pool held back by its rate limit alone (tasks wait, a slot is free, no token) grants
        again when its next token is due: a timer, not a loop. The timer grants at once, not
        through the work queue, whose workers may all be waiting on the API server then: a token
        granted late is time the bucket cannot give back (full at `burst`, it stops filling)."""
        if not (self.slots.waiting[pool_key] and self.slots.free(pool_key, capacity) > 0):
            return
        wait = self.rate_limits.wait(pool_key, pool)
        timer = self._token_timers.get(pool_key)
        if not wait or (timer is not None and timer.when() <= self.clock.monotonic() + wait):
            return
        if timer is not None:
            timer.cancel()
        self._token_timers[pool_key] = self.clock.call_later(wait, lambda: self._token_due(pool_key))

    def _token_due(self, pool_key: tuple[str, str]) -> None:
        self._token_timers.pop(pool_key, None)
        if not self.term.acting:
            return
        try:
            self.grant(*pool_key)
        except Exception:  # noqa: BLE001 - the work queue's dispatch retries it with backoff
            log.exception("granting the next token of pool %s/%s failed; dispatching it again", *pool_key)
            self.queue.add(PoolWork(*pool_key), urgent=True)


def _waits_on_refused_job(record: TaskRecord) -> bool:
    """Whether the task's current attempt waits on a Job the API server refused (its backoff goes on),
    as the reconcile left its record."""
    task = record.parsed  # (a packed task has no attempt yet)
    attempt = task.status.attempt if task is not None and task.status else 0
    return attempt in record.refused
