"""Keeping an attempt's heartbeat Lease (DESIGN §6), shared by the SDK and the heartbeat sidecar.

The Lease is renewed every TTL/3 by bumping `spec.renewTime`. A renewal is a JSON patch that
first tests `spec.holderIdentity` against this attempt's lease id, so it can never renew a
Lease another attempt has taken over; the operator only watches renewTime change.

Self-fencing: when a newer attempt may already be running, this one must stop. That is the
case at once when the Lease names another holder or is gone (404), and when no renewal has
succeeded for a whole TTL (measured on the monotonic clock from when the last successful
renewal was sent; the first is sent at start). A failed renewal is retried at the next tick; a
keeper given a `Backoff` (a pull worker's) retries it sooner, after the backoff's jittered wait and
not before the server's Retry-After as long as the lease can afford it, else after a part of the
time left before the deadline: two refusals in a row at the ticks would otherwise lapse the lease.

`Schedule` holds those decisions with the clock passed in; `LeaseKeeper` runs them in a loop
(on a background thread for the SDK, in the foreground for the sidecar); `KubeLease` is the
renewal against the API server (through worker/api.py, over cronoq's one client).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from cronoq.apiserver.errors import ApiError, Conflict, NotFound, Refused
from cronoq.pod_protocol import Annotation, Owner, lease_body
from cronoq.worker.backoff import Backoff, retry_after
from cronoq.worker.clock import SYSTEM, Clock

MIN_REQUEST_TIMEOUT = 0.5
"""Seconds a renewal request may always take, however close the deadline."""
LAST_TRY = MIN_REQUEST_TIMEOUT
"""Seconds before its lease lapses that a write is last sent (what a request may always take)."""


@dataclass(frozen=True)
class Renewal:
    """What one renewal attempt found."""

    renewed: bool
    lost: bool = False
    """The Lease names another holder or is gone: fence now, retrying cannot help."""
    detail: str = ""
    retry_after: float | None = None
    """Seconds the API server asked to wait before trying again (Retry-After of a 429 or 5xx)."""

    @classmethod
    def ok(cls) -> Renewal:
        return cls(True)

    @classmethod
    def failed(cls, detail: str, retry_after: float | None = None) -> Renewal:
        return cls(False, False, detail, retry_after)

    @classmethod
    def gone(cls, detail: str) -> Renewal:
        return cls(False, True, detail)


class Schedule:
    """When to renew and when to give up, for a lease of `ttl` seconds kept from `start`."""

    def __init__(self, ttl: float, start: float) -> None:
        if ttl <= 0:
            raise ValueError("a lease schedule needs a TTL > 0")
        self.ttl = ttl
        self.interval = ttl / 3
        self.deadline = start + ttl
        self.next_at = start

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def expired(self, now: float) -> bool:
        return now >= self.deadline

    def late(self, sent_at: float) -> bool:
        """A renewal sent at `sent_at` left the lease less than half its TTL: the ones due before it
        failed or were held up (throttling, a busy process), and a little more would have lost it."""
        return self.deadline - sent_at < self.ttl / 2

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at `sent_at` succeeded: the lease is good for a TTL from then."""
        self.deadline = max(self.deadline, sent_at + self.ttl)
        self.next_at = sent_at + self.interval

    def failed(self, sent_at: float) -> None:
        """A renewal sent at `sent_at` failed: try again at the next tick (at once if that passed
        while it failed). An extra renewal between ticks leaves the ticks alone."""
        if sent_at >= self.next_at:
            self.next_at += self.interval

    def wait(self, now: float) -> float:
        """Seconds until something is due: a renewal or the deadline."""
        return max(0.0, min(self.next_at, self.deadline) - now)

    def request_timeout(self, now: float) -> float:
        """How long a renewal sent now may take: no longer than a tick, nor past the deadline."""
        return max(MIN_REQUEST_TIMEOUT, min(self.interval, self.deadline - now))


