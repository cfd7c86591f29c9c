"""A pull worker's watch: the Tasks handed to it, as hand-overs (`pod_protocol.handover`).

It lists, then watches, the Tasks whose open attempt is handed to this worker (`status.worker`, a
selectable field: each worker hears of its own attempts only, so a pool's cost per task does not
grow with its workers). A task whose attempt ended, or that went, leaves the selection and arrives
as deleted. A watch that ends at its time is resumed from the last version it delivered (bookmarks
included); it lists again only when it breaks, and then says which tasks the listing holds
(`Listed`), so that what is no longer handed over can be aborted. Against a CRD older than that
field, the pool's Running Tasks are watched instead.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Generator

from cronoq.apiserver.errors import ApiError
from cronoq.pod_protocol import API_VERSION
from cronoq.pod_protocol.handover import HandOver
from cronoq.worker.backoff import Backoff, brief, retry_after
from cronoq.worker.clock import Clock
from cronoq.worker.lease import Gate

log = logging.getLogger("cronoq.worker")

GROUP, VERSION = API_VERSION.split("/")
WATCH_SECONDS = 60
"""How long the API server keeps one watch request open (it is then resumed)."""


@dataclass(frozen=True)
class Seen:
    """A task handed to this worker, as it is now; `deleted` when it left the selection."""

    task: HandOver
    deleted: bool = False


@dataclass(frozen=True)
class Listed:
    """A full listing was just seen: the uids of every task it holds."""

    uids: frozenset[str]


class Relist(Exception):
    """What the watch's reader did with an event failed: list again."""


class Watch:
    """`events()` yields `Seen` and `Listed` until `done` is set; it never raises."""

    def __init__(self, custom: Any, *, namespace: str, pool: str, worker: str, clock: Clock, done: threading.Event,
                 gate: Gate, budget: float) -> None:
        self.custom, self.namespace, self.pool, self.worker = custom, namespace, pool, worker
        self.clock, self.done = clock, done
        self.gate, self.budget = gate, budget
        self._relist = False

    def relist(self) -> None:
        """List again after the event just yielded (its reader failed on it)."""
        self._relist = True

    def _check(self) -> None:
        if self._relist:
            self._relist = False
            raise Relist("handling an event failed")

    def events(self) -> Generator[Seen | Listed, None, None]:
        selector = f"status.worker={self.worker}"
        backoff = Backoff()
        version: str | None = None
        while not self.done.is_set():
            self.gate.wait(self.budget)
            try:
                if version is None:
                    try:
                        listing = self.custom.list_namespaced_custom_object(
                            GROUP, VERSION, self.namespace, "tasks", field_selector=selector, _request_timeout=30)
                    except ApiError as err:
                        if err.status != 400 or selector.startswith("spec.pool="):
                            raise
                        log.warning("the Task CRD has no selectable status.worker (install the CRDs of this release): "
                                    "watching every Running task of pool %s instead", self.pool)
                        selector = f"spec.pool={self.pool},status.phase=Running"
                        continue
                    items = listing.get("items", [])
                    for task in items:
                        yield Seen(HandOver.of_task(task))
                        self._check()
                    yield Listed(frozenset(task["metadata"]["uid"] for task in items))
                    self._check()
                    version = listing["metadata"]["resourceVersion"]
                stream = self.custom.watch_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "tasks", field_selector=selector, resource_version=version,
                    timeout_seconds=WATCH_SECONDS, _request_timeout=(10, WATCH_SECONDS + 15))
                for event in stream:
                    backoff.reset()  # watching again (a refused watch raises before its first event)
                    if self.done.is_set():
                        return
                    version = ((event.get("object") or {}).get("metadata") or {}).get("resourceVersion") or version
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        yield Seen(HandOver.of_task(event["object"]), deleted=event["type"] == "DELETED")
                        self._check()
                backoff.reset()  # it ended at its time (bookmarks kept its version): watch on, no listing
            except Exception as err:  # noqa: BLE001 - the watch is for ever; a gone version lists again
                version = None  # list again: what changed while it was broken
                if not self.done.is_set():
                    wait = backoff.wait(retry_after(err))
                    log.warning("watching tasks failed (%s); again in %.1fs", brief(err), wait)
                    self.clock.wait(self.done, wait)
