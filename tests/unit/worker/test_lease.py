"""The heartbeat loop shared by the SDK and the sidecar (DESIGN §6): a renewal every TTL/3,
failures retried at the next tick, self-fencing when the lease names another holder, is gone,
or has not been renewed for a whole TTL. Driven by a fake clock and a scripted renewal."""
from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from cronoq.worker.lease import MIN_REQUEST_TIMEOUT, LeaseKeeper, Renewal, Schedule, renew_time

from tests.support.waiting import wait_until
from tests.unit.fakes import KeeperClock as Clock

OK, LOST = Renewal.ok(), Renewal.gone("the Lease ns/l is gone")


def FAIL(detail: str = "503 Service Unavailable") -> Renewal:
    return Renewal.failed(detail)


class Script:
    """A renewal that answers from a list (each answer may take some seconds), then stops the keeper."""

    def __init__(self, clock: Clock, *answers: Renewal | tuple[Renewal, float]) -> None:
        self.clock, self.answers = clock, list(answers)
        self.sent: list[float] = []
        self.timeouts: list[float] = []
        self.keeper: LeaseKeeper | None = None

    def __call__(self, timeout: float) -> Renewal:
        self.sent.append(self.clock.now)
        self.timeouts.append(timeout)
        answer = self.answers.pop(0)
        result, took = answer if isinstance(answer, tuple) else (answer, 0.0)
        self.clock.now += took
        if not self.answers:
            self.keeper.stop()
        return result


def keep(ttl: float, *answers: Renewal | tuple[Renewal, float]) -> tuple[str | None, Script, LeaseKeeper]:
    clock = Clock()
    script = Script(clock, *answers)
    keeper = script.keeper = LeaseKeeper(ttl, script, clock=clock, wait=clock.sleep)
    return keeper.run(), script, keeper


def test_renews_at_once_then_every_third_of_the_ttl() -> None:
    why, script, keeper = keep(3, OK, OK, OK, OK, OK)
    assert why is None
    assert script.sent == [0, 1, 2, 3, 4]
    assert keeper.renewals == 5


def test_a_failed_renewal_is_retried_at_the_next_tick() -> None:
    why, script, _ = keep(30, OK, FAIL(), OK, OK)
    assert why is None and script.sent == [0, 10, 20, 30]


def test_no_successful_renewal_for_a_ttl_fences() -> None:
    clock = Clock()
    script = Script(clock, OK, FAIL("first"), FAIL("503 Service Unavailable"), OK)
    keeper = script.keeper = LeaseKeeper(3, script, clock=clock, wait=clock.sleep)
    why = keeper.run()
    assert script.sent == [0, 1, 2]  # the deadline (3s after the renewal sent at 0) comes before a 4th
    assert clock.now == 3
    assert why == "no successful renewal for 3s (the lease TTL); last error: 503 Service Unavailable"


def test_the_deadline_counts_from_the_last_successful_renewal() -> None:
    clock = Clock()
    script = Script(clock, OK, FAIL(), OK, FAIL(), FAIL(), FAIL())
    keeper = script.keeper = LeaseKeeper(3, script, clock=clock, wait=clock.sleep)
    assert keeper.run() is not None
    assert script.sent == [0, 1, 2, 3, 4] and clock.now == 5  # 3s after the renewal sent at 2


def test_failing_from_the_start_fences_a_ttl_after_start() -> None:
    clock = Clock()
    script = Script(clock, FAIL(), FAIL(), FAIL(), FAIL())
    keeper = script.keeper = LeaseKeeper(6, script, clock=clock, wait=clock.sleep)
    assert keeper.run().startswith("no successful renewal for 6s")
    assert script.sent == [0, 2, 4] and clock.now == 6


@pytest.mark.parametrize("lost_at", [0, 1, 3])
def test_a_lost_lease_fences_at_once(lost_at: int) -> None:
    why, script, keeper = keep(3, *([OK] * lost_at), LOST, OK)
    assert why == "the Lease ns/l is gone"
    assert script.sent == list(range(lost_at + 1))
    assert keeper.renewals == lost_at


