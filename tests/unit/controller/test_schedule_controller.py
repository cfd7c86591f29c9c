"""The schedule controller without a cluster: a fake writer and a fake clock drive it through
fires, AlreadyExists, conflicts, failures and lost leadership, and check the order of its writes.
Time passes only when a test advances the clock."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from cronoq import metrics
from cronoq.controller.clock import FakeClock
from cronoq.controller.schedules import Schedules
from cronoq.engine.schedule import task_name
from cronoq.apiserver.errors import Conflict
from cronoq.kube.writes import NotLeader

from tests.unit.builders import T0, at


def second(seconds: float) -> str:
    """T0 plus `seconds`, to the second, as a written fire time begins."""
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%S")


class FakeIO:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.existing: dict[str, str | None] = {}
        """Task name → uid of the TaskSchedule controlling it (None: no controller)."""
        self.conflicts = 0
        self.leading = True
        self.rv = 10
        self.stored: dict | None = None

    def _guard(self):
        if not self.leading:
            raise NotLeader()

    async def create_task(self, task):
        self._guard()
        name = task["metadata"]["name"]
        self.calls.append(("create", name))
        if name in self.existing:
            uid = self.existing[name]
            refs = [{"kind": "TaskSchedule", "name": "s", "uid": uid, "controller": True}] if uid else []
            return {"metadata": {"name": name, "uid": f"task-{name}", "ownerReferences": refs}}, False
        self.existing[name] = task["metadata"]["ownerReferences"][0]["uid"]
        return {**task, "metadata": {**task["metadata"], "uid": f"task-{name}"}}, True

    async def replace_status(self, raw, status):
        self._guard()
        self.calls.append(("status", status.get("lastFireTime"), raw["metadata"]["resourceVersion"]))
        if self.conflicts:
            self.conflicts -= 1
            raise Conflict("changed")
        self.rv += 1
        self.stored = {**raw, "metadata": {**raw["metadata"], "resourceVersion": str(self.rv)}, "status": status}
        return self.stored

    async def read_schedule(self, namespace, name):
        self.calls.append(("read", name))
        self.rv += 1
        return {**(self.stored or RAW), "metadata": {**RAW["metadata"], "resourceVersion": str(self.rv)}}

    async def cancel_task(self, namespace, name, uid):
        self._guard()
        assert uid == f"task-{name}", "a cancel holds only for the Task seen under its name"
        self.calls.append(("cancel", name))

    async def delete_task(self, namespace, name, uid):
        self._guard()
        assert uid == f"task-{name}", "a delete holds only for the Task seen under its name"
        self.calls.append(("delete", name))


RAW = {"apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule",
       "metadata": {"name": "s", "namespace": "ns", "uid": "u", "generation": 1, "resourceVersion": "5",
                    "creationTimestamp": T0.isoformat()},
       "spec": {"every": "10s", "taskTemplate": {"spec": {"image": "busybox"}}}}


def controller(start: datetime = T0 + timedelta(seconds=10, milliseconds=3)) -> tuple[Schedules, FakeIO, FakeClock]:
    class _Writer:
        api = None
        guard = staticmethod(lambda: True)

    clock = FakeClock(start)
    s = Schedules(_Writer(), clock=clock)
    io = s.io = FakeIO()
    s.on_schedule(None, {**RAW, "metadata": dict(RAW["metadata"])})
    return s, io, clock


def test_the_task_is_created_before_the_status_that_records_it():
    s, io, clock = controller()
    asyncio.run(s.sync(("ns", "s")))
    name = task_name("s", T0 + timedelta(seconds=10))
    assert io.calls[0] == ("create", name)
    assert io.calls[1][0] == "status" and io.calls[1][1].startswith(second(10))
    assert s.due[("ns", "s")] == T0 + timedelta(seconds=20)
    assert clock.pending == [9.997] and ("ns", "s") in s.queue._timers  # the next fire's sync is queued for then


def test_already_exists_is_a_fire_that_happened_and_is_recorded_once():
    s, io, clock = controller()
    io.existing[task_name("s", T0 + timedelta(seconds=10))] = "u"
    asyncio.run(s.sync(("ns", "s")))
    assert [c[0] for c in io.calls] == ["create", "status"]
    asyncio.run(s.sync(("ns", "s")))  # decided again on the written status: nothing more to do
    assert [c[0] for c in io.calls] == ["create", "status"]


def test_a_conflict_rereads_and_the_next_decision_records_without_creating_again():
    s, io, clock = controller()
    io.conflicts = 1
    asyncio.run(s.sync(("ns", "s")))
    assert [c[0] for c in io.calls] == ["create", "status", "read"]
    asyncio.run(s.sync(("ns", "s")))
    # The Task it created is known (no second create), and the status now records it.
    assert [c[0] for c in io.calls] == ["create", "status", "read", "status"]
    assert io.stored["status"]["lastFireTime"].startswith(second(10))


def test_a_replica_that_lost_the_lease_writes_nothing_and_stops():
    s, io, clock = controller()
    io.leading = False
    asyncio.run(s._sync(("ns", "s")))
    assert io.calls == [] and s.acting is False


def test_older_watch_events_do_not_replace_what_was_written():
    s, io, clock = controller()
    asyncio.run(s.sync(("ns", "s")))
    s.on_schedule(None, {**RAW, "metadata": {**RAW["metadata"], "resourceVersion": "6"}})
    assert s.schedules[("ns", "s")]["metadata"]["resourceVersion"] == str(io.rv)


def test_a_deleted_schedule_leaves_no_due_time_behind():
    """Else the loop would wake for it, forever, though it no longer has it."""
    s, io, clock = controller()

    async def scenario():
        runner = asyncio.create_task(s.run())
        await clock.idle()
        assert s.due[("ns", "s")] == T0 + timedelta(seconds=20)
        s.on_schedule("DELETED", RAW)
        await clock.advance(60)  # its queued sync comes, finds it gone, and queues nothing more
        runner.cancel()
        return dict(s.due), clock.pending

    assert asyncio.run(scenario()) == ({}, [])


def test_the_next_fire_comes_when_the_clock_reaches_it():
    s, io, clock = controller()

    async def scenario():
        runner = asyncio.create_task(s.run())
        await clock.advance(9)
        assert [c[1] for c in io.calls if c[0] == "create"] == [task_name("s", T0 + timedelta(seconds=10))]
        await clock.advance(1)
        assert [c[1] for c in io.calls if c[0] == "create"] == [task_name("s", T0 + timedelta(seconds=10)),
                                                                 task_name("s", T0 + timedelta(seconds=20))]
        runner.cancel()

    asyncio.run(scenario())


def test_a_failing_sync_backs_off_per_schedule_and_counts_retries():
    """It was retried every 5 s, uncounted; now by the work queue's doubling delay, as reconciles are."""
    s, io, clock = controller()
    failing = [RuntimeError("connection reset"), RuntimeError("connection reset")]
    create = io.create_task

    async def flaky_create(task):
        if failing:
            io.calls.append(("create-failed", task["metadata"]["name"]))
            raise failing.pop(0)
        return await create(task)

    io.create_task = flaky_create
    retries = lambda: metrics.REGISTRY.get_sample_value("cronoq_reconcile_retries_total", {"kind": "schedule"}) or 0.0  # noqa: E731
    before = retries()

    async def scenario():
        runner = asyncio.create_task(s.run())
        await clock.idle()
        assert [c[0] for c in io.calls] == ["create-failed"] and clock.pending == [0.5]
        await clock.advance(0.5)
        assert [c[0] for c in io.calls] == ["create-failed"] * 2 and clock.pending == [1.0]
        await clock.advance(0.9)
        assert len(io.calls) == 2, "not before its delay"
        await clock.advance(0.1)
        assert [c[0] for c in io.calls] == ["create-failed"] * 2 + ["create", "status"]
        assert ("ns", "s") not in s.queue._failures, "a success resets the delay"
        runner.cancel()

    asyncio.run(scenario())
    assert retries() - before == 2


