"""The client's exceptions: every way a call can fail that a caller may want to tell apart.

All derive from `ClientError`, so `except cronoq.client.ClientError` catches them all.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cronoq.api import Task


class ClientError(Exception):
    """Base of the client's errors."""


class InvalidTask(ClientError, ValueError):
    """The task asked for cannot be submitted (bad field, payload too large, nothing to run)."""


class TaskNotFound(ClientError, LookupError):
    """No Task of that name in the namespace."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f"task {namespace}/{name} not found")
        self.namespace = namespace
        self.name = name


class ObjectNotFound(ClientError, LookupError):
    """No TaskPool or TaskSchedule of that name in the namespace."""

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        super().__init__(f"{kind.lower()} {namespace}/{name} not found")
        self.kind = kind
        self.namespace = namespace
        self.name = name


class TaskFailed(ClientError):
    """The task ended without succeeding.

    `status` is the snake_case spelling used by the metrics (`failed`, `dead_lettered`,
    `cancelled`, `skipped`); `message` is the task's final message; `task` the finished Task."""

    def __init__(self, task: Task) -> None:
        from cronoq.client.results import status_of

        self.task = task
        self.name = task.metadata.name or ""
        self.status = status_of(task.phase)
        self.message = (task.status.message if task.status else None) or ""
        super().__init__(f"task {self.name} {self.status}: {self.message}" if self.message
                         else f"task {self.name} {self.status}")


class OutputUnavailable(ClientError):
    """The task succeeded but has no stored output (`status.outputAvailable: false`): it wrote
    none, or it is a keyed duplicate of a task whose output is gone. `result` holds the rest."""

    def __init__(self, result) -> None:  # noqa: ANN001 - Result, imported lazily to avoid a cycle
        self.result = result
        super().__init__(f"task {result.name} succeeded but has no stored output")


class WaitTimeout(ClientError, TimeoutError):
    """`wait`/`wait_all` ran out of time; `pending` names the tasks still unfinished and
    `finished` holds those that ended in time (name → Task)."""

    def __init__(self, pending: list[str], timeout: float, finished: dict | None = None) -> None:
        self.pending = pending
        self.timeout = timeout
        self.finished = finished or {}
        super().__init__(f"timed out after {timeout:g}s waiting for {', '.join(pending)}")


class NotRetryable(ClientError):
    """`retry` was asked for a task that is not Failed or DeadLettered."""


class LogsUnavailable(ClientError):
    """The attempt's pod logs cannot be read (not started yet, or its Job and pods are gone)."""
