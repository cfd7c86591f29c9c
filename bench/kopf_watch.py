"""cronoq's operator with kopf as its watch layer, the B side of the A/B in bench/kopf_ab.py:

    python -m bench.kopf_watch operator <the flags of `cronoq operator`>

Everything but the watches is the operator of the measured revision: the same Runtime, intake,
store, work queue, reconciler and writes, fed the same raw objects of the same kinds, namespaces
and labels. The Runtime makes its watches as always (`Runtime._watches`: kind, collection, label
selector and the feed that takes each object); here kopf event handlers (`@kopf.on.event`,
async, so no hop to a thread) call those feeds instead of kube/watch.py's loops.

kopf is set up as lean as it lets itself be: event handlers only; a progress storage and a
diff-base storage that store, fetch and build nothing (no annotations, no status fields, no copy
of each body to diff against); no Events for its log lines; no peering; no scanning of CRDs or
namespaces; the same server-side label selectors, listing pages and watch length as
kube/watch.py (PAGE, WATCH_SECONDS). Leases are the one kind whose two watches select different
labels (attempt Leases and workers' Leases), and kopf keeps one stream per kind: it watches every
Lease of the namespace and its handlers filter on the label (the bench's Job-mode namespaces hold
no other Leases, so the traffic is the same).

kopf says nothing when its first listing is in, and the Runtime leads only once every watch has
listed: a watch counts as listed once kopf has handed over as many listed objects as a count
made just before (`limit=1` and remainingItemCount), or after LISTING_TIMEOUT.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

import kopf

from cronoq.controller import runtime
from cronoq.kube import watch
from cronoq.apiserver.aio import ApiSession, timeout

log = logging.getLogger(__name__)

LISTING_TIMEOUT = 600.0


class NoProgress(kopf.ProgressStorage):
    """Handlers' progress kept nowhere: event handlers have none."""

    def fetch(self, **_: Any) -> None:
        return None

    def store(self, **_: Any) -> None:
        return None

    def purge(self, **_: Any) -> None:
        return None

    def touch(self, **_: Any) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return essence


class NoDiffBase(kopf.DiffBaseStorage):
    """No last-handled state, and no essence built from each body to diff against it."""

    def build(self, **_: Any) -> Any:
        return {}

    def fetch(self, **_: Any) -> None:
        return None

    def store(self, **_: Any) -> None:
        return None


def settings() -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.persistence.progress_storage = NoProgress()
    s.persistence.diffbase_storage = NoDiffBase()
    s.posting.enabled = False
    s.scanning.disabled = True
    s.peering.standalone = True
    s.watching.server_timeout = watch.WATCH_SECONDS
    s.watching.connect_timeout = watch.CONNECT_TIMEOUT
    s.watching.chunk_size = watch.PAGE
    return s


def resource(w: watch.Watch) -> tuple[str, str]:
    """(apiVersion, plural) of a watch, as kopf's decorators take them."""
    return w.api_version, w.path.rsplit("/", 1)[1]


def namespace_of(w: watch.Watch) -> str | None:
    parts = w.path.split("/")
    return parts[parts.index("namespaces") + 1] if "namespaces" in parts else None


@dataclass
class KopfWatch:
    """What the Runtime holds of a watch (start, stop, synced), fed by kopf's handlers."""
    watch: watch.Watch
    hub: Hub
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    expected: int | None = None
    listed: int = 0

    @property
    def kind(self) -> str:
        return self.watch.kind

    def start(self) -> asyncio.Task[None]:
        return self.hub.start()

    def stop(self) -> None:
        self.hub.stop()

    def deliver(self, kind: str | None, obj: dict[str, Any]) -> None:
        self.watch.feed(kind, obj)
        if kind is None:
            self.listed += 1
            if self.expected is not None and self.listed >= self.expected:
                self.synced.set()


