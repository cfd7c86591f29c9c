"""Retry rules (`engine.retryrules`, issue 39.5): the first matching rule, the task's before its
pool's, says Retry, Fail or Ignore; an ignored attempt takes a new number but does not use up
maxAttempts, and at most maxIgnoredAttempts are ignored. Driven through `attempts.reconcile`
on the injected clock, each status fed back as the stored one."""
from __future__ import annotations

import json
import random

import pytest
from pydantic import ValidationError

from cronoq.api import AttemptOutcome, RetryRule, Task, TaskPhase, TaskPoolSpec
from cronoq.engine import reasons
from cronoq.engine.attempts import reconcile
from cronoq.engine.outcome import Verdict
from cronoq.engine.plan import Effective, Plan
from cronoq.engine.retryrules import judge, labelled
from cronoq.engine.observed import AttemptJob

from tests.unit.builders import at, attempt_job, make_task, observe, settings, with_status

EVICTED = {"action": "Ignore", "reasons": ["Evicted", "NodeLost", "Preempted"]}


def run(task: Task, seen, effective: Effective) -> Plan:
    return reconcile(task, effective, seen, random.Random(0))


def step(task: Task, plan: Plan) -> Task:
    return with_status(task, plan.status) if plan.status is not None else task


def evicted(n: int) -> AttemptJob:
    return attempt_job("t", n).running(at(0), seen=at(0)).with_(pod_phase="Failed", disruption="EvictionByEvictionAPI")


def run_attempts(task: Task, effective: Effective, ends: list[AttemptJob]) -> tuple[Task, list[Plan]]:
    """Start an attempt and end it as `ends` says, one after the other, a second apart (backoff 0s),
    until the task finishes or `ends` runs out."""
    plans: list[Plan] = []
    now = 0.0
    for job in ends:
        plan = run(task, observe(now=at(now), admit=True), effective)
        assert plan.create_job is not None, plan.status
        task = step(task, plan)
        now += 1
        plan = run(task, observe(job, now=at(now)), effective)
        plans.append(plan)
        task = step(task, plan)
        now += 1
        if task.status.phase.terminal:
            break
    return task, plans


def test_the_first_matching_rule_wins_the_tasks_before_the_pools() -> None:
    task = make_task().retry(rules=[{"action": "Retry", "exitCodes": [3]}]).obj()
    pool = TaskPoolSpec.model_validate({"retry": {"rules": [
        {"action": "Fail", "exitCodes": [3, 4]}, {"action": "Ignore", "exitCodes": [4]}]}})
    rules = labelled(task.spec.retry, pool.retry)
    assert [name for name, _ in rules] == ["task rule 1", "pool rule 1", "pool rule 2"]
    three = judge(Verdict(AttemptOutcome.RETRYABLE, reasons.EXIT_CODE, "exited with code 3", 3), rules)
    four = judge(Verdict(AttemptOutcome.RETRYABLE, reasons.EXIT_CODE, "exited with code 4", 4), rules)
    five = judge(Verdict(AttemptOutcome.RETRYABLE, reasons.EXIT_CODE, "exited with code 5", 5), rules)
    assert (three.rule, three.verdict.outcome, three.ignored) == ("task rule 1", AttemptOutcome.RETRYABLE, False)
    assert (four.rule, four.verdict.outcome) == ("pool rule 1", AttemptOutcome.PERMANENT)
    assert four.verdict.message == "exited with code 4 (pool rule 1: Fail)"
    assert (five.rule, five.verdict.message) == (None, "exited with code 5")


def test_every_list_of_a_rule_must_match_and_success_is_never_judged() -> None:
    rules = labelled(None, TaskPoolSpec.model_validate({"retry": {"rules": [
        {"action": "Fail", "reasons": ["HTTPStatus"], "responseCodes": [500]}]}}).retry)
    assert judge(Verdict(AttemptOutcome.RETRYABLE, reasons.HTTP_STATUS, response_code=500), rules).rule == "pool rule 1"
    assert judge(Verdict(AttemptOutcome.RETRYABLE, reasons.HTTP_STATUS, response_code=502), rules).rule is None
    assert judge(Verdict(AttemptOutcome.RETRYABLE, reasons.NETWORK_ERROR), rules).rule is None  # no answer, no code
    assert judge(Verdict(AttemptOutcome.SUCCESS, reasons.HTTP_STATUS, response_code=500), rules).rule is None


def test_a_rule_that_matches_nothing_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least one of reasons, exitCodes or responseCodes"):
        RetryRule.model_validate({"action": "Ignore", "reasons": []})
    with pytest.raises(ValidationError):
        RetryRule.model_validate({"action": "Ignore", "exitCodes": [256]})
    with pytest.raises(ValidationError):
        RetryRule.model_validate({"action": "Retry", "responseCodes": [99]})
    with pytest.raises(ValidationError):
        RetryRule.model_validate({"action": "Skip", "exitCodes": [1]})


