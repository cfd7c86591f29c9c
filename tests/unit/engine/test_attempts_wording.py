"""Rewording a status message never changes how many writes a task costs: whether something is
said already is judged from the phase, the Running condition's reason and the generation (and,
for a pod held back, from the part of the message the same template writes), not from how the
message reads. Each script below runs twice, with the templates of `engine.attempts.wording` as
they are and with every one of them reworded, and must write at the same steps."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterator

import pytest

from cronoq.api import Task, TaskPhase
from cronoq.engine import reasons
from cronoq.engine.attempts import reconcile, wording
from cronoq.engine.gate import RUN, Gate
from cronoq.engine.plan import Effective, Observation, Plan

from tests.unit.builders import at, attempt_job, make_task, observe, settings, with_status

PULL = 'Back-off pulling image "localhost/x:1": ErrImagePull: failed to pull and unpack image'
TEMPLATES = sorted(name for name, value in vars(wording).items() if name.isupper() and isinstance(value, str))


@dataclass(frozen=True)
class Told:
    """What one reconcile cost and said: whether it wrote, the reason it gave, its Events."""

    wrote: bool
    reason: str | None
    events: tuple[str, ...]
    message: str | None


Script = Callable[[], Iterator[tuple[Observation, Callable[[Task], Task] | None]]]


def play(task: Task, effective: Effective, script: Script) -> list[Told]:
    """Reconcile `task` through the script's observations, storing each status written (as the
    runtime does); a step may change the task first (a spec edit)."""
    told = []
    for seen, edit in script():
        if edit is not None:
            task = edit(task)
        plan: Plan = reconcile(task, effective, seen, random.Random(0))
        if plan.status is not None:
            task = with_status(task, plan.status)
        status = task.status
        told.append(Told(plan.status is not None, wording.told(status) if status else None,
                         tuple(e.reason for e in plan.events), status.message if status else None))
    return told


def reworded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every template worded otherwise (its facts kept): other words, other length, other order."""
    for name in TEMPLATES:
        monkeypatch.setattr(wording, name, "reworded, " + getattr(wording, name).replace(" ", "  ") + " (so)")


def job_task() -> Task:
    return make_task("t").retries(3).no_jitter().retry(initialBackoff="5s").obj()


def a_job_attempt_through_its_troubles() -> Iterator[tuple[Observation, Callable[[Task], Task] | None]]:
    job = attempt_job("t", 1).created(at(2))
    yield observe(now=at(0), pool_found=False, pool_name="p"), None                       # PoolNotFound
    yield observe(now=at(1), pool_found=False, pool_name="p"), None                       # said already
    yield observe(now=at(1.5), pool_name="p"), None                                       # WaitingForSlot
    yield observe(now=at(1.6), pool_name="p"), None                                       # said already
    yield observe(now=at(1.7), pool_name="p"), lambda t: t.model_copy(                    # a priority change
        update={"metadata": t.metadata.model_copy(update={"generation": 2})})
    yield observe(now=at(1.8), pool_name="p"), None                                       # said already
    yield observe(now=at(2), admit=True), None                                            # attempt 1 recorded
    yield observe(now=at(3), job_refused="exceeded quota: used 3"), None                  # JobRefused
    yield observe(now=at(4), job_refused="exceeded quota: used 4"), None                  # said already
    yield observe(job.waiting("ImagePullBackOff", PULL).obj(), now=at(5)), None           # created, held back
    yield observe(job.waiting("ErrImagePull", "failed to pull").obj(), now=at(6)), None   # said already
    yield observe(job.waiting("ImagePullBackOff", "back-off 20s").obj(), now=at(7)), None  # said already
    yield observe(job.waiting("CreateContainerConfigError", 'secret "s" not found').obj(), now=at(8)), None
    yield observe(job.waiting("CreateContainerConfigError", 'secret "t" not found').obj(), now=at(9)), None
    running = attempt_job("t", 1).created(at(2)).running(at(10), seen=at(10))
    yield observe(running.obj(), now=at(11)), None                                        # AttemptRunning
    yield observe(running.obj(), now=at(12)), None                                        # said already
    yield observe(running.exited(1, "boom"), now=at(13)), None                            # BackingOff, an Event
    yield observe(running.exited(1, "boom"), now=at(14), admit=True), None                # backoff not over
    yield observe(running.exited(1, "boom"), now=at(19), admit=True), None                # attempt 2
    second = attempt_job("t", 2).created(at(19)).running(at(20), seen=at(20))
    yield observe(second.obj(), now=at(21)), None                                         # said already
    yield observe(second.exited(0, "done"), now=at(22)), None                             # Succeeded, an Event


