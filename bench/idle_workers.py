"""What idle pull workers cost the API server (issue 42): a worker renews its own Lease every TTL/3
and keeps one watch open (re-listed when it ends, every 60 s), with no task to run. Measured on
the dev cluster (`make cluster-up`): the API server's and etcd's CPU over a window with the pool's
operator alone, then with W workers announced, the difference per worker, and 100 workers
extrapolated from it:

    .venv/bin/python -m bench.idle_workers --workers 32 --seconds 60
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.kubeapi import Api, leases_path, pools_path
from bench.procstat import cpu_seconds
from bench.pull import stop_workers
from bench.replica import Replica

REPO = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("CRONOQ_CLUSTER_DIR", REPO / ".cluster"))


def component_cpu() -> dict[str, float]:
    return {name: cpu_seconds(int((STATE / "run" / f"{name}.pid").read_text())) for name in ("kube-apiserver", "etcd")}


def window(seconds: float, pids: list[int]) -> dict[str, float]:
    """CPU seconds per second of the API server, etcd and `pids` together, over `seconds`."""
    before, procs = component_cpu(), sum(cpu_seconds(p) for p in pids)
    time.sleep(seconds)
    after = component_cpu()
    spent = {k: (after[k] - before[k]) / seconds for k in after}
    spent["workers"] = (sum(cpu_seconds(p) for p in pids) - procs) / seconds
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--ttl", type=float, default=15.0, help="the workers' Lease TTL (serve()'s default: 15)")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG") or str(STATE / "kubeconfig")
    api = Api(kubeconfig)
    ns = f"idle-workers-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    api.create(pools_path(ns), {
        "apiVersion": "cronoq.io/v1alpha1", "kind": "TaskPool", "metadata": {"name": "idle"},
        "spec": {"delivery": "Workers", "concurrency": 1000}})
    work = Path(args.out)
    operator = Replica(kubeconfig, (ns,), work / f"operator-{ns}.log",
                       extra_args=("--no-leader-election", "--trust-worker-leases")).start()
    procs: list[subprocess.Popen] = []
    try:
        time.sleep(5)
        alone = window(args.seconds, [])
        env = {**os.environ, "KUBECONFIG": kubeconfig, "CRONOQ_NAMESPACE": ns, "PYTHONPATH": f"{REPO / 'operator'}:{REPO}"}
        code = ("import sys, cronoq.worker; sys.exit(cronoq.worker.serve('idle', lambda ctx: None, name=sys.argv[1], "
                f"concurrency=4, ttl={args.ttl}))")
        procs = [subprocess.Popen([sys.executable, "-c", code, f"idle-{i}"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for i in range(args.workers)]
        deadline = time.monotonic() + 120
        while api.count(f"{leases_path(ns)}?labelSelector=cronoq.io/worker-pool") < args.workers:
            if time.monotonic() > deadline:
                raise TimeoutError("the workers did not all announce themselves")
            time.sleep(1)
        time.sleep(10)  # past their first listing
        fleet = window(args.seconds, [p.pid for p in procs])
    finally:
        stop_workers(procs)
        operator.process.terminate()
        operator.process.wait(30)
        api.delete(f"/api/v1/namespaces/{ns}")
    per_worker = {k: (fleet[k] - alone.get(k, 0.0)) / args.workers for k in fleet}
    result = {"workers": args.workers, "ttl": args.ttl, "seconds": args.seconds, "alone_cpu_per_s": alone,
              "fleet_cpu_per_s": fleet, "per_worker_cpu_per_s": per_worker,
              "hundred_workers_cpu_per_s": {k: v * 100 for k, v in per_worker.items()}}
    (work / f"idle-workers-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
