"""What the dashboard's pages show, computed from the cached objects without I/O (and so tested
without a cluster): the task list's filters and paging, the overview per namespace and pool, an
attempt timeline, the dependency graph around one task, and the history page's filter (what it
asks the archive: cronoq/archive.py)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from cronoq.api import TERMINAL_PHASES, AttemptOutcome, DurationError, Task, TaskPhase, TaskPool, TaskSchedule
from cronoq.api.durations import parse as parse_duration
from cronoq.archive import Filter
from cronoq.cli.render import passed_on
from cronoq.engine import keylimits
from cronoq.engine.attempts import waiting
from cronoq.engine.attempts.wording import told

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
FINISHED_WINDOW = timedelta(hours=1)
"""The overview counts the tasks that finished this long ago or less."""
WAITING = (TaskPhase.QUEUED, TaskPhase.BLOCKED, TaskPhase.RETRYING)


class BadFilter(ValueError):
    """A filter of the task list that cannot be read; the message names the field."""


@dataclass(frozen=True)
class TaskFilter:
    namespace: str = ""
    phase: str = ""
    pool: str = ""
    key: str = ""
    label: str = ""
    text: str = ""
    page: int = 1
    size: int = PAGE_SIZE
    labels: tuple[tuple[str, str | None], ...] = field(default=(), compare=False)

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> TaskFilter:
        """The filter a query string asks for. `label` is a selector of `k=v`, `k!=v` is not
        supported, `k` alone means the label is set; several are joined by commas."""
        phase = query.get("phase", "").strip()
        if phase and phase not in {p.value for p in TaskPhase}:
            raise BadFilter(f"phase: {phase!r} is none of {', '.join(p.value for p in TaskPhase)}")
        label = query.get("label", "").strip()
        labels = []
        for part in filter(None, (p.strip() for p in label.split(","))):
            name, eq, value = part.partition("=")
            name = name.strip().removesuffix("=")
            if not name or "!" in name:
                raise BadFilter(f"label: {part!r} is not key=value or key")
            labels.append((name, value.strip().lstrip("=") if eq else None))
        return cls(namespace=query.get("namespace", "").strip(), phase=phase, pool=query.get("pool", "").strip(),
                   key=query.get("key", "").strip(), label=label, text=query.get("text", "").strip(),
                   page=_number(query, "page", 1, 1, 10**9), size=_number(query, "size", PAGE_SIZE, 1, MAX_PAGE_SIZE),
                   labels=tuple(labels))

    def matches(self, task: Task) -> bool:
        meta, spec = task.metadata, task.spec
        if self.namespace and meta.namespace != self.namespace:
            return False
        if self.phase and (task.phase or "") != self.phase:
            return False
        if self.pool and spec.pool != self.pool:
            return False
        if self.key and spec.key != self.key:
            return False
        for name, value in self.labels:
            if name not in meta.labels or (value is not None and meta.labels[name] != value):
                return False
        if self.text:
            needle = self.text.lower()
            status = task.status
            haystack = (meta.name or "", spec.key or "", status.summary or "" if status else "",
                        status.message or "" if status else "")
            return any(needle in h.lower() for h in haystack)
        return True

    def query(self, **changes: Any) -> str:
        """This filter as a query string, with `changes` (e.g. another page)."""
        from urllib.parse import urlencode

        values = {"namespace": self.namespace, "phase": self.phase, "pool": self.pool, "key": self.key,
                  "label": self.label, "text": self.text, "page": self.page, "size": self.size, **changes}
        defaults = {"page": 1, "size": PAGE_SIZE}
        return urlencode({k: v for k, v in values.items() if v not in ("", None) and defaults.get(k) != v})


def _number(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadFilter(f"{name}: {text!r} is not a whole number") from None
    if not low <= value <= high:
        raise BadFilter(f"{name}: {value} is not between {low} and {high}")
    return value


@dataclass(frozen=True)
class Page:
    tasks: list[Task]
    total: int
    number: int
    pages: int


def newest_first(task: Task) -> tuple:
    created = task.metadata.creation_timestamp
    return (-(created.timestamp() if created else 0.0), task.metadata.namespace or "", task.metadata.name or "")


def task_page(tasks: Iterable[Task], wanted: TaskFilter) -> Page:
    """One page of the tasks that match, newest first. A page past the end shows the last one."""
    matching = sorted((t for t in tasks if wanted.matches(t)), key=newest_first)
    pages = max(1, -(-len(matching) // wanted.size))
    number = min(wanted.page, pages)
    start = (number - 1) * wanted.size
    return Page(matching[start:start + wanted.size], len(matching), number, pages)


OUTCOMES = [o.value for o in AttemptOutcome]
FINAL_PHASES = sorted(p.value for p in TERMINAL_PHASES)


@dataclass(frozen=True)
class HistoryFilter:
    """The history page's filters: executions (ended attempts) from the archive, newest first."""

    namespace: str = ""
    outcome: str = ""
    phase: str = ""
    pool: str = ""
    key: str = ""
    name: str = ""
    since: str = ""
    older: str = ""
    """The page after this row (a cursor: `place`), older."""
    newer: str = ""
    """The page before this row, newer."""
    page: int = 1
    """The page's number, as shown (the cursors say where it is)."""
    size: int = PAGE_SIZE

    @classmethod
    def parse(cls, query: Mapping[str, str], now: datetime) -> HistoryFilter:
        """The filter a query string asks for; `since` is a duration ago (1h, 7d) or an RFC 3339 time."""
        outcome, phase = query.get("outcome", "").strip(), query.get("phase", "").strip()
        if outcome and outcome not in OUTCOMES:
            raise BadFilter(f"outcome: {outcome!r} is none of {', '.join(OUTCOMES)}")
        if phase and phase not in FINAL_PHASES:
            raise BadFilter(f"phase: {phase!r} is none of {', '.join(FINAL_PHASES)}")
        wanted = cls(namespace=query.get("namespace", "").strip(), outcome=outcome, phase=phase,
                     pool=query.get("pool", "").strip(), key=query.get("key", "").strip(),
                     name=query.get("name", "").strip(), since=query.get("since", "").strip(),
                     older=query.get("older", "").strip(), newer=query.get("newer", "").strip(),
                     page=_number(query, "page", 1, 1, 10**9), size=_number(query, "size", PAGE_SIZE, 1, MAX_PAGE_SIZE))
        wanted.since_time(now)  # refused now, not when read
        _cursor(wanted.older, "older")
        _cursor(wanted.newer, "newer")
        return wanted

    def since_time(self, now: datetime) -> datetime | None:
        if not self.since:
            return None
        try:
            return now - parse_duration(self.since)
        except (DurationError, ValueError):
            pass
        try:
            at = datetime.fromisoformat(self.since.replace("Z", "+00:00"))
        except ValueError:
            raise BadFilter(f"since: {self.since!r} is neither a duration (1h, 7d) nor an RFC 3339 time") from None
        return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)

    def archive_filter(self, now: datetime, namespace: str | None) -> Filter:
        """What to ask the archive: this page's rows and one more (is there a next page?), in
        `namespace` (the dashboard's own; None: every one, or the filter's)."""
        return Filter(namespace=namespace or self.namespace or None, outcome=self.outcome or None,
                      phase=self.phase or None, pool=self.pool or None, key=self.key or None,
                      name=self.name or None, since=self.since_time(now), limit=self.size + 1,
                      older_than=_cursor(self.older, "older"), newer_than=_cursor(self.newer, "newer"))

    def query(self, **changes: Any) -> str:
        """This filter as a query string, with `changes` (e.g. another page: its cursor and number)."""
        from urllib.parse import urlencode

        values = {"namespace": self.namespace, "outcome": self.outcome, "phase": self.phase, "pool": self.pool,
                  "key": self.key, "name": self.name, "since": self.since, "older": self.older, "newer": self.newer,
                  "page": self.page, "size": self.size, **changes}
        defaults = {"page": 1, "size": PAGE_SIZE}
        return urlencode({k: v for k, v in values.items() if v not in ("", None) and defaults.get(k) != v})


