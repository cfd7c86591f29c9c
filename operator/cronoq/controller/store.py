"""What the operator has observed, in memory: a record per Task (`TaskRecord`: the object, what
was seen of its attempts, what our writes learnt), the TaskPools, the workers, and the facts of
attempt Jobs' pods and Leases; with the indexes derived from the records. Fed by the watches and
by the responses to our own writes (so a decision never reads an older status than the one it just
wrote). Older versions never replace newer ones; a task leaves by `Store.forget` alone."""
from __future__ import annotations

import sys
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

import orjson
from pydantic import ValidationError

from cronoq.api import Task, TaskPhase, TaskPool
from cronoq.api.task import SPEC_LIMIT
from cronoq.engine import delay, dependencies, keylimits, keys, reasons
from cronoq.engine.admission import submitter_of
from cronoq.engine.attempts import serving_worker
from cronoq.engine.attempts.wording import told
from cronoq.engine.decide import Finished
from cronoq.engine.dependencies import Component
from cronoq.engine.observed import AttemptJob, KueueHold
from cronoq.engine.pools import WorkerTrust
from cronoq.kube.observe import PodFacts, WorkerFacts
from cronoq.pod_protocol import tracecontext

Key = tuple[str, str]  # (namespace, name)
Id = tuple[str, str]
"""(namespace, uid): who a task is. A fact names a task by the uid in its labels, and counts for
that task only when it was seen in the task's own namespace: the same uid on an object of
another namespace names nobody (anyone may write any label on their own objects)."""


def _rv(obj: dict[str, Any]) -> int:
    return _version(obj.get("metadata", {}).get("resourceVersion"))


def _version(rv: str | None) -> int:
    try:
        return int(rv or "0")
    except ValueError:
        return 0


