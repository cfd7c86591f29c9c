"""What pool names that do not exist cost the operator (issue 49, finding 5): rounds of N Tasks, each
naming a pool of its own that no TaskPool has (new names each round; `spec.pool` is the producer's
word), created, left until the operator has said so in each one's status (Queued), then deleted.
Before the fix each name left a queue, a phase counter and two Prometheus series for good; now
nothing per name outlives its tasks. For each source given, in one run, the operator's RSS (from /proc) and the samples on its
/metrics after each step:

    .venv/bin/python -m bench.pool_names --source before=dc0362c --source after=HEAD

against the test cluster (`make cluster-up`; KUBECONFIG or .cluster/kubeconfig). Sources are git
revisions, run from snapshots of their committed operator/ (bench.run.snapshot). Without a cluster,
`--unit` measures the same in-process, over the unit tests' controller and fake writer (tracemalloc
of what stays allocated, and the registry's samples), for the code on PYTHONPATH:

    PYTHONPATH=operator:. .venv/bin/python -m bench.pool_names --unit
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.kubeapi import Api, tasks_path
from bench.procstat import settled_rss

LABEL = "bench.cronoq.io/pool-names"


def task(r: int, i: int) -> dict:
    """Task i of round r: its pool's name is new in every round."""
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task",
            "metadata": {"name": f"nowhere-{r}-{i}", "labels": {LABEL: "1"}},
            "spec": {"pool": f"nowhere-{r}-{i}", "image": "busybox:1.36"}}


def samples(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


def measure(name: str, source: str | None, n: int, rounds: int, kubeconfig: str, work: Path) -> dict:
    from bench.replica import Replica

    api = Api(kubeconfig)
    namespace = f"pool-names-{name}-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    tasks = tasks_path(namespace)
    replica = Replica(kubeconfig, (namespace,), work / f"operator-{namespace}.log", source=source,
                      extra_args=("--no-leader-election",)).start()

    def step(label: str) -> dict:
        rss = settled_rss(replica.pid)
        return {"step": label, "rss_mib": round(rss / 2**20, 1),
                "metric_samples": samples(replica._get(replica.metrics_port, "/metrics")[1])}

    def queued() -> bool:
        items = api.request("GET", f"{tasks}?labelSelector={LABEL}").get("items", [])
        return len(items) == n and all((t.get("status") or {}).get("phase") == "Queued" for t in items)

    steps = [step("started")]
    try:
        with ThreadPoolExecutor(8) as pool:
            for r in range(1, rounds + 1):
                list(pool.map(lambda i: api.create(tasks, task(r, i)), range(n)))
                wait(queued, 600, "every task Queued")
                steps.append(step(f"round {r}: {n} created, Queued"))
                api.request("DELETE", f"{tasks}?labelSelector={LABEL}")
                wait(lambda: not api.count(f"{tasks}?labelSelector={LABEL}"), 600, "every task gone")
                steps.append(step(f"round {r}: deleted"))
    finally:
        replica.stop()
        api.delete(f"/api/v1/namespaces/{namespace}")
    return {"source": name, "steps": steps}


def unit(n: int, rounds: int) -> dict:
    """The same rounds in-process: the Controller over the unit tests' fake writer."""
    import asyncio
    import gc
    import tracemalloc

    from cronoq import metrics
    from tests.unit.fakes import World
    from tests.unit.fakes import task as unit_task

    def registry() -> int:
        return sum(len(family.samples) for family in metrics.REGISTRY.collect())

    async def scenario() -> list[dict]:
        world = World()
        await world.settle()
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]

        def step(label: str) -> dict:
            gc.collect()
            return {"step": label, "kept_kib": round((tracemalloc.get_traced_memory()[0] - base) / 1024, 1),
                    "metric_samples": registry(), "queues": len(world.controller.slots.waiting),
                    "phase_counters": len(world.controller.store.phases)}

        steps = [step("started")]
        for r in range(1, rounds + 1):
            for i in range(n):
                raw = unit_task(f"nowhere-{r}-{i}")
                raw["spec"]["pool"] = f"nowhere-{r}-{i}"
                world.writer.tasks[raw["metadata"]["name"]] = raw
                world.controller.intake.on_task(None, raw)
            await world.settle()
            steps.append(step(f"round {r}: {n} created, Queued"))
            for i in range(n):
                world.controller.intake.on_task("DELETED", world.writer.tasks.pop(f"nowhere-{r}-{i}"))
            await world.settle()
            world.writer.calls.clear()  # the fake's own log of calls is not the operator's memory
            steps.append(step(f"round {r}: deleted"))
        tracemalloc.stop()
        return steps

    return {"source": "unit (PYTHONPATH)", "steps": asyncio.run(scenario())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", action="append", default=[], metavar="NAME=REVISION",
                        help="an operator revision to measure (git revision, or `worktree`); default: as installed")
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--unit", action="store_true", help="in-process, no cluster: the code on PYTHONPATH")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    work = Path(args.out)
    if args.unit:
        runs = [unit(args.n, args.rounds)]
    else:
        from bench.run import snapshot

        kubeconfig = os.environ.get("KUBECONFIG") or str(Path(".cluster/kubeconfig").resolve())
        sources = [s.split("=", 1) for s in args.source] or [["installed", "worktree"]]
        runs = [measure(name, snapshot(revision, work)[0], args.n, args.rounds, kubeconfig, work)
                for name, revision in sources]
        stamp = time.strftime("%Y%m%d-%H%M%S")
        (work / f"pool-names-{stamp}.json").write_text(json.dumps({"n": args.n, "runs": runs}, indent=2) + "\n")
    for run in runs:
        print(f"{run['source']}:")
        for s in run["steps"]:
            print("  " + ", ".join(f"{k} {v}" for k, v in s.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