def test_the_lease_is_good_for_a_ttl_from_when_the_renewal_was_sent() -> None:
    """A slow renewal does not buy time: its TTL counts from the send, not the answer."""
    clock = Clock()
    script = Script(clock, (OK, 0.9), (FAIL("timed out"), 1.0), (FAIL("timed out"), 1.0), OK)
    keeper = script.keeper = LeaseKeeper(3, script, clock=clock, wait=clock.sleep)
    assert keeper.run() is not None
    assert script.sent == [0, 1, 2] and clock.now == 3


def test_a_renewal_slower_than_a_tick_is_followed_at_once() -> None:
    clock = Clock()
    script = Script(clock, (FAIL("timed out"), 1.5), OK, OK)
    keeper = script.keeper = LeaseKeeper(3, script, clock=clock, wait=clock.sleep)
    assert keeper.run() is None
    assert script.sent == [0, 1.5, 2.5]  # the failed tick at 0 was due again at 1: at once


def test_requests_never_outlast_a_tick_or_the_deadline() -> None:
    schedule = Schedule(3, start=0)
    assert schedule.interval == 1
    assert schedule.request_timeout(0) == 1
    assert schedule.request_timeout(2.25) == 0.75
    assert schedule.request_timeout(2.9) == MIN_REQUEST_TIMEOUT
    _, script, _ = keep(30, OK, OK)
    assert script.timeouts == [10, 10]


def test_schedule_waits_for_the_next_tick_or_the_deadline() -> None:
    schedule = Schedule(3, start=100)
    assert schedule.due(100) and schedule.wait(100) == 0
    schedule.renewed(100)
    assert not schedule.due(100.5) and schedule.wait(100.5) == 0.5
    assert schedule.deadline == 103
    schedule.failed(101)
    assert schedule.next_at == 102 and not schedule.expired(102.9) and schedule.expired(103)


def test_a_schedule_needs_a_ttl() -> None:
    with pytest.raises(ValueError):
        Schedule(0, start=0)


def test_renew_time_is_rfc3339_with_microseconds_in_utc() -> None:
    assert renew_time(datetime(2025, 3, 1, 12, 0, 0, 5, tzinfo=timezone.utc)) == "2025-03-01T12:00:00.000005Z"
    assert renew_time().endswith("Z") and len(renew_time()) == len("2025-03-01T12:00:00.000005Z")


# --- on a real thread, with the real clock ------------------------------------------------------------

class Recorder:
    """A renewal that answers `result` and counts."""

    def __init__(self, result: Renewal = OK) -> None:
        self.result, self.calls = result, 0

    def __call__(self, timeout: float) -> Renewal:
        self.calls += 1
        return self.result


def test_renew_now_renews_between_ticks_and_says_whether_it_worked() -> None:
    renew = Recorder()
    keeper = LeaseKeeper(600, renew)  # ticks 200s apart: only renew_now() renews after the first
    thread = keeper.start(on_lost=lambda why: None)
    wait_until(lambda: keeper.renewals == 1, timeout=5, what="the first renewal")
    assert keeper.renew_now(timeout=5) is True
    assert keeper.renewals == 2 and renew.calls == 2
    renew.result = FAIL("403 Forbidden")
    assert keeper.renew_now(timeout=5) is False
    assert renew.calls == 3 and keeper.last_error == "403 Forbidden"
    keeper.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert keeper.renew_now(timeout=5) is False


def test_stop_ends_a_waiting_keeper_at_once() -> None:
    keeper = LeaseKeeper(600, Recorder())
    result: list[str | None] = []
    thread = threading.Thread(target=lambda: result.append(keeper.run()))
    thread.start()
    wait_until(lambda: keeper.renewals == 1, timeout=5, what="the first renewal")
    keeper.stop()
    thread.join(timeout=5)
    assert not thread.is_alive() and result == [None]


def test_a_lost_lease_is_reported_from_the_thread() -> None:
    lost: list[str] = []
    keeper = LeaseKeeper(600, Recorder(LOST))
    keeper.start(on_lost=lost.append).join(timeout=5)
    assert lost == ["the Lease ns/l is gone"]
    assert keeper.renew_now(timeout=1) is False


def test_a_renewal_that_raises_fences_rather_than_leaving_the_attempt_unleased() -> None:
    def broken(timeout: float) -> Renewal:
        raise RuntimeError("bug")

    lost: list[str] = []
    LeaseKeeper(600, broken).start(on_lost=lost.append).join(timeout=5)
    assert lost == ["the heartbeat thread failed: RuntimeError('bug')"]