class LeaseKeeper:
    """Renews a lease on `Schedule` until stopped or lost.

    `renew(timeout)` makes one renewal and returns a `Renewal` (it must not raise). `clock` is
    monotonic seconds; `wait(seconds)` (called with the keeper's lock held) defaults to waiting
    on the keeper's condition, so that `stop()` and `renew_now()` wake it. With a `backoff`, a
    failed renewal is retried after the backoff's wait (at least the server's Retry-After) instead
    of at the next tick, but sooner when the lease cannot afford to wait that long
    (`Backoff.until`, with its last chance `LAST_TRY` seconds before the deadline). `on_late` is
    called after each renewal that succeeded late (`Schedule.late`): a pull worker counts them.
    """

    def __init__(self, ttl: float, renew: Callable[[float], Renewal], *, clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], Any] | None = None, backoff: Backoff | None = None,
                 on_late: Callable[[], Any] | None = None) -> None:
        self.ttl = ttl
        self._on_late = on_late
        self._renew = renew
        self._backoff = backoff
        self._clock = clock
        self._cond = threading.Condition()
        self._wait = wait or self._cond.wait
        self._stopping = False
        self._finished = False
        self._requested = 0  # renew_now() tickets handed out
        self._served = 0  # tickets covered by a renewal that has completed
        self._renewed = 0  # tickets covered by a renewal that succeeded
        self.renewals = 0
        """Successful renewals so far."""
        self.last_error = ""

    def run(self) -> str | None:
        """Keep the lease. Returns None once `stop()` was called, or why the lease was lost."""
        with self._cond:
            try:
                return self._loop(Schedule(self.ttl, self._clock()))
            finally:
                self._finished = True
                self._cond.notify_all()

    def _loop(self, schedule: Schedule) -> str | None:
        retry_at: float | None = None  # backing off after a failure: the next try, instead of the next tick
        while not self._stopping:
            now = self._clock()
            if schedule.expired(now):
                why = f"no successful renewal for {self.ttl:g}s (the lease TTL)"
                return why + (f"; last error: {self.last_error}" if self.last_error else "")
            ticket = self._requested
            due = schedule.due(now) if retry_at is None else now >= retry_at
            if not (due or ticket > self._served):
                self._wait(schedule.wait(now) if retry_at is None else min(retry_at, schedule.deadline) - now)
                continue
            timeout = schedule.request_timeout(now)
            self._cond.release()  # stop() and renew_now() must not wait for the API server
            try:
                result = self._renew(timeout)
            finally:
                self._cond.acquire()
            self._served = ticket
            if result.lost:
                return result.detail
            if result.renewed:
                if self._on_late is not None and schedule.late(now):
                    self._on_late()
                schedule.renewed(now)
                self.renewals += 1
                self._renewed = ticket
                retry_at = None
                if self._backoff is not None:
                    self._backoff.reset()
            else:
                schedule.failed(now)
                self.last_error = result.detail
                if self._backoff is not None:
                    retry_at = self._retry_at(schedule, result)
            self._cond.notify_all()
        return None

    def _retry_at(self, schedule: Schedule, result: Renewal) -> float:
        """When to try again after a failed renewal: after the backoff (at least the server's
        Retry-After) as long as the lease can afford it, else sooner (`Backoff.until`)."""
        assert self._backoff is not None
        now = self._clock()
        return self._backoff.until(now, result.retry_after, schedule.deadline - LAST_TRY)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def renew_now(self, timeout: float | None = None) -> bool:
        """Ask for a renewal now and wait for it (at most `timeout` seconds, default the TTL).
        True when it succeeded; False when it failed, timed out, or the keeper is not running."""
        with self._cond:
            if self._finished or self._stopping:
                return False
            self._requested += 1
            ticket = self._requested
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._served >= ticket or self._finished,
                                self.ttl if timeout is None else timeout)
            return self._renewed >= ticket

    def start(self, on_lost: Callable[[str], Any]) -> threading.Thread:
        """Run on a daemon thread; call `on_lost(why)` from it if the lease is lost."""

        def main() -> None:
            try:
                why = self.run()
            except BaseException as err:  # a bug here must not leave the attempt running unleased
                why = f"the heartbeat thread failed: {err!r}"
            if why is not None:
                on_lost(why)

        thread = threading.Thread(target=main, name="cronoq-heartbeat", daemon=True)
        thread.start()
        return thread


class Gate:
    """A pull worker's own Lease goes first: the gate is open while its renewal succeeds and shut
    while it is refused, and the worker's other requests (its attempts' renewals, its reports, its
    watch) wait at it, each for at most the time it can afford: they share the worker's flow at the
    API server and are worth nothing once the worker is presumed dead."""

    def __init__(self, clock: Clock = SYSTEM) -> None:
        self._clock = clock
        self._open = threading.Event()

    def open(self) -> None:
        self._open.set()

    def shut(self) -> None:
        self._open.clear()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def wait(self, budget: float) -> None:
        """Wait while the gate is shut, at most `budget` seconds."""
        if budget > 0:
            self._clock.wait(self._open, budget)


