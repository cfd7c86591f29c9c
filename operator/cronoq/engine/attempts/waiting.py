"""Why a task waits for a slot, and the time limits it waits under: one explanation, worded for
the Task's message (the operator), `cronoq describe` and the dashboard alike.

- `wait` decides from facts (the pool is there, paused, stopped or full; the task's group holds its
  share; no worker has room; the rate limit's next token is due later) and returns a `Wait`: the
  reason the operator's Running condition gives (`Wait.reason`) and what of the pool's own state
  holds the slot back (`Wait.held`, when its counts are known). `of_task` gathers those facts
  from a Task and its TaskPool as a client reads them. Each kind of wait (by its reason) has one
  entry in `KINDS`: the Task's message and `describe`'s words for it; a new kind of wait is a
  reason, the fact `wait` decides it from, and one entry.
- `place` puts a queued task in its pool's admission order, popping the operator's own
  `admission.Queue`; `between` bounds its place by the marks of that order the pool's status
  carries (past 2,000 waiting), reading no other task.
- `limits` gives a task's own time limits (its pool's when it sets none) as times.
- `kueue_text` says why an attempt's Job waits for Kueue (a pool with `admission.kueue`), from
  what Kueue says of it (`observed.KueueHold`): its LocalQueue, ClusterQueue, place, what it
  needs and Kueue's own words. `kueue_message` is the Task's message (written once per change of
  Kueue's reason: `kueue_said`), `describe` and the dashboard show `kueue_text` with the place.

`explain` is the whole explanation of a task at a time (`Explanation`: its `Wait` while queued
with its place, its delayed start, its limits). Each surface renders the same values: the
operator writes `message(wait)`; `describe` prints an `Explanation`'s lines (`waiting_text`, the
delayed start, `limits_text`); the dashboard shows its rows (the delayed start, `rate_due`, the
limits as times). Pure: the clock and every count are passed in; what must be read to count (the
running tasks of a group) is asked for only when it decides.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from enum import Enum

from cronoq.api import FairShare, QueueMarks, Task, TaskPhase, TaskPool, TaskPoolSpec, TaskStatus
from cronoq.api.durations import format as format_duration
from cronoq.engine import admission, delay, reasons
from cronoq.engine.keylimits import Debouncing
from cronoq.engine.admission import Candidate, Queue
from cronoq.engine.attempts import task_deadlines, wording
from cronoq.engine.observed import AttemptJob, KueueHold
from cronoq.engine.outcome import truncate
from cronoq.engine.plan import Effective
from cronoq.engine.ratelimit import next_start

# --------------------------------------------------------------------------- why it waits


class Held(str, Enum):
    """What of its pool's own state keeps a queued task from a slot."""

    PAUSED = "Paused"
    STOPPED = "Stopped"
    """concurrency 0: the pool starts nothing."""
    FULL = "Full"
    GROUP_FULL = "GroupFull"
    """The task's fairness group runs its share (the pool's groupConcurrency)."""
    FREE = "Free"
    """Nothing: a slot is about to be granted."""
    UNKNOWN = "Unknown"
    """The pool's counts were not given (the operator words its message without them)."""


@dataclass(frozen=True)
class Wait:
    """Why a ready task has no slot."""

    pool: str
    reason: str
    """The Running condition's reason: POOL_NOT_FOUND, WAITING_FOR_WORKER, RATE_LIMITED or WAITING_FOR_SLOT."""
    held: Held = Held.UNKNOWN
    spec: TaskPoolSpec | None = None
    next_start_at: datetime | None = None
    """Rate-limited: when the operator found the next start due (written once, never a countdown)."""
    running: int = 0
    group: str = ""
    """The task's fairness group in its pool: its submitter when the pool shares by submitter."""
    group_running: int = 0
    share: Share | None = None
    """Its group's part of the pool, when the pool shares its slots (fairShare) and it was counted."""
    debounce: Debouncing | None = None
    """Debouncing (the operator's view): the burst on its Debounce key is not over."""
    said: str = ""
    """Debouncing as a client reads it: the operator's message, which names the times."""


