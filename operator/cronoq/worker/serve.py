"""A long-running pull worker: it serves a pool with `delivery: Workers`, running the attempts the
operator hands it, with no Job and no pod per attempt.

    import cronoq.worker

    def send(ctx: cronoq.worker.Context):
        mail(ctx.payload["to"])                        # (ctx.id, ctx.attempt) fences side effects
        return "sent"

    cronoq.worker.serve("mail", send, concurrency=8)

The operator decides and fences, the worker only runs and reports:
- it announces itself with a Lease of its own (labelled with the pool, annotated with its room),
  renewed every TTL/3; while it lapses the operator hands it nothing, and the attempts it was
  running end as LeaseExpired and are retried. A worker that cannot renew it for a whole TTL
  (cut off from the API server) stops every handler and exits (code 3), as a pod's SDK fences;
- throttled (429 from API Priority and Fairness, 5xx), every request it makes (its announcement
  too) backs off with jitter and comes back no sooner than the server's Retry-After
  (worker/backoff.py), but what must land before a lease lapses (a renewal, a report) waits only
  as long as that lease can afford; and its own Lease goes first: while its renewal is being
  refused, the worker's other requests (its attempts' renewals, its reports, its watch) hold
  back, for they share its flow at the API server and are worth nothing once the worker is
  presumed dead;
- it watches its pool's Running Tasks and starts an attempt when the status names it as the
  attempt's worker (the status is written before: attempt numbers never repeat);
- it heartbeats each attempt on the attempt's Lease (created at TTL/3, renewed every TTL/3) and
  reports the outcome on that Lease as an annotation (one write for a short attempt), which the
  operator validates (attempt, lease id, worker) and records; the worker never writes a Task;
- when the status says the attempt ended (timeout, cancellation, a lost lease) or the task goes,
  the handler is aborted: a coroutine handler is cancelled; a synchronous one sees `ctx.aborted`
  turn true and `ctx.heartbeat()` return False (a thread cannot be stopped from outside), and
  what it returns later is reported and ignored by the operator as stale.
SIGTERM (or SIGINT) drains: the worker tells the operator it has no room (capacity 0 on its
Lease), runs what was handed over meanwhile and lets running handlers finish, for at most `grace`
seconds. All that time it goes on renewing its own Lease and the attempts' Leases, so the operator
never presumes it dead: a result that comes within grace is reported and is the attempt's outcome.
When grace passes, the attempts still running are aborted and reported retryable ("aborted: the
worker stopped"); a handler's later return is dropped. Once the operator has recorded the reports
(or a few seconds passed), the worker deletes its Lease and returns. Losing its own Lease while
draining still fences (exit 3).
"""
from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import logging
import os
import random
import re
import signal
import socket
import sys
import threading
import time
import traceback
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, NoReturn

from cronoq.pod_protocol import (
    API_VERSION, Annotation, Label, Owner, Terms, lease_body, served_lease_name, worker_lease_body,
)
from cronoq.pod_protocol.durations import parse as parse_duration
from cronoq.pod_protocol.checkpoint import decode_checkpoint
from cronoq.worker.checkpoints import CheckpointSlot
from cronoq.pod_protocol import report
from cronoq.pod_protocol.inputs import Input, encode_inputs, gated, inputs_of, parse_inputs
from cronoq.worker.backoff import Backoff, retry_after
from cronoq.worker.errors import Permanent, Retryable
from cronoq.worker.lease import (
    LAST_TRY, MIN_REQUEST_TIMEOUT, KubeLease, LeaseKeeper, Renewal, api_client, renew_time,
)
from cronoq.pod_protocol.report import Report
from cronoq.worker.report import encode_output
from cronoq.worker.runner import Context

log = logging.getLogger("cronoq.worker")

