"""What a decision reads and what it decides, in their own module because every layer above the
engine speaks them: `Effective` settings of an attempt, the `Observation` a reconcile reads
besides the Task, and the `Plan` it returns (status first, then Job, deletes, `Event`s and
re-timed Jobs)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence, TypedDict

from cronoq.api import Attempt, RetryPolicy, Task, TaskPoolSpec, TaskStatus
from cronoq.api.limits import DEFAULT_START_TIMEOUT
from cronoq.engine.dependencies import DependencyPhase
from cronoq.engine.gate import RUN, Gate
from cronoq.engine.jobs import TaskServiceAccount
from cronoq.engine.keys import KeyHolders
from cronoq.engine.keylimits import Debouncing, KeyWait, Superseded
from cronoq.engine.observed import AttemptJob
from cronoq.engine.retention import unfinished_job_retention
from cronoq.engine.retryrules import Labelled, labelled

DEFAULT_JOB_RETENTION = TaskPoolSpec.model_fields["job_retention"].default


class Terms(TypedDict):
    """An attempt record's `pod_protocol.Terms` fields, as `Attempt(...)` takes them."""

    lease_ttl_ms: int
    timeout_ms: int | None


@dataclass(frozen=True)
class Effective:
    """What an attempt runs with: the task's own settings, else its pool's, else DESIGN's."""

    retry: RetryPolicy
    timeout: timedelta | None
    lease_ttl: timedelta
    start_timeout: timedelta = DEFAULT_START_TIMEOUT
    heartbeat_sidecar: bool = False
    job_retention: timedelta = DEFAULT_JOB_RETENTION
    """What the task's Jobs are kept for while it is unfinished: the longest retention it may end
    with (`retention.unfinished_job_retention`)."""
    workers: bool = False
    """The pool delivers to pull workers (`delivery: Workers`): no Job, no pod."""
    start_deadline: timedelta | None = None
    """The task's startDeadline, else its pool's (None: none; `attempts.task_deadlines`)."""
    deadline: timedelta | None = None
    """The task's deadline, else its pool's (None: none)."""
    rules: Labelled = ()
    """Retry rules, the task's then the pool's (`retryrules`)."""

    @classmethod
    def of(cls, task: Task, pool: TaskPoolSpec | None) -> Effective:
        pool = pool or TaskPoolSpec()
        spec = task.spec
        return cls(retry=pool.retry.overlay(spec.retry), timeout=spec.timeout or pool.timeout,
                   lease_ttl=spec.lease_ttl if spec.lease_ttl is not None else pool.lease_ttl,
                   start_timeout=spec.start_timeout or pool.start_timeout,
                   heartbeat_sidecar=spec.heartbeat_sidecar if spec.heartbeat_sidecar is not None
                   else pool.heartbeat_sidecar,
                   job_retention=unfinished_job_retention(spec, pool) or timedelta(0),
                   workers=pool.delivery == "Workers", rules=labelled(spec.retry, pool.retry),
                   start_deadline=_own_else(spec.start_deadline, pool.start_deadline),
                   deadline=_own_else(spec.deadline, pool.deadline))

    def terms(self) -> Terms:
        """The attempt record's fields that stamp these settings on a new attempt (`pod_protocol.Terms`),
        so that whoever serves it reads them instead of deriving them again from the specs."""
        ms = timedelta(milliseconds=1)
        return Terms(lease_ttl_ms=self.lease_ttl // ms, timeout_ms=None if self.timeout is None else self.timeout // ms)


def _own_else(own: timedelta | None, pool: timedelta | None) -> timedelta | None:
    """The task's value, else the pool's; 0s (none, a task's way to lift its pool's) is None."""
    value = own if own is not None else pool
    return value or None


@dataclass(frozen=True)
class Event:
    """An Event to post on the Task, after the status write succeeds."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class JobToCreate:
    """The attempt whose Job to create, as the decision recorded it (in `status` or the stored status)."""

    number: int
    lease_id: str
    """The attempt's lease id, which its Job and pod carry (so its heartbeat and reports are its own)."""


@dataclass(frozen=True)
class Deletion:
    """When to delete a finished task, its retention over (engine.retention); `at` None: keep it."""

    at: datetime | None


@dataclass(frozen=True)
class Plan:
    """What one reconcile decided. The runtime writes `status` (if any) first, with a
    precondition; only when that succeeds does it create, delete and post the rest."""

    status: TaskStatus | None = None
    create_job: JobToCreate | None = None
    delete_jobs: tuple[str, ...] = ()
    retime_jobs: tuple[tuple[str, int], ...] = ()
    """(Job name, seconds): Jobs of the task whose ttlSecondsAfterFinished to set to the
    jobRetention in effect (engine.retention.retime)."""
    events: tuple[Event, ...] = ()
    stale_jobs: tuple[str, ...] = ()
    """uids of Jobs whose late reports were ignored (the runtime counts each uid once)."""
    ended: tuple[Attempt, ...] = ()
    """Attempts this plan records as ended (for metrics)."""
    started: Attempt | None = None
    wants_slot: bool = False
    """Ready to start an attempt, waiting for the pool to admit it (or to exist: then every
    waiting task is weighed at once when it appears)."""
    requeue_after: float | None = None
    """Seconds until a deadline or backoff expires and the task should be looked at again."""
    job: dict[str, Any] | None = None
    """The Job of `create_job`, as `engine.decide` built it."""
    deletion: Deletion | None = None
    """A finished task's (None: the task has not finished)."""
    read_original: str | None = None
    """A keyed task that ends as the duplicate of this finished task: read its full record (the
    output and message the store does not keep), then decide again. Nothing else is planned."""
    read_archive: bool = False
    """A keyed task that nothing in the cluster holds back, with an archive kept: ask the archive
    for a finished original of its key deleted from the cluster (keys.Archived), then decide
    again. Nothing else is planned."""
    read_workload: str | None = None
    """The task's Job of this name was stopped by Kueue: read why from its Workload (the store
    keeps it as the Job's `kueue_stop`), then decide again. Nothing else is planned."""
    look_kueue: str | None = None
    """The task's Job of this name waits for Kueue and is due a look: read what Kueue says of it
    (its Workload, the LocalQueue's ClusterQueue; the store keeps it as the Job's `kueue_hold`),
    then decide again. Nothing else is planned."""
    read_inputs: bool = False
    """A task with dependencies about to get a Job: read its dependencies' outputs (the store does
    not keep a finished task's output), keep them on its record, then decide again. Nothing else
    is planned."""


@dataclass(frozen=True)
class Observation:
    """Everything the decision reads besides the Task itself."""

    now: datetime
    """The operator's clock at the decision."""
    jobs: Sequence[AttemptJob] = ()
    epoch: int = 0
    admit: bool = False
    """The pool has a slot for this task, and it is this task's turn."""
    admitted_at: datetime | None = None
    """When the pool granted it (the slot, and its rate limit's token): the attempt's dispatchedAt,
    so that recorded starts keep the rate limit's spacing however long the reconcile waited."""
    pool_found: bool = True
    pool_name: str = "default"
    first_seen: datetime | None = None
    """When the operator first saw the task (its submission time, to sub-second precision)."""
    job_rejected: str | None = None
    """The API server refused to create the current attempt's Job, with this message."""
    job_refused: str | None = None
    """The API server refused the current attempt's Job for now (a ResourceQuota, a terminating
    namespace), with this message: it is created again, with backoff."""
    gate: Gate = RUN
    """What its key and dependencies say, for a task that has not started yet."""
    worker: str | None = None
    """A Workers pool: the live worker with room the next attempt would go to (None: none has room;
    `engine.decide` picks it from `worker_room`)."""
    worker_room: Mapping[str, int] | None = None
    """A Workers pool, no attempt open: its live workers → how many more attempts each may take."""
    superseded: Superseded | None = None
    """A newer task naming a concurrency key of this one ends it (the key's onNewer policy)."""
    debounce: Debouncing | None = None
    """The task has not started and a Debounce concurrency key of it holds it: the burst of tasks
    waiting on the key is not over, or a newer task is to start instead (engine.keylimits)."""
    key_wait: KeyWait | None = None
    """A concurrency key of the task has no room: which, its limit and who holds it (None: the task
    does not wait for a key)."""
    next_start_at: datetime | None = None
    """The pool has a free slot but its rate limit no token: when the next one is due (None: no
    limit, a token is there, or no slot is free)."""
    worker_alive_until: datetime | None = None
    """A Workers pool: until when the open attempt's worker is alive by its Lease, as last seen
    (None: its Lease is gone, or was never seen)."""
    # Read by engine.decide (which works out `gate` from them, and builds the Job).
    pool: TaskPoolSpec | None = None
    """The spec of the task's pool (None: it does not exist, or is not known)."""
    holders: KeyHolders | None = None
    """A keyed task that has not started: who else holds its key."""
    dependencies: Mapping[str, DependencyPhase] | None = None
    """A task with dependencies that has not started: their phases, by name."""
    awaited: bool = False
    """An unfinished task depends on this one: a finished one is not deleted yet, whatever its
    retention (its dependents read its phase, and its output when an attempt of theirs starts)."""
    cycle: tuple[str, ...] | None = None
    """The dependency cycle the task is on, if any."""
    inputs: str | None = None
    """A task with dependencies: its dependencies' phases and outputs, encoded for CRONOQ_INPUTS
    (`pod_protocol.inputs`), once read (None: not read yet)."""
    sidecar_image: str | None = None
    """The operator's image: the heartbeat sidecar and the push runner of attempt pods."""
    service_account: TaskServiceAccount = TaskServiceAccount()
    """The operator's `--task-service-account`."""
    traced: bool = False
    """Tracing is on (controller/tracing.py): an attempt's Job carries its span's TRACEPARENT."""