@dataclass(frozen=True)
class Share:
    """A fairness group's part of a pool that shares its slots (fairShare): its weight against the
    weights of every group with a task running or queued, and the slots it holds."""

    weight: int
    weights: int
    """The sum of the weights of the groups with a task running or queued, this one's included."""
    running: int
    """Slots the group holds: its running attempts."""
    concurrency: int

    @property
    def slots(self) -> float:
        """The group's part of the pool's slots while every counted group has work for them."""
        return self.concurrency * self.weight / max(self.weights, 1)


def share_of(fair: FairShare, concurrency: int, group: str, running: Mapping[str, int],
             queued: Iterable[str] = ()) -> Share:
    """`group`'s part of a pool of `concurrency` slots that shares them as `fair` says, with the
    slots held per group (`running`) and the groups of the queued tasks (`queued`)."""
    active = {g for g, n in running.items() if n > 0} | set(queued) | {group}
    return Share(fair.weight(group), sum(fair.weight(g) for g in active), running.get(group, 0), concurrency)


def named(group: str, fair: FairShare | None) -> str:
    """`submitter system:serviceaccount:team-a:ci`, `group acme`, or the tasks without either."""
    if admission.by_submitter(fair):
        return f"submitter {group}" if group else "the tasks without a submitter"
    return f"group {group}" if group else "the tasks without a group"


def wait(pool: str, spec: TaskPoolSpec | None, *, found: bool = True, no_worker: bool = False,
         next_start_at: datetime | None = None, running: int | None = None, group: str | None = None,
         group_running: Callable[[], int] | None = None, share: Callable[[], Share] | None = None,
         debounce: Debouncing | None = None, debounce_said: str | None = None) -> Wait:
    """Why a ready task of pool `pool` (its spec: `spec`; `found`: it exists) waits: no live
    worker with room (`no_worker`, a Workers pool), the rate limit's next start due at
    `next_start_at`, else a slot. With the pool's `running` count, also what holds the slot:
    paused, concurrency 0, full, or the task's `group` (its fairness group in the pool) at its
    cap, which `group_running` counts (called only when the pool caps groups and nothing else
    holds the task); and, when the pool shares its slots, its group's part (`share`, called only
    when the pool is full or the group is at its cap). A task debouncing on a concurrency key
    (`debounce`, or as a client reads it: the operator's message `debounce_said`) waits for that first."""
    if not found:
        return Wait(pool, reasons.POOL_NOT_FOUND)
    if debounce is not None or debounce_said is not None:
        return Wait(pool, reasons.DEBOUNCING, Held.UNKNOWN, spec, debounce=debounce, said=debounce_said or "")
    if no_worker:
        reason = reasons.WAITING_FOR_WORKER
    elif next_start_at is not None and spec is not None and spec.rate_limit is not None:
        reason = reasons.RATE_LIMITED
    else:
        reason = reasons.WAITING_FOR_SLOT
    said = Wait(pool, reason, Held.UNKNOWN, spec, next_start_at if reason == reasons.RATE_LIMITED else None,
                running or 0, group or "")
    if spec is None:
        return said
    if spec.paused:
        return _held(said, Held.PAUSED)
    if spec.concurrency == 0:
        return _held(said, Held.STOPPED)
    if running is None or reason == reasons.RATE_LIMITED:
        return said
    shared = share if spec.fair_share is not None else None
    if running >= spec.concurrency:
        return replace(said, held=Held.FULL, share=shared() if shared is not None else None)
    if spec.group_concurrency is not None and group_running is not None:
        mine = group_running()
        if mine >= spec.group_concurrency:
            return replace(said, held=Held.GROUP_FULL, group_running=mine,
                           share=shared() if shared is not None else None)
    return _held(said, Held.FREE)


def _held(said: Wait, held: Held) -> Wait:
    return replace(said, held=held)


