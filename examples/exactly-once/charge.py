"""Exactly-once effects from a pull worker (docs/how-to/exactly-once.md): each task charges an
order once, however many attempts it takes and whichever worker runs them, because the charge and
the fence commit in one Postgres (or SQLite) transaction.

Against the demo cluster (`make demo`) and a local Postgres:

    pip install 'cronoq[postgres]'
    export KUBECONFIG=$PWD/.cluster/kubeconfig CRONOQ_NAMESPACE=default
    export PAYMENTS_DSN='host=127.0.0.1 dbname=payments'        # or unset: SQLite, ./payments.db
    python examples/exactly-once/charge.py --create-tables      # once: the tables (your migration)
    python examples/exactly-once/charge.py                      # the worker; apply the page's manifests

    payload: {"order": "o-1042", "cents": 1999}   ->   output: {"charge": 1, "order": "o-1042"}

A retried attempt (this worker killed mid-charge, its lease expired while it still ran) finds the
charge committed and returns the stored receipt; `cronoq_fencing_duplicates_total` counts those.
"""
import os
import sqlite3
import sys

import cronoq.worker
from cronoq import fencing

DSN = os.environ.get("PAYMENTS_DSN", "")


def connect():
    if DSN:
        import psycopg

        return psycopg.connect(DSN)
    return sqlite3.connect("payments.db", timeout=30)


def create_tables() -> None:
    with connect() as db:  # commits on success, for sqlite3 and psycopg alike
        fencing.create_tables(db)
        serial = "bigserial" if DSN else "INTEGER"
        db.execute(f"CREATE TABLE IF NOT EXISTS charges (id {serial} PRIMARY KEY, order_id TEXT NOT NULL, "
                   "cents INTEGER NOT NULL, task TEXT NOT NULL, attempt INTEGER NOT NULL)")


def charge(ctx: cronoq.worker.Context) -> dict:
    order, cents = ctx.payload["order"], int(ctx.payload["cents"])
    mark = "%s" if DSN else "?"
    db = connect()
    try:
        with db:  # one transaction: the fence and the charge commit together, or neither does
            done = fencing.once(db, ctx, key=f"charge:{order}", effect=lambda: {"order": order, "charge": db.execute(
                f"INSERT INTO charges (order_id, cents, task, attempt) VALUES ({mark}, {mark}, {mark}, {mark}) "
                "RETURNING id", (order, cents, ctx.id, ctx.attempt)).fetchone()[0]})
    finally:
        db.close()
    print(f"attempt {ctx.attempt} of {ctx.name}: {'charged' if done.first else 'already charged by attempt %d' % done.attempt}"
          f" {done.result}", flush=True)
    return done.result


if __name__ == "__main__":
    if sys.argv[1:] == ["--create-tables"]:
        create_tables()
        raise SystemExit(0)
    raise SystemExit(cronoq.worker.serve(os.environ.get("POOL", "payments"), charge,
                                         concurrency=int(os.environ.get("CONCURRENCY", "4"))))
