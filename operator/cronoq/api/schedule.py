"""The TaskSchedule resource: Tasks created from a template on a cron schedule or a fixed
interval, each fire exactly once (DESIGN §11).

The API server checks the shape (exactly one of `schedule` and `every`, five fields or a macro,
a duration of at least 1s, known policies, bounded limits). Whether a cron expression or a time
zone really parses is the engine's to say (`cronoq.engine.schedule`): such a schedule is accepted
here and reported with a `Ready` condition, reason `InvalidSchedule`, naming the parser's error.

The template's Task spec is the Task's own model without its immutability rules (a schedule's
template may be edited; the change applies to later fires), and without `key` and `cancel`: the
key of a fire is derived from the schedule and the fire time, and a template cannot be cancelled.
"""
from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from cronoq.api import durations
from cronoq.api.pool import SUBMITTER
from cronoq.api.meta import API_VERSION, Conditions, ObjectMeta
from cronoq.api.model import LabelValue, Model, Timestamp, rule, validations
from cronoq.api.notify import NOTIFIED_MOST, Notified
from cronoq.api.task import TaskSpec

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The usual cron macros, as the five-field expressions they stand for."""

SCHEDULE_PATTERN = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[^\s]+( +[^\s]+){4})$"
"""Five space-separated fields, or a macro. The fields themselves are checked by the parser."""

EVERY_PATTERN = r"^([0-9]{1,6}h)?([0-9]{1,6}m)?([0-9]{1,6}s)?$"
"""Whole seconds only: fire times, and the Task names made from them, are whole seconds. A
subset of the durations grammar, so CEL's `duration()` and `durations.parse` read it alike."""

EVERY_MIN, EVERY_MAX = "1s", "8760h"


def _every(value: Any) -> timedelta:
    delta = value if isinstance(value, timedelta) else durations.parse(value)
    if delta % timedelta(seconds=1):
        raise durations.DurationError(f"every: {durations.format(delta)} is not a whole number of seconds")
    if not durations.parse(EVERY_MIN) <= delta <= durations.parse(EVERY_MAX):
        raise durations.DurationError(f"every: {durations.format(delta)} must be between {EVERY_MIN} and {EVERY_MAX}")
    return delta


Every = Annotated[
    timedelta,
    BeforeValidator(_every),
    PlainSerializer(durations.format, return_type=str),
    WithJsonSchema({
        "type": "string", "pattern": EVERY_PATTERN, "minLength": 2, "maxLength": durations.MAX_LENGTH,
        "x-kubernetes-validations": [rule(
            f"!self.matches('{EVERY_PATTERN}') || self == '' || "
            f"(duration(self) >= duration('{EVERY_MIN}') && duration(self) <= duration('{EVERY_MAX}'))",
            f"must be between {EVERY_MIN} and {EVERY_MAX}, in whole seconds")],
    }),
]

StartingDeadline = Annotated[timedelta, durations.DurationBounds("1s", "8760h")]
HistoryLimit = Annotated[int, Field(ge=0, le=1000)]
Count = Annotated[int, Field(ge=0, le=2**53)]


class ConcurrencyPolicy(StrEnum):
    """What a fire does while an earlier fire's Task is unfinished."""

    ALLOW = "Allow"
    FORBID = "Forbid"
    REPLACE = "Replace"
    BUFFER_ONE = "BufferOne"
    """The newest waiting fire starts when the unfinished Tasks have ended; older waiting ones are skipped."""
    BUFFER_ALL = "BufferAll"
    """Every waiting fire starts, oldest first, one at a time, each when the previous one has ended."""


BUFFERING = (ConcurrencyPolicy.BUFFER_ONE, ConcurrencyPolicy.BUFFER_ALL)
CatchupWindow = Annotated[timedelta, durations.DurationBounds("1s", "8760h")]


def _template_rules(schema: dict[str, Any], model: type) -> None:
    """The Task spec's rules, minus the immutability ones (they guard a Task, not a template)."""
    schema["x-kubernetes-validations"] = [
        rule("!has(self.key)", "spec.taskTemplate.spec.key is derived from the schedule and the fire time; "
             "leave it out", field_path=".key", reason="FieldValueForbidden"),
        rule("!has(self.cancel) || !self.cancel", "spec.taskTemplate.spec.cancel cannot be true in a template",
             field_path=".cancel", reason="FieldValueForbidden"),
    ]


class TemplateTaskSpec(TaskSpec):
    """The spec of each Task a fire creates: every Task field but `key` and `cancel`."""

    model_config = ConfigDict(json_schema_extra=_template_rules)


class TemplateMetadata(Model):
    """Labels and annotations put on each Task a fire creates (cronoq adds its own)."""

    labels: dict[str, LabelValue] = Field(
        default_factory=dict, max_length=32, description="Labels of each Task (at most 32).",
        json_schema_extra=validations(rule("self.all(k, k.size() <= 317)", "keys must be at most 317 characters")))
    annotations: dict[str, Annotated[str, Field(max_length=8192)]] = Field(
        default_factory=dict, max_length=32,
        description=f"Annotations of each Task (at most 32; not {SUBMITTER}: a fire's submitter is the schedule's).",
        json_schema_extra=validations(
            rule("self.all(k, k.size() <= 317)", "keys must be at most 317 characters"),
            rule(f"!('{SUBMITTER}' in self)",
                 f"spec.taskTemplate.metadata.annotations: {SUBMITTER} is not the template's to set: each fire is "
                 "submitted by whoever created the schedule (its own annotation)", reason="FieldValueForbidden")))


