"""One explanation of why a task waits and of its limits (`engine.attempts.waiting`), without a
cluster: the reason the operator writes, what `describe` adds from the pool's counts, the place
in the admission order, and the limits `describe` and the dashboard show, all from one value."""
from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from cronoq.api import Task, TaskPool, TaskPoolSpec
from cronoq.engine import keylimits, reasons
from cronoq.engine.admission import Queue, fair_group, marks, submitter_of
from cronoq.engine.attempts import reconcile, waiting
from cronoq.engine.attempts.waiting import Held

from tests.unit.builders import T0, at, make_task, observe, settings


def spec(**fields: Any) -> TaskPoolSpec:
    return TaskPoolSpec.model_validate(fields)


def pool(running: int = 0, queued: int = 0, **fields: Any) -> TaskPool:
    return TaskPool.model_validate({"metadata": {"name": "p", "namespace": "ns"}, "spec": fields,
                                    "status": {"running": running, "queued": queued}})


def queued_task(name: str = "a", *, told: str = reasons.WAITING_FOR_SLOT, next_start_at: str | None = None,
                submitter: str | None = None, **fields: Any) -> Task:
    status: dict[str, Any] = {"phase": "Queued", "conditions": [
        {"type": "Running", "status": "False", "reason": told, "lastTransitionTime": T0.isoformat()}]}
    if next_start_at:
        status["nextStartAt"] = next_start_at
    built = make_task(name).spec(pool="p", **fields).status(status)
    return (built.submitted_by(submitter) if submitter else built).obj()


# --------------------------------------------------------------------------- the reason


@pytest.mark.parametrize("facts, reason", [
    (dict(found=False), reasons.POOL_NOT_FOUND),
    (dict(no_worker=True), reasons.WAITING_FOR_WORKER),
    (dict(no_worker=True, next_start_at=T0), reasons.WAITING_FOR_WORKER),
    (dict(next_start_at=T0), reasons.RATE_LIMITED),
    (dict(), reasons.WAITING_FOR_SLOT),
])
def test_the_reason_the_operator_gives(facts: dict[str, Any], reason: str) -> None:
    assert waiting.wait("p", spec(rateLimit={"startsPerSecond": 2}), **facts).reason == reason


def test_a_due_time_without_a_rate_limit_is_no_rate_limit() -> None:
    assert waiting.wait("p", spec(), next_start_at=T0).reason == reasons.WAITING_FOR_SLOT
    assert waiting.wait("p", None, next_start_at=T0).reason == reasons.WAITING_FOR_SLOT


@pytest.mark.parametrize("w, said", [
    (waiting.wait("p", None, found=False), "TaskPool p does not exist; the task starts once it does"),
    (waiting.wait("p", spec(), no_worker=True), "queued in pool p: no live worker of the pool has room"),
    (waiting.wait("p", spec(rateLimit={"startsPerSecond": 2, "burst": 3}), next_start_at=at(1.5)),
     "rate-limited: pool p starts at most 2 attempts/s (burst 3); next start due at 12:00:01.500Z"),
    (waiting.wait("p", spec(paused=True), running=5), "queued in pool p"),
])
def test_the_tasks_message(w: waiting.Wait, said: str) -> None:
    assert waiting.message(w).startswith(said)


def test_the_operator_writes_the_message_of_the_same_explanation() -> None:
    limited = spec(rateLimit={"startsPerSecond": 2, "burst": 1})
    task = make_task("a").obj()
    for seen, w in [
        (observe(pool_found=False, pool_name="p"), waiting.wait("p", None, found=False)),
        (observe(pool_name="p", pool=limited, next_start_at=at(1)), waiting.wait("p", limited, next_start_at=at(1))),
        (observe(pool_name="p", pool=spec()), waiting.wait("p", spec())),
    ]:
        plan = reconcile(task, settings(task, seen.pool), seen, random.Random(1))
        assert plan.status is not None
        running = next(c for c in plan.status.conditions if c.type == "Running")
        assert (plan.status.message, running.reason) == (waiting.message(w), w.reason)


# --------------------------------------------------------------------------- what holds the slot


