"""A pull worker's attempts: which hand-overs start one and which abort one, and each attempt's run
(start, run, abort, report).

- `seen(handover)`: a hand-over this worker has not run starts an attempt; one whose attempt ended
  (timeout, cancellation, a lost lease, a newer attempt) or whose task went aborts it;
- `start`: its Context, its Lease (created at its first renewal, TTL/3 after the start, or with its
  report for a shorter attempt), its keeper, and the handler on the worker's executor;
- `_run`: the handler, with its dependencies' outputs read first; what it returns or raises becomes
  a report by the one mapping the Job-mode runner uses (`runner.outcome`);
- `abort`: a coroutine handler is cancelled; a synchronous one sees `ctx.aborted` turn true;
- `report`: the outcome on the attempt's Lease, tried until it lands or the lease lapses.

Every request first waits for the worker's own Lease (`lease.Gate`), and every time
is read and waited through the worker's `Clock`.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from cronoq.apiserver.errors import Conflict, NotFound, Refused
from cronoq.pod_protocol import API_VERSION, Annotation, Label, Owner, lease_body, served_lease_name
from cronoq.pod_protocol import report, tracecontext
from cronoq.pod_protocol.checkpoint import decode_checkpoint
from cronoq.pod_protocol.durations import parse as parse_duration
from cronoq.pod_protocol.handover import HandOver
from cronoq.pod_protocol.inputs import Input, encode_inputs, gated, inputs_of, parse_inputs
from cronoq.pod_protocol.report import Report
from cronoq.worker.backoff import Backoff, brief, retry_after
from cronoq.worker.checkpoints import CheckpointSlot
from cronoq.worker import metrics
from cronoq.worker.clock import Clock
from cronoq.worker.lease import LAST_TRY, MIN_REQUEST_TIMEOUT, Gate, KubeLease, LeaseKeeper, Renewal, renew_time
from cronoq.worker.runner import Abort, Context, outcome

log = logging.getLogger("cronoq.worker")

GROUP, VERSION = API_VERSION.split("/")
Handler = Callable[[Context], Any]
Key = tuple[str, int]
"""An attempt: its task's uid and its number."""
DEFAULT_LEASE_TTL = 30.0
"""An attempt's lease TTL when neither its task nor its pool says (the pool's default), for an
attempt recorded without its `Terms`."""
FINISHED_KEPT = 10_000
"""Attempts remembered as done, so a replayed watch event never starts one twice."""
POOL_REREAD = 30.0
"""Seconds a pool's leaseTTL is trusted before it is read again."""


@dataclass
class Running:
    """One attempt this worker runs."""

    context: Context
    abort: Abort
    keeper: LeaseKeeper | None
    lease: KubeLease
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


