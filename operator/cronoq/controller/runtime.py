"""The operator process around the Controller: its one HTTP stack to the API server (apiserver/aio.py,
on the event loop: watches, writes and the leader Lease), the watches that fill the store (all
listed before anything is decided), leader election, /metrics, the /healthz and /readyz probes,
and a clean stop on SIGTERM (the leader Lease released, so a standby takes over at once)."""
from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import signal
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from aiohttp import web

from cronoq import metrics
from cronoq.archive import Database
from cronoq.controller.archive import Archiver
from cronoq.controller.clock import LoopClock
from cronoq.controller.leader import Leadership
from cronoq.controller.notify import Notifier
from cronoq.controller.reconciler import Controller
from cronoq.controller.schedules import Schedules
from cronoq.controller.settings import Options
from cronoq.controller import tracing
from cronoq.controller.workqueue import PoolWork
from cronoq.engine.pools import WorkerTrust
from cronoq.kube.guard import lease_guard_in_force
from cronoq.kube.skew import SKEW
from cronoq.apiserver.aio import ApiSession
from cronoq.apiserver.config import connect
from cronoq.kube.watch import Feed, Watch, sources
from cronoq.kube import writes

log = logging.getLogger(__name__)

ARCHIVE_DRAIN_SECONDS = 5.0
"""How long a clean stop waits for the archive's queue to be written."""

GUARD_SECONDS = 30.0
"""How often the operator looks whether the lease guard is (still) in force."""

Known = Callable[[], Iterable[tuple[str, str]]]
"""The keys (namespace, name) of the objects of one kind the store holds."""