def test_what_holds_the_slot_in_describes_order() -> None:
    def held(**facts: Any) -> Held:
        fields = facts.pop("spec", {"concurrency": 2})
        return waiting.wait("p", spec(**fields), **facts).held

    assert held(spec={"paused": True, "concurrency": 0}, running=0) is Held.PAUSED
    assert held(spec={"concurrency": 0}, running=0) is Held.STOPPED
    assert held(running=2) is Held.FULL
    assert held(running=1) is Held.FREE
    assert held() is Held.UNKNOWN, "the operator gives no counts"
    assert held(spec={"concurrency": 2, "groupConcurrency": 1}, running=1, group="acme",
                group_running=lambda: 1) is Held.GROUP_FULL


def test_the_group_is_counted_only_when_it_decides() -> None:
    asked: list[str] = []

    def count() -> int:
        asked.append("counted")
        return 0

    capped = {"concurrency": 2, "groupConcurrency": 1}
    waiting.wait("p", spec(**capped, paused=True), running=0, group_running=count)
    waiting.wait("p", spec(**capped), running=2, group_running=count)
    waiting.wait("p", spec(**capped, rateLimit={"startsPerSecond": 1}), running=0, next_start_at=T0,
                 group_running=count)
    waiting.wait("p", spec(concurrency=2), running=0, group_running=count)
    assert asked == []
    assert waiting.wait("p", spec(**capped), running=1, group_running=count).held is Held.FREE
    assert asked == ["counted"]


@pytest.mark.parametrize("task, found, said", [
    (queued_task(), None, "TaskPool p does not exist: the task starts once it is created"),
    (queued_task(), pool(concurrency=3, paused=True),
     "PLACE; pool p is paused (concurrency 3 kept): `cronoq pool resume p` starts it again"),
    (queued_task(), pool(concurrency=0), "PLACE; pool p has concurrency 0: it starts nothing"),
    (queued_task(told=reasons.RATE_LIMITED, next_start_at="2026-12-03T12:00:01Z"),
     pool(concurrency=1, rateLimit={"startsPerSecond": 2, "burst": 1}),
     "PLACE; rate-limited: next start in 0.4 s (pool p starts at most 2 attempts/s, burst 1)"),
    (queued_task(), pool(running=1, concurrency=1), "PLACE; pool p is full: 1 running of 1"),
    (queued_task(group="acme"), pool(running=1, concurrency=2, groupConcurrency=1),
     "PLACE; group acme has 1 of 1 running (pool p's groupConcurrency)"),
    (queued_task(), pool(running=1, concurrency=2, groupConcurrency=1),
     "PLACE; the tasks without a group has 1 of 1 running (pool p's groupConcurrency)"),
    (queued_task(), pool(running=1, concurrency=2), "PLACE; pool p runs 1 of 2: a slot is about to be granted"),
])
def test_what_describe_says(task: Task, found: TaskPool | None, said: str) -> None:
    w = waiting.of_task(task, found, group_running=lambda: 1)
    assert waiting.described(w, "PLACE", at(0.6)) == said


CI = "system:serviceaccount:team-a:ci"
BY_SUBMITTER = {"by": "Submitter", "weights": {CI: 1, "system:serviceaccount:team-b:ci": 3}}


TEAM_B = "system:serviceaccount:team-b:ci"


@pytest.mark.parametrize("task, found, running, queued, said", [
    (queued_task(submitter=CI, group="spread-1"), pool(running=4, concurrency=4, fairShare=BY_SUBMITTER),
     {CI: 2, TEAM_B: 2}, [],
     f"PLACE; pool p is full: 4 running of 4; submitter {CI} has 2 running of its share of 1 (weight 1 of 4 "
     "among the submitters with tasks running or queued)"),
    (queued_task(group="spread-1"), pool(running=4, concurrency=4, fairShare={"by": "Submitter"}),
     {"": 2, CI: 2}, [TEAM_B],
     "PLACE; pool p is full: 4 running of 4; the tasks without a submitter has 2 running of its share of 1.33 "
     "(weight 1 of 3 among the submitters with tasks running or queued)"),
    (queued_task(submitter=CI, group="acme"), pool(running=2, concurrency=6, groupConcurrency=2,
                                                   fairShare={"by": "Group", "weights": {"acme": 2}}),
     {"acme": 2, "idle": 0}, ["other"],
     "PLACE; group acme has 2 of 2 running (pool p's groupConcurrency); group acme has 2 running of its share of "
     "4 (weight 2 of 3 among the groups with tasks running or queued)"),
])
def test_what_describe_says_of_a_share(task: Task, found: TaskPool, running: dict[str, int], queued: list[str],
                                       said: str) -> None:
    fair = found.spec.fair_share
    assert fair is not None
    group = fair_group(task.spec.group, submitter_of(task), fair)
    w = waiting.of_task(task, found, group_running=lambda: running[group],
                        share=lambda: waiting.share_of(fair, found.spec.concurrency, group, running, queued))
    assert w.group == group
    assert waiting.described(w, "PLACE", at(0.6)) == said


