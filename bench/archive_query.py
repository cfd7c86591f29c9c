"""`cronoq history` over a big archive: fill a real Postgres (tests/support/postgres.py, Debian's
package) and a SQLite file with N executions (default 1,000,000 attempt rows over 500,000 tasks,
20 namespaces, 10 pools, a mix of outcomes and reasons, a month of finish times), then time the
first page (50 rows) of the queries `cronoq history` makes, each filter alone and combined, the
dashboard's history page (a page and one row more; a deep page), and the lookup a batch of keyed
tasks makes for originals deleted from the cluster (500 keys in one call).

    .venv/bin/python -m bench.archive_query                 # both databases, 1,000,000 rows
    .venv/bin/python -m bench.archive_query --rows 100000 --only sqlite

The rows are generated in SQL (generate_series / a recursive CTE), not through the operator's
writer: what is measured is the read. Each query runs once cold and 5 times warm; the median of
the warm runs is reported, with the worst."""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from cronoq.archive import Database, Filter

NOW = datetime(2026, 12, 7, tzinfo=timezone.utc)
OUTCOMES = ("Success", "Success", "Success", "Retryable", "Retryable", "Permanent", "Success", "Cancelled")
REASONS = ("Completed", "Completed", "Completed", "Error", "OOMKilled", "PermanentExitCode", "Completed", "Cancelled")


INSERT_ATTEMPTS = ("INSERT INTO cronoq_attempts (task_uid, attempt, namespace, name, pool, key, delivery, trigger, "
                   "outcome, reason, exit_code, response_code, message, dispatched_at, started_at, finished_at, "
                   "duration_ms, job, worker, archived_at)")
INSERT_TASKS = ("INSERT INTO cronoq_tasks (task_uid, namespace, name, pool, key, phase, attempts, reason, message, "
                "output, output_available, duplicate_of, created_at, submitted_at, finished_at, archived_at)")


def fill_postgres(db: Database, rows: int) -> None:
    conn = db.connection()
    conn.execute("BEGIN")
    conn.execute(f"""
        {INSERT_ATTEMPTS}
        SELECT 'uid-' || (i / 2), 1 + i % 2, 'team-' || (i % 20), 'task-' || (i / 2), 'pool-' || (i % 10),
               CASE WHEN (i / 2) % 7 = 0 THEN 'key-' || (i / 2) END, 'Job',
               CASE WHEN i % 2 = 0 THEN 'First' ELSE 'Retry' END, (ARRAY{list(OUTCOMES)})[1 + i % 8], (ARRAY{list(REASONS)})[1 + i % 8],
               CASE WHEN i % 8 IN (0, 1, 2, 6) THEN 0 ELSE 1 END, NULL, 'a message of the usual length, here',
               ts - interval '3 seconds', ts - interval '2 seconds', ts, 2000, 'task-' || (i / 2) || '-a' || (1 + i % 2),
               NULL, ts
        FROM (SELECT i, TIMESTAMPTZ '{NOW.isoformat()}' - (i * interval '1 second') * (2592000.0 / {rows}) AS ts
              FROM generate_series(0, {rows - 1}) AS i) s""")
    conn.execute(f"""
        {INSERT_TASKS}
        SELECT 'uid-' || j, 'team-' || ((2 * j) % 20), 'task-' || j, 'pool-' || ((2 * j) % 10),
               CASE WHEN j % 7 = 0 THEN 'key-' || j END,
               CASE WHEN j % 50 = 0 THEN 'DeadLettered' WHEN j % 10 = 0 THEN 'Failed' ELSE 'Succeeded' END, 2,
               NULL, 'done', NULL, false, NULL, ts, ts, ts, ts
        FROM (SELECT j, TIMESTAMPTZ '{NOW.isoformat()}' - (2 * j * interval '1 second') * (2592000.0 / {rows}) AS ts
              FROM generate_series(0, {rows // 2 - 1}) AS j) s""")
    conn.execute("COMMIT")
    conn.execute("ANALYZE")


def fill_sqlite(db: Database, rows: int) -> None:
    conn = db.connection()
    conn.execute("BEGIN")
    outcome = "CASE i % 8 " + " ".join(f"WHEN {k} THEN '{v}'" for k, v in enumerate(OUTCOMES)) + " END"
    reason = "CASE i % 8 " + " ".join(f"WHEN {k} THEN '{v}'" for k, v in enumerate(REASONS)) + " END"
    start = NOW.timestamp()
    step = 2592000.0 / rows
    ts = f"strftime('%Y-%m-%dT%H:%M:%f000Z', {start} - i * {step}, 'unixepoch')"
    conn.execute(f"""
        WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {rows - 1})
        {INSERT_ATTEMPTS}
        SELECT 'uid-' || (i / 2), 1 + i % 2, 'team-' || (i % 20), 'task-' || (i / 2), 'pool-' || (i % 10),
               CASE WHEN (i / 2) % 7 = 0 THEN 'key-' || (i / 2) END, 'Job',
               CASE WHEN i % 2 = 0 THEN 'First' ELSE 'Retry' END, {outcome}, {reason}, CASE WHEN i % 8 IN (0, 1, 2, 6) THEN 0 ELSE 1 END, NULL,
               'a message of the usual length, here', {ts}, {ts}, {ts}, 2000, 'task-' || (i / 2), NULL, {ts}
        FROM s""")
    tts = f"strftime('%Y-%m-%dT%H:%M:%f000Z', {start} - 2 * j * {step}, 'unixepoch')"
    conn.execute(f"""
        WITH RECURSIVE s(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM s WHERE j < {rows // 2 - 1})
        {INSERT_TASKS}
        SELECT 'uid-' || j, 'team-' || ((2 * j) % 20), 'task-' || j, 'pool-' || ((2 * j) % 10),
               CASE WHEN j % 7 = 0 THEN 'key-' || j END,
               CASE WHEN j % 50 = 0 THEN 'DeadLettered' WHEN j % 10 = 0 THEN 'Failed' ELSE 'Succeeded' END, 2,
               NULL, 'done', NULL, 0, NULL, {tts}, {tts}, {tts}, {tts}
        FROM s""")
    conn.execute("COMMIT")
    conn.execute("ANALYZE")


