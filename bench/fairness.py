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


def _run(ctx: Context, label: str, a_tasks: int, grouped: bool) -> dict[str, Any]:
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-fair-{label}")
    api.create(pools_path(ns), workload.pool(POOL, CONCURRENCY))
    a = _tasks("a", a_tasks, "tenant-a" if grouped else None)
    b = _tasks("b", B_TASKS, "tenant-b" if grouped else None)
    operator = ctx.replica(ns).start()
    observer = ObserverProcess(ctx.cluster.kubeconfig, ns, ctx.work / f"obs-{ns}.json",
                               until=f"tasks={a_tasks + B_TASKS}")
    sub_a = submit(api, tasks_path(ns), a, creators=ctx.creators) if a else None
    sub_b = submit(api, tasks_path(ns), b, creators=ctx.creators)
    seen = observer.result()
    operator.stop()
    done = {name: s["phases"].get("Succeeded") for name, s in seen["tasks"].items()}
    b_done = [done.get(t["metadata"]["name"]) for t in b]
    a_done = [done.get(t["metadata"]["name"]) for t in a]
    result = {
        "label": label, "a_tasks": a_tasks, "b_tasks": B_TASKS, "concurrency": CONCURRENCY, "grouped": grouped,
        "timed_out": seen["timed_out"], "submit_errors": len(sub_b.errors) + (len(sub_a.errors) if sub_a else 0),
        "b_last_finished_seconds": (max(b_done) - sub_b.started) if all(b_done) else None,
        "a_drained_seconds": (max(a_done) - sub_a.started) if sub_a and all(a_done) else None,
    }
    log(f"fairness {label}: B's last task finished {result['b_last_finished_seconds']}s after B was submitted; "
        f"A drained in {result['a_drained_seconds']}s")
    ctx.cluster.delete_namespace(ns)
    return result


GAMING_GROUPS = 60
SUBMITTER = "cronoq.io/submitter"


def _gaming_run(ctx: Context, label: str, a_tasks: int, fair: dict[str, Any] | None) -> dict[str, Any]:
    api = ctx.cluster.api
    ns = ctx.cluster.namespace(f"bench-gaming-{label}")
    api.create(pools_path(ns), workload.pool(POOL, CONCURRENCY, **({"fairShare": fair} if fair else {})))
    a = _tasks("a", a_tasks, None)
    b = _tasks("b", B_TASKS, "tenant-b")
    for i, task in enumerate(a):
        task["spec"].update(group=f"name-{i % GAMING_GROUPS}", priority=1000)
        task["metadata"]["annotations"] = {SUBMITTER: "tenant-a"}
    for task in b:
        task["metadata"]["annotations"] = {SUBMITTER: "tenant-b"}
    operator = ctx.replica(ns).start()
    observer = ObserverProcess(ctx.cluster.kubeconfig, ns, ctx.work / f"obs-{ns}.json",
                               until=f"tasks={a_tasks + B_TASKS}")
    sub_a = submit(api, tasks_path(ns), a, creators=ctx.creators)
    sub_b = submit(api, tasks_path(ns), b, creators=ctx.creators)
    seen = observer.result()
    operator.stop()
    started = {name: s["phases"].get("Running") for name, s in seen["tasks"].items()}
    b_started = [started.get(t["metadata"]["name"]) for t in b]
    share = None
    if all(b_started):
        until = max(b_started)
        a_before = sum(1 for t in a if (at := started.get(t["metadata"]["name"])) is not None and at <= until)
        share = a_before / (a_before + len(b))
    done = {name: s["phases"].get("Succeeded") for name, s in seen["tasks"].items()}
    b_done = [done.get(t["metadata"]["name"]) for t in b]
    result = {
        "label": label, "a_tasks": a_tasks, "b_tasks": B_TASKS, "concurrency": CONCURRENCY, "fair_share": fair,
        "timed_out": seen["timed_out"], "submit_errors": len(sub_a.errors) + len(sub_b.errors),
        "gamer_share": share,
        "b_last_finished_seconds": (max(b_done) - sub_b.started) if all(b_done) else None,
    }
    log(f"gaming {label}: the gamer's share of the starts while B waited {share}; B's last task finished "
        f"{result['b_last_finished_seconds']}s after B was submitted")
    ctx.cluster.delete_namespace(ns)
    return result


def gaming(ctx: Context, a_tasks: int) -> dict[str, Any]:
    """The gamer's share beside an honest tenant: in the default order, and sharing by submitter."""
    return {"default": _gaming_run(ctx, "default", a_tasks, None),
            "shares": _gaming_run(ctx, "shares", a_tasks, {"by": "Submitter"})}


def fairness(ctx: Context, a_tasks: int) -> dict[str, Any]:
    """B's wait beside A's backlog of `a_tasks`: with groups, without, and B alone."""
    return {"grouped": _run(ctx, "grouped", a_tasks, grouped=True),
            "ungrouped": _run(ctx, "ungrouped", a_tasks, grouped=False),
            "alone": _run(ctx, "alone", 0, grouped=True)}
