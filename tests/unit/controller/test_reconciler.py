"""The Controller between the watches and the API server, with a fake writer and a fake clock:
what it writes, in which order, and what it does when a write conflicts or is refused. Time passes
only when a test advances the clock."""
from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from cronoq.apiserver.errors import Conflict
from cronoq.kube.writes import Rejected
from cronoq.controller.workqueue import PoolWork, TaskWork, WorkKey

from tests.unit.builders import T0
from tests.unit.fakes import NS, QUOTA_REFUSAL, FakeWriter, World, counter, pod, pool, task


def test_an_attempt_is_recorded_before_its_job_and_counted_once_when_it_ends() -> None:
    async def scenario() -> None:
        world = World()
        world.submit("a")
        await world.settle()
        calls = world.writer.calls
        assert calls.index(("status", "a")) < calls.index(("job", "a-a1")), calls
        assert world.status("a")["phase"] == "Running" and world.status("a")["attempt"] == 1
        assert calls.count(("job", "a-a1")) == 1

        before = counter("cronoq_tasks_total", namespace=NS, pool="p", status="succeeded")
        world.controller.intake.on_pod(None, pod("a-a1", "a", 0))
        await world.settle()
        world.controller.queue.add(TaskWork(NS, "a"))  # a resync: nothing left to do, nothing counted
        await world.settle()
        assert world.status("a")["phase"] == "Succeeded"
        assert counter("cronoq_tasks_total", namespace=NS, pool="p", status="succeeded") == before + 1
        assert [c for c in world.writer.calls if c[0] == "job"] == [("job", "a-a1")]
    asyncio.run(scenario())


