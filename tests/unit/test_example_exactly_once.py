"""examples/exactly-once/charge.py, on SQLite: its tables made when asked, and an order charged once
by the first attempt, the retry getting the stored receipt (the fault run shows it on Postgres)."""
from __future__ import annotations

import importlib.util
import sqlite3

from cronoq.worker import Context
from tests.support.cluster import REPO


def test_the_example_charges_an_order_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PAYMENTS_DSN", raising=False)
    spec = importlib.util.spec_from_file_location("charge_example", REPO / "examples/exactly-once/charge.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.create_tables()

    def ctx(task: str, attempt: int) -> Context:
        return Context(id=task, name="charge-o-1", namespace="default", attempt=attempt,
                       payload={"order": "o-1", "cents": 1999}, lease_name="", lease_id="", lease_ttl=0.0)

    first = example.charge(ctx("uid-1", 1))
    assert example.charge(ctx("uid-1", 2)) == first == {"order": "o-1", "charge": 1}
    assert example.charge(ctx("uid-2", 1)) == first  # the same order under another task: the key is the order
    with sqlite3.connect(tmp_path / "payments.db") as db:
        assert db.execute("SELECT order_id, task, attempt FROM charges").fetchall() == [("o-1", "uid-1", 1)]
