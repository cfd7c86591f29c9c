"""A pull worker's retries after a failure (worker/backoff.py, issue 42): longer each time, with
jitter, capped, and never sooner than the API server's Retry-After."""
from __future__ import annotations

from kubernetes.client.rest import ApiException

from cronoq.worker.backoff import Backoff, retry_after


def refused(status: int, retry: str | None = None) -> ApiException:
    err = ApiException(status=status, reason="throttled")
    err.headers = {"Retry-After": retry} if retry is not None else {}
    return err


def test_waits_grow_with_jitter_up_to_a_cap_and_start_over_after_a_success() -> None:
    low, high = Backoff(first=0.5, most=30, rng=lambda: 0.0), Backoff(first=0.5, most=30, rng=lambda: 0.999999)
    lows = [low.wait() for _ in range(10)]
    highs = [high.wait() for _ in range(10)]
    assert lows[:4] == [0.25, 0.5, 1.0, 2.0] and lows[-1] == 15.0, "half the ceiling, doubling, capped at 30/2"
    assert all(h <= 30 for h in highs) and round(highs[0], 3) == 0.5 and round(highs[-1], 3) == 30.0
    low.reset()
    assert low.wait() == 0.25


def test_the_servers_retry_after_is_honoured_on_429_and_5xx_only() -> None:
    backoff = Backoff(rng=lambda: 0.0)
    assert backoff.wait(refused(429, "7")) == 7.0
    assert backoff.wait(refused(503, "2")) == 2.0 and backoff.wait(refused(503, "0")) == 1.0, "then the backoff's own"
    assert retry_after(refused(429, "7")) == 7.0 and retry_after(refused(500, "3")) == 3.0
    assert retry_after(refused(404, "7")) is None, "not a refusal to retry later"
    assert retry_after(refused(429)) is None and retry_after(refused(429, "Wed, 21 Oct 2015 07:28:00 GMT")) is None
    assert retry_after(OSError("connection reset")) is None
