"""What `cronoq describe` and `cronoq pool` say of a pool's rate limit: the countdown to the next
start is computed from the due time the status holds (written once), never written itself."""
from __future__ import annotations

from datetime import timedelta

from cronoq.api import Task, TaskPool
from cronoq.cli.pools import rate_limit
from cronoq.cli.tasks import rate_limited

from tests.unit.builders import T0


def _pool(**spec: object) -> TaskPool:
    return TaskPool.model_validate({"metadata": {"name": "p"}, "spec": spec})


def _task(reason: str, next_start_at: str | None) -> Task:
    status = {"phase": "Queued", "conditions": [{"type": "Running", "status": "False", "reason": reason,
                                                 "lastTransitionTime": "2026-12-03T12:00:00Z"}]}
    if next_start_at:
        status["nextStartAt"] = next_start_at
    return Task.model_validate({"metadata": {"name": "a"}, "spec": {"pool": "p", "image": "x"}, "status": status})


def test_describe_counts_down_to_the_next_start_from_the_due_time_written_once() -> None:
    pool = _pool(rateLimit={"startsPerSecond": 2, "burst": 1})
    waiting = _task("RateLimited", "2026-12-03T12:00:01Z")
    assert rate_limited(waiting, pool, T0 + timedelta(seconds=0.6)) == (
        "rate-limited: next start in 0.4 s (pool p starts at most 2 attempts/s, burst 1)")
    # Past the written due time the pool kept starting one every 0.5 s: the next is at 12:00:02.5.
    assert rate_limited(waiting, pool, T0 + timedelta(seconds=2.1)).startswith("rate-limited: next start in 0.4 s")


def test_describe_says_nothing_of_a_limit_the_task_does_not_wait_for() -> None:
    pool = _pool(rateLimit={"startsPerSecond": 2})
    assert rate_limited(_task("WaitingForSlot", None), pool, T0) is None
    assert rate_limited(_task("RateLimited", "2026-12-03T12:00:01Z"), _pool(), T0) is None, "limit removed since"


def test_pool_listings_show_the_limit() -> None:
    assert rate_limit(_pool(rateLimit={"startsPerSecond": 0.5, "burst": 3})) == "0.5/s, burst 3"
    assert rate_limit(_pool()) is None