class TaskTemplate(Model):
    """The Task each fire creates."""

    metadata: TemplateMetadata | None = None
    """Labels and annotations of the Task."""
    spec: TemplateTaskSpec
    """The Task's spec: pool, priority, image, command, payload, retry, timeout and the rest."""


BACKFILL_MOST = 10_000
"""Most fire times one backfill range may hold."""


class Backfill(Model):
    """A stretch of past fire times to run now (`cronoq schedule backfill`)."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("self.end >= self.start", "spec.backfills[].end must not be before start", field_path=".end"),
    ))

    start: Timestamp
    """The first fire time it may run (inclusive), e.g. `2026-12-01T00:00:00Z`."""
    end: Timestamp
    """The last fire time it may run (inclusive). Fire times after now are not backfilled: they
    are the schedule's own fires when they come."""


class BackfillProgress(Model):
    """How far the operator has run one of spec.backfills."""

    start: Timestamp
    """The range's start, as in spec.backfills."""
    end: Timestamp
    """The range's end, as in spec.backfills."""
    through: Timestamp | None = None
    """Every fire time of the range up to this one has its Task (made by the backfill or already
    there); unset before the first."""
    created: Count = 0
    """Tasks the backfill created (fire times whose Task existed already are not counted)."""
    done: bool = False
    """Every fire time of the range up to min(end, the time it was asked) has its Task."""
    refused: str | None = Field(None, max_length=1024)
    """Why the range is not run (e.g. more than 10,000 fire times)."""