def test_a_task_in_a_pool_that_shares_says_whose_share_it_waits_in() -> None:
    """The operator's message (written once per reason): the share never changes while it waits."""
    fair = spec(fairShare=BY_SUBMITTER)
    assert waiting.message(waiting.wait("p", fair, group=CI)) == \
        f"queued in pool p, in the share of submitter {CI} (weight 1)"
    assert waiting.message(waiting.wait("p", fair, group="")) == \
        "queued in pool p, in the share of the tasks without a submitter (weight 1)"
    assert waiting.message(waiting.wait("p", spec(fairShare={"by": "Group", "defaultWeight": 5}), group="acme")) == \
        "queued in pool p, in the share of group acme (weight 5)"
    assert waiting.message(waiting.wait("p", spec(), group="acme")) == "queued in pool p"


def test_the_operator_names_the_submitter_not_the_group_in_the_status() -> None:
    task = make_task("t").spec(pool="p", group="spread-7").submitted_by(CI).obj()
    fair = spec(concurrency=0, fairShare={"by": "Submitter"})
    plan = reconcile(task, settings(task, fair), observe(pool_name="p", pool=fair), random.Random(1))
    assert plan.status is not None and plan.status.message == f"queued in pool p, in the share of submitter {CI} (weight 1)"


def test_describe_counts_down_from_the_due_time_the_status_holds_only_while_the_operator_says_so() -> None:
    limited = pool(concurrency=1, rateLimit={"startsPerSecond": 2, "burst": 1})
    told = queued_task(told=reasons.RATE_LIMITED, next_start_at="2026-12-03T12:00:01Z")
    assert waiting.countdown(waiting.of_task(told, limited), at(2.1)).startswith("rate-limited: next start in 0.4 s")
    untold = queued_task(next_start_at="2026-12-03T12:00:01Z")
    assert waiting.countdown(waiting.of_task(untold, limited), at(0.6)) is None
    assert waiting.countdown(waiting.of_task(told, pool(concurrency=1)), at(0.6)) is None, "limit removed since"


# --------------------------------------------------------------------------- the place


def _queued(name: str, minute: int, **fields: Any) -> Task:
    return make_task(name).spec(pool="p", **fields).status(
        {"phase": "Queued", "submittedAt": (T0 + timedelta(minutes=minute)).isoformat()}).obj()


def test_a_queued_task_knows_its_place_in_admission_order() -> None:
    tasks = [_queued("late", 9), _queued("urgent", 8, priority=5), _queued("first", 1), _queued("b", 2),
             _queued("a", 2), _queued("c", 3)]
    assert str(waiting.place(tasks[0], tasks)) == "6th of 6 in pool p's queue (ahead: urgent, first, a and 2 more)"
    assert str(waiting.place(tasks[1], tasks)) == "1st of 6 in pool p's queue"
    assert waiting.place(tasks[3], tasks) == waiting.Place("p", 4, 6, ("urgent", "first", "a"))
    assert str(waiting.place(tasks[3], tasks)) == "4th of 6 in pool p's queue (ahead: urgent, first, a)"
    assert str(waiting.place(tasks[0], [])) == "1st of 1 in pool p's queue", "not listed: counted still"


def test_a_queued_task_of_a_group_counts_its_place_in_the_groups_rotation() -> None:
    tasks = [_queued(f"a{i}", i, group="acme") for i in range(5)] + [_queued("b0", 30, group="bolt")]
    assert str(waiting.place(tasks[-1], tasks)) == "2nd of 6 in pool p's queue (ahead: a0)"
    assert str(waiting.place(tasks[2], tasks)) == "4th of 6 in pool p's queue (ahead: a0, b0, a1)"


