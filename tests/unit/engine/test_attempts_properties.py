"""Invariants of the attempt state machine under random histories (hypothesis).

A small simulated world runs one task: each attempt's Job has a random fate (success, exit
codes, OOM, SDK reports, eviction, hanging until the timeout, never starting, being deleted by
someone, being refused by the API server), the clock advances by random steps, the pool admits
at random, the leader fails over, a deposed replica keeps reconciling with its old epoch, the
runtime sometimes dies between the status write and the Job create, the user may cancel, and
foreign Jobs turn up. Each plan's status is fed back as the task's stored status, exactly as the
runtime does. After every reconcile the invariants DESIGN §2 promises are checked; at the end
the world is let run until the task must have finished.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from cronoq.api import AttemptOutcome, Task, TaskPhase, TaskStatus
from cronoq.engine.attempts import HISTORY, reconcile
from cronoq.engine.plan import Effective, Observation, Plan
from cronoq.engine.naming import job_name
from cronoq.engine.observed import AttemptJob, Termination

from tests.unit.builders import T0, make_task, settings as effective_of

NAME = "sim"
TIMEOUT = 20.0
START_TIMEOUT = 60.0
PERMANENT_CODE = 9
FOREIGN_OUTPUT = "foreign output: must never become the task's"


@dataclass(frozen=True)
class Fate:
    """What the attempt's Job will do, from its creation."""

    kind: str
    start_delay: float = 1.0
    duration: float = 5.0
    code: int = 0
    message: str | None = None


fates = st.one_of(
    st.builds(Fate, kind=st.just("exit"), start_delay=st.floats(0, 30), duration=st.floats(0, 40),
              code=st.sampled_from([0, 0, 1, 2, 137, PERMANENT_CODE]), message=st.sampled_from([None, "out", "é" * 3000])),
    st.builds(Fate, kind=st.just("oom"), start_delay=st.floats(0, 5), duration=st.floats(0, 10), code=st.just(137)),
    st.builds(Fate, kind=st.just("sdk"), duration=st.floats(0, 10), code=st.sampled_from([0, 1]),
              message=st.sampled_from([
                  '{"outcome": "retryable", "message": "later", "retryAfterSeconds": 15}',
                  '{"outcome": "retryable", "retryAfterSeconds": 1e300}',
                  '{"outcome": "permanent", "message": "no"}',
                  '{"outcome": "success", "output": {"n": 1}}'])),
    st.builds(Fate, kind=st.just("hang"), start_delay=st.floats(0, 5)),
    st.builds(Fate, kind=st.just("never_starts")),
    st.builds(Fate, kind=st.just("evicted"), duration=st.floats(0, 10)),
    st.builds(Fate, kind=st.just("vanish"), duration=st.floats(0, 10)),
    st.builds(Fate, kind=st.just("rejected")),
)


@dataclass(frozen=True)
class Step:
    dt: float
    admit: bool
    event: str  # "none", "failover", "deposed", "crash_after_write", "lost_write", "cancel", "foreign", "pool"
    value: int = 3
    """For "pool": the pool's new maxAttempts (pool specs may change at any time)."""


steps = st.builds(
    Step, dt=st.floats(0, 40),
    admit=st.sampled_from([True, True, False]),
    event=st.sampled_from(["none"] * 6 + ["failover", "deposed", "crash_after_write", "crash_after_write",
                                          "lost_write", "cancel", "foreign", "foreign", "pool", "pool"]),
    value=st.integers(1, 6))


