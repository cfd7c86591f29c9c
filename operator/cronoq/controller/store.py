"""What the operator has observed, in memory: Tasks, TaskPools, and the facts of attempt Jobs
and pods. Fed by the watches and by the responses to our own writes (so a decision never reads
an older status than the one it just wrote). Older versions never replace newer ones."""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from cronoq.api import Task, TaskPhase, TaskPool
from cronoq.engine import dependencies
from cronoq.engine.attempts import serving_worker
from cronoq.engine.dependencies import Component
from cronoq.engine.observed import AttemptJob
from cronoq.engine.pools import WorkerTrust
from cronoq.kube.observe import PodFacts, WorkerFacts, combine

Key = tuple[str, str]  # (namespace, name)


def _rv(obj: dict[str, Any]) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion", "0"))
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class Mark:
    """An attempt of a finished task, as much as judging its leftover Jobs needs."""

    number: int
    lease_id: str | None
    reason: str | None
    worker: str | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """A finished task, reduced to what the operator still decides on: keys, dependents, its
    leftover Jobs and when to delete it. Its output and messages stay in the API server (read
    when a duplicate needs them), so the store grows by a small record per kept task, not by its body."""

    phase: TaskPhase
    pool: str
    created_at: datetime | None
    finished_at: datetime | None
    attempt: int = 0
    marks: tuple[Mark, ...] = ()
    key: str | None = None
    depends_on: tuple[str, ...] = ()
    duplicate_of: str | None = None
    output_available: bool = False
    ttl_after_finished: timedelta | None = None
    """The task's own ttlAfterFinished (None: its pool's)."""
    job_retention: timedelta | None = None
    """The task's own jobRetention (None: its pool's)."""

    @classmethod
    def of(cls, task: Task) -> Finished:
        status, spec = task.status, task.spec
        assert status is not None and status.phase is not None, "only a finished task (it has a phase)"
        return cls(phase=status.phase, pool=spec.pool, created_at=task.metadata.creation_timestamp,
                   finished_at=status.finished_at, attempt=status.attempt,
                   marks=tuple(Mark(a.number, a.lease_id, a.reason, a.worker) for a in status.attempts),
                   key=spec.key, depends_on=tuple(d.task for d in spec.depends_on),
                   duplicate_of=status.duplicate_of, output_available=status.output_available,
                   ttl_after_finished=spec.ttl_after_finished, job_retention=spec.job_retention)


