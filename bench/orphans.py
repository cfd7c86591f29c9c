"""What orphan attempt Leases cost the operator (issue 37, point 4): rounds of N Leases that name
tasks nobody knows, each with a report of 4096 four-byte characters (16 KiB), created and then
deleted, while one operator watches their namespace. Before the fix the operator kept every
Lease's facts (report included) under the task uid it named until a task of that uid went, so each
round left it bigger for good; now facts go with their Lease and a report is kept to 4096 bytes.
The operator's RSS is read from /proc after each step, for each source given, in one run:

    .venv/bin/python -m bench.orphans --source before=/tmp/before/operator --source after=operator
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

from bench.kubeapi import Api, leases_path
from bench.procstat import settled_rss
from bench.replica import Replica

REPORT = json.dumps({"outcome": "success", "output": "\U0001F600" * 4096}, ensure_ascii=False)
"""A report of more than 4096 characters, each four bytes in UTF-8: about 16 KiB on the Lease."""
LABEL = "bench.cronoq.io/orphan"


def orphan(i: int) -> dict:
    uid = str(uuid.uuid4())
    return {"metadata": {"name": f"ghost-{i}-a1.w-{i}", "labels": {
        LABEL: "1", "cronoq.io/task-uid": uid, "cronoq.io/task": f"ghost-{i}", "cronoq.io/attempt": "1",
        "cronoq.io/lease-id": "e1-a1", "cronoq.io/worker": f"w-{i}", "cronoq.io/pool": "default"},
        "annotations": {"cronoq.io/report": REPORT}},
        "spec": {"holderIdentity": "e1-a1", "leaseDurationSeconds": 30}}


def measure(name: str, source: str | None, n: int, rounds: int, kubeconfig: str, work: Path) -> dict:
    api = Api(kubeconfig)
    namespace = f"orphans-{name}-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    leases = leases_path(namespace)
    replica = Replica(kubeconfig, (namespace,), work / f"operator-{namespace}.log", source=source,
                      extra_args=("--no-leader-election",)).start()
    steps = [("started", settled_rss(replica.pid))]
    try:
        with ThreadPoolExecutor(8) as pool:
            for r in range(1, rounds + 1):
                list(pool.map(lambda i: api.create(leases, orphan(i)), range(n)))
                steps.append((f"round {r}: {n} created", settled_rss(replica.pid)))
                api.request("DELETE", f"{leases}?labelSelector={LABEL}")
                while api.count(f"{leases}?labelSelector={LABEL}"):
                    time.sleep(0.5)
                steps.append((f"round {r}: deleted", settled_rss(replica.pid)))
    finally:
        replica.process.terminate()
        replica.process.wait(30)
        api.delete(f"/api/v1/namespaces/{namespace}")
    return {"source": name, "steps": [{"step": s, "rss_mib": round(b / 2**20, 1)} for s, b in steps]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", action="append", default=[], metavar="NAME=DIR",
                        help="an operator source to measure (DIR holds the cronoq package); default: as installed")
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG") or str(Path(".cluster/kubeconfig").resolve())
    sources = [s.split("=", 1) for s in args.source] or [["installed", None]]
    work = Path(args.out)
    runs = [measure(name, str(Path(src).resolve()) if src else None, args.n, args.rounds, kubeconfig, work)
            for name, src in sources]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (work / f"orphans-{stamp}.json").write_text(json.dumps({"n": args.n, "runs": runs}, indent=2) + "\n")
    for run in runs:
        print(f"{run['source']}: " + "; ".join(f"{s['step']} {s['rss_mib']} MiB" for s in run["steps"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
