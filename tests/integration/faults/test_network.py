"""Faults, the network between the operator and the API server: toxiproxy (tests/support/toxiproxy.py)
forwards the operator's TCP connections to the API server and breaks them on demand. The test
itself talks to the API server directly. Over every task of every scenario: none lost, attempt
numbers never reused (numbers == 1..attempt), one Job per recorded attempt."""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

import pytest

from tests.support.faults import assert_nothing_lost, running_burst
from tests.support.operator import OperatorProcess
from tests.support.podwatch import PodWatch
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


def log_lines(op: OperatorProcess, pattern: str) -> list[str]:
    return [line for line in op.log_path.read_text(errors="replace").splitlines() if re.search(pattern, line)]


def test_connections_reset_mid_watch_the_operator_watches_again(behind, proxied):
    """Every connection of the operator cut while attempts run: those carrying data reset (TCP
    RST, toxiproxy's reset_peer, both ways, for a second), then every one left, the quiet watches
    among them, closed by disabling the proxy for half a second. Each watch resumes, and every task
    succeeds once."""
    cq = behind
    cq.operator.start()
    names = running_burst(cq)
    with proxied.proxy.toxic("reset_peer", stream="upstream", timeout=0), \
            proxied.proxy.toxic("reset_peer", stream="downstream", timeout=0):
        time.sleep(1.0)
    proxied.proxy.cut(0.5)
    assert_nothing_lost(cq, names, timeout=90)
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