def of_task(task: Task, pool: TaskPool | None, group_running: Callable[[], int] | None = None,
            share: Callable[[], Share] | None = None) -> Wait:
    """`wait` from what a client reads: the Task (the rate limit's due time its status holds
    while the operator says it waits for a token) and its TaskPool (None: it does not exist)."""
    status = task.status
    told = wording.told(status) if status is not None else None
    due = status.next_start_at if status is not None and told == reasons.RATE_LIMITED else None
    fair = pool.spec.fair_share if pool is not None else None
    said = (status.message or "") if status is not None and told == reasons.DEBOUNCING else None
    return wait(task.spec.pool, pool.spec if pool is not None else None, found=pool is not None, next_start_at=due,
                running=(pool.status.running if pool.status else 0) if pool is not None else None,
                group=admission.fair_group(task.spec.group, admission.submitter_of(task), fair),
                group_running=group_running, share=share, debounce_said=said)


def message(w: Wait) -> str:
    """The Task's message while it waits (the operator writes it once per reason): in a pool that
    shares its slots, whose share it waits in, which does not change while it waits."""
    return KINDS[w.reason].message(w)


def _pool_not_found(w: Wait) -> str:
    return wording.POOL_NOT_FOUND.format(pool=w.pool)


def _no_worker(w: Wait) -> str:
    return wording.WAITING_FOR_WORKER.format(pool=w.pool)


def _rate_limited(w: Wait) -> str:
    rate = w.spec.rate_limit if w.spec is not None else None
    if rate is None or w.next_start_at is None:
        return _queued(w)
    return wording.rate_limited(w.pool, rate.starts_per_second, rate.burst, w.next_start_at)


def _debouncing(w: Wait) -> str:
    return w.debounce.message() if w.debounce is not None else w.said


def _debounce_detail(w: Wait, now: datetime) -> str | None:
    return w.debounce.described() if w.debounce is not None else (w.said or None)


def _queued(w: Wait) -> str:
    fair = w.spec.fair_share if w.spec is not None else None
    if fair is not None:
        return wording.QUEUED_IN_SHARE.format(pool=w.pool, share=named(w.group, fair), weight=fair.weight(w.group))
    return wording.QUEUED.format(pool=w.pool)


def countdown(w: Wait, now: datetime) -> str | None:
    """`rate-limited: next start in 0.4 s (pool P starts at most 2 attempts/s, burst 1)` while the
    task waits for its pool's rate limit (None otherwise). From the due time the status holds:
    later starts follow every 1/rate seconds while the pool stays limited."""
    limit, epoch = w.spec.rate_limit if w.spec is not None else None, w.next_start_at
    if w.reason != reasons.RATE_LIMITED or limit is None or epoch is None:
        return None
    since = (now - epoch).total_seconds()
    due = next_start(0.0, limit.starts_per_second, since)
    return (f"rate-limited: next start in {max(due - since, 0.0):.1f} s "
            f"(pool {w.pool} starts at most {limit.starts_per_second:g} attempts/s, burst {limit.burst})")


def described(w: Wait, place: str, now: datetime) -> str:
    """`cronoq describe`'s line for a queued task: its place (as `place` words it), then what
    holds it: its pool paused or stopped whatever the kind of wait, else the kind's own words."""
    name, spec = w.pool, w.spec
    if w.reason == reasons.POOL_NOT_FOUND or spec is None:
        return f"TaskPool {name} does not exist: the task starts once it is created"
    if w.held is Held.PAUSED:
        return (f"{place}; pool {name} is paused (concurrency {spec.concurrency} kept): "
                f"`cronoq pool resume {name}` starts it again")
    if w.held is Held.STOPPED:
        return f"{place}; pool {name} has concurrency 0: it starts nothing"
    if w.reason == reasons.DEBOUNCING:  # it asks for no slot yet: it has no place in the pool's queue
        return KINDS[w.reason].detail(w, now) or message(w)
    return f"{place}; {KINDS[w.reason].detail(w, now) or _slot(w)}"


def _slot(w: Wait) -> str:
    """What of the pool's slots holds the task: full, its group at its cap, or nothing."""
    name, spec = w.pool, w.spec
    assert spec is not None  # (described says so first)
    share = f"; {share_text(w)}" if w.share is not None else ""
    if w.held is Held.FULL:
        return f"pool {name} is full: {w.running} running of {spec.concurrency}{share}"
    if w.held is Held.GROUP_FULL:
        return f"{named(w.group, spec.fair_share)} has {w.group_running} of {spec.group_concurrency} " \
               f"running (pool {name}'s groupConcurrency){share}"
    return f"pool {name} runs {w.running} of {spec.concurrency}: a slot is about to be granted"


