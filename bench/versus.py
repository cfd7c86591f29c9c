"""The peers' scenarios: the bench's work done by Kueue (one suspended Job per item, admitted
through a LocalQueue) and by Argo Workflows (one Workflow of one container step per item), measured
as the cronoq scenario measures: the same load generator and observer, the audit log for the
controller's requests, /proc for the controller's and the control plane's CPU.

Per item: "running" is the Job's start time for Kueue (the Job controller sets it once Kueue has
admitted and unsuspended the Job) and the Workflow's Running phase for Argo; "succeeded" is the
Job's Complete condition and the Workflow's Succeeded phase.
"""
from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench import peers, workload
from bench.cluster import log
from bench.kubeapi import jobs_path, workflows_path
from bench.latency import between, summary
from bench.load import submit
from bench.observer import ObserverProcess
from bench.procstat import wait_until
from bench.throughput import Context, Window, _fmt, cronoq, throughput

PROBE_CLASS, PROBE_PRIORITY = "bench-high", 1000
PROBE_CONCURRENCY = 50


@dataclass
class Peers:
    """The peers' binaries and CRDs, built and installed once per bench run."""
    kueue: Path | None = None
    argo: Path | None = None
    versions: dict[str, str] | None = None

    @classmethod
    def install(cls, ctx: Context, which: set[str]) -> Peers:
        out, cluster = cls(versions={}), ctx.cluster
        for name, module, crds in (("kueue", peers.KUEUE_MODULE, "config/components/crd/bases"),
                                   ("argo", peers.ARGO_MODULE, "manifests/base/crds/minimal")):
            if name in which:
                setattr(out, name, peers.build(name))
                out.versions[name] = peers.version(name, module)
                peers.apply_crds(cluster.kubectl, cluster.kubeconfig, peers.module_dir(name, module) / crds)
        if "kueue" in which:
            cluster.api.ensure("/api/v1/namespaces", {"metadata": {"name": peers.KUEUE_NAMESPACE}})
        return out


