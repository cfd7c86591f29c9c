"""The archive's database (DESIGN §23): where ended attempts and finished tasks are kept after their
Task is gone, in SQLite (the standard library's sqlite3: one file, for the local demo and a single
replica) or Postgres (psycopg 3, the `postgres` extra: for several replicas, any of which may lead).

- `Database.open(url)`: `sqlite:///relative/path`, `sqlite:////absolute/path`, or a
  `postgresql://user@host:port/dbname` URL (anything libpq takes after it: `?sslmode=...`).
- `migrate()`: brings the schema to `SCHEMA_VERSION`, each step once, in order, recorded in
  `cronoq_archive_schema`; two operators starting together take turns (an advisory lock on
  Postgres, an immediate transaction on SQLite). The operator runs it at start; the CLI never does.
- `write(rows)`: the rows in one transaction; a row already there (same task uid and attempt
  number; a task's by its uid) is left as it is, so writing again never duplicates nor changes one.
- `archived(uids)`, `originals(keys)`, `query(filter)`, `prune(...)`: what the deletion gate, a
  keyed task whose original was deleted, `cronoq history` and the archive's retention ask.

Blocking calls: the operator makes them from one thread of its own (controller/archive.py), the
CLI directly. Nothing here knows Kubernetes.
"""
from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from cronoq.engine.history import AttemptRow, Rows, TaskRow

SCHEMA_VERSION = 1
ATTEMPTS = "cronoq_attempts"
TASKS = "cronoq_tasks"
SCHEMA = "cronoq_archive_schema"
LOCK_ID = 0x63726F6E  # "cron": the advisory lock two operators' migrations take turns on (Postgres)

Dialect = Literal["sqlite", "postgres"]

_TIME = {"sqlite": "TEXT", "postgres": "TIMESTAMPTZ"}
_BIG = {"sqlite": "INTEGER", "postgres": "BIGINT"}


def _migrations(dialect: Dialect) -> dict[int, list[str]]:
    """Version → its statements. A new version is a new entry: an old one never changes."""
    ts, big = _TIME[dialect], _BIG[dialect]
    return {
        1: [
            f"""CREATE TABLE {ATTEMPTS} (
                task_uid TEXT NOT NULL, attempt INTEGER NOT NULL,
                namespace TEXT NOT NULL, name TEXT NOT NULL, pool TEXT NOT NULL, key TEXT,
                delivery TEXT NOT NULL, trigger TEXT NOT NULL, outcome TEXT NOT NULL, reason TEXT,
                exit_code INTEGER, response_code INTEGER, message TEXT,
                dispatched_at {ts}, started_at {ts}, finished_at {ts}, duration_ms {big},
                job TEXT, worker TEXT, archived_at {ts} NOT NULL,
                PRIMARY KEY (task_uid, attempt))""",
            f"CREATE INDEX {ATTEMPTS}_finished ON {ATTEMPTS} (finished_at)",
            f"CREATE INDEX {ATTEMPTS}_namespace ON {ATTEMPTS} (namespace, finished_at)",
            f"CREATE INDEX {ATTEMPTS}_pool ON {ATTEMPTS} (namespace, pool, finished_at)",
            f"CREATE INDEX {ATTEMPTS}_outcome ON {ATTEMPTS} (outcome, finished_at)",
            f"CREATE INDEX {ATTEMPTS}_name ON {ATTEMPTS} (name, finished_at)",
            f"CREATE INDEX {ATTEMPTS}_key ON {ATTEMPTS} (key) WHERE key IS NOT NULL",
            f"""CREATE TABLE {TASKS} (
                task_uid TEXT PRIMARY KEY,
                namespace TEXT NOT NULL, name TEXT NOT NULL, pool TEXT NOT NULL, key TEXT,
                phase TEXT NOT NULL, attempts INTEGER NOT NULL, reason TEXT, message TEXT, output TEXT,
                output_available BOOLEAN NOT NULL, duplicate_of TEXT,
                created_at {ts}, submitted_at {ts}, finished_at {ts}, archived_at {ts} NOT NULL)""",
            f"CREATE INDEX {TASKS}_finished ON {TASKS} (finished_at)",
            f"CREATE INDEX {TASKS}_name ON {TASKS} (namespace, name)",
            f"CREATE INDEX {TASKS}_key ON {TASKS} (namespace, pool, key) WHERE key IS NOT NULL",
        ],
    }


