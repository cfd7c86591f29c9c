"""A pull worker's life: start (announce itself with its own Lease, keep it, watch), drain (room 0,
let what runs finish within grace, report the rest aborted, wait for the operator to record the
reports) and stop (its threads and executor let go, its Lease deleted); or fence, when its own Lease
is lost (every attempt aborted, exit 3). What happens to each attempt is `attempts.py`'s, what the
operator says `watch.py`'s: this module only wires them and says when each part starts and stops.

Its own Lease goes first: while its renewal is refused, every other request of the worker (its
attempts' renewals, its reports, its watch) holds back at its `lease.Gate`, for they share its flow
at the API server and are worth nothing once the worker is presumed dead.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from contextlib import closing
from typing import Any, Callable, Mapping, NoReturn

from cronoq.pod_protocol import Annotation, worker_lease_body
from cronoq.pod_protocol import report
from cronoq.worker.attempts import Attempts, Handler
from cronoq.worker.backoff import Backoff, brief, retry_after
from cronoq.worker import metrics
from cronoq.worker.clock import SYSTEM, Clock
from cronoq.apiserver.errors import ApiError, Conflict, Throttled
from cronoq.worker.lease import Gate, KubeLease, LeaseKeeper, Renewal, renew_time, worker_api
from cronoq.worker.watch import Listed, Watch

log = logging.getLogger("cronoq.worker")

QUIET = 1.0
"""Seconds a draining worker waits after its last hand-over before it stops: the operator may
hand over a few attempts before it reads the worker's room of 0."""
SETTLE = 5.0
"""Seconds a drained worker waits at most for the operator to record what it reported while
draining, before it deletes its Lease: the operator reads that deletion on another watch than the
reports, and a worker gone before its report was read would have its attempt end LeaseExpired."""
TICK = 0.1
"""Seconds between looks at what still runs while draining."""


