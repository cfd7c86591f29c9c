"""Pool slots: which tasks wait for one, which were granted one, and which aborted attempts still
hold one. The order of the waiting is the engine's (`admission.Queue`); this keeps the state
between watch events and reconciles, and decides nothing about a task but its turn.

A slot is taken from the moment a task is granted it (before its attempt is even recorded) until
its attempt is recorded as ended — or, for an attempt the operator aborted, until its pod has
stopped (`draining`), so `concurrency` also holds while a cancelled container shuts down.

A grant lives for one reconcile of its task (controller/reconciler.py): the reconcile that starts
holding it books it when its status lands (`take_grant`), or hands it on to the task's next
reconcile when it has already asked for one (a detour to read something, a conflicting write);
any other end — an exception, a refused write, a return without booking — gives it back
(`release`), with the rate-limit token it took. So no path through a reconcile, present or
future, can keep a slot that no attempt uses.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from cronoq.controller.store import Key, Store
from cronoq.api import FairShare
from cronoq.engine.admission import Candidate, Queue, fair_group
from cronoq.engine.attempts import is_ready


@dataclass(frozen=True, eq=False)
class Grant:
    """A slot granted to a task and not used yet. Compared by identity: a reconcile answers for the
    grant it started with, not for one made while it was waiting on the API server."""

    pool: Key
    at: datetime
    """When it was granted (the attempt's dispatchedAt)."""
    token: bool = False
    """It took a token of the pool's rate limit (given back with it when unused)."""


class Slots:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.grants: dict[Key, Grant] = {}
        """Tasks admitted to a slot and not yet Running: task key → its grant."""
        self.waiting: dict[Key, Queue] = _Queues()
        """Pool key → its ready tasks waiting for a slot, in admission order (new tasks enter as
        soon as they are seen, before their first reconcile, so a burst is ordered as a whole).
        A pool has a queue only while a task waits in it: a pool name that tasks make up costs
        nothing once they stop waiting (reading a pool without one finds an empty queue)."""
        self.waits_in: dict[Key, Key] = {}
        """Task key → the pool key it waits in (a task that goes is found without a scan)."""
        self.ready_since: dict[Key, datetime] = {}
        """Task key → when it became ready to start (for the dispatch latency metric)."""
        self.draining: dict[Key, Key] = {}
        """(namespace, Job name) of an aborted attempt whose container may still run → its pool key."""

    def want(self, pool: Key, candidate: Candidate, now: datetime) -> None:
        """The task waits for a slot; a changed priority re-ranks it."""
        key = candidate.key
        if self.waits_in.get(key, pool) != pool:
            self.unwant(self.waits_in[key], key)
        queue = self.waiting.get(pool)
        if queue is None:
            queue = self.waiting[pool] = Queue(self.fair(pool))
        queue.put(candidate)
        self.waits_in[key] = pool
        self.ready_since.setdefault(key, now)

    def unwant(self, pool: Key, key: Key) -> None:
        if self.waits_in.get(key) == pool:
            del self.waits_in[key]
        queue = self.waiting.get(pool)
        if queue is not None:
            queue.discard(key)
            if not queue:
                del self.waiting[pool]

    def take_grant(self, key: Key) -> bool:
        """The task's reconcile used (or passed on) its grant."""
        return self.grants.pop(key, None) is not None

    def release(self, key: Key, grant: Grant) -> bool:
        """`grant` went unused: its slot is free again (False: it was used or released already).
        The task no longer waits; its next reconcile asks again, in its place by priority and time."""
        if self.grants.get(key) is not grant:
            return False
        del self.grants[key]
        return True

    def forget(self, key: Key) -> Grant | None:
        """The task is gone; returns the grant it held, if any."""
        if (waits_in := self.waits_in.get(key)) is not None:
            self.unwant(waits_in, key)
        self.ready_since.pop(key, None)
        return self.grants.pop(key, None)

    def abort(self, namespace: str, job: str, pool: Key) -> None:
        """The operator is deleting this Job: its slot stays taken while its container may run."""
        if self.store.may_run(namespace, job):
            self.draining[(namespace, job)] = pool

    def drained(self, job: Key) -> Key | None:
        """If this aborted attempt's container has stopped, free its slot; return its pool."""
        pool = self.draining.get(job)
        if pool is not None and not self.store.may_run(*job):
            del self.draining[job]
            return pool
        return None

    def release_drained(self, pool: Key) -> None:
        """Free the pool's slots of aborted attempts whose container has stopped: a step of its own,
        taken before slots are counted, so that `running` only reads."""
        for job in [j for j, p in self.draining.items() if p == pool]:
            self.drained(job)

    def running(self, pool: Key) -> int:
        """Slots in use: running attempts, and aborted ones whose container may still run."""
        return len(self.store.running.get(pool, ())) + sum(1 for p in self.draining.values() if p == pool)

    def free(self, pool: Key, concurrency: int) -> int:
        """Slots neither running nor granted."""
        return concurrency - self.running(pool) - sum(1 for g in self.grants.values() if g.pool == pool)

    def fair(self, pool: Key) -> FairShare | None:
        """The pool's fairShare, as the store has its spec (None: no fair shares, or no pool)."""
        found = self.store.pools.get(pool)
        return found.spec.fair_share if found is not None else None

    def admit(self, pool: Key, concurrency: int, now: datetime, most: int | None = None,
              group_cap: int | None = None, fair: FairShare | None = None) -> list[Key]:
        """Free drained slots, then grant the pool's free slots (`most` of them at most: its rate
        limit's tokens, each grant taking one) to its best waiting tasks, no group beyond `group_cap`
        attempts at once (a pool's groupConcurrency), shared among its groups as `fair` says (a
        pool's fairShare); return them, best first."""
        self.release_drained(pool)
        waiting = self.waiting.get(pool)
        if waiting is None:
            return []
        waiting.configure(fair)
        free = self.free(pool, concurrency)
        if most is not None:
            free = min(free, most)
        using = self.by_group(pool, fair) if (group_cap is not None or fair is not None) and free > 0 else None
        if using is not None and fair is not None:
            waiting.hold(using, now)
        eligible = None
        if using is not None and group_cap is not None:
            cap = group_cap
            eligible = lambda group: using[group] < cap  # noqa: E731
        granted: list[Key] = []
        while free > 0 and (candidate := waiting.pop(eligible)) is not None:
            key = candidate.key
            self.waits_in.pop(key, None)
            entry = self.store.tasks.get(key)
            task = entry.task if entry is not None and key not in self.grants else None  # (read once: it may be packed)
            if task is None or not is_ready(task, now):
                continue  # gone, cancelled or started meanwhile: its next reconcile says what it wants
            self.grants[key] = Grant(pool, now, token=most is not None)
            granted.append(key)
            free -= 1
            if using is not None:
                using[waiting.group_of(candidate)] += 1
        if not waiting:
            del self.waiting[pool]
        return granted

    def by_group(self, pool: Key, fair: FairShare | None = None) -> Counter[str]:
        """Slots in use per fairness group (as `fair` takes groups): running attempts, grants,
        aborted attempts still running. O(concurrency): what runs, never what waits."""
        holders = [*self.store.running.get(pool, ()), *(k for k, g in self.grants.items() if g.pool == pool)]
        holders += [(job[0], owner[1]) for job, p in self.draining.items()
                    if p == pool and (owner := self.store.job_owner.get(job)) is not None]
        using: Counter[str] = Counter()
        for key in holders:
            record = self.store.tasks.get(key)
            brief = record.weighed() if record is not None else None
            if brief is not None:
                using[fair_group(brief.group, brief.submitter, fair)] += 1
        return using


class _Queues(dict[Key, Queue]):
    """Pool key → its queue, kept only while the queue holds a task; a read of a pool without one
    finds an empty queue, and keeps nothing."""

    def __missing__(self, pool: Key) -> Queue:
        return Queue()
