"""A pull worker under throttling (worker/backoff.py, issue 42): its retries wait longer each time,
with jitter, capped, and never less than the API server's Retry-After; its Leases' renewals and
its reports back off too, but only as long as their lease can afford it; and its own Lease goes
first."""
from __future__ import annotations

import sys
import threading

import pytest
from cronoq.apiserver.errors import ApiError, error_of

from cronoq.worker.backoff import GAP, Backoff, retry_after
from cronoq.worker.lease import LAST_TRY, MIN_REQUEST_TIMEOUT, KubeLease, LeaseKeeper, Renewal
from cronoq.worker.report import Report
from cronoq.worker.runner import Abort, Context
from cronoq.worker.attempts import Running
from cronoq.worker.lifecycle import Worker

from tests.unit.fakes import KeeperClock as Clock
from tests.unit.worker.fake_clock import WorkerClock

OK, FAIL = Renewal.ok(), Renewal.failed("503 Service Unavailable")


def refused(status: int, retry: str | None = None) -> ApiError:
    return error_of(status, "throttled", "", {"Retry-After": retry} if retry is not None else {})


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
    assert backoff.wait(retry_after(refused(429, "7"))) == 7.0
    assert backoff.wait(retry_after(refused(503, "2"))) == 2.0
    assert backoff.wait(retry_after(refused(503, "0"))) == 1.0, "then the backoff's own"
    assert Backoff(rng=lambda: 0.999999).wait(8) > 11.99, "spread over [asked, 1.5 × asked]: all were told the same"
    assert retry_after(refused(429, "7")) == 7.0 and retry_after(refused(500, "3")) == 3.0
    assert retry_after(refused(404, "7")) is None, "not a refusal to retry later"
    assert retry_after(refused(429)) is None and retry_after(refused(429, "Wed, 21 Oct 2015 07:28:00 GMT")) is None
    assert retry_after(OSError("connection reset")) is None


# --- Lease renewals: back off, but never past the lease's last chance ----------------------------------

def keep(ttl: float, *answers: Renewal) -> tuple[str | None, list[float]]:
    """A keeper backing off with the lowest jitter, renewing from a script; (why it ended, sent at)."""
    clock, left, sent = Clock(), list(answers), []
    keeper: LeaseKeeper

    def renew(timeout: float) -> Renewal:
        sent.append(round(clock.now, 3))
        if len(left) == 1:
            keeper.stop()
        return left.pop(0)

    keeper = LeaseKeeper(ttl, renew, clock=clock, wait=clock.sleep, backoff=Backoff(rng=lambda: 0.0))
    return keeper.run(), sent


def test_a_refused_renewal_is_retried_sooner_than_the_next_tick_so_two_refusals_do_not_lapse_the_lease() -> None:
    # Without a backoff the tries are 0, 1, 2 and the lease lapses at 3 (test_worker_lease.py).
    why, sent = keep(3, OK, FAIL, FAIL, OK, OK)
    assert why is None
    assert sent == [0, 1, 1.25, 1.75, 2.75], "0.25, then 0.5 later; renewed, the ticks resume"


def test_the_servers_retry_after_is_waited_as_long_as_the_lease_can_afford_it() -> None:
    why, sent = keep(30, OK, Renewal.failed("429", retry_after=3), OK, OK)
    assert sent == [0, 10, 13, 23], "3 s asked, 19.5 s left before the last chance: waited"
    asked_too_much = Renewal.failed("429", retry_after=50)
    why, sent = keep(30, OK, *[asked_too_much] * 6, OK)
    assert sent == [0, 10, 14.875, 18.531, 21.273, 23.33, 24.873, 26.029], \
        "a quarter (with no jitter) of what is left before the last chance, LAST_TRY before the deadline"
    assert why is None and LAST_TRY == 0.5


def test_a_lease_refused_to_the_end_lapses_at_its_deadline_without_a_storm() -> None:
    why, sent = keep(30, OK, *[FAIL] * 20)
    assert why is not None and why.startswith("no successful renewal for 30s")
    assert sent == [0, 10, 10.25, 10.75, 11.75, 13.75, 17.688, 20.641, 22.855, 24.517, 25.762, 26.762, 27.762,
                    28.762], "each wait twice the last while the lease affords it, then a quarter of what is left " \
                             "(with no jitter), GAP apart: 13 tries in the 20 s before it lapses, not 20"
    assert GAP == 1


# --- The worker: its own Lease first (on a fake clock: no test here sleeps) -------------------------

