"""Schedule decisions (DESIGN §11): fire times, which fire is due, missed and skipped fires,
concurrency policy, history pruning, and the deterministic name and key of each fire's Task.

Pure: the clock is passed in. The controller observes the TaskSchedule and its Tasks, calls
`decide`, creates the Task it names (the create is the fence: AlreadyExists means the fire
happened), and only then writes the status the decision computed. So a crash between the two
leaves a Task whose fire the next decision finds among the schedule's Tasks and records, never
a recorded fire without its Task.

`status.handledThrough` is the write-ahead mark: every fire time up to it has been created,
skipped or counted as missed, and it moves together with the counters in one status write (with
a resourceVersion precondition), so no fire is counted twice or lost.

Daylight saving (cron in a zone with DST), as Debian cron and cronsim do it: a wall-clock time
that does not exist on the spring-forward day fires once, at the first minute after the gap
(02:30 in America/New_York fires at 03:00 EDT); a time that happens twice on the fall-back day
fires once, at its first occurrence (01:30 fires at 01:30 EDT, not again at 01:30 EST).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from cronoq.api import SUBMITTER, ConcurrencyPolicy, Condition, TaskSchedule, TaskScheduleStatus
from cronoq.api import durations
from cronoq.api.schedule import BACKFILL_MOST, BUFFERING, MACROS, BackfillProgress
from cronoq.engine.conditions import set_condition
from cronoq.engine.naming import LABEL_PREFIX, MAX_NAME

SCHEDULE = LABEL_PREFIX + "schedule"
FIRE_TIME = LABEL_PREFIX + "fire-time"
"""Label with the fire time in Unix seconds."""
TRIGGER = LABEL_PREFIX + "trigger"
"""Label: `schedule` for a scheduled fire, `manual` for `cronoq trigger`, `backfill` for a fire
of spec.backfills."""

SCAN_LIMIT = 10_000
"""Most cron fire times one decision walks through. A longer gap (a minutely schedule after a
week of downtime) is counted over several decisions, each moving handledThrough on: the count
stays exact, without a cliff and without an unbounded pause."""

READY = "Ready"
SCHEDULED = "Scheduled"
SUSPENDED = "Suspended"
INVALID_SCHEDULE = "InvalidSchedule"
INTERVAL_TOO_SHORT = "IntervalTooShort"
ACTIVE_LIMIT = "ActiveLimit"
"""Reason of a skip: the schedule has maxActiveTasks unfinished Tasks."""
GAPS_CHECKED = 16
"""Fire times after now a cron schedule's shortest gap is judged on (cron has no fixed interval)."""
TASK_REJECTED = "TaskRejected"
FIRE_CONFLICT = "FireConflict"
"""Condition and reason: a fire's Task name was taken by a Task the schedule does not control."""
FIRED = "Fired"
"""Reason of FireConflict False: a later fire created its own Task."""
PAUSED = "Paused"
"""Condition: True while pauseAfterFailures stopped the fires."""
CONSECUTIVE_FAILURES = "ConsecutiveFailures"
"""Reason of Paused True."""
RESUMED = "Resumed"
"""Reason of Paused False: the spec changed since the pause."""
PAUSED_AFTER_FAILURES = "PausedAfterFailures"
"""Reason of Ready False while paused."""
TICK = timedelta(microseconds=1)

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class InvalidSchedule(ValueError):
    """The schedule or time zone the API server accepted is refused by the parser."""


# --------------------------------------------------------------------------- timetables

@dataclass(frozen=True)
class Span:
    """The fire times in an interval (a, b]: how many, the newest, and whether the scan stopped early."""

    count: int
    latest: datetime | None
    truncated: bool = False


