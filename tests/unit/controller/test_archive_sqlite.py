"""The archive's database on SQLite (cronoq/archive.py; tests/integration/test_history.py runs
the same against a real Postgres): migrations once each, rows written once whatever happens to
the writes, the filters of `cronoq history`, and the retention of archived rows."""
from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import timedelta

import pytest

from cronoq.archive import SCHEMA_VERSION, ArchiveError, Database, Filter, redact
from cronoq.engine.history import AttemptRow, Rows, TaskRow

from tests.unit.builders import T0, at


def attempt(uid: str, number: int, outcome: str = "Retryable", *, finished: float = 0.0, **more: object) -> AttemptRow:
    row = AttemptRow(task_uid=uid, attempt=number, namespace="ns", name=f"task-{uid}", pool="p", key=None,
                     delivery="Job", trigger="First" if number == 1 else "Retry", outcome=outcome, reason="Error",
                     exit_code=1, response_code=None, message="boom", dispatched_at=at(finished - 2),
                     started_at=at(finished - 1), finished_at=at(finished), duration_ms=1000, job=f"j-{number}",
                     worker=None)
    return replace(row, **more)  # type: ignore[arg-type]


def task(uid: str, phase: str = "Failed", *, finished: float = 0.0, attempts: int = 1) -> TaskRow:
    return TaskRow(task_uid=uid, namespace="ns", name=f"task-{uid}", pool="p", key=None, phase=phase,
                   attempts=attempts, reason="AttemptsExhausted", message="done", output=None, output_available=False,
                   duplicate_of=None, created_at=at(finished - 10), submitted_at=at(finished - 9), finished_at=at(finished))


@pytest.fixture
def db(tmp_path):
    database = Database.open(f"sqlite:///{tmp_path}/archive.db")
    database.migrate(T0)
    yield database
    database.close()


def test_migrations_run_once_and_are_recorded(tmp_path) -> None:
    db = Database.open(f"sqlite:///{tmp_path}/a/b/archive.db")  # its directory made too
    assert db.version() == 0
    assert db.migrate(T0) == list(range(1, SCHEMA_VERSION + 1))
    assert db.migrate(T0) == [] and db.version() == SCHEMA_VERSION
    db.close()
    again = Database.open(f"sqlite:///{tmp_path}/a/b/archive.db")
    assert again.migrate(T0) == [] and again.version() == SCHEMA_VERSION


def test_a_newer_schema_is_refused_not_downgraded(tmp_path) -> None:
    db = Database.open(f"sqlite:///{tmp_path}/archive.db")
    db.migrate(T0)
    db.connection().execute("INSERT INTO cronoq_archive_schema VALUES (?, ?)", (SCHEMA_VERSION + 1, "x"))
    with pytest.raises(ArchiveError, match="newer than this cronoq knows"):
        db.migrate(T0)
    with pytest.raises(ArchiveError, match="newer"):
        db.query(Filter())


def test_reading_an_archive_without_a_schema_says_so(tmp_path) -> None:
    with pytest.raises(ArchiveError, match="no archive in"):
        Database.open(f"sqlite:///{tmp_path}/empty.db").query(Filter())


def test_urls_are_checked_and_passwords_never_shown() -> None:
    with pytest.raises(ArchiveError, match="sqlite:///path or postgresql"):
        Database("mysql://db/x")
    with pytest.raises(ArchiveError, match="sqlite:///path"):
        Database("sqlite://relative.db")
    assert redact("postgresql://cronoq:s3cret@db:5432/cronoq") == "postgresql://cronoq:***@db:5432/cronoq"
    assert redact("postgresql://db/cronoq") == "postgresql://db/cronoq"


def test_rows_are_written_once_however_often_they_come(db) -> None:
    first = Rows((attempt("u1", 1), attempt("u1", 2)), None)
    assert db.write([first], at(5)) == (2, 0)
    # The retry of a failed batch, a new leader catching up, the deletion gate: the same rows again,
    # with the finished task's row this time, and the same row twice in one batch.
    finished = Rows((attempt("u1", 1), attempt("u1", 2), attempt("u1", 3, "Success")), task("u1", "Succeeded"))
    assert db.write([finished, finished], at(6)) == (1, 1)
    assert db.write([finished], at(7)) == (0, 0)
    assert db.counts() == (3, 1)
    assert db.archived(["u1", "u2"]) == {"u1"}
    rows = db.query(Filter())
    assert [(r["attempt"], r["phase"]) for r in rows] == [(3, "Succeeded"), (2, "Succeeded"), (1, "Succeeded")]