def test_the_job_is_built_from_the_pool_the_decision_was_made_with() -> None:
    """A pool changing while the attempt's status is written changes neither its Job nor its lease."""
    class PoolChangingWriter(FakeWriter):
        def __init__(self, world: World) -> None:
            super().__init__()
            self.world = world

        async def replace_task_status(self, raw: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
            changed = pool(template={"podMetadata": {"labels": {"team": "after"}}})
            changed["metadata"]["resourceVersion"] = "9"
            self.world.controller.intake.on_pool(None, changed)
            return await super().replace_task_status(raw, status)

    async def scenario() -> None:
        world = World()
        world.controller.intake.on_pool(None, pool(template={"podMetadata": {"labels": {"team": "before"}}}))
        writer = world.writer = PoolChangingWriter(world)
        world.controller.writer = world.controller.applier.writer = writer
        world.submit("a")
        await world.settle()
        job = writer.jobs["a-a1"]
        attempt = world.status("a")["attempts"][0]
        assert job["spec"]["template"]["metadata"]["labels"]["team"] == "before"
        assert job["metadata"]["labels"]["cronoq.io/lease-id"] == attempt["leaseId"] == "e1-a1"
    asyncio.run(scenario())


def test_a_duplicate_of_a_finished_original_reads_it_once_and_ends_with_its_output() -> None:
    async def scenario() -> None:
        world = World()
        original = task("orig")
        original["spec"]["key"] = "k"
        original["status"] = {"phase": "Succeeded", "attempt": 1, "finishedAt": "2026-12-03T11:59:59Z",
                              "output": "42", "outputAvailable": True, "message": "succeeded on attempt 1"}
        world.writer.tasks["orig"] = copy.deepcopy(original)
        world.controller.intake.on_task(None, original)
        assert world.controller.store.tasks[(NS, "orig")].finished is not None, "kept slim: no output in memory"
        world.submit("waits", key="other")
        await world.settle()
        assert ("read", "orig") not in world.writer.calls
        world.submit("dup", key="k")
        await world.settle()
        assert world.writer.calls.count(("read", "orig")) == 1, world.writer.calls
        status = world.status("dup")
        assert (status["phase"], status["output"], status["duplicateOf"]) == ("Succeeded", "42", "orig")
        assert "succeeded on attempt 1" in status["message"]
        assert ("job", "dup-a1") not in world.writer.calls
    asyncio.run(scenario())


def test_a_pools_changed_job_retention_retimes_the_finished_tasks_jobs_once_and_the_hot_path_never() -> None:
    async def scenario() -> None:
        world = World(concurrency=2)
        world.submit("a")
        world.submit("own", jobRetention="2h")
        await world.settle()
        world.controller.intake.on_pod(None, pod("a-a1", "a", 0))
        world.controller.intake.on_pod(None, pod("own-a1", "own", 0))
        await world.settle()
        assert world.status("a")["phase"] == "Succeeded" and world.status("own")["phase"] == "Succeeded"
        assert not [c for c in world.writer.calls if c[0] == "retime-job"]  # created at the value in effect

        changed = pool(2, jobRetention="0s")
        changed["metadata"]["resourceVersion"] = "5"
        world.controller.intake.on_pool(None, changed)
        await world.settle()
        # The finished task's Job is brought to the pool's new value; the task's own value wins.
        assert [c for c in world.writer.calls if c[0] == "retime-job"] == [("retime-job", "a-a1=0")]
        assert world.writer.jobs["a-a1"]["spec"]["ttlSecondsAfterFinished"] == 0

        world.controller.intake.on_job(None, copy.deepcopy(world.writer.jobs["a-a1"]))  # its watch event
        for name in ("a", "own"):  # and a resync
            world.controller.queue.add(TaskWork(NS, name))
        await world.settle()
        assert [c for c in world.writer.calls if c[0] == "retime-job"] == [("retime-job", "a-a1=0")]
    asyncio.run(scenario())


def test_events_warnings_posts_no_event_for_a_succeeded_attempt_and_a_warning_for_a_failed_one() -> None:
    async def scenario(warnings_only: bool) -> list[tuple[str, str, str]]:
        world = World(concurrency=2, warnings_only=warnings_only)
        world.submit("a")
        world.submit("b")
        await world.settle()
        world.controller.intake.on_pod(None, pod("a-a1", "a", 0))
        world.controller.intake.on_pod(None, pod("b-a1", "b", 1))
        await world.settle()
        assert world.status("a")["phase"] == "Succeeded" and world.status("b")["attempts"][0]["outcome"] == "Retryable"
        return sorted(world.writer.events)
    assert asyncio.run(scenario(False)) == [("a", "AttemptEnded", "Normal"), ("b", "AttemptEnded", "Warning")]
    assert asyncio.run(scenario(True)) == [("b", "AttemptEnded", "Warning")]


def test_a_conflicting_status_write_is_read_again_and_decided_again_with_one_job() -> None:
    async def scenario() -> None:
        world = World()
        world.submit("a")
        world.writer.fail = [Conflict("the object has been modified")]
        await world.settle()
        calls = world.writer.calls
        assert calls[:3] == [("status-failed", "a"), ("read", "a"), ("status", "a")], calls
        assert calls.count(("job", "a-a1")) == 1 and world.status("a")["attempt"] == 1
    asyncio.run(scenario())


def test_a_refused_status_write_creates_no_job_and_gives_the_slot_back() -> None:
    async def scenario() -> None:
        world = World(concurrency=1)
        world.submit("a")
        world.writer.fail = [Rejected(422, "status.epoch: epoch may not decrease")]
        await world.settle()
        assert ("job", "a-a1") not in world.writer.calls
        world.submit("b")  # the slot granted to "a" is free again: "b" gets it
        await world.settle()
        jobs = [c for c in world.writer.calls if c[0] == "job"]
        assert jobs == [("job", "b-a1")], world.writer.calls  # had the grant leaked, nothing would run
    asyncio.run(scenario())


def test_a_failing_reconcile_is_retried_later_and_counted() -> None:
    async def scenario() -> None:
        world = World()
        world.submit("a")
        world.writer.fail = [RuntimeError("connection reset")]
        before = counter("cronoq_reconcile_retries_total", kind="task")
        await world.settle()
        assert counter("cronoq_reconcile_retries_total", kind="task") == before + 1
        assert ("job", "a-a1") not in world.writer.calls  # nothing done past the failed write
        key = TaskWork(NS, "a")
        assert world.clock.pending == [0.5] and key in world.controller.queue._timers  # the first retry: in 0.5 s
        await world.clock.advance(0.4)
        assert len(world.controller.queue) == 0, "not before its time"
        await world.clock.advance(0.1)
        assert len(world.controller.queue) == 1
        await world.settle()
        assert world.writer.calls.count(("job", "a-a1")) == 1
    asyncio.run(scenario())


def test_job_and_pod_events_that_change_no_fact_queue_no_reconcile() -> None:
    async def scenario() -> None:
        world = World()
        world.submit("a")
        await world.settle()
        assert ("job", "a-a1") in world.writer.calls
        running = pod("a-a1", "a", 0)
        running["status"] = {"phase": "Running", "containerStatuses": [
            {"name": "task", "state": {"running": {"startedAt": "2026-12-03T12:00:01Z"}}}]}
        world.controller.intake.on_pod(None, running)
        assert len(world.controller.queue) == 1  # the container started: decide again
        await world.settle()
        again = copy.deepcopy(running)
        again["metadata"]["resourceVersion"] = "301"
        again["status"]["conditions"] = [{"type": "Ready", "status": "True"}]  # not a fact cronoq keeps
        world.controller.intake.on_pod(None, again)
        assert len(world.controller.queue) == 0
        stored = copy.deepcopy(next(iter(world.controller.store.tasks[(NS, "a")].jobs.values())))
        raw_job: dict[str, Any] = {"metadata": {"name": "a-a1", "namespace": NS, "uid": stored.uid,
                                "creationTimestamp": "2026-12-03T12:00:00Z",
                                "labels": {"cronoq.io/attempt": "1", "cronoq.io/lease-id": stored.lease_id,
                                           "cronoq.io/task": "a", "cronoq.io/task-uid": "uid-a", "cronoq.io/pool": "p"}},
                   "spec": {"ttlSecondsAfterFinished": stored.ttl_after_finished},
                   "status": {"active": 1, "ready": 1}}
        world.controller.intake.on_job(None, raw_job)
        assert len(world.controller.queue) == 0, "a Job whose counts moved changes no decision"
        raw_job["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
        world.controller.intake.on_job(None, raw_job)
        assert len(world.controller.queue) == 1
    asyncio.run(scenario())


def test_a_job_refused_by_a_quota_is_retried_with_growing_delays_and_the_task_names_the_quota() -> None:
    """Issue 26, point 4e: it was retried every 5 s forever, and the task did not say why."""
    async def scenario() -> None:
        world = World()
        world.writer.job_fail = [Rejected(403, QUOTA_REFUSAL) for _ in range(3)]
        world.submit("a")
        await world.settle()
        key = TaskWork(NS, "a")
        queue = world.controller.queue
        status = world.status("a")
        running = next(c for c in status["conditions"] if c["type"] == "Running")
        assert running["reason"] == "JobRefused" and "ResourceQuota tenant-jobs" in status["message"]
        delays = [queue._timers[key].when() - world.clock.monotonic()]
        writes = world.writer.calls.count(("status", "a"))
        for _ in range(2):  # the retries' own timers: each refusal doubles the delay
            await world.clock.advance(delays[-1])
            await world.settle()
            delays.append(queue._timers[key].when() - world.clock.monotonic())
        assert queue._failures[key] == 3 and delays == [0.5, 1.0, 2.0], delays
        assert world.writer.calls.count(("status", "a")) == writes, "the refusal is written once, not per retry"
        await world.clock.advance(delays[-1])  # the quota has room now
        await world.settle()
        assert world.writer.calls.count(("job", "a-a1")) == 1 and key not in queue._failures
        running = next(c for c in world.status("a")["conditions"] if c["type"] == "Running")
        assert running["reason"] == "AttemptRunning" and world.status("a")["attempt"] == 1
    asyncio.run(scenario())


def test_a_throttled_request_comes_back_when_the_server_says_not_after_minutes() -> None:
    from cronoq.apiserver.errors import Throttled, error_of
    from cronoq.controller.outcome import retry_after

    def throttled(headers: dict[str, str]) -> Throttled:
        err = error_of(429, "Too Many Requests", "", headers)
        assert isinstance(err, Throttled)
        return err

    assert retry_after(throttled({"Retry-After": "1"})) == 1.0
    assert retry_after(throttled({})) == 1.0, "no Retry-After: a second"
    assert retry_after(throttled({"Retry-After": "3600"})) == 30.0, "capped"
    assert retry_after(throttled({"Retry-After": "soon"})) == 1.0


def test_events_auto_posts_every_event_in_job_pools_and_only_warnings_in_workers_pools() -> None:
    """Issue 42: a served attempt that succeeds costs no Event write by default; one that fails does.
    A Workers pool whose `events` is All gets the succeeded attempt's Event back."""
    assert served_events() == [("b", "AttemptEnded", "Warning")]
    assert served_events(pool_events="All") == [("a", "AttemptEnded", "Normal"), ("b", "AttemptEnded", "Warning")]


def test_a_pools_events_field_overrides_the_operators_default_but_not_its_warnings_cap() -> None:
    from cronoq.api import TaskPool

    def quiet(flag: str, delivery: str, events: str | None) -> bool:
        applier = World().controller.applier
        applier.warnings_only, applier.served_warnings_only = flag == "warnings", flag == "auto"
        spec = {"concurrency": 1, "delivery": delivery, **({"events": events} if events else {})}
        return applier.quiet(TaskPool.model_validate({**pool(), "spec": spec}))

    table = {(flag, delivery, events): quiet(flag, delivery, events)
             for flag in ("auto", "all", "warnings") for delivery in ("Job", "Workers")
             for events in (None, "All", "Warnings")}
    assert {k for k, v in table.items() if v} == {
        ("auto", "Workers", None), ("auto", "Job", "Warnings"), ("auto", "Workers", "Warnings"),
        ("all", "Job", "Warnings"), ("all", "Workers", "Warnings"),
        *(("warnings", d, e) for d in ("Job", "Workers") for e in (None, "All", "Warnings"))}


def served_events(pool_events: str | None = None) -> list[tuple[str, str, str]]:
    """Two served attempts, one succeeding and one failing, under `--events=auto`: the Events posted."""
    from cronoq.engine.pools import WorkerTrust

    async def scenario() -> list[tuple[str, str, str]]:
        world = World(concurrency=2)
        world.controller.applier.served_warnings_only = True  # as `--events=auto` sets it
        world.controller.store.worker_trust = WorkerTrust.GUARDED
        spec = {"delivery": "Workers", **({"events": pool_events} if pool_events else {})}
        world.controller.intake.on_pool(None, pool(2, **spec))
        world.controller.intake.on_worker_lease(None, {
            "metadata": {"name": "w", "namespace": NS, "labels": {"cronoq.io/worker-pool": "p"},
                         "annotations": {"cronoq.io/capacity": "2"}},
            "spec": {"holderIdentity": "w", "leaseDurationSeconds": 30, "renewTime": T0.isoformat()}})
        for name in ("a", "b"):  # a payload, no pod fields
            raw = task(name)
            raw["spec"].pop("image")
            world.writer.tasks[name] = copy.deepcopy(raw)
            world.controller.intake.on_task(None, raw)
        await world.settle()
        for name, outcome in (("a", "success"), ("b", "retryable")):
            status = world.status(name)
            assert status["worker"] == "w", status
            world.controller.intake.on_lease(None, {
                "metadata": {"name": f"{name}-a1.w", "namespace": NS, "uid": f"l-{name}", "labels": {
                    "cronoq.io/task-uid": world.writer.tasks[name]["metadata"]["uid"], "cronoq.io/task": name,
                    "cronoq.io/attempt": "1", "cronoq.io/lease-id": status["attempts"][0]["leaseId"],
                    "cronoq.io/worker": "w", "cronoq.io/pool": "p"},
                    "annotations": {"cronoq.io/report": json.dumps({"outcome": outcome, "message": "m"})}},
                "spec": {"holderIdentity": status["attempts"][0]["leaseId"], "renewTime": T0.isoformat()}})
        await world.settle()
        assert world.status("a")["phase"] == "Succeeded" and "worker" not in world.status("a")
        return sorted(world.writer.events)
    return asyncio.run(scenario())


def test_a_live_workers_renewal_queues_its_pool_but_none_of_its_tasks_and_a_changed_room_queues_them() -> None:
    """Issue 42: each renewal (every TTL/3) used to reconcile every task the worker serves. Their
    decisions already come back when the lease they saw lapses; a renewal only moves that on."""
    from datetime import timedelta

    from cronoq.engine.pools import WorkerTrust

    def lease(renewed: str, capacity: str = "2") -> dict[str, Any]:
        return {"metadata": {"name": "w", "namespace": NS, "labels": {"cronoq.io/worker-pool": "p"},
                             "annotations": {"cronoq.io/capacity": capacity}},
                "spec": {"holderIdentity": "w", "leaseDurationSeconds": 30, "renewTime": renewed}}

    async def scenario() -> None:
        world = World(concurrency=2)
        world.controller.store.worker_trust = WorkerTrust.GUARDED
        world.controller.intake.on_pool(None, pool(2, delivery="Workers"))
        world.controller.intake.on_worker_lease(None, lease(T0.isoformat()))
        for name in ("a", "b"):
            raw = task(name)
            raw["spec"].pop("image")
            world.writer.tasks[name] = copy.deepcopy(raw)
            world.controller.intake.on_task(None, raw)
        await world.settle()
        assert world.controller.store.by_worker[(NS, "w")] == {"a", "b"}
        queue = world.controller.queue
        await world.clock.advance(10)
        world.controller.intake.on_worker_lease(None, lease((T0 + timedelta(seconds=10)).isoformat()))
        assert set(queue._waiting) == {PoolWork(NS, "p")}, "a renewal: the pool may admit, no task reconciled"
        await world.settle()
        world.controller.intake.on_worker_lease(None, lease((T0 + timedelta(seconds=10)).isoformat(), capacity="0"))
        assert set(queue._waiting) == {PoolWork(NS, "p"), TaskWork(NS, "a"), TaskWork(NS, "b")}, "its room changed"
    asyncio.run(scenario())


def test_a_resync_looks_at_waiting_and_finished_tasks_only_every_tenth_pass() -> None:
    """Issue 56: each look at a waiting (packed) task parses it again; 100,000 of them every minute
    would keep a quarter of a core busy for nothing, and 20,000 finished ones kept a drain's events
    waiting behind their looks. Running tasks: every pass."""
    from cronoq.controller.reconciler import WAITING_RESYNC_EVERY

    async def run() -> None:
        world = World(concurrency=2)
        world.submit("a")
        world.submit("done")
        await world.settle()
        world.submit("b")
        world.submit("c")
        world.controller.intake.on_task(None, world.writer.tasks["done"])  # its Running, as the watch says it
        world.controller.intake.on_pod(None, pod("done-a1", "done", 0))
        await world.settle()
        world.controller.intake.on_task(None, world.writer.tasks["done"])
        world.controller.intake.on_task(None, world.writer.tasks["b"])
        phases = [world.status(t)["phase"] for t in ("a", "b", "c", "done")]
        assert phases == ["Running", "Running", "Queued", "Succeeded"]
        controller = world.controller
        assert controller.store.tasks[(NS, "c")].packed is not None
        assert controller.store.tasks[(NS, "done")].finished is not None
        assert sorted(controller.resynced(1)) == [(NS, "a"), (NS, "b")]
        assert sorted(controller.resynced(WAITING_RESYNC_EVERY)) == [(NS, k) for k in ("a", "b", "c", "done")]

    asyncio.run(run())


def test_a_resumed_pool_grants_before_the_reconciles_of_the_tasks_it_holds() -> None:
    """Issue 56: a pool resumed with a deep queue and edited in a way that matters to every task in
    it (here: its Events) has its slots come first: its dispatch is urgent, their reconciles
    routine. (Resumed and nothing else: the pool alone, test_pool_edits.py.)"""

    async def run() -> None:
        world = World(concurrency=1)
        world.controller.intake.on_pool(None, pool(1, paused=True))
        for i in range(20):
            world.submit(f"t{i:02d}")
        await world.settle()
        assert all(world.status(f"t{i:02d}")["phase"] == "Queued" for i in range(20))
        world.controller.intake.on_pool(None, pool(1, events="Warnings"))
        order: list[WorkKey] = []

        async def record(key: WorkKey) -> None:
            order.append(key)

        worker = asyncio.create_task(world.controller.queue.run(1, record))
        for _ in range(100):
            await asyncio.sleep(0)
        worker.cancel()
        assert order[0] == PoolWork(NS, "p") and len(order) == 21

    asyncio.run(run())
