"""Failover (DESIGN §6): two replicas compete for one Lease; only the leader acts; a killed or
frozen leader is replaced, and nothing it does afterwards lands."""
from __future__ import annotations

import signal
import time


from tests.support.tasks import TERMINAL, Cronoq
from tests.support.waiting import wait_until


def fenced(cq: Cronoq, names: list[str]) -> None:
    for name in names:
        status = cq.status(name)
        numbers = [x["number"] for x in status["attempts"]]
        assert numbers == list(range(1, status["attempt"] + 1)), (name, numbers)
        assert {j.metadata.name for j in cq.jobs(name)} == {f"{name}-a{n}" for n in numbers}, name


def test_only_the_leader_acts_and_a_killed_leader_is_replaced(pair):
    cq, a, b = pair
    assert a.leading() and not b.leading()
    cq.pool(concurrency=3, retry={"initialBackoff": "0s"})
    names = [f"w{i}" for i in range(8)]
    for i, name in enumerate(names):
        cq.task(name, delay="3s" if i < 4 else "500ms", outcome_a1="Fail" if i % 2 else "Succeed")
    wait_until(lambda: len(cq.jobs()) >= 3, timeout=30, what="attempts running")

    killed = time.monotonic()
    a.kill(signal.SIGKILL)
    b.wait_leading(timeout=40)
    took = time.monotonic() - killed

    wait_until(lambda: all(cq.status(n).get("phase") in TERMINAL for n in names), timeout=120, what="all finished")
    assert took < 25, f"the standby took {took:.1f}s to lead (lease 15s)"
    assert all(cq.status(n)["phase"] == "Succeeded" for n in names)
    fenced(cq, names)
    epochs = {cq.status(n)["epoch"] for n in names}
    assert max(epochs) >= 2, epochs


def test_a_frozen_leader_that_wakes_up_writes_nothing(pair):
    cq, a, b = pair
    cq.pool(concurrency=2)
    cq.task("before", delay="200ms")
    cq.wait_phase("before", "Succeeded")

    a.process.send_signal(signal.SIGSTOP)
    try:
        b.wait_leading(timeout=40)
        cq.task("after", delay="200ms")
        status = cq.wait_phase("after", "Succeeded")
    finally:
        a.process.send_signal(signal.SIGCONT)

    # The woken leader notices its lapsed lease and exits without writing.
    assert a.process.wait(timeout=30) != 0
    log = a.log_path.read_text()
    assert "lost leadership" in log or "refusing to write" in log
    before = cq.status("before")
    assert status["epoch"] > before["epoch"], (status, before)
    assert b.leading()
    fenced(cq, ["before", "after"])
