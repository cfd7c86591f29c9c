"""The notification sender (issue 55, item 2): the leader's background work that POSTs each finished
task's outcome to the receivers its pool names, off the dispatch path.

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
  of its pool still wants, by what its status records, is offered. So a new leader sends what the
  last one did not record — with the same event id — and nothing it did.

At least once: a send that landed but whose record did not (a failover in between) is sent again
with the same id; the receiver deduplicates on it.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import aiohttp

from cronoq import __version__, metrics
from cronoq.api import Task
from cronoq.api.notify import Receiver
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


class Sink(Writer, Protocol):
    async def read_secret_key(self, namespace: str, name: str, key: str) -> bytes | None: ...


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


class Notifier:
    def __init__(self, writer: Sink, store: Store, term: Term, clock: Clock, *, poster: Poster = post,
                 senders: int = SENDERS, limit: int = QUEUE_LIMIT, within: timedelta = notify.WITHIN) -> None:
        self.writer, self.store, self.term, self.clock = writer, store, term, clock
        self.post, self.senders, self.within = poster, senders, within
        self._queue: asyncio.Queue[Send] = asyncio.Queue(maxsize=limit)
        self._held: dict[tuple[str, str, str], Timer | None] = {}
        """(namespace, name, receiver) → its retry timer, or None while queued or being sent: offered once at a time."""

    # ------------------------------------------------------------------ fed by the applier

    def offer(self, namespace: str, name: str, uid: str, pool: str) -> None:
        """Queue a send per receiver of the pool that may want the task's ending; returns at once."""
        spec = self.store.pools.get((namespace, pool))
        if spec is None or not spec.spec.notifications:
            return
        for receiver in spec.spec.notifications:
            self._put(Send(namespace, name, uid, receiver.name))

    def _put(self, send: Send) -> None:
        key = (send.namespace, send.name, send.receiver)
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
        for held in [k for k in self._held if k[:2] == key]:
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
        """Offer every finished task a receiver of its pool may still want, by what its status records."""
        now = self.clock.now()
        for (namespace, pool), obj in list(self.store.pools.items()):
            receivers = obj.spec.notifications
            if not receivers:
                continue
            for record in self.store.tasks_in_pool(namespace, pool):
                done = record.finished
                if done is None or done.duplicate_of is not None or \
                        (done.finished_at is not None and now - done.finished_at > self.within):
                    continue
                for receiver in receivers:
                    if done.phase.value in receiver.outcomes and receiver.name not in done.notified:
                        self._put(Send(namespace, record.name, record.uid, receiver.name))

    async def _send_loop(self) -> None:
        while True:
            send = await self._queue.get()
            key = (send.namespace, send.name, send.receiver)
            try:
                if self.term.acting:
                    await self.send(send)
                else:
                    self._held.pop(key, None)
            except Exception as err:  # noqa: BLE001 - one send's trouble must not stop the sender
                log.warning("notification %s of task %s/%s: %s; trying again later", send.receiver, send.namespace,
                            send.name, err)
                self._again(send, str(err))

    def _again(self, send: Send, why: str) -> None:
        key = (send.namespace, send.name, send.receiver)
        failures = send.failures + 1
        seconds = notify.delay(failures)
        self._held[key] = self.clock.call_later(
            seconds, lambda: self._put(Send(send.namespace, send.name, send.uid, send.receiver, failures)))

    async def send(self, send: Send) -> None:
        """One send of one receiver's notification, and what follows it (a record, or a retry timer)."""
        key = (send.namespace, send.name, send.receiver)
        raw = await self.writer.read_task(send.namespace, send.name)
        task = _task(raw, send.uid)
        pool = self.store.pools.get((send.namespace, task.spec.pool)) if task is not None else None
        receiver = next((r for r in pool.spec.notifications if r.name == send.receiver), None) if pool else None
        if task is None or pool is None or receiver is None or \
                receiver not in notify.owed((receiver,), task, self.clock.now(), self.within):
            self._held.pop(key, None)  # gone, no longer wanted, or recorded already
            return
        note = notify.Note.of(task)
        body = notify.body(note, receiver.format)
        sent = send.failures + 1
        try:
            headers = await self._headers(send.namespace, receiver, note, body)
            code, why = await self.post(receiver.url, body, headers, receiver.timeout.total_seconds(),
                                        pool.spec.allow_link_local)
        except GiveUp as err:
            metrics.NOTIFICATIONS.labels("gave_up").inc()
            await self._record(raw, task, receiver, note.id, False, sent, f"refused for good: {err}")
            self._held.pop(key, None)
            return
        if code is not None and 200 <= code < 300:
            metrics.NOTIFICATIONS.labels("delivered").inc()
            log.info("notification %s of task %s/%s delivered (%s, send %d)", receiver.name, send.namespace,
                     send.name, note.id, sent)
            await self._record(raw, task, receiver, note.id, True, sent, "")
            self._held.pop(key, None)
            return
        final = code is not None and 400 <= code < 500 and code not in (408, 429)
        if final or sent >= receiver.max_attempts:
            metrics.NOTIFICATIONS.labels("gave_up").inc()
            await self._record(raw, task, receiver, note.id, False, sent, why)
            self._held.pop(key, None)
            return
        metrics.NOTIFICATIONS.labels("failed").inc()
        log.info("notification %s of task %s/%s not delivered (send %d of %d): %s", receiver.name, send.namespace,
                 send.name, sent, receiver.max_attempts, why)
        self._again(send, why)

    async def _headers(self, namespace: str, receiver: Receiver, note: notify.Note, body: bytes) -> dict[str, str]:
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

    async def _record(self, raw: dict[str, Any] | None, task: Task, receiver: Receiver, id: str, delivered: bool,
                      sent: int, why: str) -> None:
        """Record the result in the task's status (re-read on a conflict); a give-up gets its Event."""
        namespace, name, uid = task.metadata.namespace or "", task.metadata.name or "", task.metadata.uid or ""
        if not delivered:
            log.warning("notification %s of task %s/%s given up after %d send(s): %s", receiver.name, namespace,
                        name, sent, why)
        entry = notify.entry(receiver.name, id, delivered, sent, self.clock.now())
        for _ in range(RECORD_TRIES):
            if raw is None or (current := _task(raw, uid)) is None or current.status is None:
                return
            if notify.task_event_id(current) != id:
                return  # it ended again since (retried by hand): that ending is another notification
            status = current.status.model_copy(update={
                "notifications": notify.recorded(current.status.notifications, entry),
                "epoch": max(current.status.epoch, self.term.epoch)})
            try:
                await self.writer.replace_task_status(raw, status.to_dict())
                break
            except Conflict:
                raw = await self.writer.read_task(namespace, name)
        if not delivered and raw is not None:
            await self.writer.post_event(raw, Event(REASON, f"notification {receiver.name} ({receiver.url}) was not "
                                                            f"delivered after {sent} send(s): {why}"[:1024], True),
                                         self.clock.now())


def _task(raw: dict[str, Any] | None, uid: str) -> Task | None:
    """The Task as read, while it is still the one of this uid."""
    if raw is None or (raw.get("metadata") or {}).get("uid") != uid:
        return None
    try:
        return Task.model_validate(raw)
    except ValueError:
        return None
