"""The delay before a retry (DESIGN §4).

Before attempt n (n ≥ 2): d = min(initialBackoff × multiplier^(n−2), maxBackoff), then
`full` jitter draws uniformly from [0, d], `none` keeps d, and `additive` adds a uniform draw
from [0, d] and caps the sum at maxBackoff. A `retry_after` hint from the task raises the
delay to at least the hint; nothing lowers it below the hint.
"""
from __future__ import annotations

import random
from datetime import timedelta

from cronoq.api import Jitter, RetryPolicy


def base_delay(policy: RetryPolicy, attempt: int) -> float:
    """d in seconds, before the jitter: the exponential curve capped at maxBackoff."""
    if attempt < 2:
        raise ValueError(f"attempt {attempt} is not a retry: retries start at attempt 2")
    initial, cap = policy.initial_backoff.total_seconds(), policy.max_backoff.total_seconds()
    exponent = attempt - 2
    # multiplier ≥ 1, so once the curve passes the cap it stays there; stop before it overflows.
    grown = initial
    for _ in range(exponent):
        grown *= policy.multiplier
        if grown >= cap:
            return cap
    return min(grown, cap)


def retry_delay(policy: RetryPolicy, attempt: int, rng: random.Random,
                retry_after: float | None = None) -> timedelta:
    """How long to wait, after attempt `attempt - 1` ended, before attempt `attempt` may start."""
    d = base_delay(policy, attempt)
    cap = policy.max_backoff.total_seconds()
    if policy.jitter is Jitter.NONE:
        delay = d
    elif policy.jitter is Jitter.ADDITIVE:
        delay = min(d + rng.uniform(0.0, d), max(cap, d))
    else:
        delay = rng.uniform(0.0, d)
    if retry_after is not None and retry_after > delay:
        delay = retry_after
    return timedelta(seconds=delay)