@dataclass(frozen=True)
class Kind:
    """One kind of wait, by its reason (the Running condition's): the Task's message the operator
    writes (`message`), and what `describe` says after the task's place (`detail`; None: what
    holds its slot). A new kind of wait is a reason, the fact `wait` decides it from (a keyword
    of `wait`, a field of `Wait` if it words one), and one entry in `KINDS`."""

    message: Callable[[Wait], str]
    detail: Callable[[Wait, datetime], str | None]


def _no_detail(w: Wait, now: datetime) -> str | None:
    return None


KINDS: dict[str, Kind] = {
    reasons.POOL_NOT_FOUND: Kind(_pool_not_found, _no_detail),
    # A client cannot tell a worker's room from a slot (`of_task` never says WAITING_FOR_WORKER):
    # describe words the pool's slots, as for a slot.
    reasons.WAITING_FOR_WORKER: Kind(_no_worker, _no_detail),
    reasons.RATE_LIMITED: Kind(_rate_limited, countdown),
    reasons.WAITING_FOR_SLOT: Kind(_queued, _no_detail),
    # A concurrency key with onNewer Debounce: not yet quiet long enough (engine.keylimits).
    reasons.DEBOUNCING: Kind(_debouncing, _debounce_detail),
}
"""Every kind of wait for a slot, by reason."""


def share_text(w: Wait) -> str:
    """`submitter system:serviceaccount:team-a:ci has 2 running of its share of 30 (weight 1 of 2
    among the submitters with tasks running or queued)`."""
    share, fair = w.share, w.spec.fair_share if w.spec is not None else None
    if share is None or fair is None:
        return ""
    kind = "submitters" if admission.by_submitter(fair) else "groups"
    return (f"{named(w.group, fair)} has {share.running} running of its share of {share.slots:.3g} "
            f"(weight {share.weight} of {share.weights} among the {kind} with tasks running or queued)")


# --------------------------------------------------------------------------- waiting for Kueue

KUEUE_FIRST_LOOK = timedelta(seconds=1)
"""A Job Kueue holds is first looked at (its Workload read) this long after its creation: Kueue
makes the Workload within milliseconds, and a Job admitted meanwhile is never looked at."""
KUEUE_LOOK = timedelta(seconds=10)
"""Then at most this often while Kueue holds it: what Kueue says is read, not watched."""
NO_POSITION = "position unknown (Kueue's visibility API is not served)"


def kueue_look_at(job: AttemptJob) -> datetime | None:
    """When the Job Kueue holds is next to be looked at (None: Kueue does not hold it)."""
    if not job.held_by_kueue:
        return None
    if job.kueue_looked_at is not None:
        return job.kueue_looked_at + KUEUE_LOOK
    return (job.created_at + KUEUE_FIRST_LOOK) if job.created_at is not None else None


def kueue_text(hold: KueueHold, position: bool = False) -> str:
    """`waiting for Kueue: LocalQueue gpu, ClusterQueue team-a, position 12, needs 4 nvidia.com/gpu;
    Kueue says: couldn't assign flavors...`. With `position`, its place in the ClusterQueue (or that
    it is unknown); without, none (the Task's message: the place changes without being news)."""
    parts = [f"LocalQueue {hold.local_queue}"]
    parts.append(f"ClusterQueue {hold.cluster_queue}" if hold.cluster_queue else "ClusterQueue unknown")
    if position:
        parts.append(f"position {hold.position}" if hold.position is not None else NO_POSITION)
    if hold.needs:
        parts.append("needs " + " + ".join(f"{quantity} {resource}" for resource, quantity in hold.needs))
    text = "waiting for Kueue: " + ", ".join(parts)
    if not hold.readable:
        return text + "; its Workload could not be read (is Kueue installed, and may workloads.kueue.x-k8s.io be read?)"
    if hold.workload is None:
        return text + "; Kueue has made no Workload for it yet"
    if hold.message:
        return f"{text}; Kueue says: {hold.message}"
    return f"{text}; Kueue says: {hold.reason}" if hold.reason else text


