"""A pool's status from the store's counts (engine/pools.py)."""
from __future__ import annotations

from cronoq.api import TaskPhase, TaskPool

from tests.unit.builders import T0, at


def pool(status: dict | None = None) -> TaskPool:
    return TaskPool.model_validate({"metadata": {"name": "p", "namespace": "ns", "generation": 2},
                                    "spec": {"concurrency": 3}, "status": status})


def test_counts_by_phase_in_the_status_fields_and_a_ready_condition() -> None:
    from cronoq.engine.pools import pool_status

    new = pool_status(pool(), {TaskPhase.DEAD_LETTERED: 2, TaskPhase.RUNNING: 1, TaskPhase.QUEUED: 0}, 1, 4, T0)
    assert (new.counts.dead_lettered, new.counts.running, new.counts.queued) == (2, 1, 0)
    assert (new.running, new.queued, new.observed_generation) == (1, 4, 2)
    (ready,) = new.conditions
    assert ready.type == "Ready" and ready.message == "1 running of 3; 4 waiting"


def test_nothing_to_write_when_nothing_changed() -> None:
    from cronoq.engine.pools import pool_status

    first = pool_status(pool(), {TaskPhase.SUCCEEDED: 5}, 0, 0, T0)
    again = pool(first.to_dict())
    assert pool_status(again, {TaskPhase.SUCCEEDED: 5}, 0, 0, at(10)) is None
    assert pool_status(again, {TaskPhase.SUCCEEDED: 6}, 0, 0, at(10)) is not None


def test_a_paused_pool_admits_nothing_and_keeps_its_concurrency() -> None:
    from cronoq.engine.admission import capacity
    from cronoq.engine.pools import pool_status

    paused = TaskPool.model_validate({"metadata": {"name": "p", "namespace": "ns", "generation": 3},
                                      "spec": {"concurrency": 3, "paused": True}})
    assert capacity(paused.spec) == 0 and paused.spec.concurrency == 3
    assert capacity(pool().spec) == 3
    (ready,) = pool_status(paused, {TaskPhase.RUNNING: 1}, 1, 4, T0).conditions
    assert (ready.status, ready.reason) == ("False", "Paused")
    assert ready.message == "paused: 1 running (concurrency 3 kept); 4 waiting"
