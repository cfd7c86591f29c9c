"""LIST then WATCH of one kind of object, as plain dicts handed to a callback, with nothing kept
per object: the caller keeps the facts it decides on, and nothing else.

Why not a framework: kopf gave every object of every watched kind its own worker, state and
body copies, which cost most of the operator's CPU per task and most of its memory over
thousands of finished objects, for watches whose events cronoq only turns into a few facts.

Each watch runs in a thread of its own (the kubernetes client is synchronous), reads the
stream line by line as raw JSON (orjson: parsing was the largest single cost of the operator's
CPU with the standard library's decoder; no typed models), and hands events to the event loop in
order. It lists in pages, one listing of the process at a time, each page handed over and handled
before the next is read (so a listing of 50,000 objects never sits in memory at once), watches
from the listing's resourceVersion with bookmarks, resumes from the last version it saw when a
watch ends, and lists afresh when the server says that version is gone (410); then objects it
had reported and the new listing lacks are reported DELETED.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import orjson
from urllib3.exceptions import ReadTimeoutError

log = logging.getLogger(__name__)

Feed = Callable[[str | None, dict[str, Any]], None]
"""(event type — None for an object of a listing —, object)."""

Lister = Callable[..., Any]
"""A kubernetes client list call (`list_namespaced_job`, ...) bound to its scope."""

WATCH_SECONDS = 60
"""Server-side length of one watch request (`timeoutSeconds`); it is resumed from where it ended.
It also bounds how long a stalled watch goes unnoticed: see STALL_MARGIN."""
STALL_MARGIN = 15
"""A healthy watch says something at least once per WATCH_SECONDS: the API server sends a bookmark
just before it ends the request, then ends it (measured: 1-2 s before; its periodic bookmarks are
not to be relied on, the first came after 121 s). A watch silent for WATCH_SECONDS + STALL_MARGIN
is stalled (a proxy or load balancer holding a connection it no longer forwards; TCP keepalive
cannot tell, the proxy's end answers it): drop it and watch again from the last version."""
PAGE = 250
LIST_TIMEOUT = (10, 60)
"""(connect, read) seconds for one page of a listing."""
LISTING = threading.Lock()
"""One listing at a time, across every watch of the process. A page's short-lived objects leave
holes in the heap that the objects kept from it pin (CPython frees an arena only when all of it is
free); pages parsed side by side by several threads left about twice the residue, and, parsing
being bound by the GIL, listing side by side was no faster (measured with recorded objects)."""


class Gone(Exception):
    """The resourceVersion we watch from is too old (410): list again."""


class Stalled(Exception):
    """The watch said nothing, not even its closing bookmark, past its end: watch again from
    `version`, the last one it delivered."""

    def __init__(self, version: str) -> None:
        super().__init__(version)
        self.version = version


@dataclass
class Watch:
    kind: str
    api_version: str
    lister: Lister
    feed: Feed
    """Called in the event loop's thread, in the order the server sent the events."""
    known: Callable[[], Iterable[tuple[str, str]]] = lambda: ()
    """(namespace, name) of the objects the caller holds, to find deletions missed during a gap."""
    label_selector: str | None = None
    answered: Callable[[float, float, str | None], None] | None = None
    """Told (sent, received, Date header) of every answer: the clock-skew estimate's samples."""
    seconds: int = WATCH_SECONDS
    """Length of one watch request; a watch silent for `seconds` + STALL_MARGIN is stalled."""
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the first listing has been handed over."""
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self, loop: asyncio.AbstractEventLoop) -> threading.Thread:
        thread = threading.Thread(target=self._run, args=(loop,), name=f"watch-{self.kind}", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ in the watch thread

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        version: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list(loop)
                version = self._watch(loop, version)
                failures = 0
            except Gone:
                log.info("%s watch: resourceVersion %s is gone; listing again", self.kind, version)
                version = None
            except Stalled as stalled:
                version = stalled.version
                log.warning("%s watch stalled: nothing for %ds, not even its closing bookmark; watching again "
                            "from resourceVersion %s", self.kind, self.seconds + STALL_MARGIN, version)
            except Exception as err:  # noqa: BLE001 - a network or server error: back off, resume
                failures += 1
                delay = min(0.5 * 2 ** min(failures, 6), 30.0)
                log.warning("%s watch failed (%s); resuming in %.1fs", self.kind, err, delay)
                time.sleep(delay)

    def _list(self, loop: asyncio.AbstractEventLoop) -> str:
        """Hand over every object in pages; report as deleted what we held and no longer exists."""
        with LISTING:
            return self._list_pages(loop)

    def _list_pages(self, loop: asyncio.AbstractEventLoop) -> str:
        """While the loop handles one page, the next one's bytes are fetched (the API server's work
        overlaps ours), but parsed only once the loop is done with the previous one: at most one
        page of objects exists at a time."""
        seen: set[tuple[str, str]] = set()
        cont, version = None, ""
        handling: concurrent.futures.Future[Any] | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": PAGE, "_preload_content": False, "_request_timeout": LIST_TIMEOUT}
            if cont:
                kwargs["_continue"] = cont
            if self.label_selector:
                kwargs["label_selector"] = self.label_selector
            data = self._request(**kwargs).data
            if handling is not None:
                handling.result()
            body = orjson.loads(data)
            del data
            items, meta = body.get("items") or [], body.get("metadata") or {}
            for obj in items:
                obj.setdefault("kind", self.kind)
                obj.setdefault("apiVersion", self.api_version)
                seen.add((obj["metadata"].get("namespace", ""), obj["metadata"]["name"]))
            page: list[tuple[str | None, dict[str, Any]]] = [(None, obj) for obj in items]
            del body, items
            handling = asyncio.run_coroutine_threadsafe(_async(functools.partial(self._deliver, page)), loop)
            del page
            cont, version = meta.get("continue"), str(meta.get("resourceVersion", version))
            if not cont:
                break
        if handling is not None:
            handling.result()
        missing = self._call(loop, lambda: [k for k in self.known() if k not in seen])
        self._hand(loop, [("DELETED", {"kind": self.kind, "apiVersion": self.api_version,
                                       "metadata": {"namespace": ns, "name": name}}) for ns, name in missing])
        loop.call_soon_threadsafe(self.synced.set)
        return version

    def _watch(self, loop: asyncio.AbstractEventLoop, version: str) -> str:
        kwargs: dict[str, Any] = {"watch": True, "resource_version": version, "allow_watch_bookmarks": True,
                                  "timeout_seconds": self.seconds, "_preload_content": False,
                                  "_request_timeout": (10, self.seconds + STALL_MARGIN)}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        response = None
        try:
            response = self._request(**kwargs)
            for lines in _chunks(response):  # what arrived together is handed over together
                if self._stop.is_set():
                    break
                batch: list[tuple[str | None, dict[str, Any]]] = []
                for line in lines:
                    event = orjson.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        self._hand(loop, batch)
                        if obj.get("code") == 410:
                            raise Gone()
                        raise RuntimeError(f"watch error: {obj.get('message')}")
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if kind == "BOOKMARK":
                        continue
                    obj.setdefault("kind", self.kind)
                    obj.setdefault("apiVersion", self.api_version)
                    batch.append((kind, obj))
                self._hand(loop, batch)
        except ReadTimeoutError:  # silent past its length: no answer's headers, or nothing more in the stream
            raise Stalled(version) from None
        finally:
            if response is not None:
                response.release_conn()
        return version

    def _request(self, **kwargs: Any) -> Any:
        """One LIST or WATCH request. A 410 answered as the HTTP status (rather than as an ERROR
        event in the stream) means the same: list again, never retry the same version forever."""
        from kubernetes.client.exceptions import ApiException

        sent = time.time()
        try:
            response = self.lister(**kwargs)
        except ApiException as err:
            if err.status == 410:
                raise Gone() from None
            raise
        if self.answered is not None:
            headers = getattr(response, "headers", None)
            self.answered(sent, time.time(), headers.get("Date") if headers is not None else None)
        return response

    def _hand(self, loop: asyncio.AbstractEventLoop, events: list[tuple[str | None, dict[str, Any]]]) -> None:
        if events:
            loop.call_soon_threadsafe(self._deliver, events)

    def _deliver(self, events: list[tuple[str | None, dict[str, Any]]]) -> None:
        for kind, obj in events:
            try:
                self.feed(kind, obj)
            except Exception:  # noqa: BLE001 - one bad object must not stop the watch
                log.exception("handling a %s event of %s %s failed", kind, self.kind,
                              (obj.get("metadata") or {}).get("name"))

    def _call(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> Any:
        """Run `fn` in the loop's thread (where the caller's state lives) and return its result."""
        return asyncio.run_coroutine_threadsafe(_async(fn), loop).result()


async def _async(fn: Callable[[], Any]) -> Any:
    return fn()


def _chunks(response: Any) -> Iterator[list[bytes]]:
    """The complete lines of a streaming HTTP response, in the groups they arrived in."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        lines = [line for line in lines if line.strip()]
        if lines:
            yield lines
    if pending.strip():
        yield [pending]