GROUP, VERSION = API_VERSION.split("/")
Handler = Callable[[Context], Any]
DEFAULT_LEASE_TTL = 30.0
"""An attempt's lease TTL when neither its task nor its pool says (the pool's default), for an
attempt recorded without its `Terms`."""
POD_PREFIX = 56
"""Characters of the pod name a worker's name starts with (63, less a dash and 6 random)."""
QUIET = 1.0
"""Seconds a draining worker waits after its last hand-over before it stops: the operator may
hand over a few attempts before it reads the worker's room of 0."""
SETTLE = 5.0
"""Seconds a drained worker waits at most for the operator to record what it reported while
draining, before it deletes its Lease: the operator reads that deletion on another watch than the
reports, and a worker gone before its report was read would have its attempt end LeaseExpired."""
TICK = 0.1
"""Seconds between looks at what still runs while draining."""
FINISHED_KEPT = 10_000
"""Attempts remembered as done, so a replayed watch event never starts one twice."""


def serve(pool: str, handler: Handler | Mapping[str, Handler], *, concurrency: int = 4,
          namespace: str | None = None, name: str | None = None, ttl: float = 15.0, grace: float = 30.0,
          kubeconfig: str | None = None) -> int:
    """Serve `pool` until SIGTERM/SIGINT (returns 0 once drained) or until this worker's Lease
    is lost (every handler aborted, returns 3). `handler` is one function for every task, or a
    mapping from the task's `cronoq.io/handler` label to functions. `ttl` is the worker Lease's
    (seconds); `namespace` defaults to the pod's (or the kubeconfig's, else `default`)."""
    worker = Worker(pool, handler, concurrency=concurrency, namespace=namespace or _namespace(kubeconfig),
                    name=name or worker_name(pool), ttl=ttl, grace=grace,
                    kubeconfig=kubeconfig or os.environ.get("KUBECONFIG") or None)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.drain())
    return worker.run()


def worker_name(pool: str) -> str:
    """A DNS label of at most 63 characters, new for every process, so a restarted worker is never
    taken for the one before it: in a pod, `<pod name, cut to 56, trailing dashes and dots trimmed>-<6
    random>` (the chart's worker policy checks that prefix against the pod its token is bound to),
    else `<pool>-<host>-<random>`."""
    suffix = "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=6))
    pod = os.environ.get("POD_NAME")
    base = pod[:POD_PREFIX] if pod else re.sub(r"[^a-z0-9-]", "-", f"{pool}-{socket.gethostname()}".lower())
    return f"{base[:POD_PREFIX].strip('-.')}-{suffix}"


@dataclass
class Running:
    """One attempt this worker runs."""

    context: Context
    aborted: threading.Event
    keeper: LeaseKeeper | None
    lease: KubeLease
    cancel: Callable[[], None] = lambda: None
    why: str = ""
    stale: bool = False
    """The operator ended the attempt: whatever is reported now, it will not record it."""
    claimed: bool = False
    """Someone reports it (its handler's thread, or a drain that gave up on it); only one may."""
    reported: threading.Event = field(default_factory=threading.Event)
    alive_until: float = 0.0
    """When the attempt's lease lapses as far as this worker knows (monotonic): a TTL after it was
    handed over, or after its last successful renewal was sent. Its report must land before."""
    depends_on: tuple[str, ...] = ()
    """The task's dependencies, whose outputs the handler receives as `ctx.inputs`."""
    first_attempt_at: str | None = None
    """When the task's first attempt was dispatched: a dependency that ended later is not the one
    it started after (`pod_protocol.inputs.gated`)."""


