"""The leader-election loop around engine.election: get the Lease every retry period, take it when
the core says we may, renew it while we lead, and when a renewal does not succeed within the
renew deadline, stop acting at once and exit (to be restarted as a follower).

`Leadership.valid()` is checked right before every write, so a leader that was frozen (SIGSTOP,
a long GC pause) and wakes up past its deadline writes nothing, even before this loop runs.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Awaitable, Callable

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
        self.coordination = client.CoordinationV1Api(self.api)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cronoq-election")
        self._observed: election.Observed | None = None

    @property
    def _timeout(self) -> tuple[float, float]:
        """A request about the Lease gives up well within the renew deadline: an API server that
        accepts connections but cannot answer (etcd away) must count as a failed renewal in time."""
        return (2.0, self.timing.renew_deadline / 3)

    def valid(self) -> bool:
        return election.still_leading(self.last_renewed, time.monotonic(), self.timing)

    async def run(self, on_elected: Callable[[int], Awaitable[None]], on_lost: Callable[[], None]) -> None:
        """Campaign until elected, call `on_elected(epoch)`, then renew until we cannot."""
        while True:
            try:
                # A thread of its own (never queued behind reconciles blocked on a sick API server),
                # and never waited on past a third of the renew deadline.
                held = await asyncio.wait_for(
                    asyncio.get_running_loop().run_in_executor(self._executor, self._try_acquire_or_renew),
                    timeout=self.timing.renew_deadline / 3)
            except Exception as err:  # noqa: BLE001 - the API server unreachable or slow: a failed renewal
                log.warning("renewing the leader Lease %s/%s failed: %r", self.namespace, self.name, err)
                held = False
            if held:
                if self.epoch is not None and self._elected_now:
                    log.info("elected leader %s with epoch %d (Lease %s/%s)", self.identity, self.epoch,
                             self.namespace, self.name)
                    await on_elected(self.epoch)
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
        self.last_renewed = None

    def _try_acquire_or_renew(self) -> bool:
        self._elected_now = False
        now = time.monotonic()
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
        try:
            if lease is None:
                self.coordination.create_namespaced_lease(self.namespace, client.V1Lease(
                    metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace), spec=spec),
                    _request_timeout=self._timeout)
            else:
                lease.spec = spec  # the PUT carries the resourceVersion we read: a racing taker wins or we do
                self.coordination.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=self._timeout)
        except ApiException as err:
            if err.status not in (409, 404):
                log.warning("renewing the leader Lease failed: %s", err.reason)
            return False
        self.last_renewed = now
        if self.epoch is None:
            self.epoch, self._elected_now = epoch, True
        return True
