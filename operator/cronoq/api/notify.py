"""Failure notifications (issue 55, item 2): the receivers a pool names for its tasks' outcomes, and
what the Task's status records of each delivery, so that a new leader sends again only what was not
confirmed (docs/how-to/notifications.md)."""
from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Final

from pydantic import ConfigDict, Field

from cronoq.api.durations import DurationBounds
from cronoq.api.http import KeyRef
from cronoq.api.model import Model, ObjectName, Timestamp, rule, validations

RECEIVERS_MOST: Final = 8
"""Receivers a pool names at most."""
NOTIFIED_MOST: Final = 16
"""Receivers one pool's tasks and schedules are notified to at most: its own and the namespace's
(`scope: Namespace`) together; so also the entries of a status's `notifications`."""
EVENT_ID_LIMIT: Final = 128
ReceiverTimeout = Annotated[timedelta, DurationBounds("1s", "60s")]


class NotifyOn(StrEnum):
    """The outcomes a receiver can be told about: a task's terminal phases worth a message, and a
    schedule that stopped firing."""

    DEAD_LETTERED = "DeadLettered"
    FAILED = "Failed"
    SUCCEEDED = "Succeeded"
    SCHEDULE_PAUSED = "SchedulePaused"
    """A TaskSchedule whose tasks go to the pool paused after pauseAfterFailures failures in a row."""


class ReceiverScope(StrEnum):
    POOL = "Pool"
    """The pool's own tasks and schedules."""
    NAMESPACE = "Namespace"
    """Those of every pool of the namespace: a namespace default."""


class NotifyFormat(StrEnum):
    CLOUD_EVENT = "CloudEvent"
    """A CloudEvents 1.0 event in structured JSON mode (application/cloudevents+json)."""
    SLACK = "Slack"
    """A Slack-compatible incoming-webhook message (`{"text": ...}`)."""


class Receiver(Model):
    """Where a pool's tasks' outcomes are POSTed: each wanted outcome once delivered (a 2xx answer),
    retried with backoff while the receiver fails, up to maxAttempts."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("isURL(self.url) && url(self.url).getScheme() in ['http', 'https'] && url(self.url).getHostname() != ''",
             "url must be an absolute http:// or https:// URL with a host", field_path=".url"),
    ))

    name: ObjectName
    """The receiver's name within the pool (a DNS label); the task's status.notifications records
    its deliveries under it."""
    url: str = Field(min_length=1, max_length=2048, pattern=r"^[hH][tT][tT][pP][sS]?://\S+$")
    """Absolute http:// or https:// URL the notification is POSTed to (at most 2048 characters).
    Link-local and cloud metadata addresses are refused unless the pool sets allowLinkLocal, as
    for push tasks."""
    outcomes: tuple[NotifyOn, ...] = Field(min_length=1, max_length=4, json_schema_extra={"x-kubernetes-list-type": "set"})
    """The outcomes to notify: DeadLettered, Failed and/or Succeeded (a task's end), and/or
    SchedulePaused (a TaskSchedule whose tasks go to this pool stopped firing after
    pauseAfterFailures failures in a row)."""
    scope: ReceiverScope = ReceiverScope.POOL
    """Pool (default): this pool's tasks and schedules. Namespace: those of every pool of the
    namespace, this one included — a namespace default that no other pool needs to repeat; a
    pool's own receiver of the same name replaces it for that pool."""
    format: NotifyFormat = NotifyFormat.CLOUD_EVENT
    """CloudEvent (default: structured JSON) or Slack (a message with `text`, for a Slack-compatible
    incoming webhook)."""
    signing_key: KeyRef | None = None
    """A key of a Secret in the pool's namespace: the HMAC-SHA256 key each notification is signed
    with (header Cronoq-Signature: `t=<unix seconds>,v1=<hex of HMAC(key, "<t>.<body>")>`). Unset:
    notifications are not signed."""
    max_attempts: int = Field(8, ge=1, le=20)
    """How many times one notification is sent at most while the receiver fails (1 to 20; the
    delays between them are 1s, 2s, 4s, ... up to 60s). Default 8. When all fail, the task gets a
    Warning Event NotificationFailed."""
    timeout: ReceiverTimeout = timedelta(seconds=10)
    """How long one POST may take, connecting included (1s to 60s). Default 10s."""


class NotificationResult(StrEnum):
    DELIVERED = "Delivered"
    GAVE_UP = "GaveUp"


class Notified(Model):
    """What became of one receiver's notification of this task (or schedule): recorded by the
    leader once the receiver answered 2xx, or once maxAttempts failed."""

    receiver: ObjectName
    """The receiver (its name, in the pool or the namespace)."""
    id: str = Field(min_length=1, max_length=EVENT_ID_LIMIT)
    """The event's id, the same in every copy sent (`<task uid>/<phase>/<attempt>`, or for a
    schedule `<schedule uid>/Paused/<unix seconds of the pause>`)."""
    result: NotificationResult
    """Delivered, or GaveUp after maxAttempts."""
    attempts: int = Field(ge=1, le=20)
    """How many sends it took (as the leader that recorded it counted)."""
    at: Timestamp
    """When it was recorded."""

