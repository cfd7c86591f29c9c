"""A pull worker's attempts (worker/attempts.py): which hand-overs start one and which abort one, one
start per attempt however often the watch repeats itself, and a report made by the same mapping the
Job-mode runner uses (runner.outcome). No cluster: the Leases are a small in-memory stand-in; the
worker's clock is fake (nothing here sleeps)."""
from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Callable

import pytest

from cronoq.pod_protocol import Annotation
from cronoq.pod_protocol.handover import HandOver
from cronoq.pod_protocol.tracecontext import TaskTrace
from cronoq.worker import Context, Permanent, Retryable
from cronoq.worker.attempts import Attempts
from cronoq.worker.lease import Gate
from cronoq.worker.runner import outcome

from tests.support.waiting import wait_until
from tests.unit.worker.fake_clock import WorkerClock

WORKER = "w-1"


class Leases:
    """Attempt Leases as an API server keeps them: created with their report when short."""

    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}

    def create_namespaced_lease(self, namespace: str, body: dict, _request_timeout: float = 0) -> None:
        text = (body["metadata"].get("annotations") or {})[Annotation.REPORT]
        self.reports[body["metadata"]["name"]] = json.loads(text)


def task(name: str = "t", number: int = 1, worker: str = WORKER, **record: Any) -> HandOver:
    return HandOver.of_task({"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": {"payload": {"n": 1}},
                             "status": {"phase": "Running", "attempt": number, "attempts": [
                                 {"number": number, "worker": worker, "leaseId": f"e1-a{number}",
                                  "leaseTTLMs": 0, **record}]}})


def open_gate() -> Gate:
    gate = Gate()
    gate.open()  # the worker's own Lease renews: nothing holds back
    return gate


def attempts(handler: Callable[[Context], Any], leases: Leases) -> Attempts:
    return Attempts(pool="mail", worker=WORKER, namespace="jobs", ttl=1.0, handler=handler, concurrency=2,
                    coordination=leases, custom=object(), clock=WorkerClock(), gate=open_gate())


@pytest.fixture
def leases():
    return Leases()


def handlers() -> dict[str, Callable[[Context], Any]]:
    async def coroutine(ctx: Context) -> dict:
        return {"n": ctx.payload["n"]}

    def permanent(ctx: Context) -> None:
        raise Permanent("bad input")

    def retry_later(ctx: Context) -> None:
        raise Retryable("busy", retry_after=7)

    def crash(ctx: Context) -> None:
        raise KeyError("gone")

    return {"value": lambda ctx: "sent", "none": lambda ctx: None, "coroutine": coroutine, "permanent": permanent,
            "retryable": retry_later, "crash": crash}


@pytest.mark.parametrize("kind", list(handlers()))
def test_a_served_attempt_is_reported_as_the_job_mode_runner_reports_it(kind: str, leases: Leases) -> None:
    handler = handlers()[kind]
    served = attempts(handler, leases)
    with served.lock:
        run = served.start(task())
    wait_until(lambda: "t-a1.w-1" in leases.reports, timeout=10, what="the report")
    served.shutdown()
    expected = outcome(handler, run.context)
    assert leases.reports["t-a1.w-1"] == json.loads(expected.encode()), "the one mapping, in a pod and a worker"


def test_a_hand_over_starts_its_attempt_once_however_often_the_watch_repeats_it(leases: Leases) -> None:
    calls: list[int] = []
    release = threading.Event()

    def handler(ctx: Context) -> str:
        calls.append(ctx.attempt)
        release.wait(10)
        return "done"

    served = attempts(handler, leases)
    for _ in range(3):
        served.seen(task())
    wait_until(lambda: calls == [1], timeout=10, what="the handler started")
    release.set()
    wait_until(lambda: "t-a1.w-1" in leases.reports, timeout=10, what="the report")
    served.seen(task())  # a replayed event after it finished
    served.seen(task(worker="w-2", name="other"))  # handed to another worker
    served.seen(task(name="ended", outcome="Retryable"))  # already ended
    served.shutdown()
    assert calls == [1] and list(leases.reports) == ["t-a1.w-1"]


