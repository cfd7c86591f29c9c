"""A pull worker's drain (issue 37, DESIGN §17): after SIGTERM it goes on renewing its own Lease
and its attempts' Leases until each attempt ends or grace passes, reports what finished as the
outcome and what did not as aborted, and only then deletes its Lease; losing its Lease still fences.

No cluster: Leases live in a small in-memory stand-in for the coordination API (create, JSON or
merge patch, delete, with the holder test a real API server applies), and the operator's side is
played by the test. The drain runs on a fake clock of its own (the worker's `drain_clock`) that moves
only when the drain waits; the Leases' keepers renew on the worker's clock, real time, with short
TTLs: their threads and the handlers' run while the drain's clock stands still."""
from __future__ import annotations

import copy
import threading
import time
from typing import Any

import pytest
from cronoq.apiserver.errors import error_of

from cronoq.pod_protocol import Annotation
from cronoq.worker import Context
from cronoq.pod_protocol.handover import HandOver
from cronoq.worker.lifecycle import Worker

from tests.support.waiting import wait_until

NAMESPACE, POOL, WORKER = "jobs", "mail", "w-1"
GRACE = 30.0


class Leases:
    """The coordination API's Leases, in memory, with a journal of writes on the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.store: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[float, str, str]] = []
        """(fake time, verb, lease name): verb is create, renew, report, drain or delete."""
        self.on_report = lambda name: None
        self._lock = threading.Lock()

    def create_namespaced_lease(self, namespace: str, body: dict, _request_timeout: float = 0) -> None:
        with self._lock:
            name = body["metadata"]["name"]
            if name in self.store:
                raise error_of(409, "Conflict")
            self.store[name] = copy.deepcopy(body)
            reported = Annotation.REPORT in (body["metadata"].get("annotations") or {})
            self.writes.append((self.clock.t, "report" if reported else "create", name))
        if reported:
            self.on_report(name)

    def patch_namespaced_lease(self, name: str, namespace: str, patch: Any, _content_type: str = "",
                               _request_timeout: float = 0) -> None:
        with self._lock:
            lease = self.store.get(name)
            if lease is None:
                raise error_of(404, "Not Found")
            if isinstance(patch, dict):  # a merge patch: the capacity annotation
                lease["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
                self.writes.append((self.clock.t, "drain", name))
                return
            reported = False
            for op in patch:
                if op["op"] == "test" and lease["spec"]["holderIdentity"] != op["value"]:
                    raise error_of(422, "Unprocessable Entity")
                if op["path"] == "/metadata/annotations":
                    lease["metadata"]["annotations"] = {**(lease["metadata"].get("annotations") or {}), **op["value"]}
                    reported = True
            self.writes.append((self.clock.t, "report" if reported else "renew", name))
        if reported:
            self.on_report(name)

    def delete_namespaced_lease(self, name: str, namespace: str, _request_timeout: float = 0) -> None:
        with self._lock:
            self.store.pop(name, None)
            self.writes.append((self.clock.t, "delete", name))

    def taken(self, name: str) -> None:
        """Another holder deleted the Lease (what a lost worker Lease looks like)."""
        with self._lock:
            self.store.pop(name, None)

    def count(self, verb: str, name: str, since: float = 0.0) -> int:
        return sum(1 for t, v, n in list(self.writes) if v == verb and n == name and t >= since)

    def report(self, name: str) -> dict[str, Any]:
        import json

        return json.loads(self.store[name]["metadata"]["annotations"][Annotation.REPORT])


class FakeClock:
    """Monotonic seconds that move only when the drain waits; each wait lets the test act first."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.waits = 0
        self.on_wait = lambda now: None

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "the drain must not spin"
        self.waits += 1
        self.on_wait(self.t)
        self.t += seconds
        time.sleep(0.002)  # real time for the handlers' and keepers' threads


class Handlers:
    """Handlers that end when the test says so; `stuck` ones only when aborted."""

    def __init__(self) -> None:
        self.release = {"quick": threading.Event()}
        self.started: set[str] = set()
        self.ended: dict[str, str] = {}

    def __call__(self, ctx: Context) -> str:
        self.started.add(ctx.name)
        while True:
            if ctx.name in self.release and self.release[ctx.name].wait(0.01):
                self.ended[ctx.name] = "returned"
                return f"{ctx.name} done"
            if ctx.name not in self.release and ctx.aborted:
                self.ended[ctx.name] = "abandoned"
                return "abandoned, yet returned"  # must not become the outcome


class Fenced(Exception):
    pass


class Scripted(Worker):
    """The worker with the operator's hand-overs fed in by the test instead of a watch, and its
    fence recorded instead of ending the process."""

    tasks: list[dict[str, Any]] = []
    fenced: dict[str, str] = {}

    def _follow(self) -> None:
        for task in self.tasks:
            self.attempts.seen(HandOver.of_task(task))
        self.done.wait()

    def _fenced(self):  # type: ignore[override]
        self.attempts.abort_all(f"the worker's Lease was lost: {self.lost}")
        with self.attempts.lock:
            self.fenced = {run.context.name: run.abort.why for run in self.attempts.running.values()}
        raise Fenced(self.lost)  # the real worker ends the process here (exit 3)


def task(name: str, lease_ttl_ms: int = 600) -> dict[str, Any]:
    """A task handed to this worker, its attempt's lease TTL stamped on the record by the operator."""
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": {}},
            "spec": {"pool": POOL, "payload": {}},
            "status": {"phase": "Running", "attempt": 1,
                       "attempts": [{"number": 1, "worker": WORKER, "leaseId": f"e1-{name}",
                                     "leaseTTLMs": lease_ttl_ms}]}}


