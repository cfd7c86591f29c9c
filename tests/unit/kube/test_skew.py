"""The clock-skew estimate (kube/skew.py) from the API server's Date headers, and cluster times
moved by it into the operator's clock (kube/observe.py)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from cronoq.kube.observe import job_facts, pod_facts
from cronoq.kube.skew import ClockSkew

SERVER = datetime(2026, 12, 3, 4, 50, 9, tzinfo=timezone.utc)


def date(at: datetime) -> str:
    return format_datetime(at, usegmt=True)


def test_no_answer_yet_and_clocks_that_agree_mean_no_skew() -> None:
    skew = ClockSkew()
    assert skew.seconds() == 0.0
    ours = SERVER.timestamp() + 0.7  # within the Date's second, 20 ms round trip
    skew.observe(ours - 0.02, ours, date(SERVER))
    skew.observe(ours + 5, ours + 5.3, date(SERVER + timedelta(seconds=5)))
    assert skew.seconds() == 0.0


@pytest.mark.parametrize("off", [30.0, -30.0, 3.5])
def test_a_clock_ahead_or_behind_is_measured_never_short_of_the_difference(off: float) -> None:
    skew = ClockSkew()
    for i, frac in enumerate((0.1, 0.55, 0.9)):
        server = SERVER.timestamp() + 10 * i + frac
        skew.observe(server + off - 0.01, server + off + 0.01, date(SERVER + timedelta(seconds=10 * i)))
    assert off <= skew.seconds() < off + 1.0  # an upper bound: a moved time is never early


def test_unreadable_dates_are_ignored() -> None:
    skew = ClockSkew()
    skew.observe(0.0, 1.0, None)
    skew.observe(0.0, 1.0, "yesterday")
    assert skew.seconds() == 0.0


def test_cluster_times_are_moved_into_the_operators_clock() -> None:
    labels = {"batch.kubernetes.io/job-name": "t-a1", "cronoq.io/attempt": "1"}
    pod = {"metadata": {"name": "t-a1-x", "labels": labels},
           "status": {"phase": "Running", "containerStatuses": [
               {"name": "task", "state": {"running": {"startedAt": "2026-12-03T04:50:09Z"}}}]}}
    ahead = timedelta(seconds=30)
    assert pod_facts(pod, ahead).started_at == SERVER + ahead
    assert pod_facts(pod).started_at == SERVER
    job = {"metadata": {"name": "t-a1", "creationTimestamp": "2026-12-03T04:50:09Z", "labels": labels}}
    assert job_facts(job, -ahead).created_at == SERVER - ahead