def _slim(raw: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a finished task's object: enough to name it in Events and deletes."""
    meta = raw["metadata"]
    keep = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp")
    slim = {k: meta[k] for k in keep if k in meta}
    traced = (meta.get("annotations") or {}).get(tracecontext.ANNOTATION)
    if traced:  # its dependents' task spans link to its span, in its producer's trace
        slim["annotations"] = {tracecontext.ANNOTATION: traced}
    return {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"), "metadata": slim}


def _refusable(raw: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a task the models cannot read: its metadata and status (to write its
    refusal, a status PUT, which ignores the spec) and its pool; never its (perhaps huge) spec."""
    pool = (raw.get("spec") or {}).get("pool")
    return {**_slim(raw), "spec": {"pool": pool} if isinstance(pool, str) else {},
            **({"status": raw["status"]} if raw.get("status") else {})}


NOTHING: Mapping[Any, Any] = MappingProxyType({})
"""The shared empty default of a record's rarely filled maps: most tasks never fill them, and an
empty dict per map per task costs megabytes over tens of thousands of finished tasks."""


def _nothing() -> Mapping[Any, Any]:
    return NOTHING


@dataclass(slots=True, frozen=True)
class Brief:
    """What is read of a task waiting for its first attempt without reading it whole: its identity
    and what the store's indexes, intake and admission weigh. Such a task is kept as this and its
    object packed (`TaskRecord.packed`), and is read whole again only for a decision about it: a
    backlog of 100,000 queued tasks must not hold 100,000 parsed objects (issue 56)."""

    namespace: str
    name: str
    uid: str
    resource_version: int
    pool: str
    priority: int
    group: str | None
    submitter: str | None
    """Who created it (its cronoq.io/submitter annotation), if recorded."""
    key: str | None
    concurrency_keys: tuple[str, ...]
    """Its concurrency keys (spec.concurrencyKeys)."""
    depends_on: tuple[str, ...]
    cancel: bool
    not_before: datetime | None
    """When the task may start (engine.delay), None when it gives no time."""
    phase: TaskPhase | None
    has_status: bool
    submitted_at: datetime | None = None
    """Its status.submittedAt, once written (which of two tasks naming a concurrency key is newer)."""
    debouncing: bool = False
    """It has no status yet, or its status says Debouncing: for a Debounce concurrency key, it is
    not released yet (engine.keylimits)."""

    def ready(self, now: datetime) -> bool | None:
        """`engine.attempts.is_ready` as far as the brief tells it, without reading the task whole:
        None when only the whole task can say (a Blocked one: by what). A slot granted to a packed
        task is granted on this, so a drain parses each dispatched task once, for its decision."""
        if self.cancel or delay.until(self.not_before, now):
            return False
        if self.phase is None or self.phase is TaskPhase.QUEUED:
            return True
        return None

    @classmethod
    def of(cls, task: Task) -> Brief:
        meta, spec, status = task.metadata, task.spec, task.status
        return cls(namespace=meta.namespace or "", name=meta.name or "", uid=meta.uid or "",
                   resource_version=_version(meta.resource_version),
                   pool=sys.intern(spec.pool), priority=spec.priority,
                   group=sys.intern(spec.group) if spec.group else None,
                   submitter=sys.intern(submitter) if (submitter := submitter_of(task)) else None, key=spec.key,
                   concurrency_keys=tuple(sys.intern(k) for k in spec.concurrency_keys),
                   depends_on=tuple(sys.intern(d.task) for d in spec.depends_on), cancel=bool(spec.cancel),
                   not_before=delay.not_before(task), phase=status.phase if status else None,
                   has_status=status is not None, submitted_at=status.submitted_at if status else None,
                   debouncing=status is None or told(status) == reasons.DEBOUNCING)


@dataclass(slots=True)
class TaskRecord:
    """Everything the operator holds about one task (one uid), in one place: the object as last
    seen, what was seen of its attempts, and what our own writes learnt. The store's indexes are
    derived from it (`Store._index`/`_unindex`), and `Store.forget` drops all of it at once, with
    whatever the slots, the deletion schedule and the work queue keep for the task.

    Three shapes, by how much a decision needs: a task that has started an attempt is kept parsed
    (`parsed`, with its object in `kept`); a task waiting for its first attempt is kept packed
    (`packed`, its `brief` beside it) and parsed again for each decision; a finished one as its
    `finished` facts and its metadata."""

    kept: dict[str, Any] | None
    """The object as last seen (only its metadata once the task has finished); None when packed."""
    parsed: Task | None
    """The parsed task while it is unfinished and has started an attempt; None once finished (see
    `finished`), when packed (see `task`) or when the models cannot read it (see `error`)."""
    error: str | None
    first_seen: datetime
    finished: Finished | None = None
    packed: bytes | None = None
    """A task waiting for its first attempt: its object as compressed JSON (read by `task`, `raw`)."""
    brief: Brief | None = None
    """A packed task's identity and what is weighed of it before it runs."""
    # What was seen of its attempts, by Job (or attempt Lease) name.
    jobs: dict[str, AttemptJob] = field(default_factory=dict)
    """Its Jobs, as last seen."""
    gone: Mapping[str, AttemptJob] = field(default_factory=_nothing)
    """What is kept of its Jobs seen deleted: attempt number, uid and lease id, as seen while the Job was there
    (a recorded attempt whose Job vanished has ended; a late report from its pod is still recognised
    as stale)."""
    served: Mapping[str, AttemptJob] = field(default_factory=_nothing)
    """The attempt Leases pull workers wrote for it."""
    # What our own writes learnt about it.
    rejected: Mapping[int, str] = field(default_factory=_nothing)
    """attempt → why the API server refused its Job (422); the next decision reads it."""
    refused: Mapping[int, str] = field(default_factory=_nothing)
    """attempt → why the API server refused its Job for now (403: a ResourceQuota)."""
    stale_counted: frozenset[str] = frozenset()
    """uids of its Jobs whose late reports were counted already: each is counted once."""
    original: keys.Holder | None = None
    """A keyed task about to end as a duplicate: its finished original as read over the API (the
    output and message the store does not keep), with the original's uid in `original_uid`."""
    original_uid: str | None = None
    archived: keys.Archived | None = None
    """A keyed task nothing in the cluster holds back, with an archive kept: what the archive
    answered for its key (a finished original deleted from the cluster since, or none)."""
    asking: bool = False
    """It has asked the archive (controller/archive.py `ask`) and waits for the answer."""
    inputs: str | None = None
    """A task with dependencies about to get a Job: their phases and outputs as read over the API
    (`pod_protocol.inputs`, at most 64 KiB), kept while it runs (its retries hand over the same);
    dropped when it finishes. Outputs of finished tasks never change, so one read serves."""

    @property
    def raw(self) -> dict[str, Any]:
        """The object as last seen (a packed task's read again: a copy)."""
        if self.kept is not None:
            return self.kept
        assert self.packed is not None, "a record is kept or packed"
        return unpack(self.packed)

    @property
    def task(self) -> Task | None:
        """The parsed task while it is unfinished and readable (a packed one parsed again: a copy,
        so read it once per decision)."""
        if self.parsed is not None:
            return self.parsed
        return Task.model_validate(unpack(self.packed)) if self.packed is not None else None

    @property
    def uid(self) -> str:
        return self.brief.uid if self.brief is not None else str(self.raw["metadata"]["uid"])

    @property
    def name(self) -> str:
        return self.brief.name if self.brief is not None else str(self.raw["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return self.brief.namespace if self.brief is not None else str(self.raw["metadata"]["namespace"])

    @property
    def resource_version(self) -> int:
        return self.brief.resource_version if self.brief is not None else _rv(self.raw)

    @property
    def pool(self) -> str:
        if self.brief is not None:
            return self.brief.pool
        if self.parsed is not None:
            return self.parsed.spec.pool
        if self.finished is not None:
            return self.finished.pool
        return str((self.raw.get("spec") or {}).get("pool", "default"))

    @property
    def phase(self) -> TaskPhase | None:
        if self.finished is not None:
            return self.finished.phase
        if self.brief is not None:
            return self.brief.phase
        return self.parsed.phase if self.parsed else None

    @property
    def key(self) -> str | None:
        if self.finished is not None:
            return self.finished.key
        if self.brief is not None:
            return self.brief.key
        return self.parsed.spec.key if self.parsed else None

    @property
    def depends_on(self) -> tuple[str, ...]:
        if self.finished is not None:
            return self.finished.depends_on
        if self.brief is not None:
            return self.brief.depends_on
        return tuple(d.task for d in self.parsed.spec.depends_on) if self.parsed else ()

    def weighed(self) -> Brief | None:
        """What admission weighs of an unfinished readable task, however it is kept."""
        if self.brief is not None:
            return self.brief
        return Brief.of(self.parsed) if self.parsed is not None else None

    def take(self, other: TaskRecord) -> None:
        """A newer version of the same task: take its object, keep what was seen of its attempts."""
        self.kept, self.parsed, self.error, self.finished = other.kept, other.parsed, other.error, other.finished
        self.packed, self.brief = other.packed, other.brief
        if self.finished is not None:  # it creates no more Jobs and is nobody's duplicate any more
            self.rejected, self.refused, self.original, self.original_uid = NOTHING, NOTHING, None, None
            self.inputs, self.archived, self.asking = None, None, False


@dataclass(slots=True)
class Unclaimed:
    """Facts naming a task uid the store does not hold (yet): its record takes them when it comes,
    and they go with the object that said them."""

    jobs: dict[str, AttemptJob] = field(default_factory=dict)
    served: Mapping[str, AttemptJob] = field(default_factory=_nothing)


@dataclass
class Store:
    tasks: dict[Key, TaskRecord] = field(default_factory=dict)
    """(namespace, name) → the task's record: the one owner of a task's state."""
    pools: dict[Key, TaskPool] = field(default_factory=dict)
    workers: dict[Key, tuple[WorkerFacts, datetime]] = field(default_factory=dict)
    """(namespace, worker) → its Lease's facts and when we saw its renewTime change, by our clock."""
    unclaimed: dict[Id, Unclaimed] = field(default_factory=dict)
    """(namespace, task uid) → Jobs and attempt Leases naming a task not (or not yet) in `tasks`."""
    # What was seen of Kubernetes objects by (namespace, name): a Job's pod, an attempt's Lease.
    pods: dict[Key, PodFacts] = field(default_factory=dict)
    """(namespace, Job name) → its pod's facts."""
    leases: dict[Key, tuple[str | None, str | None, datetime, str | None]] = field(default_factory=dict)
    """(namespace, Lease name) → (holder, renewTime, when we saw that renewTime first, the task uid it
    names): an attempt's heartbeat Lease, a Job's or a worker's."""
    checkpoints: dict[Key, tuple[str | None, str]] = field(default_factory=dict)
    """(namespace, Lease name) → (holder, checkpoint): the checkpoint an attempt's Lease carries
    (only Leases that carry one have an entry; the engine decides whose counts)."""
    running_seen: dict[Key, datetime] = field(default_factory=dict)
    kueue_stops: dict[Key, tuple[str, str]] = field(default_factory=dict)
    """(namespace, Job) → (reason, message) of the Kueue eviction that stopped the Job (its Workload, read once)."""
    kueue_holds: dict[Key, tuple[KueueHold, datetime]] = field(default_factory=dict)
    """(namespace, Job) → what Kueue said of the Job it holds, and when we looked (a plan's `look_kueue`)."""
    """(namespace, Job name) → when we first saw its task container running."""
    ended_seen: dict[Key, datetime] = field(default_factory=dict)
    """(namespace, Job name) → when we first saw its task container terminated."""
    # Indexes, derived from the records by `_index`/`_unindex` (and by the Jobs they hold).
    by_id: dict[Id, Key] = field(default_factory=dict)
    """(namespace, task uid) → its key."""
    job_owner: dict[Key, tuple[str, str]] = field(default_factory=dict)
    """(namespace, Job name) → (uid, name) of its task."""
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
    by_concurrency_key: dict[Key, set[str]] = field(default_factory=lambda: defaultdict(set))
    """(namespace, concurrency key) → names of the unfinished tasks naming it."""
    fresh: dict[Key, set[Key]] = field(default_factory=lambda: defaultdict(set))
    """(namespace, pool) → new tasks (no status yet) that nothing but a slot holds back (no key,
    no dependencies): admission weighs them even before their first reconcile."""
    by_worker: dict[Key, set[str]] = field(default_factory=lambda: defaultdict(set))
    """(namespace, worker) → running tasks whose open attempt it serves (its load)."""
    handing: dict[Key, Key] = field(default_factory=dict)
    """task → (namespace, worker) it is being handed to, while the status that says so is written."""
    # Memo of the dependency cycle checks (engine.dependencies).
    settled: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """namespace → tasks that can never be on a dependency cycle (engine.dependencies): the cycle
    check stops there. Specs are immutable, so this holds until a task of the namespace is deleted."""
    cycles: dict[Key, Component] = field(default_factory=dict)
    """(namespace, task) → the tasks it shares dependency cycles with."""
    cycle_checked: dict[Key, str] = field(default_factory=dict)
    """(namespace, task) → uid of the task whose cycle check ended (each task is checked once)."""
    worker_trust: WorkerTrust = WorkerTrust.UNGUARDED
    """Whether workers' Leases may be believed at all (fail closed until the lease guard is seen)."""
    forgetters: list[Callable[[Key], None]] = field(default_factory=list)
    """What else keeps state by task (slots, the deletion schedule, the work queue's timers): told
    by `forget`, the one way a task leaves."""

    # ------------------------------------------------------------------ tasks

    def put_task(self, raw: dict[str, Any], now: datetime) -> TaskRecord | None:
        """Store a Task unless an equal or newer version is already stored; return its record.
        A task of another uid under the name replaces the old one: forget, then put.
        managedFields are dropped: they are most of an object's size, cronoq never reads them,
        and a status PUT without them leaves the server's copy as it is."""
        meta = raw["metadata"]
        meta.pop("managedFields", None)
        key = (meta["namespace"], meta["name"])
        old = self.tasks.get(key)
        if old is not None and old.uid == meta["uid"] and old.resource_version >= _rv(raw):
            return None
        if old is not None and old.uid != meta["uid"]:  # the old task went while we were not watching
            self.forget(key)
            old = None
        new = _record(raw, old.first_seen if old is not None else now)
        if old is None:
            claimed = self.unclaimed.pop((key[0], new.uid), None)
            if claimed is not None:
                new.jobs, new.served = claimed.jobs, claimed.served
            self.tasks[key] = new
            self.by_id[(key[0], new.uid)] = key
            self._index(key, new)
            return new
        self._unindex(key, old)
        old.take(new)
        self._index(key, old)
        if old.finished is not None:  # its checkpoint is recorded: what its Leases said is not kept
            for lease in (*old.jobs, *old.served):
                self.checkpoints.pop((key[0], lease), None)
        return old

    def _index(self, key: Key, record: TaskRecord) -> None:
        pool = (key[0], record.pool)
        self.in_pool[pool].add(key[1])
        if record.phase is not None:
            self.phases[pool][record.phase] += 1
        if record.phase is TaskPhase.RUNNING:
            self.running[pool].add(key)
            if (worker := _serving(record)) is not None:
                self.by_worker[(key[0], worker)].add(key[1])
        brief = record.weighed()
        if brief is not None and not (brief.has_status or brief.key or brief.depends_on or brief.cancel):
            self.fresh[pool].add(key)
        for held in brief.concurrency_keys if brief is not None else ():
            self.by_concurrency_key[(key[0], held)].add(key[1])
        if record.key:
            self.keyed[(key[0], record.pool, record.key)].add(key[1])
        for dep in record.depends_on:
            self.dependents[(key[0], dep)].add(key[1])

    def _unindex(self, key: Key, record: TaskRecord) -> None:
        pool = (key[0], record.pool)
        _discard(self.in_pool, pool, key[1])
        if record.phase is not None:
            counts = self.phases[pool]
            counts[record.phase] -= 1
            if not counts[record.phase]:
                del counts[record.phase]
                if not counts:  # like the other indexes: no pool kept that no task names
                    del self.phases[pool]
        _discard(self.running, pool, key)
        if record.phase is TaskPhase.RUNNING and (worker := _serving(record)) is not None:
            _discard(self.by_worker, (key[0], worker), key[1])
        _discard(self.fresh, pool, key)
        brief = record.weighed()
        for held in brief.concurrency_keys if brief is not None else ():
            _discard(self.by_concurrency_key, (key[0], held), key[1])
        if record.key:
            _discard(self.keyed, (key[0], record.pool, record.key), key[1])
        for dep in record.depends_on:
            _discard(self.dependents, (key[0], dep), key[1])

    def debouncing(self, key: Key) -> bool | None:
        """Whether the task is not released from debouncing yet (None: gone, finished or unreadable)."""
        record = self.tasks.get(key)
        brief = record.weighed() if record is not None else None
        return brief.debouncing if brief is not None else None

    def superseded_peers(self, namespace: str, keys: Iterable[str]) -> set[str]:
        """The unfinished tasks naming those of `keys` whose policy supersedes (a newer task ends
        older ones, or a Debounce key): what a new task, or one released from debouncing, may
        end or hold (O(those tasks))."""
        limits = keylimits.Limits.of_pools(p.spec for k, p in self.pools.items() if k[0] == namespace)
        return {name for held in keys if limits.supersedes(held)
                for name in self.by_concurrency_key.get((namespace, held), ())}

    def related(self, namespace: str, name: str) -> set[str]:
        """Tasks whose gate may change when this one does: its dependents and its key's holders; and
        its finished dependencies, kept while it is unfinished (gather `awaited`)."""
        names = set(self.dependents.get((namespace, name), ()))
        record = self.tasks.get((namespace, name))
        if record is not None and record.key:
            names |= self.keyed.get((namespace, record.pool, record.key), set())
        if record is not None:
            names.update(d for d in record.depends_on
                         if (dep := self.tasks.get((namespace, d))) is not None and dep.finished is not None)
        names.discard(name)
        return names

    def forget(self, key: Key) -> TaskRecord | None:
        """The task left (deleted, or replaced by another of its name): drop its record, what its
        indexes and its Jobs' facts hold, and tell every `forgetter`. Returns the record dropped."""
        record = self.tasks.pop(key, None)
        if record is not None:
            self._unindex(key, record)
            self.by_id.pop((key[0], record.uid), None)
            self.handing.pop(key, None)
            for job in (*record.jobs, *record.gone):
                self._drop_seen(key[0], job)
                self.job_owner.pop((key[0], job), None)
            for lease in record.served:
                self.leases.pop((key[0], lease), None)
                self.checkpoints.pop((key[0], lease), None)
        self._forget_cycles(key)
        for forgetter in self.forgetters:
            forgetter(key)
        return record

    def _drop_seen(self, namespace: str, job: str) -> None:
        """What was seen of a Job's pod and heartbeat Lease."""
        for seen in (self.pods, self.running_seen, self.ended_seen, self.leases, self.checkpoints, self.kueue_stops,
                     self.kueue_holds):
            seen.pop((namespace, job), None)

    def _forget_cycles(self, key: Key) -> None:
        """A task went (or came back as another): what the cycle checks of its namespace settled
        may no longer hold."""
        self.settled.pop(key[0], None)
        self.cycles.pop(key, None)
        self.cycle_checked.pop(key, None)

    def cycle_of(self, record: TaskRecord) -> tuple[str, ...] | None:
        """The dependency cycle `record` is on, if any. Its check runs once (specs are immutable),
        iteratively and within a budget, and stops at tasks earlier checks settled; a cycle is
        found by the check of whichever of its tasks came last."""
        namespace = record.namespace
        key = (namespace, record.name)
        if key not in self.cycles and self.cycle_checked.get(key) != record.uid:
            def depends_on(name: str) -> tuple[str, ...] | None:
                dep = self.tasks.get((namespace, name))
                return None if dep is None else dep.depends_on

            settled = self.settled[namespace]
            search = dependencies.search_cycles(record.name, depends_on, settled)
            settled |= search.settled
            self.cycles.update(((namespace, member), found) for member, found in search.cycles.items())
            if search.complete:
                self.cycle_checked[key] = record.uid
        found = self.cycles.get(key)
        return found.cycle_through(record.name) if found is not None else None

    def tasks_in_pool(self, namespace: str, pool: str) -> list[TaskRecord]:
        return [self.tasks[(namespace, name)] for name in self.in_pool.get((namespace, pool), ())]

    def _holder_of(self, namespace: str, uid: str) -> TaskRecord | Unclaimed:
        """Where facts seen in `namespace` naming task `uid` go: its record when the task is of that
        namespace, else the unclaimed ones of (namespace, uid) until such a task comes (never)."""
        key = self.by_id.get((namespace, uid))
        if key is not None:
            return self.tasks[key]
        return self.unclaimed.setdefault((namespace, uid), Unclaimed())

    # ------------------------------------------------------------------ jobs and pods

    def put_job(self, namespace: str, task_uid: str, task: str, facts: AttemptJob) -> bool:
        """Record a Job of task `task_uid`; True when what is known of it changed."""
        jobs = self._holder_of(namespace, task_uid).jobs
        self.job_owner[(namespace, facts.name)] = (task_uid, task)
        if jobs.get(facts.name) == facts:
            return False
        jobs[facts.name] = facts
        return True

    def job_keys(self) -> list[Key]:
        """(namespace, name) of the Jobs held as present (not seen deleted)."""
        return [k for k, (uid, _) in self.job_owner.items() if k[1] in self._jobs_of(k[0], uid)]

    def _jobs_of(self, namespace: str, uid: str) -> dict[str, AttemptJob]:
        key = self.by_id.get((namespace, uid))
        if key is not None:
            return self.tasks[key].jobs
        claimed = self.unclaimed.get((namespace, uid))
        return claimed.jobs if claimed is not None else {}

    def job_seen(self, namespace: str, name: str) -> AttemptJob | None:
        """What was last seen of the Job `name` of `namespace`, while it is there."""
        uid, _ = self.job_owner.get((namespace, name), (None, None))
        return self._jobs_of(namespace, uid).get(name) if uid is not None else None

    def may_run(self, namespace: str, job: str) -> bool:
        """Whether the Job's task container may still be running: the Job is still there and its
        pod has not reported its container ended. (Jobs are deleted in the foreground, so an
        aborted Job stays until its pod is gone.)"""
        seen = self.job_seen(namespace, job)
        if seen is None:
            return False
        pod = self.pod_of(namespace, seen)
        return pod is None or (pod.termination is None and pod.phase not in ("Succeeded", "Failed"))

    def drop_job(self, namespace: str, name: str) -> str | None:
        """A Job went: a known task keeps what is needed to recognise its late reports (its pod's
        last state stays: it may still report); a Job nobody claimed leaves nothing. Returns the
        name of its task."""
        owner = self.job_owner.get((namespace, name))
        if owner is None:
            return None
        uid, task = owner
        key = self.by_id.get((namespace, uid))
        if key is None:
            claimed = self.unclaimed.get((namespace, uid))
            if claimed is not None:
                claimed.jobs.pop(name, None)
                if not (claimed.jobs or claimed.served):
                    del self.unclaimed[(namespace, uid)]
            del self.job_owner[(namespace, name)]
            self._drop_seen(namespace, name)
            return task
        record = self.tasks[key]
        facts = record.jobs.pop(name, None)
        if facts is not None:
            record.gone = {**record.gone, name: AttemptJob(number=facts.number, name=name, uid=facts.uid,
                                                           lease_id=facts.lease_id, gone=True)}
        return task

    def put_pod(self, namespace: str, facts: PodFacts, now: datetime) -> bool:
        """Record a Job's pod; True when what is known of it changed. A pod that another object than
        the Job seen under its name controls is not that Job's pod: it changes nothing (and does
        not push the real pod's facts out)."""
        seen = self.job_seen(namespace, facts.job)
        if seen is not None and seen.uid and facts.job_uid != seen.uid:
            return False
        if self.pods.get((namespace, facts.job)) == facts:
            return False
        self.pods[(namespace, facts.job)] = facts
        if facts.termination is not None:
            self.ended_seen.setdefault((namespace, facts.job), now)
        elif facts.started_at is not None:
            self.running_seen.setdefault((namespace, facts.job), now)
        return True

    def put_lease(self, namespace: str, name: str, holder: str | None, renewed: str | None, now: datetime,
                  task_uid: str | None = None) -> bool:
        """Record a heartbeat Lease; True when it was renewed (or first seen) just now."""
        old = self.leases.get((namespace, name))
        if old is not None and old[:2] == (holder, renewed) and old[3] == task_uid:
            return False
        self.leases[(namespace, name)] = (holder, renewed, now, task_uid)
        return True

    def put_checkpoint(self, namespace: str, name: str, holder: str | None, checkpoint: str | None) -> bool:
        """Record the checkpoint an attempt's Lease carries (None: none); True when that changed."""
        key = (namespace, name)
        if checkpoint is None:
            return self.checkpoints.pop(key, None) is not None
        if self.checkpoints.get(key) == (holder, checkpoint):
            return False
        self.checkpoints[key] = (holder, checkpoint)
        return True

    def drop_lease(self, namespace: str, name: str) -> None:
        """A Lease went: what it said goes with it (a Lease naming a task we do not know, or never
        will, costs nothing once it is deleted)."""
        self.checkpoints.pop((namespace, name), None)
        old = self.leases.pop((namespace, name), None)
        uid = old[3] if old is not None else None
        if not uid:
            return
        key = self.by_id.get((namespace, uid))
        holder = self.tasks[key] if key is not None else self.unclaimed.get((namespace, uid))
        if holder is not None and name in holder.served:
            holder.served = {k: v for k, v in holder.served.items() if k != name} or NOTHING
        claimed = self.unclaimed.get((namespace, uid)) if key is None else None
        if claimed is not None:
            if not (claimed.jobs or claimed.served):
                del self.unclaimed[(namespace, uid)]

    def pod_of(self, namespace: str, job: AttemptJob) -> PodFacts | None:
        """What was seen of the Job's own pod: one its Job (by uid) controls, none other."""
        pod = self.pods.get((namespace, job.name))
        return pod if pod is not None and job.uid and pod.job_uid == job.uid else None

    def _seen(self, namespace: str, task_uid: str, job: AttemptJob, live: bool = True) -> AttemptJob:
        """A Job's facts with what was seen of its pod and (`live`) when, by our clock, its task
        container was seen running, ended, and its heartbeat Lease renewed. Only the Job's own pod
        and a Lease of the task's own namespace that names the task's uid and is held by the
        attempt's lease id speak for the attempt."""
        key = (namespace, job.name)
        job = with_pod(job, self.pod_of(namespace, job))
        if not live:
            return job
        lease = self.leases.get(key)
        held = lease is not None and job.lease_id is not None and lease[0] == job.lease_id and lease[3] == task_uid
        renewed = lease[2] if held and lease is not None and lease[1] else None
        saved = self.checkpoints.get(key)
        looked = self.kueue_holds.get(key) if job.held_by_kueue else None
        checkpoint = saved[1] if held and saved is not None and saved[0] == job.lease_id else None
        return replace(job, running_seen_at=self.running_seen.get(key), ended_seen_at=self.ended_seen.get(key),
                       kueue_stop=self.kueue_stops.get(key) if job.stopped_by_kueue else None,
                       kueue_hold=looked[0] if looked is not None else None,
                       kueue_looked_at=looked[1] if looked is not None else None,
                       renewed_seen_at=renewed, checkpoint=checkpoint)

    def attempt_jobs(self, record: TaskRecord) -> list[AttemptJob]:
        """The task's Jobs with their pods folded in, plus the ones seen deleted (as `gone`), and
        the attempt Leases pull workers wrote for it."""
        namespace, uid = record.namespace, record.uid
        seen = [self._seen(namespace, uid, j) for j in (*record.jobs.values(), *record.served.values())]
        present = {j.name for j in seen}
        seen += [self._seen(namespace, uid, gone, live=False) for name, gone in record.gone.items()
                 if name not in present]
        return seen

    # ------------------------------------------------------------------ pull workers

    def put_served(self, namespace: str, task_uid: str, facts: AttemptJob) -> bool:
        """Record what a worker's attempt Lease of `namespace` says; True when that changed."""
        holder = self._holder_of(namespace, task_uid)
        if holder.served.get(facts.name) == facts:
            return False
        holder.served = {**holder.served, facts.name: facts}
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

    def hold(self, key: Key, worker: str) -> None:
        """Task `key` is being handed to `worker`: its room is held until `handed(key)`, so two tasks
        decided while the first one's status is written never count the same free place twice."""
        self.handing[key] = (key[0], worker)

    def handed(self, key: Key) -> None:
        """The status naming the task's worker was written (its load now counts it), or not."""
        self.handing.pop(key, None)


def with_pod(job: AttemptJob, pod: PodFacts | None) -> AttemptJob:
    """The Job's facts with its pod's folded in."""
    if pod is None:
        return job
    waiting_reason, waiting_message = pod.waiting or (None, None)
    return replace(job, pod_phase=pod.phase, pod_reason=pod.reason, pod_message=pod.message,
                   disruption=pod.disruption, started_at=pod.started_at, termination=pod.termination,
                   waiting_reason=waiting_reason, waiting_message=waiting_message)


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""`kubectl apply`'s copy of the whole manifest, spec included: never read, so never kept (a status
PUT ignores the metadata it carries)."""


def _record(raw: dict[str, Any], first_seen: datetime) -> TaskRecord:
    """A record of the object, kept no bigger than the decisions on it need: an unfinished task's
    spec at most SPEC_LIMIT bytes, packed while it waits for its first attempt; a finished task's
    metadata only."""
    annotations = raw["metadata"].get("annotations")
    if annotations and LAST_APPLIED in annotations:
        raw["metadata"]["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    try:
        task, error = Task.model_validate(raw), None
    except ValidationError as err:
        task, error = None, _validation_message(err)
    if task is not None and not (task.phase is not None and task.phase.terminal):
        size = len(orjson.dumps(raw.get("spec") or {}))
        if size > SPEC_LIMIT:  # each field within its bound, all of them together not
            task, error = None, (f"spec is {size} bytes of JSON, more than {SPEC_LIMIT} (the operator keeps each "
                                 "unfinished task's spec in memory): move data to the payload or a ConfigMap")
    if task is not None and task.phase is not None and task.phase.terminal:
        return TaskRecord(kept=_slim(raw), parsed=None, error=None, first_seen=first_seen, finished=Finished.of(task))
    if task is None:  # unreadable (e.g. oversized): kept no bigger than what its refusal needs
        return TaskRecord(kept=_refusable(raw), parsed=None, error=error, first_seen=first_seen)
    if task.status is None or task.status.attempt == 0:  # waiting for its first attempt
        return TaskRecord(kept=None, parsed=None, error=None, first_seen=first_seen,
                          packed=zlib.compress(orjson.dumps(raw), PACKING), brief=Brief.of(task))
    return TaskRecord(kept=raw, parsed=task, error=error, first_seen=first_seen)


PACKING = 1
"""zlib's level for a waiting task's object: its fastest, which already takes a spec of env and args
to a third or less of its JSON."""


def unpack(packed: bytes) -> dict[str, Any]:
    """A packed task's object, read again."""
    loaded: dict[str, Any] = orjson.loads(zlib.decompress(packed))
    return loaded


def _discard(index: dict[Any, set[Any]], at: Any, item: Any) -> None:
    """Take `item` out of the index's set at `at`, and the set once empty (an index holds no more
    keys than there are records)."""
    members = index.get(at)
    if members is not None:
        members.discard(item)
        if not members:
            del index[at]


def _serving(record: TaskRecord) -> str | None:
    """The worker serving the running task's open attempt, if a worker does."""
    status = record.parsed.status if record.parsed is not None else None
    return serving_worker(status) if status is not None else None


def _validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e["loc"])
        parts.append(f"{where}: {e['msg']}" if where else e["msg"])
    return "; ".join(parts)