def place(row: Mapping[str, Any]) -> str:
    """A row's place in the listing, as the pages' links carry it: `finishedAt,uid,attempt`."""
    return f"{row['finished_at'].isoformat()},{row['task_uid']},{row['attempt']}"


def _cursor(text: str, name: str) -> tuple[datetime, str, int] | None:
    if not text:
        return None
    try:
        at, uid, number = text.rsplit(",", 2)
        when = datetime.fromisoformat(at)
        return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)), uid, int(number)
    except ValueError:
        raise BadFilter(f"{name}: {text!r} is not a place in the history (time,uid,attempt)") from None


@dataclass(frozen=True)
class HistoryPage:
    rows: list[dict[str, Any]]
    number: int
    older: str | None
    """The place the next (older) page starts after; None: no older row."""
    newer: str | None
    """The place the page before (newer) ends before; None: this is the newest page."""


def history_page(rows: list[dict[str, Any]], wanted: HistoryFilter) -> HistoryPage:
    """The archive's answer to `archive_filter` (a page and one row more, on the far side from the
    cursor) as a page: its rows, and where the pages beside it start. Keyset paging: any page costs
    what the first does, however deep."""
    size = wanted.size
    if wanted.newer:  # the row more is the newest one, first
        shown, newer_more, older_more = rows[-size:], len(rows) > size, True
    else:
        shown, newer_more, older_more = rows[:size], bool(wanted.older), len(rows) > size
    number = max(wanted.page, 2) if newer_more else 1  # the newest page is the first, whatever the link said
    timed = [r for r in shown if r.get("finished_at") is not None]
    return HistoryPage(shown, number, place(timed[-1]) if older_more and timed else None,
                       place(timed[0]) if newer_more and timed else None)