@dataclass
class Runtime:
    options: Options = field(default_factory=Options)
    controller: Controller | None = None
    schedules: Schedules | None = None
    leadership: Leadership | None = None
    http: ApiSession | None = None
    writer: writes.Writer | None = None
    ready: bool = False
    watches: list[Watch] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _probe_runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Serve probes and metrics, start watching, then lead (or campaign in the background
        until we do). Followers watch and keep their store warm, but decide and write nothing."""
        http = self.http = ApiSession(connect())  # in a pod its ServiceAccount, else the kubeconfig
        writer = self.writer = writes.Writer(http, instance=os.environ.get("POD_NAME", "") or os.uname().nodename)
        clock = LoopClock()
        archiver = None
        if self.options.archive:
            keep = self.options.archive_retention
            archiver = Archiver(Database(self.options.archive), clock, keep=keep or None,
                                keep_success=self.options.archive_retention_success)
        traces = tracing.start()
        self.controller = Controller(writer, epoch=self.options.epoch, workers=self.options.workers, clock=clock,
                                     sidecar_image=self.options.sidecar_image, skew=SKEW.offset,
                                     warnings_only=self.options.events == "warnings",
                                     served_warnings_only=self.options.events == "auto",
                                     task_service_account=self.options.task_pods, archiver=archiver,
                                     archive_wait=self.options.archive_wait,
                                     queue_marks_from=self.options.queue_marks_from,
                                     tracing=traces)
        if self.options.notifications:
            c = self.controller
            c.notify_with(Notifier(writer, c.store, c.term, clock))
        self.schedules = Schedules(writer, clock=clock, min_interval=self.options.min_schedule_interval,
                                   workers=self.options.workers, tracing=traces)
        notifier = self.controller.notifier
        if notifier is not None:  # schedules' pauses after failures are notified too
            schedules = self.schedules
            notifier.schedules = lambda: schedules.schedules.values()
            schedules.on_pause = notifier.offer_schedule
        if self.options.probe_port:
            await self._serve_probes(self.options.probe_port)
        if self.options.metrics_port:
            metrics.serve(self.options.metrics_port)
        metrics.LEADER.set(0)
        # A request of the watches' that times out is for the watch to resume from its last
        # version (a stalled watch: kube/watch.py); aiohttp repeats no request that timed out.
        self.watches = self._watches(http)
        for w in self.watches:
            w.start()
        self._tasks.append(asyncio.create_task(self._after_listing(), name="cronoq-after-listing"))
        if self.options.trust_worker_leases:
            self.controller.store.worker_trust = WorkerTrust.TRUSTED
        else:
            self._tasks.append(asyncio.create_task(self._watch_lease_guard(http), name="cronoq-lease-guard"))
        self.ready = True  # ready to take over: standby replicas count as available
        if not self.options.leader_election:
            await self._lead(self.options.epoch)
            return
        namespace = self.options.lease_namespace or os.environ.get("POD_NAMESPACE") or "default"
        self.leadership = Leadership(http, namespace, self.options.lease_name, clock=clock)
        writer.guard = self.leadership.valid
        self._tasks.append(asyncio.create_task(self.leadership.run(self._lead, self._lost), name="cronoq-election"))

    def _watches(self, http: ApiSession) -> list[Watch]:
        """One watch per kind (per namespace when the namespaces are exact names), feeding the
        Controller's intake only what the namespace filter (globs included) lets through."""
        c, s = self._started()
        i = c.intake
        feeds: dict[str, Feed] = {"TaskPool": i.on_pool, "Task": i.on_task, "Job": i.on_job, "Pod": i.on_pod,
                                  "Lease": i.on_lease, "WorkerLease": i.on_worker_lease}
        held: dict[str, Known] = {"TaskPool": lambda: c.store.pools, "Task": lambda: c.store.tasks,
                                  "Job": c.store.job_keys, "Pod": lambda: (), "Lease": lambda: c.store.leases,
                                  "WorkerLease": lambda: c.store.workers}

        # TaskSchedules, and their Tasks too (for their policy, history and status).
        def on_task(kind: str | None, obj: dict[str, Any]) -> None:
            i.on_task(kind, obj)
            s.on_task(kind, obj)

        feeds["TaskSchedule"], held["TaskSchedule"] = s.on_schedule, lambda: s.schedules
        feeds["Task"] = on_task
        scopes = (None,) if self.options.globs or not self.options.namespaces else self.options.namespaces
        made = []
        for scope in scopes:
            for kind, (api_version, path, selector) in sources(scope).items():
                made.append(Watch(kind, api_version, http, path, self._filtered(feeds[kind]),
                                  known=self._held_in(held[kind], scope), label_selector=selector,
                                  answered=SKEW.observe, seconds=self.options.watch_seconds))
        return made

    def _started(self) -> tuple[Controller, Schedules]:
        """The Controller and Schedules that start() made (nothing else runs before it)."""
        assert self.controller is not None and self.schedules is not None, "start() first"
        return self.controller, self.schedules

    def _filtered(self, feed: Feed) -> Feed:
        def hand(kind: str | None, obj: dict[str, Any]) -> None:
            if self.options.watches(obj["metadata"].get("namespace", "")):
                feed(kind, obj)
        return hand

    @staticmethod
    def _held_in(held: Known, scope: str | None) -> Known:
        return lambda: [k for k in held() if scope is None or k[0] == scope]

    async def _lead(self, epoch: int) -> None:
        """Decide only once every watch has listed, so the first admissions see every running attempt."""
        controller, schedules = self._started()
        controller.term.epoch = epoch
        await asyncio.gather(*(w.synced.wait() for w in self.watches))
        self._tasks.append(asyncio.create_task(controller.run(), name="cronoq-controller"))
        self._tasks.append(asyncio.create_task(schedules.run(), name="cronoq-schedules"))
        metrics.LEADER.set(1)
        log.info("cronoq is reconciling %s (epoch %d)", ", ".join(self.options.namespaces) or "all namespaces", epoch)

    async def _watch_lease_guard(self, http: ApiSession) -> None:
        """Believe workers' Leases only while the lease guard is in force; look again every
        GUARD_SECONDS (it may be installed or removed at any time). A change re-decides every
        Workers pool: it starts handing attempts over, or stops."""
        controller = self._started()[0]
        store, queue = controller.store, controller.queue
        while True:
            found = await lease_guard_in_force(http, self.options.lease_guard)
            trust = store.worker_trust if found is None else WorkerTrust.GUARDED if found else WorkerTrust.UNGUARDED
            if trust is not store.worker_trust:
                store.worker_trust = trust
                log.log(logging.INFO if found else logging.WARNING,
                        "the lease guard %s is %s: Workers pools are %s", self.options.lease_guard,
                        "in force" if found else "not installed (or not readable)",
                        "served" if found else "handed nothing (--trust-worker-leases to serve them anyway)")
                for key, pool in store.pools.items():
                    if pool.spec.delivery == "Workers":
                        queue.add(PoolWork(*key))
            await asyncio.sleep(GUARD_SECONDS)

    async def _after_listing(self) -> None:
        await asyncio.gather(*(w.synced.wait() for w in self.watches))
        release_free_memory()

    def _lost(self) -> None:
        """Stop acting at once; exit so the process is restarted as a follower."""
        self._started()[0].term.acting = False
        metrics.LEADER.set(0)
        log.error("lost leadership: exiting")
        logging.shutdown()
        os._exit(3)

    async def stop(self) -> None:
        self.ready = False
        metrics.LEADER.set(0)
        for task in self._tasks:
            task.cancel()
        for w in self.watches:
            w.stop()
        if self.controller is not None:
            self.controller.term.acting = False
            if (archiver := self.controller.archiver) is not None:
                if archiver.migrated and not await archiver.drain(ARCHIVE_DRAIN_SECONDS):
                    log.warning("stopping with rows not yet archived: the next leader writes them from the statuses")
                archiver.close()
            if (traces := self.controller.applier.tracing) is not None:
                await asyncio.to_thread(traces.shutdown)  # sends what is queued
        if self.leadership is not None:
            await self.leadership.release()
        if self.http is not None:
            await self.http.close()
        if self._probe_runner is not None:
            await self._probe_runner.cleanup()

    async def _serve_probes(self, port: int) -> None:
        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def readyz(_: web.Request) -> web.Response:
            return web.Response(text="ready" if self.ready else "starting", status=200 if self.ready else 503)

        app = web.Application()
        app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz)])
        self._probe_runner = web.AppRunner(app)
        await self._probe_runner.setup()
        await web.TCPSite(self._probe_runner, "0.0.0.0", port).start()


RUNTIME = Runtime()


def release_free_memory() -> None:
    """Hand the listing's freed memory back to the system. glibc keeps freed heap for reuse, so
    without this an operator stays at its startup peak for good (measured: idle RSS equal to the
    peak while listing). Elsewhere than glibc: nothing to do."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


async def serve(runtime: Runtime = RUNTIME) -> None:
    """Run the operator until SIGTERM or SIGINT."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await runtime.start()
    await stopping.wait()
    log.info("stopping")
    await runtime.stop()