def kueue_message(n: int, most: int, hold: KueueHold) -> str:
    """The Task's message while Kueue holds attempt `n`'s Job (reason WaitingForKueue)."""
    return wording.KUEUE_WAITING.format(n=n, most=most, text=kueue_text(hold))


_AMOUNTS = re.compile(r"\d+(\.\d+)?")


def kueue_said(status: TaskStatus, message: str) -> bool:
    """The status already says `message` (reason WaitingForKueue) but for its amounts: Kueue's
    words carry the quota's usage ("3 more needed"), which moves with other Workloads without
    being news. A new ClusterQueue, Kueue's reason or its wording is news (one write each)."""
    return (wording.told(status) == reasons.WAITING_FOR_KUEUE
            and _AMOUNTS.sub("#", status.message or "") == _AMOUNTS.sub("#", truncate(message)))


# --------------------------------------------------------------------------- its place


@dataclass(frozen=True)
class Place:
    """A queued task's place in its pool's admission order."""

    pool: str
    number: int
    """1 for the next to be admitted."""
    of: int
    ahead: tuple[str, ...]

    def __str__(self) -> str:
        shown = ", ".join(self.ahead[:3]) + (f" and {len(self.ahead) - 3} more" if len(self.ahead) > 3 else "")
        return (f"{ordinal(self.number)} of {self.of} in pool {self.pool}'s queue"
                + (f" (ahead: {shown})" if self.ahead else ""))


def place(task: Task, queued: Iterable[Task], fair: FairShare | None = None,
          running: Mapping[str, int] | None = None) -> Place:
    """Where `task` stands among `queued` (its pool's queued tasks; it need not be among them),
    in the operator's admission order: the highest priority first, groups of one priority in
    turn, then the oldest submission, then the name; in a pool that shares its slots (`fair`),
    the group holding the fewest slots for its weight first (`running`: the slots each holds),
    then priority within it. Which group's turn it is the operator alone knows: with groups, the
    place is the one a rotation starting now would give."""
    queue = Queue(fair)
    queue.hold(running or {})
    for c in sorted([_candidate(t) for t in queued if t.metadata.name != task.metadata.name] + [_candidate(task)]):
        queue.put(c)
    order = [c for c in iter(queue.pop, None)]
    at = next(i for i, c in enumerate(order) if c.name == task.metadata.name)
    return Place(task.spec.pool, at + 1, len(order), tuple(c.name for c in order[:at]))


@dataclass(frozen=True)
class Between:
    """A queued task's place as its pool's queue marks bound it: from `first` to `last`."""

    pool: str
    first: int
    last: int
    of: int
    taken_at: datetime

    def __str__(self) -> str:
        at = f"as of {self.taken_at.astimezone(timezone.utc):%H:%M:%SZ}"
        where = (f"{ordinal(self.first)}" if self.first == self.last
                 else f"between the {ordinal(self.first)} and the {ordinal(self.last)}")
        return f"{where} of {self.of:,} in pool {self.pool}'s queue ({at}, from the pool's queue marks)"


def between(task: Task, queue_marks: QueueMarks, fair: FairShare | None = None) -> Between:
    """Where `task` stands, bounded by its pool's queue marks without reading the other tasks: a
    group's own tasks keep their order (priority, submission, name) in the rotation, so the task
    comes after the last mark of its group that sorts before it and before the first that sorts
    after it. A task that came after the marks were taken is placed among them by the same rule."""
    mine = _candidate(task)
    group = admission.fair_group(mine.group, mine.submitter, fair)
    first, last = 1, max(queue_marks.waiting, 1)
    for mark in queue_marks.marks:
        if mark.name == mine.name:
            first = last = mark.place
            break
        if admission.fair_group(mark.group, mark.submitter, fair) != group:
            continue
        theirs = Candidate.of(mine.namespace, mark.name, mark.priority, mark.submitted_at, mark.group)
        if theirs.sort_key < mine.sort_key:
            first = max(first, mark.place + 1)
        else:
            last = min(last, mark.place - 1)
    return Between(task.spec.pool, first, max(first, last), max(queue_marks.waiting, first), queue_marks.taken_at)