QUERIES: dict[str, Filter] = {
    "no filter": Filter(),
    "namespace": Filter(namespace="team-7"),
    "namespace + pool": Filter(namespace="team-7", pool="pool-7"),
    "outcome Permanent": Filter(outcome="Permanent"),
    "namespace + outcome Retryable": Filter(namespace="team-3", outcome="Retryable"),
    "reason OOMKilled": Filter(reason="OOMKilled"),
    "phase DeadLettered": Filter(phase="DeadLettered"),
    "key": Filter(key="key-49000"),
    "name": Filter(name="task-250000"),
    "since 1h": Filter(since=NOW - timedelta(hours=1)),
    "a day a week ago": Filter(since=NOW - timedelta(days=8), until=NOW - timedelta(days=7), namespace="team-1"),
    # The dashboard's history page: a page of 50 and one row more, filters combined, a deep page.
    "dashboard: namespace + outcome + since 7d": Filter(namespace="team-3", outcome="Retryable",
                                                        since=NOW - timedelta(days=7), limit=51),
    "dashboard: pool + phase Failed": Filter(namespace="team-0", pool="pool-0", phase="Failed", limit=51),
}
DEEP = Filter(namespace="team-7", pool="pool-7", limit=51)
"""The dashboard's page 100 of a pool: the page after the place of the 4,950th row (keyset paging)."""
KEYS = [f"key-{7 * j}" for j in range(0, 2 * 500, 2)]
"""500 keys a burst of keyed tasks asks about at once (controller/archive.py's batch): every other one held."""


def _timed(query: Callable[[], Any]) -> tuple[int, float, float]:
    """Rows found, median and worst ms of 5 warm runs (after a cold one)."""
    query()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        found = query()
        times.append(time.perf_counter() - start)
    return len(found), statistics.median(times) * 1000, max(times) * 1000


def measure(db: Database) -> list[tuple[str, int, float, float]]:
    last = db.query(replace(DEEP, limit=1, offset=99 * 50 - 1))[0]
    deep = replace(DEEP, older_than=(last["finished_at"], last["task_uid"], last["attempt"]))
    out = [(label, *_timed(lambda: db.query(where)))
           for label, where in {**QUERIES, "dashboard: namespace + pool, page 100": deep}.items()]
    asked = [(f"team-{(2 * int(k[4:])) % 20}", f"pool-{(2 * int(k[4:])) % 10}", k) for k in KEYS]
    asked = [(ns, pool, k) if i % 2 == 0 else (ns, pool, k + "-none") for i, (ns, pool, k) in enumerate(asked)]
    return out + [("a deleted original's key: 500 asked in one batch", *_timed(lambda: db.originals(asked)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--only", choices=["postgres", "sqlite"])
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# cronoq history over {args.rows:,} archived executions (commit {commit}, {os.cpu_count()} cores)")
    if args.only != "sqlite":
        from tests.support.postgres import PostgresServer
        server = PostgresServer().start()
        try:
            dsn = server.database("bench")
            name = dsn.split("dbname=")[1].split()[0]
            db = Database.open(f"postgresql://cronoq@127.0.0.1:{server.port}/{name}")
            db.migrate()
            start = time.perf_counter()
            fill_postgres(db, args.rows)
            print(f"\n## Postgres (filled in {time.perf_counter() - start:.0f} s)\n")
            report(measure(db))
            db.close()
        finally:
            server.stop()
    if args.only != "postgres":
        with tempfile.TemporaryDirectory() as tmp:
            db = Database.open(f"sqlite:///{tmp}/archive.db")
            db.migrate()
            start = time.perf_counter()
            fill_sqlite(db, args.rows)
            print(f"\n## SQLite (filled in {time.perf_counter() - start:.0f} s, "
                  f"{os.path.getsize(f'{tmp}/archive.db') / 1e6:.0f} MB)\n")
            report(measure(db))
            db.close()


def report(results: list[tuple[str, int, float, float]]) -> None:
    print("| Query (first page, 50 rows) | Rows | Median ms | Worst ms |")
    print("| --- | ---: | ---: | ---: |")
    for label, found, median, worst in results:
        print(f"| {label} | {found} | {median:.1f} | {worst:.1f} |")


if __name__ == "__main__":
    main()
