"""The state machine with a gate (keys and dependencies, DESIGN §5): a task the gate holds back
is Blocked and asks for no slot; one the gate ends finishes without an attempt; once the gate
opens the task is queued or started; the gate never touches a task that has started."""
from __future__ import annotations

import random

from cronoq.api import TaskPhase
from cronoq.engine import reasons
from cronoq.engine.attempts import reconcile
from cronoq.engine.gate import RUN, Gate

from tests.unit.builders import T0, at, attempt_job, make_task, observe, settings, with_status

WAIT = Gate.wait(reasons.WAITING_FOR_DEPENDENCIES, "waiting for b (Success; now Running)")


def run(task, seen, seed: int = 0):
    return reconcile(task, settings(task), seen, random.Random(seed))


def step(task, plan):
    return with_status(task, plan.status) if plan.status is not None else task


def test_a_held_back_task_is_blocked_and_wants_no_slot() -> None:
    task = make_task().obj()
    plan = run(task, observe(now=at(1), admit=True, gate=WAIT, first_seen=T0))
    assert plan.status.phase is TaskPhase.BLOCKED and plan.create_job is None and not plan.wants_slot
    assert plan.status.attempt == 0 and plan.status.message == WAIT.message
    assert plan.status.submitted_at == T0


def test_blocked_again_for_the_same_reason_writes_nothing() -> None:
    task = make_task().obj()
    blocked = step(task, run(task, observe(now=at(1), gate=WAIT)))
    assert run(blocked, observe(now=at(2), gate=WAIT)).status is None
    moved = Gate.wait(reasons.WAITING_FOR_DEPENDENCIES, "waiting for b (Success; now Retrying)")
    assert run(blocked, observe(now=at(3), gate=moved)).status.message == moved.message


def test_when_the_gate_opens_the_task_queues_or_starts() -> None:
    task = make_task().obj()
    blocked = step(task, run(task, observe(now=at(1), gate=WAIT)))
    queued = run(blocked, observe(now=at(2), gate=RUN))
    assert queued.status.phase is TaskPhase.QUEUED and queued.wants_slot
    started = run(blocked, observe(now=at(2), gate=RUN, admit=True))
    assert started.status.phase is TaskPhase.RUNNING and started.create_job.number == 1
    assert started.status.submitted_at == at(1)


def test_a_gate_that_ends_the_task_ends_it_without_an_attempt() -> None:
    skipped = Gate.end(TaskPhase.SKIPPED, reasons.DEPENDENCY_UNMET, "dependency b ended Failed")
    plan = run(make_task().obj(), observe(now=at(1), admit=True, gate=skipped))
    assert plan.status.phase is TaskPhase.SKIPPED and plan.create_job is None
    assert plan.status.finished_at == at(1) and plan.status.attempt == 0 and plan.status.attempts == ()
    assert "b ended Failed" in plan.status.message


def test_a_duplicate_of_a_succeeded_original_reports_its_output() -> None:
    copy = Gate.end(TaskPhase.SUCCEEDED, reasons.DUPLICATE, "same key as task orig", output="42", duplicate_of="orig")
    plan = run(make_task().obj(), observe(now=at(1), admit=True, gate=copy))
    status = plan.status
    assert status.phase is TaskPhase.SUCCEEDED and status.output == "42" and status.output_available
    assert status.duplicate_of == "orig" and plan.create_job is None and status.attempt == 0


def test_a_duplicate_waiting_for_its_original_names_it() -> None:
    wait = Gate.wait(reasons.WAITING_FOR_ORIGINAL, "same key as task orig (Running)", duplicate_of="orig")
    plan = run(make_task().obj(), observe(now=at(1), gate=wait))
    assert plan.status.phase is TaskPhase.BLOCKED and plan.status.duplicate_of == "orig"


def test_cancel_wins_over_the_gate() -> None:
    task = make_task().obj()
    blocked = step(task, run(task, observe(now=at(1), gate=WAIT)))
    cancelled = blocked.model_copy(update={"spec": blocked.spec.model_copy(update={"cancel": True})})
    plan = run(cancelled, observe(now=at(2), gate=WAIT))
    assert plan.status.phase is TaskPhase.CANCELLED


def test_the_gate_never_touches_a_task_that_has_started() -> None:
    task = make_task().obj()
    running = step(task, run(task, observe(now=at(1), admit=True)))
    skipped = Gate.end(TaskPhase.SKIPPED, reasons.DEPENDENCY_UNMET, "x")
    for gate in (WAIT, skipped):
        plan = run(running, observe(attempt_job("t", 1).running(at(1)).obj(), now=at(2), gate=gate))
        assert plan.status is None and plan.create_job is None
        plan = run(running, observe(attempt_job("t", 1).exited(0, "ok"), now=at(3), gate=gate))
        assert plan.status.phase is TaskPhase.SUCCEEDED


def test_terminal_tasks_ignore_the_gate() -> None:
    task = make_task().obj()
    skipped = step(task, run(task, observe(now=at(1), gate=Gate.end(TaskPhase.SKIPPED, reasons.DEPENDENCY_UNMET, "x"))))
    for gate in (RUN, WAIT, Gate.end(TaskPhase.FAILED, reasons.DEPENDENCY_CYCLE, "y")):
        plan = run(skipped, observe(now=at(5), admit=True, gate=gate))
        assert plan.status is None and plan.create_job is None