def lease_of(name: str) -> str:
    return f"{name}-a1.{WORKER}"


@pytest.fixture
def world():
    clock = FakeClock()
    leases = Leases(clock)
    handlers = Handlers()
    tasks = [task("quick"), task("stuck")]
    worker = Scripted(POOL, handlers, concurrency=4, namespace=NAMESPACE, name=WORKER, ttl=0.3, grace=GRACE,
                      kubeconfig=None, coordination=leases, custom=object(), drain_clock=clock)
    worker.tasks = tasks
    by_lease = {lease_of(t["metadata"]["name"]): t for t in tasks}
    # The operator records a report and the task leaves Running: the worker's watch says DELETED.
    leases.on_report = lambda name: worker.attempts.seen(HandOver.of_task(by_lease[name]), deleted=True)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["code"] = worker.run()
        except Fenced as err:
            outcome["fenced"] = str(err)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    wait_until(lambda: handlers.started == {"quick", "stuck"}, timeout=10, what="both handlers started")
    yield clock, leases, handlers, worker, runner, outcome
    for event in handlers.release.values():
        event.set()
    worker.stopping.set()
    worker.done.set()
    worker.attempts.shutdown()


def test_a_draining_worker_renews_its_leases_reports_in_grace_results_and_aborts_the_rest(world) -> None:
    clock, leases, handlers, worker, runner, outcome = world
    seen: dict[str, float] = {}

    def operator_waits(now: float) -> None:
        if "renewing" not in seen:  # both Leases are still renewed well after SIGTERM
            since = seen["drain"] = now
            wait_until(lambda: leases.count("renew", WORKER, since) >= 2 and leases.count("renew", lease_of("stuck"), since)
                       >= 2, timeout=10, what="the worker's and the running attempt's Lease renewed while draining")
            seen["renewing"] = now
        if now >= seen["drain"] + 10 and "released" not in seen:  # one handler ends within grace
            handlers.release["quick"].set()
            wait_until(lambda: leases.count("report", lease_of("quick")), timeout=10, what="quick reported")
            seen["released"] = now

    clock.on_wait = operator_waits
    worker.drain()
    runner.join(20)

    assert outcome == {"code": 0}
    drain_at = seen["drain"]
    assert leases.count("drain", WORKER) == 1 and leases.count("renew", WORKER, drain_at) >= 2
    assert leases.report(lease_of("quick")) == {"outcome": "success", "message": "", "output": "quick done"}
    assert leases.report(lease_of("stuck")) == {"outcome": "retryable",
                                                "message": "aborted: the worker stopped (grace 30s passed)"}
    (quick_at,) = [t for t, v, n in leases.writes if v == "report" and n == lease_of("quick")]
    (stuck_at,) = [t for t, v, n in leases.writes if v == "report" and n == lease_of("stuck")]
    assert drain_at + 10 <= quick_at < drain_at + GRACE <= stuck_at < drain_at + GRACE + 1
    own = [(t, v) for t, v, n in leases.writes if n == WORKER]
    assert own[-1] == (stuck_at, "delete") and own[-2][1] == "renew", "renewed up to the end, deleted last"
    wait_until(lambda: handlers.ended.get("stuck") == "abandoned", timeout=10, what="the stuck handler saw the abort")
    worker.attempts.executor.shutdown(wait=True)
    assert leases.count("report", lease_of("stuck")) == 1, "its late return was dropped, not reported"
    assert leases.report(lease_of("stuck"))["outcome"] == "retryable"
    assert [n for _, v, n in leases.writes if v == "delete"] == [WORKER], "no write after the Lease went"
    assert leases.writes[-1][1] == "delete"


def test_a_drain_ends_as_soon_as_nothing_runs(world) -> None:
    clock, leases, handlers, worker, runner, outcome = world
    handlers.release["stuck"] = threading.Event()
    start = clock.t
    clock.on_wait = lambda now: [event.set() for event in handlers.release.values()] if now >= start + 2 else None
    worker.drain()
    runner.join(20)

    assert outcome == {"code": 0}
    assert {n: leases.report(n)["outcome"] for n in (lease_of("quick"), lease_of("stuck"))} == {
        lease_of("quick"): "success", lease_of("stuck"): "success"}
    assert clock.t < start + GRACE / 2, "no wait for grace once every attempt ended and the operator recorded it"
    assert leases.writes[-1] == (clock.t, "delete", WORKER)


def test_a_worker_that_loses_its_lease_while_draining_still_fences(world) -> None:
    clock, leases, handlers, worker, runner, outcome = world
    start = clock.t

    def lease_taken(now: float) -> None:
        if WORKER in leases.store:
            leases.taken(WORKER)
            wait_until(lambda: worker.lost is not None, timeout=10, what="the next renewal finds the Lease gone")

    clock.on_wait = lease_taken
    worker.drain()
    runner.join(20)

    assert outcome["fenced"].startswith(f"the Lease {NAMESPACE}/{WORKER} is gone")
    assert clock.t < start + 1, "fenced at once, not after grace"
    assert sorted(worker.fenced) == ["quick", "stuck"], "every attempt aborted"
    assert all(why.startswith(f"the worker's Lease was lost: the Lease {NAMESPACE}/{WORKER} is gone")
               for why in worker.fenced.values())
    assert leases.count("delete", WORKER) == 0, "a fenced worker leaves its Lease to whoever took it"
