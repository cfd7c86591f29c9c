"""A reconcile's outcome is a value, and the work queue acts on it in one place
(`Controller.settle`): each outcome, one action of the queue. And what a reconcile raises comes to
one outcome (`outcome_of`), once. With the fake writer and the fake clock."""
from __future__ import annotations

import asyncio

import pytest

from cronoq.controller.outcome import (DEPOSED, DONE, STILL_REFUSED, Failed, Outcome, Refused, Throttled, outcome_of,
                                       retry_after)
from cronoq.apiserver.errors import ApiError, Conflict, Throttled as ThrottledError, error_of
from cronoq.kube.writes import NotLeader, Rejected
from cronoq.controller.workqueue import PoolWork, TaskWork

from tests.unit.fakes import NS, QUOTA_REFUSAL, World, counter

KEY = TaskWork(NS, "a")


def throttled(seconds: str | None = None, header: str = "Retry-After") -> ThrottledError:
    err = error_of(429, "Too Many Requests", "", {header: seconds} if seconds is not None else {})
    assert isinstance(err, ThrottledError)
    return err


def failed_before(world: World, times: int) -> None:
    """`times` failures of KEY in a row, their timers fired and gone."""
    for _ in range(times):
        world.controller.settle(KEY, Failed(RuntimeError("connection reset")))
    for timer in world.controller.queue._timers.values():
        timer.cancel()
    world.controller.queue._timers.clear()


def test_done_forgets_the_failures_in_a_row_and_queues_nothing() -> None:
    world = World()
    failed_before(world, 3)
    world.controller.settle(KEY, DONE)
    queue = world.controller.queue
    assert KEY not in queue._failures and not queue._timers and not queue.queued(KEY)
    world.controller.settle(KEY, Failed(RuntimeError("again")))
    assert world.clock.pending == [0.5], "the next failure backs off from the shortest delay"


def test_still_refused_keeps_the_backoff_going_and_queues_nothing() -> None:
    world = World()
    failed_before(world, 2)
    world.controller.settle(KEY, STILL_REFUSED)
    queue = world.controller.queue
    assert queue._failures[KEY] == 2 and not queue._timers and not queue.queued(KEY)


@pytest.mark.parametrize("first", [True, False])
def test_a_refused_job_backs_off_and_its_first_refusal_is_reconciled_again_at_once(first: bool) -> None:
    world = World()
    before = counter("cronoq_reconcile_retries_total", kind="task")
    failed_before(world, 1)
    world.controller.settle(KEY, Refused(QUOTA_REFUSAL, first=first))
    queue = world.controller.queue
    assert queue._failures[KEY] == 2 and world.clock.pending == [1.0], "the backoff doubles"
    assert queue.queued(KEY) is first, "the first refusal is said in the task's status now"
    assert counter("cronoq_reconcile_retries_total", kind="task") == before + 2


@pytest.mark.parametrize("seconds", [0.0, 2.0, 30.0])
def test_throttled_comes_back_when_the_server_says_with_a_second_of_jitter_at_most(seconds: float) -> None:
    world = World()
    before = counter("cronoq_reconcile_retries_total", kind="pool")
    pool = PoolWork(NS, "p")
    world.controller.settle(pool, Throttled(seconds))
    queue = world.controller.queue
    [delay] = world.clock.pending
    assert seconds <= delay < seconds + 1.0
    assert pool not in queue._failures, "not a failure: its backoff does not grow"
    assert counter("cronoq_reconcile_retries_total", kind="pool") == before + 1


def test_failed_retries_with_a_delay_that_doubles_with_each_failure_in_a_row() -> None:
    world = World()
    delays = []
    for _ in range(4):
        world.controller.settle(KEY, Failed(RuntimeError("connection reset")))
        delays.append(world.clock.pending[0])
        failed_before(world, 0)  # its timer gone, as if fired
    assert delays == [0.5, 1.0, 2.0, 4.0] and world.controller.queue._failures[KEY] == 4


def test_deposed_stops_acting_and_the_queue_processes_no_key_after() -> None:
    async def scenario() -> None:
        world = World()
        world.controller.settle(KEY, DEPOSED)
        assert not world.controller.term.acting
        assert not world.controller.queue._timers and KEY not in world.controller.queue._failures
        world.submit("a")
        await world.settle()
        assert world.writer.calls == [], "nothing written once deposed"
    asyncio.run(scenario())


@pytest.mark.parametrize(("err", "outcome"), [
    (NotLeader(), DEPOSED),
    (throttled("3"), Throttled(3.0)),
    (throttled(), Throttled(1.0)),
    (RuntimeError("connection reset"), None),
    (Rejected(422, "invalid"), None),
    (Conflict("modified"), None),
    (ApiError("Internal Server Error", status=500), None),
])
def test_what_a_reconcile_raises_comes_to_one_outcome(err: Exception, outcome: Outcome | None) -> None:
    assert outcome_of(err) == (outcome if outcome is not None else Failed(err))


def test_the_retry_after_of_a_throttled_request_is_the_servers_within_bounds() -> None:
    assert retry_after(throttled("1")) == 1.0
    assert retry_after(throttled("2", "retry-after")) == 2.0
    assert retry_after(throttled()) == 1.0, "no Retry-After: a second"
    assert retry_after(throttled("3600")) == 30.0, "capped"
    assert retry_after(throttled("-5")) == 0.0
    assert retry_after(throttled("soon")) == 1.0


def test_a_throttled_status_write_is_a_throttled_outcome_and_the_grant_goes_back() -> None:
    async def scenario() -> None:
        world = World(concurrency=1)
        world.submit("a")
        world.controller.grant(NS, "p")
        assert ("unit", "a") in world.controller.slots.grants
        world.writer.fail = [throttled("4")]
        outcome = await world.controller.reconcile(KEY)
        assert outcome == Throttled(4.0)
        assert ("unit", "a") not in world.controller.slots.grants, "a throttled reconcile keeps no slot"
    asyncio.run(scenario())


def test_a_quota_refusing_the_job_is_a_refused_outcome_then_still_refused_while_it_waits() -> None:
    async def scenario() -> None:
        world = World(concurrency=1)
        world.writer.job_fail = [Rejected(403, QUOTA_REFUSAL), Rejected(403, QUOTA_REFUSAL)]
        world.submit("a")
        world.controller.grant(NS, "p")
        outcomes = [await world.controller.reconcile(KEY)]
        assert outcomes == [Refused(QUOTA_REFUSAL, first=True)], world.writer.calls
        outcomes.append(await world.controller.reconcile(KEY))  # says so in the task's status
        assert outcomes[-1] == STILL_REFUSED
        outcomes.append(await world.controller.reconcile(KEY))  # the retry, refused again
        assert outcomes[-1] == Refused(QUOTA_REFUSAL, first=False)
        outcomes.append(await world.controller.reconcile(KEY))  # the quota has room now
        assert outcomes[-1] == DONE and world.writer.calls.count(("job", "a-a1")) == 1
    asyncio.run(scenario())
