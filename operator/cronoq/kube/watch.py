"""LIST then WATCH of one kind of object, as plain dicts handed to a callback, with nothing kept
per object: the caller keeps the facts it decides on, and nothing else.

Why not kopf (docs/development/why-not-kopf.md): cronoq only turns each event into a few facts, and kopf
hands each event to a worker task of its object, detects causes, wraps the body and keeps a
record of every object it has seen. Measured with the same operator fed by kopf 1.45.2's event
handlers in place of these loops (bench/kopf_ab.py, 2026-12-06, operator/ of 52212aa, 2 shared
vCPUs, 3 rounds each, medians): 1.96x the operator's CPU per task in bursts of 1,000 (18.3 against
9.3 ms; the watch layer's py-spy samples about 6x), 1.96x its RSS at rest over 10,000 finished
Tasks with their Jobs and pods (226 against 115 MiB), the same 4.02 writes per task.

Each watch is a coroutine on the event loop, over the operator's one HTTP stack (apiserver/aio.py,
aiohttp, shared with the writes and the leader Lease): no thread of its own, no hand-off to the
loop. It reads the stream as raw JSON lines (orjson: parsing was the largest single cost of the
operator's CPU with the standard library's decoder; no typed models) and hands what arrived
together to the callback, in order. It lists in pages (`limit`/`continue`, PAGE objects each), one
listing of the process at a time, each page handed over and handled before the next is parsed (so
a new leader's listing of 100,000 Tasks never sits in memory at once, as one response or as
parsed objects), watches from the listing's resourceVersion with bookmarks, resumes from the last
version it saw when a watch ends, and lists afresh when the server says that version is gone
(410); then objects it had reported and the new listing lacks are reported DELETED.

Paging follows the API's consistency rules (Kubernetes API concepts, "Retrieving large results
sets in chunks"): every page of one listing is read from the same snapshot, the first page's
resourceVersion, which is the version the watch starts from. A `continue` token lives only as
long as the server keeps that snapshot (etcd's compaction, every 5 minutes by default): an
expired one is answered 410 together with a token to go on from the newest snapshot, which would
make the listing a mix of two times with no single version to watch from, so the listing starts
again from its first page instead (what was handed over already is handed over again: the
callers keep facts by object, so a repeat is harmless).
"""
from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import aiohttp
import orjson

from cronoq.apiserver.aio import Answered, ApiSession, timeout
from cronoq.apiserver.errors import Gone, event_error
from cronoq.kube.watch_timing import STALL_MARGIN, WATCH_SECONDS

log = logging.getLogger(__name__)

Feed = Callable[[str | None, dict[str, Any]], None]
"""(event type — None for an object of a listing —, object)."""

PAGE = 250
"""Objects per page of a listing. A page is the most the listing holds at once: its bytes, then
its parsed objects until the feed has handled them. An unfinished Task weighs about 3 KiB of JSON
(and a few times that parsed), up to ~1.5 MiB with a large env or args: 250 bounds a page at a few
MiB in the usual case while 100,000 objects still take only 400 requests (kubectl and client-go's
informers use 500; half of that halves the worst page for requests that cost ~1 ms each)."""
LIST_TIMEOUT = (10, 60)
"""(connect, read) seconds for one page of a listing."""
CONNECT_TIMEOUT = 10
"""Seconds to make a watch's connection."""
_LISTING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def listing() -> asyncio.Lock:
    """One listing at a time, across every watch of the process (of its event loop). A page's
    short-lived objects leave holes in the heap that the objects kept from it pin (CPython frees an
    arena only when all of it is free); pages of several listings side by side left about twice the
    residue, and, parsing being bound by the GIL, listing side by side was no faster (measured with
    recorded objects, when the watches were threads)."""
    loop = asyncio.get_running_loop()
    lock = _LISTING.get(loop)
    if lock is None:
        lock = _LISTING[loop] = asyncio.Lock()
    return lock


