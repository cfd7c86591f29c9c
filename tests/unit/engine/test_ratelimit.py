"""The token bucket of a pool's rate limit (engine/ratelimit.py), on times the tests give: a burst,
then the rate; never more than burst + rate × t starts in t seconds; a change applies at once."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronoq.api import RateLimit, TaskPool
from cronoq.engine.ratelimit import TokenBucket, next_start


def limit(rate: float, burst: int = 1) -> RateLimit:
    return RateLimit(starts_per_second=rate, burst=burst)


def test_a_new_bucket_is_empty_and_fills_at_the_rate_up_to_the_burst() -> None:
    bucket = TokenBucket.empty(limit(2, burst=3), now=100.0)
    assert bucket.available(100.0) == 0 and bucket.wait(100.0) == pytest.approx(0.5)
    assert bucket.available(100.49) == 0 and bucket.available(100.5) == 1
    assert bucket.available(101.0) == 2 and bucket.available(101.5) == 3
    assert bucket.available(1000.0) == 3, "never more than the burst"


def test_a_burst_then_the_rate() -> None:
    bucket = TokenBucket.empty(limit(5, burst=4), now=0.0)
    starts: list[float] = []
    t = 10.0  # idle for 10 s: the bucket is full
    while len(starts) < 14:
        n = bucket.available(t)
        starts += [t] * n
        bucket = bucket.take(n, t)
        t = t + bucket.wait(t) if bucket.wait(t) else t + 0.001
    assert starts[:4] == [10.0] * 4, "the burst at once"
    gaps = [b - a for a, b in zip(starts[4:], starts[5:])]
    assert gaps == pytest.approx([0.2] * 9), "then one every 1/rate"


def test_a_token_due_at_a_fractional_instant_is_found_at_that_instant() -> None:
    bucket = TokenBucket.empty(limit(3), now=0.1)
    at = 0.1 + bucket.wait(0.1)
    assert bucket.available(at) == 1, "a timer firing when the token is due finds it"


def test_a_changed_limit_applies_at_once_keeping_what_was_earned_up_to_the_new_burst() -> None:
    bucket = TokenBucket.empty(limit(1, burst=5), now=0.0).refilled(4.0)
    assert bucket.available(4.0) == 4
    lowered = bucket.retuned(limit(1, burst=2), now=4.0)
    assert lowered.available(4.0) == 2, "capped at the new burst"
    slower = TokenBucket.empty(limit(0.1), now=0.0).retuned(limit(10), now=0.05)
    assert slower.wait(0.05) == pytest.approx(0.0995), "the new rate from now on, what was earned kept"
    assert bucket.retuned(limit(1, burst=5), now=4.0) is bucket


def test_time_going_back_adds_nothing() -> None:
    bucket = TokenBucket.empty(limit(1), now=10.0)
    assert bucket.available(5.0) == 0 and bucket.refilled(5.0) == bucket


@settings(max_examples=200, deadline=None)
@given(rate=st.floats(0.001, 50), burst=st.integers(1, 20),
       arrivals=st.lists(st.floats(0, 30), min_size=1, max_size=200))
def test_no_window_holds_more_than_burst_plus_rate_times_its_length(rate: float, burst: int,
                                                                    arrivals: list[float]) -> None:
    """Greedy admission at arbitrary instants (what dispatches are): for any two starts, the starts
    between them are at most burst + rate × the time between."""
    bucket = TokenBucket.empty(limit(rate, burst), now=0.0)
    starts: list[float] = []
    for t in sorted(arrivals):
        n = bucket.available(t)
        starts += [t] * n
        bucket = bucket.take(n, t)
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            assert j - i + 1 <= burst + rate * (starts[j] - first) + 1e-6


def test_describe_counts_down_to_the_next_start_of_a_pool_that_stays_limited() -> None:
    assert next_start(due=10.0, rate=2, now=9.6) == 10.0
    assert next_start(due=10.0, rate=2, now=10.1) == pytest.approx(10.5)
    assert next_start(due=10.0, rate=2, now=11.0) == pytest.approx(11.0)
    assert next_start(due=10.0, rate=0.5, now=10.1) == pytest.approx(12.0)


def test_the_api_bounds_the_limit() -> None:
    pool = TaskPool.model_validate({"metadata": {"name": "p"}, "spec": {"rateLimit": {"startsPerSecond": 0.5}}})
    assert pool.spec.rate_limit == RateLimit(starts_per_second=0.5, burst=1)
    for bad in ({"startsPerSecond": 0}, {"startsPerSecond": 1001}, {"startsPerSecond": 1, "burst": 0},
                {"burst": 2}):
        with pytest.raises(ValueError):
            TaskPool.model_validate({"metadata": {"name": "p"}, "spec": {"rateLimit": bad}})


def test_the_pools_ready_condition_names_its_limit() -> None:
    from cronoq.api import TaskPhase
    from cronoq.engine.pools import pool_status

    from tests.unit.builders import T0

    limited = TaskPool.model_validate({"metadata": {"name": "p", "generation": 1},
                                       "spec": {"concurrency": 3, "rateLimit": {"startsPerSecond": 2.5, "burst": 4}}})
    (ready,) = pool_status(limited, {TaskPhase.QUEUED: 4}, 1, 4, T0).conditions
    assert ready.message == "1 running of 3; 4 waiting; at most 2.5 starts/s (burst 4)"