class Arrivals:
    """A watch of the test's own (straight to the API server, not through the proxy): when, by the
    test's clock, each object of a kind in the namespace was first seen and each status change."""

    def __init__(self, api, namespace: str) -> None:
        from kubernetes import client

        self.batch, self.custom, self.namespace = client.BatchV1Api(api), client.CustomObjectsApi(api), namespace
        self.jobs: dict[str, float] = {}
        self.statuses: list[tuple[float, str, int]] = []
        self.recorded = threading.Event()
        """Set once a task's status records an attempt (its Job create follows at once)."""
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._watch_jobs, daemon=True),
                         threading.Thread(target=self._watch_tasks, daemon=True)]

    def __enter__(self) -> Arrivals:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def _watch_jobs(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            for event in watch.Watch().stream(self.batch.list_namespaced_job, self.namespace, timeout_seconds=2):
                self.jobs.setdefault(event["object"].metadata.name, time.monotonic())

    def _watch_tasks(self) -> None:
        from kubernetes import watch

        from tests.support.tasks import GROUP, VERSION
        seen: dict[str, str] = {}
        while not self._stop.is_set():
            for event in watch.Watch().stream(self.custom.list_namespaced_custom_object, GROUP, VERSION,
                                              self.namespace, "tasks", timeout_seconds=2):
                obj = event["object"]
                status = repr(obj.get("status"))
                name = obj["metadata"]["name"]
                if obj.get("status") and seen.get(name) != status:
                    seen[name] = status
                    self.statuses.append((time.monotonic(), name, obj["status"].get("attempt", 0)))
                    if obj["status"].get("attempt"):
                        self.recorded.set()


def test_answers_lost_after_the_server_wrote(behind, proxied):
    """Every byte the API server sends the operator dropped for 2 s (toxiproxy's `timeout`
    toxic downstream, then the connections closed) in the middle of dispatching a burst of 40
    tasks: the operator's requests still reach the server and are carried out, but their answers
    never come back. To catch Job creates in flight, requests take 0.5 s to reach the server (a
    `latency` toxic upstream), and each drop starts as soon as the test sees a new status that
    records an attempt, whose Job create is then on its way; up to 4 windows per burst and up to 3
    bursts of 40, until one catches a Job create (timing on a busy machine). The test's own watch (not through
    the proxy) sees which Jobs and task statuses the server wrote inside the window: each is a
    write whose answer was lost. A lost Job create is retried and its AlreadyExists adopted (the
    Job of the recorded attempt, never a new attempt number); a lost status PUT is resent by the
    client, refused (409) and re-read, never recorded twice. The test fails if no Job create fell
    inside the window (the path not exercised). The leader may lapse (its renewals lost too) and
    exit; it is restarted as its Deployment would, which the invariants must survive as well."""
    cq = behind
    cq.operator.supervised = True
    cq.operator.start()
    cq.pool(concurrency=40, leaseTTL="0s")
    names: list[str] = []
    windows: list[tuple[float, float]] = []
    with Arrivals(cq.api, cq.namespace) as seen, \
            proxied.proxy.toxic("latency", stream="upstream", latency=500):
        for burst in range(3):  # another burst if no window caught a Job create (timing on a busy machine)
            batch = [f"b{i}" if burst == 0 else f"b{i}-{burst}" for i in range(40)]
            names += batch
            for name in batch:
                cq.task(name, delay="2s", message="ok")
            for _ in range(4):
                seen.recorded.clear()
                if not seen.recorded.wait(timeout=20):
                    break
                with proxied.proxy.toxic("timeout", stream="downstream", timeout=0):
                    dropped_from = time.monotonic() + 0.1  # the toxic is on every connection by then
                    time.sleep(2.0)
                    windows.append((dropped_from, time.monotonic()))
                if any(a <= t <= b for t in seen.jobs.values() for a, b in windows):
                    break
            if any(a <= t <= b for t in seen.jobs.values() for a, b in windows):
                break
        assert_nothing_lost(cq, names, timeout=90)
    lost_jobs = sorted(n for n, t in seen.jobs.items() if any(a <= t <= b for a, b in windows))
    lost_statuses = sorted(n for t, n, _ in seen.statuses if any(a <= t <= b for a, b in windows))
    print(f"{len(windows)} windows; Job creates whose answers were lost: {lost_jobs}; status writes: {lost_statuses}")
    assert lost_jobs, f"no Job was created while answers were dropped: the path was not exercised ({seen.jobs})"
    print(f"operator restarts: {cq.operator.restarts}")


def test_a_leader_cut_off_for_30s_is_replaced_and_nothing_runs_twice(api, own_namespace, crds, kubeconfig,
                                                                    proxied, tmp_path):
    """Two replicas over one Lease; only the leader's (a's) traffic goes through the proxy, which
    swallows every byte both ways for 30 s (connections stay open, answers never come). a stops
    writing and exits within its renew deadline (exit code 3: restarted as a follower by its
    Deployment); b takes over once the Lease expires by its own clock; afterwards no attempt ran
    twice: attempt numbers 1..n, one Job per attempt, one pod per Job, and b's epoch above a's."""
    lease = (own_namespace, "cronoq-leader")
    a = OperatorProcess(proxied.kubeconfig, (own_namespace,), tmp_path / "a.log", lease=lease, pod_name="replica-a")
    b = OperatorProcess(kubeconfig, (own_namespace,), tmp_path / "b.log", lease=lease, pod_name="replica-b")
    try:
        a.start()
        a.wait_leading()
        b.start()
        cq = Cronoq(api, own_namespace, a)
        cq.pool(concurrency=4, leaseTTL="0s")
        names = [f"c{i}" for i in range(10)]
        with PodWatch(api, own_namespace) as pods:
            for name in names:
                cq.task(name, delay="3s", message="ok")
            wait_until(lambda: sum(cq.status(n).get("phase") == "Running" for n in names) >= 3, timeout=60,
                       what="attempts running")
            epoch_a = max(cq.status(n).get("epoch", 0) for n in names)
            with proxied.proxy.toxic("timeout", stream="downstream", name="down", timeout=0), \
                    proxied.proxy.toxic("timeout", stream="upstream", name="up", timeout=0):
                cut = time.monotonic()
                code = a.process.wait(timeout=30)
                exited = time.monotonic() - cut
                assert code == 3, f"a exited {code}:\n{a.tail()}"
                assert exited <= 10 + 3, f"a gave up {exited:.1f}s after the cut; its renew deadline is 10s"
                b.wait_leading(timeout=30)
                took_over = time.monotonic() - cut
                time.sleep(max(0.0, 30 - (time.monotonic() - cut)))
            assert_nothing_lost(cq, names, timeout=90)
        assert all(len([j for j in pods.pods if j.startswith(f"{n}-a")]) == cq.status(n)["attempt"] for n in names)
        epochs = {cq.status(n).get("epoch", 0) for n in names}
        assert max(epochs) > epoch_a, (epochs, epoch_a)
        assert any("leadership lapsed" in line for line in a.log_path.read_text().splitlines())
        print(f"a exited {exited:.1f}s after the cut; b led {took_over:.1f}s after it")
    finally:
        a.stop()
        b.stop()
