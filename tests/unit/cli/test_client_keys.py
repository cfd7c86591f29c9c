"""Who holds a key, as the client answers it before submitting: the same task the operator would
make a new task with that key follow (`engine.keys`), whatever mix of tasks holds it."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings, strategies as st

from cronoq.api import Task, TaskPool
from cronoq.client import Client
from cronoq.engine import keys
from tests.unit.builders import make_task

NOW = datetime.now(timezone.utc)
"""The time the client judges at (passed in: a suite can run for half an hour after this module is
imported, and a task that finished 59 minutes before NOW must still hold a key kept an hour)."""


def task(name: str, created_ago: float, phase: str | None = None, *, attempt: int = 0, finished_ago: float | None = None,
         duplicate_of: str | None = None, deleting: bool = False) -> Task:
    raw = make_task(name).spec(key="k").raw()
    raw["metadata"]["creationTimestamp"] = (NOW - timedelta(minutes=created_ago)).isoformat()
    if deleting:
        raw["metadata"]["deletionTimestamp"] = NOW.isoformat()
    status = {"phase": phase, "attempt": attempt, "duplicateOf": duplicate_of,
              "finishedAt": None if finished_ago is None else (NOW - timedelta(minutes=finished_ago)).isoformat()}
    raw["status"] = {k: v for k, v in status.items() if v is not None}
    return Task.model_validate(raw)


class Tasks(Client):
    """A client whose listing is `tasks` and whose pool keeps keys `retention` long."""

    def __init__(self, tasks: list[Task], retention: str = "1h") -> None:
        super().__init__("ns", api=object())  # type: ignore[arg-type]
        self.tasks, self.pools_read = tasks, 0
        self.retention = retention

    def list(self, *args, **kwargs) -> list[Task]:
        return sorted(self.tasks, key=lambda t: t.metadata.name)

    def _pool_or_none(self, name: str) -> TaskPool | None:
        self.pools_read += 1
        return TaskPool.model_validate({"metadata": {"name": name}, "spec": {"keyRetention": self.retention}})


def holder(tasks: list[Task], retention: str = "1h") -> str | None:
    found = Tasks(tasks, retention).holder_of("k", now=NOW)
    return found.metadata.name if found is not None else None


def test_the_key_is_free_without_tasks() -> None:
    assert holder([]) is None


def test_a_started_task_beats_an_older_one_that_has_not_started() -> None:
    assert holder([task("old", 10, "Queued"), task("runs", 5, "Running", attempt=1)]) == "runs"
    assert holder([task("old", 10, "Queued"), task("new", 5, "Queued")]) == "old"


def test_duplicates_and_tasks_being_deleted_hold_nothing() -> None:
    assert holder([task("dup", 10, "Blocked", duplicate_of="x"), task("gone", 9, "Running", attempt=1, deleting=True),
                   task("it", 5, "Queued")]) == "it"


def test_a_finished_task_holds_its_key_for_the_pools_retention() -> None:
    done = task("done", 90, "Succeeded", attempt=1, finished_ago=30)
    assert holder([done], retention="1h") == "done"
    assert holder([done], retention="10m") is None


def test_the_pool_is_read_only_when_a_finished_task_may_hold_the_key() -> None:
    client = Tasks([task("a", 10, "Running", attempt=1)])
    client.holder_of("k", now=NOW)
    assert client.pools_read == 0


def test_the_oldest_live_original_holds_it_as_the_operator_judges() -> None:
    """Where the client used to differ: an older original finished within keyRetention beats a
    newer one still running, and among finished ones the oldest holds it, not the last to finish."""
    assert holder([task("finished", 20, "Failed", attempt=3, finished_ago=5),
                   task("running", 10, "Running", attempt=1)]) == "finished"
    assert holder([task("first", 30, "Succeeded", attempt=1, finished_ago=1),
                   task("second", 20, "Succeeded", attempt=1, finished_ago=15)]) == "first"


PHASES = st.sampled_from([None, "Blocked", "Queued", "Running", "Retrying", "Succeeded", "Failed", "Cancelled"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 100), PHASES, st.integers(0, 2), st.integers(1, 120), st.booleans()),
                max_size=5))
def test_the_client_names_the_task_the_operator_makes_a_new_one_follow(specs) -> None:
    tasks = [task(f"t{i}", created, phase, attempt=attempt if phase not in (None, "Blocked", "Queued") else 0,
                  finished_ago=min(finished, created) if phase in ("Succeeded", "Failed", "Cancelled") else None,
                  duplicate_of="t0" if dup and i else None)
             for i, (created, phase, attempt, finished, dup) in enumerate(specs)]
    me = keys.Holder(name="new", created_at=NOW)
    gate = keys.gate(me, [keys.Holder.of(t, NOW) for t in tasks], timedelta(hours=1), NOW)
    assert holder(tasks) == gate.duplicate_of
