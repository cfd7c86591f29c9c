"""Submitting and following cronoq Tasks from Python (DESIGN §13).

    from cronoq.client import Client, TaskFailed

    cq = Client(namespace="jobs")
    task = cq.submit(image="ghcr.io/acme/report:1", payload={"id": 7}, key="report-7")
    try:
        print(cq.wait(task, timeout=600).output)     # parsed JSON when the output is JSON
    except TaskFailed as failed:
        print(failed.status, failed.message)         # dead_lettered, "attempt 3 failed ..."

Errors: `ClientError` and its subclasses `InvalidTask`, `TaskNotFound`, `TaskFailed`,
`OutputUnavailable`, `WaitTimeout`, `NotRetryable`, `LogsUnavailable`, `ObjectNotFound` (a TaskPool or
TaskSchedule).
"""
from cronoq.client.client import RETRY_OF, RETRY_OF_KEY, RETRY_OF_UID, Client
from cronoq.client.common import TaskRef
from cronoq.client.errors import (
    ClientError,
    InvalidTask,
    LogsUnavailable,
    NotRetryable,
    ObjectNotFound,
    OutputUnavailable,
    TaskFailed,
    TaskNotFound,
    WaitTimeout,
)
from cronoq.client.results import STATUS, Result, SavedCheckpoint, parse_output, status_of

__all__ = [
    "RETRY_OF", "RETRY_OF_KEY", "RETRY_OF_UID", "STATUS", "Client", "ClientError", "InvalidTask",
    "LogsUnavailable", "NotRetryable", "ObjectNotFound", "OutputUnavailable", "Result", "SavedCheckpoint", "TaskFailed", "TaskNotFound", "TaskRef",
    "WaitTimeout", "parse_output", "status_of",
]