class Expired(Gone):
    """The listing's `continue` token expired (410) after `handed` objects: list again from the start."""

    def __init__(self, handed: int) -> None:
        super().__init__(f"the listing's continue token expired after {handed} objects")
        self.handed = handed


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
    http: ApiSession
    path: str
    """The kind's collection, e.g. `/api/v1/pods` or `/apis/batch/v1/namespaces/ns/jobs`."""
    feed: Feed
    """Called in the order the server sent the events."""
    known: Callable[[], Iterable[tuple[str, str]]] = lambda: ()
    """(namespace, name) of the objects the caller holds, to find deletions missed during a gap."""
    label_selector: str | None = None
    answered: Answered | None = None
    """Told (sent, received, Date header) of every answer: the clock-skew estimate's samples."""
    seconds: int = WATCH_SECONDS
    """Length of one watch request; a watch silent for `seconds` + STALL_MARGIN is stalled."""
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the first listing has been handed over."""
    _task: asyncio.Task[None] | None = None

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self.run(), name=f"watch-{self.kind}")
        return self._task

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def run(self) -> None:
        version: str | None = None
        failures = 0
        while True:
            try:
                if version is None:
                    version = await self._list()
                version = await self._watch(version)
                failures = 0
            except Expired as expired:
                log.warning("%s listing: its continue token expired after %d objects (a listing slower than the "
                            "server keeps its snapshot); listing again from the start", self.kind, expired.handed)
                version = None
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
                log.warning("%s watch failed (%s); resuming in %.1fs", self.kind, _reason(err), delay)
                await asyncio.sleep(delay)

    async def _list(self) -> str:
        """Hand over every object in pages; report as deleted what we held and no longer exists."""
        async with listing():
            return await self._list_pages()

    async def _list_pages(self) -> str:
        """While the feed handles one page, the next one's bytes are on their way (the API server's
        work overlaps ours), but parsed only once the feed is done with the previous one: at most one
        page of objects exists at a time."""
        seen: set[tuple[str, str]] = set()
        version: str | None = None
        cont: str | None = None
        fetching = asyncio.ensure_future(self._page(None))
        try:
            while True:
                try:
                    data = await fetching
                except Gone:
                    if cont is None:
                        raise
                    raise Expired(len(seen)) from None
                body = orjson.loads(data)
                del data
                items, meta = body.get("items") or [], body.get("metadata") or {}
                for obj in items:
                    obj.setdefault("kind", self.kind)
                    obj.setdefault("apiVersion", self.api_version)
                    seen.add((obj["metadata"].get("namespace", ""), obj["metadata"]["name"]))
                page: list[tuple[str | None, dict[str, Any]]] = [(None, obj) for obj in items]
                del body, items
                cont = meta.get("continue")
                if version is None:  # the snapshot every page is read from: the first page's
                    version = str(meta.get("resourceVersion", ""))
                if cont:
                    fetching = asyncio.ensure_future(self._page(cont))
                    await asyncio.sleep(0)  # the next page's request leaves before this page is handled
                self._deliver(page)
                del page
                if not cont:
                    break
        finally:
            _drop(fetching)
        missing = [k for k in self.known() if k not in seen]
        self._deliver([("DELETED", {"kind": self.kind, "apiVersion": self.api_version,
                                    "metadata": {"namespace": ns, "name": name}}) for ns, name in missing])
        self.synced.set()
        return version or ""

    async def _page(self, cont: str | None) -> bytes:
        params = {"limit": str(PAGE)}
        if cont:
            params["continue"] = cont
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        async with self._open(params, timeout(connect=LIST_TIMEOUT[0], read=LIST_TIMEOUT[1])) as response:
            return await response.read()

    async def _watch(self, version: str) -> str:
        params = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(self.seconds)}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        try:
            async with self._open(params, timeout(connect=CONNECT_TIMEOUT, read=self.seconds + STALL_MARGIN)) as response:
                async for lines in _chunks(response.content):  # what arrived together is handed over together
                    batch: list[tuple[str | None, dict[str, Any]]] = []
                    for line in lines:
                        event = orjson.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":  # 410 (the version is gone: list again) or another refusal
                            self._deliver(batch)
                            raise event_error(obj)
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                        if kind == "BOOKMARK":
                            continue
                        obj.setdefault("kind", self.kind)
                        obj.setdefault("apiVersion", self.api_version)
                        batch.append((kind, obj))
                    self._deliver(batch)
        except aiohttp.SocketTimeoutError:  # silent past its length: no answer's headers, or nothing more in the stream
            raise Stalled(version) from None
        return version

    @asynccontextmanager
    async def _open(self, params: dict[str, str], limits: aiohttp.ClientTimeout) -> AsyncIterator[aiohttp.ClientResponse]:
        """One LIST or WATCH request. A 410 answered as the HTTP status (rather than as an ERROR
        event in the stream) is the same Gone: list again, never retry the same version forever."""
        async with self.http.open("GET", self.path, limits, params=params, answered=self.answered) as response:
            yield response

    def _deliver(self, events: list[tuple[str | None, dict[str, Any]]]) -> None:
        for kind, obj in events:
            try:
                self.feed(kind, obj)
            except Exception:  # noqa: BLE001 - one bad object must not stop the watch
                log.exception("handling a %s event of %s %s failed", kind, self.kind,
                              (obj.get("metadata") or {}).get("name"))


def _drop(fetching: asyncio.Future[bytes]) -> None:
    """A page no longer wanted (the listing failed): stop fetching it, or take its error."""
    if not fetching.done():
        fetching.cancel()
    elif not fetching.cancelled():
        fetching.exception()


def _reason(err: Exception) -> str:
    """An error in a line of the log: its message, else its type (aiohttp's timeouts have none)."""
    return str(err) or type(err).__name__


async def _chunks(content: aiohttp.StreamReader) -> AsyncIterator[list[bytes]]:
    """The complete lines of a streaming HTTP answer, in the groups they arrived in."""
    pending = b""
    async for chunk in content.iter_any():
        pending += chunk
        *lines, pending = pending.split(b"\n")
        lines = [line for line in lines if line.strip()]
        if lines:
            yield lines
    if pending.strip():
        yield [pending]


def sources(namespace: str | None) -> dict[str, tuple[str, str, str | None]]:
    """What cronoq watches, in one namespace or (None) all: kind → (apiVersion, collection path,
    label selector). Attempt Jobs, pods and Leases are only those carrying cronoq's task-uid label;
    pull workers' own Leases those carrying their pool's label."""
    from cronoq.api import GROUP, VERSION
    from cronoq.engine import naming

    ours = naming.TASK_UID
    scope = "" if namespace is None else f"/namespaces/{namespace}"
    custom = f"{GROUP}/{VERSION}"
    return {
        "TaskPool": (custom, f"/apis/{custom}{scope}/taskpools", None),
        "Task": (custom, f"/apis/{custom}{scope}/tasks", None),
        "TaskSchedule": (custom, f"/apis/{custom}{scope}/taskschedules", None),
        "Job": ("batch/v1", f"/apis/batch/v1{scope}/jobs", ours),
        "Pod": ("v1", f"/api/v1{scope}/pods", ours),
        "Lease": ("coordination.k8s.io/v1", f"/apis/coordination.k8s.io/v1{scope}/leases", ours),
        "WorkerLease": ("coordination.k8s.io/v1", f"/apis/coordination.k8s.io/v1{scope}/leases", naming.WORKER_POOL),
    }
