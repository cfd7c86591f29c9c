"""The writes the Controller makes, as the Controller needs them: kube/writes.py's Writer makes them
against the API server; a unit test's fake writer keeps them in memory. Either raises
kube.writes' NotLeader, Conflict and Rejected as the API server's answer says."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from cronoq.engine.plan import Event


class Writer(Protocol):
    async def create_job(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """The attempt's Job as stored (the existing one if it exists already), None if gone again."""
        ...

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        """Delete the Job only while it is still the one with this uid."""
        ...

    async def retime_job(self, namespace: str, name: str, uid: str, seconds: int) -> dict[str, Any] | None:
        """Set the Job's ttlSecondsAfterFinished while it is the one with this uid; the Job as
        stored, None when it is gone (or its name holds another Job)."""
        ...

    async def read_task(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def read_workloads(self, namespace: str, job_uid: str) -> list[dict[str, Any]] | None:
        """Kueue's Workloads of the Job of this uid; None when they cannot be read (no Kueue, no right)."""
        ...

    async def read_local_queue(self, namespace: str, name: str) -> tuple[str, dict[str, Any] | None]:
        """Kueue's LocalQueue: ("found", it), ("missing", None), ("no-kueue", None) or ("forbidden", None)."""
        ...

    async def replace_task_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """PUT with `raw`'s resourceVersion as precondition: Conflict when it changed since."""
        ...

    async def replace_pool_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]: ...

    async def delete_task(self, namespace: str, name: str, uid: str) -> None:
        """Delete the task only while it is still the one with this uid."""
        ...

    async def post_event(self, raw: dict[str, Any], event: Event, now: datetime) -> None: ...
