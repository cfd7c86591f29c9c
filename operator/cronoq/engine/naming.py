"""Names and labels of what cronoq creates for an attempt: deterministic, so a restarted or new
leader finds the same Job for the same (task, attempt), and never a second one."""
from __future__ import annotations

import hashlib

LABEL_PREFIX = "cronoq.io/"
TASK_UID = LABEL_PREFIX + "task-uid"
TASK = LABEL_PREFIX + "task"
ATTEMPT = LABEL_PREFIX + "attempt"
LEASE_ID = LABEL_PREFIX + "lease-id"
POOL = LABEL_PREFIX + "pool"

MAX_NAME = 63
"""Job names end up in the `job-name` label of their pods, so they must fit a label value."""

TASK_CONTAINER = "task"
"""The container that runs the task; others in a full template are sidecars."""


def job_name(task: str, attempt: int) -> str:
    """`<task>-a<n>`, or for names too long to fit, a prefix of the task name and a hash of it."""
    suffix = f"-a{attempt}"
    if len(task) + len(suffix) <= MAX_NAME:
        return task + suffix
    digest = hashlib.sha256(task.encode()).hexdigest()[:8]
    keep = MAX_NAME - len(suffix) - len(digest) - 1
    return f"{task[:keep].rstrip('-')}-{digest}{suffix}"


def lease_id(epoch: int, attempt: int) -> str:
    """`e<epoch>-a<n>`: never repeats across leaders, because epochs do not."""
    return f"e{epoch}-a{attempt}"


def lease_name(task: str, attempt: int) -> str:
    """The attempt's heartbeat Lease shares its Job's name."""
    return job_name(task, attempt)


def attempt_labels(*, task: str, task_uid: str, attempt: int, lease: str, pool: str) -> dict[str, str]:
    return {TASK_UID: task_uid, TASK: task, ATTEMPT: str(attempt), LEASE_ID: lease, POOL: pool}
