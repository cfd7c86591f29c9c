"""The dashboard's copy of the Tasks, TaskPools and TaskSchedules it may see, kept current by
watches (an informer, as `kubectl get -w` would follow them): the pages read it, so that a list
of 10,000 tasks filters and pages in memory instead of asking the API server on every click.

Every read is made with the user's own kubeconfig: a kind the user may not list is kept as the
API server's refusal, which the pages show. Each kind is followed by a thread of its own (the
client's requests block); `on_change(plural, keys)` is called from that thread.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from urllib3.exceptions import HTTPError

from cronoq.api import Task, TaskPool, TaskSchedule
from cronoq.apiserver.errors import ApiError, Gone, server_message
from cronoq.client import Client

log = logging.getLogger("cronoq.dashboard")

KINDS: dict[str, type[BaseModel]] = {"tasks": Task, "taskpools": TaskPool, "taskschedules": TaskSchedule}
LIST_CHUNK = 500
"""Objects per list request (limit/continue): a large first list arrives in pieces."""
WATCH_SECONDS = 60
Key = tuple[str, str]
"""(namespace, name)"""


def api_message(err: ApiError) -> str:
    """The API server's own words for a refusal (as kubectl prints them)."""
    message = server_message(err)
    return f"{err.status} {err.reason}" if message is None else f"{message} ({err.status} {err.reason})"


class Cache:
    """The objects of one namespace (or of every one), by kind, kept by watches."""

    def __init__(self, client: Client, all_namespaces: bool,
                 on_change: Callable[[str, set[Key]], None] = lambda plural, keys: None) -> None:
        self.client = client
        self.all_namespaces = all_namespaces
        self.on_change = on_change
        self._objects: dict[str, dict[Key, Any]] = {plural: {} for plural in KINDS}
        self._lock = threading.Lock()
        self.errors: dict[str, str] = {}
        """plural → why it cannot be listed (the API server's message), while it cannot."""
        self.synced = {plural: threading.Event() for plural in KINDS}
        self._stop = threading.Event()

    def start(self) -> Cache:
        for plural in KINDS:
            threading.Thread(target=self._follow, args=(plural,), name=f"watch-{plural}", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(e.wait(max(0.0, deadline - time.monotonic())) for e in self.synced.values())

    # ------------------------------------------------------------------ reading

    def tasks(self) -> list[Task]:
        with self._lock:
            return list(self._objects["tasks"].values())

    def pools(self) -> list[TaskPool]:
        with self._lock:
            return sorted(self._objects["taskpools"].values(), key=lambda p: (p.metadata.namespace, p.metadata.name))

    def schedules(self) -> list[TaskSchedule]:
        with self._lock:
            return sorted(self._objects["taskschedules"].values(),
                          key=lambda s: (s.metadata.namespace, s.metadata.name))

    def get(self, plural: str, namespace: str, name: str) -> Any:
        with self._lock:
            return self._objects[plural].get((namespace, name))

    def namespace_tasks(self, namespace: str) -> list[Task]:
        with self._lock:
            return [t for (ns, _), t in self._objects["tasks"].items() if ns == namespace]

    # ------------------------------------------------------------------ following

    def _follow(self, plural: str) -> None:
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._relist(plural)
                rv = self._watch(plural, rv)
            except Gone:  # our resourceVersion is too old: list again
                rv = None
            except ApiError as err:
                self._failed(plural, api_message(err))
                rv = None
            except (HTTPError, OSError) as err:
                self._failed(plural, f"the API server cannot be reached: {err}")
                rv = None

    def _failed(self, plural: str, message: str) -> None:
        if self.errors.get(plural) != message:
            log.warning("cannot follow %s: %s", plural, message)
            self.errors[plural] = message
            self.synced[plural].set()  # synced to "cannot": the pages say why instead of waiting
            self.on_change(plural, set())
        self._stop.wait(2.0)

    def path(self, plural: str) -> str:
        return self.client.path(plural, all_namespaces=self.all_namespaces)

    def _relist(self, plural: str) -> str:
        """List in pages (LIST_CHUNK objects each), each page put into the cache as it arrives, then
        drop what the listing lacks: the cache never holds a second copy of every object beside
        the first, and what is parsed at once is one page. The watch goes on from the first page's
        resourceVersion, the snapshot every page is read from; a `continue` token that expires
        meanwhile (410) makes `_follow` list again from the first page."""
        seen: set[Key] = set()
        changed: set[Key] = set()
        version: str | None = None
        token = None
        while True:
            listing = self.client.api.request("GET", self.path(plural), {"limit": LIST_CHUNK, "continue": token})
            if version is None:
                version = listing["metadata"]["resourceVersion"]
            page = {_key(obj): self._parse(plural, obj) for obj in listing.get("items", [])}
            with self._lock:
                objects = self._objects[plural]
                for key, parsed in page.items():
                    if parsed is None:
                        continue
                    seen.add(key)
                    if objects.get(key) != parsed:
                        objects[key] = parsed
                        changed.add(key)
            token = listing["metadata"].get("continue")
            del listing, page
            if not token:
                break
        with self._lock:
            objects = self._objects[plural]
            for key in [k for k in objects if k not in seen]:
                del objects[key]
                changed.add(key)
        self.errors.pop(plural, None)
        self.synced[plural].set()
        self.on_change(plural, changed)
        return version or ""

    def _watch(self, plural: str, rv: str) -> str:
        """Follow the kind from `rv` for one watch (WATCH_SECONDS); an ERROR event raises its error."""
        events = self.client.api.watch(self.path(plural), {"resourceVersion": rv, "timeoutSeconds": WATCH_SECONDS,
                                                            "allowWatchBookmarks": True})
        try:
            for event in events:
                kind, obj = event["type"], event["object"]
                rv = obj["metadata"]["resourceVersion"]
                if kind == "BOOKMARK":
                    continue
                key = _key(obj)
                with self._lock:
                    if kind == "DELETED":
                        self._objects[plural].pop(key, None)
                    else:
                        parsed = self._parse(plural, obj)
                        if parsed is not None:
                            self._objects[plural][key] = parsed
                self.on_change(plural, {key})
                if self._stop.is_set():
                    break
        finally:
            events.close()
        return rv

    @staticmethod
    def _parse(plural: str, obj: dict) -> Any:
        try:
            return KINDS[plural].model_validate(obj)
        except ValidationError as err:  # an object this version cannot read: leave it out, say so once
            log.warning("skipping %s %s: %s", plural, obj.get("metadata", {}).get("name"), err.errors()[0]["msg"])
            return None


def _key(obj: dict) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]