class ArchiveError(Exception):
    """The archive cannot be used as asked (a bad URL, no schema, a missing driver)."""


def _utc(at: datetime) -> datetime:
    return at.astimezone(timezone.utc) if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def sqlite_time(at: datetime) -> str:
    """A time as SQLite keeps it: fixed-width UTC text, so that text order is time order."""
    return _utc(at).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)


_ATTEMPT_COLUMNS = [f.name for f in fields(AttemptRow)]
_TASK_COLUMNS = [f.name for f in fields(TaskRow)]
_TIME_COLUMNS = {"dispatched_at", "started_at", "finished_at", "created_at", "submitted_at", "archived_at"}


Cursor = tuple[datetime, str, int]
"""A row's place in the listing: its (finishedAt, task uid, attempt), the listing's order."""


@dataclass(frozen=True)
class Filter:
    """What `cronoq history` and the dashboard ask for: executions (ended attempts), newest first
    (then by task uid and attempt number, descending: each row has one place)."""

    namespace: str | None = None
    pool: str | None = None
    name: str | None = None
    key: str | None = None
    outcome: str | None = None
    """The attempt's outcome (Success, Retryable, Permanent, Cancelled)."""
    phase: str | None = None
    """The task's final phase (only attempts of finished tasks then)."""
    reason: str | None = None
    response_code: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    """On the attempt's finishedAt: since ≤ finishedAt < until."""
    limit: int = 50
    offset: int = 0
    """Rows skipped first."""
    older_than: Cursor | None = None
    """Only rows after this one in the listing's order (older): the next page, as cheap as the first."""
    newer_than: Cursor | None = None
    """Only rows before this one in the listing's order (newer): the page before, listed in the same order."""


