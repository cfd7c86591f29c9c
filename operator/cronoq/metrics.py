"""Prometheus metrics, all in one place (names fixed by DESIGN §7).

Counters count events the operator caused or observed once each: an attempt is counted when
its end is recorded in the status (a write that succeeds once per attempt), a task when its
terminal phase is recorded, a stale completion once per Job.
"""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server

disable_created_metrics()  # the *_created series double every counter's size and say little

REGISTRY = CollectorRegistry(auto_describe=True)

NO_POOL = "(none)"
"""The pool label of what happens to tasks whose TaskPool does not exist. `spec.pool` is the task
producer's word: a series per name a producer makes up would be memory without bound, so every
such name shares this one (no pool can be named so: names are DNS labels)."""

_POOLS: set[tuple[str, str]] = set()
"""(namespace, pool) of the TaskPools that exist (`start_series` to `end_series`)."""


class _ByPool:
    """A metric labelled (namespace, pool, …) whose pool label is the pool's name only while that
    TaskPool exists, else NO_POOL: its series are bounded by the pools, not by what tasks say."""

    def labels(self, *values: Any, **named: Any) -> Any:
        if named or len(values) < 2 or (values[0], values[1]) in _POOLS:
            return super().labels(*values, **named)  # type: ignore[misc]
        return super().labels(values[0], NO_POOL, *values[2:])  # type: ignore[misc]


class PoolCounter(_ByPool, Counter):
    pass


class PoolGauge(_ByPool, Gauge):
    pass


class PoolHistogram(_ByPool, Histogram):
    pass

TASKS = PoolCounter("cronoq_tasks_total", "Tasks that reached a terminal phase, by namespace, pool and status "
                "(succeeded, failed, dead_lettered, cancelled, skipped).",
                ["namespace", "pool", "status"], registry=REGISTRY)
ATTEMPTS = PoolCounter("cronoq_attempts_total", "Attempts that ended, by namespace, pool and outcome "
                   "(success, retryable, permanent, cancelled).", ["namespace", "pool", "outcome"], registry=REGISTRY)
ATTEMPTS_IGNORED = PoolCounter("cronoq_attempts_ignored_total", "Attempts an Ignore retry rule left uncounted (they "
                           "did not use up one of maxAttempts), by namespace and pool.", ["namespace", "pool"],
                           registry=REGISTRY)
STALE_COMPLETIONS = Counter("cronoq_stale_completions_total", "Reports from Jobs (or pull workers) of attempts that "
                            "were not current "
                            "(ignored: they change nothing).", registry=REGISTRY)
LEASE_EXPIRATIONS = Counter("cronoq_lease_expirations_total", "Attempts aborted because their heartbeat lease "
                            "was not renewed within its TTL.", registry=REGISTRY)
QUEUE_DEPTH = PoolGauge("cronoq_queue_depth", "Tasks of the pool ready to run and waiting for a slot, by namespace "
                    "and pool.", ["namespace", "pool"], registry=REGISTRY)
KEY_WAITING = PoolGauge("cronoq_key_waiting_tasks", "Tasks of the pool ready to run but held by a concurrency key "
                        "that has no room (reason WaitingForKey), by namespace and pool: not in cronoq_queue_depth, "
                        "so a key that never frees (a stuck holder, a limit of 0) shows here.",
                        ["namespace", "pool"], registry=REGISTRY)
RUNNING_ATTEMPTS = PoolGauge("cronoq_running_attempts", "Attempts running now, by namespace and pool.",
                         ["namespace", "pool"], registry=REGISTRY)
WORKERS = PoolGauge("cronoq_workers", "Live pull workers of a pool with delivery: Workers (their Lease renewed), by "
                "namespace and pool.", ["namespace", "pool"], registry=REGISTRY)
WORKER_ROOM = PoolGauge("cronoq_worker_room", "Attempts the live workers of a pool could still take now, by namespace "
                    "and pool.", ["namespace", "pool"], registry=REGISTRY)
TASK_DURATION = PoolHistogram("cronoq_task_duration_seconds", "From submission to the terminal phase, per task "
                          "(labels: namespace, pool, status as in cronoq_tasks_total).", ["namespace", "pool", "status"],
                          registry=REGISTRY,
                          buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400))
DISPATCH_LATENCY = PoolHistogram("cronoq_dispatch_latency_seconds", "From the moment an attempt could start (submission, "
                             "or the end of its backoff) to its Job's creation, or its hand-over to a pull worker "
                             "(labels: namespace, pool).",
                             ["namespace", "pool"],
                             registry=REGISTRY,
                             buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300))
KUEUE_WAIT = PoolHistogram("cronoq_kueue_wait_seconds", "For a pool with admission.kueue: from an attempt's Job's "
                           "creation (suspended) to Kueue admitting it, or to the attempt's end while Kueue still held "
                           "it; observed once per attempt, when its end is recorded (labels: namespace, pool). The wait "
                           "for the pool's own slot is cronoq_dispatch_latency_seconds.", ["namespace", "pool"],
                           registry=REGISTRY,
                           buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400))
DEADLINES = PoolCounter("cronoq_deadlines_total", "Tasks ended by a time limit of their own, by namespace, pool and "
                    "kind: start (its startDeadline passed before it started), total (its deadline passed), retry "
                    "(its retry policy's maxRetryDuration left no room for a retry).", ["namespace", "pool", "kind"],
                    registry=REGISTRY)
