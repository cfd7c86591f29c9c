"""Faults, the network between the operator and the API server: toxiproxy (tests/support/toxiproxy.py)
forwards the operator's TCP connections to the API server and breaks them on demand. The test
itself talks to the API server directly. Over every task of every scenario: none lost, attempt
numbers never reused (numbers == 1..attempt), one Job per recorded attempt."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

import pytest

from tests.support.operator import OperatorProcess
from tests.support.tasks import Cronoq
from tests.support.toxiproxy import Proxy, Toxiproxy, server_of, through
from tests.support.waiting import wait_until

WATCHED = ("TaskPool", "Task", "TaskSchedule", "Job", "Pod", "Lease")


@dataclass
class Proxied:
    proxy: Proxy
    kubeconfig: str
    """The operator's kubeconfig: its API server is the proxy."""


@pytest.fixture
def proxied(kubeconfig, tmp_path) -> Proxied:
    with Toxiproxy.start(tmp_path / "toxiproxy.log") as toxi:
        proxy = toxi.proxy("apiserver", upstream=server_of(kubeconfig))
        yield Proxied(proxy, through(kubeconfig, proxy, tmp_path / "proxied.kubeconfig"))


@pytest.fixture
def behind(api, own_namespace, crds, proxied, tmp_path):
    """Tasks in a namespace of their own, with one operator whose every request goes through the
    proxy. Started by the test (`behind.operator.start()`), stopped afterwards."""
    proc = OperatorProcess(proxied.kubeconfig, (own_namespace,), tmp_path / "operator.log")
    yield Cronoq(api, own_namespace, proc)
    proc.stop()


def assert_nothing_lost(cq: Cronoq, names: list[str], timeout: float = 90) -> None:
    for name in names:
        status = cq.wait_phase(name, "Succeeded", timeout=timeout)
        numbers = [a["number"] for a in status["attempts"]]
        assert numbers == list(range(1, status["attempt"] + 1)), (name, numbers)
        jobs = {j.metadata.name for j in cq.jobs(name)}
        assert jobs == {f"{name}-a{n}" for n in numbers}, (name, jobs, numbers)


def log_lines(op: OperatorProcess, pattern: str) -> list[str]:
    return [line for line in op.log_path.read_text(errors="replace").splitlines() if re.search(pattern, line)]


def test_connections_reset_mid_watch_the_operator_watches_again(behind, proxied):
    """Every connection of the operator cut while attempts run: those carrying data reset (TCP
    RST, toxiproxy's reset_peer, both ways, for a second), then every one left, the quiet watches
    among them, closed by disabling the proxy for half a second. Each watch resumes, and every task
    succeeds once."""
    cq = behind
    cq.operator.start()
    cq.pool(concurrency=4, leaseTTL="0s")
    names = [f"r{i}" for i in range(10)]
    for name in names:
        cq.task(name, delay="3s", message="ok")
    wait_until(lambda: sum(cq.status(n).get("phase") == "Running" for n in names) >= 3, timeout=60,
               what="attempts running")
    with proxied.proxy.toxic("reset_peer", stream="upstream", timeout=0), \
            proxied.proxy.toxic("reset_peer", stream="downstream", timeout=0):
        time.sleep(1.0)
    proxied.proxy.cut(0.5)
    assert_nothing_lost(cq, names)
    failed = {kind for kind in WATCHED if log_lines(cq.operator, rf"{kind} watch failed")}
    assert failed == set(WATCHED), f"every watch was cut: {failed}"
    # The watches came back: a task created afterwards runs, well before a resync would see it.
    started = time.monotonic()
    cq.task("after", delay="100ms", message="ok")
    assert_nothing_lost(cq, ["after"], timeout=30)
    assert time.monotonic() - started < 20
    assert cq.operator.process.poll() is None, "the operator kept running (and leading)"


def test_two_seconds_of_latency_on_every_request(behind, proxied):
    """Every request and every answer delayed by a second each way (2 s a round trip, TLS
    handshakes included) from the start: tasks all succeed, each attempt once, and the operator
    keeps its leadership."""
    cq = behind
    with proxied.proxy.toxic("latency", stream="upstream", name="up", latency=1000), \
            proxied.proxy.toxic("latency", stream="downstream", name="down", latency=1000):
        cq.operator.start()
        cq.operator.wait_leading(timeout=60)
        cq.pool(concurrency=4, leaseTTL="0s")
        names = [f"l{i}" for i in range(8)]
        for name in names:
            cq.task(name, delay="1s", message="ok")
        assert_nothing_lost(cq, names, timeout=120)
        assert cq.operator.process.poll() is None, f"the operator exited:\n{cq.operator.tail()}"
        assert not log_lines(cq.operator, "leadership lapsed"), cq.operator.tail()