@pytest.mark.parametrize("seed", range(25))
def test_a_queued_task_lies_between_the_marks_of_its_pools_queue(seed: int) -> None:
    """Past 2,000 waiting, `describe` reads no other task: the operator's marks of its queue (every
    so many tasks in admission order, groups' turns played) bound a task's place, and name it
    exactly for a marked task. Checked against the order the queue pops."""
    rng = random.Random(seed)
    queue = Queue()
    tasks = {}
    for i in range(rng.randint(1, 300)):
        task = _queued(f"t{i}", rng.randint(0, 60), priority=rng.choice([0, 0, 0, 5]),
                       group=rng.choice([None, "acme", "bolt", "bolt"]))
        tasks[task.metadata.name] = task
        queue.put(waiting._candidate(task))
    queue_marks = marks(queue, T0, most=rng.randint(2, 12))
    assert queue_marks.marks[0].place == 1 and queue_marks.marks[-1].place == len(tasks)
    order = [c.name for c in queue.in_order()]
    for number, name in enumerate(order, start=1):
        found = waiting.between(tasks[name], queue_marks)
        assert found.first <= number <= found.last, (name, number, found)
        if any(m.name == name for m in queue_marks.marks):
            assert found.first == found.last == number


def test_in_a_pool_that_shares_by_submitter_the_place_follows_the_shares() -> None:
    """The gamer's 5 raised tasks in 5 groups would all go first by priority; by submitter, the
    honest tenant's task is second (the gamer holds no more slots than it)."""
    fair = TaskPoolSpec.model_validate({"fairShare": {"by": "Submitter"}}).fair_share
    gamer = [make_task(f"g{i}").spec(pool="p", priority=100, group=f"n{i}").submitted_by("gamer").status(
        {"phase": "Queued", "submittedAt": (T0 + timedelta(minutes=i)).isoformat()}).obj() for i in range(5)]
    honest = make_task("h0").spec(pool="p").submitted_by("honest").status(
        {"phase": "Queued", "submittedAt": (T0 + timedelta(minutes=30)).isoformat()}).obj()
    tasks = [*gamer, honest]
    assert str(waiting.place(honest, tasks)) == "6th of 6 in pool p's queue (ahead: g0, g1, g2 and 2 more)"
    assert str(waiting.place(honest, tasks, fair)) == "2nd of 6 in pool p's queue (ahead: g0)"
    assert str(waiting.place(honest, tasks, fair, {"honest": 2})) == \
        "3rd of 6 in pool p's queue (ahead: g0, g1)", "it already holds 2 slots: the gamer catches up first"


@pytest.mark.parametrize("seed", range(10))
def test_a_queued_task_lies_between_the_marks_of_a_pool_that_shares_by_submitter(seed: int) -> None:
    rng = random.Random(seed)
    fair = TaskPoolSpec.model_validate({"fairShare": {"by": "Submitter", "weights": {"b": 2}}}).fair_share
    queue = Queue(fair)
    queue.hold({"a": rng.randint(0, 3)})
    tasks = {}
    for i in range(rng.randint(1, 200)):
        built = make_task(f"t{i}").spec(pool="p", priority=rng.choice([0, 0, 9]), group=f"g{rng.randint(0, 30)}")
        who = rng.choice(["a", "b", "b", None])
        task = (built.submitted_by(who) if who else built).status(
            {"phase": "Queued", "submittedAt": (T0 + timedelta(minutes=rng.randint(0, 60))).isoformat()}).obj()
        tasks[task.metadata.name] = task
        queue.put(waiting._candidate(task))
    queue_marks = marks(queue, T0, most=rng.randint(2, 12))
    assert any(m.submitter for m in queue_marks.marks) or not any(t.metadata.annotations for t in tasks.values())
    for number, c in enumerate(queue.in_order(), start=1):
        found = waiting.between(tasks[c.name], queue_marks, fair)
        assert found.first <= number <= found.last, (c.name, number, found)