def listers(api: Any, namespace: str | None) -> dict[str, tuple[str, Lister, str | None]]:
    """What cronoq watches, in one namespace or (None) all: kind → (apiVersion, list call, label
    selector). Attempt Jobs, pods and Leases are only those carrying cronoq's task-uid label;
    pull workers' own Leases those carrying their pool's label."""
    from kubernetes import client

    from cronoq.api import GROUP, VERSION
    from cronoq.engine import naming

    custom, batch, core = client.CustomObjectsApi(api), client.BatchV1Api(api), client.CoreV1Api(api)
    coordination = client.CoordinationV1Api(api)
    ours = naming.TASK_UID
    if namespace is None:
        return {
            "TaskPool": (f"{GROUP}/{VERSION}", lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, "taskpools", **kw), None),
            "Task": (f"{GROUP}/{VERSION}", lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, "tasks", **kw), None),
            "TaskSchedule": (f"{GROUP}/{VERSION}", lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, "taskschedules", **kw), None),
            "Job": ("batch/v1", batch.list_job_for_all_namespaces, ours),
            "Pod": ("v1", core.list_pod_for_all_namespaces, ours),
            "Lease": ("coordination.k8s.io/v1", coordination.list_lease_for_all_namespaces, ours),
            "WorkerLease": ("coordination.k8s.io/v1", coordination.list_lease_for_all_namespaces, naming.WORKER_POOL),
        }
    ns = namespace
    return {
        "TaskPool": (f"{GROUP}/{VERSION}", lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "taskpools", **kw), None),
        "Task": (f"{GROUP}/{VERSION}", lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "tasks", **kw), None),
        "TaskSchedule": (f"{GROUP}/{VERSION}", lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "taskschedules", **kw), None),
        "Job": ("batch/v1", lambda **kw: batch.list_namespaced_job(ns, **kw), ours),
        "Pod": ("v1", lambda **kw: core.list_namespaced_pod(ns, **kw), ours),
        "Lease": ("coordination.k8s.io/v1", lambda **kw: coordination.list_namespaced_lease(ns, **kw), ours),
        "WorkerLease": ("coordination.k8s.io/v1", lambda **kw: coordination.list_namespaced_lease(ns, **kw),
                        naming.WORKER_POOL),
    }
