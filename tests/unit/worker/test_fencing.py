"""cronoq.fencing on SQLite (the standard library's): the two rules, the tokens each delivery
hands over, the refusals counted, and the transaction it never leaves. Postgres: the same rules
against a real server in tests/integration/test_fencing_postgres.py."""
from __future__ import annotations

import sqlite3
import threading

import pytest
from hypothesis import given, strategies as st
from prometheus_client import REGISTRY

from cronoq import fencing
from cronoq.fencing import Done, NotInTransaction, Token, Verdict
from cronoq.worker import Context

UID = "0b6f7a52-1d4e-4d7b-9c59-3c1c2f6e9a01"


def db(path: str = ":memory:") -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    fencing.create_tables(conn)
    conn.execute("CREATE TABLE balance (account TEXT PRIMARY KEY, amount INTEGER, attempt INTEGER)")
    conn.execute("CREATE TABLE charges (id INTEGER PRIMARY KEY, task TEXT, attempt INTEGER)")
    conn.commit()
    return conn


def ctx(attempt: int, uid: str = UID) -> Context:
    return Context(id=uid, name="t", namespace="ns", attempt=attempt, payload=None, lease_name="", lease_id="",
                   lease_ttl=0.0)


def stale() -> float:
    return REGISTRY.get_sample_value("cronoq_fencing_stale_writes_total") or 0.0


def duplicates() -> float:
    return REGISTRY.get_sample_value("cronoq_fencing_duplicates_total") or 0.0


def set_balance(conn: sqlite3.Connection, who, amount: int) -> Verdict:
    token = Token.of(who)
    with conn:
        return fencing.last_attempt_wins(conn, who, "balance", write=lambda: conn.execute(
            "INSERT INTO balance VALUES ('a', ?, ?) ON CONFLICT (account) DO UPDATE SET amount = excluded.amount, "
            "attempt = excluded.attempt", (amount, token.attempt)).rowcount)


# ------------------------------------------------------------------------------ the tokens

def test_the_token_of_each_delivery():
    assert Token.of(ctx(3)) == Token(UID, 3)  # Job mode and pull workers: the handler's ctx
    assert Token.of({"idempotency-key": UID, "X-CRONOQ-ATTEMPT": " 2 "}) == Token(UID, 2)  # push: any case
    assert Token.from_environ({"CRONOQ_TASK_ID": UID, "CRONOQ_ATTEMPT": "4"}) == Token(UID, 4)
    assert Token.of(Token(UID, 1)) == Token(UID, 1)


def test_the_token_of_this_process_environment(monkeypatch):
    monkeypatch.setenv("CRONOQ_TASK_ID", UID)
    monkeypatch.setenv("CRONOQ_ATTEMPT", "5")
    assert Token.of(None) == Token(UID, 5)


@pytest.mark.parametrize("headers", [{}, {"Idempotency-Key": UID}, {"Idempotency-Key": UID, "X-Cronoq-Attempt": "0"},
                                     {"Idempotency-Key": "", "X-Cronoq-Attempt": "1"},
                                     {"Idempotency-Key": UID, "X-Cronoq-Attempt": "two"}])
def test_a_request_without_a_whole_token_is_refused(headers):
    with pytest.raises(ValueError):
        Token.from_headers(headers)


def test_anything_else_is_no_token():
    with pytest.raises(TypeError):
        Token.of(42)


# ---------------------------------------------------------------------- last attempt wins

def test_a_later_attempt_overwrites_and_an_older_one_is_refused_and_counted():
    conn = db()
    before = stale()
    assert set_balance(conn, ctx(1), 10)
    assert set_balance(conn, ctx(2), 20)
    late = set_balance(conn, ctx(1), 11)  # attempt 1 cut off, writing after attempt 2 did
    assert not late and late.stale and (late.attempt, late.newest, late.value) == (1, 2, None)
    assert conn.execute("SELECT amount, attempt FROM balance").fetchone() == (20, 2)
    assert stale() == before + 1
    again = set_balance(conn, ctx(2), 21)  # the same attempt may write again
    assert again and again.value == 1
    assert conn.execute("SELECT amount FROM balance").fetchone() == (21,)


def test_names_and_tasks_are_fenced_apart():
    conn = db()
    with conn:
        assert fencing.last_attempt_wins(conn, ctx(3), "a")
        assert fencing.last_attempt_wins(conn, ctx(1), "b")  # another row of the same task
        assert fencing.last_attempt_wins(conn, ctx(1, "other"), "a")  # another task


def test_a_refused_write_leaves_the_transaction_usable_and_a_rollback_undoes_an_accepted_fence():
    conn = db()
    assert set_balance(conn, ctx(2), 20)
    try:
        with conn:
            assert fencing.last_attempt_wins(conn, ctx(3), "balance")
            raise RuntimeError("the effect failed")
    except RuntimeError:
        pass
    assert set_balance(conn, ctx(2), 22)  # attempt 3's fence went with its transaction
    assert conn.execute("SELECT amount FROM balance").fetchone() == (22,)