@dataclass
class Worker:
    pool: str
    handler: Handler | Mapping[str, Handler]
    concurrency: int
    namespace: str
    name: str
    ttl: float
    grace: float
    kubeconfig: str | None
    coordination: Any = None
    custom: Any = None
    clock: Callable[[], float] = time.monotonic
    pause: Callable[[float], Any] = time.sleep
    """The clock and the waits of the drain (the Leases' keepers keep their own)."""
    running: dict[tuple[str, int], Running] = field(default_factory=dict)
    finished: OrderedDict[tuple[str, int], None] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _draining: threading.Event = field(default_factory=threading.Event)
    _done: threading.Event = field(default_factory=threading.Event)
    _closed: bool = False
    """The drain gave up on what still runs: start nothing more."""
    settling: set[tuple[str, int]] = field(default_factory=set)
    """Attempts reported while draining whose outcome the operator has not yet been seen to record."""
    _lost: str | None = None
    _own_renewed: threading.Event = field(default_factory=threading.Event)
    """Clear while the worker's own Lease renewal is being refused: its other requests hold back."""
    _last_start: float = 0.0
    _pool_ttl: tuple[float, float] = (0.0, DEFAULT_LEASE_TTL)
    """(when read, the pool's leaseTTL in seconds)."""

    def __post_init__(self) -> None:
        if self.coordination is None or self.custom is None:
            from cronoq.worker.api import WorkerApi

            api = WorkerApi(api_client(self.kubeconfig))  # plain JSON over the client's pool (worker/api.py)
            self.coordination = self.coordination or api
            self.custom = self.custom or api
        self.pool_runner = ThreadPoolExecutor(self.concurrency, thread_name_prefix="cronoq-handler")
        self._later = Later()

    # ------------------------------------------------------------------ life

    def run(self) -> int:
        if not self._announce():
            return 0  # told to stop before the API server let it in
        own = KubeLease(self.namespace, self.name, self.name, api=self.coordination)
        own._held = True  # created just now: from here a missing Lease means it was taken from us
        keeper = LeaseKeeper(self.ttl, self._renew_own(own), backoff=Backoff())
        renewing = keeper.start(self._fence)
        watcher = threading.Thread(target=self._watch, name="cronoq-worker-watch", daemon=True)
        watcher.start()
        log.info("worker %s serves pool %s/%s with room for %d", self.name, self.namespace, self.pool, self.concurrency)
        self._stop.wait()
        if self._lost is None:
            self._drain()  # our own Lease is renewed meanwhile: the operator must not presume us dead
        keeper.stop()
        renewing.join(self.ttl / 3 + 1)  # no renewal may race the delete below
        self._done.set()
        if self._lost is not None:
            self._fenced()
        self.pool_runner.shutdown(wait=False, cancel_futures=True)
        try:
            self.coordination.delete_namespaced_lease(self.name, self.namespace, _request_timeout=5)
        except Exception as err:  # noqa: BLE001 - it lapses on its own
            log.warning("could not delete the worker's Lease: %s", err)
        return 0

    def _drain(self) -> None:
        """Run what was handed over (what came before the operator read our room of 0 too) until
        each attempt ends or grace passes; report the rest aborted; then wait, briefly, until the
        operator has recorded what we reported. Returns early if our own Lease is lost."""
        deadline = self.clock() + self.grace
        while self._lost is None:
            now = self.clock()
            with self._lock:
                busy = bool(self.running)
            if now >= deadline or (not busy and now - self._last_start >= QUIET):
                break
            self.pause(min(TICK, deadline - now))
        if self._lost is not None:
            return
        self._close(f"the worker stopped (grace {self.grace:g}s passed)")
        settle_by = self.clock() + SETTLE
        while self._lost is None and self.clock() < settle_by:
            with self._lock:
                if not self.settling:
                    return
            self.pause(TICK)
        if self._lost is None:
            log.warning("the operator was not seen to record attempts %s in %gs; the worker stops anyway",
                        sorted(self.settling), SETTLE)

    def _close(self, why: str) -> None:
        """Start nothing more; abort what still runs and report it retryable, not waiting for its
        handler (a thread cannot be stopped); wait for reports already under way."""
        with self._lock:
            self._closed = True
            left = list(self.running.values())
            ours = []
            for run in left:
                self._abort(run, why)
                if not run.claimed:
                    run.claimed = True
                    ours.append(run)
        for run in ours:
            self._report(run, Report(report.RETRYABLE, f"aborted: {run.why}"))
            run.reported.set()
        for run in left:
            run.reported.wait(max(run.context.lease_ttl, self.ttl))

    def _fenced(self) -> NoReturn:
        log.error("worker %s lost its Lease (%s): every attempt aborted", self.name, self._lost)
        self._abort_all(f"the worker's Lease was lost: {self._lost}")
        sys.stdout.flush()
        os._exit(report.EXIT_LEASE_LOST)  # a handler thread must not run on past the fence

    def drain(self) -> None:
        """Take nothing new (room 0 on the Lease), let running handlers end, then stop."""
        if self._draining.is_set():
            return
        self._draining.set()
        self._last_start = self.clock()
        try:
            patch = {"metadata": {"annotations": {Annotation.CAPACITY: "0"}}}
            self.coordination.patch_namespaced_lease(self.name, self.namespace, patch, _request_timeout=5)
        except Exception as err:  # noqa: BLE001 - the operator may hand over a few more; they are retried
            log.warning("could not say the worker drains: %s", err)
        self._stop.set()

    def _announce(self) -> bool:
        """Create the worker's Lease, backing off while the API server refuses or cannot be reached
        (a fleet started under throttling must not die of its first 429). False if told to stop."""
        from kubernetes.client.rest import ApiException

        backoff = Backoff()
        while not self._stop.is_set():
            body = worker_lease_body(self.namespace, self.name, self.pool, self.concurrency, self.ttl)
            now = renew_time()
            body["spec"].update(acquireTime=now, renewTime=now)
            try:
                self.coordination.create_namespaced_lease(self.namespace, body, _request_timeout=10)
                break
            except ApiException as err:
                if err.status == 409 and backoff.failures:  # an earlier try landed; renewals check it is ours
                    break
                if err.status != 429 and err.status < 500:
                    raise
                problem: Exception = err
            except Exception as err:  # noqa: BLE001 - network: try again
                problem = err
            wait = backoff.wait(retry_after(problem))
            log.warning("announcing the worker failed (%s); again in %.1fs", _brief(problem), wait)
            self._stop.wait(wait)
        self._own_renewed.set()
        return not self._stop.is_set()

    def _renew_own(self, own: KubeLease) -> Callable[[float], Renewal]:
        """The worker's own renewal, which tells the worker's other requests when to hold back."""
        def renew(timeout: float) -> Renewal:
            result = own.renew(timeout)
            if result.renewed:
                self._own_renewed.set()
            else:
                self._own_renewed.clear()
            return result
        return renew

    def _own_first(self, budget: float) -> None:
        """Hold a request back while the worker's own Lease renewal is being refused, for at most
        `budget` seconds: its own Lease is what keeps every attempt it runs alive."""
        if budget > 0:
            self._own_renewed.wait(budget)

    def _renew_attempt(self, run: Running, timeout: float) -> Renewal:
        """An attempt's renewal, held back by `_own_first` for all but what the request needs."""
        held = time.monotonic()
        self._own_first(timeout - MIN_REQUEST_TIMEOUT)
        sent = time.monotonic()
        result = run.lease.renew(max(timeout - (sent - held), MIN_REQUEST_TIMEOUT))
        if result.renewed:
            run.alive_until = sent + run.context.lease_ttl
        return result

    def _fence(self, why: str) -> None:
        self._lost = why
        self._stop.set()

    # ------------------------------------------------------------------ what the operator says

    def _watch(self) -> None:
        """List, then watch, the Tasks whose open attempt is handed to this worker (`status.worker`,
        a selectable field: each worker hears of its own attempts only, so a pool's cost per task
        does not grow with its workers). A task whose attempt ended, or that went, leaves the
        selection and arrives as DELETED. A watch that ends at its time is resumed from the last
        version it delivered (bookmarks included); list again only when it breaks, and abort what
        the listing no longer holds. Against a CRD older than that field, the pool's Running
        Tasks are watched instead."""
        from kubernetes.client.rest import ApiException

        selector = f"status.worker={self.name}"
        backoff = Backoff()
        version: str | None = None
        while not self._done.is_set():
            self._own_first(self.ttl)
            try:
                if version is None:
                    try:
                        listing = self.custom.list_namespaced_custom_object(
                            GROUP, VERSION, self.namespace, "tasks", field_selector=selector, _request_timeout=30)
                    except ApiException as err:
                        if err.status != 400 or selector.startswith("spec.pool="):
                            raise
                        log.warning("the Task CRD has no selectable status.worker (install the CRDs of this release): "
                                    "watching every Running task of pool %s instead", self.pool)
                        selector = f"spec.pool={self.pool},status.phase=Running"
                        continue
                    items = listing.get("items", [])
                    for task in items:
                        self._on_task(task, deleted=False)
                    self._gone_from(items)
                    version = listing["metadata"]["resourceVersion"]
                stream = self.custom.watch_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "tasks", field_selector=selector, resource_version=version,
                    timeout_seconds=60, _request_timeout=(10, 75))
                for event in stream:
                    backoff.reset()  # watching again (a refused watch raises before its first event)
                    if self._done.is_set():
                        return
                    version = ((event.get("object") or {}).get("metadata") or {}).get("resourceVersion") or version
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._on_task(event["object"], deleted=event["type"] == "DELETED")
                backoff.reset()  # it ended at its time (bookmarks kept its version): watch on, no listing
            except Exception as err:  # noqa: BLE001 - the watch is for ever; a gone version lists again
                version = None  # list again: what changed while it was broken
                if not self._done.is_set():
                    wait = backoff.wait(retry_after(err))
                    log.warning("watching tasks failed (%s); again in %.1fs", _brief(err), wait)
                    self._done.wait(wait)

    def _gone_from(self, listing: list[dict[str, Any]]) -> None:
        """A listing after a broken watch: what runs here but is no longer handed to us ended
        while we did not watch (its DELETED event was lost)."""
        held = {task["metadata"]["uid"] for task in listing}
        with self._lock:
            for (uid, _), run in list(self.running.items()):
                if uid not in held:
                    run.stale = True
                    self._abort(run, "the operator ended it while the worker's watch was broken")
            self.settling = {key for key in self.settling if key[0] in held}

    def _on_task(self, task: dict[str, Any], *, deleted: bool) -> None:
        meta, spec, status = task["metadata"], task.get("spec") or {}, task.get("status") or {}
        uid, number = meta["uid"], int(status.get("attempt") or 0)
        attempts = status.get("attempts") or []
        current = attempts[-1] if attempts and attempts[-1].get("number") == number else None
        with self._lock:
            for key in [key for key in self.settling if key[0] == uid]:
                if deleted or key[1] != number or current is None or current.get("outcome"):
                    self.settling.discard(key)  # the operator recorded how it ended
            for (task_uid, n), run in list(self.running.items()):
                if task_uid != uid:
                    continue
                if deleted or n != number or current is None or current.get("outcome") or spec.get("cancel"):
                    why = ("the task left Running or was deleted" if deleted else "cancelled" if spec.get("cancel")
                           else f"the operator ended it ({(current or {}).get('reason') or 'a newer attempt'})")
                    run.stale = True
                    self._abort(run, why)
            if deleted or current is None:
                return
            key = (uid, number)
            if (current.get("worker") != self.name or current.get("outcome") or status.get("phase") != "Running"
                    or key in self.running or key in self.finished or self._lost is not None or self._closed):
                return
            self._start(task, current)
            self._last_start = self.clock()

    # ------------------------------------------------------------------ one attempt

    def _start(self, task: dict[str, Any], attempt: dict[str, Any]) -> None:
        meta, spec = task["metadata"], task.get("spec") or {}
        number = int(attempt["number"])
        lease_name = served_lease_name(meta["name"], number, self.name)
        ttl = self._lease_ttl(spec, attempt)
        saved = CheckpointSlot()
        context = Context(id=meta["uid"], name=meta["name"], namespace=self.namespace, attempt=number,
                          payload=spec.get("payload"), lease_name=lease_name, lease_id=attempt.get("leaseId", ""), lease_ttl=ttl, worker=self.name,
                          checkpoint_data=decode_checkpoint(((task.get("status") or {}).get("checkpoint") or {}).get("data")),
                          _checkpoints=saved)
        lease = KubeLease(self.namespace, lease_name, context.lease_id, owner=Owner(meta["name"], meta["uid"], number),
                          ttl=ttl, worker=self.name, pool=self.pool, api=self.coordination, checkpoint=saved.newest)
        keeper = (LeaseKeeper(ttl, lambda timeout: self._renew_attempt(run, timeout), backoff=Backoff())
                  if ttl > 0 else None)
        aborted = threading.Event()
        context = replace(context, _keeper=keeper, _aborted=aborted)
        run = Running(context, aborted, keeper, lease, alive_until=_lapses_at(attempt, ttl),
                      depends_on=tuple(d.get("task", "") for d in spec.get("dependsOn") or ()),
                      first_attempt_at=(task.get("status") or {}).get("firstAttemptAt"))
        self.running[(meta["uid"], number)] = run
        handler = self._handler_for(meta.get("labels") or {})
        self.pool_runner.submit(self._attempt, run, handler)

    def _attempt(self, run: Running, handler: Handler | None) -> None:
        context = run.context
        if run.keeper is not None:
            # The attempt's Lease is created at its first renewal, a third of its TTL from now: an
            # attempt shorter than that writes it once, with its report.
            keeper = run.keeper
            cancel = self._later.call(context.lease_ttl / 3, lambda: keeper.start(lambda why: self._lease_lost(run, why)))
        try:
            result = (Report(report.PERMANENT, f"worker {self.name} has no handler for this task's "
                             f"{Label.HANDLER} label") if handler is None else self._with_inputs(handler, run))
        finally:
            if run.keeper is not None:
                cancel()
                run.keeper.stop()
        with self._lock:
            ours, run.claimed = not run.claimed, True
        if not ours:
            log.info("attempt %d of %s ended after the worker reported it aborted (%s); its result is dropped",
                     context.attempt, context.name, run.why)
        else:
            if run.aborted.is_set():
                log.info("attempt %d of %s ended after it was aborted (%s); reporting it anyway (stale)",
                         context.attempt, context.name, run.why)
            self._report(run, result)
            run.reported.set()
        with self._lock:
            self.running.pop((context.id, context.attempt), None)
            self.finished[(context.id, context.attempt)] = None
            while len(self.finished) > FINISHED_KEPT:
                self.finished.popitem(last=False)

    def _with_inputs(self, handler: Handler, run: Running) -> Report:
        """Call the handler with its dependencies' outputs in `ctx.inputs`, read now (bounded and
        encoded as the operator hands them to a pod: `pod_protocol.inputs`)."""
        if run.depends_on:
            try:
                run.context = replace(run.context, inputs=self._inputs(run.depends_on, run.first_attempt_at))
            except Exception as err:  # noqa: BLE001 - the API server may be away: try again later
                return Report(report.RETRYABLE, f"could not read the inputs: {_brief(err)}")
        return self._call(handler, run)

    def _inputs(self, depends_on: tuple[str, ...], first_attempt_at: str | None = None) -> dict[str, Input]:
        """Each dependency's phase and output, from its Task (a missing one has no phase). Read by
        name, so only from the Task that ended before the attempt's task first started (`gated`):
        one of the same name made since hands over its phase, not its output."""
        from kubernetes.client.rest import ApiException

        found: list[tuple[str, str | None, str | None]] = []
        for name in depends_on:
            try:
                dep = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "tasks", name,
                                                               _request_timeout=10)
            except ApiException as err:
                if err.status != 404:
                    raise
                found.append((name, None, None))
                continue
            status = dep.get("status") or {}
            output = status.get("output") if status.get("outputAvailable") is True else None
            if not gated(status.get("finishedAt"), first_attempt_at):
                output = None
            found.append((name, status.get("phase") if isinstance(status.get("phase"), str) else None,
                          output if isinstance(output, str) else None))
        return parse_inputs(encode_inputs(inputs_of(found)))

    def _call(self, handler: Handler, run: Running) -> Report:
        try:
            value = handler(run.context)
            if inspect.isawaitable(value):
                value = self._await(value, run)
            return Report(report.SUCCESS, output=encode_output(value))
        except Permanent as err:
            return Report(report.PERMANENT, err.message or _describe(err))
        except Retryable as err:
            return Report(report.RETRYABLE, err.message or _describe(err), retry_after=err.retry_after)
        except asyncio.CancelledError:
            return Report(report.RETRYABLE, f"aborted: {run.why}")
        except Exception as err:  # noqa: BLE001 - any other failure is retryable
            traceback.print_exc()
            return Report(report.RETRYABLE, _describe(err))

    def _await(self, awaitable: Any, run: Running) -> Any:
        """Run a coroutine handler on a loop of its own, cancellable from the watch's thread."""
        loop = asyncio.new_event_loop()
        try:
            future = asyncio.ensure_future(awaitable, loop=loop)
            run.cancel = lambda: loop.call_soon_threadsafe(future.cancel)
            if run.aborted.is_set():
                future.cancel()
            return loop.run_until_complete(future)
        finally:
            loop.close()

    def _abort(self, run: Running, why: str) -> None:
        if run.aborted.is_set():
            return
        run.why = why
        run.aborted.set()
        run.cancel()
        if run.keeper is not None:
            run.keeper.stop()
        log.info("attempt %d of %s aborted: %s", run.context.attempt, run.context.name, why)

    def _abort_all(self, why: str) -> None:
        with self._lock:
            for run in list(self.running.values()):
                self._abort(run, why)

    def _lease_lost(self, run: Running, why: str) -> None:
        with self._lock:
            self._abort(run, f"its lease was lost: {why}")

    def _report(self, run: Running, result: Report) -> None:
        """The outcome on the attempt's Lease: created with it when the attempt never heartbeat,
        else added to it, tested against our holder. Tried until it lands, for up to a TTL. While
        draining, the attempt is settling until the operator is seen to record it."""
        key = (run.context.id, run.context.attempt)
        settles = self._draining.is_set() and not run.stale
        if settles:
            with self._lock:
                self.settling.add(key)  # before the write: the operator may answer before it returns
        if not self._write_report(run, result) and settles:
            with self._lock:
                self.settling.discard(key)

    def _write_report(self, run: Running, result: Report) -> bool:
        """True once the report is on the attempt's Lease."""
        from kubernetes.client.rest import ApiException

        context, text = run.context, result.encode().decode()
        # The report replaces the Lease's annotations: it keeps the newest checkpoint with it.
        saved = context._checkpoints.newest() if context._checkpoints is not None else None
        annotations = {**run.lease.annotations(), **({Annotation.CHECKPOINT: saved} if saved else {}),
                       Annotation.REPORT: text}
        deadline = time.monotonic() + max(run.context.lease_ttl, self.ttl)
        backoff = Backoff(first=0.2, most=5.0)
        while True:
            self._own_first((min(deadline, run.alive_until) - time.monotonic()) / 2)
            try:
                if not run.lease.held:
                    body = lease_body(self.namespace, context.lease_name, context.lease_id,
                                      Owner(context.name, context.id, context.attempt), context.lease_ttl, self.name,
                                      self.pool)
                    now = renew_time()
                    body["spec"].update(acquireTime=now, renewTime=now)
                    body["metadata"]["annotations"] = annotations
                    try:
                        self.coordination.create_namespaced_lease(self.namespace, body, _request_timeout=10)
                        return True
                    except ApiException as err:
                        if err.status != 409:
                            raise
                        run.lease._held = True  # a renewal made it meanwhile: add the report to it
                patch = [{"op": "test", "path": "/spec/holderIdentity", "value": context.lease_id},
                         {"op": "add", "path": "/metadata/annotations", "value": annotations}]
                self.coordination.patch_namespaced_lease(context.lease_name, self.namespace, patch,
                                                         _content_type="application/json-patch+json", _request_timeout=10)
                return True
            except ApiException as err:
                if err.status in (404, 422):  # the task went, or another attempt holds the Lease: nobody listens
                    log.info("the report of attempt %d of %s has no Lease to go to (%s)", context.attempt,
                             context.name, err.status)
                    return False
                problem: Exception = err
            except Exception as err:  # noqa: BLE001 - network: try again
                problem = err
            if time.monotonic() >= deadline:
                log.error("could not report attempt %d of %s: %s", context.attempt, context.name, problem)
                return False
            now = time.monotonic()  # back off, as long as the attempt's lease can afford it
            again = min(backoff.until(now, retry_after(problem), run.alive_until - LAST_TRY), deadline)
            log.warning("reporting attempt %d of %s failed (%s); again in %.1fs", context.attempt, context.name,
                        _brief(problem), again - now)
            time.sleep(max(again - now, 0.0))

    # ------------------------------------------------------------------ helpers

    def _handler_for(self, labels: Mapping[str, str]) -> Handler | None:
        if callable(self.handler):
            return self.handler
        return self.handler.get(labels.get(Label.HANDLER, ""))

    def _lease_ttl(self, spec: Mapping[str, Any], attempt: Mapping[str, Any]) -> float:
        """The attempt's lease TTL in seconds, as the operator stamped it on the attempt's record.
        A record without it was written by an operator older than the stamp: then the TTL is
        derived here as that operator did (the task's leaseTTL, else its pool's), and only here."""
        terms = Terms.of_record(attempt)
        if terms is not None:
            return terms.lease_ttl
        if spec.get("leaseTTL") is not None:
            try:
                return parse_duration(spec["leaseTTL"]).total_seconds()
            except ValueError as err:  # the API server checks the grammar: never, unless its CRD is older
                log.warning("an attempt's task has an unreadable leaseTTL (%s): using its pool's", err)
        return self._pool_lease_ttl()

    def _pool_lease_ttl(self) -> float:
        """The pool's leaseTTL (re-read at most every 30 s: a pool's spec may change)."""
        read_at, ttl = self._pool_ttl
        if time.monotonic() - read_at > 30:
            try:
                pool = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "taskpools", self.pool,
                                                                _request_timeout=10)
                ttl = parse_duration((pool.get("spec") or {}).get("leaseTTL", f"{DEFAULT_LEASE_TTL:g}s")).total_seconds()
                self._pool_ttl = (time.monotonic(), ttl)
            except Exception as err:  # noqa: BLE001 - keep what we knew
                log.warning("could not read pool %s: %s", self.pool, err)
        return ttl


