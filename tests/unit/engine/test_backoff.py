"""The retry delay (DESIGN §4): d = min(initialBackoff × multiplier^(n−2), maxBackoff) before
attempt n ≥ 2, then `full` uniform in [0, d], `none` exactly d, `additive`
min(d + uniform[0, d], maxBackoff); a `retry_after` hint raises the delay, never lowers it."""
from __future__ import annotations

import random
from datetime import timedelta

import pytest
from hypothesis import given, strategies as st

from cronoq.api import Jitter, RetryPolicy
from cronoq.engine.backoff import base_delay, retry_delay

DAY_MS = 24 * 3600 * 1000


@st.composite
def policies(draw, jitter: Jitter | None = None) -> RetryPolicy:
    """Every retry policy the API accepts: backoffs 0s..24h in milliseconds, max ≥ initial."""
    initial = draw(st.integers(0, DAY_MS))
    most = draw(st.integers(initial, DAY_MS))
    return RetryPolicy(
        initial_backoff=timedelta(milliseconds=initial), max_backoff=timedelta(milliseconds=most),
        multiplier=draw(st.floats(1.0, 10.0, allow_nan=False)),
        jitter=jitter if jitter is not None else draw(st.sampled_from(list(Jitter))))


attempts = st.integers(2, 200)
seeds = st.integers(0, 2**32 - 1)
EPS = 1e-6  # timedelta keeps microseconds


def seconds(delta: timedelta) -> float:
    return delta.total_seconds()


def expected_d(policy: RetryPolicy, n: int) -> float:
    """DESIGN's formula, computed independently of the engine (with exact powers)."""
    initial, cap = policy.initial_backoff.total_seconds(), policy.max_backoff.total_seconds()
    if initial == 0:
        return 0.0
    try:
        grown = initial * policy.multiplier ** (n - 2)
    except OverflowError:
        return cap
    return min(grown, cap)


# --- the curve d -----------------------------------------------------------------------------------

def test_defaults_double_from_one_second_up_to_a_minute() -> None:
    policy = RetryPolicy()
    assert [base_delay(policy, n) for n in range(2, 11)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]


@given(policy=policies(), n=attempts)
def test_base_delay_is_designs_formula(policy: RetryPolicy, n: int) -> None:
    assert base_delay(policy, n) == pytest.approx(expected_d(policy, n), rel=1e-9, abs=1e-9)


@given(policy=policies(), n=attempts)
def test_base_delay_never_exceeds_max_backoff(policy: RetryPolicy, n: int) -> None:
    assert 0 <= base_delay(policy, n) <= policy.max_backoff.total_seconds()


@given(policy=policies(), n=attempts)
def test_base_delay_is_monotone_in_the_attempt_number(policy: RetryPolicy, n: int) -> None:
    assert base_delay(policy, n) <= base_delay(policy, n + 1)


def test_second_attempt_waits_initial_backoff() -> None:
    policy = RetryPolicy(initial_backoff="7s", max_backoff="1m", jitter="none")
    assert retry_delay(policy, 2, random.Random(0)) == timedelta(seconds=7)


def test_multiplier_one_keeps_the_delay_constant() -> None:
    policy = RetryPolicy(initial_backoff="3s", multiplier=1.0, max_backoff="1m", jitter="none")
    assert {retry_delay(policy, n, random.Random(0)) for n in range(2, 101)} == {timedelta(seconds=3)}


def test_zero_initial_backoff_stays_zero() -> None:
    policy = RetryPolicy(initial_backoff="0s", max_backoff="0s")
    assert base_delay(policy, 50) == 0


@pytest.mark.parametrize("n", [0, 1, -3])
def test_attempts_before_the_second_are_not_retries(n: int) -> None:
    with pytest.raises(ValueError, match="not a retry"):
        base_delay(RetryPolicy(), n)
    with pytest.raises(ValueError, match="not a retry"):
        retry_delay(RetryPolicy(), n, random.Random(0))