def _candidate(t: Task) -> Candidate:
    submitted = (t.status.submitted_at if t.status else None) or t.metadata.creation_timestamp or datetime.max
    in_line = delay.in_line_from(t, submitted.replace(tzinfo=submitted.tzinfo or timezone.utc))  # as the operator does
    return Candidate.of_task(t, in_line)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


# --------------------------------------------------------------------------- its limits


@dataclass(frozen=True)
class Limit:
    """One of an unfinished task's own time limits, as a time."""

    label: str
    """As the dashboard shows it: `Start deadline`, `Deadline`, `No retry after`."""
    at: datetime
    text: str
    """As `describe` says it: `start by 12:00:00Z (startDeadline 1h)`."""


def limits(task: Task, pool: TaskPoolSpec | None) -> list[Limit]:
    """An unfinished task's own time limits (its pool's when it sets none): the start deadline
    while no attempt has started, the deadline, the retry budget's end; none once it finished."""
    if task.phase is not None and task.phase.terminal:
        return []
    settings = Effective.of(task, pool)
    status = task.status or TaskStatus()
    found: list[Limit] = []
    start_deadline, deadline, budget = settings.start_deadline, settings.deadline, settings.retry.max_retry_duration
    # Each is a time only when its setting is given.
    if status.attempt == 0 and (start := task_deadlines.start_by(task, settings, None)) is not None and start_deadline:
        found.append(Limit("Start deadline", start,
                           f"start by {start:%H:%M:%SZ} (startDeadline {format_duration(start_deadline)})"))
    if (end := task_deadlines.end_by(task, settings, None)) is not None and deadline:
        found.append(Limit("Deadline", end, f"deadline {end:%H:%M:%SZ} ({format_duration(deadline)} from submission)"))
    if (until := task_deadlines.retry_until(status, settings)) is not None and budget:
        found.append(Limit("No retry after", until,
                           f"no retry after {until:%H:%M:%SZ} (maxRetryDuration {format_duration(budget)})"))
    return found


# --------------------------------------------------------------------------- the whole explanation


@dataclass(frozen=True)
class Explanation:
    """All a reader is told of why an unfinished task waits and of its limits, from one set of
    facts and one clock: `describe` prints its lines, the dashboard shows its rows; the operator
    writes `message` of the same `Wait`."""

    now: datetime
    wait: Wait | None = None
    """While it is queued: why it has no slot."""
    place: str = ""
    """While it is queued: its place, as the reader could work it out (`place`, `between`, a count)."""
    not_before: datetime | None = None
    """Its delayed start (spec.notBefore, or spec.startDelay after its creation), past or not."""
    started: bool = False
    """An attempt has started: the delayed start is no longer ahead, whatever the clock says."""
    limits: tuple[Limit, ...] = ()

    @property
    def start_ahead(self) -> bool:
        """The delayed start is still to come (the surfaces say how far)."""
        return not self.started and self.not_before is not None and self.not_before > self.now

    @property
    def rate_due(self) -> datetime | None:
        """While it waits for its pool's rate limit: when the operator found the next start due."""
        return self.wait.next_start_at if self.wait is not None and self.wait.reason == reasons.RATE_LIMITED else None

    def waiting_text(self) -> str | None:
        """`describe`'s line of why it waits (None unless it is queued)."""
        return described(self.wait, self.place, self.now) if self.wait is not None else None

    def limits_text(self) -> str:
        """`describe`'s line of the limits: each one's text, joined by `; ` ("" when none)."""
        return "; ".join(limit.text for limit in self.limits)


def explain(task: Task, pool: TaskPool | None, now: datetime, *, place: str = "",
            group_running: Callable[[], int] | None = None, share: Callable[[], Share] | None = None) -> Explanation:
    """The explanation of `task` in `pool` (None: it does not exist) at `now`: while it is queued,
    why (`of_task`, with its `place` as the reader worded it; `group_running` and `share` counted
    only when they decide); its delayed start; its limits."""
    queued = task.phase is TaskPhase.QUEUED
    return Explanation(now, of_task(task, pool, group_running, share) if queued else None, place if queued else "",
                       delay.not_before(task), bool(task.status and task.status.attempt),
                       tuple(limits(task, pool.spec if pool is not None else None)))
