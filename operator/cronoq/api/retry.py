"""The retry policy a Task and its TaskPool share (DESIGN §4): attempts, backoff and jitter, the
retry budget in time, and the retry rules by reason, exit code and response code; a task's
override of its pool's policy."""
from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import ConfigDict, Field, model_validator

from cronoq.api.durations import DurationBounds, cel_valid, format as format_duration
from cronoq.api.model import Model, rule, validations


class Jitter(StrEnum):
    """How the delay before a retry is randomised (DESIGN §4)."""

    FULL = "full"
    NONE = "none"
    ADDITIVE = "additive"


MaxAttempts = Annotated[int, Field(ge=1, le=100)]
Backoff = Annotated[timedelta, DurationBounds("0s", "24h")]
RetryDuration = Annotated[timedelta, DurationBounds("1s", "8760h", off=True)]
"""A retry budget in time (maxRetryDuration): 1s to a year, or 0s for none."""
Multiplier = Annotated[float, Field(ge=1.0, le=10.0)]
ExitCode = Annotated[int, Field(ge=1, le=255)]
PermanentExitCodes = Annotated[tuple[ExitCode, ...], Field(max_length=32, json_schema_extra={"x-kubernetes-list-type": "set"})]

_BACKOFF_ORDER = rule(
    "!has(self.initialBackoff) || !has(self.maxBackoff) || "
    f"!{cel_valid('self.initialBackoff')} || !{cel_valid('self.maxBackoff')} || "
    "duration(self.maxBackoff) >= duration(self.initialBackoff)",
    "maxBackoff must be at least initialBackoff", field_path=".maxBackoff")


def _check_backoff_order(initial: timedelta | None, most: timedelta | None) -> None:
    if initial is not None and most is not None and most < initial:
        raise ValueError(f"maxBackoff ({format_duration(most)}) must be at least initialBackoff ({format_duration(initial)})")


def _check_unique(codes: tuple[int, ...] | None) -> None:
    if codes and len(set(codes)) != len(codes):
        raise ValueError(f"permanentExitCodes has duplicates: {list(codes)}")


class RuleAction(StrEnum):
    """What a retry rule does with the attempt it matches."""

    RETRY = "Retry"
    FAIL = "Fail"
    IGNORE = "Ignore"


RULES_LIMIT: Final = 16
RuleReason = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Z][A-Za-z0-9]*$")]
RuleExitCode = Annotated[int, Field(ge=0, le=255)]
RuleResponseCode = Annotated[int, Field(ge=100, le=599)]
_SET: Final[dict[str, Any]] = {"x-kubernetes-list-type": "set"}


class RetryRule(Model):
    """One retry rule: when an attempt that did not succeed matches, `action` decides what
    follows instead of the defaults. Every list given must match (reason, exit code and response
    code); within a list, any one value does. Rules are consulted in order, the task's before its
    pool's, and the first that matches wins; when none does, the defaults decide (permanentExitCodes,
    then DESIGN §3)."""

    model_config = ConfigDict(json_schema_extra=validations(rule(
        "(has(self.reasons) ? size(self.reasons) : 0) + (has(self.exitCodes) ? size(self.exitCodes) : 0) + "
        "(has(self.responseCodes) ? size(self.responseCodes) : 0) > 0",
        "a retry rule must match on at least one of reasons, exitCodes or responseCodes")))

    action: RuleAction
    """`Retry` (retry with backoff, using up an attempt; `DeadLettered` when they are used up),
    `Fail` (the task fails now, `Failed`, even with attempts left) or `Ignore` (run it again
    without using up an attempt: the next attempt still gets a new number; at most
    `maxIgnoredAttempts` are ignored)."""
    reasons: tuple[RuleReason, ...] = Field((), max_length=16, json_schema_extra=_SET)
    """Attempt reasons that match (at most 16), as the attempt record spells them: e.g. `Evicted`,
    `NodeLost`, `Preempted`, `PodDeleted`, `OOMKilled`, `Timeout`, `LeaseExpired`, `StartTimeout`,
    `ExitCode`, `HTTPStatus`, `NetworkError`, `Retryable`, `Permanent`."""
    exit_codes: tuple[RuleExitCode, ...] = Field((), max_length=32, json_schema_extra=_SET)
    """Exit codes of the task container that match (0 to 255, at most 32). An attempt without an
    exit code (a lost pod, a timeout) does not match."""
    response_codes: tuple[RuleResponseCode, ...] = Field((), max_length=32, json_schema_extra=_SET)
    """HTTP status codes a push task's endpoint answered with that match (100 to 599, at most 32),
    e.g. `409` to retry a conflict, `500` to fail at once. An attempt without an answer does not match."""

    @model_validator(mode="after")
    def _matches_something(self) -> RetryRule:
        if not (self.reasons or self.exit_codes or self.response_codes):
            raise ValueError("a retry rule must match on at least one of reasons, exitCodes or responseCodes")
        return self


RetryRules = Annotated[tuple[RetryRule, ...], Field(max_length=RULES_LIMIT)]
MaxIgnored = Annotated[int, Field(ge=0, le=100)]


