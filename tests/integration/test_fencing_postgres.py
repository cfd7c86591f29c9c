"""cronoq.fencing against a real Postgres (tests/support/postgres.py: Debian's server, started in a
temporary directory): the two rules, and what only a server with concurrent transactions shows —
a stale attempt that waits on a newer one's fence is refused once it commits, a duplicate waits
for the first and gets its result, a first that rolls back leaves the effect to the next."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest
from prometheus_client import REGISTRY

from cronoq import fencing
from cronoq.fencing import NotInTransaction, Token

UID = "6a4c1f0e-2b7d-4c1a-8e3f-5d9b0a7c6e21"


@pytest.fixture
def dsn(postgres) -> str:
    dsn = postgres.database("fencing")
    with psycopg.connect(dsn) as conn:
        fencing.create_tables(conn)
        conn.execute("CREATE TABLE balance (account text PRIMARY KEY, amount int, attempt int)")
        conn.execute("CREATE TABLE charges (id serial PRIMARY KEY, task text, attempt int)")
    return dsn


def stale() -> float:
    return REGISTRY.get_sample_value("cronoq_fencing_stale_writes_total") or 0.0


def set_balance(conn: psycopg.Connection, token: Token, amount: int) -> fencing.Verdict:
    with conn.transaction():
        return fencing.last_attempt_wins(conn, token, "balance", write=lambda: conn.execute(
            "INSERT INTO balance VALUES ('a', %s, %s) ON CONFLICT (account) DO UPDATE SET amount = excluded.amount, "
            "attempt = excluded.attempt", (amount, token.attempt)))


def balance(dsn: str) -> tuple:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT amount, attempt FROM balance").fetchone()


def test_last_attempt_wins_on_postgres(dsn):
    before = stale()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert set_balance(conn, Token(UID, 1), 10)
        assert set_balance(conn, Token(UID, 3), 30)
        late = set_balance(conn, Token(UID, 2), 20)
        assert late.stale and late.newest == 3
    assert balance(dsn) == (30, 3)
    assert stale() == before + 1


def test_an_older_attempt_waiting_on_a_newer_ones_fence_is_refused_when_it_commits(dsn):
    newer, older = psycopg.connect(dsn), psycopg.connect(dsn)
    try:
        assert fencing.last_attempt_wins(newer, Token(UID, 2), "balance")  # holds the fence's row
        newer.execute("INSERT INTO balance VALUES ('a', 20, 2)")
        verdicts = []
        waiting = threading.Thread(target=lambda: verdicts.append(fencing.last_attempt_wins(older, Token(UID, 1),
                                                                                             "balance")))
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive(), "attempt 1 should wait for attempt 2's transaction"
        newer.commit()
        waiting.join(10)
        assert verdicts and verdicts[0].stale and verdicts[0].newest == 2
        older.rollback()
    finally:
        newer.close()
        older.close()
    assert balance(dsn) == (20, 2)


def test_a_newer_attempt_waiting_on_an_older_ones_fence_overwrites_it(dsn):
    older, newer = psycopg.connect(dsn), psycopg.connect(dsn)
    try:
        assert fencing.last_attempt_wins(older, Token(UID, 1), "balance")
        older.execute("INSERT INTO balance VALUES ('a', 10, 1)")
        verdicts = []

        def write() -> None:
            verdict = fencing.last_attempt_wins(newer, Token(UID, 2), "balance")
            if verdict:
                newer.execute("INSERT INTO balance VALUES ('a', 20, 2) ON CONFLICT (account) DO UPDATE SET "
                              "amount = 20, attempt = 2")
            newer.commit()
            verdicts.append(verdict)

        waiting = threading.Thread(target=write)
        waiting.start()
        time.sleep(0.3)
        older.commit()
        waiting.join(10)
        assert verdicts and verdicts[0].accepted
    finally:
        older.close()
        newer.close()
    assert balance(dsn) == (20, 2)


def charge(conn: psycopg.Connection, token: Token, key: str | None = None) -> fencing.Done:
    return fencing.once(conn, token, key, effect=lambda: {"charge": conn.execute(
        "INSERT INTO charges (task, attempt) VALUES (%s, %s) RETURNING id", (token.task, token.attempt)).fetchone()[0]})


def test_once_on_postgres_waits_for_the_first_and_returns_its_result(dsn):
    first, second = psycopg.connect(dsn), psycopg.connect(dsn)
    try:
        done = charge(first, Token(UID, 1))
        assert done.first
        results = []
        waiting = threading.Thread(target=lambda: results.append(charge(second, Token(UID, 2))))
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive(), "the duplicate should wait for the first's transaction"
        first.commit()
        waiting.join(10)
        second.commit()
        assert results[0].duplicate and (results[0].attempt, results[0].result) == (1, done.result)
    finally:
        first.close()
        second.close()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM charges").fetchone() == (1,)


def test_a_first_that_rolls_back_leaves_the_effect_to_the_one_waiting(dsn):
    first, second = psycopg.connect(dsn), psycopg.connect(dsn)
    try:
        assert charge(first, Token(UID, 1)).first
        results = []
        waiting = threading.Thread(target=lambda: results.append(charge(second, Token(UID, 2))))
        waiting.start()
        time.sleep(0.3)
        first.rollback()
        waiting.join(10)
        second.commit()
        assert results[0].first and results[0].attempt == 2
    finally:
        first.close()
        second.close()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT task, attempt FROM charges").fetchall() == [(UID, 2)]


def test_autocommit_is_refused_outside_a_transaction_block_and_a_cursor_works(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(NotInTransaction):
            fencing.last_attempt_wins(conn, Token(UID, 1))
        with pytest.raises(NotInTransaction):
            fencing.once(conn.cursor(), Token(UID, 1))
        with conn.transaction(), conn.cursor() as cur:
            assert fencing.once(cur, Token(UID, 1), key="order-1").first
        with conn.transaction():
            assert fencing.once(conn, Token("another task", 1), key="order-1").duplicate


def test_a_schema_qualified_table(dsn):
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE SCHEMA billing")
        fencing.create_tables(conn, table="billing.fences")
        assert fencing.last_attempt_wins(conn, Token(UID, 2), table="billing.fences")
        assert not fencing.last_attempt_wins(conn, Token(UID, 1), table="billing.fences")
        assert fencing.once(conn, Token(UID, 1), table="billing.fences").first
