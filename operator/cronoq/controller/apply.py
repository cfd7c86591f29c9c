"""Carrying out a reconcile's Plan through the Writer, in the order that keeps attempts fenced:

1. write the status (PUT with the stored resourceVersion: a concurrent change makes it fail,
   and the task is re-read and decided again);
2. only then book pool slots and count metrics (together, with no await in between), create the
   attempt's Job, delete Jobs, post Events, and bring the Jobs' ttlSecondsAfterFinished to the
   jobRetention in effect.

So a crash between 1 and 2 leaves a status that names an attempt without a Job, which the next
decision creates (same deterministic name), and never a Job the status does not name.
"""
from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from typing import Any, Callable

from cronoq import metrics
from cronoq.api import Task, TaskPool, TaskStatus
from cronoq.controller.archive import Archiver, fed_rows
from cronoq.controller.tracing import Tracing
from cronoq.controller.gather import holder
from cronoq.controller.expiry import Expiry
from cronoq.controller.notify import Notifier
from cronoq.controller.outcome import Refused
from cronoq.controller.slots import Slots
from cronoq.controller.store import Key, Store, TaskRecord
from cronoq.controller.term import Term
from cronoq.controller.workqueue import PoolWork, TaskWork, WorkKey, WorkQueue
from cronoq.controller.writer import Writer
from cronoq.engine import delay, keys, reasons, spans
from cronoq.engine.admission import Candidate
from cronoq.engine.attempts import task_deadlines
from cronoq.engine.plan import Plan
from cronoq.kube.observe import cluster_queue_of, job_facts, kueue_hold, kueue_stop
from cronoq.pod_protocol.inputs import encode_inputs, gated, inputs_of
from cronoq.pod_protocol.tracecontext import TaskTrace
from cronoq.apiserver.errors import Conflict
from cronoq.kube.writes import Rejected
from cronoq.api import Attempt

log = logging.getLogger(__name__)


KUEUE_QUEUE_SECONDS = 30.0
"""The ClusterQueue of a LocalQueue that holds Jobs is read again (one GET) at most this often."""

GONE_ORIGINAL_SECONDS = 1.0
"""A keyed task whose original's Task was gone when read is decided again this much later (the
watch has told the store by then), with an archive kept."""

