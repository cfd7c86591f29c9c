"""What the parts of `Client` share: how a task is named, field selectors, times, API messages."""
from __future__ import annotations

from datetime import datetime, timezone

from kubernetes.client.rest import ApiException

from cronoq.api import Task
from cronoq.kube.refusal import server_message

TaskRef = str | Task
"""A task is named by its name or by the Task model itself (as `submit` returns it)."""


def name_of(ref: TaskRef) -> str:
    return ref if isinstance(ref, str) else (ref.metadata.name or "")


def selector_of(phase: str | None, pool: str | None, key: str | None, extra: str | None = None) -> str | None:
    """The API server's field selector for these filters (several phases are filtered here instead)."""
    parts = []
    if phase:
        parts.append(f"status.phase={escape_selector(str(phase))}")
    if pool:
        parts.append(f"spec.pool={escape_selector(pool)}")
    if key:
        parts.append(f"spec.key={escape_selector(key)}")
    if extra:
        parts.append(extra)
    return ",".join(parts) or None


def rfc3339(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def escape_selector(value: str) -> str:
    """A field selector value: keys are free text, and `,` `=` `\\` are the selector's syntax."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def api_message(err: ApiException) -> str:
    message = server_message(err)
    return str(err.reason) if message is None else message