def a_blocked_task() -> Iterator[tuple[Observation, Callable[[Task], Task] | None]]:
    waiting = Gate.wait(reasons.WAITING_FOR_DEPENDENCIES, "waiting for b (Success; now Running)")
    moved = Gate.wait(reasons.WAITING_FOR_DEPENDENCIES, "waiting for b (Success; now Retrying)")
    copy = Gate.wait(reasons.WAITING_FOR_ORIGINAL, "same key as task o (Running)", duplicate_of="o")
    for n, gate in enumerate((waiting, waiting, moved, moved, copy, copy, RUN, RUN)):
        yield observe(now=at(n), gate=gate), None


def a_served_task() -> Iterator[tuple[Observation, Callable[[Task], Task] | None]]:
    alive = at(100)
    yield observe(now=at(0), admit=True, worker=None, worker_alive_until=alive), None    # WaitingForWorker
    yield observe(now=at(1), admit=True, worker=None, worker_alive_until=alive), None    # said already
    yield observe(now=at(2), admit=True, worker="w-1", worker_alive_until=alive), None   # handed to w-1
    yield observe(now=at(3), worker_alive_until=alive), None                             # goes on
    yield observe(now=at(4), worker_alive_until=at(4)), None                             # its worker died


CASES = {
    "a Job's attempt: queued, refused, held back, running, retried, succeeded": (job_task, {}, a_job_attempt_through_its_troubles),
    "a task its gate holds back, then queued": (lambda: make_task("t").obj(), {}, a_blocked_task),
    "an attempt a worker serves": (lambda: make_task("t").unset("image").spec(payload={"n": 1}).obj(),
                                   {"delivery": "Workers", "retry": {"maxAttempts": 2}}, a_served_task),
}


@pytest.mark.parametrize("case", CASES)
def test_rewording_every_template_writes_at_the_same_steps(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, pool, script = CASES[case]
    task = make()
    before = play(task, settings(task, pool), script)
    reworded(monkeypatch)
    after = play(task, settings(task, pool), script)

    assert [t.wrote for t in after] == [t.wrote for t in before]
    assert [t.reason for t in after] == [t.reason for t in before]
    assert [t.events for t in after] == [t.events for t in before]
    assert any(a.message != b.message for a, b in zip(after, before)), "the rewording took"


def test_the_scripts_say_each_thing_once() -> None:
    """The scripts above are not vacuous: each situation is written once, and repeating it is not."""
    task = job_task()
    told = play(task, settings(task), a_job_attempt_through_its_troubles)
    assert [t.wrote for t in told] == [True, False, True, False, True, False, True, True, False, True, False, False,
                                       True, False, True, False, True, False, True, False, True]
    assert [t.reason for t in told if t.wrote] == [
        reasons.POOL_NOT_FOUND, reasons.WAITING_FOR_SLOT, reasons.WAITING_FOR_SLOT, reasons.ATTEMPT_RUNNING,
        reasons.JOB_REFUSED, reasons.POD_CANNOT_START, reasons.POD_CANNOT_START, reasons.ATTEMPT_RUNNING,
        reasons.BACKING_OFF, reasons.ATTEMPT_RUNNING, TaskPhase.SUCCEEDED.value]
    blocked = play(make_task("t").obj(), settings(make_task("t").obj()), a_blocked_task)
    assert [t.wrote for t in blocked] == [True, False, True, False, True, False, True, False]