class Later:
    """Calls made after a delay, all from one daemon thread: an attempt's heartbeats start a third
    of its TTL after it does, and most attempts end before. A `threading.Timer` per attempt cost a
    thread started and stopped per task (~160 µs of CPU, issue 42)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._due: list[list[Any]] = []  # a heap of [when, order, call or None once cancelled]
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def call(self, delay: float, call: Callable[[], Any]) -> Callable[[], None]:
        """Run `call` after `delay` seconds unless the returned function is called first."""
        entry = [self._clock() + delay, next(self._order), call]
        with self._cond:
            heapq.heappush(self._due, entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cronoq-later", daemon=True)
                self._thread.start()
            elif self._due[0] is entry:
                self._cond.notify()

        def cancel() -> None:
            entry[2] = None

        return cancel

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._due and self._due[0][2] is None:
                        heapq.heappop(self._due)
                    wait = self._due[0][0] - self._clock() if self._due else None
                    if wait is not None and wait <= 0:
                        entry = heapq.heappop(self._due)
                        call, entry[2] = entry[2], None
                        break
                    self._cond.wait(wait)
            try:
                call()
            except Exception:  # noqa: BLE001 - one failing call must not stop the others
                log.exception("a delayed call failed")


def _lapses_at(attempt: Mapping[str, Any], ttl: float) -> float:
    """When (monotonic) an attempt's lease lapses unless renewed: a TTL after the operator handed
    it over (its `dispatchedAt`, on the operator's clock), which may be a while ago when this
    worker's watch was backing off; a TTL from now when the record does not say."""
    now = time.monotonic()
    try:
        handed = datetime.fromisoformat(str(attempt["dispatchedAt"]).replace("Z", "+00:00"))
        ago = (datetime.now(timezone.utc) - handed).total_seconds()
    except (KeyError, ValueError):
        ago = 0.0
    return now + ttl - min(max(ago, 0.0), ttl)


def _brief(err: BaseException) -> str:
    """An API error in a line (its status and reason), not its headers and body."""
    status = getattr(err, "status", None)
    return f"{status} {getattr(err, 'reason', '')}".strip() if status is not None else _describe(err)


def _describe(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _namespace(kubeconfig: str | None) -> str:
    """The pod's namespace, else the kubeconfig context's, else `default`."""
    env = os.environ.get("CRONOQ_NAMESPACE") or os.environ.get("POD_NAMESPACE")
    if env:
        return env
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip()
    except OSError:
        pass
    try:
        from kubernetes import config

        _, context = config.list_kube_config_contexts(config_file=kubeconfig or os.environ.get("KUBECONFIG"))
        return (context.get("context") or {}).get("namespace") or "default"
    except Exception:  # noqa: BLE001
        return "default"