@given(st.lists(st.integers(1, 6), min_size=1, max_size=30))
def test_whatever_order_the_writes_come_in_the_row_holds_the_newest_attempt_seen(attempts):
    conn = db()
    newest = 0
    for n in attempts:
        verdict = set_balance(conn, ctx(n), n * 10)
        assert verdict.accepted == (n >= newest)
        newest = max(newest, n)
        assert verdict.newest == newest
    assert conn.execute("SELECT amount, attempt FROM balance").fetchone() == (newest * 10, newest)


# ------------------------------------------------------------------------------- once at all

def charge(conn: sqlite3.Connection, who, key: str | None = None) -> Done:
    token = Token.of(who)
    with conn:
        return fencing.once(conn, who, key, effect=lambda: {"charge": conn.execute(
            "INSERT INTO charges (task, attempt) VALUES (?, ?)", (token.task, token.attempt)).lastrowid})


def test_the_first_attempt_does_it_and_every_later_one_gets_its_result():
    conn = db()
    before = duplicates()
    first = charge(conn, ctx(1))
    assert first.first and first.result == {"charge": 1} and first.attempt == 1
    for n in (2, 1, 3):
        again = charge(conn, ctx(n))
        assert again.duplicate and (again.task, again.attempt, again.result) == (UID, 1, {"charge": 1})
    assert conn.execute("SELECT count(*) FROM charges").fetchone() == (1,)
    assert duplicates() == before + 3


def test_a_key_makes_other_tasks_duplicates_too():
    conn = db()
    assert charge(conn, ctx(1, "task-a"), key="order-17").first
    other = charge(conn, ctx(1, "task-b"), key="order-17")  # resubmitted after the key's retention
    assert other.duplicate and other.task == "task-a"
    assert charge(conn, ctx(1, "task-b"), key="order-18").first
    assert conn.execute("SELECT count(*) FROM charges").fetchone() == (2,)


def test_an_effect_that_fails_leaves_it_undone_for_the_retry():
    conn = db()

    def broken():
        raise RuntimeError("card declined")

    with pytest.raises(RuntimeError):
        with conn:
            fencing.once(conn, ctx(1), effect=broken)
    assert charge(conn, ctx(2)).first


def test_once_without_an_effect_only_claims():
    conn = db()
    with conn:
        assert fencing.once(conn, ctx(1)).first
    with conn:
        done = fencing.once(conn, ctx(2))
    assert done.duplicate and done.result is None and done.attempt == 1


def test_once_and_last_attempt_wins_keep_their_own_rows():
    conn = db()
    with conn:
        assert fencing.once(conn, ctx(1), key=f"{UID}/x").first
        assert fencing.last_attempt_wins(conn, ctx(1), "x")


def test_two_connections_racing_do_it_once(tmp_path):
    path = str(tmp_path / "sink.db")
    db(path).close()
    results: list[Done] = []
    barrier = threading.Barrier(4)

    def attempt(n: int) -> None:
        conn = sqlite3.connect(path, timeout=30)
        barrier.wait()
        results.append(charge(conn, ctx(n)))
        conn.close()

    threads = [threading.Thread(target=attempt, args=(n,)) for n in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(done.first for done in results) == 1
    assert len({(done.attempt, str(done.result)) for done in results}) == 1
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM charges").fetchone() == (1,)


# ---------------------------------------------------------------- the caller's transaction

def test_a_connection_in_autocommit_is_refused_unless_a_transaction_is_open():
    conn = db()
    conn.isolation_level = None
    with pytest.raises(NotInTransaction):
        fencing.last_attempt_wins(conn, ctx(1))
    with pytest.raises(NotInTransaction):
        fencing.once(conn, ctx(1))
    conn.execute("BEGIN")
    assert fencing.last_attempt_wins(conn, ctx(1))
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM cronoq_fences").fetchone() == (0,)


def test_nothing_is_committed_by_the_helpers():
    conn = db()
    fencing.last_attempt_wins(conn, ctx(1))
    fencing.once(conn, ctx(1), effect=lambda: 1)
    assert conn.in_transaction
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM cronoq_fences").fetchone() == (0,)


def test_a_cursor_works_as_a_connection_does():
    conn = db()
    cur = conn.cursor()
    assert fencing.last_attempt_wins(cur, ctx(2))
    assert not fencing.last_attempt_wins(cur, ctx(1))


def test_no_table_is_made_unless_asked():
    conn = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        fencing.last_attempt_wins(conn, ctx(1))
    fencing.create_tables(conn, table="my_fences")
    assert fencing.last_attempt_wins(conn, ctx(1), table="my_fences")


@pytest.mark.parametrize("table", ["fences; DROP TABLE x", "1abc", "a.b.c", ""])
def test_a_table_name_is_a_plain_identifier(table):
    with pytest.raises(ValueError):
        fencing.schema("sqlite", table)


def test_the_migration_is_printed(capsys):
    assert fencing.main(["postgres"]) == 0
    assert "CREATE TABLE IF NOT EXISTS cronoq_fences" in capsys.readouterr().out
    assert fencing.main(["mysql"]) == 2


def test_an_unknown_connection_is_refused():
    with pytest.raises(TypeError):
        fencing.once(object(), ctx(1))
