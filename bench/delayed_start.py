"""Delayed-start lateness (issue 39, point 3): how long after its `notBefore` a task's attempt Job
is created, as a watch of this process sees it (the operator and this process share the machine's
clock). Tasks are created a few seconds ahead of their times, staggered (`--spacing`) so each
start is its own timer, or all at one time (`--spacing 0`: a burst of starts). Measured on the dev
cluster (`make cluster-up`), with an operator of its own on a namespace of its own:

    .venv/bin/python -m bench.delayed_start --tasks 20 --spacing 0.5
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench.kubeapi import Api, jobs_path, pools_path, tasks_path
from bench.replica import Replica

REPO = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("CRONOQ_CLUSTER_DIR", REPO / ".cluster"))


def spelled(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def create(api: Api, ns: str, name: str, not_before: str | None) -> float:
    """Create the task; return when its creation was sent (this process's clock)."""
    sent = time.time()
    api.create(tasks_path(ns), {
        "apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
        "spec": {"pool": "p", "image": "example.invalid/task:1", **({"notBefore": not_before} if not_before else {}),
                 "podMetadata": {"annotations": {"kwok.cronoq.io/delay": "100ms"}}}})
    return sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--lead", type=float, default=5.0, help="seconds from the last creation to the first time")
    parser.add_argument("--spacing", type=float, default=0.5, help="seconds between the tasks' times (0: one time)")
    parser.add_argument("--plain", action="store_true",
                        help="for comparison: the same tasks without notBefore, all at once, measured from creation")
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG") or str(STATE / "kubeconfig")
    api = Api(kubeconfig)
    ns = f"delayed-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    api.create(pools_path(ns), {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool", "metadata": {"name": "p"},
                                "spec": {"concurrency": args.tasks, "leaseTTL": "0s"}})
    log = Path(tempfile.mkdtemp(prefix="cronoq-delayed-")) / "operator.log"  # not a result: kept out of the repo
    print(f"operator log: {log}")
    operator = Replica(kubeconfig, (ns,), log, source=str(REPO / "operator"),
                       extra_args=("--no-leader-election",)).start()
    seen: dict[str, float] = {}
    listed = api.request("GET", jobs_path(ns))
    done = threading.Event()

    def watch() -> None:
        for event in api.watch(jobs_path(ns), listed["metadata"]["resourceVersion"]):
            name = event["object"]["metadata"]["name"]
            if event["type"] == "ADDED":
                seen.setdefault(name, time.time())
            if len(seen) >= args.tasks or done.is_set():
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        first = datetime.now(timezone.utc) + timedelta(seconds=args.lead + 0.05 * args.tasks)
        times = {f"d{i}": first + timedelta(seconds=args.spacing * i) for i in range(args.tasks)}
        if args.plain:  # created together (as the delayed ones start together), from 16 threads
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(16) as creators:
                stamps = list(creators.map(lambda n: (n, create(api, ns, n, None)), list(times)))
            times = {n: datetime.fromtimestamp(t, timezone.utc) for n, t in stamps}
        for name, at in ([] if args.plain else times.items()):
            create(api, ns, name, spelled(at))
        early = [n for n in seen]
        watcher.join(timeout=args.lead + args.spacing * args.tasks + 60)
    finally:
        done.set()
        operator.stop()
        api.delete(f"/api/v1/namespaces/{ns}")
    late = sorted((seen[f"{n}-a1"] - at.timestamp()) * 1000 for n, at in times.items() if f"{n}-a1" in seen)
    before = sum(1 for ms in late if ms < 0)
    print(f"{len(late)} of {args.tasks} started; {'plain (from creation)' if args.plain else f'spacing {args.spacing}s'}; "
          f"Jobs seen before their time: "
          f"{before} (before the first time: {len(early)})")
    if late:
        print(f"lateness (Job seen by the watch − notBefore): p50 {statistics.median(late):.0f} ms, "
              f"p90 {late[int(0.9 * (len(late) - 1))]:.0f} ms, max {late[-1]:.0f} ms, min {late[0]:.0f} ms")
    return 0 if len(late) == args.tasks and not before else 1


if __name__ == "__main__":
    sys.exit(main())