@dataclass
class SimJob:
    number: int
    name: str
    uid: str
    fate: Fate
    created: datetime
    deleted_at: datetime | None = None
    foreign: bool = False
    lease_id: str | None = None
    """Its cronoq.io/lease-id label: the recorded attempt's for the operator's Jobs, none for foreign ones."""

    def facts(self, now: datetime) -> AttemptJob:
        fate = self.fate
        job = AttemptJob(number=self.number, name=self.name, uid=self.uid, created_at=self.created,
                         lease_id=self.lease_id)
        start = None if fate.kind == "never_starts" else self.created + timedelta(seconds=fate.start_delay)
        end = None if start is None or fate.kind == "hang" else start + timedelta(seconds=fate.duration)
        if self.deleted_at is not None and (end is None or self.deleted_at < end):
            end = None  # killed before its container ended: no report
        if start is None or now < start:
            job = replace(job, pod_phase="Pending")
        elif end is None or now < end:
            job = replace(job, pod_phase="Running", started_at=start)
        elif fate.kind in ("exit", "sdk", "oom"):
            code = fate.code
            job = replace(job, pod_phase="Succeeded" if code == 0 else "Failed", started_at=start,
                          finished="Complete" if code == 0 else "Failed",
                          termination=Termination(exit_code=code, reason="OOMKilled" if fate.kind == "oom" else None,
                                                  message=fate.message, started_at=start, finished_at=end))
        elif fate.kind == "evicted":
            job = replace(job, pod_phase="Failed", pod_reason="Evicted", started_at=start, finished="Failed")
        elif fate.kind == "vanish":
            job = replace(job, started_at=start, gone=True)
        if self.deleted_at is not None and now >= self.deleted_at:
            job = replace(job, deleting=True, gone=now >= self.deleted_at + timedelta(seconds=1))
        return job


@dataclass
class World:
    task: Task
    fates: list[Fate]
    effective: Effective
    now: datetime = T0
    leader: int = 1
    jobs: dict[str, SimJob] = field(default_factory=dict)
    rejected: dict[int, str] = field(default_factory=dict)
    used_numbers: set[int] = field(default_factory=set)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    @property
    def status(self) -> TaskStatus:
        return self.task.status or TaskStatus()

    def observation(self, epoch: int, admit: bool) -> Observation:
        return Observation(jobs=tuple(j.facts(self.now) for j in self.jobs.values()), now=self.now, epoch=epoch,
                           admit=admit, first_seen=T0, job_rejected=self.rejected.get(self.status.attempt))

    def fate_of(self, number: int) -> Fate:
        return self.fates[(number - 1) % len(self.fates)]

    def reconcile(self, epoch: int, admit: bool) -> Plan:
        return reconcile(self.task, self.effective, self.observation(epoch, admit), self.rng)

    def apply(self, plan: Plan, *, write: bool = True, act: bool = True) -> None:
        if write and plan.status is not None:
            self.task = self.task.model_copy(update={"status": plan.status})
        if not (write and act):
            return
        if plan.create_job is not None:
            n = plan.create_job.number
            name = job_name(NAME, n)
            fate = self.fate_of(n)
            if fate.kind == "rejected":
                self.rejected[n] = "spec.template.spec.containers[0].image: Required value"
            elif name not in self.jobs:  # AlreadyExists: the Job is there already
                self.jobs[name] = SimJob(n, name, f"uid-{n}", fate, self.now, lease_id=plan.create_job.lease_id)
        for name in plan.delete_jobs:
            job = self.jobs.get(name)
            if job is not None and job.deleted_at is None:
                job.deleted_at = self.now