def test_a_failed_batch_writes_none_of_its_rows(db) -> None:
    good = Rows((attempt("u1", 1),), None)
    bad = Rows((replace(attempt("u2", 1), outcome=None),), None)  # type: ignore[arg-type]  # NOT NULL refuses it
    with pytest.raises(sqlite3.IntegrityError):
        db.write([good, bad], at(1))
    assert db.counts() == (0, 0), "one transaction: all or nothing"
    assert db.write([good], at(2)) == (1, 0)


def test_history_filters_and_order(db) -> None:
    db.write([Rows((attempt("a", 1, finished=10), attempt("a", 2, "Success", finished=20)), task("a", "Succeeded", finished=20)),
              Rows((attempt("b", 1, "Permanent", finished=15, reason="OOMKilled", pool="q", key="k"),), task("b", finished=15)),
              Rows((attempt("c", 1, finished=30, namespace="other", delivery="Push", response_code=503),), None)], at(40))

    def found(**where: object) -> list[tuple[str, int]]:
        return [(r["task_uid"], r["attempt"]) for r in db.query(Filter(**where))]  # type: ignore[arg-type]

    assert found() == [("c", 1), ("a", 2), ("b", 1), ("a", 1)], "newest first"
    assert found(limit=2) == [("c", 1), ("a", 2)]
    assert found(namespace="ns") == [("a", 2), ("b", 1), ("a", 1)]
    assert found(pool="q") == found(key="k") == found(reason="OOMKilled") == [("b", 1)]
    assert found(outcome="Retryable") == [("c", 1), ("a", 1)]
    assert found(phase="Succeeded") == [("a", 2), ("a", 1)]
    assert found(phase="Failed") == [("b", 1)]
    assert found(response_code=503) == [("c", 1)]
    assert found(since=at(15), until=at(30)) == [("a", 2), ("b", 1)]
    assert found(name="task-a") == [("a", 2), ("a", 1)]
    row = db.query(Filter(name="task-b"))[0]
    assert row["finished_at"] == at(15) and row["started_at"] == at(14) and row["task_message"] == "done"


def test_pages_by_place_walk_every_row_once_both_ways(db) -> None:
    """Keyset paging (the dashboard's): from a row's place to the next page and back, ties in
    finishedAt broken by uid and attempt, each row on one page."""
    db.write([Rows(tuple(attempt(f"u{i}", n, finished=float(i // 3)) for n in (1, 2)), None) for i in range(9)], at(40))
    every = [(r["task_uid"], r["attempt"]) for r in db.query(Filter(limit=100))]
    assert len(every) == 18 and every[:3] == [("u8", 2), ("u8", 1), ("u7", 2)]

    def place(row: dict) -> tuple:
        return row["finished_at"], row["task_uid"], row["attempt"]
    pages, page = [], db.query(Filter(limit=4))
    while page:
        pages.append(page)
        page = db.query(Filter(limit=4, older_than=place(page[-1])))
    assert [(r["task_uid"], r["attempt"]) for p in pages for r in p] == every
    back = db.query(Filter(limit=4, newer_than=place(pages[2][0])))
    assert back == pages[1], "the page before, in the listing's order"
    assert db.query(Filter(limit=4, namespace="ns", outcome="Retryable", older_than=place(pages[0][-1]))) == pages[1]


def test_a_keys_original_is_its_newest_finished_task_that_was_no_duplicate(db) -> None:
    keyed = [replace(task(uid, "Succeeded", finished=f), key="k") for uid, f in (("old", 1), ("new", 5))]
    dup = replace(task("dup", "Succeeded", finished=9), key="k", duplicate_of="task-new")
    other = replace(task("o", finished=3), key="k", pool="q")
    db.write([Rows((), t) for t in (*keyed, dup, other)], at(10))
    found = db.originals([("ns", "p", "k"), ("ns", "q", "k"), ("ns", "p", "none"), ("ns", "p", "k")])
    assert {k: v["task_uid"] for k, v in found.items()} == {("ns", "p", "k"): "new", ("ns", "q", "k"): "o"}
    assert found[("ns", "p", "k")]["finished_at"] == at(5)


def test_retention_deletes_old_rows_and_successes_sooner(db) -> None:
    old, recent = -40 * 86400, -86400
    db.write([Rows((attempt("a", 1, finished=old),), task("a", finished=old)),
              Rows((attempt("b", 1, "Success", finished=recent),), task("b", "Succeeded", finished=recent)),
              Rows((attempt("c", 1, finished=recent),), task("c", finished=recent))], T0)
    assert db.prune(T0, timedelta(days=30)) == (1, 1)
    assert db.archived(["a", "b", "c"]) == {"b", "c"}
    assert db.prune(T0, timedelta(days=30), timedelta(hours=12)) == (1, 1)
    assert db.archived(["b", "c"]) == {"c"} and db.counts() == (1, 1)
    assert db.prune(T0, None, None) == (0, 0), "kept forever"