DEADLINE_KINDS = ("start", "total", "retry")
RATE_LIMITED = PoolCounter("cronoq_dispatch_rate_limited_total", "Waits for a pool's rate limit: counted when a ready "
                       "task with a free slot is recorded as waiting for a token (reason RateLimited), once per wait, "
                       "by namespace and pool.", ["namespace", "pool"], registry=REGISTRY)
TASKS_DELETED = Counter("cronoq_tasks_deleted_total", "Finished tasks deleted because their time to live "
                        "(ttlAfterFinished, ttlAfterSuccess or ttlAfterFailure, and keyRetention) passed.", registry=REGISTRY)
ARCHIVED = Counter("cronoq_archive_rows_total", "Rows written to the archive (--archive), by kind (attempt, task); "
                   "a row written again (after a failover or a retried write) is not counted twice.", ["kind"],
                   registry=REGISTRY)
ARCHIVE_FAILURES = Counter("cronoq_archive_failures_total", "Writes to and reads of the archive that failed (the "
                           "rows stay queued and are written again).", registry=REGISTRY)
ARCHIVE_QUEUE = Gauge("cronoq_archive_queue_rows", "Rows waiting to be written to the archive.", registry=REGISTRY)
ARCHIVE_DROPPED = Counter("cronoq_archive_dropped_total", "Rows dropped from a full archive queue (the archive was "
                          "down long); a finished task's are written again from its status before it is deleted.",
                          registry=REGISTRY)
NOTIFICATIONS = Counter("cronoq_notifications_total", "Sends of outcome notifications (tasks' endings, schedules' "
                        "pauses) to receivers, by "
                        "result: delivered (a 2xx answer), failed (retried later), gave_up (the receiver's "
                        "maxAttempts reached, or refused for good), dropped (the send queue was full; sent "
                        "at the next sweep).", ["result"], registry=REGISTRY)
DELETED_UNARCHIVED = Counter("cronoq_archive_deleted_unarchived_total", "Finished tasks deleted without their "
                             "rows in the archive: it stayed down for --archive-wait (each has a Warning Event "
                             "DeletedUnarchived).", registry=REGISTRY)
RETRIES = Counter("cronoq_reconcile_retries_total", "Reconciles that failed and were queued again with a "
                  "per-key exponential delay, by kind (task, pool, schedule).", ["kind"], registry=REGISTRY)
SCHEDULE_FIRES = Counter("cronoq_schedule_fires_total", "Fire times of TaskSchedules, by schedule (namespace/name) "
                         "and result: created (its Task was created), backfilled (a fire of spec.backfills created its "
                         "Task), skipped (concurrencyPolicy Forbid), missed "
                         "(noticed too late, or passed during downtime), conflict (its Task name was taken by a Task the "
                         "schedule does not control).", ["schedule", "result"], registry=REGISTRY)
SCHEDULE_LAG = Histogram("cronoq_schedule_lag_seconds", "From a fire time to the creation of its Task (no labels; "
                         "backfilled fires not counted).",
                         registry=REGISTRY,
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600))
LEADER = Gauge("cronoq_leader", "1 while this replica is the leader and reconciles, else 0.", registry=REGISTRY)
WORK_QUEUE_DEPTH = Gauge("cronoq_workqueue_depth", "Work keys (tasks and pools) waiting to be reconciled now, not counting those due later: the backlog of decisions (a new leader starts with one key per task).", registry=REGISTRY)


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Serve /metrics on `port` from a background thread."""
    start_http_server(port, addr=addr, registry=REGISTRY)


def label(value: str) -> str:
    """A phase or outcome as a label value, in the snake_case the requirement queries
    (`DeadLettered` → `dead_lettered`), so `cronoq_tasks_total{status="dead_lettered"}` finds dead letters."""
    from cronoq.api import snake_case
    return snake_case(value)


def start_series(namespace: str, pool: str) -> None:
    """The TaskPool exists: create its counter series at 0, so `increase()` sees its very first
    dead letter. A pool is named within its namespace (the chart makes a `default` pool in each),
    so every per-pool series carries the namespace too."""
    from cronoq.api import TERMINAL_PHASES, AttemptOutcome

    _POOLS.add((namespace, pool))
    for phase in TERMINAL_PHASES:
        TASKS.labels(namespace, pool, label(phase.value))
    for outcome in AttemptOutcome:
        ATTEMPTS.labels(namespace, pool, label(outcome.value))
    for kind in DEADLINE_KINDS:
        DEADLINES.labels(namespace, pool, kind)
    ATTEMPTS_IGNORED.labels(namespace, pool)
    QUEUE_DEPTH.labels(namespace, pool)
    KEY_WAITING.labels(namespace, pool)
    RATE_LIMITED.labels(namespace, pool)
    RUNNING_ATTEMPTS.labels(namespace, pool)


def end_series(namespace: str, pool: str) -> None:
    """The TaskPool went: its series go too (what its tasks do from now on counts under NO_POOL),
    so the registry holds series of the pools that exist, however many came and went."""
    _POOLS.discard((namespace, pool))
    for metric in _BY_POOL:
        metric.remove_by_labels({"namespace": namespace, "pool": pool})


_BY_POOL = (TASKS, ATTEMPTS, ATTEMPTS_IGNORED, QUEUE_DEPTH, KEY_WAITING, RUNNING_ATTEMPTS, WORKERS, WORKER_ROOM, TASK_DURATION,
            DISPATCH_LATENCY, KUEUE_WAIT, DEADLINES, RATE_LIMITED)
"""Every metric labelled by pool (each one a Pool* metric)."""