class RetryPolicy(Model):
    """How a failed attempt is retried. The delay before attempt n (n ≥ 2) is
    min(initialBackoff × multiplier^(n−2), maxBackoff), randomised by `jitter`."""

    model_config = ConfigDict(json_schema_extra=validations(_BACKOFF_ORDER))

    max_attempts: MaxAttempts = 3
    """Most attempts a task gets, counting the first (1 to 100); 1 disables retries. Default 3."""
    initial_backoff: Backoff = timedelta(seconds=1)
    """Delay before the second attempt, e.g. `500ms`, `30s`, `1m30s` (0s to 24h). Default 1s."""
    multiplier: Multiplier = 2.0
    """Factor the delay grows by with each further attempt (1.0 to 10.0). Default 2.0."""
    max_backoff: Backoff = timedelta(seconds=60)
    """Upper bound of the delay between attempts (0s to 24h, at least initialBackoff). Default 60s."""
    jitter: Jitter = Jitter.FULL
    """Randomisation of the delay d: `full` (uniform in [0, d], the default), `none` (exactly d),
    or `additive` (d plus uniform in [0, d], capped at maxBackoff)."""
    permanent_exit_codes: PermanentExitCodes = ()
    """Exit codes (1 to 255) that mean a permanent failure: the task fails without retrying."""
    max_retry_duration: RetryDuration | None = None
    """A retry budget in time, e.g. `1h` (1s to 8760h; 0s: none), counted from the dispatch of the
    first attempt: no attempt starts after it, and a retry whose backoff would end after it ends
    the task at once (DeadLettered, reason RetryDurationExhausted). With maxAttempts, the first
    budget used up ends the task. Unset: none."""
    rules: RetryRules = ()
    """Ordered rules that decide what follows a failed attempt by its reason, exit code or
    response code: retry, fail now, or ignore it (at most 16). A task's own rules are consulted
    first, then these; the first that matches wins; when none does, the defaults decide."""
    max_ignored_attempts: MaxIgnored = 10
    """Most attempts an `Ignore` rule may leave uncounted (0 to 100). The next attempt it would
    ignore ends the task `DeadLettered` (reason IgnoredAttemptsExhausted), so a node that keeps
    dying cannot keep a task running forever. Default 10."""

    @model_validator(mode="after")
    def _consistent(self) -> RetryPolicy:
        _check_backoff_order(self.initial_backoff, self.max_backoff)
        _check_unique(self.permanent_exit_codes)
        return self

    def overlay(self, override: RetryOverride | None) -> RetryPolicy:
        """This policy with the fields `override` sets replaced. When the mix would put
        initialBackoff above maxBackoff, the value the task set wins: a task's initialBackoff
        above the pool's cap lifts the cap, a task's maxBackoff below the pool's initial delay
        lowers the initial delay. The task's `rules` are not merged here: they come before the
        pool's (`cronoq.engine.retryrules`)."""
        if override is None:
            return self
        changes = {name: value for name in type(override).model_fields
                   if (value := getattr(override, name)) is not None and name != "rules"}  # added to, not replaced
        initial = changes.get("initial_backoff", self.initial_backoff)
        most = changes.get("max_backoff", self.max_backoff)
        if initial > most:
            if "initial_backoff" in changes:
                changes["max_backoff"] = initial
            else:
                changes["initial_backoff"] = most
        return RetryPolicy(**{**self.__dict__, **changes})


class RetryOverride(Model):
    """A task's changes to its pool's retry policy: each field set here replaces the pool's;
    fields left out come from the pool (DESIGN §4 gives the defaults)."""

    model_config = ConfigDict(json_schema_extra=validations(_BACKOFF_ORDER))

    max_attempts: MaxAttempts | None = None
    """Most attempts, counting the first (1 to 100); 1 disables retries. Unset: the pool's."""
    initial_backoff: Backoff | None = None
    """Delay before the second attempt, e.g. `500ms`, `30s`, `1m30s` (0s to 24h). Unset: the pool's."""
    multiplier: Multiplier | None = None
    """Factor the delay grows by with each further attempt (1.0 to 10.0). Unset: the pool's."""
    max_backoff: Backoff | None = None
    """Upper bound of the delay between attempts (0s to 24h). Unset: the pool's."""
    jitter: Jitter | None = None
    """Randomisation of the delay: `full`, `none` or `additive`. Unset: the pool's."""
    permanent_exit_codes: PermanentExitCodes | None = None
    """Exit codes (1 to 255) that mean a permanent failure. Unset: the pool's."""
    max_retry_duration: RetryDuration | None = None
    """Retry budget in time from the first attempt's dispatch, e.g. `1h` (1s to 8760h; 0s: none,
    whatever the pool says). Unset: the pool's."""
    rules: RetryRules | None = None
    """The task's own retry rules (at most 16), consulted before its pool's: the first that
    matches, of the task's then the pool's, decides."""
    max_ignored_attempts: MaxIgnored | None = None
    """Most attempts an `Ignore` rule may leave uncounted (0 to 100). Unset: the pool's."""

    @model_validator(mode="after")
    def _consistent(self) -> RetryOverride:
        _check_backoff_order(self.initial_backoff, self.max_backoff)
        _check_unique(self.permanent_exit_codes)
        return self
