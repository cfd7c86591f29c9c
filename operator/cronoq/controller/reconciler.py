"""The Controller: it feeds watch events into the store, runs each Task's decision through the
work queue, grants pool slots (controller/slots.py), deletes finished tasks when their time
comes (controller/expiry.py), and applies plans in the order that keeps attempts fenced:

1. write the status (PUT with the stored resourceVersion: a concurrent change makes it fail,
   and we re-read and decide again);
2. only then create the attempt's Job, delete Jobs, post Events and count metrics.

So a crash between 1 and 2 leaves a status that names an attempt without a Job, which the next
decision creates (same deterministic name), and never a Job the status does not name.
"""
from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Hashable

from pydantic import ValidationError

from cronoq import metrics
from cronoq.api import Task, TaskPool, TaskPoolSpec, TaskStatus
from cronoq.controller.expiry import Expiry
from cronoq.controller.slots import Slots
from cronoq.controller.store import Key, Store, TaskEntry
from cronoq.controller.workqueue import WorkQueue
from cronoq.engine import dependencies, keys, naming, reasons
from cronoq.engine.admission import Candidate
from cronoq.engine.attempts import Effective, Observation, Plan, reconcile, refusal, settle
from cronoq.engine.gate import RUN, Gate
from cronoq.engine.jobs import build_job
from cronoq.engine.naming import lease_id
from cronoq.engine.pools import pool_status
from cronoq.engine.retention import task_expires_at
from cronoq.kube.observe import job_facts, pod_facts
from cronoq.kube.writes import Conflict, NotLeader, Rejected, Writer

log = logging.getLogger(__name__)

RESYNC_SECONDS = 60.0
"""Every task is looked at again this often, whatever the watches said (level-based safety net)."""
POOL_STATUS_SECONDS = 5.0
"""Pool status (counts by phase) is written at most this often per pool, and only when it changed."""


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def holder(entry: TaskEntry) -> keys.Holder:
    """What deduplication reads of a task. A finished task's output and message are not in
    memory; `full_holder` reads them when a duplicate needs them."""
    done = entry.finished
    if done is not None:
        return keys.Holder(name=entry.name, created_at=done.created_at or entry.first_seen, phase=done.phase,
                           attempt=done.attempt, finished_at=done.finished_at, output_available=done.output_available,
                           duplicate_of=done.duplicate_of)
    return full_holder(entry.task, entry.first_seen)


def full_holder(task: Task, first_seen: datetime) -> keys.Holder:
    status = task.status
    return keys.Holder(
        name=task.metadata.name, created_at=task.metadata.creation_timestamp or first_seen,
        phase=status.phase if status else None, attempt=status.attempt if status else 0,
        finished_at=status.finished_at if status else None, output=status.output if status else None,
        output_available=status.output_available if status else False,
        duplicate_of=status.duplicate_of if status else None, message=status.message if status else None)


class _Graph:
    """The namespace's dependency graph, read from the store as the cycle search walks it."""

    def __init__(self, store: Store, namespace: str) -> None:
        self.store, self.namespace = store, namespace

    def get(self, name: str, default=()):
        entry = self.store.tasks.get((self.namespace, name))
        return default if entry is None else list(entry.depends_on)


