"""One feature off, then on: the same burst of N Tasks twice in one run, each timed and counted as
bench/throughput.py's cronoq burst is (throughput, create → Job, create → Succeeded, the operator's
CPU per task and memory, writes per task), so the difference is the feature's cost.

- `archive` (issue 53): the operator's `--archive` on a SQLite file of the work folder. Its CPU is
  read once the archive holds every task's row (the writer's batches trail the last success).
- `keys` (issue 54): the tasks spread over two pools, each naming one of KEYS concurrency keys whose
  limit (one pattern, declared in one pool) holds across both; off, the same two pools, no keys.
- `tracing` (issue 55): the operator's OTEL_EXPORTER_OTLP_ENDPOINT unset, then set to a real Jaeger
  (tests/support/jaeger.py, the cached binary); its CPU is read once Jaeger holds every task's trace.

    .venv/bin/python bench/run.py --only archive,keys,tracing --sizes 200 --source worktree
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
import urllib.request
from typing import Any, Callable

from bench import workload
from bench.cluster import log
from bench.throughput import POOL, Context, cronoq, wait_until

KEYS, KEY_LIMIT = 4, 25
"""Four keys of 25 running at once each: 100 of a burst run at a time, the rest wait for their key."""


def onoff(ctx: Context, n: int, what: str, on: dict[str, Any], off: dict[str, Any] | None = None) -> dict[str, Any]:
    """The burst with `off`'s arguments to bench.throughput.cronoq, then with `on`'s."""
    runs = {mode: cronoq(ctx, n, label=f"{what}-{mode}", **args) for mode, args in (("off", off or {}), ("on", on))}
    log(f"{what} n={n}: off {runs['off']['throughput']} tasks/s, on {runs['on']['throughput']} tasks/s; "
        f"on: {runs['on'].get('after')}")
    return {"n": n, **runs}


def _until(count: Callable[[], int], n: int, timeout: float = 120.0) -> dict[str, Any]:
    """Wait until `count()` reaches n; what it reached, and after how long."""
    started, seen = time.monotonic(), [0]

    def enough() -> bool:
        try:
            seen[0] = count()
        except (OSError, ValueError, sqlite3.OperationalError):  # not there yet
            pass
        return seen[0] >= n

    done = wait_until(enough, timeout)
    return {"rows": seen[0], "wait_seconds": round(time.monotonic() - started, 2) if done else None}


def archive(ctx: Context, n: int) -> dict[str, Any]:
    path = str(ctx.work / f"archive-{n}.db")
    for stale in (path, f"{path}-wal", f"{path}-shm"):  # a former run's rows (same namespace) would count
        if os.path.exists(stale):
            os.remove(stale)

    def rows(namespace: str) -> dict[str, Any]:
        def count(table: str, what: str = "COUNT(*)") -> int:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as conn:
                return conn.execute(f"SELECT {what} FROM {table} WHERE namespace = ?", (namespace,)).fetchone()[0]
        out = _until(lambda: count("cronoq_tasks"), n)
        attempts = count("cronoq_attempts")
        return {**out, "attempt_rows": attempts,
                "duplicate_rows": attempts - count("cronoq_attempts", "COUNT(DISTINCT task_uid || '/' || attempt)")}

    return {**onoff(ctx, n, "archive", {"operator_args": (f"--archive=sqlite:///{path}",), "after": rows}),
            "path": path}


def keyed(n: int, keys: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pools, tasks): task i in pool `bench` or `other` by turns, naming key `customer-{i % KEYS}`."""
    limits = {"concurrencyKeyLimits": [{"key": "customer-*", "limit": KEY_LIMIT}]} if keys else {}
    pools = [workload.pool(POOL, 10_000, **limits), workload.pool("other", 10_000)]
    tasks = [workload.task(name, (POOL, "other")[i % 2]) for i, name in enumerate(workload.names("t", n))]
    for i, task in enumerate(tasks):
        if keys:
            task["spec"]["concurrencyKeys"] = [f"customer-{i % KEYS}"]
    return pools, tasks


def keys(ctx: Context, n: int) -> dict[str, Any]:
    return onoff(ctx, n, "keys", dict(zip(("pools", "tasks"), keyed(n, True))),
                 dict(zip(("pools", "tasks"), keyed(n, False))))


def tracing(ctx: Context, n: int) -> dict[str, Any]:
    os.environ["CRONOQ_PORT_OFFSET"] = str(ctx.cluster.port_offset)  # Jaeger's ports, as the tests shift them
    from tests.support.jaeger import Jaeger

    jaeger = Jaeger(ctx.work)
    try:
        def traces(namespace: str) -> dict[str, Any]:
            url = f"{jaeger.query}/api/traces?service=cronoq-operator&limit={n * 2}&lookback=1h"

            def count() -> int:
                with urllib.request.urlopen(url, timeout=30) as answer:
                    return sum(1 for t in json.load(answer)["data"] if any(
                        s["operationName"] == "task" and any(tag["key"] == "cronoq.task.namespace" and
                                                             tag["value"] == namespace for tag in s["tags"])
                        for s in t["spans"]))
            return _until(count, n)

        return onoff(ctx, n, "tracing", {"env": {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp}, "after": traces})
    finally:
        jaeger.stop()
