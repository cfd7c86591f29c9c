"""A small task for cronoq's worker SDK: it sums the numbers in its payload, slowly.

Run as an attempt's container (the image built from the Dockerfile beside this file), it gets
the attempt's CRONOQ_* environment from its Job. `cronoq.worker.run` renews the attempt's
heartbeat Lease every TTL/3 while `handle` works, writes the structured termination message
(the output below, as JSON) and exits 0; should another attempt take the Lease over, it stops
`handle` where it is and exits 3 (self-fenced) instead of finishing stale work.

    payload: {"numbers": [1, 2, 3], "seconds": 2}   ->   output: {"sum": 6, "attempt": 1}
"""
import time

import cronoq.worker


def handle(ctx: cronoq.worker.Context) -> dict:
    payload = ctx.payload or {}
    numbers = payload.get("numbers")
    if not isinstance(numbers, list) or not all(isinstance(n, (int, float)) for n in numbers):
        raise cronoq.worker.Permanent("payload.numbers must be a list of numbers")
    deadline = time.monotonic() + float(payload.get("seconds", 0))
    total = 0
    for n in numbers:
        total += n
    while time.monotonic() < deadline:  # stands for slow work; the lease is renewed meanwhile
        time.sleep(0.2)
    print(f"attempt {ctx.attempt} of task {ctx.namespace}/{ctx.name}: sum {total}", flush=True)
    return {"sum": total, "attempt": ctx.attempt}


if __name__ == "__main__":
    cronoq.worker.run(handle)