@dataclass
class PoolRow:
    """One pool of one namespace on the overview. `pool` is None for tasks naming a pool that
    does not exist (they wait forever: the overview shows them so)."""
    namespace: str
    name: str
    pool: TaskPool | None = None
    queued: int = 0
    blocked: int = 0
    running: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    oldest_waiting: Task | None = None
    key_waits: dict[str, int] = field(default_factory=dict)
    """Concurrency key → its queued tasks that wait for it (WaitingForKey) or debounce on it."""

    @property
    def concurrency(self) -> int | None:
        return self.pool.spec.concurrency if self.pool else None

    @property
    def paused(self) -> bool:
        return bool(self.pool and self.pool.spec.paused)


def overview(tasks: Iterable[Task], pools: Iterable[TaskPool], now: datetime) -> list[PoolRow]:
    """Per namespace and pool: tasks queued (and of them, those waiting per concurrency key),
    blocked and running, those that finished in the last hour by phase, the pool's concurrency and
    pause, and the task waiting longest."""
    rows: dict[tuple[str, str], PoolRow] = {}

    def row(namespace: str, name: str) -> PoolRow:
        return rows.setdefault((namespace, name), PoolRow(namespace, name))

    for pool in pools:
        row(pool.metadata.namespace or "", pool.metadata.name or "").pool = pool
    for task in tasks:
        r = row(task.metadata.namespace or "", task.spec.pool)
        phase = task.phase
        if phase in (TaskPhase.QUEUED, TaskPhase.RETRYING):
            r.queued += 1
            status = task.status
            if status is not None and (key := keylimits.key_of_wait(told(status), status.message)) is not None:
                r.key_waits[key] = r.key_waits.get(key, 0) + 1
        elif phase is TaskPhase.BLOCKED:
            r.blocked += 1
        elif phase is TaskPhase.RUNNING:
            r.running += 1
        elif phase in TERMINAL_PHASES:
            finished = task.status.finished_at if task.status else None
            if finished is not None and now - finished <= FINISHED_WINDOW:
                r.finished[phase.value] = r.finished.get(phase.value, 0) + 1
        if (phase in (TaskPhase.QUEUED, TaskPhase.RETRYING)
                and (r.oldest_waiting is None or _waiting_since(task) < _waiting_since(r.oldest_waiting))):
            r.oldest_waiting = task
    return [rows[k] for k in sorted(rows)]


def _waiting_since(task: Task) -> datetime:
    return (task.status.submitted_at if task.status and task.status.submitted_at else None) \
        or task.metadata.creation_timestamp or datetime.max


def waiting_since(task: Task) -> datetime | None:
    since = _waiting_since(task)
    return None if since == datetime.max else since


def schedule_tasks(schedule: TaskSchedule, tasks: Iterable[Task]) -> list[Task]:
    """The Tasks a schedule made (its label on them), newest first."""
    from cronoq.engine.schedule import SCHEDULE

    name, namespace = schedule.metadata.name, schedule.metadata.namespace
    return sorted((t for t in tasks if t.metadata.namespace == namespace and t.metadata.labels.get(SCHEDULE) == name),
                  key=newest_first)