@pytest.mark.parametrize("multiplier", [1.0, 1.0001, 2.0, 10.0])
def test_huge_attempt_numbers_neither_overflow_nor_exceed_the_cap(multiplier: float) -> None:
    policy = RetryPolicy(initial_backoff="24h", max_backoff="24h", multiplier=multiplier)
    assert base_delay(policy, 100_000) == 86400
    policy = RetryPolicy(initial_backoff="1ms", max_backoff="24h", multiplier=multiplier)
    d = base_delay(policy, 100_000)
    assert 0 < d <= 86400
    assert retry_delay(policy, 100_000, random.Random(1)) <= timedelta(hours=24)


# --- jitter ---------------------------------------------------------------------------------------

@given(policy=policies(Jitter.NONE), n=attempts, seed=seeds)
def test_no_jitter_is_exactly_d(policy: RetryPolicy, n: int, seed: int) -> None:
    assert seconds(retry_delay(policy, n, random.Random(seed))) == pytest.approx(base_delay(policy, n), abs=EPS)


@given(policy=policies(Jitter.FULL), n=attempts, seed=seeds)
def test_full_jitter_is_between_zero_and_d(policy: RetryPolicy, n: int, seed: int) -> None:
    delay = seconds(retry_delay(policy, n, random.Random(seed)))
    assert 0 <= delay <= base_delay(policy, n) + EPS


@given(policy=policies(Jitter.ADDITIVE), n=attempts, seed=seeds)
def test_additive_jitter_is_between_d_and_max_backoff(policy: RetryPolicy, n: int, seed: int) -> None:
    d = base_delay(policy, n)
    delay = seconds(retry_delay(policy, n, random.Random(seed)))
    assert d - EPS <= delay <= min(2 * d, policy.max_backoff.total_seconds()) + EPS


def test_additive_jitter_is_capped_at_max_backoff_not_above() -> None:
    # d is already the cap: d + uniform[0, d] must come back down to maxBackoff.
    policy = RetryPolicy(initial_backoff="1m", max_backoff="1m", jitter="additive")
    assert {retry_delay(policy, n, random.Random(seed)) for n in (2, 5) for seed in range(50)} == {
        timedelta(minutes=1)}


def test_jitter_spreads_draws_over_the_range() -> None:
    """The draws are random, not a constant at one end of the range (which would still pass the bounds)."""
    full = RetryPolicy(initial_backoff="10s", max_backoff="10s", jitter="full")
    additive = RetryPolicy(initial_backoff="10s", max_backoff="1m", jitter="additive")
    rng = random.Random(42)
    draws = [seconds(retry_delay(full, 2, rng)) for _ in range(400)]
    assert min(draws) < 1 and max(draws) > 9
    draws = [seconds(retry_delay(additive, 2, rng)) for _ in range(400)]
    assert min(draws) < 11 and max(draws) > 19


def test_same_seed_same_delay() -> None:
    policy = RetryPolicy(jitter="full")
    assert retry_delay(policy, 4, random.Random(9)) == retry_delay(policy, 4, random.Random(9))


# --- retry_after ------------------------------------------------------------------------------------

@given(policy=policies(), n=attempts, seed=seeds, hint=st.floats(0.001, 7 * 86400, allow_nan=False))
def test_retry_after_raises_the_delay_to_at_least_the_hint(policy: RetryPolicy, n: int, seed: int,
                                                           hint: float) -> None:
    plain = seconds(retry_delay(policy, n, random.Random(seed)))
    hinted = seconds(retry_delay(policy, n, random.Random(seed), hint))
    assert hinted >= hint - EPS
    assert hinted == pytest.approx(max(plain, hint), abs=EPS)


@given(policy=policies(), n=attempts, seed=seeds, hint=st.floats(-1e6, 1e-3, allow_nan=False))
def test_a_small_retry_after_never_lowers_the_delay(policy: RetryPolicy, n: int, seed: int, hint: float) -> None:
    plain = retry_delay(policy, n, random.Random(seed))
    assert retry_delay(policy, n, random.Random(seed), hint) >= plain


def test_retry_after_above_max_backoff_is_honoured() -> None:
    policy = RetryPolicy(initial_backoff="1s", max_backoff="5s", jitter="none")
    assert retry_delay(policy, 2, random.Random(0), 120.0) == timedelta(seconds=120)