class Database:
    """One connection to the archive. Not thread-safe: one thread at a time (the operator's own)."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite://"):
            self.dialect: Dialect = "sqlite"
            rest = url[len("sqlite://"):]
            if not rest.startswith("/") or rest == "/":
                raise ArchiveError(f"archive URL {url!r}: a SQLite URL is sqlite:///path (sqlite:////abs/path)")
            self.path = rest[1:]
        elif url.startswith(("postgresql://", "postgres://")):
            self.dialect = "postgres"
            self.path = ""
        else:
            raise ArchiveError(f"archive URL {redact(url)!r}: give sqlite:///path or postgresql://...")
        self._conn: Any = None

    @classmethod
    def open(cls, url: str) -> Database:
        db = cls(url)
        db.connection()
        return db

    # ------------------------------------------------------------------ connection

    def connection(self) -> Any:
        if self._conn is not None:
            return self._conn
        if self.dialect == "sqlite":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn: Any = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        else:
            try:
                import psycopg
            except ImportError:  # pragma: no cover - the extra is missing
                raise ArchiveError("a postgresql:// archive needs psycopg: pip install 'cronoq[postgres]'") from None
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        self._conn = conn
        return conn

    def close(self) -> None:
        """Drop the connection (the next call opens another): after an error, and at the end."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - it is going anyway
                pass

    def _sql(self, text: str) -> str:
        return text.replace("%s", "?") if self.dialect == "sqlite" else text

    def _value(self, column: str, value: Any) -> Any:
        if self.dialect == "sqlite" and column in _TIME_COLUMNS and isinstance(value, datetime):
            return sqlite_time(value)
        return value

    def _begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE" if self.dialect == "sqlite" else "BEGIN")

    def _transaction(self, body: Any) -> Any:
        conn = self.connection()
        self._begin(conn)
        try:
            result = body(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    # ------------------------------------------------------------------ schema

    def version(self) -> int:
        """The schema version the database has (0: none)."""
        conn = self.connection()
        if self.dialect == "sqlite":
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (SCHEMA,)).fetchone()
        else:
            found = conn.execute("SELECT to_regclass(%s)", (SCHEMA,)).fetchone()
            found = found if found and found[0] is not None else None
        if not found:
            return 0
        row = conn.execute(f"SELECT MAX(version) FROM {SCHEMA}").fetchone()
        return int(row[0] or 0)

    def migrate(self, now: datetime | None = None) -> list[int]:
        """Apply the migrations this database lacks, in order; the versions applied."""
        now = now or datetime.now(timezone.utc)
        steps = _migrations(self.dialect)

        def body(conn: Any) -> list[int]:
            if self.dialect == "postgres":
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_ID,))
            conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA} (version INTEGER PRIMARY KEY, "
                         f"applied_at {_TIME[self.dialect]} NOT NULL)")
            row = conn.execute(f"SELECT MAX(version) FROM {SCHEMA}").fetchone()
            have = int(row[0] or 0)
            if have > SCHEMA_VERSION:
                raise ArchiveError(f"the archive's schema is version {have}, newer than this cronoq knows "
                                   f"({SCHEMA_VERSION}): upgrade cronoq")
            applied = []
            for version in sorted(v for v in steps if v > have):
                for statement in steps[version]:
                    conn.execute(statement)
                conn.execute(self._sql(f"INSERT INTO {SCHEMA} (version, applied_at) VALUES (%s, %s)"),
                             (version, self._value("applied_at", now)))
                applied.append(version)
            return applied

        return list(self._transaction(body))

    def _require_schema(self) -> None:
        have = self.version()
        if have == 0:
            raise ArchiveError(f"no archive in {redact(self.url)}: an operator started with --archive creates it")
        if have > SCHEMA_VERSION:
            raise ArchiveError(f"the archive's schema is version {have}, newer than this cronoq knows ({SCHEMA_VERSION})")

    # ------------------------------------------------------------------ writes

    def write(self, batch: Sequence[Rows], now: datetime | None = None) -> tuple[int, int]:
        """Write every row of `batch` in one transaction, leaving rows already there as they are.
        Returns (attempt rows, task rows) newly written."""
        now = now or datetime.now(timezone.utc)
        attempts = {(r.task_uid, r.attempt): r for rows in batch for r in rows.attempts}
        tasks = {rows.task.task_uid: rows.task for rows in batch if rows.task is not None}
        if not attempts and not tasks:
            return 0, 0

        def insert(conn: Any, table: str, columns: list[str], conflict: str, items: Iterable[Any]) -> int:
            names = ", ".join([*columns, "archived_at"])
            marks = ", ".join(["%s"] * (len(columns) + 1))
            sql = self._sql(f"INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT ({conflict}) DO NOTHING")
            written = 0
            stamp = self._value("archived_at", now)
            for item in items:  # one by one: rowcount then says whether each row was new
                values = asdict(item)
                cursor = conn.execute(sql, [*(self._value(c, values[c]) for c in columns), stamp])
                written += max(cursor.rowcount, 0)
            return written

        def body(conn: Any) -> tuple[int, int]:
            a = insert(conn, ATTEMPTS, _ATTEMPT_COLUMNS, "task_uid, attempt", attempts.values())
            t = insert(conn, TASKS, _TASK_COLUMNS, "task_uid", tasks.values())
            return a, t

        written: tuple[int, int] = self._transaction(body)
        return written

    def archived(self, uids: Iterable[str]) -> set[str]:
        """Which of these tasks have their finished row (and so all the rows their status held)."""
        wanted = list(dict.fromkeys(uids))
        found: set[str] = set()
        conn = self.connection()
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            marks = ", ".join(["%s"] * len(chunk))
            cursor = conn.execute(self._sql(f"SELECT task_uid FROM {TASKS} WHERE task_uid IN ({marks})"), chunk)
            found.update(row[0] for row in cursor.fetchall())
        return found

    def prune(self, now: datetime, keep: Any, keep_success: Any = None) -> tuple[int, int]:
        """Delete rows that finished more than `keep` (a timedelta; None: forever) ago, and rows of
        successes (attempts that succeeded, tasks that did) more than `keep_success` ago when given.
        Returns (attempt rows, task rows) deleted."""
        def body(conn: Any) -> tuple[int, int]:
            a = t = 0
            for keep_for, attempt_only, task_only in ((keep, None, None), (keep_success, "Success", "Succeeded")):
                if keep_for is None:
                    continue
                cutoff = self._value("finished_at", now - keep_for)
                extra_a = " AND outcome = %s" if attempt_only else ""
                extra_t = " AND phase = %s" if task_only else ""
                a += max(conn.execute(self._sql(f"DELETE FROM {ATTEMPTS} WHERE finished_at < %s{extra_a}"),
                                      [cutoff, *([attempt_only] if attempt_only else [])]).rowcount, 0)
                t += max(conn.execute(self._sql(f"DELETE FROM {TASKS} WHERE finished_at < %s{extra_t}"),
                                      [cutoff, *([task_only] if task_only else [])]).rowcount, 0)
            return a, t

        pruned: tuple[int, int] = self._transaction(body)
        return pruned

    # ------------------------------------------------------------------ reads

    def query(self, where: Filter) -> list[dict[str, Any]]:
        """Executions matching `where`, newest first: each attempt's columns, with its task's final
        phase and message (None while the task's row is not archived: it has not finished)."""
        self._require_schema()
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("a.namespace", where.namespace), ("a.pool", where.pool), ("a.name", where.name),
                              ("a.key", where.key), ("a.outcome", where.outcome), ("t.phase", where.phase),
                              ("a.reason", where.reason), ("a.response_code", where.response_code)):
            if value is not None:
                clauses.append(f"{column} = %s")
                params.append(value)
        if where.since is not None:
            clauses.append("a.finished_at >= %s")
            params.append(self._value("finished_at", where.since))
        if where.until is not None:
            clauses.append("a.finished_at < %s")
            params.append(self._value("finished_at", where.until))
        # Keyset paging: the finishedAt bound alone is what an index serves; the rest breaks its ties.
        for cursor, cmp, cmp_eq in ((where.older_than, "<", "<="), (where.newer_than, ">", ">=")):
            if cursor is not None:
                at, uid, number = cursor
                clauses.append(f"a.finished_at {cmp_eq} %s AND (a.finished_at {cmp} %s OR (a.task_uid {cmp} %s "
                               f"OR (a.task_uid = %s AND a.attempt {cmp} %s)))")
                at_value = self._value("finished_at", at)
                params += [at_value, at_value, uid, uid, number]
        columns = ", ".join(f"a.{c}" for c in _ATTEMPT_COLUMNS)
        way = "ASC" if where.newer_than is not None else "DESC"  # the page before: the nearest rows first
        order = f" ORDER BY a.finished_at {way}, a.task_uid {way}, a.attempt {way}"
        filtered = " WHERE " + " AND ".join(clauses) if clauses else ""
        if where.phase is None:  # the page of attempts first, then their tasks: a deep page joins 50 rows, not all
            sql = (f"SELECT {columns}, t.phase, t.message FROM (SELECT * FROM {ATTEMPTS} a{filtered}{order} "
                   f"LIMIT %s OFFSET %s) a LEFT JOIN {TASKS} t ON t.task_uid = a.task_uid{order}")
        else:
            sql = (f"SELECT {columns}, t.phase, t.message FROM {ATTEMPTS} a LEFT JOIN {TASKS} t "
                   f"ON t.task_uid = a.task_uid{filtered}{order} LIMIT %s OFFSET %s")
        params += [where.limit, where.offset]
        out = []
        for row in self.connection().execute(self._sql(sql), params).fetchall():
            item = dict(zip([*_ATTEMPT_COLUMNS, "phase", "task_message"], row))
            for c in _TIME_COLUMNS & item.keys():
                item[c] = _parse_time(item[c])
            out.append(item)
        return out[::-1] if where.newer_than is not None else out

    def task(self, namespace: str, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The newest archived task of this name (a name may be taken again by a new task) and its
        attempt rows, oldest first; None when the archive holds none."""
        self._require_schema()
        conn = self.connection()
        columns = ["task_uid", *_TASK_COLUMNS[1:]]
        row = conn.execute(self._sql(f"SELECT {', '.join(columns)} FROM {TASKS} WHERE namespace = %s AND name = %s "
                                     "ORDER BY finished_at DESC LIMIT 1"), (namespace, name)).fetchone()
        if row is None:
            return None
        found = {c: _parse_time(v) if c in _TIME_COLUMNS else v for c, v in zip(columns, row)}
        cursor = conn.execute(self._sql(f"SELECT {', '.join(_ATTEMPT_COLUMNS)} FROM {ATTEMPTS} WHERE task_uid = %s "
                                        "ORDER BY attempt"), (found["task_uid"],))
        attempts = [{c: _parse_time(v) if c in _TIME_COLUMNS else v for c, v in zip(_ATTEMPT_COLUMNS, r)}
                    for r in cursor.fetchall()]
        return found, attempts

    def originals(self, keyed: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], dict[str, Any]]:
        """For each (namespace, pool, key): the newest finished task the archive holds of it that was
        not a duplicate itself (what a keyed task whose original was deleted ends as); keys the
        archive holds nothing of are left out. One call, one query on Postgres."""
        conn = self.connection()
        wanted = list(dict.fromkeys(keyed))
        if self.dialect == "postgres":  # one round trip for the batch
            columns = ", ".join(f"t.{c}" for c in _TASK_COLUMNS)
            rows = conn.execute(
                f"SELECT DISTINCT ON (t.namespace, t.pool, t.key) {columns} FROM {TASKS} t "
                "JOIN unnest(%s::text[], %s::text[], %s::text[]) AS w(namespace, pool, key) "
                "ON t.namespace = w.namespace AND t.pool = w.pool AND t.key = w.key WHERE t.duplicate_of IS NULL "
                "ORDER BY t.namespace, t.pool, t.key, t.finished_at DESC",
                ([w[0] for w in wanted], [w[1] for w in wanted], [w[2] for w in wanted])).fetchall()
        else:  # in the same process: a read per key costs no round trip
            sql = (f"SELECT {', '.join(_TASK_COLUMNS)} FROM {TASKS} WHERE namespace = ? AND pool = ? AND key = ? "
                   "AND duplicate_of IS NULL ORDER BY finished_at DESC LIMIT 1")
            rows = [row for w in wanted if (row := conn.execute(sql, w).fetchone()) is not None]
        found: dict[tuple[str, str, str], dict[str, Any]] = {}
        for row in rows:
            item: dict[str, Any] = {c: _parse_time(v) if c in _TIME_COLUMNS else v for c, v in zip(_TASK_COLUMNS, row)}
            found[(item["namespace"], item["pool"], item["key"])] = item
        return found

    def counts(self) -> tuple[int, int]:
        """(attempt rows, task rows) the archive holds."""
        conn = self.connection()
        a = conn.execute(f"SELECT COUNT(*) FROM {ATTEMPTS}").fetchone()[0]
        t = conn.execute(f"SELECT COUNT(*) FROM {TASKS}").fetchone()[0]
        return int(a), int(t)


def redact(url: str) -> str:
    """A URL as it may be logged: without a password (postgresql://user:secret@host → user:***@host)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    userinfo, at, host = rest.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}{':***' if ':' in userinfo else ''}@{host}"