class Worker:
    """One pull worker serving `pool`: `run()` until `drain()` (0) or a lost Lease (exit 3).

    `clock` is every part's (the watch's, the attempts' and their Leases' keepers'); `drain_clock`
    (default `clock`) the drain's own waits and its measure of quiet, which a test may fake alone."""

    def __init__(self, pool: str, handler: Handler | Mapping[str, Handler], *, concurrency: int, namespace: str,
                 name: str, ttl: float, grace: float, kubeconfig: str | None = None, coordination: Any = None,
                 custom: Any = None, clock: Clock = SYSTEM, drain_clock: Clock | None = None) -> None:
        if coordination is None or custom is None:
            api = worker_api(kubeconfig, clock.now)
            coordination, custom = coordination or api, custom or api
        self.pool, self.namespace, self.name = pool, namespace, name
        self.concurrency, self.ttl, self.grace = concurrency, ttl, grace
        self.coordination = coordination
        self.clock = clock
        self.drain_clock = drain_clock or clock
        self.stopping = threading.Event()
        """Set by `drain()` or a lost Lease: `run()` goes on to stop."""
        self.done = threading.Event()
        """The worker's Lease is no longer kept: the watch ends."""
        self.gate = Gate(clock)
        """Shut while the worker's own Lease renewal is being refused: its other requests hold back."""
        self.lost: str | None = None
        """Why the worker's own Lease was lost, once it was."""
        self.attempts = Attempts(pool=pool, worker=name, namespace=namespace, ttl=ttl, handler=handler,
                                 concurrency=concurrency, coordination=coordination, custom=custom, clock=clock,
                                 gate=self.gate, drain_clock=self.drain_clock)
        self.watch = Watch(custom, namespace=namespace, pool=pool, worker=name, clock=clock, done=self.done,
                           gate=self.gate, budget=ttl)
        self._keeper: LeaseKeeper | None = None
        self._renewing: threading.Thread | None = None
        self._unlisted: Callable[[], None] = lambda: None
        """Takes this worker out of the in-flight and free-slots gauges."""

    # ------------------------------------------------------------------ the whole life

    def run(self) -> int:
        """Start, serve until told to stop, drain, stop. 0, or the process ends (exit 3) if fenced."""
        if not self.start():
            self.attempts.shutdown()
            return 0  # told to stop before the API server let it in
        self.stopping.wait()
        if self.lost is None:
            self.drain_now()  # our own Lease is renewed meanwhile: the operator must not presume us dead
        return self.stop()

    def start(self) -> bool:
        """Announce the worker, keep its Lease, watch. False if told to stop before it was let in."""
        if not self._announce():
            return False
        own = KubeLease(self.namespace, self.name, self.name, api=self.coordination)
        own._held = True  # created just now: from here a missing Lease means it was taken from us
        self._keeper = LeaseKeeper(self.ttl, self._renew_own(own), clock=self.clock.now, backoff=Backoff(),
                                   on_late=metrics.late("worker"))
        self._renewing = self._keeper.start(self._fence)
        threading.Thread(target=self._follow, name="cronoq-worker-watch", daemon=True).start()
        self._unlisted = metrics.live(metrics.Room(self.namespace, self.pool, self.attempts.in_flight,
                                                   self.attempts.free))
        log.info("worker %s serves pool %s/%s with room for %d", self.name, self.namespace, self.pool, self.concurrency)
        return True

    def stop(self) -> int:
        """Stop keeping the worker's Lease and end the watch; fence if the Lease was lost; let go of
        the handlers' threads; delete the Lease. The watch's thread (a daemon) ends at its next event:
        it may be inside a watch request the server holds open."""
        if self._keeper is not None and self._renewing is not None:
            self._keeper.stop()
            self._renewing.join(self.ttl / 3 + 1)  # no renewal may race the delete below
        self.done.set()
        self._unlisted()
        if self.lost is not None:
            self._fenced()
        self.attempts.shutdown()
        try:
            self.coordination.delete_namespaced_lease(self.name, self.namespace, _request_timeout=5)
        except Exception as err:  # noqa: BLE001 - it lapses on its own
            log.warning("could not delete the worker's Lease: %s", err)
        return 0

    # ------------------------------------------------------------------ drain

    def drain(self) -> None:
        """Take nothing new (room 0 on the Lease), let running handlers end, then stop (a signal
        handler calls this; `run()` does the rest)."""
        if self.attempts.draining.is_set():
            return
        self.attempts.draining.set()
        self.attempts.last_start = self.drain_clock.now()
        try:
            patch = {"metadata": {"annotations": {Annotation.CAPACITY: "0"}}}
            self.coordination.patch_namespaced_lease(self.name, self.namespace, patch, _request_timeout=5)
        except Exception as err:  # noqa: BLE001 - the operator may hand over a few more; they are retried
            log.warning("could not say the worker drains: %s", err)
        self.stopping.set()

    def drain_now(self) -> None:
        """Run what was handed over (what came before the operator read our room of 0 too) until
        each attempt ends or grace passes; report the rest aborted; then wait, briefly, until the
        operator has recorded what we reported. Returns early if our own Lease is lost."""
        clock = self.drain_clock
        deadline = clock.now() + self.grace
        while self.lost is None:
            now = clock.now()
            if now >= deadline or (not self.attempts.busy() and now - self.attempts.last_start >= QUIET):
                break
            clock.sleep(min(TICK, deadline - now))
        if self.lost is not None:
            return
        self.attempts.close(f"the worker stopped (grace {self.grace:g}s passed)")
        settle_by = clock.now() + SETTLE
        while self.lost is None and clock.now() < settle_by:
            if self.attempts.settled():
                return
            clock.sleep(TICK)
        if self.lost is None:
            log.warning("the operator was not seen to record attempts %s in %gs; the worker stops anyway",
                        sorted(self.attempts.settling), SETTLE)

    # ------------------------------------------------------------------ its own Lease

    def _announce(self) -> bool:
        """Create the worker's Lease, backing off while the API server refuses or cannot be reached
        (a fleet started under throttling must not die of its first 429). False if told to stop."""
        backoff = Backoff()
        while not self.stopping.is_set():
            body = worker_lease_body(self.namespace, self.name, self.pool, self.concurrency, self.ttl)
            now = renew_time()
            body["spec"].update(acquireTime=now, renewTime=now)
            try:
                self.coordination.create_namespaced_lease(self.namespace, body, _request_timeout=10)
                break
            except Conflict:
                if backoff.failures:  # an earlier try landed; renewals check it is ours
                    break
                raise
            except ApiError as err:
                if not isinstance(err, Throttled) and err.status < 500:
                    raise
                problem: Exception = err
            except Exception as err:  # noqa: BLE001 - network: try again
                problem = err
            wait = backoff.wait(retry_after(problem))
            log.warning("announcing the worker failed (%s); again in %.1fs", brief(problem), wait)
            self.clock.wait(self.stopping, wait)
        self.gate.open()
        return not self.stopping.is_set()

    def _renew_own(self, own: KubeLease) -> Callable[[float], Renewal]:
        """The worker's own renewal, which tells the worker's other requests when to hold back."""
        def renew(timeout: float) -> Renewal:
            result = own.renew(timeout)
            if result.renewed:
                self.gate.open()
            else:
                self.gate.shut()
            return result
        return renew

    def _fence(self, why: str) -> None:
        self.lost = why
        self.attempts.take_no_more()
        self.stopping.set()

    def _fenced(self) -> NoReturn:
        log.error("worker %s lost its Lease (%s): every attempt aborted", self.name, self.lost)
        self.attempts.abort_all(f"the worker's Lease was lost: {self.lost}")
        sys.stdout.flush()
        os._exit(report.EXIT_LEASE_LOST)  # a handler thread must not run on past the fence

    # ------------------------------------------------------------------ the watch, handed to the attempts

    def _follow(self) -> None:
        """Hand what the watch sees to the attempts, until the worker stops."""
        with closing(self.watch.events()) as events:
            for event in events:
                if self.done.is_set():
                    return
                try:
                    if isinstance(event, Listed):
                        self.attempts.listed(event.uids)
                    else:
                        self.attempts.seen(event.task, deleted=event.deleted)
                except Exception as err:  # noqa: BLE001 - the watch lists again, as after a broken watch
                    log.warning("handling a task event failed (%s): listing again", brief(err))
                    self.watch.relist()