class TaskScheduleSpec(Model):
    """When to fire, what each fire creates, and what to do about overlaps and downtime."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("has(self.schedule) != has(self.every)", "exactly one of spec.schedule and spec.every must be set",
             field_path=".schedule"),
    ))

    schedule: str | None = Field(None, min_length=1, max_length=256, pattern=SCHEDULE_PATTERN)
    """A five-field cron expression (minute hour day-of-month month day-of-week, e.g. `*/15 9-17 * * MON-FRI`)
    or a macro (`@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`), read
    in `timeZone`. Exactly one of `schedule` and `every`."""
    every: Every | None = None
    """A fixed interval in whole seconds, e.g. `30s`, `5m`, `1h30m` (1s to 8760h). Fires at the
    multiples of the interval since the Unix epoch (so `every: 1h` fires on the hour, in UTC).
    Exactly one of `schedule` and `every`."""
    time_zone: str = Field("UTC", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$")
    """IANA time zone the cron expression is read in, e.g. `Europe/Berlin` (default UTC). On
    daylight-saving days a time that does not exist fires once, at the first minute after the
    gap; a time that happens twice fires once, at its first occurrence."""
    task_template: TaskTemplate
    """The Task each fire creates (named `<schedule>-<fire time in Unix seconds>`)."""
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.ALLOW
    """`Allow` (default): fires run side by side. `Forbid`: a fire while an earlier fire's Task
    is unfinished is skipped and counted in status.skippedFires. `Replace`: the unfinished Tasks
    are cancelled, then the new one is created. `BufferOne`: a fire while a Task is unfinished
    waits and starts when none is (a newer waiting fire replaces it, the older counted in
    status.skippedFires). `BufferAll`: every such fire waits and they start oldest first, one at a
    time (bound the wait with catchupWindow or startingDeadline)."""
    max_active_tasks: int | None = Field(None, ge=1, le=100_000)
    """With `Allow`: most unfinished Tasks of this schedule at once (1 to 100000); a fire beyond
    it is skipped and counted in status.skippedFires. Unset: no limit."""
    starting_deadline: StartingDeadline | None = None
    """A fire the operator notices later than this after its time is missed, not run (1s to
    8760h). Unset: a late fire always runs. Without catchupWindow, after downtime at most one
    missed fire runs (the latest, if within the deadline); the others are counted in
    status.missedFires."""
    catchup_window: CatchupWindow | None = None
    """Fires missed while the operator was down (or late) that still run, oldest first, one after
    another within concurrencyPolicy: each fire no older than this (1s to 8760h). Older ones are
    counted in status.missedFires. Unset (default): after downtime only the latest missed fire
    runs. With startingDeadline too, the shorter of the two applies."""
    pause_after_failures: int | None = Field(None, ge=1, le=1000)
    """Stop firing after this many of the schedule's Tasks in a row ended Failed or DeadLettered
    (1 to 1000); the `Paused` condition says so, and any edit of the spec (`cronoq schedule
    resume`) resumes. A Task that succeeds resets the count; Cancelled and Skipped ones leave it.
    Unset (default): never paused."""
    suspend: bool = False
    """True: no fires. Fire times that pass while suspended are neither run nor counted, and
    resuming never catches up on them."""
    backfills: tuple[Backfill, ...] = Field((), max_length=20)
    """Past stretches of fire times to run now (at most 20; `cronoq schedule backfill NAME --from
    --to` adds one): each fire time in [start, end] (and not after now) whose Task does not exist
    gets it, named as the scheduled fire of that time would be, oldest first, one at a time (with
    `Allow`, one after another within maxActiveTasks; with any other policy, each when none of the
    schedule's Tasks is unfinished), after the schedule's own due fires. Each fire time runs once
    however often the operator decides or fails over (status.backfills records how far each
    range has run); a range of more than 10,000 fire times is refused. Adding or removing a range
    changes nothing else: it is not an edit of the fires (no resume, no skip of waiting fires)."""
    successful_tasks_history_limit: HistoryLimit = 3
    """Succeeded Tasks of this schedule to keep (0 to 1000, default 3); older ones are deleted."""
    failed_tasks_history_limit: HistoryLimit = 1
    """Tasks that ended otherwise (Failed, DeadLettered, Cancelled, Skipped) to keep (0 to 1000,
    default 1); older ones are deleted."""


class TaskScheduleStatus(Model):
    """What the operator did about the schedule; written by the leader only."""

    schedule: str | None = Field(None, max_length=256)
    """The schedule as the SCHEDULE column shows it: the cron expression, or `every <interval>`."""
    last_fire_time: Timestamp | None = None
    """Fire time of the newest Task a scheduled fire created; written after the Task exists."""
    next_fire_time: Timestamp | None = None
    """Next fire time (unset while suspended or invalid)."""
    last_successful_time: Timestamp | None = None
    """When the newest of this schedule's Tasks that succeeded finished."""
    handled_through: Timestamp | None = None
    """Every fire time up to this one has been dealt with: created, skipped or counted as missed.
    Never decreases."""
    active: Count = 0
    """Tasks of this schedule not yet finished."""
    missed_fires: Count = 0
    """Fire times that passed without a Task: noticed too late (startingDeadline), older than
    catchupWindow, or during downtime without a catchupWindow, when only the latest runs."""
    skipped_fires: Count = 0
    """Fire times skipped because a Task was still unfinished: by concurrencyPolicy Forbid (or
    maxActiveTasks), or a waiting fire of BufferOne that a newer one replaced."""
    consecutive_failures: Count = 0
    """With pauseAfterFailures: the schedule's Tasks that ended Failed or DeadLettered since the
    last one that succeeded (or since the last resume)."""
    failures_counted_through: Timestamp | None = None
    """With pauseAfterFailures: the finish time up to which Tasks are counted in consecutiveFailures."""
    conditions: Conditions = ()
    """Conditions, following Kubernetes API conventions: `Ready` (False with reason
    `InvalidSchedule` for a schedule or time zone the parser refuses, or `PausedAfterFailures`),
    `Paused` (True with reason `ConsecutiveFailures` after pauseAfterFailures failures in a row)."""
    backfills: tuple[BackfillProgress, ...] = Field((), max_length=20)
    """How far each of spec.backfills has run, in its order."""
    notifications: tuple[Notified, ...] = Field((), max_length=NOTIFIED_MOST, json_schema_extra={
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["receiver"]})
    """Once the schedule paused after pauseAfterFailures: what became of each notification the
    receivers of its tasks' pool (outcome SchedulePaused) wanted, so that no leader sends a
    recorded one again."""
    fires_of: str | None = Field(None, max_length=64)
    """A digest of the spec without its backfills, as last decided on: a new generation whose
    digest is the same changed only the backfills, which is not an edit of the fires."""
    observed_generation: int | None = Field(None, ge=0, le=2**53)
    """The metadata.generation this status was computed from."""


class TaskSchedule(Model):
    """Tasks created on a schedule, each fire exactly once."""

    model_config = ConfigDict(json_schema_extra=validations(
        rule("self.metadata.name.size() <= 63",
             "metadata.name must be at most 63 characters: it is the cronoq.io/schedule label of its Tasks",
             reason="FieldValueInvalid"),
        rule("!has(oldSelf.status) || !has(oldSelf.status.handledThrough) || "
             "(has(self.status) && has(self.status.handledThrough) && "
             "self.status.handledThrough >= oldSelf.status.handledThrough)",
             "status.handledThrough cannot decrease: a fire time once dealt with stays dealt with",
             field_path=".status.handledThrough", reason="FieldValueForbidden"),
    ))

    KIND: ClassVar[str] = "TaskSchedule"
    PLURAL: ClassVar[str] = "taskschedules"

    api_version: Literal["cronoq.io/v1alpha1"] = API_VERSION
    """cronoq.io/v1alpha1."""
    kind: Literal["TaskSchedule"] = "TaskSchedule"
    """TaskSchedule."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: TaskScheduleSpec
    """When to fire and what each fire creates."""
    status: TaskScheduleStatus | None = None
    """What the operator did, written by the leader only."""
