"""Fencing at the sink: the two rules that turn cronoq's at-least-once attempts into effects that
happen once, for SQLite (the standard library's sqlite3) and Postgres (psycopg 3, the `postgres`
extra: `pip install 'cronoq[postgres]'`).

No scheduler can keep a handler from running twice (a lease is not mutual exclusion: a worker cut
off from the API server goes on running after its attempt was given up and retried), but
(task uid, attempt) is a fencing token: attempt numbers never repeat and only grow. A sink that
records the token with the effect, in the same transaction, can refuse what a stale attempt writes.

- `last_attempt_wins(db, who, name)`: the write of attempt n goes ahead only if no later attempt
  of the task has written; a late write of an older attempt is refused (a falsy `Verdict` and the
  counter `cronoq_fencing_stale_writes_total`).
- `once(db, who, key, effect)`: the first attempt to commit the effect wins; every later one (a
  retry after a lost report, a duplicate) finds it done and gets back what the first one stored
  (`cronoq_fencing_duplicates_total`).

`who` is whatever the delivery gives: a handler's `ctx` (Job mode or a pull worker), a push
request's headers (`Idempotency-Key` and `X-Cronoq-Attempt`), None for the container's own
environment (`CRONOQ_TASK_ID`, `CRONOQ_ATTEMPT`), or a `Token`. `db` is the caller's connection or
cursor, inside the caller's transaction: the fence and the effect commit together or not at all,
and a helper handed a connection in autocommit refuses to act (`NotInTransaction`). Nothing here
commits, rolls back or creates a table: the table (`schema()`, `python -m cronoq.fencing
postgres|sqlite`) is the user's migration, or `create_tables(db)` when asked.

docs/how-to/exactly-once.md says which identity to use when, and shows the fault run that checks it.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from prometheus_client import Counter

from cronoq.pod_protocol import Env

TABLE = "cronoq_fences"
"""The default table (each helper takes `table=`)."""
LAST = "last"
ONCE = "once"
"""The `rule` column: which helper owns the row."""

STALE_WRITES = Counter("cronoq_fencing_stale_writes_total",
                       "Writes refused by cronoq.fencing.last_attempt_wins because a later attempt of the task had "
                       "written (the counted write was a stale attempt's).")
DUPLICATES = Counter("cronoq_fencing_duplicates_total",
                     "Effects cronoq.fencing.once found already done (a retry or a duplicate got the stored result "
                     "instead of doing it again).")
"""Both in prometheus_client's default registry: a process exporting its metrics exports them."""