def test_ignored_attempts_take_new_numbers_but_do_not_use_up_max_attempts() -> None:
    """maxAttempts 2, two evictions ignored: attempts 1..4 run; 3 and 4 count, the task dead-letters
    after attempt 4, and each record says which rule decided and whether it counted."""
    task = make_task().no_jitter().retry(maxAttempts=2, initialBackoff="0s", rules=[EVICTED]).obj()
    effective = settings(task)
    task, plans = run_attempts(task, effective, [evicted(1), evicted(2), attempt_job("t", 3).exited(1, "boom"),
                                                 attempt_job("t", 4).exited(1, "boom")])
    status = task.status
    assert status.phase is TaskPhase.DEAD_LETTERED and status.attempt == 4
    assert [a.number for a in status.attempts] == [1, 2, 3, 4]
    assert [(a.reason, a.rule, a.ignored) for a in status.attempts] == [
        (reasons.EVICTED, "task rule 1", True), (reasons.EVICTED, "task rule 1", True),
        (reasons.EXIT_CODE, None, None), (reasons.EXIT_CODE, None, None)]
    assert status.ignored_attempts == 2
    assert status.attempts[0].message.endswith("(task rule 1: Ignore)")
    assert plans[0].status.message.startswith("attempt 1 ended (Evicted) and does not count:")
    assert "attempt 2 of 3 after 0.0s" in plans[0].status.message
    assert "attempt 4 of 4 after" in plans[2].status.message
    assert [a.ignored for a in plans[0].ended] == [True]  # what the operator counts in its metric


def test_the_ignore_cap_ends_the_task_with_its_own_reason() -> None:
    task = make_task().no_jitter().retry(maxAttempts=5, initialBackoff="0s", maxIgnoredAttempts=2).obj()
    effective = settings(task, {"retry": {"rules": [EVICTED]}})
    task, _ = run_attempts(task, effective, [evicted(1), evicted(2), evicted(3), evicted(4)])
    status = task.status
    assert status.phase is TaskPhase.DEAD_LETTERED and status.attempt == 3 and status.ignored_attempts == 2
    finished = next(c for c in status.conditions if c.type == "Finished")
    assert finished.reason == reasons.IGNORED_ATTEMPTS_EXHAUSTED
    assert "2 attempts were ignored already (maxIgnoredAttempts)" in status.message
    last = status.attempts[-1]
    assert (last.rule, last.ignored, last.outcome) == ("pool rule 1", None, AttemptOutcome.RETRYABLE)


def test_fail_ends_the_task_now_with_attempts_left() -> None:
    task = make_task().retry(maxAttempts=3, rules=[{"action": "Fail", "exitCodes": [3]}]).obj()
    task, _ = run_attempts(task, settings(task), [attempt_job("t", 1).exited(3, "bad input")])
    status = task.status
    assert status.phase is TaskPhase.FAILED and status.attempt == 1
    (only,) = status.attempts
    assert (only.outcome, only.exit_code, only.rule) == (AttemptOutcome.PERMANENT, 3, "task rule 1")
    assert status.message == "attempt 1 failed permanently (ExitCode): exited with code 3: bad input (task rule 1: Fail)"


def test_a_retry_rule_overrides_permanent_exit_codes() -> None:
    task = make_task().no_jitter().retry(initialBackoff="0s", permanentExitCodes=[3],
                                         rules=[{"action": "Retry", "exitCodes": [3]}]).obj()
    task, plans = run_attempts(task, settings(task), [attempt_job("t", 1).exited(3)])
    first = task.status.attempts[0]
    assert task.status.phase is TaskPhase.RETRYING
    assert (first.outcome, first.reason, first.message) == (AttemptOutcome.RETRYABLE, reasons.EXIT_CODE,
                                                            "exited with code 3 (task rule 1: Retry)")


def _push(code: int, outcome: str) -> str:
    return json.dumps({"outcome": outcome, "reason": "HTTPStatus", "responseCode": code, "message": f"HTTP {code}"})


def test_push_409_made_retryable_and_500_permanent() -> None:
    pool = {"retry": {"rules": [{"action": "Retry", "responseCodes": [409]},
                                {"action": "Fail", "responseCodes": [500]}]}}
    task = make_task().unset("image").spec(http={"url": "https://example.test/hook"}).no_jitter().retry(
        initialBackoff="0s").obj()
    effective = settings(task, pool)
    # The push runner reports 409 as permanent (a 4xx) and 500 as retryable; the rules say otherwise.
    task, plans = run_attempts(task, effective, [attempt_job("t", 1).exited(2, _push(409, "permanent")),
                                                 attempt_job("t", 2).exited(1, _push(500, "retryable"))])
    status = task.status
    assert status.phase is TaskPhase.FAILED and status.attempt == 2
    assert [(a.response_code, a.outcome, a.rule) for a in status.attempts] == [
        (409, AttemptOutcome.RETRYABLE, "pool rule 1"), (500, AttemptOutcome.PERMANENT, "pool rule 2")]
    assert plans[0].status.phase is TaskPhase.RETRYING


def test_without_rules_nothing_changes() -> None:
    """The defaults stay: an eviction counts, and nothing about rules is written."""
    task = make_task().no_jitter().retry(maxAttempts=2, initialBackoff="0s").obj()
    task, _ = run_attempts(task, settings(task), [evicted(1), evicted(2)])
    status = task.status
    assert status.phase is TaskPhase.DEAD_LETTERED and status.attempt == 2 and status.ignored_attempts is None
    assert all(a.rule is None and a.ignored is None for a in status.attempts)
    assert "rule" not in json.dumps(status.to_dict())


def test_attempt_numbers_stop_at_the_status_bound() -> None:
    """maxAttempts 100 plus ignored attempts would pass attempt 100, which the status cannot hold."""
    task = make_task().no_jitter().retry(maxAttempts=100, initialBackoff="0s", maxIgnoredAttempts=100,
                                         rules=[EVICTED]).obj()
    status = with_status(task, None)
    effective = settings(task)
    ends = [evicted(n) for n in range(1, 40)] + [attempt_job("t", n).exited(1) for n in range(40, 102)]
    done, _ = run_attempts(status, effective, ends)
    assert done.status.phase is TaskPhase.DEAD_LETTERED and done.status.attempt == 100
    assert done.status.ignored_attempts == 39
