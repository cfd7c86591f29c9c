"""The notification sender (issue 55, item 2): the leader's background work that POSTs each finished
task's outcome to the receivers serving its pool (the pool's own and the namespace's, by
engine.notify.receivers), and each schedule's pause after failures to those of its tasks' pool that
want SchedulePaused, off the dispatch path.

- `offer(namespace, name)`: the applier hands over a task whose status write ended it (never
  awaited: a bounded queue; full, the offer is dropped and counted, and the sweep offers it again).
  `SENDERS` coroutines take sends from the queue; a slow or failing receiver holds one of them for
  at most its timeout, never a reconcile.
- Each send reads the Task (its status is the event's matter and says what was already recorded),
  its pool's receiver and signing key, POSTs the event (engine/notify.py builds and signs it)
  through the push runner's address check (cronoq.push.guarded), and on a 2xx records it in the
  Task's status (`notifications`: receiver, id, Delivered). A failure is sent again after
  engine.notify.delay; after the receiver's maxAttempts, or at once for an answer that will not
  change (a 4xx but 408 and 429, a forbidden address), it is recorded GaveUp with a Warning Event
  NotificationFailed on the task.
- `sweep` (at start, then every SWEEP_SECONDS): every finished task of the store that a receiver
  of its pool still wants, by what its status records, is offered; so is every paused schedule
  (`schedules`, the schedule controller's). So a new leader sends what the last one did not record
  — with the same event id — and nothing it did.
- A schedule's pause is offered by the schedule controller when it writes it (`offer_schedule`),
  sent like a task's ending, and recorded in the schedule's status.

At least once: a send that landed but whose record did not (a failover in between) is sent again
with the same id; the receiver deduplicates on it.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterable, Protocol, TypeVar

import aiohttp

from cronoq import __version__, metrics
from cronoq.api import Task, TaskSchedule
from cronoq.api.notify import NotifyOn, Receiver
from cronoq.apiserver.errors import ApiError, Conflict
from cronoq.controller.clock import Clock, Timer
from cronoq.controller.store import Key, Store
from cronoq.controller.term import Term
from cronoq.controller.writer import Writer
from cronoq.engine import notify
from cronoq.engine.plan import Event
from cronoq.push import AddressNotAllowed, guarded

log = logging.getLogger(__name__)

SENDERS = 4
"""Sends under way at once."""
QUEUE_LIMIT = 10_000
"""Sends waiting at most; past it an offer is dropped (and offered again by the next sweep)."""
SWEEP_SECONDS = 60.0
RECORD_TRIES = 5
"""Conflicting status writes in a row before a record is left to the next sweep (which sends again)."""
WHO = "notifications"
REASON = "NotificationFailed"


TASK, SCHEDULE = "Task", "TaskSchedule"


class Sink(Writer, Protocol):
    async def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None: ...

    async def read_schedule(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def replace_schedule_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]: ...


class Poster(Protocol):
    async def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout: float,
                       allow_link_local: bool) -> tuple[int | None, str]: ...


class GiveUp(Exception):
    """A send that sending again would not change."""


async def post(url: str, body: bytes, headers: dict[str, str], timeout: float,
               allow_link_local: bool) -> tuple[int | None, str]:
    """POST once: (status code, what went wrong or ""); (None, why) when no answer came. Raises
    GiveUp for a forbidden address."""
    try:
        resolver = None if allow_link_local else guarded(url, who=WHO)
    except AddressNotAllowed as err:
        raise GiveUp(str(err)) from None
    connector = aiohttp.TCPConnector(resolver=resolver) if resolver is not None else None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout), connector=connector,
                                         trust_env=True) as session:
            async with session.post(url, data=body, headers=headers, allow_redirects=False) as answer:
                text = (await answer.content.read(256)).decode("utf-8", errors="replace")
                return answer.status, "" if 200 <= answer.status < 300 else f"HTTP {answer.status}: {text.strip()}"
    except AddressNotAllowed as err:
        raise GiveUp(str(err)) from None
    except TimeoutError:
        return None, f"no answer within {timeout:g}s"
    except (aiohttp.ClientError, OSError, ValueError) as err:
        return None, f"{type(err).__name__}: {err}"


@dataclass(frozen=True)
class Send:
    namespace: str
    name: str
    uid: str
    receiver: str
    failures: int = 0
    kind: str = TASK
    """TASK (its ending) or SCHEDULE (its pause)."""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.kind, self.namespace, self.name, self.receiver)


@dataclass(frozen=True)
class Due:
    """A send found still owed: the object as read, its receiver, what the event says."""

    raw: dict[str, Any]
    serving: notify.Serving
    note: notify.Note | notify.PauseNote


class Notifier:
    def __init__(self, writer: Sink, store: Store, term: Term, clock: Clock, *, poster: Poster = post,
                 senders: int = SENDERS, limit: int = QUEUE_LIMIT, within: timedelta = notify.WITHIN) -> None:
        self.writer, self.store, self.term, self.clock = writer, store, term, clock
        self.post, self.senders, self.within = poster, senders, within
        self._queue: asyncio.Queue[Send] = asyncio.Queue(maxsize=limit)
        self._held: dict[tuple[str, str, str, str], Timer | None] = {}
        """Send.key → its retry timer, or None while queued or being sent: offered once at a time."""
        self.schedules: Callable[[], Iterable[dict[str, Any]]] = tuple
        """The TaskSchedules as the schedule controller holds them (the sweep looks for pauses)."""

    def serving(self, namespace: str, pool: str) -> tuple[notify.Serving, ...]:
        """The receivers serving a pool: its own and the namespace's (engine.notify.receivers)."""
        pools = {name: (obj.spec.notifications, obj.spec.allow_link_local)
                 for (ns, name), obj in self.store.pools.items() if ns == namespace and obj.spec.notifications}
        return notify.receivers(pools, pool) if pools else ()

    # ------------------------------------------------------------------ fed by the applier and the schedules

    def offer(self, namespace: str, name: str, uid: str, pool: str) -> None:
        """Queue a send per receiver serving the pool that may want the task's ending; returns at once."""
        for serving in self.serving(namespace, pool):
            self._put(Send(namespace, name, uid, serving.receiver.name))

    def offer_schedule(self, namespace: str, name: str, uid: str, pool: str) -> None:
        """Queue a send per receiver serving the pool that wants a schedule's pause; returns at once."""
        for serving in self.serving(namespace, pool):
            if NotifyOn.SCHEDULE_PAUSED in serving.receiver.outcomes:
                self._put(Send(namespace, name, uid, serving.receiver.name, kind=SCHEDULE))

    def _put(self, send: Send) -> None:
        key = send.key
        if key in self._held and send.failures == 0:
            return
        try:
            self._queue.put_nowait(send)
        except asyncio.QueueFull:
            self._held.pop(key, None)
            metrics.NOTIFICATIONS.labels("dropped").inc()
            return
        self._held[key] = None

    def forget(self, key: Key) -> None:
        """A task left the store: its waiting retries go (a send under way finds it gone)."""
        for held in [k for k in self._held if k[0] == TASK and k[1:3] == key]:
            timer = self._held.pop(held)
            if timer is not None:
                timer.cancel()

    # ------------------------------------------------------------------ background

    async def run(self) -> None:
        await asyncio.gather(self._sweep(), *(self._send_loop() for _ in range(self.senders)))

    async def _sweep(self) -> None:
        while True:
            self.sweep()
            await self.clock.sleep(SWEEP_SECONDS)

    def sweep(self) -> None:
        """Offer every finished task a receiver serving its pool may still want, by what its status
        records, and every paused schedule likewise."""
        now = self.clock.now()
        heard = {ns for (ns, _), obj in self.store.pools.items() if obj.spec.notifications}
        for namespace, pool in [k for k in self.store.pools if k[0] in heard]:
            receivers = [s.receiver for s in self.serving(namespace, pool)]
            for record in self.store.tasks_in_pool(namespace, pool):
                done = record.finished
                if done is None or done.duplicate_of is not None or \
                        (done.finished_at is not None and now - done.finished_at > self.within):
                    continue
                for receiver in receivers:
                    if done.phase.value in receiver.outcomes and receiver.name not in done.notified:
                        self._put(Send(namespace, record.name, record.uid, receiver.name))
        for raw in list(self.schedules()):
            schedule = _paused(raw)
            if schedule is None or (namespace := schedule.metadata.namespace or "") not in heard:
                continue
            receivers = [s.receiver for s in self.serving(namespace, schedule.spec.task_template.spec.pool)]
            for receiver in notify.schedule_owed(receivers, schedule, now, self.within):
                self._put(Send(namespace, schedule.metadata.name or "", schedule.metadata.uid or "", receiver.name,
                               kind=SCHEDULE))

    async def _send_loop(self) -> None:
        while True:
            send = await self._queue.get()
            key = send.key
            try:
                if self.term.acting:
                    await self.send(send)
                else:
                    self._held.pop(key, None)
            except Exception as err:  # noqa: BLE001 - one send's trouble must not stop the sender
                log.warning("notification %s of %s %s/%s: %s; trying again later", send.receiver, send.kind,
                            send.namespace, send.name, err)
                self._again(send, str(err))

    def _again(self, send: Send, why: str) -> None:
        failures = send.failures + 1
        seconds = notify.delay(failures)
        self._held[send.key] = self.clock.call_later(
            seconds, lambda: self._put(Send(send.namespace, send.name, send.uid, send.receiver, failures, send.kind)))

    async def send(self, send: Send) -> None:
        """One send of one receiver's notification, and what follows it (a record, or a retry timer)."""
        key = send.key
        due = await (self._due_schedule(send) if send.kind == SCHEDULE else self._due_task(send))
        if due is None:
            self._held.pop(key, None)  # gone, no longer wanted, or recorded already
            return
        receiver, note = due.serving.receiver, due.note
        body = notify.body(note, receiver.format)
        sent = send.failures + 1
        try:
            headers = await self._headers(send.namespace, receiver, note, body)
            code, why = await self.post(receiver.url, body, headers, receiver.timeout.total_seconds(),
                                        due.serving.allow_link_local)
        except GiveUp as err:
            metrics.NOTIFICATIONS.labels("gave_up").inc()
            await self._record(send, due, False, sent, f"refused for good: {err}")
            self._held.pop(key, None)
            return
        if code is not None and 200 <= code < 300:
            metrics.NOTIFICATIONS.labels("delivered").inc()
            log.info("notification %s of %s %s/%s delivered (%s, send %d)", receiver.name, send.kind, send.namespace,
                     send.name, note.id, sent)
            await self._record(send, due, True, sent, "")
            self._held.pop(key, None)
            return
        final = code is not None and 400 <= code < 500 and code not in (408, 429)
        if final or sent >= receiver.max_attempts:
            metrics.NOTIFICATIONS.labels("gave_up").inc()
            await self._record(send, due, False, sent, why)
            self._held.pop(key, None)
            return
        metrics.NOTIFICATIONS.labels("failed").inc()
        log.info("notification %s of %s %s/%s not delivered (send %d of %d): %s", receiver.name, send.kind,
                 send.namespace, send.name, sent, receiver.max_attempts, why)
        self._again(send, why)

    def _serving(self, namespace: str, pool: str, name: str) -> notify.Serving | None:
        return next((s for s in self.serving(namespace, pool) if s.receiver.name == name), None)

    async def _due_task(self, send: Send) -> Due | None:
        raw = await self.writer.read_task(send.namespace, send.name)
        task = _parsed(Task, raw, send.uid)
        if raw is None or task is None:
            return None
        serving = self._serving(send.namespace, task.spec.pool, send.receiver)
        if serving is None or not notify.owed((serving.receiver,), task, self.clock.now(), self.within):
            return None
        return Due(raw, serving, notify.Note.of(task))

    async def _due_schedule(self, send: Send) -> Due | None:
        raw = await self.writer.read_schedule(send.namespace, send.name)
        schedule = _parsed(TaskSchedule, raw, send.uid)
        if raw is None or schedule is None:
            return None
        serving = self._serving(send.namespace, schedule.spec.task_template.spec.pool, send.receiver)
        if serving is None or not notify.schedule_owed((serving.receiver,), schedule, self.clock.now(), self.within):
            return None
        return Due(raw, serving, notify.PauseNote.of(schedule))

    async def _headers(self, namespace: str, receiver: Receiver, note: notify.Note | notify.PauseNote,
                       body: bytes) -> dict[str, str]:
        headers = {"Content-Type": notify.CONTENT_TYPE[receiver.format], "User-Agent": f"cronoq-notify/{__version__}",
                   notify.ID_HEADER: note.id}
        ref = receiver.signing_key
        if ref is not None:
            try:
                key = await self.writer.read_secret_key(namespace, ref.name, ref.key)
            except ApiError as err:
                raise RuntimeError(f"cannot read the signing key (Secret {ref.name}): {err.message}") from None
            if not key:
                raise RuntimeError(f"the signing key: Secret {ref.name} has no key {ref.key}")
            headers[notify.SIGNATURE_HEADER] = notify.sign(key, body, int(self.clock.now().timestamp()))
        return headers

    async def _record(self, send: Send, due: Due, delivered: bool, sent: int, why: str) -> None:
        """Record the result in the task's (or schedule's) status, re-read on a conflict; a give-up
        gets its Event."""
        receiver, id = due.serving.receiver, due.note.id
        if not delivered:
            log.warning("notification %s of %s %s/%s given up after %d send(s): %s", receiver.name, send.kind,
                        send.namespace, send.name, sent, why)
        entry = notify.entry(receiver.name, id, delivered, sent, self.clock.now())
        raw: dict[str, Any] | None = due.raw
        for _ in range(RECORD_TRIES):
            if raw is None:
                return
            try:
                if send.kind == SCHEDULE:
                    schedule = _parsed(TaskSchedule, raw, send.uid)
                    if schedule is None or schedule.status is None or notify.schedule_event_id(schedule) != id:
                        return  # gone, or paused again since: that pause is another notification
                    status = schedule.status.model_copy(update={
                        "notifications": notify.recorded(schedule.status.notifications, entry)})
                    await self.writer.replace_schedule_status(raw, status.to_dict())
                else:
                    task = _parsed(Task, raw, send.uid)
                    if task is None or task.status is None or notify.task_event_id(task) != id:
                        return  # gone, or ended again since (retried by hand): that ending is another notification
                    task_status = task.status.model_copy(update={
                        "notifications": notify.recorded(task.status.notifications, entry),
                        "epoch": max(task.status.epoch, self.term.epoch)})
                    await self.writer.replace_task_status(raw, task_status.to_dict())
                break
            except Conflict:
                raw = await (self.writer.read_schedule(send.namespace, send.name) if send.kind == SCHEDULE
                             else self.writer.read_task(send.namespace, send.name))
        if not delivered and raw is not None:
            await self.writer.post_event(raw, Event(REASON, f"notification {receiver.name} ({receiver.url}) was not "
                                                            f"delivered after {sent} send(s): {why}"[:1024], True),
                                         self.clock.now())


M = TypeVar("M", Task, TaskSchedule)


def _parsed(model: type[M], raw: dict[str, Any] | None, uid: str) -> M | None:
    """The Task or TaskSchedule as read, while it is still the one of this uid."""
    if raw is None or (raw.get("metadata") or {}).get("uid") != uid:
        return None
    try:
        return model.model_validate(raw)
    except ValueError:
        return None


def _paused(raw: dict[str, Any]) -> TaskSchedule | None:
    """The schedule, when its status says pauseAfterFailures paused it (looked at before parsing it)."""
    conditions = (raw.get("status") or {}).get("conditions") or ()
    if not any(isinstance(c, dict) and c.get("type") == "Paused" and c.get("status") == "True" for c in conditions):
        return None
    return _parsed(TaskSchedule, raw, (raw.get("metadata") or {}).get("uid") or "")
