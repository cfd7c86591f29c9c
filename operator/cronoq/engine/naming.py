"""Names and labels of what cronoq creates for an attempt: deterministic, so a restarted or new
leader finds the same Job for the same (task, attempt), and never a second one."""
from __future__ import annotations

from cronoq import pod_protocol
from cronoq.pod_protocol import MAX_ATTEMPT_NAME, Label, attempt_name

# The label keys are the pod protocol's: the attempt labels its own Lease with them.
LABEL_PREFIX, TASK_UID, TASK, ATTEMPT = Label.PREFIX, Label.TASK_UID, Label.TASK, Label.ATTEMPT
LEASE_ID, POOL, WORKER, WORKER_POOL = Label.LEASE_ID, Label.POOL, Label.WORKER, Label.WORKER_POOL

MAX_NAME = 63
"""Names that end up in a label value (Job names in their pods' `job-name` label, Task names)."""

MAX_JOB_NAME = MAX_ATTEMPT_NAME
"""Job names stay within 57 characters, so their pods' names keep them whole (pod_protocol)."""

TASK_CONTAINER = "task"
"""The container that runs the task; others in a full template are sidecars."""


def job_name(task: str, attempt: int) -> str:
    """`<task>-a<n>`, or for names too long to fit, a prefix of the task name and a hash of it."""
    return attempt_name(task, attempt)


def served_lease_name(task: str, attempt: int, worker: str) -> str:
    """The Lease of an attempt a pull worker serves: `<task>-a<n>.<worker>` (it names its worker)."""
    return pod_protocol.served_lease_name(task, attempt, worker)


def lease_id(epoch: int, attempt: int) -> str:
    """`e<epoch>-a<n>`: never repeats across leaders, because epochs do not."""
    return f"e{epoch}-a{attempt}"


def lease_name(task: str, attempt: int) -> str:
    """The attempt's heartbeat Lease shares its Job's name."""
    return job_name(task, attempt)


def attempt_labels(*, task: str, task_uid: str, attempt: int, lease: str, pool: str) -> dict[str, str]:
    return {TASK_UID: task_uid, TASK: task, ATTEMPT: str(attempt), LEASE_ID: lease, POOL: pool}