def test_a_place_between_marks_says_how_far_apart_they_are_and_when_they_were_taken() -> None:
    queue = Queue()
    tasks = [_queued(f"t{i}", i) for i in range(10)]
    for task in tasks:
        queue.put(waiting._candidate(task))
    queue_marks = marks(queue, T0, most=4)  # t0, t3, t6, t9
    assert [m.name for m in queue_marks.marks] == ["t0", "t3", "t6", "t9"]
    assert str(waiting.between(tasks[4], queue_marks)) == (
        "between the 5th and the 6th of 10 in pool p's queue (as of 12:00:00Z, from the pool's queue marks)")
    assert str(waiting.between(tasks[6], queue_marks)).startswith("7th of 10 in pool p's queue")
    newcomer = _queued("new", 99)
    assert str(waiting.between(newcomer, queue_marks)).startswith("11th of 11"), "came after the marks: after them"


@pytest.mark.parametrize("n, said", [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"), (3401, "3,401st"),
                                     (13, "13th"), (21, "21st"), (102, "102nd"), (111, "111th")])
def test_ordinals(n: int, said: str) -> None:
    assert waiting.ordinal(n) == said


# --------------------------------------------------------------------------- the limits


def test_describe_and_the_dashboard_show_the_same_limits() -> None:
    task = make_task("a").spec(deadline="2h").retry(maxRetryDuration="30m").obj()
    limits = waiting.limits(task, spec(startDeadline="1h"))
    assert [(limit.label, limit.at) for limit in limits] == [
        ("Start deadline", at(3600)), ("Deadline", at(7200))], "no retry budget before the first attempt"
    assert waiting.explain(task, pool(startDeadline="1h"), T0).limits_text() == (
        "start by 13:00:00Z (startDeadline 1h); deadline 14:00:00Z (2h from submission)")


def test_after_the_first_attempt_the_retry_budget_replaces_the_start_deadline() -> None:
    task = make_task("a").spec(startDeadline="1h").retry(maxRetryDuration="30m").status(
        {"phase": "Retrying", "attempt": 1, "firstAttemptAt": at(60).isoformat()}).obj()
    (limit,) = waiting.limits(task, None)
    assert (limit.label, limit.at, limit.text) == (
        "No retry after", at(60 + 1800), "no retry after 12:31:00Z (maxRetryDuration 30m)")


def test_a_finished_task_has_no_limits() -> None:
    task = make_task("a").spec(deadline="2h").status({"phase": "Succeeded"}).obj()
    assert waiting.limits(task, None) == [] and waiting.explain(task, None, T0).limits_text() == ""


# --------------------------------------------------------------------------- the whole explanation

DUE = "2026-12-03T12:00:01Z"
LIMITED = {"concurrency": 1, "rateLimit": {"startsPerSecond": 2, "burst": 1}}


@pytest.mark.parametrize("task, found, now, waits, rate_due, start, ahead, limits", [
    (queued_task(), pool(running=1, concurrency=1), at(0), "PLACE; pool p is full: 1 running of 1", None, None,
     False, ""),
    (queued_task(), None, at(0), "TaskPool p does not exist: the task starts once it is created", None, None, False,
     ""),
    (queued_task(told=reasons.RATE_LIMITED, next_start_at=DUE), pool(**LIMITED), at(0.6),
     "PLACE; rate-limited: next start in 0.4 s (pool p starts at most 2 attempts/s, burst 1)", at(1), None, False,
     ""),
    (queued_task(next_start_at=DUE), pool(**LIMITED), at(0.6), "PLACE; pool p runs 0 of 1: a slot is about to be "
     "granted", None, None, False, ""),
    (queued_task(told=reasons.RATE_LIMITED, next_start_at=DUE), pool(concurrency=1), at(0.6),
     "PLACE; pool p runs 0 of 1: a slot is about to be granted", None, None, False, ""),
    (queued_task(startDelay="10m", startDeadline="1h"), pool(concurrency=0), at(1200),
     "PLACE; pool p has concurrency 0: it starts nothing", None, at(600), False,
     "start by 13:10:00Z (startDeadline 1h)"),
    (make_task("a").spec(pool="p", startDelay="10m").status({"phase": "Blocked"}).obj(), pool(), at(0), None,
     None, at(600), True, ""),
    (make_task("a").spec(pool="p", notBefore=at(600).isoformat(), deadline="2h").status(
        {"phase": "Running", "attempt": 1}).obj(), pool(), at(0), None, None, at(600), False,
     "deadline 14:00:00Z (2h from submission)"),
    (make_task("a").spec(pool="p", deadline="2h", startDelay="10m").status({"phase": "Succeeded", "attempt": 1}).obj(),
     pool(), at(0), None, None, at(600), False, ""),
])
def test_one_explanation_from_the_tasks_facts_its_pools_and_the_clock(
        task: Task, found: TaskPool | None, now: Any, waits: str | None, rate_due: Any, start: Any, ahead: bool,
        limits: str) -> None:
    said = waiting.explain(task, found, now, place="PLACE", group_running=lambda: 0)
    assert said.waiting_text() == waits
    assert (said.wait is None) == (waits is None), "a wait only while queued"
    assert said.rate_due == rate_due, "the pool's next start only while the operator says it waits for it"
    assert (said.not_before, said.start_ahead) == (start, ahead)
    assert said.limits_text() == limits
    assert said.limits == tuple(waiting.limits(task, found.spec if found is not None else None))


