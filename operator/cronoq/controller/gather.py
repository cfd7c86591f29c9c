"""Gather: everything one decision about a task reads, taken from the store and the slots at one
moment into one `Observation` (engine.plan), with no read from the API server and no await, so
the decision and the status write that follows it see the same world. The engine decides
(`engine.decide`); controller/apply.py carries the plan out."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cronoq.api import Task, TaskPhase, TaskPoolSpec, TaskStatus
from cronoq.controller.ratelimits import RateLimits
from cronoq.controller.slots import Slots
from cronoq.controller.store import Store, TaskRecord
from cronoq.engine import dependencies, keylimits, keys, reasons
from cronoq.engine.attempts.wording import told
from cronoq.engine.admission import capacity
from cronoq.engine.decide import Live, Subject, Unreadable
from cronoq.engine.jobs import TaskServiceAccount
from cronoq.engine.plan import Observation


@dataclass(frozen=True)
class JobSettings:
    """How this operator builds attempt Jobs (its flags)."""

    sidecar_image: str | None = None
    service_account: TaskServiceAccount = TaskServiceAccount()
    traced: bool = False
    """Tracing is on: each attempt's container gets its span's TRACEPARENT."""


def gather(store: Store, slots: Slots, record: TaskRecord, now: datetime, epoch: int,
           jobs: JobSettings, rate_limits: RateLimits | None = None, *,
           archive: bool = False) -> tuple[Subject, Observation]:
    """The task as the decision sees it, and what it reads around it. `archive`: the operator
    keeps one (a keyed task nothing in the cluster holds back asks it)."""
    namespace = record.namespace
    pool_key = (namespace, record.pool)
    found = store.pools.get(pool_key)
    pool = found.spec if found is not None else None
    task = record.task
    if record.finished is not None or task is None:
        seen = Observation(now=now, epoch=epoch, jobs=store.attempt_jobs(record), pool_found=found is not None,
                           pool=pool, first_seen=record.first_seen, sidecar_image=jobs.sidecar_image,
                           service_account=jobs.service_account, awaited=_awaited(store, record))
        if record.finished is not None:
            return record.finished, seen
        return Unreadable(_stored_status(record), record.error or "", record.raw["metadata"].get("generation")), seen
    status = task.status
    attempt = status.attempt if status else 0
    last = status.attempts[-1] if status and status.attempts else None
    alive_until = room = None
    if last is not None and last.outcome is None and last.worker:  # served by a worker: is it alive?
        alive_until = store.worker_alive_until(namespace, last.worker)
    elif pool is not None and pool.delivery == "Workers":  # where its next attempt could go
        room = store.worker_room(pool_key, now)
    next_start_at = None
    if rate_limits is not None and found is not None and found.spec.rate_limit is not None \
            and slots.free(pool_key, capacity(found.spec)) > 0:
        next_start_at = rate_limits.next_start_at(pool_key, found, now)
    gating = _gating(store, record, task, pool, archive) if attempt == 0 else Gating()
    grant = slots.grants.get((namespace, record.name))
    superseded = _superseded(store, slots, record, task) if task.spec.concurrency_keys else None
    # Once released (its status no longer says Debouncing) a task is not held again: the burst it
    # ended may be gone (superseded) by the time it is looked at next.
    debounce = _debouncing(store, slots, record, task, now) \
        if attempt == 0 and superseded is None and task.spec.concurrency_keys \
        and (status is None or told(status) == reasons.DEBOUNCING) else None
    key_wait = slots.key_wait((namespace, record.name), tuple(task.spec.concurrency_keys),
                              said=status is not None and told(status) == reasons.WAITING_FOR_KEY) \
        if grant is None and task.spec.concurrency_keys else None
    return Live(task), Observation(
        now=now, epoch=epoch, jobs=store.attempt_jobs(record), pool_found=found is not None, pool=pool,
        first_seen=record.first_seen, sidecar_image=jobs.sidecar_image, service_account=jobs.service_account,
        traced=jobs.traced, awaited=_awaited(store, record), admit=grant is not None, pool_name=task.spec.pool,
        admitted_at=grant.at if grant is not None else None, job_rejected=record.rejected.get(attempt),
        job_refused=record.refused.get(attempt), worker_alive_until=alive_until, worker_room=room,
        next_start_at=next_start_at, key_wait=key_wait, superseded=superseded, debounce=debounce, holders=gating.holders, dependencies=gating.dependencies, cycle=gating.cycle,
        inputs=record.inputs if task.spec.depends_on else None)


def _superseded(store: Store, slots: Slots, record: TaskRecord, task: Task) -> keylimits.Superseded | None:
    """Whether a newer task naming a concurrency key of this one ends it (engine.keylimits): the
    arrivals of the namespace's unfinished tasks naming its keys whose policy supersedes."""
    namespace, status = record.namespace, task.status
    limits = slots.limits(namespace)
    keys = [k for k in task.spec.concurrency_keys if limits.supersedes(k)]
    if not keys:
        return None
    # A Debounce key's tasks are superseded only by a newer one released from debouncing.
    peers = {key: _arrivals(store, namespace, key, released=True if keylimits.debounces(key, limits) else None)
             for key in keys}
    mine = ((status.submitted_at if status else None) or record.first_seen, record.name)
    running = status is not None and status.phase is TaskPhase.RUNNING
    return keylimits.superseded(keys, mine, running, peers, limits)


