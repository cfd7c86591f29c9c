"""Faults: the operator's clock is 30 s ahead of, or behind, the API server's and the nodes'
(libfaketime; the monotonic clock is left alone, as NTP would leave it). Heartbeat leases do not
expire while renewed, timeouts count from the container's start, backoffs are waited out."""
from __future__ import annotations

import shutil
import time

import pytest

from tests.support.faults import assert_nothing_lost, assert_one_at_a_time
from tests.support.podwatch import PodWatch
from tests.support.waiting import wait_until


@pytest.mark.parametrize("skew", ["+30s", "-30s"])
def test_an_operator_whose_clock_is_off_by_30s_keeps_time_right(skew, own, api, devcluster, kubeconfig):
    from cronoq.worker.lease import KubeLease, LeaseKeeper, Owner

    assert shutil.which("faketime"), "faketime is installed by `make test` and `make faults` (hack/testtools.py)"
    # An operator 30 s behind must not see the API server's fresh certificate as not yet valid.
    age = time.time() - (devcluster.STATE / "pki" / "apiserver.crt").stat().st_mtime
    time.sleep(max(0.0, 32 - age))
    own.operator.wrapper = ("faketime", "-f", skew)
    own.operator.env = {"FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    own.operator.start()
    own.pool(concurrency=10, leaseTTL="0s", retry={"maxAttempts": 2, "initialBackoff": "3s", "jitter": "none"})

    with PodWatch(api, own.namespace) as pods:
        task = own.task("beating", delay="8s", message="ok", leaseTTL="3s")
        own.task("slow", outcome="Run", timeout="4s", retry={"maxAttempts": 1})
        own.task("flaky", outcome_a1="Fail", delay="500ms", message="ok")
        wait_until(lambda: own.jobs("beating"), timeout=30, what="the heartbeating attempt's Job")
        attempt = own.status("beating")["attempts"][0]
        keeper = LeaseKeeper(3.0, KubeLease(own.namespace, "beating-a1", attempt["leaseId"], kubeconfig=kubeconfig,
                                            owner=Owner("beating", task["metadata"]["uid"], 1), ttl=3.0).renew)
        lost: list[str] = []
        keeper.start(lost.append)
        try:
            statuses = assert_nothing_lost(own, ["beating", "flaky"], timeout=60)
        finally:
            keeper.stop()
        slow = own.wait_phase("slow", "DeadLettered", timeout=60)
        wait_until(lambda: pods.pods.get("slow-a1") and pods.pods["slow-a1"].deleting, timeout=30,
                   what="the timed-out pod seen deleting")
    assert_one_at_a_time(pods, ["beating", "flaky", "slow"])

    # Heartbeats renewed: no LeaseExpired, though the 8 s run outlived its 3 s TTL twice over.
    assert lost == [] and [a["reason"] for a in statuses["beating"]["attempts"]] == ["Completed"], statuses["beating"]
    assert own.operator.metric("cronoq_lease_expirations_total") == 0
    # The timeout counts from the container's start: not 30 s early, not 30 s late.
    (ended,) = slow["attempts"]
    ran = pods.pods["slow-a1"].deleting - pods.pods["slow-a1"].running
    assert ended["reason"] == "Timeout" and 4.0 <= ran < 7.0, (ran, ended)
    # Recorded by times moved into the operator's clock by a skew known to the Date header's
    # second: the start may be placed up to a second late (never early), not 30 s off.
    assert 3000 <= ended["durationMs"] < 7000, ended
    # The 3 s backoff is waited out, by the test's clock.
    first, second = pods.pods["flaky-a1"], pods.pods["flaky-a2"]
    assert second.added - first.ended >= 3.0, (first, second)
    assert [a["reason"] for a in statuses["flaky"]["attempts"]] == ["ExitCode", "Completed"]
