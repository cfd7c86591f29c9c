"""The leader-election loop around engine.election: get the Lease every retry period, take it when
the core says we may, renew it while we lead, and when a renewal does not succeed within the
renew deadline, stop acting at once and exit (to be restarted as a follower).

`Leadership.valid()` is checked right before every write, so a leader that was frozen (SIGSTOP,
a long GC pause) and wakes up past its deadline writes nothing, even before this loop runs.
"""
from __future__ import annotations

import asyncio
import copy
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Coroutine

from kubernetes import client
from kubernetes.client.rest import ApiException

from cronoq.engine import election

log = logging.getLogger(__name__)


def _record(lease: client.V1Lease | None) -> election.LeaseRecord | None:
    if lease is None:
        return None
    spec = lease.spec
    renew = spec.renew_time.isoformat() if spec.renew_time else None
    return election.LeaseRecord(holder=spec.holder_identity, renew_time=renew,
                                transitions=spec.lease_transitions or 0,
                                duration=float(spec.lease_duration_seconds or 15))


@dataclass
class Leadership:
    api: client.ApiClient
    namespace: str
    name: str = "cronoq-leader"
    identity: str = field(default_factory=lambda: f"{os.environ.get('POD_NAME') or os.uname().nodename}_{uuid.uuid4().hex[:8]}")
    timing: election.ElectionTiming = field(default_factory=election.ElectionTiming)
    epoch: int | None = None
    last_renewed: float | None = None
    _elected_now: bool = False
    """Set by the last acquire-or-renew when it took the Lease (a new term began)."""

    def __post_init__(self) -> None:
        # A client of its own without urllib3's retries: a retried request would run past the
        # attempt's budget and hold the election's one thread; the loop itself retries.
        configuration = copy.copy(self.api.configuration)
        configuration.retries = False
        self.coordination = client.CoordinationV1Api(client.ApiClient(configuration))
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cronoq-election")
        self._observed: election.Observed | None = None
        self._held: client.V1Lease | None = None
        """The Lease as we last wrote it, while we hold it: renewed with one PUT, no GET first."""
        self._deadline = 0.0
        self._starting: asyncio.Task[None] | None = None
        """The new leader's start (`on_elected`), running beside the renewals."""

    @property
    def _timeout(self) -> tuple[float, float]:
        """A request about the Lease gives up by the current attempt's deadline: an API server that
        accepts connections but cannot answer (etcd away) counts as a failed renewal in time, and a
        slow one that answers (2 s a round trip) still renews."""
        left = max(self._deadline - time.monotonic(), 0.05)
        return (left, left)

    def _budget(self) -> float:
        """How long one acquire-or-renew may take. While leading: until the renew deadline (never
        a fixed fraction of it, which a slow link would exceed on every attempt, so the leader lost
        its Lease though every renewal would have landed in time). Campaigning: the renew deadline."""
        if self.last_renewed is None:
            return self.timing.renew_deadline
        return max(self.last_renewed + self.timing.renew_deadline - time.monotonic(), 0.05)

    def valid(self) -> bool:
        return election.still_leading(self.last_renewed, time.monotonic(), self.timing)

    async def run(self, on_elected: Callable[[int], Coroutine[Any, Any, None]], on_lost: Callable[[], None]) -> None:
        """Campaign until elected, start `on_elected(epoch)` (as a task of its own), then renew
        until we cannot."""
        while True:
            try:
                # A thread of its own (never queued behind reconciles blocked on a sick API server),
                # and never waited on past the renew deadline.
                budget = self._budget()
                self._deadline = time.monotonic() + budget
                held = await asyncio.wait_for(
                    asyncio.get_running_loop().run_in_executor(self._executor, self._try_acquire_or_renew),
                    timeout=budget)
            except Exception as err:  # noqa: BLE001 - the API server unreachable or slow: a failed renewal
                log.warning("renewing the leader Lease %s/%s failed: %r", self.namespace, self.name, err)
                held = False
            if held:
                if self.epoch is not None and self._elected_now:
                    log.info("elected leader %s with epoch %d (Lease %s/%s)", self.identity, self.epoch,
                             self.namespace, self.name)
                    # Not awaited: what the new leader does first (waiting for every watch to
                    # list, which takes longer than the renew deadline over thousands of finished
                    # tasks) must never hold its renewals.
                    self._starting = asyncio.create_task(on_elected(self.epoch), name="cronoq-elected")
                    self._starting.add_done_callback(lambda task: _failed_start(task, on_lost))
            elif self.last_renewed is not None and not self.valid():
                log.error("leadership lapsed: no renewal of Lease %s/%s within %.0fs; stopping", self.namespace,
                          self.name, self.timing.renew_deadline)
                on_lost()
                return
            await asyncio.sleep(self.timing.retry_period)

    def release(self) -> None:
        """On a clean shutdown, give the Lease up, so a standby takes over at once instead of
        waiting out the lease duration. Only while we still hold it validly."""
        if not self.valid():
            return
        self._deadline = time.monotonic() + self.timing.renew_deadline / 3
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace, _request_timeout=self._timeout)
            if lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.renew_time = None
            lease.spec.acquire_time = None
            self.coordination.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=self._timeout)
            log.info("released the leader Lease %s/%s", self.namespace, self.name)
        except ApiException as err:
            log.warning("could not release the leader Lease: %s", err.reason)
        self.last_renewed, self._held = None, None

    def _try_acquire_or_renew(self) -> bool:
        self._elected_now = False
        now = time.monotonic()
        if self._held is not None and self.valid():
            if self._renew_held():
                return True
            self._held = None  # changed since we wrote it, or the PUT failed: read it first
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace, _request_timeout=self._timeout)
        except ApiException as err:
            if err.status != 404:
                log.warning("reading the leader Lease failed: %s", err.reason)
                return False
            lease = None
        record = _record(lease)
        if record is not None:
            self._observed = election.observe(self._observed, record, now)
        if not election.may_acquire(self.identity, record, self._observed, now):
            return False
        transitions, epoch = election.epoch_after_acquiring(self.identity, record)
        stamp = datetime.now(timezone.utc)
        spec = client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=int(self.timing.lease_duration),
                                  renew_time=stamp, lease_transitions=transitions,
                                  acquire_time=stamp if record is None or record.holder != self.identity else lease.spec.acquire_time)
        # Our leadership counts from the moment the write leaves (no replica can see it earlier),
        # not from the read before it: on a slow link the read alone takes a round trip.
        sent = time.monotonic()
        try:
            if lease is None:
                written = self.coordination.create_namespaced_lease(self.namespace, client.V1Lease(
                    metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace), spec=spec),
                    _request_timeout=self._timeout)
            else:
                lease.spec = spec  # the PUT carries the resourceVersion we read: a racing taker wins or we do
                written = self.coordination.replace_namespaced_lease(self.name, self.namespace, lease,
                                                                     _request_timeout=self._timeout)
        except ApiException as err:
            if err.status not in (409, 404):
                log.warning("renewing the leader Lease failed: %s", err.reason)
            return False
        self._held = written
        self.last_renewed = sent
        if self.epoch is None:
            self.epoch, self._elected_now = epoch, True
        return True

    def _renew_held(self) -> bool:
        """Renew the Lease we hold with one PUT of it as we last wrote it (its resourceVersion as
        precondition, so a Lease someone else changed since is never overwritten: 409, then the
        slow path reads it). One round trip instead of two."""
        lease = self._held
        lease.spec.renew_time = datetime.now(timezone.utc)
        now = time.monotonic()
        try:
            self._held = self.coordination.replace_namespaced_lease(self.name, self.namespace, lease,
                                                                    _request_timeout=self._timeout)
        except ApiException as err:
            if err.status not in (409, 404):
                log.warning("renewing the leader Lease failed: %s", err.reason)
            return False
        self._observed = election.observe(self._observed, _record(self._held), now)
        self.last_renewed = now
        return True


def _failed_start(task: asyncio.Task[None], on_lost: Callable[[], None]) -> None:
    """A leader whose start failed would hold the Lease and do nothing: give up instead."""
    if not task.cancelled() and task.exception() is not None:
        log.error("starting as the leader failed", exc_info=task.exception())
        on_lost()
