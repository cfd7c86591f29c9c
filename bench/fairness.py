"""Fair shares between tenants (issue 39): tenant A enqueues N tasks, then tenant B 50, on a pool
of concurrency 20, each task running 5 s. When does B's last task finish? Three runs, each on an empty pool of its own:
`grouped` (A and B name their `group`), `ungrouped` (the same tasks without groups: B waits behind
A's backlog), and `alone` (B's 50 with no backlog: the best B can hope for).

`gaming` (issue 54): the same pool, tenant A now a gamer: its N tasks spread over 60 group names at
priority 1000, B's 50 honest (one group, priority 0). Two runs: `default` (the order without
fairShare: the gamer takes every slot) and `shares` (fairShare by submitter). The figure is the
gamer's share of the attempts started while B still waited (B's last start and before): 0.5 is an
equal share. The submitters are written in the Tasks' cronoq.io/submitter annotation by the bench
itself (the bench runs without the chart's policies, which the cluster tests check); what is
measured is the operator's admission under load.
"""
from __future__ import annotations

from typing import Any

from bench import workload
from bench.cluster import log
from bench.kubeapi import pools_path, tasks_path
from bench.load import submit
from bench.observer import ObserverProcess
from bench.throughput import Context

POOL = "tenants"
CONCURRENCY = 20
B_TASKS = 50
RUN = "5s"
"""How long each task's container runs: the pool's slots, not the operator, must be what A's
backlog holds (20 slots of 5 s: 4 tasks/s, well under what the operator does on this machine);
with instant tasks the slots free up faster than the operator records the ends, and every task
waits in the operator's work queue, fairness or not."""


def _tasks(prefix: str, n: int, group: str | None) -> list[dict[str, Any]]:
    tasks = [workload.task(name, POOL) for name in workload.names(prefix, n)]
    for task in tasks:
        task["spec"]["podMetadata"]["annotations"]["kwok.cronoq.io/delay"] = RUN
        if group:
            task["spec"]["group"] = group
    return tasks


GAMING_GROUPS = 60
SUBMITTER = "cronoq.io/submitter"


def _run(ctx: Context, label: str, a: list[dict[str, Any]], b: list[dict[str, Any]], **pool: Any) -> dict[str, Any]:
    """Tenant A's tasks, then B's, on an empty pool of its own: when each started and finished."""
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-{label}")
    api.create(pools_path(ns), workload.pool(POOL, CONCURRENCY, **pool))
    operator = ctx.replica(ns).start()
    observer = ObserverProcess(ctx.cluster.kubeconfig, ns, ctx.work / f"obs-{ns}.json", until=f"tasks={len(a) + len(b)}")
    sub_a = submit(api, tasks_path(ns), a, creators=ctx.creators) if a else None
    sub_b = submit(api, tasks_path(ns), b, creators=ctx.creators)
    seen = observer.result()
    operator.stop()
    ctx.cluster.delete_namespace(ns)

    def at(phase: str, tasks: list[dict[str, Any]]) -> list[float | None]:
        return [(seen["tasks"].get(t["metadata"]["name"]) or {}).get("phases", {}).get(phase) for t in tasks]

    a_done, b_done = at("Succeeded", a), at("Succeeded", b)
    return {"label": label, "a_tasks": len(a), "b_tasks": len(b), "concurrency": CONCURRENCY,
            "timed_out": seen["timed_out"], "submit_errors": len(sub_b.errors) + (len(sub_a.errors) if sub_a else 0),
            "b_last_finished_seconds": (max(b_done) - sub_b.started) if all(b_done) else None,
            "a_drained_seconds": (max(a_done) - sub_a.started) if sub_a and all(a_done) else None,
            "started": (at("Running", a), at("Running", b))}


def fairness(ctx: Context, a_tasks: int) -> dict[str, Any]:
    """B's wait beside A's backlog of `a_tasks`: with groups, without, and B alone."""
    out = {}
    for label, n, grouped in (("grouped", a_tasks, True), ("ungrouped", a_tasks, False), ("alone", 0, True)):
        run = _run(ctx, f"fair-{label}", _tasks("a", n, "tenant-a" if grouped else None),
                   _tasks("b", B_TASKS, "tenant-b" if grouped else None))
        del run["started"]
        out[label] = {**run, "label": label, "grouped": grouped}
        log(f"fairness {label}: B's last task finished {run['b_last_finished_seconds']}s after B was submitted; "
            f"A drained in {run['a_drained_seconds']}s")
    return out


def gaming(ctx: Context, a_tasks: int) -> dict[str, Any]:
    """The gamer's share beside an honest tenant: in the default order, and sharing by submitter."""
    out = {}
    for label, fair in (("default", None), ("shares", {"by": "Submitter"})):
        a, b = _tasks("a", a_tasks, None), _tasks("b", B_TASKS, "tenant-b")
        for i, task in enumerate(a):
            task["spec"].update(group=f"name-{i % GAMING_GROUPS}", priority=1000)
        for tenant, tasks in (("tenant-a", a), ("tenant-b", b)):
            for task in tasks:
                task["metadata"]["annotations"] = {SUBMITTER: tenant}
        run = _run(ctx, f"gaming-{label}", a, b, **({"fairShare": fair} if fair else {}))
        a_started, b_started = run.pop("started")
        share = None
        if all(b_started):
            a_before = sum(1 for t in a_started if t is not None and t <= max(b_started))
            share = a_before / (a_before + len(b))
        del run["a_drained_seconds"]
        out[label] = {**run, "label": label, "fair_share": fair, "gamer_share": share}
        log(f"gaming {label}: the gamer's share of the starts while B waited {share}; B's last task finished "
            f"{run['b_last_finished_seconds']}s after B was submitted")
    return out