def renew_time(now: datetime | None = None) -> str:
    """RFC 3339 with microseconds in UTC, as Kubernetes MicroTime is written."""
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeLease:
    """Renews Lease `namespace/name` while it is held by `holder`.

    The attempt creates its own Lease on its first renewal (the operator writes none: one write
    per attempt less); a Lease that exists already is ours if it names our holder. Once renewed,
    a missing Lease means the task is gone: fence.

    Credentials: the kubeconfig at `kubeconfig` when given (KUBECONFIG), else the pod's
    ServiceAccount (in-cluster), else the default kubeconfig. Loaded at the first renewal, so a
    failure to load counts as a failed renewal like any other.

    `checkpoint()` (when given) says the attempt's newest checkpoint (compact JSON, or None): a
    renewal carries it, in the same write, when it differs from the one last carried, so a
    checkpoint costs no write of its own and lands at most once per renewal.
    """

    def __init__(self, namespace: str, name: str, holder: str, *, kubeconfig: str | None = None,
                 owner: Owner | None = None, ttl: float = 0.0, worker: str | None = None, pool: str | None = None,
                 api: Any = None, checkpoint: Callable[[], str | None] | None = None) -> None:
        self.namespace, self.name, self.holder = namespace, name, holder
        self._kubeconfig = kubeconfig
        self._owner, self._ttl, self._worker, self._pool = owner, ttl, worker, pool
        self._held = False
        """A renewal has succeeded: from now on a missing Lease means the task is gone."""
        self._api: Any = api
        self._checkpoint = checkpoint
        self.carried: str | None = None
        """The checkpoint the Lease carries (the last one a successful write sent)."""

    def annotations(self) -> dict[str, str]:
        """The attempt's annotations a write of the whole map must keep (its checkpoint)."""
        return {Annotation.CHECKPOINT: self.carried} if self.carried is not None else {}

    def renew(self, timeout: float) -> Renewal:
        patch = [{"op": "test", "path": "/spec/holderIdentity", "value": self.holder},
                 {"op": "add", "path": "/spec/renewTime", "value": renew_time()}]
        newest = self._checkpoint() if self._checkpoint is not None else None
        if newest is not None and newest != self.carried:
            # The whole map: an attempt's Lease has no annotation of anyone else's to keep.
            patch.append({"op": "add", "path": "/metadata/annotations", "value": {Annotation.CHECKPOINT: newest}})
        try:
            self._coordination().patch_namespaced_lease(
                self.name, self.namespace, patch, _content_type="application/json-patch+json",
                _request_timeout=timeout)
        except NotFound:
            if not self._held and self._owner is not None and self._owner.task_uid:
                return self._create(timeout)
            return Renewal.gone(f"the Lease {self.namespace}/{self.name} is gone")
        except Refused:  # the holderIdentity test failed
            return Renewal.gone(f"the Lease {self.namespace}/{self.name} is no longer held by {self.holder} "
                                f"(another attempt took over)")
        except ApiError as err:
            return Renewal.failed(f"renewing the Lease {self.namespace}/{self.name}: {err.status} {err.reason}",
                                  retry_after(err))
        except Exception as err:  # network, TLS, credentials: retried at the next tick
            return Renewal.failed(f"renewing the Lease {self.namespace}/{self.name}: {_cause(err)}")
        self._held = True
        if newest is not None:
            self.carried = newest
        return Renewal.ok()

    def _create(self, timeout: float) -> Renewal:
        """This attempt's Lease, held by its lease id and owned by its task."""
        body = lease_body(self.namespace, self.name, self.holder, self._owner, self._ttl, self._worker, self._pool)
        now = renew_time()
        body["spec"].update(acquireTime=now, renewTime=now)
        newest = self._checkpoint() if self._checkpoint is not None else None
        if newest is not None:
            body["metadata"]["annotations"] = {Annotation.CHECKPOINT: newest}
        try:
            self._coordination().create_namespaced_lease(self.namespace, body, _request_timeout=timeout)
        except Conflict:  # created meanwhile (an earlier try whose answer was lost): renew it
            return Renewal.failed("the Lease was created meanwhile; renewing it at the next tick")
        except ApiError as err:
            return Renewal.failed(f"creating the Lease {self.namespace}/{self.name}: {err.status} {err.reason}",
                                  retry_after(err))
        except Exception as err:
            return Renewal.failed(f"creating the Lease {self.namespace}/{self.name}: {_cause(err)}")
        self._held = True
        self.carried = newest
        return Renewal.ok()

    @property
    def held(self) -> bool:
        """The Lease exists as this holder's (it was created or renewed by us)."""
        return self._held

    def _coordination(self) -> Any:
        if self._api is None:
            self._api = worker_api(self._kubeconfig)
        return self._api


def worker_api(kubeconfig: str | None, clock: Callable[[], float] = time.monotonic) -> Any:
    """A worker's requests (worker/api.py), which retry nothing (callers retry on their own
    schedule). Credentials: the kubeconfig at `kubeconfig` when given (KUBECONFIG), else the pod's
    ServiceAccount (in-cluster), else the default kubeconfig."""
    from cronoq.apiserver.config import connect
    from cronoq.worker.api import WorkerApi

    return WorkerApi(connect(kubeconfig), clock)


def _cause(err: Exception) -> str:
    from urllib3.exceptions import MaxRetryError

    cause = err.reason if isinstance(err, MaxRetryError) and err.reason is not None else err
    return f"{type(cause).__name__}: {cause}"
