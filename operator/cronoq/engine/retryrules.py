"""Retry rules: what follows a failed attempt, decided by why it failed (issue 39.5).

The defaults (`outcome.classify`, DESIGN §3) judge an attempt by how it ended; a rule looks at
that judgement — the attempt's reason, exit code and response code — and may say otherwise:
`Retry` (use up an attempt and retry), `Fail` (the task fails now) or `Ignore` (run it again
without using up an attempt: evictions, preemptions and lost nodes are not the task's fault).

Order: the task's own rules, then its pool's, then the defaults; the first rule that matches
wins. Rules judge only attempts that did not succeed and were not cancelled.

Bounds: an ignored attempt still takes a new number (numbers are fencing tokens and never
repeat), so a task may run `maxAttempts` plus the attempts ignored so far; at most
`maxIgnoredAttempts` are ignored (the next one the rules would ignore ends the task), and no
task runs past attempt 100, the status' bound.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from cronoq.api import AttemptOutcome, RetryOverride, RetryPolicy, RetryRule, RuleAction
from cronoq.api.limits import ATTEMPT_MESSAGE_LIMIT
from cronoq.engine import reasons
from cronoq.engine.outcome import Verdict, truncate

ATTEMPT_NUMBER_LIMIT = 100
"""The highest attempt number the status can hold (the CRD's bound on `status.attempt`)."""

Labelled = tuple[tuple[str, RetryRule], ...]
"""Rules in the order they are consulted, each with the name the attempt record gives it."""

_JUDGED = (AttemptOutcome.RETRYABLE, AttemptOutcome.PERMANENT)


@dataclass(frozen=True)
class Ruled:
    """The verdict on an attempt once the rules have had their say."""

    verdict: Verdict
    rule: str | None = None
    """The rule that decided (`task rule 1`, `pool rule 2`), None when the defaults did."""
    ignored: bool = False
    """An `Ignore` rule matched: the attempt does not use up one of maxAttempts."""


def labelled(task: RetryOverride | None, pool: RetryPolicy) -> Labelled:
    """The rules of a task in the pool, in the order they are consulted: the task's, then the pool's."""
    own = task.rules if task is not None and task.rules is not None else ()
    return (tuple((f"task rule {i}", r) for i, r in enumerate(own, 1))
            + tuple((f"pool rule {i}", r) for i, r in enumerate(pool.rules, 1)))


def matches(rule: RetryRule, verdict: Verdict) -> bool:
    """Every list the rule gives holds a value of the attempt's (one that has no exit code or no
    response code matches no list of them)."""
    return ((not rule.reasons or verdict.reason in rule.reasons)
            and (not rule.exit_codes or verdict.exit_code in rule.exit_codes)
            and (not rule.response_codes or verdict.response_code in rule.response_codes))


def judge(verdict: Verdict, rules: Labelled) -> Ruled:
    """The first matching rule's say on a failed attempt; the verdict unchanged when none matches."""
    if verdict.outcome not in _JUDGED:
        return Ruled(verdict)
    for name, rule in rules:
        if not matches(rule, verdict):
            continue
        outcome = AttemptOutcome.PERMANENT if rule.action is RuleAction.FAIL else AttemptOutcome.RETRYABLE
        reason, message = verdict.reason, verdict.message
        if outcome is AttemptOutcome.RETRYABLE and reason == reasons.PERMANENT_EXIT_CODE:
            # The defaults' word for a listed exit code no longer holds: the rule retries it.
            reason, message = reasons.EXIT_CODE, f"exited with code {verdict.exit_code}"
        said = f" ({name}: {rule.action.value})"
        message = truncate(message, ATTEMPT_MESSAGE_LIMIT - len(said.encode())) + said
        return Ruled(replace(verdict, outcome=outcome, reason=reason, message=message.lstrip()), name,
                     rule.action is RuleAction.IGNORE)
    return Ruled(verdict)


def last_attempt(policy: RetryPolicy, ignored: int) -> int:
    """The number of the last attempt the task may run: maxAttempts plus those ignored, at most 100."""
    return min(policy.max_attempts + ignored, ATTEMPT_NUMBER_LIMIT)
