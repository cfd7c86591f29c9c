"""The bench's pull worker: `python -m bench.pull_worker POOL NAME JOURNAL CONCURRENCY` serves POOL
with a handler that returns at once, writing `<task> <time.monotonic()>` to JOURNAL when it starts (the
bench's create → handler start latency). Namespace and credentials: CRONOQ_NAMESPACE, KUBECONFIG."""
from __future__ import annotations

import sys
import threading
import time

import cronoq.worker


def main() -> int:
    pool, name, path, concurrency = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    lock = threading.Lock()
    journal = open(path, "a", buffering=1)

    def handle(ctx: cronoq.worker.Context) -> None:
        started = time.monotonic()  # one clock for every process on Linux, as the bench's
        with lock:
            journal.write(f"{ctx.name} {started:.6f}\n")

    return cronoq.worker.serve(pool, handle, concurrency=concurrency, name=name)


if __name__ == "__main__":
    sys.exit(main())
