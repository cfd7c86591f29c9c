"""The leader-election loop around engine.election: get the Lease every retry period, take it when
the core says we may, renew it while we lead, and when a renewal does not succeed within the
renew deadline, stop acting at once and exit (to be restarted as a follower). The Lease's API
calls are in kube/leases.py (on the event loop, over the operator's one HTTP stack); this module
keeps the timing and the decisions.

`Leadership.valid()` is checked right before every write, so a leader that was frozen (SIGSTOP,
a long GC pause) and wakes up past its deadline writes nothing, even before this loop runs.

Every time it reads, waits for or gives up by is on the controller's clock (controller/clock.py):
the event loop's in the operator, a fake one in the unit tests, so that they go through slow links
and lapsed deadlines without waiting for them.
"""
from __future__ import annotations

import asyncio
import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine

from cronoq.controller.clock import Clock, LoopClock
from cronoq.engine import election
from cronoq.apiserver.errors import ApiError, Conflict, NotFound
from cronoq.kube.leases import Leases, StoredLease
from cronoq.apiserver.aio import ApiSession

log = logging.getLogger(__name__)


@dataclass
class Leadership:
    http: ApiSession
    namespace: str
    name: str = "cronoq-leader"
    identity: str = field(default_factory=lambda: f"{os.environ.get('POD_NAME') or os.uname().nodename}_{uuid.uuid4().hex[:8]}")
    timing: election.ElectionTiming = field(default_factory=election.ElectionTiming)
    clock: Clock = field(default_factory=LoopClock)
    epoch: int | None = None
    last_renewed: float | None = None
    _elected_now: bool = False
    """Set by the last acquire-or-renew when it took the Lease (a new term began)."""

    def __post_init__(self) -> None:
        self.leases = Leases(self.http, self.namespace, self.name)
        self._observed: election.Observed | None = None
        self._held: StoredLease | None = None
        """The Lease as we last wrote it, while we hold it: renewed with one PUT, no GET first."""
        self._deadline = 0.0
        self._starting: asyncio.Task[None] | None = None
        """The new leader's start (`on_elected`), running beside the renewals."""

    @property
    def _timeout(self) -> float:
        """A request about the Lease gives up by the current attempt's deadline: an API server that
        accepts connections but cannot answer (etcd away) counts as a failed renewal in time, and a
        slow one that answers (2 s a round trip) still renews."""
        return max(self._deadline - self.clock.monotonic(), 0.05)

    def _budget(self) -> float:
        """How long one acquire-or-renew may take. While leading: until the renew deadline (never
        a fixed fraction of it, which a slow link would exceed on every attempt, so the leader lost
        its Lease though every renewal would have landed in time). Campaigning: the renew deadline."""
        if self.last_renewed is None:
            return self.timing.renew_deadline
        return max(self.last_renewed + self.timing.renew_deadline - self.clock.monotonic(), 0.05)

    def valid(self) -> bool:
        return election.still_leading(self.last_renewed, self.clock.monotonic(), self.timing)

    async def run(self, on_elected: Callable[[int], Coroutine[Any, Any, None]], on_lost: Callable[[], None]) -> None:
        """Campaign until elected, start `on_elected(epoch)` (as a task of its own), then renew
        until we cannot."""
        while True:
            try:
                # Never queued behind writes blocked on a sick API server (the HTTP stack's pool has
                # no limit; the writes bound their own number), never waited on past the renew deadline.
                # The clock's timeout (asyncio.timeout on the operator's), not wait_for: on Python
                # 3.11 wait_for returns the result when the call ends just as the loop is cancelled,
                # swallowing the cancellation, and the loop then never stops.
                budget = self._budget()
                self._deadline = self.clock.monotonic() + budget
                async with self.clock.timeout(budget):
                    held = await self._try_acquire_or_renew()
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
            await self.clock.sleep(self.timing.retry_period)

    async def release(self) -> None:
        """On a clean shutdown, give the Lease up, so a standby takes over at once instead of
        waiting out the lease duration. Only while we still hold it validly."""
        if not self.valid():
            return
        self._deadline = self.clock.monotonic() + self.timing.renew_deadline / 3
        try:
            current = await self.leases.read(self._timeout)
            if current.record.holder != self.identity:
                return
            await self.leases.release(current, self._timeout)
            log.info("released the leader Lease %s/%s", self.namespace, self.name)
        except ApiError as err:
            log.warning("could not release the leader Lease: %s", err.reason)
        except Exception as err:  # noqa: BLE001 - unreachable: the standby waits out the lease duration
            log.warning("could not release the leader Lease: %r", err)
        self.last_renewed, self._held = None, None

    async def _try_acquire_or_renew(self) -> bool:
        self._elected_now = False
        now = self.clock.monotonic()
        if self._held is not None and self.valid():
            if await self._renew_held(self._held):
                return True
            self._held = None  # changed since we wrote it, or the PUT failed: read it first
        try:
            current: StoredLease | None = await self.leases.read(self._timeout)
        except NotFound:
            current = None
        except ApiError as err:
            log.warning("reading the leader Lease failed: %s", err.reason)
            return False
        record = current.record if current is not None else None
        if record is not None:
            self._observed = election.observe(self._observed, record, now)
        if not election.may_acquire(self.identity, record, self._observed, now):
            return False
        transitions, epoch = election.epoch_after_acquiring(self.identity, record)
        stamp = self.clock.now()
        duration = self.timing.lease_duration
        # Our leadership counts from the moment the write leaves (no replica can see it earlier),
        # not from the read before it: on a slow link the read alone takes a round trip.
        sent = self.clock.monotonic()
        try:
            if current is None:
                written = await self.leases.create(self.identity, duration, transitions, stamp, self._timeout)
            else:
                written = await self.leases.replace(current, self.identity, duration, transitions, stamp, self._timeout)
        except ApiError as err:
            _write_failed(err)
            return False
        self._held = written
        self.last_renewed = sent
        if self.epoch is None:
            self.epoch, self._elected_now = epoch, True
        return True

    async def _renew_held(self, held: StoredLease) -> bool:
        """Renew the Lease we hold with one PUT of it as we last wrote it (its resourceVersion as
        precondition, so a Lease someone else changed since is never overwritten: 409, then the
        slow path reads it). One round trip instead of two."""
        stamp = self.clock.now()
        now = self.clock.monotonic()
        try:
            self._held = await self.leases.renew(held, stamp, self._timeout)
        except ApiError as err:
            _write_failed(err)
            return False
        self._observed = election.observe(self._observed, self._held.record, now)
        self.last_renewed = now
        return True


def _write_failed(err: ApiError) -> None:
    """A conflict or a Lease gone is the election's ordinary business (read it again next
    time); any other refusal is worth a line."""
    if not isinstance(err, (Conflict, NotFound)):
        log.warning("renewing the leader Lease failed: %s", err.reason)


def _failed_start(task: asyncio.Task[None], on_lost: Callable[[], None]) -> None:
    """A leader whose start failed would hold the Lease and do nothing: give up instead."""
    if not task.cancelled() and task.exception() is not None:
        log.error("starting as the leader failed", exc_info=task.exception())
        on_lost()
