"""A pool's rate limit, measured (issue 39.1): a backlog deep enough to keep a pool with
`rateLimit: {startsPerSecond: R, burst: B}` busy for S seconds, concurrency never the bound (pods
succeed at once), one operator; the backlog is queued in the paused pool, which is then resumed
(its bucket full: B start at once, then one per 1/R). Reported, never asserted: the observed start rate against R ((starts − B) / (last − first)), from
the attempts' `dispatchedAt` (the operator's clock when it recorded each start) and from the Jobs'
`creationTimestamp` (the API server's, whole seconds), and the most starts in any one-second
window against R + B. On the dev cluster (`make cluster-up`, or CRONOQ_PORT_OFFSET's):

    .venv/bin/python -m bench.ratelimit --rate 5 --burst 1 --seconds 60
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from bench import workload
from bench.kubeapi import Api, jobs_path, pools_path, tasks_path
from bench.replica import Replica

REPO = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("CRONOQ_CLUSTER_DIR", REPO / ".cluster"))


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def most_in_a_window(times: list[float], width: float = 1.0) -> int:
    """The most starts in any closed window of `width` seconds (two pointers over the sorted times)."""
    most, first = 0, 0
    for last, t in enumerate(times):
        while t - times[first] > width:
            first += 1
        most = max(most, last - first + 1)
    return most


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=5.0, help="rateLimit.startsPerSecond")
    parser.add_argument("--burst", type=int, default=1, help="rateLimit.burst")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the backlog keeps the pool busy")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG") or str(STATE / "kubeconfig")
    api = Api(kubeconfig)
    ns = f"ratelimit-{uuid.uuid4().hex[:6]}"
    n = math.ceil(args.rate * args.seconds) + args.burst
    api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    api.create(pools_path(ns), workload.pool("bench", 1000, paused=True,
                                             rateLimit={"startsPerSecond": args.rate, "burst": args.burst}))
    work = Path(args.out)
    operator = Replica(kubeconfig, (ns,), work / f"operator-{ns}.log", source=str(REPO / "operator"),
                       extra_args=("--no-leader-election",)).start()
    try:
        names = workload.names("r", n)
        with ThreadPoolExecutor(16) as pool:  # the backlog is in long before the limit lets it drain
            list(pool.map(lambda name: api.create(tasks_path(ns), workload.task(name, "bench")), names))
        while sum((t.get("status") or {}).get("phase") == "Queued" for t in api.request("GET", tasks_path(ns))["items"]) < n:
            time.sleep(1)  # all seen by the operator, so the pool stays busy from its resume to its last start
        resumed = api.pool.urlopen("PATCH", f"{pools_path(ns)}/bench", body=json.dumps({"spec": {"paused": False}}),
                                   headers={**api.pool.headers, "Content-Type": "application/merge-patch+json"})
        assert resumed.status == 200, resumed.data
        deadline = time.monotonic() + args.seconds * 3 + 60
        while True:
            items = api.request("GET", tasks_path(ns))["items"]
            starts = [a["dispatchedAt"] for t in items for a in (t.get("status") or {}).get("attempts", [])
                      if a.get("dispatchedAt")]
            if len(starts) >= n or time.monotonic() > deadline:
                break
            time.sleep(2)
        jobs = api.request("GET", jobs_path(ns))["items"]
    finally:
        operator.process.terminate()
        operator.process.wait(30)
        api.delete(f"/api/v1/namespaces/{ns}")
    times = sorted(ts(s) for s in starts)
    span = times[-1] - times[0]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    per_second = Counter(int(ts(j["metadata"]["creationTimestamp"])) for j in jobs)
    seconds = sorted(per_second)
    whole = [per_second[s] for s in seconds[1:-1]]  # the first and last seconds are partial
    result = {
        "rate": args.rate, "burst": args.burst, "seconds": args.seconds, "tasks": n, "starts": len(times),
        "span_s": round(span, 3),
        "observed_rate": round((len(times) - args.burst) / span, 4) if span else None,
        "rate_error_pct": round(((len(times) - args.burst) / span / args.rate - 1) * 100, 2) if span else None,
        "gap_s": {"p10": round(gaps[len(gaps) // 10], 3), "p50": round(gaps[len(gaps) // 2], 3),
                  "p90": round(gaps[len(gaps) * 9 // 10], 3), "max": round(gaps[-1], 3)} if gaps else None,
        "max_in_any_1s_window": most_in_a_window(times),
        "limit_per_1s_window": args.rate + args.burst,
        "jobs_per_calendar_second": {"min": min(whole, default=0), "max": max(whole, default=0),
                                     "mean": round(sum(whole) / len(whole), 3) if whole else None},
    }
    work.mkdir(parents=True, exist_ok=True)
    (work / f"ratelimit-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps({**result, "start_times": [round(t - times[0], 4) for t in times]}, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
