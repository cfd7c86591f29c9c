"""What the parts of `Client` share: how a task is named, where objects are, field selectors, times."""
from __future__ import annotations

from datetime import datetime, timezone

from urllib.parse import quote

from cronoq.api import GROUP, VERSION, Task

TaskRef = str | Task
"""A task is named by its name or by the Task model itself (as `submit` returns it)."""


def name_of(ref: TaskRef) -> str:
    return ref if isinstance(ref, str) else (ref.metadata.name or "")


def objects_path(plural: str, namespace: str | None, name: str | None = None, *, group: str = GROUP,
                 version: str = VERSION) -> str:
    """Where objects of one kind are (cronoq's by default): those of `namespace` (None: of every one),
    or the one named."""
    scope = "" if namespace is None else f"/namespaces/{quote(namespace)}"
    return f"/apis/{group}/{version}{scope}/{plural}" + ("" if name is None else f"/{quote(name)}")


def core_path(plural: str, namespace: str, name: str | None = None, *, api: str = "/api/v1") -> str:
    """Where Kubernetes' own objects of one kind are in `namespace` (pods, events; `api` for another
    group, e.g. `/apis/batch/v1` for Jobs), or the one named."""
    return f"{api}/namespaces/{quote(namespace)}/{plural}" + ("" if name is None else f"/{quote(name)}")


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