IDEMPOTENCY_KEY = "Idempotency-Key"
ATTEMPT_HEADER = "X-Cronoq-Attempt"
"""The headers a push request carries (cronoq.push): the task uid and the attempt number."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?")


class NotInTransaction(RuntimeError):
    """The connection would commit the fence on its own (autocommit, no transaction open): the
    fence and the effect would not commit together."""


@dataclass(frozen=True)
class Token:
    """The fencing token of one attempt."""

    task: str
    """The task's uid (cronoq's `metadata.uid`; a push request's `Idempotency-Key`)."""
    attempt: int
    """Its attempt number: never repeats for a task, and a later attempt has a higher one."""

    def __post_init__(self) -> None:
        if not self.task:
            raise ValueError("a fencing token needs the task's uid")
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise ValueError(f"an attempt number is a whole number >= 1, not {self.attempt!r}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Token:
        """An attempt's own container: CRONOQ_TASK_ID and CRONOQ_ATTEMPT (default `os.environ`)."""
        environ = os.environ if environ is None else environ
        return cls(environ.get(Env.TASK_ID, ""), _whole(environ.get(Env.ATTEMPT), Env.ATTEMPT))

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Token:
        """A push request: `Idempotency-Key` (the task uid) and `X-Cronoq-Attempt`, names in any case."""
        lower = {k.lower(): v for k, v in headers.items()}
        return cls(lower.get(IDEMPOTENCY_KEY.lower(), "").strip(),
                   _whole(lower.get(ATTEMPT_HEADER.lower()), ATTEMPT_HEADER))

    @classmethod
    def of(cls, who: Any = None) -> Token:
        """A Token from whatever a delivery hands over: a Token, a handler's ctx (`.id`, `.attempt`),
        a push request's headers (a mapping), or None for this process's environment."""
        if isinstance(who, Token):
            return who
        if who is None:
            return cls.from_environ()
        if isinstance(who, Mapping) or hasattr(who, "items") and not hasattr(who, "attempt"):
            return cls.from_headers(who)
        if hasattr(who, "id") and hasattr(who, "attempt"):
            return cls(who.id, who.attempt)
        raise TypeError(f"no fencing token in {type(who).__name__}: pass a ctx, a push request's headers, a Token "
                        "or None (the environment)")


def _whole(text: str | None, what: str) -> int:
    try:
        return int((text or "").strip())
    except ValueError:
        raise ValueError(f"{what} is not an attempt number: {text!r}") from None


@dataclass(frozen=True)
class Verdict:
    """What `last_attempt_wins` decided. True when the write may go ahead."""

    accepted: bool
    attempt: int
    """The writer's attempt."""
    newest: int
    """The newest attempt that has written (the writer's own when accepted)."""
    value: Any = None
    """What the `write` callback returned (accepted only)."""

    def __bool__(self) -> bool:
        return self.accepted

    @property
    def stale(self) -> bool:
        return not self.accepted


@dataclass(frozen=True)
class Done:
    """What `once` found or did."""

    first: bool
    """True: this attempt did the effect now (it commits with the caller's transaction)."""
    task: str
    attempt: int
    """The task and attempt that did it (this one when `first`)."""
    result: Any
    """What the effect returned, as stored (JSON round trip); the stored one when not `first`."""

    @property
    def duplicate(self) -> bool:
        return not self.first


# ---------------------------------------------------------------------------------------- SQL

def schema(dialect: str = "postgres", table: str = TABLE) -> str:
    """The migration that creates the table (`dialect`: postgres or sqlite)."""
    table = _table(table)
    if dialect not in ("postgres", "sqlite"):
        raise ValueError(f"dialect is postgres or sqlite, not {dialect!r}")
    when = "timestamptz NOT NULL DEFAULT now()" if dialect == "postgres" \
        else "TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"
    return (f"CREATE TABLE IF NOT EXISTS {table} (\n"
            f"    rule       TEXT    NOT NULL CHECK (rule IN ('last', 'once')),\n"
            f"    subject    TEXT    NOT NULL,  -- last: '<task uid>/<name>'; once: the key\n"
            f"    task       TEXT    NOT NULL,  -- the uid of the task whose attempt wrote\n"
            f"    attempt    INTEGER NOT NULL CHECK (attempt >= 1),\n"
            f"    result     TEXT,              -- once: the effect's result (JSON)\n"
            f"    written_at {when},\n"
            f"    PRIMARY KEY (rule, subject)\n"
            f");\n")


def create_tables(db: Any, table: str = TABLE) -> None:
    """Create the table if it does not exist, in the caller's transaction (nothing else creates it)."""
    dialect = _dialect(db)
    db.execute(schema(dialect, table).rstrip().rstrip(";"))


def _table(table: str) -> str:
    if not _IDENTIFIER.fullmatch(table):
        raise ValueError(f"not a plain table name: {table!r}")
    return table


def _dialect(db: Any) -> str:
    if isinstance(db, (sqlite3.Connection, sqlite3.Cursor)):
        return "sqlite"
    if type(db).__module__.split(".", 1)[0] == "psycopg":
        return "postgres"
    raise TypeError(f"not a sqlite3 or psycopg connection or cursor: {type(db).__name__}")


def _check_transaction(db: Any, dialect: str) -> None:
    if dialect == "sqlite":
        conn = db if isinstance(db, sqlite3.Connection) else db.connection
        if conn.in_transaction:
            return
        autocommit = getattr(conn, "autocommit", -1)  # 3.12+: True/False, or legacy (-1)
        if autocommit is True or (autocommit not in (True, False) and conn.isolation_level is None):
            raise NotInTransaction("the sqlite3 connection is in autocommit and no transaction is open: "
                                   "BEGIN first, so the fence and the effect commit together")
        return
    conn = db if hasattr(db, "autocommit") else db.connection
    if conn.autocommit and conn.info.transaction_status == 0:  # psycopg.pq.TransactionStatus.IDLE
        raise NotInTransaction("the psycopg connection is in autocommit and no transaction is open: use "
                               "`with conn.transaction():`, so the fence and the effect commit together")


def _sql(dialect: str, text: str) -> str:
    return text.replace("?", "%s") if dialect == "postgres" else text


def _run(db: Any, dialect: str, text: str, params: tuple[Any, ...]) -> Any:
    return db.execute(_sql(dialect, text), params)


# ------------------------------------------------------------------------------------ the rules

def last_attempt_wins(db: Any, who: Any = None, name: str = "", *, write: Callable[[], Any] | None = None,
                      table: str = TABLE) -> Verdict:
    """Record that attempt n of the task writes `name` (any text naming the row or effect; one
    fence per task and name), unless a later attempt already has. Accepted: `write()` (when given)
    runs, and its value is `Verdict.value`; refused: nothing runs, the Verdict is falsy and
    `cronoq_fencing_stale_writes_total` counts it. Concurrent writers wait for one another on the
    fence's row, so the decision holds until the caller's transaction ends:

        if fencing.last_attempt_wins(conn, ctx, "balance"):
            conn.execute("UPDATE accounts SET balance = ? WHERE id = ?", (new, account))
    """
    token, dialect, table = Token.of(who), _dialect(db), _table(table)
    _check_transaction(db, dialect)
    subject = f"{token.task}/{name}"
    upsert = _run(db, dialect,
                  f"INSERT INTO {table} (rule, subject, task, attempt) VALUES ('{LAST}', ?, ?, ?) "
                  f"ON CONFLICT (rule, subject) DO UPDATE SET attempt = excluded.attempt, "
                  f"written_at = CURRENT_TIMESTAMP WHERE {table}.attempt <= excluded.attempt",
                  (subject, token.task, token.attempt))
    if upsert.rowcount == 1:
        return Verdict(True, token.attempt, token.attempt, write() if write is not None else None)
    row = _run(db, dialect, f"SELECT attempt FROM {table} WHERE rule = '{LAST}' AND subject = ?", (subject,)).fetchone()
    STALE_WRITES.inc()
    return Verdict(False, token.attempt, int(row[0]) if row else token.attempt)


def once(db: Any, who: Any = None, key: str | None = None, effect: Callable[[], Any] | None = None, *,
         table: str = TABLE) -> Done:
    """Do `effect()` unless it was done: the first attempt to commit it wins, and every later
    one (a retry after a lost report, a second worker, a duplicate) gets `Done(first=False)` with
    the stored result, and `cronoq_fencing_duplicates_total` counts it. `key` names what must happen
    once (default: the task's uid, so each task's effect happens once; give the business
    identity, e.g. the order id, when other tasks must not repeat it either). The result must be
    JSON (or None). A concurrent first attempt is waited for (the key's row lock): if it commits,
    this one is a duplicate; if it rolls back, this one goes ahead.

        receipt = fencing.once(conn, ctx, effect=lambda: charge(conn, order)).result
    """
    token, dialect, table = Token.of(who), _dialect(db), _table(table)
    _check_transaction(db, dialect)
    subject = token.task if key is None else key
    claim = _run(db, dialect,
                 f"INSERT INTO {table} (rule, subject, task, attempt) VALUES ('{ONCE}', ?, ?, ?) "
                 f"ON CONFLICT (rule, subject) DO NOTHING", (subject, token.task, token.attempt))
    if claim.rowcount == 1:
        result = effect() if effect is not None else None
        stored = None if result is None else json.dumps(result, separators=(",", ":"), sort_keys=True)
        if stored is not None:
            _run(db, dialect, f"UPDATE {table} SET result = ? WHERE rule = '{ONCE}' AND subject = ?", (stored, subject))
        return Done(True, token.task, token.attempt, None if stored is None else json.loads(stored))
    row = _run(db, dialect, f"SELECT task, attempt, result FROM {table} WHERE rule = '{ONCE}' AND subject = ?",
               (subject,)).fetchone()
    DUPLICATES.inc()
    return Done(False, str(row[0]), int(row[1]), None if row[2] is None else json.loads(row[2]))


def main(argv: list[str] | None = None) -> int:
    """`python -m cronoq.fencing postgres|sqlite [TABLE]`: print the table's migration."""
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2 or args[0] not in ("postgres", "sqlite"):
        print("usage: python -m cronoq.fencing postgres|sqlite [TABLE]", file=sys.stderr)
        return 2
    print(schema(args[0], args[1] if len(args) > 1 else TABLE), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