@pytest.mark.parametrize("traced", [True, False])
def test_a_tracing_worker_hands_its_handler_the_attempt_spans_context(traced: bool, leases: Leases) -> None:
    seen: list[str | None] = []
    served = Attempts(pool="mail", worker=WORKER, namespace="jobs", ttl=1.0, handler=lambda ctx: seen.append(
        ctx.traceparent), concurrency=2, coordination=leases, custom=object(), clock=WorkerClock(), gate=open_gate(),
        traced=traced)
    with served.lock:
        served.start(task(number=2))
    wait_until(lambda: "t-a2.w-1" in leases.reports, timeout=10, what="the report")
    served.shutdown()
    assert seen == [TaskTrace.of("uid-t").attempt(2).traceparent if traced else None]


@pytest.mark.parametrize("change, why", [
    (lambda: (task(number=2), False), "the operator ended it (a newer attempt)"),
    (lambda: (task(outcome="Retryable", reason="Timeout"), False), "the operator ended it (Timeout)"),
    (lambda: (task(), True), "the task left Running or was deleted"),
])
def test_a_hand_over_that_ended_aborts_the_running_attempt(change, why: str, leases: Leases) -> None:
    started, aborted = threading.Event(), threading.Event()

    async def handler(ctx: Context) -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            aborted.set()
            raise
        return "never"

    served = attempts(handler, leases)
    served.seen(task())
    assert started.wait(10), "the handler runs"
    seen, deleted = change()
    served.seen(seen, deleted=deleted)
    wait_until(lambda: "t-a1.w-1" in leases.reports, timeout=10, what="the aborted attempt's report")
    assert aborted.is_set(), "a coroutine handler is cancelled"
    assert leases.reports["t-a1.w-1"] == {"outcome": "retryable", "message": f"aborted: {why}"}
    with served.lock:
        assert list(served.running) == ([("uid-t", 2)] if seen.attempt == 2 else []), "a newer attempt handed over runs"
    served.abort_all("the test ends")  # shutdown() lets go of the handlers' threads, it does not stop them
    wait_until(lambda: not served.running, timeout=10, what="every handler ended")
    served.shutdown()


def test_a_listing_aborts_what_it_no_longer_holds(leases: Leases) -> None:
    release = threading.Event()

    def handler(ctx: Context) -> str:
        release.wait(10)
        return "late"

    served = attempts(handler, leases)
    served.seen(task("kept"))
    served.seen(task("dropped"))
    wait_until(lambda: len(served.running) == 2, timeout=10, what="both running")
    served.listed(frozenset({"uid-kept"}))
    with served.lock:
        why = {key[0]: run.abort.why for key, run in served.running.items()}
        stale = {key[0]: run.stale for key, run in served.running.items()}
    release.set()
    served.shutdown()
    assert why == {"uid-kept": "", "uid-dropped": "the operator ended it while the worker's watch was broken"}
    assert stale == {"uid-kept": False, "uid-dropped": True}


def test_the_lease_lapses_a_ttl_after_the_operator_handed_it_over_not_after_the_worker_saw_it(leases: Leases) -> None:
    served = attempts(lambda ctx: None, leases)
    clock = served.clock
    assert isinstance(clock, WorkerClock)
    handed = clock.wall().isoformat().replace("+00:00", "Z")
    clock.t += 4  # the watch backed off: the worker sees the hand-over 4 s late
    record = {"dispatchedAt": handed, "leaseTTLMs": 10_000}
    with served.lock:
        late = served.start(task(**record))
    plain = task(name="u", leaseTTLMs=10_000)
    with served.lock:
        undated = served.start(plain)
    served.shutdown()
    assert late.alive_until == pytest.approx(clock.now() + 6), "10 s after the hand-over, 4 s of them gone"
    assert undated.alive_until == pytest.approx(clock.now() + 10), "a record without the time: a TTL from now"
