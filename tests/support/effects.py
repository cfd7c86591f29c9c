"""The exactly-once fault run's sink and its checker (tests/integration/faults/test_exactly_once.py).

Each attempt of a task makes one effect in Postgres twice over: **fenced** with cronoq.fencing —
`last_attempt_wins` on the task's `state` row, then `once` for its `charges` row, and an
append-only `audit` row of what it tried and what happened (accepted, refused, duplicate), all in
one transaction — and **unfenced**: a plain INSERT into `unfenced_charges`, as a handler that does
not use the helper would. The checker reads the database afterwards.

Run as a pull worker: `python -m tests.support.effects POOL NAME DSN [CONCURRENCY [TTL]]`
(namespace and credentials from CRONOQ_NAMESPACE and KUBECONFIG). Its handler is deaf: it does not
look at `ctx.aborted`, so an attempt the operator gave up (its lease expired while the worker was
cut off) goes on and writes late, as a handler in the middle of a slow call would. The first
attempt of a task sleeps `payload.first` seconds, later ones `payload.sleep`.

Run as an attempt's own pod (Job mode, on the real node: tests/realnode/test_exactly_once.py, in
the image tests/realnode/effects.Dockerfile builds): `python3 effects.py job`, the DSN in
EFFECTS_DSN, the token from the environment the operator gives (`job()`). The same module's
`effect` serves the push receiver there, the token from the request's headers.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from cronoq import fencing

SCHEMA = """
CREATE TABLE state (task text PRIMARY KEY, attempt int NOT NULL);
CREATE TABLE charges (id bigserial PRIMARY KEY, task text NOT NULL, attempt int NOT NULL, worker text);
CREATE TABLE unfenced_charges (id bigserial PRIMARY KEY, task text NOT NULL, attempt int NOT NULL, worker text);
CREATE TABLE audit (
    id bigserial PRIMARY KEY, task text NOT NULL, attempt int NOT NULL, worker text,
    outcome text NOT NULL CHECK (outcome IN ('accepted', 'refused', 'duplicate')),
    newest int NOT NULL,     -- the newest attempt the fence had seen (the writer's own when accepted)
    overwrote int            -- accepted: the attempt the state row held before (NULL: none)
);
"""


def create(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        fencing.create_tables(conn)
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)


def effect(dsn: str, who: Any, worker: str) -> dict[str, Any]:
    """What one attempt does: the unfenced INSERT, then the fenced effect and its audit row."""
    import psycopg

    token = fencing.Token.of(who)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO unfenced_charges (task, attempt, worker) VALUES (%s, %s, %s)",
                     (token.task, token.attempt, worker))
    with psycopg.connect(dsn) as conn, conn.transaction():
        verdict = fencing.last_attempt_wins(conn, token, "state")
        if not verdict:
            conn.execute("INSERT INTO audit (task, attempt, worker, outcome, newest) VALUES (%s, %s, %s, 'refused', %s)",
                         (token.task, token.attempt, worker, verdict.newest))
            return {"refused": verdict.newest}
        before = conn.execute("SELECT attempt FROM state WHERE task = %s", (token.task,)).fetchone()
        conn.execute("INSERT INTO state VALUES (%s, %s) ON CONFLICT (task) DO UPDATE SET attempt = excluded.attempt",
                     (token.task, token.attempt))
        done = fencing.once(conn, token, effect=lambda: conn.execute(
            "INSERT INTO charges (task, attempt, worker) VALUES (%s, %s, %s) RETURNING id",
            (token.task, token.attempt, worker)).fetchone()[0])
        conn.execute("INSERT INTO audit (task, attempt, worker, outcome, newest, overwrote) "
                     "VALUES (%s, %s, %s, %s, %s, %s)",
                     (token.task, token.attempt, worker, "accepted" if done.first else "duplicate", token.attempt,
                      before[0] if before else None))
        return {"charge": done.result, "by": done.attempt}


ROWS: list[dict[str, Any]] = []
"""One row per fault run, printed at the end of the session (tests/integration/faults/conftest.py)."""
DELIVERY_ROWS: list[dict[str, Any]] = []
"""One row per delivery of the real-node run (Job mode, push), printed at the end of the session
(tests/realnode/conftest.py)."""


def table(rows: list[dict[str, Any]]) -> list[str]:
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    return ["  ".join(f"{c:>{w}}" for c, w in zip(columns, widths)),
            *("  ".join(f"{r[c]!s:>{w}}" for c, w in zip(columns, widths)) for r in rows)]


@dataclass
class Findings:
    tasks: int = 0
    succeeded: int = 0
    attempts: int = 0
    effects: int = 0
    stale_refused: int = 0
    duplicates: int = 0
    violations: list[str] = field(default_factory=list)
    unfenced_effects: int = 0
    unfenced_duplicates: int = 0
    """Tasks the plain INSERT charged more than once."""
    unfenced_extra: int = 0
    """Rows beyond one per task."""


def check(dsn: str, statuses: dict[str, dict]) -> Findings:
    """Read the sink and judge it against the tasks' final statuses (by task uid)."""
    import psycopg

    found = Findings(tasks=len(statuses))
    with psycopg.connect(dsn) as conn:
        charges = defaultdict(list)
        for task, attempt in conn.execute("SELECT task, attempt FROM charges ORDER BY id"):
            charges[task].append(attempt)
        unfenced = defaultdict(int)
        for task, count in conn.execute("SELECT task, count(*) FROM unfenced_charges GROUP BY task"):
            unfenced[task] = count
        audit = conn.execute("SELECT id, task, attempt, outcome, newest, overwrote FROM audit ORDER BY id").fetchall()
    found.effects = sum(len(v) for v in charges.values())
    found.unfenced_effects = sum(unfenced.values())
    found.unfenced_duplicates = sum(1 for n in unfenced.values() if n > 1)
    found.unfenced_extra = sum(n - 1 for n in unfenced.values() if n > 1)
    for uid, status in statuses.items():
        found.attempts += int(status.get("attempt") or 0)
        if status.get("phase") == "Succeeded":
            found.succeeded += 1
            if len(charges.get(uid, [])) != 1:
                found.violations.append(f"task {uid} Succeeded with {len(charges.get(uid, []))} effects")
    for uid, attempts in charges.items():
        if len(attempts) > 1:
            found.violations.append(f"task {uid}: {len(attempts)} effects (attempts {attempts})")
    accepted: dict[str, list[tuple[int, int]]] = defaultdict(list)  # task -> [(audit id, attempt)]
    for row_id, task, attempt, outcome, newest, overwrote in audit:
        if outcome == "refused":
            found.stale_refused += 1
            earlier = [a for i, a in accepted[task] if i < row_id and a > attempt]
            if newest <= attempt or not earlier:
                found.violations.append(f"task {task}: attempt {attempt}'s write refused but no later attempt "
                                        f"had written (newest {newest})")
            continue
        if outcome == "duplicate":
            found.duplicates += 1
        if overwrote is not None and overwrote > attempt:
            found.violations.append(f"task {task}: attempt {attempt} overwrote attempt {overwrote}'s effect")
        accepted[task].append((row_id, attempt))
    return found


def wait_for_newer(dsn: str, who: Any, cap: float) -> bool:
    """Wait, at most `cap` seconds, until a later attempt of the task has written its state: a
    handler that goes on after its attempt was given up then certainly writes after the retry."""
    import psycopg

    token = fencing.Token.of(who)
    deadline = time.monotonic() + cap
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT attempt FROM state WHERE task = %s", (token.task,)).fetchone()
            if row is not None and row[0] > token.attempt:
                return True
            time.sleep(0.5)
    return False


def job() -> int:
    """Job mode: this pod is one attempt, run by the SDK (heartbeats, the termination message);
    the fencing token is the environment's (`who` None: CRONOQ_TASK_ID, CRONOQ_ATTEMPT). Its first
    attempt does what `payload.mode` says; later ones write after `payload.sleep` seconds:

    - `plain`: sleep `payload.before`, make the effect, sleep `payload.after` (a pod deleted then
      has made its effect, and its retry is a duplicate);
    - `fail-after`: make the effect, then fail (Retryable): the retry is a duplicate;
    - `deaf`: ignore SIGTERM and stop renewing the attempt's Lease (its heartbeat paused, as a
      starved thread's would), so the Lease expires and the operator gives the attempt up and
      deletes its Job while the handler goes on; it waits until a later attempt has written (at
      most `payload.cap` seconds, within the pod's grace period), then writes late.
    """
    import cronoq.worker

    dsn, name = os.environ["EFFECTS_DSN"], os.environ.get("HOSTNAME", "job")

    def handle(ctx: cronoq.worker.Context) -> dict[str, Any]:
        payload = ctx.payload or {}
        mode = payload.get("mode", "plain") if ctx.attempt == 1 else "later"
        if mode == "deaf":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if ctx._keeper is not None:
                ctx._keeper.stop()
            wait_for_newer(dsn, None, float(payload.get("cap", 60)))
            return effect(dsn, None, name)
        time.sleep(float(payload.get("before", 0) if mode != "later" else payload.get("sleep", 0)))
        done = effect(dsn, None, name)
        if mode == "fail-after":
            raise cronoq.worker.Retryable("failed after its effect")
        if mode == "plain":
            time.sleep(float(payload.get("after", 0)))
        return done

    cronoq.worker.run(handle)


def main() -> int:
    import cronoq.worker

    if sys.argv[1:2] == ["job"]:
        return job()
    pool, name, dsn = sys.argv[1:4]
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    ttl = float(sys.argv[5]) if len(sys.argv) > 5 else 20.0

    def handle(ctx: cronoq.worker.Context) -> dict[str, Any]:
        payload = ctx.payload or {}
        time.sleep(float(payload.get("first" if ctx.attempt == 1 else "sleep", 0)))  # deaf: ctx.aborted unread
        return effect(dsn, ctx, name)

    return cronoq.worker.serve(pool, handle, concurrency=concurrency, name=name, ttl=ttl, grace=5.0)


if __name__ == "__main__":
    sys.exit(main())
