"""Gather: everything one decision about a task reads, taken from the store and the slots at one
moment into one `Observation` (engine.plan), with no read from the API server and no await, so
the decision and the status write that follows it see the same world. The engine decides
(`engine.decide`); controller/apply.py carries the plan out."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronoq.api import Task, TaskPoolSpec, TaskStatus
from cronoq.controller.ratelimits import RateLimits
from cronoq.controller.slots import Slots
from cronoq.controller.store import Store, TaskRecord
from cronoq.engine import dependencies, keys
from cronoq.engine.admission import capacity
from cronoq.engine.decide import Live, Subject, Unreadable
from cronoq.engine.jobs import TaskServiceAccount
from cronoq.engine.plan import Observation


@dataclass(frozen=True)
class JobSettings:
    """How this operator builds attempt Jobs (its flags)."""

    sidecar_image: str | None = None
    service_account: TaskServiceAccount = TaskServiceAccount()


def gather(store: Store, slots: Slots, record: TaskRecord, now: datetime, epoch: int,
           jobs: JobSettings, rate_limits: RateLimits | None = None) -> tuple[Subject, Observation]:
    """The task as the decision sees it, and what it reads around it."""
    namespace = record.namespace
    found = store.pools.get((namespace, record.pool))
    pool = found.spec if found is not None else None
    common: dict[str, Any] = dict(now=now, epoch=epoch, jobs=store.attempt_jobs(record), pool_found=found is not None,
                                  pool=pool, first_seen=record.first_seen, sidecar_image=jobs.sidecar_image,
                                  service_account=jobs.service_account, awaited=_awaited(store, record))
    task = record.task
    if record.finished is not None:
        return record.finished, Observation(**common)
    if task is None:
        unreadable = Unreadable(_stored_status(record), record.error or "", record.raw["metadata"].get("generation"))
        return unreadable, Observation(**common)
    status = task.status
    attempt = status.attempt if status else 0
    last = status.attempts[-1] if status and status.attempts else None
    if last is not None and last.outcome is None and last.worker:  # served by a worker: is it alive?
        common["worker_alive_until"] = store.worker_alive_until(namespace, last.worker)
    elif pool is not None and pool.delivery == "Workers":  # where its next attempt could go
        common["worker_room"] = store.worker_room((namespace, record.pool), now)
    if attempt == 0:
        common.update(_gating(store, record, task, pool, now))
    if task.spec.depends_on:
        common["inputs"] = record.inputs
    if rate_limits is not None and found is not None and found.spec.rate_limit is not None \
            and slots.free((namespace, record.pool), capacity(found.spec)) > 0:
        common["next_start_at"] = rate_limits.next_start_at((namespace, record.pool), found, now)
    grant = slots.grants.get((namespace, record.name))
    return Live(task), Observation(admit=grant is not None, pool_name=task.spec.pool,
                                   admitted_at=grant.at if grant is not None else None,
                                   job_rejected=record.rejected.get(attempt), job_refused=record.refused.get(attempt),
                                   **common)


def _gating(store: Store, record: TaskRecord, task: Task, pool: TaskPoolSpec | None, now: datetime) -> dict[str, Any]:
    """What gates a task's first attempt: its key's other holders, its dependencies' phases."""
    found: dict[str, Any] = {}
    namespace = record.namespace
    if task.spec.key:
        names = store.keyed.get((namespace, record.pool, task.spec.key), ())
        others = tuple(holder(store.tasks[(namespace, n)]) for n in names
                       if n != record.name and (namespace, n) in store.tasks)
        original = record.original
        read = store.tasks.get((namespace, original.name)) if original is not None else None
        current = original if read is not None and read.uid == record.original_uid else None
        found["holders"] = keys.KeyHolders(me=holder(record), others=others,
                                           retention=(pool or TaskPoolSpec()).key_retention, original=current)
    if task.spec.depends_on:
        def phase_of(name: str) -> dependencies.DependencyPhase:
            dep = store.tasks.get((namespace, name))
            return dependencies.MISSING if dep is None else dep.phase

        found["dependencies"] = {d.task: phase_of(d.task) for d in task.spec.depends_on}
        found["cycle"] = store.cycle_of(record)
    return found


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

