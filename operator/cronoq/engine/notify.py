"""Failure notifications, the pure half (issue 55, item 2): which receivers a finished task still
owes a notification, the event each is sent (a CloudEvent or a Slack message), its signature, and
the delays between sends. The operator's sender (controller/notify.py) does the I/O.

The event's id is `<task uid>/<phase>/<attempt>`: it depends on nothing but the task's finished
status, so every copy, from any leader, carries the same id and a receiver deduplicates on it (the
attempt tells a task retried by hand after it ended from its first ending). A schedule that paused
after pauseAfterFailures failures in a row is told to the receivers of its tasks' pool that want
`SchedulePaused`, with the id `<schedule uid>/Paused/<unix seconds of the Paused condition's
transition>`: the status holds the transition time, so every leader computes the same id, and a
pause after a resume is a new one.

Which receivers serve a pool (`receivers`): its own, then the namespace's (`scope: Namespace` in
any pool of the namespace, by pool name), a pool's own replacing a namespace one of the same name,
at most NOTIFIED_MOST in all.

Signature: `Cronoq-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>.<body>")>`. The time
is signed with the body, so a receiver that refuses a t older than a few minutes refuses replays;
`verify` is that check, for receivers written in Python.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from cronoq.api import Condition, Task, TaskPhase, TaskSchedule
from cronoq.api.notify import (NOTIFIED_MOST, NotificationResult, Notified, NotifyFormat, NotifyOn, Receiver,
                               ReceiverScope)
from cronoq.engine.schedule import PAUSED, paused_after_failures

SIGNATURE_HEADER = "Cronoq-Signature"
ID_HEADER = "Idempotency-Key"
"""Carries the event's id too, for receivers that dedupe on headers."""
TOLERANCE = timedelta(minutes=5)
"""How old a signature `verify` accepts by default."""
WITHIN = timedelta(hours=24)
"""A task that finished longer ago than this is not notified any more (e.g. when a pool names a
receiver long after its tasks ended, or a leader comes back after a long outage)."""
FIRST_DELAY, MAX_DELAY = 1.0, 60.0
HISTORY = 5
"""Attempts summarised in an event (the newest)."""
MESSAGE = 1024
"""Characters of the task's message an event carries at most."""
EVENT_TYPE = "io.cronoq.task."
SCHEDULE_EVENT_TYPE = "io.cronoq.schedule.paused"
CONTENT_TYPE = {NotifyFormat.CLOUD_EVENT: "application/cloudevents+json", NotifyFormat.SLACK: "application/json"}


def event_id(uid: str, phase: str, attempt: int) -> str:
    return f"{uid}/{phase}/{attempt}"


def task_event_id(task: Task) -> str | None:
    """The id of the task's notification; None while it has not finished."""
    status = task.status
    if status is None or status.phase is None or not status.phase.terminal:
        return None
    return event_id(task.metadata.uid or "", status.phase.value, status.attempt)


def owed(receivers: Iterable[Receiver], task: Task, now: datetime, within: timedelta = WITHIN) -> tuple[Receiver, ...]:
    """The receivers that want the task's outcome and have no notification of it recorded in its
    status (delivered or given up) — none when it finished longer than `within` ago, or is a keyed
    duplicate."""
    status, id = task.status, task_event_id(task)
    if status is None or id is None or status.phase is None or status.duplicate_of is not None:
        return ()  # a keyed duplicate ran nothing: its original's ending was notified
    if status.finished_at is not None and now - status.finished_at > within:
        return ()
    done = {n.receiver for n in status.notifications if n.id == id}
    return tuple(r for r in receivers if status.phase.value in r.outcomes and r.name not in done)


@dataclass(frozen=True)
class Serving:
    """A receiver that serves a pool, with what its own pool says of it (the address check)."""

    receiver: Receiver
    pool: str
    """The pool that names it."""
    allow_link_local: bool
    """Its pool's allowLinkLocal."""


def receivers(namespace_pools: Mapping[str, tuple[tuple[Receiver, ...], bool]], pool: str) -> tuple[Serving, ...]:
    """The receivers serving `pool`, given each pool of its namespace as (its receivers, its
    allowLinkLocal): the pool's own first, then the namespace's (scope Namespace) by pool name and
    order, one per name (the pool's own wins, then the first), at most NOTIFIED_MOST."""
    own, link_local = namespace_pools.get(pool, ((), False))
    serving = [Serving(r, pool, link_local) for r in own]
    names = {r.name for r in own}
    for name in sorted(namespace_pools):
        theirs, link_local = namespace_pools[name]
        for r in theirs:
            if r.scope is ReceiverScope.NAMESPACE and r.name not in names:
                names.add(r.name)
                serving.append(Serving(r, name, link_local))
    return tuple(serving[:NOTIFIED_MOST])


