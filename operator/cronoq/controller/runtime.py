"""The operator process around the Controller: API client, the initial listing that fills the
store before anything is decided, /metrics, and the /healthz and /readyz probes."""
from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from kubernetes import client, config

from cronoq import metrics
from cronoq.api import GROUP, VERSION
from cronoq.controller.leader import Leadership
from cronoq.controller.reconciler import Controller
from cronoq.engine import naming
from cronoq.kube.writes import Writer

log = logging.getLogger(__name__)


@dataclass
class Options:
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; globs such as `team-*` allowed; empty: all."""
    metrics_port: int | None = 9090
    probe_port: int | None = 8080
    epoch: int = 0
    workers: int = 8
    leader_election: bool = True
    lease_namespace: str | None = None
    lease_name: str = "cronoq-leader"
    sidecar_image: str | None = None

    @property
    def globs(self) -> bool:
        return any(set(ns) & set("*?[") for ns in self.namespaces)

    def watches(self, namespace: str) -> bool:
        return not self.namespaces or any(fnmatch.fnmatchcase(namespace, p) for p in self.namespaces)


def api_client() -> client.ApiClient:
    """In a pod, the pod's ServiceAccount; elsewhere, the current kubeconfig context."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = 32
    return client.ApiClient(configuration)


@dataclass
class Runtime:
    options: Options = field(default_factory=Options)
    controller: Controller | None = None
    leadership: Leadership | None = None
    api: client.ApiClient | None = None
    ready: bool = False
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _probe_runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Serve probes and metrics, then lead (or campaign in the background until we do).
        Followers watch and keep their store warm, but decide and write nothing."""
        api = self.api = api_client()
        writer = Writer(api, instance=os.environ.get("POD_NAME", "") or os.uname().nodename)
        self.controller = Controller(writer, epoch=self.options.epoch, workers=self.options.workers,
                                     sidecar_image=self.options.sidecar_image)
        if self.options.probe_port:
            await self._serve_probes(self.options.probe_port)
        if self.options.metrics_port:
            metrics.serve(self.options.metrics_port)
        metrics.LEADER.set(0)
        self.ready = True  # ready to take over: standby replicas count as available
        if not self.options.leader_election:
            await self._lead(self.options.epoch)
            return
        namespace = self.options.lease_namespace or os.environ.get("POD_NAMESPACE") or "default"
        self.leadership = Leadership(api, namespace, self.options.lease_name)
        writer.guard = self.leadership.valid
        self._tasks.append(asyncio.create_task(self.leadership.run(self._lead, self._lost), name="cronoq-election"))

    async def _lead(self, epoch: int) -> None:
        self.controller.epoch = epoch
        await asyncio.to_thread(self._warm, self.api)
        self._tasks.append(asyncio.create_task(self.controller.run(), name="cronoq-controller"))
        metrics.LEADER.set(1)
        log.info("cronoq is reconciling %s (epoch %d)", ", ".join(self.options.namespaces) or "all namespaces", epoch)

    def _lost(self) -> None:
        """Stop acting at once; exit so the process is restarted as a follower."""
        self.controller.acting = False
        metrics.LEADER.set(0)
        log.error("lost leadership: exiting")
        logging.shutdown()
        os._exit(3)

    async def stop(self) -> None:
        self.ready = False
        metrics.LEADER.set(0)
        for task in self._tasks:
            task.cancel()
        if self.controller is not None:
            self.controller.acting = False
        if self.leadership is not None:
            await asyncio.to_thread(self.leadership.release)
        if self._probe_runner is not None:
            await self._probe_runner.cleanup()

    def _warm(self, api: client.ApiClient) -> None:
        """List everything once, so the first admission decisions see every running attempt.

        Raw JSON, paged: the kubernetes client's typed models would cost seconds of CPU and
        hundreds of MiB for ten thousand Jobs and pods that are reduced to a few facts anyway."""
        custom, batch, core = client.CustomObjectsApi(api), client.BatchV1Api(api), client.CoreV1Api(api)
        coordination = client.CoordinationV1Api(api)
        selector = naming.TASK_UID
        c = self.controller
        scopes = (None,) if self.options.globs or not self.options.namespaces else self.options.namespaces
        for ns in scopes:
            if ns is None:
                listings = (
                    ("TaskPool", lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, "taskpools", **kw), c.on_pool),
                    ("Task", lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, "tasks", **kw), c.on_task),
                    ("Job", lambda **kw: batch.list_job_for_all_namespaces(label_selector=selector, **kw), c.on_job),
                    ("Pod", lambda **kw: core.list_pod_for_all_namespaces(label_selector=selector, **kw), c.on_pod),
                    ("Lease", lambda **kw: coordination.list_lease_for_all_namespaces(label_selector=selector, **kw),
                     c.on_lease))
            else:
                listings = (
                    ("TaskPool", lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "taskpools", **kw),
                     c.on_pool),
                    ("Task", lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "tasks", **kw), c.on_task),
                    ("Job", lambda **kw: batch.list_namespaced_job(ns, label_selector=selector, **kw), c.on_job),
                    ("Pod", lambda **kw: core.list_namespaced_pod(ns, label_selector=selector, **kw), c.on_pod),
                    ("Lease", lambda **kw: coordination.list_namespaced_lease(ns, label_selector=selector, **kw),
                     c.on_lease))
            for kind, lister, feed in listings:
                for obj in _list_raw(lister):
                    if not self.options.watches(obj["metadata"]["namespace"]):
                        continue
                    obj.setdefault("kind", kind)
                    if kind in ("TaskPool", "Task"):
                        obj.setdefault("apiVersion", f"{GROUP}/{VERSION}")
                    feed(None, obj)

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


def _list_raw(lister, page: int = 500):
    """Every object of a LIST, as plain dicts, in pages of `page`."""
    cont = None
    while True:
        kwargs = {"limit": page, "_preload_content": False}
        if cont:
            kwargs["_continue"] = cont
        body = json.loads(lister(**kwargs).data)
        yield from body.get("items") or []
        cont = (body.get("metadata") or {}).get("continue")
        if not cont:
            return


RUNTIME = Runtime()