QUOTA = re.compile(r"exceeded quota: ([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


def refusal_of(message: str) -> str:
    """The API server's refusal, naming the ResourceQuota first when one refused."""
    quota = QUOTA.search(message)
    return f"ResourceQuota {quota.group(1)} refused it ({message})" if quota else message


def _told(status: TaskStatus | None) -> str | None:
    """The reason a status gives (its Running condition's)."""
    return next((c.reason for c in status.conditions if c.type == "Running"), None) if status else None


class Applier:
    def __init__(self, writer: Writer, store: Store, queue: WorkQueue[WorkKey], slots: Slots, expiry: Expiry,
                 term: Term, *, clock: Callable[[], datetime], skew: Callable[[], timedelta],
                 warnings_only: bool = False, served_warnings_only: bool = False,
                 archiver: Archiver | None = None, tracing: Tracing | None = None) -> None:
        self.archiver = archiver
        """Handed what each landed status write adds to the archive (never awaited)."""
        self.notifier: Notifier | None = None
        """Handed each task a landed status write ended (never awaited), when pools may want to hear of it."""
        self.tracing = tracing
        """Handed the spans each landed status write ends (never awaited); None: tracing is off."""
        self.writer, self.store, self.queue, self.slots, self.expiry, self.term = writer, store, queue, slots, expiry, term
        self.clock, self.skew = clock, skew
        self.cluster_queues: dict[Key, tuple[str | None, datetime]] = {}
        """(namespace, LocalQueue) → its ClusterQueue and when it was read (`_look_kueue`)."""
        self.warnings_only = warnings_only
        """`--events=warnings`: a succeeded attempt gets no Event (its status says it all)."""
        self.served_warnings_only = served_warnings_only
        """`--events=auto` (the default): the same, in Workers pools only, unless a pool's `events`
        says otherwise: a stream of small tasks would pay an Event write per success, a quarter of
        its writes."""

    def quiet(self, pool: TaskPool | None) -> bool:
        """Only Warning Events on this pool's tasks: `--events=warnings` caps every pool; else the
        pool's `events` says; unset, `--events=auto` makes Workers pools quiet (`all`: none)."""
        if self.warnings_only:
            return True
        if pool is not None and pool.spec.events is not None:
            return pool.spec.events == "Warnings"
        return self.served_warnings_only and pool is not None and pool.spec.delivery == "Workers"

    async def apply(self, record: TaskRecord, task: Task | None, plan: Plan, now: datetime) -> Refused | None:
        """One reconcile's plan: its status first; nothing else unless that write landed. `task` is
        the live task it was decided on (None for a finished or unreadable one). Returns the
        refusal of the attempt's Job, if the API server refused it for now."""
        if plan.read_original is not None:
            await self._read_original(record, plan.read_original)
            return None
        if plan.read_archive:
            self._ask_archive(record)
            return None
        if plan.read_workload is not None:
            await self._read_workload(record, plan.read_workload)
            return None
        if plan.look_kueue is not None:
            await self._look_kueue(record, plan.look_kueue, now)
            return None
        if plan.read_inputs and task is not None:
            await self._read_inputs(record, task)
            return None
        key, pool_key = (record.namespace, record.name), (record.namespace, record.pool)
        if plan.status is not None:
            worker = plan.started.worker if plan.started is not None else None
            if worker is not None:  # its room is taken from now, not from when the write lands
                self.store.hold(key, worker)
            try:
                landed = await self._write_status(record, plan.status, now)
            finally:
                self.store.handed(key)
            if landed is None:
                return None
            record = landed
            if task is not None and self.archiver is not None:
                self.archiver.feed(fed_rows(task, task.status, plan.status))
            if self.notifier is not None and plan.status.phase is not None and plan.status.phase.terminal and \
                    (task is None or task.phase != plan.status.phase):
                self.notifier.offer(record.namespace, record.name, record.uid, record.pool)
            if task is not None and self.tracing is not None:
                self.tracing.emit(spans.spans(task, task.status, plan.status, self._dependency_links(task, plan.status)))
            if task is not None:
                if _told(plan.status) == reasons.RATE_LIMITED != _told(task.status):
                    metrics.RATE_LIMITED.labels(*pool_key).inc()
                task = task.model_copy(update={"status": plan.status})  # as written; the store may keep less
        if plan.deletion is not None:
            self.expiry.schedule(key, record.uid, plan.deletion.at)
        return await self._carry_out(record, task, plan, pool_key, self.store.pools.get(pool_key), now)

    def _dependency_links(self, task: Task, status: TaskStatus) -> tuple[spans.Link, ...]:
        """A finishing task's links to the task spans of its dependencies the store still holds."""
        if not task.spec.depends_on or status.phase is None or not status.phase.terminal:
            return ()
        namespace = task.metadata.namespace or ""
        traces = {}
        for dependency in task.spec.depends_on:
            if (held := self.store.tasks.get((namespace, dependency.task))) is not None:
                meta = held.raw["metadata"]
                traces[dependency.task] = TaskTrace.of(held.uid, meta.get("annotations"))
        return spans.dependency_links(traces)

    async def _read_original(self, record: TaskRecord, name: str) -> None:
        """Read the finished original a keyed task ends as the duplicate of (its output and message
        are not in the store), keep it on the duplicate's record, and decide again."""
        namespace = record.namespace
        original = self.store.tasks.get((namespace, name))
        raw = await self.writer.read_task(namespace, name)
        if original is None:  # gone meanwhile: the next decision no longer names it
            self.queue.add(TaskWork(namespace, record.name))
            return
        full = Task.model_validate(raw) if raw is not None else None
        if self.archiver is not None and (full is None or full.metadata.uid != original.uid):
            # Gone, or its name taken by another task, since the store saw it: once the watch says
            # so, the next decision asks the archive, which holds its output.
            self.queue.add_after(TaskWork(namespace, record.name), GONE_ORIGINAL_SECONDS)
            return
        # Gone, or its name taken by another task: decide with what the store has of it.
        read = keys.Holder.of(full, original.first_seen) if full is not None and full.metadata.uid == original.uid \
            else holder(original)
        record.original, record.original_uid = read, original.uid
        self.queue.add(TaskWork(namespace, record.name))

    def _ask_archive(self, record: TaskRecord) -> None:
        """Ask the archive whether it holds a finished original of the task's key deleted from the
        cluster; its answer (controller/reconciler.py `_archive_answered`) decides the task again.
        Not awaited: the reconcile goes on to other work meanwhile. The task waits for no slot then
        (a keyed task is never weighed before a decision let it past its key, and one that was does
        not ask: engine.keys.asks_archive)."""
        key = record.key
        if self.archiver is None or key is None:  # not planned then
            return
        record.asking = True
        self.archiver.ask((record.namespace, record.pool, key))

    async def _read_workload(self, record: TaskRecord, job: str) -> None:
        """Read why Kueue stopped the task's Job (its Workload's eviction), keep it with the Job's
        facts, and decide again. Once per stopped Job (after a restart, once more)."""
        namespace = record.namespace
        seen = self.store.job_seen(namespace, job)
        if seen is None:  # gone meanwhile: the next decision judges that
            self.queue.add(TaskWork(namespace, record.name))
            return
        workloads = await self.writer.read_workloads(namespace, seen.uid)
        self.store.kueue_stops[(namespace, job)] = kueue_stop(workloads)
        self.queue.add(TaskWork(namespace, record.name))

    async def _look_kueue(self, record: TaskRecord, job: str, now: datetime) -> None:
        """Read what Kueue says of the task's Job it holds (its Workload; the LocalQueue's
        ClusterQueue, read at most every KUEUE_QUEUE_SECONDS per LocalQueue), keep it with the
        Job's facts, and decide again (which says it only when it is news)."""
        namespace = record.namespace
        seen = self.store.job_seen(namespace, job)
        if seen is None or seen.kueue_queue is None:  # gone meanwhile: the next decision judges that
            self.queue.add(TaskWork(namespace, record.name))
            return
        workloads = await self.writer.read_workloads(namespace, seen.uid)
        queue_key = (namespace, seen.kueue_queue)
        known = self.cluster_queues.get(queue_key)
        if known is None or (now - known[1]).total_seconds() >= KUEUE_QUEUE_SECONDS:
            _, local_queue = await self.writer.read_local_queue(*queue_key)
            known = self.cluster_queues[queue_key] = (cluster_queue_of(local_queue), now)
        self.store.kueue_holds[(namespace, job)] = (kueue_hold(seen.kueue_queue, workloads, known[0]), now)
        self.queue.add(TaskWork(namespace, record.name))

    async def _read_inputs(self, record: TaskRecord, task: Task) -> None:
        """Read the outputs of the task's dependencies (the store keeps only their phases), keep
        them encoded on its record, and decide again. Only dependencies that have an output are
        read; one read per dependency per task while it runs (after a restart, once more)."""
        namespace = record.namespace
        found: list[tuple[str, str | None, str | None]] = []
        for dep in task.spec.depends_on:
            kept = self.store.tasks.get((namespace, dep.task))
            if kept is None:
                found.append((dep.task, None, None))
                continue
            phase = kept.phase.value if kept.phase is not None else None
            if kept.finished is None or not kept.finished.output_available:
                found.append((dep.task, phase, None))
                continue
            raw = await self.writer.read_task(namespace, dep.task)
            try:
                full = Task.model_validate(raw) if raw is not None else None
            except ValueError:  # unreadable now (a newer CRD?): its output is not handed over
                full = None
            started = task.status.first_attempt_at if task.status else None
            same = full is not None and full.metadata.uid == kept.uid and full.status is not None \
                and gated(full.status.finished_at, started)
            output = full.status.output if same and full.status.output_available else None  # type: ignore[union-attr]
            found.append((dep.task, phase, output))
        record.inputs = encode_inputs(inputs_of(found))
        self.queue.add(TaskWork(namespace, record.name))

    async def _write_status(self, entry: TaskRecord, status: TaskStatus, now: datetime) -> TaskRecord | None:
        """The fencing write. Returns the task's entry as stored after it, or None when it did not land."""
        namespace, name = entry.namespace, entry.name
        key = (namespace, name)
        try:
            written = await self.writer.replace_task_status(entry.raw, status.to_dict())
        except Conflict:
            fresh = await self.writer.read_task(namespace, name)
            if fresh is None:
                self.store.forget(key)
            else:
                self.store.put_task(fresh, now)
            self.queue.add(TaskWork(namespace, name))
            return None
        except Rejected as err:
            log.error("the API server refused the status of task %s/%s: %s", namespace, name, err.message)
            return None  # its grant, if any, goes back when the reconcile ends (controller/reconciler.py)
        before = entry.weighed()
        landed = self.store.put_task(written, now) or self.store.tasks.get(key) or entry
        related = self.store.related(namespace, name)
        if before is not None and before.debouncing and before.concurrency_keys and not self.store.debouncing(key):
            # Released from debouncing (or ended): the older tasks of its key's burst end, or wait on.
            related |= self.store.superseded_peers(namespace, before.concurrency_keys)
        for other in related:  # the watch event will be a no-op
            self.queue.add(TaskWork(namespace, other))
        return landed

    async def _carry_out(self, entry: TaskRecord, task: Task | None, plan: Plan, pool_key: Key, pool: TaskPool | None,
                         now: datetime) -> Refused | None:
        """What follows a landed status: slots and metrics first (no await in between, so
        admission never sees the task half-moved), then the writes. `task` is the task as
        written (None for a finished task's settling). Returns the refusal of the attempt's Job."""
        namespace, name = entry.namespace, entry.name
        self._book_slots(entry, task, plan, pool_key)
        self._count(entry, task, plan, pool_key)
        refused = None
        if plan.started is not None and plan.started.worker is not None:  # handed to a worker: it starts now
            since = self.slots.ready_since.pop((namespace, name), None) or entry.first_seen
            metrics.DISPATCH_LATENCY.labels(*pool_key).observe(max((self.clock() - since).total_seconds(), 0))
        if plan.create_job is not None and plan.job is not None:
            refused = await self._create_job(entry, plan.job, plan.create_job.number, plan, pool_key)
        for job_name in plan.delete_jobs:  # only the Job seen as the task's, by its uid
            if (seen := entry.jobs.get(job_name)) is not None and seen.uid:
                await self.writer.delete_job(namespace, job_name, seen.uid)
        quiet = self.quiet(pool)
        for event in plan.events:
            if quiet and not event.warning:
                continue
            await self.writer.post_event(entry.raw, event, now)
        if plan.requeue_after is not None:
            self.queue.add_after(TaskWork(namespace, name), plan.requeue_after + 0.01)
        if refused is not None:
            return refused  # the retry's plan re-times the Jobs
        for job_name, seconds in plan.retime_jobs:  # last: a failing patch holds up nothing else
            if (seen := entry.jobs.get(job_name)) is None or not seen.uid:
                continue
            retimed = await self.writer.retime_job(namespace, job_name, seen.uid, seconds)
            facts = job_facts(retimed, self.skew()) if retimed is not None else None
            if facts is not None:  # known before its watch event: not patched again meanwhile
                self.store.put_job(namespace, entry.uid, name, facts)
        return None

    def _book_slots(self, entry: TaskRecord, task: Task | None, plan: Plan, pool_key: Key) -> None:
        namespace, name = entry.namespace, entry.name
        key = (namespace, name)
        granted = self.slots.take_grant(key)
        for job_name in plan.delete_jobs:  # its container may run on until its pod is gone
            self.slots.abort(namespace, job_name, pool_key)
        if plan.wants_slot and task is not None:
            # Refreshed on every reconcile: a priority raised while queued reorders the queue.
            submitted = (task.status.submitted_at if task.status else None) or entry.first_seen
            in_line = delay.in_line_from(task, submitted)  # a delayed task queues from its start time
            self.slots.want(pool_key, Candidate.of_task(task, in_line), self.clock())
            self.queue.add(PoolWork(*pool_key))
        else:
            self.slots.unwant(pool_key, key)
        if granted or plan.ended:
            self.queue.add(PoolWork(*pool_key), urgent=True)  # a slot was used or freed: someone else's turn

    def _count(self, record: TaskRecord, task: Task | None, plan: Plan, pool_key: Key) -> None:
        """Counted as soon as the status that records them has landed, before the slower side effects."""
        if plan.stale_jobs:
            metrics.STALE_COMPLETIONS.inc(len(set(plan.stale_jobs) - record.stale_counted))
            record.stale_counted = record.stale_counted | set(plan.stale_jobs)
        for attempt in plan.ended:
            assert attempt.outcome is not None, "an ended attempt has its outcome"
            metrics.ATTEMPTS.labels(*pool_key, metrics.label(attempt.outcome.value)).inc()
            if attempt.reason == reasons.LEASE_EXPIRED:
                metrics.LEASE_EXPIRATIONS.inc()
            if attempt.ignored:
                metrics.ATTEMPTS_IGNORED.labels(*pool_key).inc()
            if (waited := self._kueue_wait(record, attempt)) is not None:
                metrics.KUEUE_WAIT.labels(*pool_key).observe(waited)
        status = task.status if task is not None else None
        if plan.status is not None and status is not None and status.phase is not None and status.phase.terminal:
            metrics.TASKS.labels(*pool_key, metrics.label(status.phase.value)).inc()
            if (kind := task_deadlines.kind_of(status)) is not None:
                metrics.DEADLINES.labels(*pool_key, kind).inc()
            if status.submitted_at and status.finished_at:
                metrics.TASK_DURATION.labels(*pool_key, metrics.label(status.phase.value)).observe(
                    max((status.finished_at - status.submitted_at).total_seconds(), 0))

    def _kueue_wait(self, record: TaskRecord, attempt: Attempt) -> float | None:
        """Seconds Kueue held the ended attempt's Job: from its creation to Kueue's admission (the
        Job's startTime), or to its container's start (a Job Kueue stopped again), or to now (it
        ended held: cancelled, its startDeadline passed). None for an attempt without a Kueue Job."""
        job = record.jobs.get(attempt.job or "")
        if job is None or job.kueue_queue is None or job.created_at is None:
            return None
        until = job.resumed_at or attempt.started_at or self.clock()
        return max((until - job.created_at).total_seconds(), 0.0)

    async def _create_job(self, entry: TaskRecord, job: dict[str, Any], number: int, plan: Plan,
                          pool_key: Key) -> Refused | None:
        """The recorded attempt's Job, as the decision built it (the attempt creates its own heartbeat
        Lease, at its first renewal); its refusal for now, if the API server refused it."""
        namespace, name = entry.namespace, entry.name
        try:
            created = await self.writer.create_job(job)
        except Rejected as err:
            if err.status == 422:
                entry.rejected = {**entry.rejected, number: err.message}
                self.queue.add(TaskWork(namespace, name))
                return None
            # Forbidden: a quota, a terminating namespace. The work queue retries the task with a
            # per-key exponential delay (outcome.Refused), and the task's message says who refused.
            first = number not in entry.refused
            entry.refused = {**entry.refused, number: refusal_of(err.message)}
            return Refused(err.message, first)
        if number in entry.refused:
            entry.refused = {k: v for k, v in entry.refused.items() if k != number}
            self.queue.add(TaskWork(namespace, name))  # to say that the attempt runs now
        facts = job_facts(created, self.skew()) if created is not None else None
        if facts is not None:  # known before its watch event: never taken for a lost Job
            self.store.put_job(namespace, entry.uid, name, facts)
        if plan.started is not None:
            since = self.slots.ready_since.pop((namespace, name), None) or entry.first_seen
            metrics.DISPATCH_LATENCY.labels(*pool_key).observe(max((self.clock() - since).total_seconds(), 0))
        return None