def _slim(raw: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a finished task's object: enough to name it in Events and deletes."""
    meta = raw["metadata"]
    keep = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp")
    return {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"),
            "metadata": {k: meta[k] for k in keep if k in meta}}


def _refusable(raw: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a task the models cannot read: its metadata and status (to write its
    refusal, a status PUT, which ignores the spec) and its pool; never its (perhaps huge) spec."""
    pool = (raw.get("spec") or {}).get("pool")
    return {**_slim(raw), "spec": {"pool": pool} if isinstance(pool, str) else {},
            **({"status": raw["status"]} if raw.get("status") else {})}


@dataclass(slots=True)
class TaskEntry:
    raw: dict[str, Any]
    """The object as last seen; only its metadata once the task has finished."""
    task: Task | None
    """The parsed task while it is unfinished; None once finished (see `finished`) or when the
    models cannot read it (see `error`)."""
    error: str | None
    first_seen: datetime
    finished: Finished | None = None

    @property
    def uid(self) -> str:
        return str(self.raw["metadata"]["uid"])

    @property
    def name(self) -> str:
        return str(self.raw["metadata"]["name"])

    @property
    def pool(self) -> str:
        if self.task is not None:
            return self.task.spec.pool
        if self.finished is not None:
            return self.finished.pool
        return str((self.raw.get("spec") or {}).get("pool", "default"))

    @property
    def phase(self) -> TaskPhase | None:
        if self.finished is not None:
            return self.finished.phase
        return self.task.phase if self.task else None

    @property
    def key(self) -> str | None:
        return self.finished.key if self.finished is not None else (self.task.spec.key if self.task else None)

    @property
    def depends_on(self) -> tuple[str, ...]:
        if self.finished is not None:
            return self.finished.depends_on
        return tuple(d.task for d in self.task.spec.depends_on) if self.task else ()


@dataclass
class Store:
    tasks: dict[Key, TaskEntry] = field(default_factory=dict)
    pools: dict[Key, TaskPool] = field(default_factory=dict)
    jobs: dict[str, dict[str, AttemptJob]] = field(default_factory=lambda: defaultdict(dict))
    """task uid → Job name → facts."""
    pods: dict[Key, PodFacts] = field(default_factory=dict)
    """(namespace, Job name) → its pod's facts."""
    gone: dict[str, dict[str, AttemptJob]] = field(default_factory=lambda: defaultdict(dict))
    """task uid → Job name → what is kept of its Jobs seen deleted: attempt number and uid, as seen
    while the Job was there (a recorded attempt whose Job vanished has ended; a late report from its
    pod is still recognised as stale)."""
    in_pool: dict[Key, set[str]] = field(default_factory=lambda: defaultdict(set))
    """(namespace, pool) → names of its tasks."""
    phases: dict[Key, Counter[TaskPhase]] = field(default_factory=lambda: defaultdict(Counter))
    """(namespace, pool) → how many of its tasks are in each phase (kept as tasks change, so
    pool status never scans every task)."""
    running: dict[Key, set[Key]] = field(default_factory=lambda: defaultdict(set))
    """(namespace, pool) → tasks whose stored phase is Running."""
    keyed: dict[tuple[str, str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    """(namespace, pool, key) → names of the tasks holding that idempotency key."""
    dependents: dict[Key, set[str]] = field(default_factory=lambda: defaultdict(set))
    """(namespace, task) → names of the tasks whose dependsOn names it."""
    fresh: dict[Key, set[Key]] = field(default_factory=lambda: defaultdict(set))
    """(namespace, pool) → new tasks (no status yet) that nothing but a slot holds back (no key,
    no dependencies): admission weighs them even before their first reconcile."""
    leases: dict[Key, tuple[str | None, str | None, datetime, str | None]] = field(default_factory=dict)
    """(namespace, Lease name) → (holder, renewTime, when we saw that renewTime first, the task uid it
    names): an attempt's heartbeat Lease, a Job's or a worker's."""
    running_seen: dict[Key, datetime] = field(default_factory=dict)
    """(namespace, Job name) → when we first saw its task container running."""
    job_owner: dict[Key, tuple[str, str]] = field(default_factory=dict)
    """(namespace, Job name) → (uid, name) of its task."""
    ended_seen: dict[Key, datetime] = field(default_factory=dict)
    """(namespace, Job name) → when we first saw its task container terminated."""
    settled: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """namespace → tasks that can never be on a dependency cycle (engine.dependencies): the cycle
    check stops there. Specs are immutable, so this holds until a task of the namespace is deleted."""
    cycles: dict[Key, Component] = field(default_factory=dict)
    """(namespace, task) → the tasks it shares dependency cycles with."""
    cycle_checked: dict[Key, str] = field(default_factory=dict)
    """(namespace, task) → uid of the task whose cycle check ended (each task is checked once)."""
    served: dict[str, dict[str, AttemptJob]] = field(default_factory=lambda: defaultdict(dict))
    """task uid → attempt Lease name → facts, of the attempts pull workers served (their Leases)."""
    workers: dict[Key, tuple[WorkerFacts, datetime]] = field(default_factory=dict)
    """(namespace, worker) → its Lease's facts and when we saw its renewTime change, by our clock."""
    by_worker: dict[Key, set[str]] = field(default_factory=lambda: defaultdict(set))
    """(namespace, worker) → running tasks whose open attempt it serves (its load)."""
    handing: dict[Key, Key] = field(default_factory=dict)
    """task → (namespace, worker) it is being handed to, while the status that says so is written."""
    # What our own writes learnt about a task, kept here so that forgetting the task forgets it too.
    rejected: dict[str, dict[int, str]] = field(default_factory=dict)
    """task uid → attempt → why the API server refused its Job (422); the next decision reads it."""
    refused: dict[str, dict[int, str]] = field(default_factory=dict)
    """task uid → attempt → why the API server refused its Job for now (403: a ResourceQuota)."""
    stale_counted: dict[str, set[str]] = field(default_factory=dict)
    """task uid → uids of its Jobs whose late reports were counted already: each is counted once."""
    worker_trust: WorkerTrust = WorkerTrust.UNGUARDED
    """Whether workers' Leases may be believed at all (fail closed until the lease guard is seen)."""

    # ------------------------------------------------------------------ tasks

    def put_task(self, raw: dict[str, Any], now: datetime) -> TaskEntry | None:
        """Store a Task unless an equal or newer version is already stored; return the entry.
        managedFields are dropped: they are most of an object's size, cronoq never reads them,
        and a status PUT without them leaves the server's copy as it is."""
        meta = raw["metadata"]
        meta.pop("managedFields", None)
        key = (meta["namespace"], meta["name"])
        old = self.tasks.get(key)
        if old is not None and old.uid == meta["uid"] and _rv(old.raw) >= _rv(raw):
            return None
        try:
            task, error = Task.model_validate(raw), None
        except ValidationError as err:
            task, error = None, _validation_message(err)
        first_seen = old.first_seen if old is not None and old.uid == meta["uid"] else now
        if task is not None and task.phase is not None and task.phase.terminal:
            entry = TaskEntry(raw=_slim(raw), task=None, error=None, first_seen=first_seen, finished=Finished.of(task))
        elif task is None:  # unreadable (e.g. oversized): kept no bigger than what its refusal needs
            entry = TaskEntry(raw=_refusable(raw), task=None, error=error, first_seen=first_seen)
        else:
            entry = TaskEntry(raw=raw, task=task, error=error, first_seen=first_seen)
        if old is not None:
            self._unindex(key, old)
            if old.uid != entry.uid:  # the old task went while we were not watching
                self._forget_cycles(key)
                self._forget_writes(old.uid)
                self._forget_attempts(key[0], old.uid)
        self.tasks[key] = entry
        self._index(key, entry)
        return entry

    def _index(self, key: Key, entry: TaskEntry) -> None:
        pool = (key[0], entry.pool)
        self.in_pool[pool].add(key[1])
        if entry.phase is not None:
            self.phases[pool][entry.phase] += 1
        if entry.phase is TaskPhase.RUNNING:
            self.running[(key[0], entry.pool)].add(key)
            if (worker := _serving(entry)) is not None:
                self.by_worker[(key[0], worker)].add(key[1])
        task = entry.task
        if task is not None and task.status is None and not (task.spec.key or task.spec.depends_on or task.spec.cancel):
            self.fresh[(key[0], entry.pool)].add(key)
        if entry.key:
            self.keyed[(key[0], entry.pool, entry.key)].add(key[1])
        for dep in entry.depends_on:
            self.dependents[(key[0], dep)].add(key[1])

    def _unindex(self, key: Key, entry: TaskEntry) -> None:
        pool = (key[0], entry.pool)
        self.in_pool[pool].discard(key[1])
        if entry.phase is not None:
            self.phases[pool][entry.phase] -= 1
        self.running[(key[0], entry.pool)].discard(key)
        if (worker := _serving(entry)) is not None:
            serving = self.by_worker.get((key[0], worker))
            if serving is not None:
                serving.discard(key[1])
                if not serving:
                    del self.by_worker[(key[0], worker)]
        self.fresh[(key[0], entry.pool)].discard(key)
        if entry.key:
            self.keyed[(key[0], entry.pool, entry.key)].discard(key[1])
        for dep in entry.depends_on:
            self.dependents[(key[0], dep)].discard(key[1])

    def related(self, namespace: str, name: str) -> set[str]:
        """Tasks whose gate may change when this one does: its dependents and its key's holders."""
        names = set(self.dependents.get((namespace, name), ()))
        entry = self.tasks.get((namespace, name))
        if entry is not None and entry.key:
            names |= self.keyed.get((namespace, entry.pool, entry.key), set())
        names.discard(name)
        return names

    def drop_task(self, namespace: str, name: str) -> TaskEntry | None:
        entry = self.tasks.pop((namespace, name), None)
        if entry is not None:
            self._unindex((namespace, name), entry)
            self._forget_cycles((namespace, name))
            self._forget_writes(entry.uid)
            self._forget_attempts(namespace, entry.uid)
        return entry

    def _forget_attempts(self, namespace: str, uid: str) -> None:
        """What was seen of a task's attempts: its Jobs, their pods and Leases, its workers' Leases."""
        for lease in self.served.pop(uid, {}):
            self.leases.pop((namespace, lease), None)
        for job in (*self.jobs.pop(uid, {}), *self.gone.pop(uid, {})):
            self.pods.pop((namespace, job), None)
            self.running_seen.pop((namespace, job), None)
            self.ended_seen.pop((namespace, job), None)
            self.job_owner.pop((namespace, job), None)
            self.leases.pop((namespace, job), None)

    def forget_refusals(self, uid: str) -> None:
        """The task creates no more Jobs (it finished): what the API server said of them is done with."""
        self.rejected.pop(uid, None)
        self.refused.pop(uid, None)

    def _forget_writes(self, uid: str) -> None:
        self.forget_refusals(uid)
        self.stale_counted.pop(uid, None)

    def _forget_cycles(self, key: Key) -> None:
        """A task went (or came back as another): what the cycle checks of its namespace settled
        may no longer hold."""
        self.settled.pop(key[0], None)
        self.cycles.pop(key, None)
        self.cycle_checked.pop(key, None)

    def cycle_of(self, namespace: str, entry: TaskEntry) -> tuple[str, ...] | None:
        """The dependency cycle `entry` is on, if any. Its check runs once (specs are immutable),
        iteratively and within a budget, and stops at tasks earlier checks settled; a cycle is
        found by the check of whichever of its tasks came last."""
        key = (namespace, entry.name)
        if key not in self.cycles and self.cycle_checked.get(key) != entry.uid:
            def depends_on(name: str) -> tuple[str, ...] | None:
                dep = self.tasks.get((namespace, name))
                return None if dep is None else dep.depends_on

            settled = self.settled[namespace]
            search = dependencies.search_cycles(entry.name, depends_on, settled)
            settled |= search.settled
            self.cycles.update(((namespace, member), found) for member, found in search.cycles.items())
            if search.complete:
                self.cycle_checked[key] = entry.uid
        found = self.cycles.get(key)
        return found.cycle_through(entry.name) if found is not None else None

    def tasks_in_pool(self, namespace: str, pool: str) -> list[TaskEntry]:
        return [self.tasks[(namespace, name)] for name in self.in_pool.get((namespace, pool), ())]

    # ------------------------------------------------------------------ jobs and pods

    def put_job(self, namespace: str, task_uid: str, task: str, facts: AttemptJob) -> None:
        self.jobs[task_uid][facts.name] = facts
        self.job_owner[(namespace, facts.name)] = (task_uid, task)

    def job_keys(self) -> list[Key]:
        """(namespace, name) of the Jobs held as present (not seen deleted)."""
        return [k for k, (uid, _) in self.job_owner.items() if k[1] in self.jobs.get(uid, {})]

    def may_run(self, namespace: str, job: str) -> bool:
        """Whether the Job's task container may still be running: the Job is still there and its
        pod has not reported its container ended. (Jobs are deleted in the foreground, so an
        aborted Job stays until its pod is gone.)"""
        uid, _ = self.job_owner.get((namespace, job), (None, None))
        if uid is None or job not in self.jobs.get(uid, {}):
            return False
        pod = self.pods.get((namespace, job))
        return pod is None or (pod.termination is None and pod.phase not in ("Succeeded", "Failed"))

    def drop_job(self, task_uid: str, name: str) -> None:
        facts = self.jobs.get(task_uid, {}).pop(name, None)
        if facts is not None:
            self.gone[task_uid][name] = AttemptJob(number=facts.number, name=name, uid=facts.uid, gone=True)

    def put_pod(self, namespace: str, facts: PodFacts, now: datetime) -> None:
        self.pods[(namespace, facts.job)] = facts
        if facts.termination is not None:
            self.ended_seen.setdefault((namespace, facts.job), now)
        elif facts.started_at is not None:
            self.running_seen.setdefault((namespace, facts.job), now)

    def put_lease(self, namespace: str, name: str, holder: str | None, renewed: str | None, now: datetime,
                  task_uid: str | None = None) -> bool:
        """Record a heartbeat Lease; True when it was renewed (or first seen) just now."""
        old = self.leases.get((namespace, name))
        if old is not None and old[:2] == (holder, renewed) and old[3] == task_uid:
            return False
        self.leases[(namespace, name)] = (holder, renewed, now, task_uid)
        return True

    def drop_lease(self, namespace: str, name: str) -> None:
        """A Lease went: what it said goes with it (a Lease naming a task we do not know, or never
        will, costs nothing once it is deleted)."""
        old = self.leases.pop((namespace, name), None)
        uid = old[3] if old is not None else None
        served = self.served.get(uid) if uid else None
        if uid and served is not None:
            served.pop(name, None)
            if not served:
                del self.served[uid]

    def _liveness(self, namespace: str, job: AttemptJob) -> AttemptJob:
        lease = self.leases.get((namespace, job.name))
        renewed = lease[2] if lease and lease[1] and lease[0] == job.lease_id else None
        return replace(job, running_seen_at=self.running_seen.get((namespace, job.name)),
                       ended_seen_at=self.ended_seen.get((namespace, job.name)), renewed_seen_at=renewed)

    def attempt_jobs(self, entry: TaskEntry) -> list[AttemptJob]:
        """The task's Jobs with their pods folded in, plus the ones seen deleted (as `gone`), and
        the attempt Leases pull workers wrote for it."""
        namespace = entry.raw["metadata"]["namespace"]
        seen = [self._liveness(namespace, combine(j, self.pods.get((namespace, j.name))))
                for j in self.jobs.get(entry.uid, {}).values()]
        seen += [self._liveness(namespace, s) for s in self.served.get(entry.uid, {}).values()]
        present = {j.name for j in seen}
        for name, gone in self.gone.get(entry.uid, {}).items():
            if name not in present:
                seen.append(combine(gone, self.pods.get((namespace, name))))
        return seen


    # ------------------------------------------------------------------ pull workers

    def put_served(self, task_uid: str, facts: AttemptJob) -> bool:
        """Record what a worker's attempt Lease says; True when that changed."""
        served = self.served[task_uid]
        if served.get(facts.name) == facts:
            return False
        served[facts.name] = facts
        return True

    def put_worker(self, namespace: str, facts: WorkerFacts, now: datetime) -> bool:
        """Record a worker's Lease; True when something a decision reads changed. A renewal counts
        from when we saw it, by our clock; a Lease seen for the first time (a restart) from its
        renewTime when that is earlier, so a dead worker's old Lease is not taken for a live one."""
        key = (namespace, facts.name)
        old = self.workers.get(key)
        if old is not None and old[0] == facts:
            return False
        if old is None:
            self.workers[key] = (facts, min(now, facts.renewed_at) if facts.renewed_at is not None else now)
        elif (old[0].holder, old[0].renew_time) != (facts.holder, facts.renew_time):
            self.workers[key] = (facts, now)  # renewed
        else:
            self.workers[key] = (facts, old[1])
        return True

    def drop_worker(self, namespace: str, name: str) -> WorkerFacts | None:
        old = self.workers.pop((namespace, name), None)
        return old[0] if old is not None else None

    def worker_alive_until(self, namespace: str, worker: str) -> datetime | None:
        """Until when `worker` is alive by its Lease, by our clock (None: gone or released): its
        last renewal we saw plus its (capped) duration."""
        held = self.workers.get((namespace, worker))
        if held is None or held[0].holder != worker or not held[0].renew_time:
            return None
        return held[1] + timedelta(seconds=held[0].duration)

    def worker_room(self, pool: Key, now: datetime) -> dict[str, int]:
        """The live workers of a pool → how many more attempts each may take now. A worker's room is
        what its Lease says, never more than its pool's concurrency (a Lease cannot claim a pool)."""
        if self.worker_trust is WorkerTrust.UNGUARDED:
            return {}
        namespace = pool[0]
        found = self.pools.get(pool)
        most = found.spec.concurrency if found is not None else 0
        handing = Counter(self.handing.values())
        room = {}
        for (ns, name), (facts, _) in self.workers.items():
            if ns != namespace or facts.pool != pool[1]:
                continue
            alive = self.worker_alive_until(ns, name)
            if alive is None or alive <= now:
                continue
            room[name] = min(facts.capacity, most) - len(self.by_worker.get((ns, name), ())) - handing[(ns, name)]
        return room

    def hand_to_worker(self, key: Key, pool: Key, now: datetime, *, hold: bool) -> str | None:
        """The live worker of the pool with the most room for task `key`; with `hold`, that room is
        held until `handed(key)`, so two tasks decided at once never count the same free place twice."""
        room = self.worker_room(pool, now)
        best = max(room, key=lambda w: (room[w], w), default=None)
        if best is None or room[best] <= 0:
            return None
        if hold:
            self.handing[key] = (key[0], best)
        return best

    def handed(self, key: Key) -> None:
        """The status naming the task's worker was written (its load now counts it), or not."""
        self.handing.pop(key, None)


def _serving(entry: TaskEntry) -> str | None:
    """The worker serving the running task's open attempt, if a worker does."""
    status = entry.task.status if entry.task is not None else None
    return serving_worker(status) if status is not None else None


def _validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e["loc"])
        parts.append(f"{where}: {e['msg']}" if where else e["msg"])
    return "; ".join(parts)
