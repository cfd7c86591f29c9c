"""The archive on and off (issue 53, item 4): the same burst of N Tasks twice in one run, the
operator first without an archive, then with `--archive` on a SQLite file of the bench's work
folder, each timed and counted as bench/throughput.py's cronoq burst is (throughput, create → Job,
create → Succeeded, the operator's CPU per task and memory). The run with the archive reads the
operator's CPU only once the archive holds every task's row (the writer's batches trail the last
success by up to a second), so the writes are counted in it.

    .venv/bin/python bench/run.py --only archive --sizes 300 --source worktree --results /tmp/r

It checks from the database that every task's row and every ended attempt is in it, once."""
from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from bench.cluster import log
from bench.throughput import Context, cronoq


def archived(path: str, namespace: str, n: int, timeout: float = 120.0) -> dict[str, Any]:
    """Wait until the archive holds N task rows of the namespace; what it holds then."""
    started = time.monotonic()
    tasks = attempts = 0
    while time.monotonic() - started < timeout:
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as conn:
                tasks = conn.execute("SELECT COUNT(*) FROM cronoq_tasks WHERE namespace = ?", (namespace,)).fetchone()[0]
                attempts, distinct = conn.execute(
                    "SELECT COUNT(*), COUNT(DISTINCT task_uid || '/' || attempt) FROM cronoq_attempts "
                    "WHERE namespace = ?", (namespace,)).fetchone()
        except sqlite3.OperationalError:  # not created yet, or no table yet
            tasks = attempts = distinct = 0
        if tasks >= n:
            return {"task_rows": tasks, "attempt_rows": attempts, "duplicate_rows": attempts - distinct,
                    "wait_seconds": round(time.monotonic() - started, 2)}
        time.sleep(0.2)
    return {"task_rows": tasks, "attempt_rows": attempts, "duplicate_rows": None, "wait_seconds": None}


def archive_ab(ctx: Context, n: int) -> dict[str, Any]:
    off = cronoq(ctx, n, label="archive-off")
    path = str(ctx.work / f"archive-{n}.db")
    for stale in (path, f"{path}-wal", f"{path}-shm"):  # a former run's rows (same namespace) would count
        if os.path.exists(stale):
            os.remove(stale)
    on = cronoq(ctx, n, label="archive-on", operator_args=(f"--archive=sqlite:///{path}",),
                after=lambda namespace: archived(path, namespace, n))
    rows = on["after"]
    log(f"archive n={n}: off {off['throughput']} tasks/s, on {on['throughput']} tasks/s; "
        f"{rows['task_rows']} task rows, {rows['attempt_rows']} attempt rows, {rows['duplicate_rows']} duplicates")
    return {"n": n, "off": off, "on": on, "path": path}