def check(before: TaskStatus, plan: Plan, world: World, epoch: int) -> None:
    """What must hold of every plan, given the stored status it was made from."""
    after = plan.status if plan.status is not None else before
    max_attempts = world.effective.retry.max_attempts

    if before.epoch > epoch:
        assert plan == Plan(), "a deposed leader must not act"
        return
    if before.phase is not None and before.phase.terminal:
        assert plan.status is None and plan.create_job is None, "terminal phases are final"
    assert after.epoch >= before.epoch
    if plan.status is not None:
        assert plan.status.epoch == epoch
        TaskStatus.model_validate(plan.status.to_dict())  # within the CRD's bounds

    # Attempt numbers: +1 per new attempt, never reused, never above maxAttempts.
    assert after.attempt in (before.attempt, before.attempt + 1)
    if after.attempt == before.attempt + 1:
        assert plan.started is not None and plan.started.number == after.attempt
        assert after.attempt not in world.used_numbers, "attempt number reused"
        if before.phase is TaskPhase.RETRYING and before.next_attempt_at is not None:
            assert world.now >= before.next_attempt_at, "attempt started before its backoff ended"
    else:
        assert plan.started is None
    if plan.started is not None:
        assert plan.started.number <= max_attempts

    # The history: consecutive numbers ending at `attempt`, at most one open and only the newest.
    numbers = [a.number for a in after.attempts]
    assert len(numbers) <= HISTORY
    assert numbers == list(range(after.attempt - len(numbers) + 1, after.attempt + 1))
    open_ = [a for a in after.attempts if a.outcome is None]
    assert len(open_) <= 1
    if open_:
        assert open_[0].number == after.attempt and after.phase is TaskPhase.RUNNING
        assert open_[0].job == job_name(NAME, after.attempt)
    # Ended attempts stay as they ended.
    old = {a.number: a for a in before.attempts}
    for record in after.attempts:
        if record.number in old and old[record.number].outcome is not None:
            assert record == old[record.number], "an ended attempt was rewritten"
    for record in plan.ended:
        assert record.outcome is not None and old.get(record.number) is not None and old[record.number].outcome is None

    # Deadlines count from container start, and the Job of an attempt the operator ends is stopped.
    for record in plan.ended:
        if record.reason == "Timeout":
            assert record.duration_ms is not None and record.duration_ms >= TIMEOUT * 1000
        if record.reason in ("Timeout", "StartTimeout", "Cancelled") and record.job in world.jobs:
            if world.jobs[record.job].deleted_at is None:
                assert record.job in plan.delete_jobs

    # Reports from Jobs of attempts the operator ended, or that the status never named, are
    # stale: counted, and nothing else.
    for job in world.jobs.values():
        facts = job.facts(world.now)
        if facts.termination is None and facts.finished is None:
            continue
        record = old.get(job.number)
        operator_ended = record is not None and record.reason in ("Timeout", "StartTimeout", "Cancelled")
        if job.foreign or (operator_ended and job.name == record.job):
            assert job.uid in plan.stale_jobs, f"late report of {job.name} not counted"

    # Foreign Jobs are stopped, never adopted (their reports are ignored, see below).
    for job in world.jobs.values():
        if job.foreign and job.deleted_at is None:
            assert job.name in plan.delete_jobs, f"foreign Job {job.name} left running"

    # Write-ahead: a Job is created only for the attempt the status names as open.
    if plan.create_job is not None:
        assert after.phase is TaskPhase.RUNNING
        assert after.attempts and after.attempts[-1].number == plan.create_job.number == after.attempt
        assert plan.create_job.lease_id == after.attempts[-1].lease_id, "the Job carries the recorded attempt's lease"
        assert after.attempts[-1].outcome is None
        assert job_name(NAME, plan.create_job.number) not in plan.delete_jobs or any(
            j.foreign for j in world.jobs.values() if j.name == job_name(NAME, plan.create_job.number))

    # Phases agree with the records.
    if after.phase is TaskPhase.SUCCEEDED:
        assert after.attempts[-1].outcome is AttemptOutcome.SUCCESS
        assert after.output != FOREIGN_OUTPUT
    if plan.status is not None and after.phase is TaskPhase.DEAD_LETTERED:
        assert after.attempt >= max_attempts
    if plan.status is not None and after.phase is TaskPhase.RETRYING:
        assert after.next_attempt_at is not None and after.attempt < max_attempts
    if after.phase is not None and after.phase.terminal:
        assert after.finished_at is not None and after.next_attempt_at is None
        assert not open_
    successes = [a for a in after.attempts if a.outcome is AttemptOutcome.SUCCESS]
    assert len(successes) <= 1


def play(world: World, step: Step) -> None:
    world.now += timedelta(seconds=step.dt)
    epoch = world.leader
    write, act = True, True
    if step.event == "failover":
        world.leader += 1
        epoch = world.leader
    elif step.event == "deposed":
        epoch = world.leader - 1
    elif step.event == "crash_after_write":
        act = False
    elif step.event == "lost_write":
        write = False
    elif step.event == "cancel" and not world.task.spec.cancel:
        world.task = world.task.model_copy(update={"spec": world.task.spec.model_copy(update={"cancel": True})})
    elif step.event == "pool":
        retry = world.effective.retry.model_copy(update={"max_attempts": step.value})
        world.effective = replace(world.effective, retry=retry)
    elif step.event == "foreign":
        n = world.status.attempt
        # A Job that claims an attempt the status does not name: a name that is not the
        # deterministic one, or a number far above any this task will reach.
        for number, name in ((n, f"{job_name(NAME, n)}-copy"), (n + 1, f"x{job_name(NAME, n + 1)}"),
                             (50, job_name(NAME, 50))):
            world.jobs.setdefault(name, SimJob(number, name, f"foreign-{name}",
                                               Fate("exit", 0, 0, 0, FOREIGN_OUTPUT), world.now, foreign=True))
    before = world.status
    plan = world.reconcile(epoch, step.admit)
    check(before, plan, world, epoch)
    if before.epoch > epoch:
        return
    for name in plan.delete_jobs:
        # Cancel deletes the open attempt's Job without knowing whether it was created yet.
        assert name in world.jobs or name == job_name(NAME, before.attempt), name
    world.apply(plan, write=write, act=act)
    if write:
        world.used_numbers.update(a.number for a in world.status.attempts)