class Controller:
    def __init__(self, writer: Writer, *, epoch: int = 0, workers: int = 8,
                 clock: Callable[[], datetime] = utcnow, rng: random.Random | None = None,
                 sidecar_image: str | None = None, skew: Callable[[], timedelta] = timedelta) -> None:
        self.writer = writer
        self.skew = skew
        """Our clock minus the cluster's (kube/skew.py): cluster times are moved by it into ours."""
        self.sidecar_image = sidecar_image
        self.epoch = epoch
        self.workers = workers
        self.clock = clock
        self.rng = rng or random.Random()
        self.store = Store()
        self.queue = WorkQueue()
        self.slots = Slots(self.store)
        self.stale_counted: set[str] = set()
        self.rejected: dict[tuple[str, int], str] = {}
        self.acting = True
        """False once this replica must stop writing (it lost leadership)."""
        self.expiry = Expiry(self._delete_task, clock, busy=lambda: self.queue.urgent)

    # ------------------------------------------------------------------ watch events

    def on_task(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        key = (meta["namespace"], meta["name"])
        related = self.store.related(*key)
        if kind == "DELETED":
            entry = self.store.drop_task(*key)
            self._forget(key)
            if entry is not None:
                self.queue.add(("pool", key[0], entry.pool))
        elif (entry := self.store.put_task(raw, self.clock())) is not None:
            if key in self.store.fresh.get((key[0], entry.pool), ()):  # weighed before its first reconcile
                self.slots.want((key[0], entry.pool), Candidate.of(*key, entry.task.spec.priority, entry.first_seen),
                                entry.first_seen)
                self.queue.add(("pool", key[0], entry.pool))
            self.queue.add(("task", *key))
            related |= self.store.related(*key)
        else:
            return
        for name in related:  # their dependencies or their key's original changed
            self.queue.add(("task", key[0], name))

    def on_pool(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        key = (meta["namespace"], meta["name"])
        if kind == "DELETED":
            self.store.pools.pop(key, None)
        else:
            old = self.store.pools.get(key)
            pool = TaskPool.model_validate(raw)
            self.store.pools[key] = pool
            if old is None:
                metrics.start_series(key[1])
            if old is not None and old.spec == pool.spec:
                return
        # A pool appearing, going or changing matters to every task in it.
        for entry in self.store.tasks_in_pool(*key):
            self.queue.add(("task", key[0], entry.raw["metadata"]["name"]))
        self.queue.add(("pool", *key))

    def on_job(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if kind == "DELETED":  # by name: a deletion noticed in a relisting carries no labels
            owner = self.store.job_owner.get((namespace, name))
            if owner is None:
                return
            uid, task = owner
            self.store.drop_job(uid, name)  # its pod's last state stays: it may still report
        else:
            facts = job_facts(raw, self.skew())
            labels = meta.get("labels") or {}
            uid, task = labels.get(naming.TASK_UID), labels.get(naming.TASK)
            if facts is None or not uid or not task:
                return
            unchanged = self.store.jobs.get(uid, {}).get(name) == facts
            self.store.put_job(namespace, uid, task, facts)
            if facts.deleting and not facts.finished:  # being aborted (by us, or before a restart)
                self.slots.abort(namespace, name, (namespace, labels.get(naming.POOL, "default")))
            if unchanged:  # e.g. its active/ready counts moved: nothing a decision reads
                return
        self._drained((namespace, name))
        self.queue.add(("task", namespace, task))

    def on_pod(self, kind: str | None, raw: dict[str, Any]) -> None:
        facts = pod_facts(raw, self.skew())
        task = (raw["metadata"].get("labels") or {}).get(naming.TASK)
        if facts is None or not task:
            return
        # A deleted pod's last state is kept (its exit code still decides the attempt) until its
        # Task goes; the deletion itself shows in the Job's status. A finished task's outcome is
        # recorded: its pod's termination message (up to 4 KiB) need not be held as well.
        owner = self.store.tasks.get((raw["metadata"]["namespace"], task))
        if owner is not None and owner.finished is not None and facts.termination is not None:
            facts = replace(facts, termination=replace(facts.termination, message=None))
        namespace = raw["metadata"]["namespace"]
        if self.store.pods.get((namespace, facts.job)) == facts:  # scheduled, a finalizer gone: nothing to decide
            return
        self.store.put_pod(namespace, facts, self.clock())
        self._drained((namespace, facts.job))
        self.queue.add(("task", namespace, task))

    def on_lease(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if kind == "DELETED":  # by name, like Jobs; an attempt's Lease shares its Job's name
            self.store.drop_lease(namespace, name)
            owner = self.store.job_owner.get((namespace, name))
            task = owner[1] if owner else (meta.get("labels") or {}).get(naming.TASK)
        else:
            task = (meta.get("labels") or {}).get(naming.TASK)
            if not task:
                return
            spec = raw.get("spec") or {}
            if not self.store.put_lease(namespace, name, spec.get("holderIdentity"), spec.get("renewTime"),
                                        self.clock()):
                return
        if task:
            self.queue.add(("task", namespace, task))

    def _drained(self, job: Key) -> None:
        """If this aborted attempt's container stopped, its slot is free: let the pool admit."""
        pool = self.slots.drained(job)
        if pool is not None:
            self.queue.add(("pool", *pool), urgent=True)

    def _forget(self, key: Key) -> None:
        pool = self.slots.forget(key)
        self.expiry.forget(key)
        if pool is not None:
            self.queue.add(("pool", *pool))

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        await asyncio.gather(self.queue.run(self.workers, self.process), self._resync(), self._pool_statuses(),
                             self.expiry.run())

    async def process(self, key: Hashable) -> None:
        if not self.acting:
            return
        kind, namespace, name = key
        try:
            if kind == "task":
                await self.reconcile_task(namespace, name)
            else:
                await self.dispatch(namespace, name)
        except NotLeader:
            self.acting = False
        except Exception as err:  # noqa: BLE001 - one task's trouble must not stop the others
            delay, failures = self.queue.retry(key)
            metrics.RETRIES.labels(kind).inc()
            if failures == 1:
                log.exception("reconciling %s %s/%s failed; retrying in %.1fs", kind, namespace, name, delay)
            else:
                log.warning("reconciling %s %s/%s failed %d times in a row (%s); retrying in %.1fs",
                            kind, namespace, name, failures, err, delay)
        else:
            self.queue.forget(key)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            for namespace, name in list(self.store.tasks):
                self.queue.add(("task", namespace, name))
            for namespace, name in list(self.store.pools):
                self.queue.add(("pool", namespace, name))

    # ------------------------------------------------------------------ one task

    async def reconcile_task(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        entry = self.store.tasks.get(key)
        if entry is None:
            self._forget(key)
            return
        pool_key = (namespace, entry.pool)
        pool = self.store.pools.get(pool_key)
        now = self.clock()
        if entry.finished is not None:
            await self._settle(entry, pool, now)
            return
        if entry.task is None:
            await self._refuse(entry)
            return
        task = entry.task
        attempt_n = task.status.attempt if task.status else 0
        settings = Effective.of(task, pool.spec if pool else None)
        seen = Observation(
            jobs=self.store.attempt_jobs(entry), now=now, epoch=self.epoch, admit=key in self.slots.grants,
            pool_found=pool is not None, pool_name=task.spec.pool, first_seen=entry.first_seen,
            job_rejected=self.rejected.get((entry.uid, attempt_n)),
            gate=await self._gate(entry, pool.spec if pool else None, now) if attempt_n == 0 else RUN)
        plan = reconcile(task, settings, seen, self.rng)

        if plan.status is not None:
            try:
                written = await asyncio.to_thread(self.writer.replace_task_status, entry.raw, plan.status.to_dict())
            except Conflict:
                fresh = await asyncio.to_thread(self.writer.read_task, namespace, name)
                if fresh is None:
                    self.store.drop_task(namespace, name)
                else:
                    self.store.put_task(fresh, now)
                self.queue.add(("task", namespace, name))
                return
            except Rejected as err:
                log.error("the API server refused the status of task %s/%s: %s", namespace, name, err.message)
                self.slots.take_grant(key)
                return
            task = task.model_copy(update={"status": plan.status})  # as written; the store may keep less
            entry = self.store.put_task(written, now) or self.store.tasks.get(key) or entry
            for other in self.store.related(namespace, name):  # the watch event will be a no-op
                self.queue.add(("task", namespace, other))
            self._schedule_expiry(entry, pool)
        await self._apply(entry, task, plan, pool_key, now, settings)

    async def _settle(self, entry: TaskEntry, pool: TaskPool | None, now: datetime) -> None:
        """A finished task: stop leftover Jobs, ignore late reports, and delete it when its time comes."""
        done = entry.finished
        plan = settle(entry.name, done.attempt, done.marks, self.store.attempt_jobs(entry))
        self._schedule_expiry(entry, pool)
        await self._apply(entry, None, plan, (entry.raw["metadata"]["namespace"], done.pool), now, None)

    def _schedule_expiry(self, entry: TaskEntry, pool: TaskPool | None) -> None:
        done = entry.finished
        if done is not None:
            due = task_expires_at(done.finished_at, done.ttl_after_finished, done.key, pool.spec if pool else None)
            self.expiry.schedule((entry.raw["metadata"]["namespace"], entry.name), entry.uid, due)

    async def _apply(self, entry: TaskEntry, task: Task | None, plan: Plan, pool_key: Key, now: datetime,
                     settings: Effective | None) -> None:
        """Apply what a plan decided after its status landed: slots and metrics first (no await
        in between, so admission never sees the task half-moved), then the writes. `task` is the
        task as written (None for a finished task's settling)."""
        namespace, name = entry.raw["metadata"]["namespace"], entry.name
        self._book_slots(entry, task, plan, pool_key)
        self._count(task, plan, pool_key[1])
        if plan.create_job is not None and task is not None and settings is not None:
            await self._create_job(entry, task, plan, pool_key, settings)
        for job_name in plan.delete_jobs:
            await asyncio.to_thread(self.writer.delete_job, namespace, job_name)
        for event in plan.events:
            await asyncio.to_thread(self.writer.post_event, entry.raw, event, now)
        if plan.requeue_after is not None:
            self.queue.add_after(("task", namespace, name), plan.requeue_after + 0.01)

    def _book_slots(self, entry: TaskEntry, task: Task | None, plan: Plan, pool_key: Key) -> None:
        namespace, name = entry.raw["metadata"]["namespace"], entry.name
        key = (namespace, name)
        granted = self.slots.take_grant(key)
        for job_name in plan.delete_jobs:  # its container may run on until its pod is gone
            self.slots.abort(namespace, job_name, pool_key)
        if plan.wants_slot and task is not None:
            # Refreshed on every reconcile: a priority raised while queued reorders the queue.
            submitted = (task.status.submitted_at if task.status else None) or entry.first_seen
            self.slots.want(pool_key, Candidate.of(namespace, name, task.spec.priority, submitted), self.clock())
            self.queue.add(("pool", *pool_key))
        else:
            self.slots.unwant(pool_key, key)
        if granted or plan.ended:
            self.queue.add(("pool", *pool_key), urgent=True)  # a slot was used or freed: someone else's turn

    def _count(self, task: Task | None, plan: Plan, pool: str) -> None:
        """Counted as soon as the status that records them has landed, before the slower side effects."""
        for uid in plan.stale_jobs:
            if uid not in self.stale_counted:
                self.stale_counted.add(uid)
                metrics.STALE_COMPLETIONS.inc()
        for attempt in plan.ended:
            metrics.ATTEMPTS.labels(pool, metrics.label(attempt.outcome.value)).inc()
            if attempt.reason == reasons.LEASE_EXPIRED:
                metrics.LEASE_EXPIRATIONS.inc()
        status = task.status if task is not None else None
        if plan.status is not None and status is not None and status.phase is not None and status.phase.terminal:
            metrics.TASKS.labels(pool, metrics.label(status.phase.value)).inc()
            if status.submitted_at and status.finished_at:
                metrics.TASK_DURATION.labels(pool, metrics.label(status.phase.value)).observe(
                    max((status.finished_at - status.submitted_at).total_seconds(), 0))

    async def _create_job(self, entry: TaskEntry, task: Task, plan: Plan, pool_key: Key, settings: Effective) -> None:
        """The recorded attempt's Job (the attempt creates its own heartbeat Lease, at its first renewal)."""
        namespace, name, number = entry.raw["metadata"]["namespace"], entry.name, plan.create_job
        record = task.status.attempts[-1] if task.status and task.status.attempts else None
        lease = record.lease_id if record and record.number == number and record.lease_id else lease_id(self.epoch, number)
        pool = self.store.pools.get(pool_key)
        job = build_job(task, pool.spec if pool else None, number, lease, lease_ttl=settings.lease_ttl,
                        sidecar_image=self.sidecar_image if settings.heartbeat_sidecar else None,
                        job_retention=settings.job_retention, push_image=self.sidecar_image)
        try:
            created = await asyncio.to_thread(self.writer.create_job, job)
        except Rejected as err:
            if err.status == 422:
                self.rejected[(entry.uid, number)] = err.message
                self.queue.add(("task", namespace, name))
            else:  # forbidden: a quota, a terminating namespace; try again later
                log.warning("creating Job %s/%s refused: %s", namespace, job["metadata"]["name"], err.message)
                self.queue.add_after(("task", namespace, name), 5.0)
            return
        facts = job_facts(created, self.skew()) if created is not None else None
        if facts is not None:  # known before its watch event: never taken for a lost Job
            self.store.put_job(namespace, entry.uid, name, facts)
        if plan.started is not None:
            since = self.slots.ready_since.pop((namespace, name), None) or entry.first_seen
            metrics.DISPATCH_LATENCY.labels(pool_key[1]).observe(max((self.clock() - since).total_seconds(), 0))

    async def _gate(self, entry: TaskEntry, pool: TaskPoolSpec | None, now: datetime) -> Gate:
        """What the task's key, then its dependencies, say about its first attempt."""
        task = entry.task
        namespace = entry.raw["metadata"]["namespace"]
        if task.spec.key:
            retention = (pool or TaskPoolSpec()).key_retention
            names = [n for n in self.store.keyed.get((namespace, entry.pool, task.spec.key), ())
                     if n != task.metadata.name and (namespace, n) in self.store.tasks]
            others = [holder(self.store.tasks[(namespace, n)]) for n in names]
            verdict = keys.gate(holder(entry), others, retention, now)
            original = self.store.tasks.get((namespace, verdict.duplicate_of or ""))
            if verdict.verdict == "end" and original is not None and original.finished is not None:
                # Ending as a finished task's duplicate: read the original's output and message.
                raw = await asyncio.to_thread(self.writer.read_task, namespace, original.name)
                full = Task.model_validate(raw) if raw is not None else None
                if full is not None and full.metadata.uid == original.uid:
                    others = [full_holder(full, original.first_seen) if h.name == original.name else h for h in others]
                    verdict = keys.gate(holder(entry), others, retention, now)
            if verdict.verdict != "run":
                return verdict
        if task.spec.depends_on:
            def phase_of(name: str):
                dep = self.store.tasks.get((namespace, name))
                return dependencies.MISSING if dep is None else dep.phase

            phases = {d.task: phase_of(d.task) for d in task.spec.depends_on}
            return dependencies.gate(task.metadata.name, task.spec.depends_on, phases, _Graph(self.store, namespace))
        return RUN

    async def _refuse(self, entry: TaskEntry) -> None:
        """A Task the models cannot read (e.g. a payload over its size limit) ends Failed, once."""
        raw = entry.raw
        try:
            stored = TaskStatus.model_validate(raw["status"]) if raw.get("status") else None
        except ValidationError:
            stored = None
        new = refusal(stored, entry.error or "", raw["metadata"].get("generation"), self.epoch, self.clock())
        if new is None:
            return
        try:
            written = await asyncio.to_thread(self.writer.replace_task_status, raw, new.to_dict())
        except Conflict:
            self.queue.add(("task", raw["metadata"]["namespace"], raw["metadata"]["name"]))
            return
        except Rejected as err:  # e.g. a newer leader's epoch: nothing this replica may do
            log.error("the API server refused the status of task %s/%s: %s", raw["metadata"]["namespace"],
                      raw["metadata"]["name"], err.message)
            return
        self.store.put_task(written, self.clock())

    async def _delete_task(self, namespace: str, name: str, uid: str) -> None:
        if not self.acting:
            return
        try:
            await asyncio.to_thread(self.writer.delete_task, namespace, name, uid)
        except NotLeader:
            self.acting = False
            return
        log.debug("deleted finished task %s/%s (retention over)", namespace, name)

    # ------------------------------------------------------------------ pools

    async def dispatch(self, namespace: str, name: str) -> None:
        """Grant free slots of the pool to its waiting tasks, best first."""
        pool_key = (namespace, name)
        pool = self.store.pools.get(pool_key)
        running = self.slots.running(pool_key)
        metrics.RUNNING_ATTEMPTS.labels(name).set(running)
        metrics.QUEUE_DEPTH.labels(name).set(len(self.slots.waiting[pool_key]))
        if pool is None:
            return
        for key in self.slots.admit(pool_key, pool.spec.concurrency, self.clock()):
            self.queue.add(("task", *key), urgent=True)  # ahead of routine reconciles

    async def _pool_statuses(self) -> None:
        while True:
            await asyncio.sleep(POOL_STATUS_SECONDS)
            if not self.acting:
                continue
            for key in list(self.store.pools):
                try:
                    await self._write_pool_status(key)
                except NotLeader:
                    self.acting = False
                except Exception:  # noqa: BLE001
                    log.exception("writing the status of pool %s/%s failed", *key)

    async def _write_pool_status(self, key: Key) -> None:
        pool = self.store.pools.get(key)
        if pool is None:
            return
        new = pool_status(pool, self.store.phases.get(key, {}), len(self.store.running.get(key, ())),
                          len(self.slots.waiting[key]), self.clock())
        if new is None:
            return
        try:
            written = await asyncio.to_thread(self.writer.replace_pool_status, pool.to_dict(), new.to_dict())
        except Conflict:
            return
        self.store.pools[key] = TaskPool.model_validate(written)