def worker(clock: WorkerClock) -> Worker:
    return Worker("mail", lambda ctx: None, concurrency=1, namespace="jobs", name="w-1", ttl=3.0, grace=1.0,
                  kubeconfig=None, coordination=object(), custom=object(), clock=clock)


class Own:
    """The worker's own Lease: refused until told otherwise."""

    def __init__(self) -> None:
        self.result = FAIL

    def renew(self, timeout: float) -> Renewal:
        return self.result


def running(w: Worker, lease: object, ttl: float = 10.0) -> Running:
    context = Context(id="uid", name="t", namespace="jobs", attempt=1, payload=None, lease_name="t-a1.w-1",
                      lease_id="lid", lease_ttl=ttl, worker=w.name)
    return Running(context, Abort(), None, lease, alive_until=w.clock.now() + ttl)  # type: ignore[arg-type]


def test_while_its_own_lease_is_refused_a_workers_attempt_renewals_hold_back() -> None:
    clock = WorkerClock()
    w, own, sent = worker(clock), Own(), []

    class Lease:
        def renew(self, timeout: float) -> Renewal:
            sent.append((clock.now(), timeout))
            return OK

    run = running(w, Lease())
    w.gate.open()  # announced
    renew_own = w._renew_own(own)  # type: ignore[arg-type]
    start = clock.now()
    assert w.attempts.renew(run, 2.0) == OK and sent == [(start, 2.0)], "nothing held back while the own Lease renews"
    assert run.alive_until == start + 10, "renewed: good for a TTL from when it was sent"

    assert renew_own(1.0) == FAIL and not w.gate.is_open

    def renewed_after(seconds: float):
        def on_wait(event: threading.Event, budget: float) -> None:
            assert not event.is_set(), "waiting at the shut gate"
            clock.t += seconds  # the worker's own renewal lands this much later, while the attempt's waits
            own.result = OK
            renew_own(1.0)
        return on_wait

    clock.on_wait = renewed_after(0.3)
    at = clock.now()
    assert w.attempts.renew(run, 5.0) == OK
    assert sent[-1] == pytest.approx((at + 0.3, 4.7)), "held back until the worker's own Lease renewed, then sent with the time left"

    own.result = FAIL
    renew_own(1.0)
    clock.on_wait = lambda event, budget: None
    at = clock.now()
    assert w.attempts.renew(run, 1.0) == OK
    assert sent[-1] == pytest.approx((at + 1.0 - MIN_REQUEST_TIMEOUT, MIN_REQUEST_TIMEOUT)), \
        "held back for all but the time a renewal needs, never past the attempt's own lease"


def test_a_refused_report_is_tried_again_before_its_attempts_lease_lapses() -> None:
    clock = WorkerClock()
    w, tries = worker(clock), []

    class Coordination:
        def create_namespaced_lease(self, namespace: str, body: dict, _request_timeout: float = 0) -> None:
            tries.append(clock.now())
            if len(tries) < 3:
                raise refused(429, "30")  # the server asks for more than the lease has left

    w.attempts.coordination = Coordination()
    w.gate.open()
    run = running(w, KubeLease("jobs", "t-a1.w-1", "lid", api=w.attempts.coordination), ttl=4.0)
    assert w.attempts.write_report(run, Report("success")) is True
    gaps = [b - a for a, b in zip(tries, tries[1:])]
    assert len(gaps) == 2 and all(gap >= GAP for gap in gaps) and sum(gaps) < 4 - LAST_TRY, \
        f"not 30 s later: twice, GAP apart, in the 3.5 s its lease has left before its last chance: {gaps}"


def test_a_worker_started_under_throttling_announces_itself_after_backing_off(monkeypatch) -> None:
    clock = WorkerClock()
    w, tries = worker(clock), []

    class Coordination:
        def create_namespaced_lease(self, namespace: str, body: dict, _request_timeout: float = 0) -> None:
            tries.append(clock.now())
            if len(tries) < 3:
                raise refused(429, "0.2")

    w.coordination = Coordination()
    monkeypatch.setattr(sys.modules[Worker.__module__], "Backoff", lambda: Backoff(first=0.01))
    assert w._announce() is True and w.gate.is_open
    assert len(tries) == 3 and all(b - a >= 0.2 for a, b in zip(tries, tries[1:])), "Retry-After honoured"

    w, tries = worker(clock), []
    w.coordination = Coordination()
    w.stopping.set()
    assert w._announce() is False and tries == [], "told to stop first: never announced"
