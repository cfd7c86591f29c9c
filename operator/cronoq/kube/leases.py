"""The leader Lease's API calls (coordination.k8s.io/v1): read, create, replace, renew, release.

They answer in `engine.election.LeaseRecord`s (what the election decides on), carried with the
Lease's body as the API server returned it, since a replace sends that body back: its
resourceVersion is the precondition, so a Lease someone else changed since is never overwritten.

They go through the operator's one HTTP stack (apiserver/aio.py) on the event loop, with no retries
of their own: a retried request would run past the caller's budget (the election's renew
deadline); the election loop itself retries. (aiohttp sends an idempotent request once more only
when the kept-alive connection it chose turns out closed by the server, within the same timeout.)
Every call takes the request's timeout from the caller, who knows its deadline. Refusals are raised
as apiserver/errors.py's Conflict (409: changed since read, or created first by another replica),
NotFound (404) or another ApiError; a connection that fails or times out raises what aiohttp raised.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from cronoq.apiserver.aio import ApiSession, timeout
from cronoq.engine.election import LeaseRecord


@dataclass(frozen=True)
class StoredLease:
    """The Lease as the API server last returned it."""

    record: LeaseRecord
    body: dict[str, Any]

    @property
    def spec(self) -> dict[str, Any]:
        """The Lease's spec; an empty one (no holder) for a Lease without."""
        spec: dict[str, Any] = self.body.get("spec") or {}
        return spec

    @classmethod
    def of(cls, body: dict[str, Any]) -> StoredLease:
        spec = body.get("spec") or {}
        return cls(LeaseRecord(holder=spec.get("holderIdentity"), renew_time=spec.get("renewTime"),
                               transitions=int(spec.get("leaseTransitions") or 0),
                               duration=float(spec.get("leaseDurationSeconds") or 15)), body)


class Leases:
    def __init__(self, http: ApiSession, namespace: str, name: str) -> None:
        self.http = http
        self.namespace, self.name = namespace, name
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    async def read(self, seconds: float) -> StoredLease:
        return await self._call("GET", f"{self._collection}/{self.name}", None, seconds)

    async def create(self, holder: str, duration: float, transitions: int, now: datetime,
                     seconds: float) -> StoredLease:
        """Take a Lease nobody created yet (a replica that creates it first wins: Conflict)."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": _spec(holder, duration, transitions, now, acquired=micro_time(now))}
        return await self._call("POST", self._collection, body, seconds)

    async def replace(self, current: StoredLease, holder: str, duration: float, transitions: int, now: datetime,
                      seconds: float) -> StoredLease:
        """Take or renew `current` for `holder` (its acquireTime kept while the holder stays)."""
        acquired = current.spec.get("acquireTime") if current.record.holder == holder else micro_time(now)
        return await self._put(current, _spec(holder, duration, transitions, now, acquired), seconds)

    async def renew(self, held: StoredLease, now: datetime, seconds: float) -> StoredLease:
        """Renew the Lease as we last wrote it, only its renewTime moved: one round trip, no read first."""
        return await self._put(held, {**held.spec, "renewTime": micro_time(now)}, seconds)

    async def release(self, current: StoredLease, seconds: float) -> StoredLease:
        """Give the Lease up (no holder), so a standby takes it at once."""
        spec = {k: v for k, v in current.spec.items() if k not in ("holderIdentity", "renewTime", "acquireTime")}
        return await self._put(current, spec, seconds)

    async def _put(self, current: StoredLease, spec: dict[str, Any], seconds: float) -> StoredLease:
        body = copy.copy(current.body)
        body["spec"] = spec  # with the resourceVersion we read: a racing taker wins or we do
        return await self._call("PUT", f"{self._collection}/{self.name}", body, seconds)

    async def _call(self, method: str, path: str, body: dict[str, Any] | None, seconds: float) -> StoredLease:
        return StoredLease.of(await self.http.request(method, path, timeout(total=seconds), body))


def micro_time(when: datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 in UTC with microseconds."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _spec(holder: str, duration: float, transitions: int, now: datetime, acquired: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": holder, "leaseDurationSeconds": int(duration),
                            "renewTime": micro_time(now), "leaseTransitions": transitions}
    if acquired:
        spec["acquireTime"] = acquired
    return spec