def make_world(max_attempts: int, jitter: str, fate_list: list[Fate], seed: int) -> World:
    task = (make_task(NAME).retries(max_attempts).retry(jitter=jitter, initialBackoff="2s", maxBackoff="20s",
                                                         permanentExitCodes=[PERMANENT_CODE])
            .timeout(f"{int(TIMEOUT)}s").obj())
    effective = replace(effective_of(task), start_timeout=timedelta(seconds=START_TIMEOUT))
    return World(task=task, fates=fate_list, effective=effective, rng=random.Random(seed))


@hsettings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(max_attempts=st.integers(1, 6), jitter=st.sampled_from(["full", "none", "additive"]),
       fate_list=st.lists(fates, min_size=1, max_size=6), script=st.lists(steps, min_size=3, max_size=40),
       seed=st.integers(0, 2**16))
def test_random_histories_keep_the_attempt_invariants_and_always_finish(
        max_attempts: int, jitter: str, fate_list: list[Fate], script: list[Step], seed: int) -> None:
    world = make_world(max_attempts, jitter, fate_list, seed)
    for step in script:
        play(world, step)

    # Then a healthy world: the pool admits, the leader stays, time runs on. Every fate ends
    # (hanging Jobs by the timeout, stuck pods by the start timeout), so the task must finish.
    for _ in range(8 * 6 + 10):  # 6: the most attempts a "pool" step can allow
        if world.status.phase is not None and world.status.phase.terminal:
            break
        wait = 25.0
        if world.status.phase is TaskPhase.RETRYING and world.status.next_attempt_at is not None:
            wait = max(wait, (world.status.next_attempt_at - world.now).total_seconds())
        play(world, Step(dt=wait, admit=True, event="none"))
    status = world.status
    assert status.phase is not None and status.phase.terminal, status
    # Once finished, nothing changes any more.
    for _ in range(3):
        play(world, Step(dt=100.0, admit=True, event="none"))
    assert world.status == status
    # Nothing foreign was ever adopted.
    assert status.output != FOREIGN_OUTPUT


def test_the_simulation_can_reach_every_end() -> None:
    """The world above is not vacuous: with chosen fates it ends in each terminal phase."""
    ends = {}
    for label, fate_list, max_attempts in [
        ("succeeded", [Fate("exit", 0, 1, 0, "ok")], 3),
        ("failed", [Fate("exit", 0, 1, PERMANENT_CODE)], 3),
        ("dead-lettered", [Fate("hang"), Fate("never_starts"), Fate("evicted"), Fate("vanish")], 4),
        ("rejected", [Fate("rejected")], 3),
    ]:
        world = make_world(max_attempts, "none", fate_list, 0)
        for _ in range(60):
            play(world, Step(dt=25.0, admit=True, event="none"))
        ends[label] = world.status
    assert ends["succeeded"].phase is TaskPhase.SUCCEEDED and ends["succeeded"].output == "ok"
    assert ends["failed"].phase is TaskPhase.FAILED
    assert ends["dead-lettered"].phase is TaskPhase.DEAD_LETTERED and ends["dead-lettered"].attempt == 4
    assert [a.reason for a in ends["dead-lettered"].attempts] == ["Timeout", "StartTimeout", "Evicted", "JobDeleted"]
    assert ends["rejected"].phase is TaskPhase.FAILED and ends["rejected"].attempts[-1].reason == "JobRejected"