# --- fires whose Task name was taken (issue 26, point 5) -----------------------------------------------------

def test_a_task_of_the_fires_name_the_schedule_does_not_control_is_a_fire_conflict_never_the_fire():
    s, io, clock = controller()
    name = task_name("s", T0 + timedelta(seconds=10))
    io.existing[name] = None  # pre-created by someone else
    asyncio.run(s.sync(("ns", "s")))
    status = io.stored["status"]
    assert status.get("lastFireTime") is None and status["missedFires"] == 1 and status["active"] == 0
    conflict = next(c for c in status["conditions"] if c["type"] == "FireConflict")
    assert conflict["status"] == "True" and conflict["reason"] == "FireConflict" and name in conflict["message"]
    assert name not in s.tasks[("ns", "s")]
    # The next fire creates its own Task, and the conflict no longer holds.
    asyncio.run(clock.advance(10))
    asyncio.run(s.sync(("ns", "s")))
    status = io.stored["status"]
    assert status["lastFireTime"].startswith(second(20)) and status["missedFires"] == 1
    assert next(c for c in status["conditions"] if c["type"] == "FireConflict")["status"] == "False"


def test_a_task_controlled_by_another_schedule_of_the_same_name_is_a_conflict_too():
    s, io, clock = controller()
    io.existing[task_name("s", T0 + timedelta(seconds=10))] = "uid-of-an-earlier-s"
    asyncio.run(s.sync(("ns", "s")))
    assert io.stored["status"]["missedFires"] == 1