def pause_of(schedule: TaskSchedule) -> Condition | None:
    """The schedule's Paused condition while pauseAfterFailures holds it paused."""
    return paused_after_failures(schedule.status)


def schedule_event_id(schedule: TaskSchedule) -> str | None:
    """The id of the schedule's pause notification; None while it is not paused after failures."""
    pause = pause_of(schedule)
    if pause is None:
        return None
    return event_id(schedule.metadata.uid or "", PAUSED, int(pause.last_transition_time.timestamp()))


def schedule_owed(receivers: Iterable[Receiver], schedule: TaskSchedule, now: datetime,
                  within: timedelta = WITHIN) -> tuple[Receiver, ...]:
    """The receivers that want SchedulePaused and have no notification of this pause recorded in
    the schedule's status — none when it is not paused after failures, or paused longer than
    `within` ago."""
    pause, id = pause_of(schedule), schedule_event_id(schedule)
    if pause is None or id is None or schedule.status is None or now - pause.last_transition_time > within:
        return ()
    done = {n.receiver for n in schedule.status.notifications if n.id == id}
    return tuple(r for r in receivers if NotifyOn.SCHEDULE_PAUSED in r.outcomes and r.name not in done)


def recorded_receivers(task: Task) -> tuple[str, ...]:
    """The receivers whose notification of the task's ending its status records."""
    id = task_event_id(task)
    status = task.status
    return tuple(n.receiver for n in status.notifications if n.id == id) if status is not None and id else ()


def delay(failures: int) -> float:
    """Seconds to wait after the `failures`-th failed send in a row: 1, 2, 4, ... up to 60."""
    return min(FIRST_DELAY * 2.0 ** max(failures - 1, 0), MAX_DELAY)


def recorded(notifications: Iterable[Notified], entry: Notified) -> tuple[Notified, ...]:
    """The status's notifications with `entry` in place of its receiver's older one."""
    return tuple(n for n in notifications if n.receiver != entry.receiver) + (entry,)


def entry(receiver: str, id: str, delivered: bool, attempts: int, now: datetime) -> Notified:
    return Notified(receiver=receiver, id=id, attempts=max(1, min(attempts, 20)), at=now,
                    result=NotificationResult.DELIVERED if delivered else NotificationResult.GAVE_UP)


@dataclass(frozen=True)
class Note:
    """What a notification says of a finished task."""

    id: str
    namespace: str
    name: str
    uid: str
    pool: str
    phase: str
    attempt: int
    reason: str | None
    message: str | None
    finished_at: datetime | None
    attempts: tuple[dict[str, Any], ...]

    @classmethod
    def of(cls, task: Task) -> Note:
        status = task.status
        id = task_event_id(task)
        assert status is not None and status.phase is not None and id is not None, "a finished task"
        newest = status.attempts[-HISTORY:]
        reason = newest[-1].reason if newest else None
        summary = tuple({k: v for k, v in {
            "number": a.number, "outcome": a.outcome.value if a.outcome else None, "reason": a.reason,
            "exitCode": a.exit_code, "responseCode": a.response_code, "durationMs": a.duration_ms,
            "finishedAt": _time(a.finished_at)}.items() if v is not None} for a in newest)
        message = status.message[:MESSAGE] if status.message else None
        return cls(id=id, namespace=task.metadata.namespace or "", name=task.metadata.name or "",
                   uid=task.metadata.uid or "", pool=task.spec.pool, phase=status.phase.value, attempt=status.attempt,
                   reason=reason, message=message, finished_at=status.finished_at, attempts=summary)

    @property
    def describe(self) -> str:
        """The command that shows the task: `cronoq describe` (or `kubectl cronoq describe`)."""
        return f"cronoq describe {self.name} -n {self.namespace}"


@dataclass(frozen=True)
class PauseNote:
    """What a notification says of a schedule that paused after failures."""

    id: str
    namespace: str
    name: str
    uid: str
    pool: str
    reason: str
    message: str
    at: datetime
    consecutive_failures: int
    pause_after_failures: int | None

    @classmethod
    def of(cls, schedule: TaskSchedule) -> PauseNote:
        pause, id = pause_of(schedule), schedule_event_id(schedule)
        assert pause is not None and id is not None and schedule.status is not None, "a paused schedule"
        return cls(id=id, namespace=schedule.metadata.namespace or "", name=schedule.metadata.name or "",
                   uid=schedule.metadata.uid or "", pool=schedule.spec.task_template.spec.pool, reason=pause.reason,
                   message=pause.message[:MESSAGE], at=pause.last_transition_time,
                   consecutive_failures=schedule.status.consecutive_failures,
                   pause_after_failures=schedule.spec.pause_after_failures)

    @property
    def describe(self) -> str:
        return f"kubectl describe taskschedule {self.name} -n {self.namespace}"

    @property
    def resume(self) -> str:
        return f"cronoq schedule resume {self.name} -n {self.namespace}"


