"""The leader-election loop (controller/leader.py) when the API server is slow, away or cannot be
reached: found by the control-plane restart fault test, where a leader's loop died of a connection
error and left a replica that neither wrote (its guard refused) nor gave up (issue 14).

Every test runs on a fake clock, so seconds of renewals and lapsed deadlines take none. The Lease's
own calls are always kube/leases.py's. Where the test is about timing (a slow link, a start that
outlasts the renew deadline) they go to an API server in memory that answers on the fake clock;
where it is about the operator's one HTTP stack (apiserver/aio.py: a refused connection, writes
holding every connection they may) they go over it to a real loopback server, and the fake clock
moves only while the election loop sleeps between attempts.
"""
from __future__ import annotations

import asyncio
import copy
import http.server
import json
import socket
import threading
from typing import Any, Callable

import aiohttp
import pytest

from cronoq.controller.clock import FakeClock, LoopClock
from cronoq.controller.leader import Leadership
from cronoq.engine.election import ElectionTiming
from cronoq.apiserver.aio import ApiSession
from cronoq.apiserver.config import Connection
from cronoq.apiserver.errors import error_of
from cronoq.kube.writes import Writer

from tests.unit.builders import T0


class LeaseStore:
    """The API server's side of one Lease: 404 until it is created, 409 for a PUT with a
    resourceVersion it no longer has; every request's verb recorded in order."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.requests: list[str] = []

    def answer(self, verb: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        self.requests.append(verb)
        if verb == "GET":
            if self.lease is None:
                return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
            return 200, self.lease
        assert body is not None
        stored = self.lease
        if verb == "PUT" and (stored is None or
                              body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]):
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.lease = body
        return 201 if verb == "POST" else 200, body


class FakeLeaseApi(LeaseStore):
    """The HTTP stack (ApiSession.request) to an API server holding one Lease, in memory: each
    request takes effect when it arrives and is answered `delay` seconds later on the fake clock (a
    slow link: the network fault test's 2 s round trip, scaled down)."""

    def __init__(self, clock: FakeClock, delay: float) -> None:
        super().__init__()
        self.clock, self.delay = clock, delay

    async def request(self, method: str, path: str, limits: aiohttp.ClientTimeout,
                      body: dict[str, Any] | None = None, content_type: str = "") -> dict[str, Any]:
        # Copied both ways, as if it went through JSON: the caller's body is never the one stored.
        code, answer = self.answer(method, copy.deepcopy(body))
        answer = copy.deepcopy(answer)
        if self.delay:
            await self.clock.sleep(self.delay)
        if not 200 <= code <= 299:
            raise error_of(code, answer["reason"])
        return answer

    async def close(self) -> None:
        pass


class SteppingClock(FakeClock):
    """The fake clock for the election loop against a real loopback server: each sleep moves time
    on by its own length (the loop's wait between two attempts), and nothing else does, so a round
    trip takes no time, and the test waits for each one, never for a period."""

    async def sleep(self, seconds: float) -> None:
        await self.advance(seconds)


def unreachable_api() -> ApiSession:
    """The HTTP stack for a loopback port nobody listens on: every request is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return ApiSession(Connection(host=f"http://127.0.0.1:{port}"))


def test_a_leader_that_cannot_reach_the_api_server_gives_up_after_its_renew_deadline() -> None:
    timing = ElectionTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.05)
    clock = SteppingClock(T0)
    leadership = Leadership(unreachable_api(), "ns", "lease", timing=timing, clock=clock)
    leadership.epoch, leadership.last_renewed = 3, clock.monotonic()  # leading, renewed just now
    lost = []

    async def main() -> None:
        async def elected(epoch: int) -> None:
            raise AssertionError("not a new term")
        try:
            async with clock.timeout(10):
                await leadership.run(elected, lambda: lost.append(clock.monotonic()))
        finally:
            await leadership.http.close()

    started = clock.monotonic()
    asyncio.run(main())  # returns once on_lost was called (before the fix it raised the connection error)
    assert len(lost) == 1 and 1.0 <= lost[0] - started < 5.0
    assert not leadership.valid()


def test_renewals_are_not_queued_behind_writes_that_hold_every_connection_they_may() -> None:
    """Found by the etcd restart on a fresh clone, when renewals ran in threads: reconciles blocked
    on an API server without its etcd held every thread of asyncio's default pool, so the renewal
    never ran and the lapsed leader never gave up. On the one HTTP stack the same holds for
    connections: writes that hang (twice as many as may be in flight) leave the Lease's requests
    their own, and the leader keeps renewing."""
    timing = ElectionTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.1)
    clock = SteppingClock(T0)
    server = LoopbackLeases()
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    http = server.api()
    leadership = Leadership(http, "ns", "lease", timing=timing, clock=clock)
    writer = Writer(http)
    lost: list[float] = []
    in_flight: list[int] = []
    valid: list[bool] = []

    async def main() -> None:
        writes = [asyncio.create_task(writer.request("GET", "/hang")) for _ in range(64)]
        # Every connection the writes may hold is held (they are answered only at the end)
        # before the election starts.
        await asyncio.to_thread(server.wait_for, lambda requests: requests.count("HANG") >= 32)

        async def elected(epoch: int) -> None:
            pass
        try:
            async with clock.timeout(3):
                await leadership.run(elected, lambda: lost.append(clock.monotonic()))
        except TimeoutError:
            pass
        finally:
            in_flight.append(server.requests.count("HANG"))
            valid.append(leadership.valid())
            server.release.set()
            await asyncio.gather(*writes, return_exceptions=True)
            await http.close()

    try:
        asyncio.run(main())
    finally:
        server.shutdown()
    assert in_flight == [32], "as many writes in flight as they may have"
    assert not lost and valid == [True]
    renewals = server.requests[server.requests.index("POST") + 1:]
    assert renewals.count("PUT") >= 10, server.requests


class LoopbackLeases(http.server.ThreadingHTTPServer):
    """A loopback API server holding one Lease (a LeaseStore), and answering requests to /hang
    (writes held by a sick API server) only once `release` is set."""

    request_queue_size = 128  # connections opened at once are all accepted (socketserver's default: 5)

    def __init__(self) -> None:
        self.store = LeaseStore()
        self.arrived = threading.Condition()
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), _LeaseHandler)

    @property
    def requests(self) -> list[str]:
        return self.store.requests

    def record(self, verb: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        with self.arrived:
            if verb == "HANG":
                self.store.requests.append(verb)
                answer: tuple[int, dict[str, Any]] = (200, {})
            else:
                answer = self.store.answer(verb, body)
            self.arrived.notify_all()
        return answer

    def wait_for(self, seen: Callable[[list[str]], bool], timeout: float = 30) -> None:
        """Block until the requests recorded so far satisfy `seen` (woken by each arrival)."""
        with self.arrived:
            assert self.arrived.wait_for(lambda: seen(self.requests), timeout), self.requests

    def api(self) -> ApiSession:
        return ApiSession(Connection(host=f"http://127.0.0.1:{self.server_address[1]}"))


class _LeaseHandler(http.server.BaseHTTPRequestHandler):
    server: LoopbackLeases

    def log_message(self, *_: object) -> None:
        pass

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/hang":
            answer = self.server.record("HANG")
            self.server.release.wait(30)
            return self._answer(*answer)
        self._answer(*self.server.record("GET"))

    def _write(self, verb: str) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer(*self.server.record(verb, body))

    def do_POST(self) -> None:  # noqa: N802
        self._write("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._write("PUT")


def lead_for(server: FakeLeaseApi, timing: ElectionTiming, seconds: float, on_elected) -> tuple[Leadership, list[float]]:
    """Run a Leadership against `server` for `seconds` of its clock; return it and the times it
    lost its Lease."""
    clock = server.clock
    leadership = Leadership(server, "ns", "lease", timing=timing, clock=clock)
    lost: list[float] = []

    async def main() -> None:
        running = asyncio.create_task(leadership.run(on_elected, lambda: lost.append(clock.monotonic())))
        await clock.advance(seconds)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

    asyncio.run(main())
    return leadership, lost


def test_a_leader_on_a_slow_link_keeps_its_lease() -> None:
    """Found by the network fault test (2 s a round trip between operator and API server): each
    attempt was a GET and a PUT, given a third of the renew deadline, so on a slow link no renewal
    ever landed in time and the leader lost its Lease every 10 s, though each would have landed
    well within the deadline. Now a holder renews with one PUT, given the time left until its
    deadline. Here: a round trip of 0.2 × the deadline (as 2 s is of 10 s), for four deadlines."""
    timing = ElectionTiming(lease_duration=3.0, renew_deadline=2.0, retry_period=0.2)
    server = FakeLeaseApi(FakeClock(T0), delay=0.4)
    elected = []

    async def on_elected(epoch: int) -> None:
        elected.append(epoch)
    leadership, lost = lead_for(server, timing, 8, on_elected)
    assert elected == [1] and not lost, (elected, lost)
    assert leadership.valid()
    renewals = server.requests[server.requests.index("POST") + 1:]
    assert renewals and set(renewals) == {"PUT"}, server.requests


def test_renewals_go_on_while_the_new_leader_waits_for_its_watches_to_list() -> None:
    """Found by the latency fault test once listings took longer: the new leader's start (wait
    until every watch has listed) was awaited inside the election loop, so no renewal ran while
    it waited, and a listing longer than the renew deadline (thousands of finished tasks, or a
    slow link) cost the Lease. Here the start never finishes; the Lease is renewed all along."""
    timing = ElectionTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.1)
    server = FakeLeaseApi(FakeClock(T0), delay=0.02)
    started = []

    async def on_elected(epoch: int) -> None:
        started.append(epoch)
        await asyncio.Event().wait()  # never set: the listing outlasts the test
    leadership, lost = lead_for(server, timing, 3, on_elected)
    assert started == [1] and not lost, (started, lost)
    renewals = server.requests[server.requests.index("POST") + 1:]
    assert renewals.count("PUT") >= 10, server.requests  # 3 s of renewals every 0.1 s + a round trip
    assert leadership.valid()


def test_a_released_lease_has_no_holder_and_the_releaser_stops_acting() -> None:
    """release() on a clean stop: one read, one PUT of the Lease without holder, renewTime or
    acquireTime (a standby takes it at once); the releaser itself is no longer valid."""
    timing = ElectionTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.1)
    server = FakeLeaseApi(FakeClock(T0), delay=0.0)

    async def on_elected(epoch: int) -> None:
        pass
    leadership, lost = lead_for(server, timing, 0.5, on_elected)
    assert leadership.valid() and not lost
    before = len(server.requests)
    asyncio.run(leadership.release())
    assert server.requests[before:] == ["GET", "PUT"], server.requests
    spec = server.lease["spec"]
    assert not spec.get("holderIdentity") and not spec.get("renewTime") and not spec.get("acquireTime"), spec
    assert spec["leaseTransitions"] == 0 and not leadership.valid()


@pytest.mark.parametrize("clock", [LoopClock(), FakeClock(T0)], ids=["operator's clock", "fake clock"])
def test_a_cancellation_arriving_as_a_renewal_ends_still_stops_the_election(clock: LoopClock | FakeClock) -> None:
    """Found by CI, where `test_renewals_go_on_...` hung for 300 s: on Python 3.11 `wait_for`
    returns the result when the awaited call ends in the same turn of the loop as the cancellation
    (it checks the future before re-raising), so the election loop swallowed its cancellation and
    never stopped (at shutdown, or under any timeout around `run`). Here the cancellation comes in
    the same turn of the loop as each renewal's result, on the operator's clock (asyncio.timeout)
    and on the tests' (FakeClock.timeout) alike."""
    timing = ElectionTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.01)
    server = FakeLeaseApi(FakeClock(T0), delay=0.0)
    leadership = Leadership(server, "ns", "lease", timing=timing, clock=clock)
    renew = leadership._try_acquire_or_renew

    async def main() -> bool:
        running = asyncio.create_task(leadership.run(_never_started, lambda: None))

        async def renew_then_cancel() -> bool:
            held = await renew()
            running.cancel()  # the renewal's result and the cancellation in the same turn of the loop
            return held

        leadership._try_acquire_or_renew = renew_then_cancel  # type: ignore[method-assign]
        try:
            done, _ = await asyncio.wait({running}, timeout=5)
            return running in done and running.cancelled()
        finally:
            running.cancel()

    assert asyncio.run(main()), "the election loop went on after it was cancelled"


async def _never_started(epoch: int) -> None:
    await asyncio.Event().wait()