def test_tasks_with_forged_labels_are_not_the_schedules():
    s, io, clock = controller()
    labels = {"cronoq.io/schedule": "s", "cronoq.io/fire-time": str(int((T0 + timedelta(seconds=10)).timestamp()))}
    s.on_task(None, {"metadata": {"namespace": "ns", "name": "forged", "labels": labels}, "spec": {}})
    foreign = [{"kind": "TaskSchedule", "name": "s", "uid": "other", "controller": True}]
    s.on_task(None, {"metadata": {"namespace": "ns", "name": "other", "labels": labels, "ownerReferences": foreign},
                     "spec": {}})
    asyncio.run(s.sync(("ns", "s")))
    assert ("create", task_name("s", T0 + timedelta(seconds=10))) in io.calls
    assert "forged" not in s.tasks[("ns", "s")]


def test_the_write_that_pauses_a_schedule_after_failures_offers_its_notification_once():
    s, io, clock = controller()
    s.schedules[("ns", "s")]["spec"]["pauseAfterFailures"] = 1
    offered: list[tuple[str, str, str, str]] = []
    s.on_pause = lambda *args: offered.append(args)
    asyncio.run(s.sync(("ns", "s")))
    assert offered == []
    name = task_name("s", T0 + timedelta(seconds=10))
    s.on_task(None, {"metadata": {"name": name, "namespace": "ns", "uid": f"task-{name}",
                                  "labels": {"cronoq.io/schedule": "s", "cronoq.io/fire-time": str(int(at(10).timestamp()))},
                                  "ownerReferences": [{"kind": "TaskSchedule", "name": "s", "uid": "u", "controller": True}]},
                     "status": {"phase": "Failed", "finishedAt": at(11).isoformat()}})
    clock.now = lambda: at(12)  # type: ignore[method-assign]
    asyncio.run(s.sync(("ns", "s")))
    paused = next(c for c in io.stored["status"]["conditions"] if c["type"] == "Paused")
    assert paused["status"] == "True"
    assert offered == [("ns", "s", "u", "default")]
    asyncio.run(s.sync(("ns", "s")))
    assert offered == [("ns", "s", "u", "default")], "only the write that paused it offers"


def test_each_fire_sends_its_span_linked_to_the_task_it_made():
    from cronoq.engine.spans import fire_ids
    from cronoq.pod_protocol.tracecontext import TaskTrace

    class Traces:
        def __init__(self) -> None:
            self.spans: list = []

        def emit(self, spans) -> None:
            self.spans.extend(spans)

    s, io, clock = controller()
    s.tracing = Traces()  # type: ignore[assignment]
    asyncio.run(s.sync(("ns", "s")))
    name = task_name("s", T0 + timedelta(seconds=10))
    (span,) = s.tracing.spans
    assert (span.name, span.start) == ("fire", T0 + timedelta(seconds=10))
    assert (span.trace_id, span.span_id) == fire_ids("u", T0 + timedelta(seconds=10))
    task = TaskTrace(f"task-{name}")
    assert [(link.trace_id, link.span_id) for link in span.links] == [(task.trace_id, task.task_span)]