class Attempts:
    """The attempts one worker runs, on `concurrency` threads."""

    def __init__(self, *, pool: str, worker: str, namespace: str, ttl: float,
                 handler: Handler | Mapping[str, Handler], concurrency: int, coordination: Any, custom: Any,
                 clock: Clock, gate: Gate, drain_clock: Clock | None = None, traced: bool | None = None) -> None:
        self.pool, self.worker, self.namespace, self.ttl = pool, worker, namespace, ttl
        self.concurrency = concurrency
        self.traced = tracecontext.asked(os.environ) if traced is None else traced
        """The worker's OTEL_* environment turns traces on: handlers get the attempt's `traceparent`."""
        self.handler = handler
        self.coordination, self.custom = coordination, custom
        self.clock = clock
        self.gate = gate
        """The worker's own Lease first: every request waits at it (at most what it can afford)."""
        self.drain_clock = drain_clock or clock
        self.last_start = 0.0
        """When (on `drain_clock`) the last attempt was handed over, or the drain began: the drain
        waits until it is quiet."""
        self.executor = ThreadPoolExecutor(concurrency, thread_name_prefix="cronoq-handler")
        self.later = Later(clock.now)
        self.lock = threading.Lock()
        self.running: dict[Key, Running] = {}
        self.finished: OrderedDict[Key, None] = OrderedDict()
        self.settling: set[Key] = set()
        """Attempts reported while draining whose outcome the operator has not yet been seen to record."""
        self.draining = threading.Event()
        """Reports made from now on settle: the lifecycle waits until the operator records them."""
        self._closed = False
        """Start nothing more (the drain gave up on what still runs, or the worker's Lease was lost)."""
        self._pool_ttl: tuple[float | None, float] = (None, DEFAULT_LEASE_TTL)
        """(when read, the pool's leaseTTL in seconds)."""

    # ------------------------------------------------------------------ what the operator says

    def seen(self, task: HandOver, *, deleted: bool = False) -> None:
        """A look at a task handed to this worker (`deleted`: it left the watch's selection)."""
        with self.lock:
            for key in [key for key in self.settling if key[0] == task.uid]:
                if deleted or key[1] != task.attempt or not task.open:
                    self.settling.discard(key)  # the operator recorded how it ended
            for (uid, number), run in list(self.running.items()):
                if uid != task.uid:
                    continue
                if deleted or number != task.attempt or not task.open or task.cancel:
                    why = ("the task left Running or was deleted" if deleted else "cancelled" if task.cancel
                           else f"the operator ended it ({(task.current and task.current.reason) or 'a newer attempt'})")
                    run.stale = True
                    self.abort(run, why)
            if deleted or task.current is None:
                return
            key = (task.uid, task.attempt)
            if not task.handed_to(self.worker) or key in self.running or key in self.finished or self._closed:
                return
            self.start(task)
            self.last_start = self.drain_clock.now()

    def listed(self, uids: frozenset[str]) -> None:
        """A listing after a broken watch: what runs here but is no longer handed to us ended while
        we did not watch (its DELETED event was lost)."""
        with self.lock:
            for (uid, _), run in list(self.running.items()):
                if uid not in uids:
                    run.stale = True
                    self.abort(run, "the operator ended it while the worker's watch was broken")
            self.settling = {key for key in self.settling if key[0] in uids}

    # ------------------------------------------------------------------ one attempt

    def start(self, task: HandOver) -> Running:
        """Run the attempt `task` hands over (called with the lock held)."""
        assert task.current is not None
        record, number = task.current, task.attempt
        lease_name = served_lease_name(task.name, number, self.worker)
        ttl = self.lease_ttl(task)
        saved = CheckpointSlot()
        context = Context(id=task.uid, name=task.name, namespace=self.namespace, attempt=number,
                          payload=task.payload, lease_name=lease_name, lease_id=record.lease_id, lease_ttl=ttl,
                          worker=self.worker, checkpoint_data=decode_checkpoint(task.checkpoint), _checkpoints=saved,
                          traceparent=task.traceparent if self.traced else None)
        lease = KubeLease(self.namespace, lease_name, context.lease_id, owner=Owner(task.name, task.uid, number),
                          ttl=ttl, worker=self.worker, pool=self.pool, api=self.coordination, checkpoint=saved.newest)
        keeper = (LeaseKeeper(ttl, lambda timeout: self.renew(run, timeout), clock=self.clock.now, backoff=Backoff(),
                              on_late=metrics.late("attempt"))
                  if ttl > 0 else None)
        abort = Abort()
        context = replace(context, _keeper=keeper, _aborted=abort.event)
        run = Running(context, abort, keeper, lease, alive_until=self._lapses_at(task, ttl),
                      depends_on=task.depends_on, first_attempt_at=task.first_attempt_at)
        self.running[(task.uid, number)] = run
        self.executor.submit(self._run, run, self._handler_for(task.handler))
        return run

    def _run(self, run: Running, handler: Handler | None) -> None:
        context = run.context
        if run.keeper is not None:
            # The attempt's Lease is created at its first renewal, a third of its TTL from now: an
            # attempt shorter than that writes it once, with its report.
            keeper = run.keeper
            cancel = self.later.call(context.lease_ttl / 3, lambda: keeper.start(lambda why: self._lease_lost(run, why)))
        began = self.clock.now()
        try:
            result = (Report(report.PERMANENT, f"worker {self.worker} has no handler for this task's "
                             f"{Label.HANDLER} label") if handler is None else self._with_inputs(handler, run))
            if handler is not None:
                metrics.HANDLER_SECONDS.labels(self.namespace, self.pool, result.outcome).observe(
                    self.clock.now() - began)
        finally:
            if run.keeper is not None:
                cancel()
                run.keeper.stop()
        with self.lock:
            ours, run.claimed = not run.claimed, True
        if not ours:
            log.info("attempt %d of %s ended after the worker reported it aborted (%s); its result is dropped",
                     context.attempt, context.name, run.abort.why)
        else:
            if run.abort.aborted:
                log.info("attempt %d of %s ended after it was aborted (%s); reporting it anyway (stale)",
                         context.attempt, context.name, run.abort.why)
            self.report(run, result)
            run.reported.set()
        with self.lock:
            self.running.pop((context.id, context.attempt), None)
            self.finished[(context.id, context.attempt)] = None
            while len(self.finished) > FINISHED_KEPT:
                self.finished.popitem(last=False)

    def _with_inputs(self, handler: Handler, run: Running) -> Report:
        """Call the handler with its dependencies' outputs in `ctx.inputs`, read now (bounded and
        encoded as the operator hands them to a pod: `pod_protocol.inputs`)."""
        if run.depends_on:
            try:
                run.context = replace(run.context, inputs=self.inputs(run.depends_on, run.first_attempt_at))
            except Exception as err:  # noqa: BLE001 - the API server may be away: try again later
                return Report(report.RETRYABLE, f"could not read the inputs: {brief(err)}")
        return outcome(handler, run.context, run.abort)

    def inputs(self, depends_on: tuple[str, ...], first_attempt_at: str | None = None) -> dict[str, Input]:
        """Each dependency's phase and output, from its Task (a missing one has no phase). Read by
        name, so only from the Task that ended before the attempt's task first started (`gated`):
        one of the same name made since hands over its phase, not its output."""
        found: list[tuple[str, str | None, str | None]] = []
        for name in depends_on:
            try:
                dep = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "tasks", name,
                                                               _request_timeout=10)
            except NotFound:
                found.append((name, None, None))
                continue
            status = dep.get("status") or {}
            output = status.get("output") if status.get("outputAvailable") is True else None
            if not gated(status.get("finishedAt"), first_attempt_at):
                output = None
            found.append((name, status.get("phase") if isinstance(status.get("phase"), str) else None,
                          output if isinstance(output, str) else None))
        return parse_inputs(encode_inputs(inputs_of(found)))

    def abort(self, run: Running, why: str) -> None:
        """Stop the attempt's handler (called with the lock held)."""
        if not run.abort.abort(why):
            return
        if run.keeper is not None:
            run.keeper.stop()
        log.info("attempt %d of %s aborted: %s", run.context.attempt, run.context.name, why)

    def take_no_more(self) -> None:
        """Start no attempt from now on (the worker's Lease was lost)."""
        with self.lock:
            self._closed = True

    def abort_all(self, why: str) -> None:
        with self.lock:
            self._closed = True
            for run in list(self.running.values()):
                self.abort(run, why)

    def _lease_lost(self, run: Running, why: str) -> None:
        with self.lock:
            self.abort(run, f"its lease was lost: {why}")

    def renew(self, run: Running, timeout: float) -> Renewal:
        """An attempt's renewal, held back at the gate for all but what the request needs."""
        held = self.clock.now()
        self.gate.wait(timeout - MIN_REQUEST_TIMEOUT)
        sent = self.clock.now()
        result = run.lease.renew(max(timeout - (sent - held), MIN_REQUEST_TIMEOUT))
        if result.renewed:
            run.alive_until = sent + run.context.lease_ttl
        return result

    # ------------------------------------------------------------------ reports

    def report(self, run: Running, result: Report) -> None:
        """The outcome on the attempt's Lease: created with it when the attempt never heartbeat,
        else added to it, tested against our holder. Tried until it lands, for up to a TTL. While
        draining, the attempt is settling until the operator is seen to record it."""
        metrics.ATTEMPTS.labels(self.namespace, self.pool, result.outcome).inc()
        key = (run.context.id, run.context.attempt)
        settles = self.draining.is_set() and not run.stale
        if settles:
            with self.lock:
                self.settling.add(key)  # before the write: the operator may answer before it returns
        if not self.write_report(run, result) and settles:
            with self.lock:
                self.settling.discard(key)

    def write_report(self, run: Running, result: Report) -> bool:
        """True once the report is on the attempt's Lease."""
        context, text = run.context, result.encode().decode()
        # The report replaces the Lease's annotations: it keeps the newest checkpoint with it.
        saved = context._checkpoints.newest() if context._checkpoints is not None else None
        annotations = {**run.lease.annotations(), **({Annotation.CHECKPOINT: saved} if saved else {}),
                       Annotation.REPORT: text}
        deadline = self.clock.now() + max(run.context.lease_ttl, self.ttl)
        backoff = Backoff(first=0.2, most=5.0)
        while True:
            self.gate.wait((min(deadline, run.alive_until) - self.clock.now()) / 2)
            try:
                if not run.lease.held:
                    body = lease_body(self.namespace, context.lease_name, context.lease_id,
                                      Owner(context.name, context.id, context.attempt), context.lease_ttl, self.worker,
                                      self.pool)
                    stamp = renew_time()
                    body["spec"].update(acquireTime=stamp, renewTime=stamp)
                    body["metadata"]["annotations"] = annotations
                    try:
                        self.coordination.create_namespaced_lease(self.namespace, body, _request_timeout=10)
                        return True
                    except Conflict:
                        run.lease._held = True  # a renewal made it meanwhile: add the report to it
                patch = [{"op": "test", "path": "/spec/holderIdentity", "value": context.lease_id},
                         {"op": "add", "path": "/metadata/annotations", "value": annotations}]
                self.coordination.patch_namespaced_lease(context.lease_name, self.namespace, patch,
                                                         _content_type="application/json-patch+json", _request_timeout=10)
                return True
            except (NotFound, Refused) as err:  # the task went, or another attempt holds the Lease: nobody listens
                log.info("the report of attempt %d of %s has no Lease to go to (%s)", context.attempt,
                         context.name, err.status)
                return False
            except Exception as err:  # noqa: BLE001 - throttled, or the network: try again
                problem: Exception = err
            if self.clock.now() >= deadline:
                log.error("could not report attempt %d of %s: %s", context.attempt, context.name, problem)
                return False
            now = self.clock.now()  # back off, as long as the attempt's lease can afford it
            again = min(backoff.until(now, retry_after(problem), run.alive_until - LAST_TRY), deadline)
            log.warning("reporting attempt %d of %s failed (%s); again in %.1fs", context.attempt, context.name,
                        brief(problem), again - now)
            self.clock.sleep(max(again - now, 0.0))

    # ------------------------------------------------------------------ the drain's view

    def in_flight(self) -> int:
        """Attempts whose handlers run now (read unlocked by a scrape: a dict's size is one read)."""
        return len(self.running)

    def free(self) -> int:
        """Attempts this worker could take now: none while it drains or after it closed."""
        if self.draining.is_set() or self._closed:
            return 0
        return max(self.concurrency - len(self.running), 0)

    def busy(self) -> bool:
        with self.lock:
            return bool(self.running)

    def settled(self) -> bool:
        """The operator has been seen to record every report made while draining."""
        with self.lock:
            return not self.settling

    def close(self, why: str) -> None:
        """Start nothing more; abort what still runs and report it retryable, not waiting for its
        handler (a thread cannot be stopped); wait for reports already under way."""
        with self.lock:
            self._closed = True
            left = list(self.running.values())
            ours = []
            for run in left:
                self.abort(run, why)
                if not run.claimed:
                    run.claimed = True
                    ours.append(run)
        for run in ours:
            self.report(run, Report(report.RETRYABLE, f"aborted: {run.abort.why}"))
            run.reported.set()
        for run in left:
            self.clock.wait(run.reported, max(run.context.lease_ttl, self.ttl))

    def shutdown(self) -> None:
        """Let go of the handlers' threads (a handler still running is not waited for: its result
        is dropped) and stop the delayed calls."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.later.stop()

    # ------------------------------------------------------------------ helpers

    def _handler_for(self, label: str) -> Handler | None:
        if callable(self.handler):
            return self.handler
        return self.handler.get(label)

    def lease_ttl(self, task: HandOver) -> float:
        """The attempt's lease TTL in seconds, as the operator stamped it on the attempt's record.
        A record without it was written by an operator older than the stamp: then the TTL is
        derived here as that operator did (the task's leaseTTL, else its pool's), and only here."""
        terms = task.current.terms if task.current is not None else None
        if terms is not None:
            return terms.lease_ttl
        if task.lease_ttl is not None:
            try:
                return parse_duration(task.lease_ttl).total_seconds()
            except ValueError as err:  # the API server checks the grammar: never, unless its CRD is older
                log.warning("an attempt's task has an unreadable leaseTTL (%s): using its pool's", err)
        return self._pool_lease_ttl()

    def _pool_lease_ttl(self) -> float:
        """The pool's leaseTTL (re-read at most every 30 s: a pool's spec may change)."""
        read_at, ttl = self._pool_ttl
        if read_at is None or self.clock.now() - read_at > POOL_REREAD:
            try:
                pool = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "taskpools", self.pool,
                                                                _request_timeout=10)
                ttl = parse_duration((pool.get("spec") or {}).get("leaseTTL", f"{DEFAULT_LEASE_TTL:g}s")).total_seconds()
                self._pool_ttl = (self.clock.now(), ttl)
            except Exception as err:  # noqa: BLE001 - keep what we knew
                log.warning("could not read pool %s: %s", self.pool, err)
        return ttl

    def _lapses_at(self, task: HandOver, ttl: float) -> float:
        """When (monotonic) an attempt's lease lapses unless renewed: a TTL after the operator handed
        it over (its `dispatchedAt`, on the operator's clock), which may be a while ago when this
        worker's watch was backing off; a TTL from now when the record does not say."""
        now = self.clock.now()
        handed = task.current.dispatched_at if task.current is not None else None
        ago = (self.clock.wall() - handed).total_seconds() if handed is not None else 0.0
        return now + ttl - min(max(ago, 0.0), ttl)


class Later:
    """Calls made after a delay, all from one daemon thread: an attempt's heartbeats start a third
    of its TTL after it does, and most attempts end before. A `threading.Timer` per attempt cost a
    thread started and stopped per task (~160 µs of CPU, issue 42). `stop()` ends the thread."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._due: list[list[Any]] = []  # a heap of [when, order, call or None once cancelled]
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def call(self, delay: float, call: Callable[[], Any]) -> Callable[[], None]:
        """Run `call` after `delay` seconds unless the returned function is called first."""
        entry = [self._clock() + delay, next(self._order), call]
        with self._cond:
            heapq.heappush(self._due, entry)
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="cronoq-later", daemon=True)
                self._thread.start()
            elif self._due[0] is entry:
                self._cond.notify()

        def cancel() -> None:
            entry[2] = None

        return cancel

    def stop(self, timeout: float = 5.0) -> None:
        """Run nothing more; end the thread (waiting at most `timeout` for a call under way)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
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