class Hub:
    """One kopf operator in the Runtime's event loop, with a handler per kind and label."""

    def __init__(self, http: ApiSession, watches: list[watch.Watch]) -> None:
        self.http = http
        self.watches = [KopfWatch(w, self) for w in watches]
        self.settings = settings()
        self.registry = kopf.OperatorRegistry()
        kopf.on.login(registry=self.registry)(kopf.login_via_client)
        self.ready, self.stopping = asyncio.Event(), asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        by_resource: dict[tuple[str, str], list[KopfWatch]] = {}
        for w in self.watches:
            by_resource.setdefault(resource(w.watch), []).append(w)
        for (api_version, plural), group in by_resource.items():
            selectors = {w.watch.label_selector for w in group}
            on_server = len(selectors) == 1 and None not in selectors
            if on_server:  # one selector (a label that must be there): filtered by the API server
                self.settings.watching.label_selectors[api_version, plural] = next(iter(selectors))
            for selector in selectors:
                self._handle(api_version, plural, selector, None if on_server else selector,
                             [w for w in group if w.watch.label_selector == selector])

    def _handle(self, api_version: str, plural: str, selector: str | None, label: str | None,
                group: list[KopfWatch]) -> None:
        """One handler for the watches of one kind and selector; `label`: kopf filters on it."""
        scoped = [(namespace_of(w.watch), w) for w in group]

        async def on_event(event: dict[str, Any], namespace: str | None, **_: Any) -> None:
            for scope, w in scoped:
                if scope is None or scope == namespace:
                    w.deliver(event["type"], event["object"])

        kopf.on.event(api_version, plural, labels={label: kopf.PRESENT} if label else None,
                      id=f"{plural}-{selector}", registry=self.registry)(on_event)

    def start(self) -> asyncio.Task[None]:
        if self.task is None:
            self.task = asyncio.create_task(self._run(), name="kopf")
        return self.task

    def stop(self) -> None:
        self.stopping.set()

    async def _run(self) -> None:
        for w in self.watches:
            w.expected = await self._count(w.watch)
        asyncio.create_task(self._listed_if_empty(), name="kopf-listed")
        asyncio.get_running_loop().call_later(LISTING_TIMEOUT, self._listed_anyway)
        scopes = {namespace_of(w.watch) for w in self.watches}
        kwargs: dict[str, Any] = {"clusterwide": True} if None in scopes else {"namespaces": sorted(scopes)}
        await kopf.operator(registry=self.registry, settings=self.settings, standalone=True,
                            stop_flag=self.stopping, ready_flag=self.ready, **kwargs)

    async def _count(self, w: watch.Watch) -> int:
        query = f"?limit=1&labelSelector={w.label_selector}" if w.label_selector else "?limit=1"
        listing = await self.http.request("GET", w.path + query, timeout(connect=10, read=60))
        return len(listing.get("items") or []) + int((listing.get("metadata") or {}).get("remainingItemCount") or 0)

    async def _listed_if_empty(self) -> None:
        """A kind with nothing to list has listed once kopf has started (logged in, resources found)."""
        await self.ready.wait()
        for w in self.watches:
            if w.expected == 0:
                w.synced.set()

    def _listed_anyway(self) -> None:
        for w in self.watches:
            if not w.synced.is_set():
                log.warning("%s: %d of %d listed objects after %.0fs; counted as listed", w.kind, w.listed,
                            w.expected, LISTING_TIMEOUT)
                w.synced.set()


def _kopf_watches(self: runtime.Runtime, http: ApiSession) -> list[Any]:
    """The Runtime's own watches, each handed to kopf instead of run."""
    self.kopf = Hub(http, ORIGINAL(self, http))  # type: ignore[attr-defined]
    return self.kopf.watches  # type: ignore[attr-defined]


async def serve(rt: runtime.Runtime = runtime.RUNTIME) -> None:
    """runtime.serve, but SIGTERM and SIGINT taken back from kopf (which takes them when it starts),
    so the operator stops as a whole: Runtime.stop, which stops kopf too."""
    stopping = asyncio.Event()
    await rt.start()
    await rt.kopf.ready.wait()  # type: ignore[attr-defined]
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    await rt.stop()
    with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(rt.kopf.task, 10)  # type: ignore[attr-defined]  # kopf's own cleanup


ORIGINAL = runtime.Runtime._watches


def main() -> int:
    runtime.Runtime._watches = _kopf_watches  # type: ignore[method-assign]
    runtime.serve = serve
    from cronoq.cli import main as cronoq
    return cronoq(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
