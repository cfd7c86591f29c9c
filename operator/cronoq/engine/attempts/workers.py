"""What delivery to pull workers (`delivery: Workers`) changes about a task: which worker serves
its open attempt, and which of its fields only a Job can honour."""
from __future__ import annotations

from cronoq.api import Task, TaskPhase, TaskStatus

POD_FIELDS = ("image", "command", "args", "env", "resources", "service_account_name", "node_selector",
              "tolerations", "priority_class_name", "pod_metadata", "template", "http", "heartbeat_sidecar",
              "start_timeout", "job_retention")
"""Task fields only a Job-delivered attempt can honour."""


def pod_fields(task: Task) -> list[str]:
    """The pod fields a task sets (by their API names), which a worker-served attempt cannot honour."""
    spec = task.spec
    given = [name for name in POD_FIELDS if getattr(spec, name) not in (None, (), {})]
    fields = type(spec).model_fields
    return [fields[name].alias or _camel(name) for name in given]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def serving_worker(status: TaskStatus) -> str | None:
    """The worker running the task's open attempt, if a worker does: what `status.worker` says
    (and the store's load per worker counts)."""
    last = status.attempts[-1] if status.attempts else None
    if status.phase is not TaskPhase.RUNNING or last is None or last.number != status.attempt or last.outcome:
        return None
    return last.worker