@dataclass(frozen=True)
class Every:
    """Fixed interval: fires at the multiples of the interval since the Unix epoch."""

    seconds: int

    def after(self, t: datetime) -> datetime | None:
        k = int((t - EPOCH) // timedelta(seconds=self.seconds)) + 1
        return EPOCH + timedelta(seconds=k * self.seconds)

    def span(self, a: datetime, b: datetime, limit: int = SCAN_LIMIT) -> Span:
        step = timedelta(seconds=self.seconds)
        first = int((a - EPOCH) // step) + 1
        last = int((b - EPOCH) // step)
        if last < first:
            return Span(0, None)
        return Span(last - first + 1, EPOCH + last * step)

    def times(self, a: datetime, b: datetime, limit: int = SCAN_LIMIT) -> list[datetime]:
        """The fire times in (a, b], oldest first, at most `limit` of them."""
        step = timedelta(seconds=self.seconds)
        first = int((a - EPOCH) // step) + 1
        last = min(int((b - EPOCH) // step), first + limit - 1)
        return [EPOCH + k * step for k in range(first, last + 1)]

    def describe(self) -> str:
        return f"every {durations.format(timedelta(seconds=self.seconds))}"


@dataclass(frozen=True)
class Cron:
    """A five-field cron expression read in a time zone, evaluated by cronsim."""

    expression: str
    zone: ZoneInfo
    text: str = ""

    def _iter(self, t: datetime) -> Iterable[datetime]:
        # cronsim walks wall-clock time; on a fall-back day it can hand back the first
        # occurrence of an hour we are already past: only later instants count.
        for local in CronSim(self.expression, t.astimezone(self.zone)):
            at = local.astimezone(UTC)
            if at > t:
                yield at

    def after(self, t: datetime) -> datetime | None:
        return next(iter(self._iter(t)), None)

    def span(self, a: datetime, b: datetime, limit: int = SCAN_LIMIT) -> Span:
        count, latest = 0, None
        for at in self._iter(a):
            if at > b:
                break
            count, latest = count + 1, at
            if count >= limit:
                return Span(count, latest, truncated=True)
        return Span(count, latest)

    def times(self, a: datetime, b: datetime, limit: int = SCAN_LIMIT) -> list[datetime]:
        """The fire times in (a, b], oldest first, at most `limit` of them."""
        found: list[datetime] = []
        for at in self._iter(a):
            if at > b or len(found) >= limit:
                break
            found.append(at)
        return found

    def describe(self) -> str:
        return self.text or self.expression


Timetable = Every | Cron


def timetable(schedule: str | None, every: timedelta | None, zone: str = "UTC") -> Timetable:
    """The timetable of a spec; InvalidSchedule with the parser's message if it has none."""
    if every is not None:
        return Every(int(every.total_seconds()))
    if not schedule:
        raise InvalidSchedule("neither schedule nor every is set")
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError) as err:
        raise InvalidSchedule(f"timeZone {zone!r} is not a known IANA time zone ({err})") from None
    expression = MACROS.get(schedule.strip().lower(), schedule)
    if len(expression.split()) != 5:
        raise InvalidSchedule(f"schedule {schedule!r}: a cron expression has five fields or is a macro such as @hourly")
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=tz))  # parses; the date is irrelevant
    except CronSimError as err:
        raise InvalidSchedule(f"schedule {schedule!r}: {err}") from None
    return Cron(expression, tz, schedule)


def shortest_gap(table: Timetable, now: datetime) -> timedelta:
    """The shortest time between two fires: the interval, or a cron schedule's smallest gap among
    its next fire times."""
    if isinstance(table, Every):
        return timedelta(seconds=table.seconds)
    times: list[datetime] = []
    for at in table._iter(now):
        times.append(at)
        if len(times) > GAPS_CHECKED:
            break
    return min((b - a for a, b in zip(times, times[1:])), default=timedelta.max)


def timetable_of(schedule: TaskSchedule) -> Timetable:
    spec = schedule.spec
    return timetable(spec.schedule, spec.every, spec.time_zone)


# --------------------------------------------------------------------------- names

def unix(t: datetime) -> int:
    return int((t - EPOCH) // timedelta(seconds=1))


def task_name(schedule: str, fire_time: datetime, *, manual: bool = False) -> str:
    """`<schedule>-<unix seconds>` (`<schedule>-manual-<unix seconds>` for `cronoq trigger`), or
    for names too long to fit, a prefix of the schedule's name and a hash of it."""
    suffix = f"-manual-{unix(fire_time)}" if manual else f"-{unix(fire_time)}"
    if len(schedule) + len(suffix) <= MAX_NAME:
        return schedule + suffix
    digest = hashlib.sha256(schedule.encode()).hexdigest()[:8]
    keep = MAX_NAME - len(suffix) - len(digest) - 1
    return f"{schedule[:keep].rstrip('-')}-{digest}{suffix}"


def task_key(schedule: str, fire_time: datetime, *, manual: bool = False) -> str:
    """The idempotency key of a fire's Task: the schedule and the fire time."""
    return f"{schedule}@{'manual-' if manual else ''}{unix(fire_time)}"


def task_manifest(schedule: TaskSchedule, fire_time: datetime, *, manual: bool = False,
                  backfill: bool = False) -> dict[str, Any]:
    """The Task a fire creates: the template, named and keyed by schedule and fire time, owned by
    the schedule (so deleting the schedule deletes its Tasks), labelled with both, submitted by
    the schedule's submitter (its cronoq.io/submitter annotation, never the template's). A backfilled
    fire is named and keyed as the scheduled fire of its time (so the two are one fire)."""
    meta, template = schedule.metadata, schedule.spec.task_template
    name = meta.name
    if name is None:
        raise ValueError("a schedule that was never stored (it has no name) fires nothing")
    extra = template.metadata
    labels = {**(extra.labels if extra else {}), SCHEDULE: name, FIRE_TIME: str(unix(fire_time)),
              TRIGGER: "manual" if manual else "backfill" if backfill else "schedule"}
    metadata: dict[str, Any] = {
        "name": task_name(name, fire_time, manual=manual), "namespace": meta.namespace, "labels": labels,
        "ownerReferences": [{"apiVersion": schedule.api_version, "kind": schedule.kind, "name": name,
                             "uid": meta.uid, "controller": True}],
    }
    annotations = {k: v for k, v in (extra.annotations if extra else {}).items() if k != SUBMITTER}
    if submitter := meta.annotations.get(SUBMITTER):  # who wrote the schedule submits its fires
        annotations[SUBMITTER] = submitter
    if annotations:
        metadata["annotations"] = annotations
    spec = {**template.spec.to_dict(), "key": task_key(name, fire_time, manual=manual)}
    return {"apiVersion": schedule.api_version, "kind": "Task", "metadata": metadata, "spec": spec}


# --------------------------------------------------------------------------- decisions

@dataclass(frozen=True)
class Fired:
    """What a decision needs to know of one of the schedule's Tasks."""

    name: str
    fire_time: datetime
    manual: bool = False
    finished: bool = False
    succeeded: bool = False
    finished_at: datetime | None = None
    failed: bool = False
    """Ended Failed or DeadLettered (what pauseAfterFailures counts)."""
    cancelling: bool = False
    owner_uid: str | None = None
    """uid of the TaskSchedule that controls the Task (its controller ownerReference): only the
    schedule of that uid counts the Task as one of its fires."""
    uid: str | None = None
    """The Task's own uid: a cancel or delete of it holds only while its name is still this Task's."""


@dataclass(frozen=True)
class Decision:
    create: datetime | None = None
    """Fire time whose Task to create (before writing `status`)."""
    cancel: tuple[str, ...] = ()
    """Unfinished Tasks to cancel before the create (Replace)."""
    delete: tuple[str, ...] = ()
    """Finished Tasks beyond the history limits (after the status write)."""
    status: TaskScheduleStatus | None = None
    """The status to write, or None when it would not change."""
    wake_at: datetime | None = None
    """When to decide again at the latest (the next fire time)."""
    missed: int = 0
    skipped: int = 0
    backfill: bool = False
    """`create` is a fire of spec.backfills."""


def _ready(status: TaskScheduleStatus, now: datetime, generation: int | None, holds: bool, reason: str,
           message: str) -> tuple[Condition, ...]:
    return tuple(set_condition(list(status.conditions), READY, holds, reason, message, now, generation))


def decide(schedule: TaskSchedule, tasks: Sequence[Fired], now: datetime,
           min_interval: timedelta = timedelta()) -> Decision:
    """What to do about `schedule` at `now`, given its Tasks. Running it twice on the same
    observation decides the same; running it after a crash picks up from handledThrough.
    `min_interval` is the operator's least time between two fires (issue 26: `every: 1s` with
    Allow makes 86,400 Tasks a day): a schedule that fires more often makes no fire at all."""
    spec, meta = schedule.spec, schedule.metadata
    old = schedule.status or TaskScheduleStatus()
    generation = meta.generation
    created = meta.creation_timestamp or now
    known = {t.fire_time for t in tasks if not t.manual}
    active = [t for t in tasks if not t.finished]
    handled = old.handled_through or created
    fires_of = _fires_digest(schedule)
    ranges = _ranges(schedule)
    only_backfills = old.fires_of == fires_of and tuple((p.start, p.end) for p in old.backfills) != tuple(
        (p.start, p.end) for p in ranges)
    edited = old.observed_generation is not None and generation != old.observed_generation and not only_backfills
    if edited:
        handled = max(handled, now)  # an edit (or a resume) changes future fires only
    last_fire = max([t for t in (old.last_fire_time, *known) if t], default=None)
    successes = [t.finished_at for t in tasks if t.succeeded and t.finished_at]
    last_success = max([t for t in (old.last_successful_time, *successes) if t], default=None)
    prune = history_to_prune(tasks, spec.successful_tasks_history_limit, spec.failed_tasks_history_limit,
                             handled)
    base: dict[str, Any] = dict(last_successful_time=last_success, active=len(active), observed_generation=generation,
                                fires_of=fires_of, backfills=ranges)

    reason = INVALID_SCHEDULE
    try:
        table = timetable_of(schedule)
        gap = shortest_gap(table, now)
        if gap < min_interval:
            reason = INTERVAL_TOO_SHORT
            raise InvalidSchedule(f"{table.describe()} fires {durations.format(gap)} apart, more often than this "
                                  f"operator allows (one fire per {durations.format(min_interval)} at most, "
                                  "--min-schedule-interval): no fires until the schedule is changed")
    except InvalidSchedule as err:
        status = old.model_copy(update=dict(
            **base, schedule=spec.schedule or old.schedule, next_fire_time=None, last_fire_time=last_fire,
            handled_through=old.handled_through, conditions=_ready(old, now, generation, False, reason, str(err))))
        return Decision(status=_changed(old, status), delete=prune)

    base["schedule"] = table.describe()
    failing = _failures(schedule, tasks, now, edited)
    base.update(failing.fields)
    old_conds = old.model_copy(update=dict(conditions=failing.conditions))
    # Suspended or paused: no fires, no next fire time; only the Ready condition says which.
    stopped = ((True, SUSPENDED, "suspended: no fires until spec.suspend is false") if spec.suspend else
               (False, PAUSED_AFTER_FAILURES, "paused after failures in a row: no fires until the spec changes")
               if failing.paused else None)
    if stopped is not None:
        ready, reason, message = stopped
        status = old.model_copy(update=dict(
            **base, next_fire_time=None, last_fire_time=last_fire, handled_through=handled,
            conditions=_ready(old_conds, now, generation, ready, reason, message)))
        return Decision(status=_changed(old, status), delete=prune)

    take = _catch_up if spec.catchup_window is not None or spec.concurrency_policy in BUFFERING else _latest_only
    step = take(schedule, table, known, active, handled, now)
    if step.create is not None:
        last_fire = max(last_fire or step.create, step.create)
    following = table.after(max(step.handled, now))
    filled = _backfill(schedule, table, known, active, now, taken=step.create is not None)
    base.update(active=len(active) + (step.create is not None or filled.create is not None), backfills=filled.progress)
    status = old.model_copy(update=dict(
        **base, next_fire_time=following, last_fire_time=last_fire, handled_through=step.handled,
        missed_fires=old.missed_fires + step.missed, skipped_fires=old.skipped_fires + step.skipped,
        conditions=_ready(old_conds, now, generation, True, SCHEDULED, _fires_text(spec, table))))
    return Decision(create=step.create or filled.create, cancel=step.cancel, delete=prune, status=_changed(old, status),
                    wake_at=now if step.more or filled.more else following, missed=step.missed, skipped=step.skipped,
                    backfill=filled.create is not None)


def _fires_text(spec: Any, table: Timetable) -> str:
    return f"fires {table.describe()}" + (f" in {spec.time_zone}" if isinstance(table, Cron) else "")


@dataclass(frozen=True)
class Step:
    """One catch-up decision: at most one fire to create, and how far handledThrough moves."""

    create: datetime | None
    cancel: tuple[str, ...]
    handled: datetime
    missed: int = 0
    skipped: int = 0
    more: bool = False
    """Another fire is due at once (decide again now, not at the next fire time)."""


def _latest_only(schedule: TaskSchedule, table: Timetable, known: set[datetime], active: Sequence[Fired],
                 handled: datetime, now: datetime) -> Step:
    """A schedule without a catchupWindow or a buffering policy: of the fire times in
    (handledThrough, now] only the latest may run (within startingDeadline and the concurrency
    policy); the earlier ones are counted as missed."""
    spec = schedule.spec
    span = table.span(handled, now)
    latest = span.latest
    if latest is None:  # span.count == 0
        return Step(None, (), handled)
    earlier_known = sum(1 for k in known if handled < k < latest)
    if span.truncated:  # count this stretch, and come back at once for the rest
        return Step(None, (), latest, missed=span.count - earlier_known - (latest in known), more=True)
    missed = span.count - 1 - earlier_known
    if latest in known:  # created before a crash, not yet recorded: record it now
        return Step(None, (), latest, missed=missed)
    if spec.starting_deadline is not None and now - latest > spec.starting_deadline:
        return Step(None, (), latest, missed=missed + 1)
    if active and spec.concurrency_policy == ConcurrencyPolicy.FORBID:
        return Step(None, (), latest, missed=missed, skipped=1)
    if (spec.max_active_tasks is not None and len(active) >= spec.max_active_tasks
            and spec.concurrency_policy == ConcurrencyPolicy.ALLOW):
        return Step(None, (), latest, missed=missed, skipped=1)
    cancel = (tuple(t.name for t in active if not t.cancelling)
              if active and spec.concurrency_policy == ConcurrencyPolicy.REPLACE else ())
    return Step(latest, cancel, latest, missed=missed)


def _catch_up(schedule: TaskSchedule, table: Timetable, known: set[datetime], active: Sequence[Fired],
              handled: datetime, now: datetime) -> Step:
    """A schedule with a catchupWindow or a buffering concurrencyPolicy: the fire times in
    (handledThrough, now] are the waiting fires. Those older than the window (the shorter of
    catchupWindow and startingDeadline) are missed; the rest are taken oldest first, one per
    decision, each under the concurrency policy. A fire that waits (BufferOne, BufferAll) leaves
    handledThrough before it, so it is still waiting after a crash or a failover."""
    spec = schedule.spec
    limits = [w for w in (spec.catchup_window, spec.starting_deadline) if w is not None]
    missed = 0
    if limits:
        cutoff = now - min(limits) - TICK  # fires at or before this are too old
        if cutoff > handled:
            old = table.span(handled, cutoff)
            through = old.latest if old.truncated and old.latest is not None else cutoff
            missed = old.count - sum(1 for k in known if handled < k <= through)
            if old.truncated:  # count this stretch, and come back at once for the rest
                return Step(None, (), through, missed=missed, more=True)
            handled = through
    # Without a window (a buffering policy alone) every fire after handledThrough waits: the
    # decision cannot tell one that waited behind a running Task from one missed in downtime.
    waiting = table.times(handled, now)
    policy = spec.concurrency_policy
    skipped = 0
    for i, at in enumerate(waiting):
        if at in known:  # created before a crash, not yet recorded: record it now
            handled = at
            continue
        rest = len(waiting) - i - 1
        if active:
            if policy == ConcurrencyPolicy.FORBID or (
                    policy == ConcurrencyPolicy.ALLOW and spec.max_active_tasks is not None
                    and len(active) >= spec.max_active_tasks):
                skipped, handled = skipped + 1, at
                continue
            if policy == ConcurrencyPolicy.BUFFER_ALL:
                return Step(None, (), handled, missed=missed, skipped=skipped)
            if policy == ConcurrencyPolicy.BUFFER_ONE:
                older = [t for t in waiting[i:-1] if t not in known]
                newest = waiting[-2] if len(waiting) - i >= 2 else handled
                return Step(None, (), max(handled, newest), missed=missed, skipped=skipped + len(older),
                            more=len(waiting) >= SCAN_LIMIT)
        cancel = tuple(t.name for t in active if not t.cancelling) if policy == ConcurrencyPolicy.REPLACE else ()
        return Step(at, cancel, at, missed=missed, skipped=skipped, more=rest > 0 or len(waiting) >= SCAN_LIMIT)
    return Step(None, (), handled, missed=missed, skipped=skipped, more=len(waiting) >= SCAN_LIMIT)


def _fires_digest(schedule: TaskSchedule) -> str:
    """What decides the fires, as a digest: the spec without its backfills."""
    spec = schedule.spec.to_dict()
    spec.pop("backfills", None)
    return hashlib.sha256(repr(sorted(spec.items())).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Filled:
    """One decision's part of spec.backfills: at most one fire to create, and each range's progress."""

    create: datetime | None
    progress: tuple[BackfillProgress, ...]
    more: bool = False
    """Another backfilled fire may be created at once (decide again now)."""


def _ranges(schedule: TaskSchedule) -> tuple[BackfillProgress, ...]:
    """The progress of each of spec.backfills as the status holds it (a new range: none yet)."""
    before = {(p.start, p.end): p for p in (schedule.status.backfills if schedule.status else ())}
    return tuple(before.get((b.start, b.end)) or BackfillProgress(start=b.start, end=b.end)
                 for b in schedule.spec.backfills)


def _backfill(schedule: TaskSchedule, table: Timetable, known: set[datetime], active: Sequence[Fired],
              now: datetime, taken: bool) -> Filled:
    """The next fire of spec.backfills to create, oldest range first, oldest time first: a fire
    time whose Task exists is passed over (it happened), one past now is left to the schedule.
    With Allow it is created while maxActiveTasks has room; with any other policy only while none
    of the schedule's Tasks is unfinished. `taken`: this decision creates a scheduled fire already,
    which goes first. A range's `through` moves only with the status written after the Task
    exists, so a crash or a failover makes no fire twice."""
    spec = schedule.spec
    if spec.concurrency_policy == ConcurrencyPolicy.ALLOW:
        room = spec.max_active_tasks is None or len(active) < spec.max_active_tasks
    else:
        room = not active
    progress: list[BackfillProgress] = []
    create: datetime | None = None
    more = False
    for wanted, p in zip(spec.backfills, _ranges(schedule)):
        if p.done or p.refused:
            progress.append(p)
            continue
        upto = min(wanted.end, now)
        if p.through is None and table.span(wanted.start - TICK, upto, BACKFILL_MOST + 1).count > BACKFILL_MOST:
            progress.append(p.model_copy(update=dict(refused=(
                f"more than {BACKFILL_MOST:,} fire times from {wanted.start.isoformat()} to "
                f"{wanted.end.isoformat()}: split the range"))))
            continue
        after = p.through or wanted.start - TICK
        scanned = table.times(after, upto)
        due = next((t for t in scanned if t not in known), None)
        passed = [t for t in scanned if due is None or t < due]
        if passed:
            p = p.model_copy(update=dict(through=passed[-1]))  # their Tasks exist: they happened
        if due is None:
            finished = len(scanned) < SCAN_LIMIT
            p = p.model_copy(update=dict(done=finished))
            more = more or not finished
        elif create is None and not taken and room:
            create = due
            last = due == scanned[-1] and len(scanned) < SCAN_LIMIT
            p = p.model_copy(update=dict(through=due, created=p.created + 1, done=last))
            more = more or not last
        else:
            more = more or (room and (taken or create is not None))
        progress.append(p)
    return Filled(create, tuple(progress), more)


@dataclass(frozen=True)
class Failing:
    """pauseAfterFailures' part of a decision: the status fields, the conditions, whether paused."""

    fields: dict[str, Any]
    conditions: tuple[Condition, ...]
    paused: bool


def _failures(schedule: TaskSchedule, tasks: Sequence[Fired], now: datetime, edited: bool) -> Failing:
    """Count the schedule's Tasks that ended since failuresCountedThrough, in the order they
    ended: Failed or DeadLettered adds one, Succeeded resets to zero. At pauseAfterFailures the
    schedule pauses (condition Paused) until its spec changes (`edited`: a new generation that
    changed more than spec.backfills)."""
    spec, meta = schedule.spec, schedule.metadata
    old = schedule.status or TaskScheduleStatus()
    conditions = list(old.conditions)
    pause = next((c for c in conditions if c.type == PAUSED), None)
    was_paused = pause is not None and pause.status.value == "True"
    limit = spec.pause_after_failures
    if limit is None:
        if was_paused:
            conditions = set_condition(conditions, PAUSED, False, RESUMED, "pauseAfterFailures is unset", now,
                                       meta.generation)
        return Failing({}, tuple(conditions), False)
    count = old.consecutive_failures
    through = old.failures_counted_through or meta.creation_timestamp or now
    if was_paused and pause is not None and pause.observed_generation != meta.generation and edited:
        count, was_paused = 0, False
        conditions = set_condition(conditions, PAUSED, False, RESUMED, "the spec changed: firing again, "
                                   "the failures counted from zero", now, meta.generation)
    ended = sorted((t for t in tasks if t.finished and t.finished_at is not None and t.finished_at > through),
                   key=lambda t: (t.finished_at or now, t.fire_time, t.name))
    newest: Fired | None = None
    for t in ended:
        if t.succeeded:
            count = 0
        elif t.failed:
            count, newest = count + 1, t
        through = max(through, t.finished_at or through)
    paused = was_paused
    if not was_paused and count >= limit:
        paused = True
        what = f", the newest {newest.name}" if newest is not None else ""
        conditions = set_condition(
            conditions, PAUSED, True, CONSECUTIVE_FAILURES,
            f"{count} Tasks in a row ended Failed or DeadLettered{what} (pauseAfterFailures {limit}): no fires "
            f"until the spec changes (cronoq schedule resume {meta.name})", now, meta.generation)
    return Failing(dict(consecutive_failures=count, failures_counted_through=through), tuple(conditions), paused)


def paused_after_failures(status: TaskScheduleStatus | None) -> Condition | None:
    """The Paused condition while pauseAfterFailures holds the schedule paused."""
    return next((c for c in status.conditions if c.type == PAUSED and c.status.value == "True"
                 and c.reason == CONSECUTIVE_FAILURES), None) if status is not None else None


def rejected(schedule: TaskSchedule, decision: Decision, message: str, now: datetime) -> TaskScheduleStatus:
    """The status after the API server refused a fire's Task (a template that cannot make a valid
    Task): the fire is counted as missed, and Ready says why, so it is not retried forever."""
    assert decision.create is not None  # only a decision to create a Task can be refused
    status = decision.status or schedule.status or TaskScheduleStatus()
    old = schedule.status or TaskScheduleStatus()
    return status.model_copy(update=dict(
        active=max(status.active - 1, 0), last_fire_time=old.last_fire_time, missed_fires=status.missed_fires + 1,
        conditions=_ready(status, now, schedule.metadata.generation, False, TASK_REJECTED,
                          f"the API server refused the Task of the fire at {decision.create.isoformat()}: {message}")))


def conflicting(schedule: TaskSchedule, decision: Decision, task: str, controller: str | None,
                now: datetime) -> TaskScheduleStatus:
    """The status after a fire found its Task name taken by a Task the schedule does not control
    (issue 26: a tenant may pre-create `<schedule>-<t>`): the fire is not taken as made, it is
    counted as missed, and the FireConflict condition names the Task and who controls it."""
    assert decision.create is not None  # only a decision to create a Task can conflict
    status = decision.status or schedule.status or TaskScheduleStatus()
    old = schedule.status or TaskScheduleStatus()
    whose = f"controlled by {controller}" if controller else "controlled by nothing"
    message = (f"the fire at {decision.create.isoformat()} found Task {task} already there, {whose}, not by this "
               "schedule: the fire counts as missed")
    conditions = set_condition(list(status.conditions), FIRE_CONFLICT, True, FIRE_CONFLICT, message, now,
                               schedule.metadata.generation)
    return status.model_copy(update=dict(active=max(status.active - 1, 0), last_fire_time=old.last_fire_time,
                                         missed_fires=status.missed_fires + 1, conditions=tuple(conditions)))


def fired_cleanly(status: TaskScheduleStatus, now: datetime, generation: int | None) -> TaskScheduleStatus:
    """The status after a fire created its own Task: a FireConflict of an earlier fire no longer holds."""
    if not any(c.type == FIRE_CONFLICT and c.status.value == "True" for c in status.conditions):
        return status
    conditions = set_condition(list(status.conditions), FIRE_CONFLICT, False, FIRED,
                               "the newest fire created its own Task", now, generation)
    return status.model_copy(update=dict(conditions=tuple(conditions)))


def _changed(old: TaskScheduleStatus, new: TaskScheduleStatus) -> TaskScheduleStatus | None:
    return None if new == old else new


def history_to_prune(tasks: Sequence[Fired], successful: int, failed: int, handled: datetime) -> tuple[str, ...]:
    """Finished Tasks beyond the history limits, oldest first; only fires already recorded
    (at or before handledThrough) or manual ones, so no fire can be made again."""
    done = sorted((t for t in tasks if t.finished and (t.manual or t.fire_time <= handled)),
                  key=lambda t: (t.fire_time, t.name), reverse=True)
    good = [t.name for t in done if t.succeeded]
    bad = [t.name for t in done if not t.succeeded]
    return tuple(reversed(good[successful:] + bad[failed:]))


def lag(fire_time: datetime, created_at: datetime) -> float:
    """Seconds from a fire time to its Task's creation (never negative)."""
    return max((created_at - fire_time).total_seconds(), 0.0)
