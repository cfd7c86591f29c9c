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


def test_a_workers_pool_without_the_lease_guard_is_not_ready_and_says_how_to_fix_it() -> None:
    """Issue 37: fail closed, where the user sees it; a change of trust alone is written too."""
    from cronoq.engine import reasons
    from cronoq.engine.pools import WorkerTrust, pool_status

    unguarded = pool_status(pool(), {TaskPhase.QUEUED: 2}, 0, 2, T0, WorkerTrust.UNGUARDED)
    (ready,) = unguarded.conditions
    assert (ready.status, ready.reason) == ("False", reasons.LEASE_GUARD_MISSING)
    assert "lease guard" in ready.message and "--trust-worker-leases" in ready.message
    guarded = pool_status(pool(unguarded.to_dict()), {TaskPhase.QUEUED: 2}, 0, 2, at(5), WorkerTrust.GUARDED)
    assert guarded is not None, "the same counts, but the guard came: say so"
    assert (guarded.conditions[0].status, guarded.conditions[0].reason) == ("True", reasons.ADMITTING)
    trusted = pool_status(pool(), {}, 0, 0, T0, WorkerTrust.TRUSTED)
    assert "trusted without the lease guard" in trusted.conditions[0].message