def test_every_reason_wait_gives_is_a_kind_of_wait_worded_for_the_task_and_for_describe() -> None:
    limited = spec(rateLimit={"startsPerSecond": 2})
    burst = keylimits.Debouncing("deploy/x", "b", True, T0, T0)
    given = {waiting.wait("p", limited, **facts).reason for facts in (  # type: ignore[arg-type]
        dict(found=False), dict(no_worker=True), dict(next_start_at=T0), dict(), dict(debounce=burst))}
    assert given == set(waiting.KINDS)
    for reason in given:
        w = waiting.Wait("p", reason, Held.FREE, limited, T0 if reason == reasons.RATE_LIMITED else None,
                         debounce=burst if reason == reasons.DEBOUNCING else None)
        assert waiting.message(w) and waiting.described(w, "PLACE", at(0.2))


def test_a_new_kind_of_wait_is_one_entry_in_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    """How another kind of wait (a concurrency key held elsewhere, say) plugs in: its reason, its
    message and its line for describe; the pool held back still comes first."""
    kind = waiting.Kind(lambda w: f"queued in pool {w.pool}: waiting for its key",
                        lambda w, now: "another task holds its key")
    monkeypatch.setitem(waiting.KINDS, "WaitingForKey", kind)
    w = waiting.Wait("p", "WaitingForKey", Held.FREE, spec())
    assert waiting.message(w) == "queued in pool p: waiting for its key"
    assert waiting.described(w, "PLACE", T0) == "PLACE; another task holds its key"
    paused = waiting.Wait("p", "WaitingForKey", Held.PAUSED, spec(paused=True))
    assert waiting.described(paused, "PLACE", T0).startswith("PLACE; pool p is paused")


def test_a_debouncing_task_is_explained_in_the_operators_words_wherever_it_is_read() -> None:
    """The operator words the wait from the burst (keylimits.Debouncing); a client (describe, the
    dashboard) reads the same words from the status, whatever the pool's slots say."""
    burst = keylimits.Debouncing("rebuild/site", "a", True, at(30), at(600))
    operator = waiting.wait("p", spec(), debounce=burst)
    said = waiting.message(operator)
    assert operator.reason == reasons.DEBOUNCING
    assert said == "debouncing key rebuild/site: starts at 12:00:30Z unless a newer task arrives (at the latest 12:10:00Z)"
    task = make_task("a").spec(pool="p", concurrencyKeys=["rebuild/site"]).status({
        "phase": "Queued", "message": said, "conditions": [{"type": "Running", "status": "False",
                                                          "reason": reasons.DEBOUNCING, "message": said,
                                                          "lastTransitionTime": T0.isoformat()}]}).obj()
    client = waiting.explain(task, pool(concurrency=5), at(1), place="PLACE")
    assert client.wait is not None and client.wait.reason == reasons.DEBOUNCING
    assert client.waiting_text() == said, "no place: it is in no queue while it debounces"
    assert waiting.explain(queued_task(), pool(concurrency=5), at(1), place="PLACE").wait.reason \
        == reasons.WAITING_FOR_SLOT  # type: ignore[union-attr]
