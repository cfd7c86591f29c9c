"""A pull worker's own metrics (worker/metrics.py), read as Prometheus reads them: from the endpoint
`serve(..., metrics_port=...)` starts, on a loopback port, while the worker's own code runs
attempts (worker/attempts.py with in-memory Leases), makes requests (worker/api.py against a
loopback HTTP server that refuses them) and renews leases (lease.LeaseKeeper on a fake clock).
The counters are the process's: each test reads what changed, under labels of its own."""
from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cronoq.apiserver.config import Connection
from cronoq.apiserver.errors import NotFound, Throttled
from cronoq.worker import Context, Permanent, metrics
from cronoq.worker.api import WorkerApi
from cronoq.worker.attempts import Attempts
from cronoq.worker.lease import LeaseKeeper, Schedule
from cronoq.worker.serve import METRICS_PORT_ENV, _number

from tests.support.operator import free_port
from tests.support.waiting import wait_until
from tests.unit.fakes import KeeperClock
from tests.unit.worker.fake_clock import WorkerClock
from tests.unit.worker.test_attempts import WORKER, Leases, open_gate, task
from tests.unit.worker.test_lease import FAIL, OK, Script

Sample = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def endpoint() -> str:
    return f"http://127.0.0.1:{metrics.serve_metrics(0, '127.0.0.1')}/metrics"


def scrape(url: str) -> Sample:
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(sample: Sample, name: str, **labels: str) -> float:
    return sample.get((name, tuple(sorted(labels.items()))), 0.0)


def test_the_endpoint_serves_attempts_by_outcome_durations_in_flight_and_free_slots(endpoint: str) -> None:
    release = threading.Event()
    pool = {"namespace": "jobs", "pool": "metered"}

    def handler(ctx: Context) -> str:
        if ctx.name == "c":
            raise Permanent("bad input")
        release.wait(10)
        return "sent"

    leases = Leases()
    served = Attempts(pool="metered", worker=WORKER, namespace="jobs", ttl=1.0, handler=handler, concurrency=3,
                      coordination=leases, custom=object(), clock=WorkerClock(), gate=open_gate())
    gone = metrics.live(metrics.Room("jobs", "metered", served.in_flight, served.free))
    try:
        with served.lock:
            for name in ("a", "b"):
                served.start(task(name))
        now = scrape(endpoint)
        assert value(now, "cronoq_worker_in_flight", **pool) == 2
        assert value(now, "cronoq_worker_free_slots", **pool) == 1
        release.set()
        wait_until(lambda: len(leases.reports) == 2, timeout=10, what="the reports")
        with served.lock:
            served.start(task("c"))
        wait_until(lambda: len(leases.reports) == 3 and served.in_flight() == 0, timeout=10, what="the third report")
        after = scrape(endpoint)
        assert value(after, "cronoq_worker_attempts_total", outcome="success", **pool) == 2
        assert value(after, "cronoq_worker_attempts_total", outcome="permanent", **pool) == 1
        assert value(after, "cronoq_worker_handler_duration_seconds_count", outcome="success", **pool) == 2
        assert value(after, "cronoq_worker_handler_duration_seconds_bucket", outcome="permanent", le="+Inf",
                     **pool) == 1
        assert value(after, "cronoq_worker_in_flight", **pool) == 0
        assert value(after, "cronoq_worker_free_slots", **pool) == 3
        served.draining.set()
        assert value(scrape(endpoint), "cronoq_worker_free_slots", **pool) == 0, "a draining worker takes nothing"
    finally:
        release.set()
        served.shutdown()
        gone()
    assert ("cronoq_worker_in_flight", tuple(sorted(pool.items()))) not in scrape(endpoint), "a stopped worker's gone"


@pytest.fixture
def refusing() -> Iterator[str]:
    """An API server that throttles every PATCH (429, Retry-After 2) and knows no object (404)."""

    class Refuse(BaseHTTPRequestHandler):
        def answer(self, code: int, **headers: str) -> None:
            body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d}' % code
            self.send_response(code)
            for name, text in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, text)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PATCH(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.answer(429, **{"Retry-After": "2"})

        def do_GET(self) -> None:
            self.answer(404)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_refused_and_failed_requests_are_counted_by_code(endpoint: str, refusing: str) -> None:
    before = scrape(endpoint)
    api = WorkerApi(Connection(host=refusing))
    for _ in range(2):
        with pytest.raises(Throttled):
            api.patch_namespaced_lease("w", "jobs", {"metadata": {}}, _request_timeout=5)
    with pytest.raises(NotFound):
        api.get_namespaced_custom_object("cronoq.io", "v1alpha1", "jobs", "tasks", "t", _request_timeout=5)
    with pytest.raises(NotFound):
        list(api.watch_namespaced_custom_object("cronoq.io", "v1alpha1", "jobs", "tasks", field_selector=None,
                                                resource_version="1", timeout_seconds=1, _request_timeout=5))
    with pytest.raises(Exception):
        WorkerApi(Connection(host=f"http://127.0.0.1:{free_port()}")).delete_namespaced_lease(
            "w", "jobs", _request_timeout=2)
    after = scrape(endpoint)
    for code, more in (("429", 2), ("404", 2), ("network", 1)):
        assert value(after, "cronoq_worker_api_errors_total", code=code) - \
            value(before, "cronoq_worker_api_errors_total", code=code) == more, code


def test_a_renewal_that_lands_with_less_than_half_the_ttl_left_is_counted_late(endpoint: str) -> None:
    before = value(scrape(endpoint), "cronoq_worker_lease_renewals_late_total", lease="attempt")
    clock = KeeperClock()
    # ttl 3: sent at 0 (ok, good until 3), 1 (failed), 2 (ok with 1s left: late), 3 (ok, on time)
    script = Script(clock, OK, FAIL(), OK, OK)
    script.keeper = LeaseKeeper(3, script, clock=clock, wait=clock.sleep, on_late=metrics.late("attempt"))
    assert script.keeper.run() is None
    assert script.sent == [0, 1, 2, 3]
    assert value(scrape(endpoint), "cronoq_worker_lease_renewals_late_total", lease="attempt") - before == 1


def test_late_means_less_than_half_the_ttl_left_when_sent() -> None:
    schedule = Schedule(6, start=0)
    assert not schedule.late(0) and not schedule.late(3) and schedule.late(3.5) and schedule.late(7)


@pytest.mark.parametrize("text, port", [(None, None), ("", None), ("9102", 9102)])
def test_the_port_comes_from_the_environment_when_given(text: str | None, port: int | None) -> None:
    assert _number(METRICS_PORT_ENV, text, None, 1, 65535) == port


@pytest.mark.parametrize("text", ["0", "70000", "http"])
def test_a_port_that_is_no_port_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=METRICS_PORT_ENV):
        _number(METRICS_PORT_ENV, text, None, 1, 65535)
