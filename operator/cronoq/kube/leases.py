"""The leader Lease's API calls (coordination.k8s.io/v1): read, create, replace, renew, release.

They answer in `engine.election.LeaseRecord`s (what the election decides on), carried with the
Lease's body as the API server returned it, since a replace sends that body back: its
resourceVersion is the precondition, so a Lease someone else changed since is never overwritten.

The client is one of its own without urllib3's retries: a retried request would run past the
caller's budget (the election's renew deadline) and hold the election's one thread; the election
loop itself retries. Every call takes the request's timeout from the caller, who knows its deadline.
Refusals are raised as LeaseConflict (409), LeaseNotFound (404) or LeaseError (any other status);
a connection that fails or times out raises what the client raised.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cronoq.engine.election import LeaseRecord

Timeout = tuple[float, float]
"""(connect, read) seconds for one request."""


class LeaseError(Exception):
    """The API server refused a request about the Lease."""

    def __init__(self, status: int | None, reason: str | None) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class LeaseConflict(LeaseError):
    """409: the Lease changed since we read it, or another replica created it first."""


class LeaseNotFound(LeaseError):
    """404: there is no such Lease (never created, or deleted since we read it)."""


@dataclass(frozen=True)
class StoredLease:
    """The Lease as the API server last returned it."""

    record: LeaseRecord
    body: client.V1Lease

    @property
    def spec(self) -> client.V1LeaseSpec:
        """The Lease's spec; an empty one (no holder) for a Lease without."""
        return self.body.spec or client.V1LeaseSpec()

    @classmethod
    def of(cls, body: client.V1Lease) -> StoredLease:
        spec = body.spec or client.V1LeaseSpec()
        renew = spec.renew_time.isoformat() if spec.renew_time else None
        return cls(LeaseRecord(holder=spec.holder_identity, renew_time=renew, transitions=spec.lease_transitions or 0,
                               duration=float(spec.lease_duration_seconds or 15)), body)


class Leases:
    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        configuration = copy.copy(api.configuration)
        configuration.retries = False
        self.coordination = client.CoordinationV1Api(client.ApiClient(configuration))
        self.namespace, self.name = namespace, name

    def read(self, timeout: Timeout) -> StoredLease:
        return self._call(self.coordination.read_namespaced_lease, self.name, self.namespace, _request_timeout=timeout)

    def create(self, holder: str, duration: float, transitions: int, now: datetime, timeout: Timeout) -> StoredLease:
        """Take a Lease nobody created yet (a replica that creates it first wins: LeaseConflict)."""
        body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                              spec=_spec(holder, duration, transitions, now, acquired=now))
        return self._call(self.coordination.create_namespaced_lease, self.namespace, body, _request_timeout=timeout)

    def replace(self, current: StoredLease, holder: str, duration: float, transitions: int, now: datetime,
                timeout: Timeout) -> StoredLease:
        """Take or renew `current` for `holder` (its acquireTime kept while the holder stays)."""
        acquired = current.spec.acquire_time if current.record.holder == holder else now
        return self._put(current, _spec(holder, duration, transitions, now, acquired), timeout)

    def renew(self, held: StoredLease, now: datetime, timeout: Timeout) -> StoredLease:
        """Renew the Lease as we last wrote it, only its renewTime moved: one round trip, no read first."""
        spec = copy.copy(held.spec)
        spec.renew_time = now
        return self._put(held, spec, timeout)

    def release(self, current: StoredLease, timeout: Timeout) -> StoredLease:
        """Give the Lease up (no holder), so a standby takes it at once."""
        spec = copy.copy(current.spec)
        spec.holder_identity = spec.renew_time = spec.acquire_time = None
        return self._put(current, spec, timeout)

    def _put(self, current: StoredLease, spec: client.V1LeaseSpec, timeout: Timeout) -> StoredLease:
        body = copy.copy(current.body)
        body.spec = spec  # with the resourceVersion we read: a racing taker wins or we do
        return self._call(self.coordination.replace_namespaced_lease, self.name, self.namespace, body,
                          _request_timeout=timeout)

    @staticmethod
    def _call(request: Callable[..., client.V1Lease], *args: Any, **kwargs: Any) -> StoredLease:
        try:
            return StoredLease.of(request(*args, **kwargs))
        except ApiException as err:
            kind = {409: LeaseConflict, 404: LeaseNotFound}.get(err.status, LeaseError)
            raise kind(err.status, err.reason) from None


def _spec(holder: str, duration: float, transitions: int, now: datetime, acquired: datetime | None) -> client.V1LeaseSpec:
    return client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=int(duration), renew_time=now,
                              lease_transitions=transitions, acquire_time=acquired)