def next_fires(schedule: TaskSchedule, now: datetime, count: int = 3) -> tuple[str, list[datetime]]:
    """How the schedule reads (`0 3 * * *`, `every 10m`) and its next `count` fire times after
    `now` (none while suspended; the parser's message instead of a description if it is invalid)."""
    from cronoq.engine.schedule import InvalidSchedule, timetable_of

    try:
        table = timetable_of(schedule)
    except InvalidSchedule as err:
        return str(err), []
    fires: list[datetime] = []
    at: datetime | None = now
    while not schedule.spec.suspend and at is not None and len(fires) < count:
        at = table.after(at)
        if at is not None:
            fires.append(at)
    return table.describe(), fires


@dataclass(frozen=True)
class Bar:
    """One attempt on the timeline: where its bar starts and how wide it is, in percent of the
    span from the first attempt's dispatch to the last one's end (or now)."""
    number: int
    left: float
    width: float
    running: bool


def timeline(task: Task, now: datetime) -> list[Bar]:
    attempts = task.status.attempts if task.status else ()
    starts = [a.dispatched_at or a.started_at for a in attempts]
    if not attempts or not any(starts):
        return []
    begin = min(s for s in starts if s)
    ends = [a.finished_at or now for a in attempts]
    span = max((max(ends) - begin).total_seconds(), 1e-3)
    bars = []
    for attempt, start, end in zip(attempts, starts, ends):
        start = start or end
        left = (start - begin).total_seconds() / span * 100
        width = max((end - start).total_seconds() / span * 100, 0.5)
        bars.append(Bar(attempt.number, round(left, 2), round(min(width, 100 - left), 2), attempt.finished_at is None))
    return bars


def graph(task: Task, namespace_tasks: Iterable[Task], depth: int = 10) -> list[dict[str, Any]]:
    """The task, the tasks it depends on and those that depend on it (transitively, up to
    `depth` steps each way), as Cytoscape elements: nodes with their phase, edges from a
    dependency to its dependent labelled with the edge's `on` and the output the dependency passes
    on (`passed`: the dependent's input, cut to a line; docs/inputs.md)."""
    by_name = {t.metadata.name: t for t in namespace_tasks}
    by_name[task.metadata.name] = task
    dependents: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for t in by_name.values():
        for dep in t.spec.depends_on:
            dependents[dep.task].append((t.metadata.name or "", dep.on.value))
    nodes: set[str] = {task.metadata.name or ""}
    edges: set[tuple[str, str, str]] = set()
    frontier = [task.metadata.name or ""]
    for _ in range(depth):  # upwards: what the task waits on
        nxt = []
        for name in frontier:
            for dep in by_name[name].spec.depends_on if name in by_name else ():
                edges.add((dep.task, name, dep.on.value))
                if dep.task not in nodes:
                    nodes.add(dep.task)
                    nxt.append(dep.task)
        frontier = nxt
    frontier = [task.metadata.name or ""]
    for _ in range(depth):  # downwards: what waits on the task
        nxt = []
        for name in frontier:
            for child, on in dependents.get(name, ()):
                edges.add((name, child, on))
                if child not in nodes:
                    nodes.add(child)
                    nxt.append(child)
        frontier = nxt
    elements: list[dict[str, Any]] = []
    for name in sorted(nodes):
        known = by_name.get(name)
        phase = (known.phase or "Pending") if known else "Missing"
        elements.append({"data": {"id": name, "label": f"{name}\n{phase}", "phase": str(phase),
                                  "root": name == task.metadata.name}})
    for source, target, on in sorted(edges):
        known = by_name.get(source)
        passed = passed_on(known) if known is not None else None
        label = on if passed is None else f"{on}\n{passed}"
        elements.append({"data": {"id": f"{source}->{target}", "source": source, "target": target, "on": on,
                                  "passed": passed, "label": label}})
    return elements


def explained(task: Task, pool: TaskPool | None, now: datetime) -> waiting.Explanation:
    """Why the task waits and its limits, for its page: `engine.attempts.waiting.explain`, the
    explanation `describe` prints (its delayed start, the pool's next start while it waits for the
    rate limit, its own limits as times), without the place: the page lists no queue."""
    return waiting.explain(task, pool, now)


def kueue_admits(task: Task, pool: TaskPool | None) -> bool:
    """A running task of a pool that hands admission to Kueue: its page asks what Kueue says of
    its Job (`/tasks/<ns>/<name>/kueue`, `waiting.kueue_text`, as `describe` says it)."""
    return (task.phase is TaskPhase.RUNNING and pool is not None and pool.spec.admission is not None
            and pool.spec.admission.kueue is not None)
