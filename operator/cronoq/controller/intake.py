"""Watch events in: each event updates the store's facts and queues the keys whose decision may
have changed. Nothing here writes to the API server or decides a task's fate; an event that
changes no fact a decision reads queues nothing (level-based: the decision reads the store).
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Callable

from cronoq import metrics
from cronoq.api import TaskPool
from cronoq.controller.slots import Slots
from cronoq.controller.store import Key, Store
from cronoq.controller.workqueue import PoolWork, TaskWork, WorkKey, WorkQueue
from cronoq.engine import admission, delay, naming
from cronoq.engine.admission import Candidate
from cronoq.kube.observe import WorkerFacts, checkpoint_of, job_facts, pod_facts, served_facts, worker_facts


class Intake:
    def __init__(self, store: Store, queue: WorkQueue[WorkKey], slots: Slots, *,
                 clock: Callable[[], datetime], skew: Callable[[], timedelta]) -> None:
        self.store, self.queue, self.slots = store, queue, slots
        self.clock = clock
        self.skew = skew
        """Our clock minus the cluster's (kube/skew.py): cluster times are moved by it into ours."""

    def on_task(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        key = (meta["namespace"], meta["name"])
        related = self.store.related(*key)
        new = key not in self.store.tasks
        was_debouncing = self.store.debouncing(key)
        if kind == "DELETED":
            gone = self.store.forget(key)
            if gone is not None:
                self.queue.add(PoolWork(key[0], gone.pool))
        elif (record := self.store.put_task(raw, self.clock())) is not None:
            fresh = key in self.store.fresh.get((key[0], record.pool), ())  # weighed before its first reconcile
            brief = record.weighed() if fresh else None  # (a fresh task is always a readable one)
            if brief is not None and not delay.until(brief.not_before, self.clock()):
                # (a delayed one is weighed from its time on)
                in_line = delay.in_line(brief.not_before, record.first_seen)
                candidate = Candidate.of(*key, brief.priority, in_line, brief.group, brief.submitter,
                                         brief.concurrency_keys)
                self.slots.want((key[0], record.pool), candidate, record.first_seen)
                self.queue.add(PoolWork(key[0], record.pool))
            self.queue.add(TaskWork(*key))
            related |= self.store.related(*key)
            brief = record.weighed()
            if brief is not None and brief.concurrency_keys and (new or brief.debouncing != was_debouncing):
                # A new task, or one released from debouncing (a Debounce key's burst ended).
                related |= self.store.superseded_peers(key[0], brief.concurrency_keys)
        else:
            return
        for name in related:  # their dependencies or their key's original changed
            self.queue.add(TaskWork(key[0], name))

    def on_pool(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        key = (meta["namespace"], meta["name"])
        if kind == "DELETED":
            if self.store.pools.pop(key, None) is not None:
                metrics.end_series(*key)
        else:
            old = self.store.pools.get(key)
            pool = TaskPool.model_validate(raw)
            self.store.pools[key] = pool
            if old is None:
                metrics.start_series(*key)
            if old is not None and old.spec == pool.spec:
                return
            if old is not None and admission.tasks_unmoved(old.spec, pool.spec):
                self.queue.add(PoolWork(*key), urgent=True)
                return
        # A pool appearing, going or changing matters to every task in it; its slots first (a pool
        # resumed or widened with 100,000 tasks queued must not grant after all their reconciles).
        for record in self.store.tasks_in_pool(*key):
            self.queue.add(TaskWork(key[0], record.name))
        self.queue.add(PoolWork(*key), urgent=True)

    def on_job(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        task: str | None
        if kind == "DELETED":  # by name: a deletion noticed in a relisting carries no labels
            task = self.store.drop_job(namespace, name)
            if task is None:
                return
        else:
            facts = job_facts(raw, self.skew())
            labels = meta.get("labels") or {}
            uid, task = labels.get(naming.TASK_UID), labels.get(naming.TASK)
            if facts is None or not uid or not task:
                return
            changed = self.store.put_job(namespace, uid, task, facts)
            if facts.deleting and not facts.finished:  # being aborted (by us, or before a restart)
                self.slots.abort(namespace, name, (namespace, labels.get(naming.POOL, "default")))
            if not changed:  # e.g. its active/ready counts moved: nothing a decision reads
                return
        self._drained((namespace, name))
        self.queue.add(TaskWork(namespace, task))

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
        if not self.store.put_pod(namespace, facts, self.clock()):  # scheduled, a finalizer gone: nothing to decide
            return
        self._drained((namespace, facts.job))
        self.queue.add(TaskWork(namespace, task))

    def on_lease(self, kind: str | None, raw: dict[str, Any]) -> None:
        meta = raw["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if kind == "DELETED":  # by name, like Jobs; an attempt's Lease shares its Job's name
            self.store.drop_lease(namespace, name)
            owner = self.store.job_owner.get((namespace, name))
            task = owner[1] if owner else (meta.get("labels") or {}).get(naming.TASK)
        else:
            labels = meta.get("labels") or {}
            task, uid = labels.get(naming.TASK), labels.get(naming.TASK_UID)
            if not task:
                return
            spec = raw.get("spec") or {}
            renewed = self.store.put_lease(namespace, name, spec.get("holderIdentity"), spec.get("renewTime"),
                                           self.clock(), uid)
            served = served_facts(raw, self.skew())
            reported = bool(served is not None and uid and self.store.put_served(namespace, uid, served))
            # A finished task's checkpoint is recorded (or moot): what its Lease still says is not kept.
            record = self.store.tasks.get((namespace, task))
            done = record is not None and record.uid == uid and record.finished is not None
            saved = self.store.put_checkpoint(namespace, name, spec.get("holderIdentity"),
                                              None if done else checkpoint_of(raw))
            if not (renewed or reported or saved):
                return
        if task:
            self.queue.add(TaskWork(namespace, task))

    def on_worker_lease(self, kind: str | None, raw: dict[str, Any]) -> None:
        """A pull worker came, renewed, changed its room or went: its pool may admit (or must
        not), and a worker gone ends the attempts it served (their reconciles say LeaseExpired)."""
        namespace, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        facts = worker_facts(raw, self.skew()) if kind != "DELETED" else None
        if facts is None:
            old = self.store.drop_worker(namespace, name)
            if old is None:
                return
            pool = old.pool
        else:
            now = self.clock()
            was = self.store.workers.get((namespace, name))
            alive = self.store.worker_alive_until(namespace, name)
            if not self.store.put_worker(namespace, facts, now):
                return
            pool = facts.pool
            if was is not None and alive is not None and alive > now and _renewal_only(was[0], facts):
                # Its tasks' next look at it is already due when the lease it had lapses (their
                # decision's requeue): a renewal only moves that further. Reconciling every task
                # it serves on each renewal cost a reconcile per 5 s per task held.
                self.queue.add(PoolWork(namespace, pool))
                return
        for task in self.store.by_worker.get((namespace, name), ()):
            self.queue.add(TaskWork(namespace, task))
        self.queue.add(PoolWork(namespace, pool))

    def _drained(self, job: Key) -> None:
        """If this aborted attempt's container stopped, its slot is free: let the pool admit."""
        pool = self.slots.drained(job)
        if pool is not None:
            self.queue.add(PoolWork(*pool), urgent=True)


def _renewal_only(old: WorkerFacts, new: WorkerFacts) -> bool:
    """The worker's Lease changed by its renewal alone: same holder, pool, room and duration."""
    return (old.holder == new.holder and old.pool == new.pool and old.capacity == new.capacity
            and old.duration == new.duration)
