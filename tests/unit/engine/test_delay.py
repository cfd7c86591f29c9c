"""Delayed start (engine/delay.py, issue 39 point 3), on the injected clock: a task with a start
time is Blocked until exactly that time and asks for no slot, the decision returns the seconds to
its time (the requeue timer), a startDelay counts from creationTimestamp, and once its time has
come it queues in its priority class by that time."""
from __future__ import annotations

import random
from datetime import timedelta

from cronoq.api import TaskPhase
from cronoq.engine import delay, reasons
from cronoq.engine.admission import Candidate, Queue
from cronoq.engine.attempts import is_ready
from cronoq.engine.decide import Live, decide

from tests.unit.builders import T0, at, make_task, observe, with_status

START = at(60)


def run(task, now, **seen):
    return decide(Live(task), observe(now=now, first_seen=T0, **seen), random.Random(0))


def step(task, plan):
    return with_status(task, plan.status) if plan.status is not None else task


def delayed(**spec):
    return make_task("d").spec(**(spec or {"notBefore": START.isoformat()})).obj()


def test_a_task_waits_blocked_until_exactly_its_time_and_asks_for_no_slot() -> None:
    task = delayed()
    plan = run(task, at(1), admit=True)
    assert plan.status.phase is TaskPhase.BLOCKED and plan.create_job is None and not plan.wants_slot
    running = [c for c in plan.status.conditions if c.type == "Running"][0]
    assert running.reason == reasons.WAITING_FOR_START_TIME
    assert plan.status.message == "not before 2026-12-03T12:01:00Z (spec.notBefore)"
    assert plan.requeue_after == 59.0, "a timer at its time, not polling"
    blocked = step(task, plan)
    just_before = run(blocked, START - timedelta(milliseconds=1), admit=True)
    assert just_before.status is None and not just_before.wants_slot and just_before.create_job is None
    assert just_before.requeue_after == 0.001
    started = run(blocked, START, admit=True)
    assert started.status.phase is TaskPhase.RUNNING and started.create_job.number == 1


def test_a_start_delay_counts_from_the_creation_timestamp() -> None:
    task = make_task("d").spec(startDelay="10m").obj()  # created at T0 (the builder's creationTimestamp)
    assert delay.not_before(task) == T0 + timedelta(minutes=10)
    plan = run(task, at(300))
    assert plan.status.phase is TaskPhase.BLOCKED and plan.requeue_after == 300.0
    assert plan.status.message == "not before 2026-12-03T12:10:00Z (spec.startDelay 10m after its creation)"
    assert run(step(task, plan), at(600), admit=True).create_job is not None


def test_a_time_already_past_starts_at_once_and_sub_second_times_are_kept() -> None:
    assert run(delayed(notBefore=at(-5).isoformat()), at(0), admit=True).create_job is not None
    precise = delayed(notBefore=at(1.25).isoformat())
    plan = run(precise, at(1))
    assert plan.requeue_after == 0.25 and "12:00:01.250Z" in plan.status.message


def test_not_ready_for_admission_before_its_time() -> None:
    task = delayed()
    assert not is_ready(task, at(59.999)) and is_ready(task, START)
    assert is_ready(make_task("plain").obj(), T0)


def test_when_its_time_comes_a_slot_is_asked_for_without_a_queued_write_for_a_second() -> None:
    """The one extra write of a delayed task is its Blocked status: at its time it asks for a slot
    quietly (a grant takes it straight to Running); only still unadmitted a second later does it
    say Queued, as any task waiting for a full pool does."""
    blocked = step(delayed(), run(delayed(), at(1)))
    quiet = run(blocked, START)
    assert quiet.status is None and quiet.wants_slot and quiet.requeue_after == 1.0
    later = run(blocked, START + delay.QUIET)
    assert later.status.phase is TaskPhase.QUEUED and later.wants_slot


def test_blocked_again_for_the_same_time_writes_nothing_and_keeps_its_timer() -> None:
    task = delayed()
    blocked = step(task, run(task, at(1)))
    again = run(blocked, at(30))
    assert again.status is None and again.requeue_after == 30.0


def test_dependencies_are_waited_for_first_then_the_start_time() -> None:
    task = make_task("d").spec(notBefore=START.isoformat(), dependsOn=[{"task": "b"}]).obj()
    waiting = run(task, at(1), dependencies={"b": TaskPhase.RUNNING})
    assert [c.reason for c in waiting.status.conditions if c.type == "Running"] == [reasons.WAITING_FOR_DEPENDENCIES]
    met = run(step(task, waiting), at(2), dependencies={"b": TaskPhase.SUCCEEDED})
    assert met.status.message.startswith("not before") and met.requeue_after == 58.0


def test_after_its_time_it_queues_in_its_priority_class_by_its_start_time() -> None:
    """Ordered by notBefore, not creation: a task submitted at T0 to start at T0+60s goes behind
    one of its priority submitted at T0+30s, and before one submitted at T0+90s; a higher priority
    goes first whatever its times."""
    task = delayed()
    queue = Queue()
    queue.put(Candidate.of("ns", "late", 0, at(90)))
    queue.put(Candidate.of("ns", "d", 0, delay.in_line_from(task, T0)))
    queue.put(Candidate.of("ns", "earlier", 0, at(30)))
    queue.put(Candidate.of("ns", "urgent", 5, at(100)))
    assert [queue.pop().name for _ in range(4)] == ["urgent", "earlier", "d", "late"]
    assert delay.in_line_from(make_task("plain").obj(), at(7)) == at(7)
    assert delay.in_line_from(task, at(70)) == at(70), "a retried or late-seen task keeps its own later time"


def test_a_task_schedules_template_passes_the_start_delay_to_each_task_it_fires() -> None:
    from cronoq.api import Task, TaskSchedule
    from cronoq.engine import schedule as sched
    s = TaskSchedule.model_validate({
        "apiVersion": "cronoq.io/v1alpha1", "kind": "TaskSchedule",
        "metadata": {"name": "nightly", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {"every": "1h", "taskTemplate": {"spec": {"image": "busybox", "startDelay": "5m"}}}})
    manifest = sched.task_manifest(s, T0)
    assert manifest["spec"]["startDelay"] == "5m"
    manifest["metadata"]["creationTimestamp"] = T0.isoformat()  # as the API server stamps it
    assert delay.not_before(Task.model_validate(manifest)) == T0 + timedelta(minutes=5)


def test_a_workers_pool_hands_a_delayed_task_to_a_worker_only_at_its_time() -> None:
    from cronoq.api import TaskPoolSpec
    workers = TaskPoolSpec.model_validate({"delivery": "Workers"})
    task = make_task("d").unset("image").spec(notBefore=START.isoformat(), payload={"n": 1}).obj()
    blocked = run(task, at(1), admit=True, pool=workers, worker_room={"w1": 1})
    assert blocked.status.phase is TaskPhase.BLOCKED and blocked.status.worker is None
    started = run(step(task, blocked), START, admit=True, pool=workers, worker_room={"w1": 1})
    assert started.status.phase is TaskPhase.RUNNING and started.status.attempts[0].worker == "w1"
    assert started.create_job is None, "a worker runs it: no Job"