def _measure(ctx: Context, *, system: str, label: str, n: int, ns: str, controller: peers.PeerProcess, path: str,
             objects: list[dict[str, Any]], rate: float | None, until: str, workflows: bool,
             milestones: Callable[[dict[str, Any]], tuple[dict[str, float], dict[str, float]]],
             during: Callable[[ObserverProcess], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Submit `objects`, wait for the observer's goal, and measure as the cronoq scenario does."""
    window = Window(ctx, ns, controller.pid, until=until, workflows=workflows)
    sub = submit(ctx.cluster.api, path, objects, creators=ctx.creators, rate=rate)
    extra = during(window.observer) if during else {}
    items = len(objects)
    seen, figures = window.close(items, sub, leader_lease=())
    running, succeeded = milestones(seen)
    done = [v for k, v in succeeded.items() if k in sub.sent and v]
    result = {
        "system": system, "n": items, "label": label, "paced_rate": rate, **figures,
        "succeeded": len(done), "throughput": throughput(items, sub.started, done),
        "latency": {"to_running": summary(between(sub.sent, running)),
                    "to_succeeded": summary(between(sub.sent, succeeded))},
        "namespace": ns, **extra,
    }
    if not controller.alive():
        result["error"] = f"the {system} controller exited with {controller.process.returncode}; see {controller.log_path}"
    log(f"{system} {label} n={items}: {_fmt(result['throughput'])} items/s, succeeded p50 "
        f"{_fmt(result['latency']['to_succeeded']['p50'])}s, {_fmt(result['api']['writes_per_task'])} writes/item")
    return result


def _job_milestones(seen: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    jobs = seen["jobs"].items()
    return {k: v.get("started") for k, v in jobs}, {k: v.get("Complete") for k, v in jobs}


def _workflow_milestones(seen: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    flows = seen["workflows"].items()
    return ({k: v["phases"].get("Running") for k, v in flows}, {k: v["phases"].get("Succeeded") for k, v in flows})


# ---------------------------------------------------------------- Kueue


def kueue(ctx: Context, bins: Peers, n: int, rate: float | None = None, label: str = "burst") -> dict[str, Any]:
    """N suspended Jobs through one LocalQueue whose ClusterQueue has room for all of them."""
    quota = f"{n * 10}m"  # KUEUE_CPU_REQUEST (10m) per Job
    ns, queue = ctx.cluster.namespace(f"bench-kueue-{label}-{n}"), f"bench-{label}-{n}"
    jobs = [peers.kueue_job(workload.bare_job(name, ns), queue) for name in workload.names("k", n)]
    with _kueue_running(ctx, bins, ns, queue, quota) as controller:
        result = _measure(ctx, system="kueue", label=label, n=n, ns=ns, controller=controller, path=jobs_path(ns),
                          objects=jobs, rate=rate, until=f"jobs={n}", workflows=False, milestones=_job_milestones)
        result["version"] = bins.versions["kueue"]
    return result


def cronoq_through_kueue(ctx: Context, bins: Peers, n: int) -> dict[str, Any]:
    """N Tasks whose attempts Kueue admits (the pool's `admission.kueue`), behind a ClusterQueue with
    room for all of them as in `kueue`: cronoq's promises on top of Kueue's queueing, measured as
    the cronoq burst is. The operator's figures are cronoq's alone; Kueue's CPU is `kueue_cpu_seconds`."""
    queue = f"bench-cronoq-{n}"
    with _kueue_running(ctx, bins, None, queue, f"{n * 10}m") as controller:
        cpu = controller.cpu()
        result = cronoq(ctx, n, label="kueue", keep=True,
                        before=lambda ns: ctx.cluster.api.ensure(*peers.local_queue(queue, ns)),
                        template={"resources": {"requests": {"cpu": peers.KUEUE_CPU_REQUEST}}},
                        admission={"kueue": {"localQueue": queue}})
        result["kueue_cpu_seconds"] = controller.cpu() - cpu
        result["version"] = bins.versions["kueue"]
        ctx.cluster.delete_namespace(result["namespace"])  # while Kueue runs: its finalizers need it
    return result


def kueue_probe(ctx: Context, bins: Peers, n: int) -> dict[str, Any]:
    """Kueue's priority: n Jobs behind a ClusterQueue with room for 50 at a time; three Jobs of a
    WorkloadPriorityClass of value 1000, submitted when the backlog is in and when 1/3 and 2/3 have
    finished (as cronoq's backlog scenario). Probe latency: create → the Job started (admitted)."""
    ns, queue = ctx.cluster.namespace(f"bench-kueue-backlog-{n}"), f"bench-backlog-{n}"
    ctx.cluster.api.ensure(*peers.kueue_priority_class(PROBE_CLASS, PROBE_PRIORITY))
    jobs = [peers.kueue_job(workload.bare_job(name, ns), queue) for name in workload.names("k", n)]
    probes = [peers.kueue_job(workload.bare_job(f"probe-{i}", ns), queue, PROBE_CLASS) for i in range(3)]
    api = ctx.cluster.api

    def send_probes(observer: ObserverProcess) -> dict[str, Any]:
        out = []
        for probe, fraction in zip(probes, (0.0, 1 / 3, 2 / 3)):
            wait_until(lambda: observer.progress()["jobs_done"] >= fraction * n, timeout=3600, interval=0.1)
            progress = observer.progress()
            sent = time.monotonic()
            api.create(jobs_path(ns), probe)
            out.append({"name": probe["metadata"]["name"], "sent": sent, "finished_before": progress["jobs_done"],
                        "waiting_before": n - progress["jobs_done"]})
            log(f"kueue backlog: probe {probe['metadata']['name']} with {n - progress['jobs_done']} not finished")
        return {"probes": out}

    with _kueue_running(ctx, bins, ns, queue, f"{PROBE_CONCURRENCY * 10}m") as controller:
        result = _measure(ctx, system="kueue", label="backlog", n=n, ns=ns, controller=controller,
                          path=jobs_path(ns), objects=jobs, rate=None, until=f"jobs={n + len(probes)}",
                          workflows=False, milestones=_job_milestones, during=send_probes)
    seen = json.loads((ctx.work / f"obs-{ns}.json").read_text())  # the observer's, kept
    for p in result["probes"]:
        started = (seen["jobs"].get(p["name"]) or {}).get("started")
        p["dispatch_seconds"] = started - p.pop("sent") if started else None
    result["concurrency"] = PROBE_CONCURRENCY
    result["probe_dispatch_max"] = max((p["dispatch_seconds"] for p in result["probes"]
                                        if p["dispatch_seconds"] is not None), default=None)
    result["version"] = bins.versions["kueue"]
    return result


class _kueue_running:
    """Queues made (the LocalQueue only in a namespace given), Kueue started and ready (the
    ClusterQueue Active); on exit the namespace given and the ClusterQueue deleted while Kueue still
    runs (its finalizers need it), then Kueue stopped."""

    def __init__(self, ctx: Context, bins: Peers, ns: str | None, queue: str, quota: str) -> None:
        self.ctx, self.bins, self.ns, self.queue, self.quota = ctx, bins, ns, queue, quota

    def __enter__(self) -> peers.PeerProcess:
        api = self.ctx.cluster.api
        for path, body in peers.kueue_queues(self.queue, self.ns, self.quota):
            api.ensure(path, body)
        assert self.bins.kueue is not None
        self.controller = peers.start_kueue(self.bins.kueue, self.ctx.cluster.operator_kubeconfig, self.ctx.work)
        wait_until(lambda: _cq_active(api, self.queue) or not self.controller.alive(), 180, what=
                       f"Kueue to make ClusterQueue {self.queue} active")
        if not self.controller.alive():
            raise RuntimeError(f"Kueue exited; see {self.controller.log_path}")
        return self.controller

    def __exit__(self, *exc: object) -> None:
        try:
            if self.ns:
                self.ctx.cluster.delete_namespace(self.ns)
            self.ctx.cluster.api.delete(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{self.queue}")
            wait_until(lambda: self.ctx.cluster.api.get(
                f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{self.queue}") is None, timeout=60)
        finally:
            self.controller.stop()


def _cq_active(api, name: str) -> bool:
    cq = api.get(f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{name}") or {}
    return any(c.get("type") == "Active" and c.get("status") == "True"
               for c in (cq.get("status") or {}).get("conditions") or [])


# ---------------------------------------------------------------- Argo Workflows


def argo(ctx: Context, bins: Peers, n: int, rate: float | None = None, label: str = "burst") -> dict[str, Any]:
    """N Workflows of one container step each, the workflow-controller watching their namespace."""
    ns = ctx.cluster.namespace(f"bench-argo-{label}-{n}")
    api = ctx.cluster.api
    api.create(f"/api/v1/namespaces/{ns}/configmaps", peers.argo_configmap(peers.free_port()))
    flows = [peers.argo_workflow(name, workload.IMAGE, workload.PLAY) for name in workload.names("w", n)]
    assert bins.argo is not None
    controller = peers.start_argo(bins.argo, ctx.cluster.operator_kubeconfig, ns, ctx.work)
    try:
        wait_until(lambda: _healthy("http://127.0.0.1:6060/healthz") or not controller.alive(), timeout=60)
        if not controller.alive():
            raise RuntimeError(f"the workflow-controller exited; see {controller.log_path}")
        result = _measure(ctx, system="argo", label=label, n=n, ns=ns, controller=controller,
                          path=workflows_path(ns), objects=flows, rate=rate, until=f"workflows={n}", workflows=True,
                          milestones=_workflow_milestones)
        result["version"] = bins.versions["argo"]
    finally:
        controller.stop()
    ctx.cluster.delete_namespace(ns)
    return result


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