def _time(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when is not None else None


def cloud_event(note: Note) -> dict[str, Any]:
    """A CloudEvents 1.0 event in structured mode. Never the task's payload or output: a receiver
    learns what ended and why, and reads more with its own rights (`describe`)."""
    event: dict[str, Any] = {
        "specversion": "1.0", "id": note.id, "type": EVENT_TYPE + note.phase.lower(),
        "source": f"/apis/cronoq.io/v1alpha1/namespaces/{note.namespace}/tasks/{note.name}",
        "subject": f"{note.namespace}/{note.name}",
        **({"time": _time(note.finished_at)} if note.finished_at is not None else {}),
        "datacontenttype": "application/json",
        "data": {"task": {"namespace": note.namespace, "name": note.name, "uid": note.uid, "pool": note.pool},
                 "phase": note.phase, "attempt": note.attempt, "reason": note.reason, "message": note.message,
                 "attempts": list(note.attempts), "describe": note.describe},
    }
    return event


def pause_event(note: PauseNote) -> dict[str, Any]:
    """The CloudEvent of a schedule's pause: what stopped it, and how to look and resume."""
    return {
        "specversion": "1.0", "id": note.id, "type": SCHEDULE_EVENT_TYPE,
        "source": f"/apis/cronoq.io/v1alpha1/namespaces/{note.namespace}/taskschedules/{note.name}",
        "subject": f"{note.namespace}/{note.name}", "time": _time(note.at), "datacontenttype": "application/json",
        "data": {"schedule": {"namespace": note.namespace, "name": note.name, "uid": note.uid, "pool": note.pool},
                 "condition": PAUSED, "reason": note.reason, "message": note.message,
                 "consecutiveFailures": note.consecutive_failures, "pauseAfterFailures": note.pause_after_failures,
                 "describe": note.describe, "resume": note.resume},
    }


ICONS = {TaskPhase.SUCCEEDED.value: ":white_check_mark:", TaskPhase.FAILED.value: ":x:",
         TaskPhase.DEAD_LETTERED.value: ":skull:"}


def slack_message(note: Note) -> dict[str, Any]:
    """A Slack-compatible incoming-webhook message: one `text`, in Slack's mrkdwn (its three
    special characters escaped, as Slack asks)."""
    def esc(text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    said = f" ({esc(note.reason)})" if note.reason else ""
    text = (f"{ICONS.get(note.phase, '')} Task *{esc(note.namespace)}/{esc(note.name)}* (pool {esc(note.pool)}) "
            f"ended *{note.phase}* after {note.attempt} attempt{'s' if note.attempt != 1 else ''}{said}").lstrip()
    if note.message:
        text += f"\n> {esc(note.message[:300])}"
    return {"text": text + f"\n`{esc(note.describe)}` · id {note.id}"}


def pause_slack_message(note: PauseNote) -> dict[str, Any]:
    """The Slack-compatible message of a schedule's pause."""
    def esc(text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = (f":pause_button: Schedule *{esc(note.namespace)}/{esc(note.name)}* (pool {esc(note.pool)}) paused after "
            f"{note.consecutive_failures} failed Tasks in a row")
    if note.message:
        text += f"\n> {esc(note.message[:300])}"
    return {"text": text + f"\n`{esc(note.resume)}` · id {note.id}"}


def body(note: Note | PauseNote, format: NotifyFormat) -> bytes:
    if isinstance(note, PauseNote):
        message = pause_slack_message(note) if format is NotifyFormat.SLACK else pause_event(note)
    else:
        message = slack_message(note) if format is NotifyFormat.SLACK else cloud_event(note)
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def sign(key: bytes, payload: bytes, at: int) -> str:
    """The Cronoq-Signature header's value for `payload` sent at `at` (unix seconds)."""
    digest = hmac.new(key, str(at).encode() + b"." + payload, hashlib.sha256).hexdigest()
    return f"t={at},v1={digest}"


def verify(key: bytes, header: str, payload: bytes, now: datetime, tolerance: timedelta = TOLERANCE) -> bool:
    """Whether `header` signs `payload` with `key`, at a time within `tolerance` of `now`."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        at = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(now.timestamp() - at) > tolerance.total_seconds():
        return False
    expected = sign(key, payload, at).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))
