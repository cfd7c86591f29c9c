"""The same sum as task.py, served by a long-running pull worker instead of a pod per attempt
(a pool with `delivery: Workers`; examples/real-node/pull-worker.yaml runs it as a Deployment).

`cronoq.worker.serve` announces the worker with its own Lease, takes the attempts the operator
hands it (at most --concurrency at once), heartbeats each on the attempt's Lease and reports the
outcome there; SIGTERM drains it.

    payload: {"numbers": [1, 2, 3], "seconds": 2}   ->   output: {"sum": 6, "attempt": 1, "worker": "..."}
"""
import os
import time

import cronoq.worker


def handle(ctx: cronoq.worker.Context) -> dict:
    payload = ctx.payload or {}
    numbers = payload.get("numbers")
    if not isinstance(numbers, list) or not all(isinstance(n, (int, float)) for n in numbers):
        raise cronoq.worker.Permanent("payload.numbers must be a list of numbers")
    deadline = time.monotonic() + float(payload.get("seconds", 0))
    while time.monotonic() < deadline:  # slow work; stop early when the attempt is aborted
        if ctx.aborted:
            return {"aborted": True}
        time.sleep(0.2)
    print(f"attempt {ctx.attempt} of task {ctx.namespace}/{ctx.name} on {ctx.worker}: sum {sum(numbers)}", flush=True)
    return {"sum": sum(numbers), "attempt": ctx.attempt, "worker": ctx.worker}


if __name__ == "__main__":
    raise SystemExit(cronoq.worker.serve(os.environ.get("POOL", "sums"), handle,
                                         concurrency=int(os.environ.get("CONCURRENCY", "4"))))
