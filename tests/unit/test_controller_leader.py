"""The leader-election loop (controller/leader.py) when the API server cannot be reached: found by
the control-plane restart fault test, where a leader's loop died of a connection error and left a
replica that neither wrote (its guard refused) nor gave up (issue 14)."""
from __future__ import annotations

import asyncio
import socket
import threading
import time

from kubernetes import client

from cronoq.controller.leader import Leadership
from cronoq.engine.election import ElectionTiming


def unreachable_api() -> client.ApiClient:
    """An API client for a loopback port nobody listens on: every request is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.retries = 0
    return client.ApiClient(configuration)


def test_a_leader_that_cannot_reach_the_api_server_gives_up_after_its_renew_deadline() -> None:
    timing = ElectionTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.05)
    leadership = Leadership(unreachable_api(), "ns", "lease", timing=timing)
    leadership.epoch, leadership.last_renewed = 3, time.monotonic()  # leading, renewed just now
    lost = []

    async def main() -> None:
        async def elected(epoch: int) -> None:
            raise AssertionError("not a new term")
        await asyncio.wait_for(leadership.run(elected, lambda: lost.append(time.monotonic())), timeout=10)

    started = time.monotonic()
    asyncio.run(main())  # returns once on_lost was called (before the fix it raised the connection error)
    assert len(lost) == 1 and 1.0 <= lost[0] - started < 5.0
    assert not leadership.valid()


def test_renewals_are_not_queued_behind_reconciles_that_hold_every_shared_thread() -> None:
    """Found by the etcd restart on a fresh clone: reconciles blocked on an API server without its
    etcd held every thread of asyncio's default pool, so the renewal never ran and the lapsed
    leader never gave up. Renewals have a thread of their own."""
    timing = ElectionTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.05)
    leadership = Leadership(unreachable_api(), "ns", "lease", timing=timing)
    leadership.epoch, leadership.last_renewed = 3, time.monotonic()
    lost = []
    release = threading.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        blockers = [loop.run_in_executor(None, release.wait, 30) for _ in range(64)]  # every default thread

        async def elected(epoch: int) -> None:
            raise AssertionError("not a new term")
        try:
            await asyncio.wait_for(leadership.run(elected, lambda: lost.append(time.monotonic())), timeout=10)
        finally:
            release.set()
            await asyncio.gather(*blockers)

    started = time.monotonic()
    asyncio.run(main())
    assert len(lost) == 1 and lost[0] - started < 5.0
