"""Pool slots: which tasks wait for one, which were granted one, and which aborted attempts still
hold one. The order of the waiting is the engine's (`admission.Queue`); this keeps the state
between watch events and reconciles, and decides nothing about a task but its turn.

A slot is taken from the moment a task is granted it (before its attempt is even recorded) until
its attempt is recorded as ended — or, for an attempt the operator aborted, until its pod has
stopped (`draining`), so `concurrency` also holds while a cancelled container shuts down.

A task whose concurrency key has no room (engine/keylimits.py) is taken out of its pool's queue
when its turn comes and kept `parked` under that key, with no turn or slot taken; whenever a pool
of the namespace grants, the keys with room again put their tasks back in their pools' queues
(`unpark`), in their places by priority and time. What holds a key is what holds a slot, in any
pool of the namespace.

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

from cronoq import metrics
from cronoq.controller.store import Key, Store
from cronoq.api import FairShare
from cronoq.engine import keylimits
from cronoq.engine.admission import Candidate, Queue, capacity, fair_group
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
        self.parked: dict[Key, tuple[Key, Candidate]] = {}
        """Task key → (its pool key, its place in line) while a concurrency key of it has no room."""
        self.parked_on: dict[str, dict[str, set[Key]]] = {}
        """Namespace → concurrency key → the tasks parked on it."""
        self.key_waits: dict[Key, str] = {}
        """Task key → the concurrency key it was last parked on, until it is granted a slot or stops
        waiting (what its status says it waits for)."""
        self.parked_in: Counter[Key] = Counter()
        """Pool key → how many of its tasks are parked (the cronoq_key_waiting_tasks gauge)."""
        self.newly_parked: list[Key] = []
        """Tasks parked on a key they did not wait for before: their status is to say so."""

    def want(self, pool: Key, candidate: Candidate, now: datetime) -> None:
        """The task waits for a slot; a changed priority re-ranks it."""
        key = candidate.key
        if key in self.parked:  # it waits for its key, not for its turn
            self._count_parked(self.parked[key][0], -1)
            self._count_parked(pool, 1)
            self.parked[key] = (pool, candidate)
            return
        if self.waits_in.get(key, pool) != pool:
            self.unwant(self.waits_in[key], key)
        queue = self.waiting.get(pool)
        if queue is None:
            queue = self.waiting[pool] = Queue(self.fair(pool))
        queue.put(candidate)
        self.waits_in[key] = pool
        self.ready_since.setdefault(key, now)

    def unwant(self, pool: Key, key: Key) -> None:
        self._unpark(key)
        self.key_waits.pop(key, None)
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
        self._unpark(key)
        self.key_waits.pop(key, None)
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
        limits = self.limits(pool[0]) if free > 0 else keylimits.Limits({}, ())
        key_holds = self.key_holds(pool[0]) if limits else None

        def held(candidate: Candidate) -> bool:
            """Its key has no room: it leaves the queue, parked on that key."""
            blocked = keylimits.blocking(candidate.keys, key_holds or {}, limits) if candidate.keys else None
            if blocked is not None:
                self._park(pool, candidate, blocked)
            return blocked is not None
        granted: list[Key] = []
        while free > 0 and (candidate := waiting.pop(eligible, held if key_holds is not None else None)) is not None:
            key = candidate.key
            self.waits_in.pop(key, None)
            if not self._ready(key, now):
                continue  # gone, cancelled or started meanwhile: its next reconcile says what it wants
            self.grants[key] = Grant(pool, now, token=most is not None)
            self.key_waits.pop(key, None)
            granted.append(key)
            free -= 1
            if using is not None:
                using[waiting.group_of(candidate)] += 1
            if key_holds is not None:
                key_holds.update(set(candidate.keys))
        if not waiting:
            del self.waiting[pool]
        return granted

    def _ready(self, key: Key, now: datetime) -> bool:
        """Whether the task taken from the queue may have the slot: still there, not granted one
        already, and waiting for nothing but a slot. A packed task answers from its brief: its
        decision reads it whole anyway, and a second parse of each dispatched task showed in a deep
        queue's drain (issue 56); only what the brief cannot tell (a Blocked task) reads the task."""
        entry = self.store.tasks.get(key)
        if entry is None or key in self.grants:
            return False
        told = entry.brief.ready(now) if entry.brief is not None else None
        if told is not None:
            return told
        task = entry.task  # (read once: it may be packed)
        return task is not None and is_ready(task, now)

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


    # ------------------------------------------------------------------ concurrency keys

    def limits(self, namespace: str) -> keylimits.Limits:
        """The namespace's key limits, as its pools declare them."""
        return keylimits.Limits.of_pools(p.spec for k, p in self.store.pools.items() if k[0] == namespace)

    def key_holders(self, namespace: str) -> dict[str, set[str]]:
        """Concurrency key → the names of the namespace's tasks holding it: running attempts, grants,
        aborted attempts still running, in any pool. O(what runs in the namespace)."""
        holders = [k for p, running in self.store.running.items() if p[0] == namespace for k in running]
        holders += [k for k in self.grants if k[0] == namespace]
        holders += [(job[0], owner[1]) for job in self.draining
                    if job[0] == namespace and (owner := self.store.job_owner.get(job)) is not None]
        found: dict[str, set[str]] = {}
        for key in holders:
            record = self.store.tasks.get(key)
            brief = record.weighed() if record is not None else None
            for held in brief.concurrency_keys if brief is not None else ():
                found.setdefault(held, set()).add(key[1])
        return found

    def key_holds(self, namespace: str) -> Counter[str]:
        """Concurrency key → how many of the namespace's tasks hold it."""
        return Counter({key: len(names) for key, names in self.key_holders(namespace).items()})

    def key_wait(self, key: Key, keys: tuple[str, ...], said: bool = False) -> keylimits.KeyWait | None:
        """Why a task that was parked (or whose status `said` it waits for a key: a new leader's
        first look) waits for a key now (None: it was not, or its keys have room)."""
        if not (said or key in self.key_waits) or not keys:
            return None
        return keylimits.key_wait(keys, self.key_holders(key[0]), self.limits(key[0]))

    def _park(self, pool: Key, candidate: Candidate, on: str) -> None:
        key = candidate.key
        self.waits_in.pop(key, None)
        if (before := self.parked.get(key)) is not None:
            self._count_parked(before[0], -1)
        self._count_parked(pool, 1)
        self.parked[key] = (pool, candidate)
        self.parked_on.setdefault(key[0], {}).setdefault(on, set()).add(key)
        if self.key_waits.get(key) != on:
            self.key_waits[key] = on
            self.newly_parked.append(key)

    def _unpark(self, key: Key) -> tuple[Key, Candidate] | None:
        found = self.parked.pop(key, None)
        if found is None:
            return None
        self._count_parked(found[0], -1)
        keys = self.parked_on.get(key[0], {})
        for on in [k for k, tasks in keys.items() if key in tasks]:
            keys[on].discard(key)
            if not keys[on]:
                del keys[on]
        if not keys:
            self.parked_on.pop(key[0], None)
        return found

    def unpark(self, namespace: str) -> set[Key]:
        """Put tasks parked on a key of the namespace that has room again back in their pools'
        queues, as many as it has room for: the best first (priority, then time in line) among those
        whose pool has a free slot, then the rest, so the key goes to the best waiter that can run,
        whichever pool frees it; return their pools (to grant again). The others stay parked until
        the next grant in the namespace. O(parked tasks of the keys with room, log) + O(what runs in
        the namespace) when any task is parked, else nothing."""
        parked = self.parked_on.get(namespace)
        if not parked:
            return set()
        limits = self.limits(namespace)
        held = self.key_holds(namespace)
        pools: set[Key] = set()
        free: dict[Key, bool] = {}

        def has_slot(pool: Key) -> bool:
            if pool not in free:
                found = self.store.pools.get(pool)
                free[pool] = found is not None and self.free(pool, capacity(found.spec)) > 0
            return free[pool]

        for on in list(parked):
            limit = limits.limit(on)
            room = None if limit is None else limit - held.get(on, 0)
            if room is not None and room <= 0:
                continue
            waiting = [(has_slot(self.parked[k][0]), self.parked[k][1].sort_key, k)
                       for k in parked.get(on, ()) if k in self.parked]
            for key in keylimits.next_holders(waiting, room):
                found = self._unpark(key)
                if found is not None:
                    pool, candidate = found
                    self.want(pool, candidate, candidate.sort_key[1])
                    pools.add(pool)
        return pools

    def _count_parked(self, pool: Key, change: int) -> None:
        self.parked_in[pool] += change
        metrics.KEY_WAITING.labels(*pool).set(max(self.parked_in[pool], 0))
        if self.parked_in[pool] <= 0:
            del self.parked_in[pool]

    def take_newly_parked(self) -> list[Key]:
        taken, self.newly_parked = self.newly_parked, []
        return taken


class _Queues(dict[Key, Queue]):
    """Pool key → its queue, kept only while the queue holds a task; a read of a pool without one
    finds an empty queue, and keeps nothing."""

    def __missing__(self, pool: Key) -> Queue:
        return Queue()