def _debouncing(store: Store, slots: Slots, record: TaskRecord, task: Task,
                now: datetime) -> keylimits.Debouncing | None:
    """Whether a Debounce key of a task that has not started holds it (engine.keylimits): the
    arrivals of the namespace's tasks still debouncing on its Debounce keys."""
    limits = slots.limits(record.namespace)
    keys = [k for k in task.spec.concurrency_keys if keylimits.debounces(k, limits)]
    if not keys:
        return None
    status = task.status
    waiting = {key: _arrivals(store, record.namespace, key, released=False) for key in keys}
    mine = ((status.submitted_at if status else None) or record.first_seen, record.name)
    return keylimits.debouncing(keys, mine, waiting, limits, now)


def _arrivals(store: Store, namespace: str, key: str, released: bool | None = None) -> list[keylimits.Arrival]:
    """The arrivals of the namespace's unfinished tasks naming concurrency key `key` (`released`:
    only those released from debouncing, or only those not; None: all)."""
    found = []
    for name in store.by_concurrency_key.get((namespace, key), ()):
        peer = store.tasks.get((namespace, name))
        brief = peer.weighed() if peer is not None else None
        if peer is not None and brief is not None and (released is None or brief.debouncing != released):
            found.append((brief.submitted_at or peer.first_seen, name))
    return found


@dataclass(frozen=True)
class Gating:
    """What gates a task's first attempt (None: nothing of that kind, or it has started)."""

    holders: keys.KeyHolders | None = None
    """Its key's holders, for a keyed task."""
    dependencies: dict[str, dependencies.DependencyPhase] | None = None
    """Its dependencies' phases, by name."""
    cycle: tuple[str, ...] | None = None
    """The dependency cycle it is on, if any."""


def _gating(store: Store, record: TaskRecord, task: Task, pool: TaskPoolSpec | None, archive: bool) -> Gating:
    """What gates a task's first attempt: its key's other holders, its dependencies' phases."""
    namespace = record.namespace
    holders = None
    if task.spec.key:
        names = store.keyed.get((namespace, record.pool, task.spec.key), ())
        others = tuple(holder(store.tasks[(namespace, n)]) for n in names
                       if n != record.name and (namespace, n) in store.tasks)
        original = record.original
        read = store.tasks.get((namespace, original.name)) if original is not None else None
        current = original if read is not None and read.uid == record.original_uid else None
        holders = keys.KeyHolders(me=holder(record), others=others,
                                  retention=(pool or TaskPoolSpec()).key_retention, original=current,
                                  archive=archive, archived=record.archived)
    if not task.spec.depends_on:
        return Gating(holders)

    def phase_of(name: str) -> dependencies.DependencyPhase:
        dep = store.tasks.get((namespace, name))
        return dependencies.MISSING if dep is None else dep.phase

    return Gating(holders, {d.task: phase_of(d.task) for d in task.spec.depends_on}, store.cycle_of(record))


def _awaited(store: Store, record: TaskRecord) -> bool:
    """Whether an unfinished task of the store depends on this one (so it is kept until they finish
    or go, however short its retention)."""
    namespace = record.namespace
    return any((dep := store.tasks.get((namespace, name))) is not None and dep.finished is None
               for name in store.dependents.get((namespace, record.name), ()))


def holder(record: TaskRecord) -> keys.Holder:
    """What deduplication reads of a task. A finished task's output and message are not in
    memory; a plan's `read_original` has them read when a duplicate needs them."""
    done = record.finished
    if done is not None:
        return keys.Holder(name=record.name, created_at=done.created_at or record.first_seen, phase=done.phase,
                           attempt=done.attempt, finished_at=done.finished_at, output_available=done.output_available,
                           duplicate_of=done.duplicate_of)
    task = record.task
    assert task is not None, "a keyed task is readable (an unreadable one has no key)"
    return keys.Holder.of(task, record.first_seen)


def _stored_status(record: TaskRecord) -> TaskStatus | None:
    """The status an unreadable task has, if the models can read that much."""
    raw = record.raw.get("status")
    try:
        return TaskStatus.model_validate(raw) if raw else None
    except ValueError:
        return None

