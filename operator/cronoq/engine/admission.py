"""Which ready tasks of a pool get a slot (DESIGN §5): while running attempts < concurrency,
the highest `priority` first; among tasks of one priority, fairness groups (a task's `group`)
take turns; within a group, the oldest `submittedAt` first, then the name (a stable tie-break).
A retried task keeps its submission time, so it keeps its place among its priority.

A pool with `fairShare` shares its slots instead: the next slot goes to the waiting group that
holds the fewest slots for its weight, groups as low taking turns, and priority orders only the
tasks within a group, so no group gets more than its part by queueing more tasks, naming more
groups (by submitter: a task's group is who created it) or raising priorities.

The order is the pool's `Queue`'s; how many slots are free, which groups are at the pool's
`groupConcurrency` and how many slots each group holds are counted where the slots are kept
(controller/slots.py), which pops the queue while a slot is free."""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterator, Mapping

from cronoq.api import SUBMITTER, FairShare, QueueMark, QueueMarks, Task, TaskPoolSpec
from cronoq.api.pool import QUEUE_MARKS_MOST


@dataclass(frozen=True, order=True)
class Candidate:
    """A task waiting for a slot, ordered within its group so that the first in sort order is
    admitted first."""

    sort_key: tuple[int, datetime, str, str]
    """(-priority, submitted_at, namespace, name)."""
    namespace: str
    name: str
    group: str = ""
    """Its fairness group (spec.group); "" for tasks that name none (they share one group)."""
    submitter: str = ""
    """Who created it (its cronoq.io/submitter annotation); "" when that is not recorded. The
    fairness group of a pool that shares by submitter."""
    keys: tuple[str, ...] = ()
    """Its concurrency keys (spec.concurrencyKeys): it is granted a slot only while each has room."""

    @classmethod
    def of(cls, namespace: str, name: str, priority: int, submitted_at: datetime, group: str | None = None,
           submitter: str | None = None, keys: tuple[str, ...] = ()) -> Candidate:
        return cls((-priority, submitted_at, namespace, name), namespace, name, group or "", submitter or "", keys)

    @classmethod
    def of_task(cls, task: Task, in_line: datetime) -> Candidate:
        """The task waiting in line from `in_line` (its submission, or its start time when delayed)."""
        meta = task.metadata
        return cls.of(meta.namespace or "", meta.name or "", task.spec.priority, in_line, task.spec.group,
                      submitter_of(task), tuple(task.spec.concurrency_keys))

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def submitter_of(task: Task) -> str | None:
    """Who created the task, as its cronoq.io/submitter annotation records it (None: not recorded)."""
    return task.metadata.annotations.get(SUBMITTER) or None


def by_submitter(fair: FairShare | None) -> bool:
    return fair is not None and fair.by == "Submitter"


def fair_group(group: str | None, submitter: str | None, fair: FairShare | None) -> str:
    """A task's fairness group in a pool that shares as `fair` says: its submitter when the pool
    shares by submitter, else its own `group` ("" when it has none)."""
    return (submitter if by_submitter(fair) else group) or ""


Rank = tuple[float, int, tuple[int, datetime, str, str]]
"""A group's place: (its standing: -priority of its best task, or with fair shares the slots it
holds for its weight; the turn it was last served at; its best task's sort key)."""


class Queue:
    """A pool's waiting tasks in admission order: a heap per fairness group, and a heap of groups
    ranked by their standing, then by whose turn it is (the group served longest ago; a group new
    to the queue counts as served at the latest turn, so it joins the back of the rotation, not its
    front). The standing is the priority of the group's best task, or, when the pool shares its
    slots (`configure`), the slots the group holds for its weight (`hold`, and one more for each
    slot it is given). With one group (no task names one) this is plain priority order.

    Adding, re-ranking (a priority change), removing and taking the best are O(log n) however long
    the backlog: entries left behind by a re-rank or removal are skipped when they surface, and a
    group's entry whose best task went is ranked again then."""

    def __init__(self, fair: FairShare | None = None) -> None:
        self._current: dict[tuple[str, str], Candidate] = {}
        self._groups: dict[str, list[Candidate]] = {}
        self._sizes: dict[str, int] = {}
        self._served: dict[str, int] = {}
        """Group → the turn it was last served at (or joined the queue at)."""
        self._turn = 0
        self._order: list[tuple[Rank, str]] = []
        self._ranked: dict[str, Rank] = {}
        """Group → the rank of its one live entry in `_order`."""
        self._fair = fair
        self._load: dict[str, int] = {}
        """Group → the slots it holds (with fair shares): as last told by `hold`, plus those given since."""
        self._now: datetime | None = None
        """When `hold` was last told (the time a usage half-life averages to)."""
        self._usage: dict[str, tuple[float, datetime]] = {}
        """Group → its usage (the slots it held, averaged with the half-life) as of a time."""

    @property
    def fair(self) -> FairShare | None:
        return self._fair

    def group_of(self, candidate: Candidate) -> str:
        return fair_group(candidate.group, candidate.submitter, self._fair)

    def configure(self, fair: FairShare | None) -> None:
        """The pool's fairShare, as its spec says now. A change of where groups come from regroups
        the waiting tasks (O(n log n)); a change of weights ranks the groups again (O(g log g))."""
        if fair == self._fair:
            return
        regroup = by_submitter(fair) != by_submitter(self._fair)
        self._fair = fair
        if regroup:
            waiting = list(self._current.values())
            for held in (self._current, self._groups, self._sizes, self._served, self._ranked):
                held.clear()
            self._order = []
            for candidate in sorted(waiting):
                self.put(candidate)
            return
        self._order, self._ranked = [], {}
        for group in list(self._groups):
            self._rerank(group)

    def hold(self, using: Mapping[str, int], now: datetime | None = None) -> None:
        """The slots each group holds now (running attempts and grants not started): what a pool
        that shares its slots ranks its groups by. O(groups holding slots, log g); with a usage
        half-life, every waiting group is ranked again (its usage moved with the time)."""
        half_life = self._half_life()
        if now is not None:
            if half_life is not None:
                for group in self._load.keys() | using.keys():
                    self._settle(group, now)
            self._now = now
        for group in self._load.keys() | using.keys():
            held = using.get(group, 0)
            if self._load.get(group, 0) == held:
                continue
            if held:
                self._load[group] = held
            else:
                del self._load[group]
            if self._fair is not None and group in self._groups:
                self._rerank(group)
        if half_life is not None and self._now is not None:
            for group in [g for g in self._usage
                          if not self._load.get(g) and self._usage_at(g, self._load, self._usage, self._now) < 0.01]:
                del self._usage[group]  # its use is forgotten: it starts from nothing, as a new group
            for group in list(self._groups):
                self._rerank(group)

    def _half_life(self) -> float | None:
        fair = self._fair
        return fair.usage_half_life.total_seconds() if fair is not None and fair.usage_half_life else None

    def _usage_at(self, group: str, load: Mapping[str, int], usage: Mapping[str, tuple[float, datetime]],
                  now: datetime | None) -> float:
        """The group's usage at `now`: the slots it held, averaged with the half-life (0 without
        one). Its held slots were the same since its usage was last settled, so the average moved
        from there toward them by the half-life's decay."""
        half_life = self._half_life()
        if half_life is None or now is None or group not in usage:
            return 0.0
        held = load.get(group, 0)
        then, at = usage[group]
        return held + (then - held) * float(2.0 ** (-max((now - at).total_seconds(), 0.0) / half_life))

    def _settle(self, group: str, now: datetime, load: Mapping[str, int] | None = None,
                usage: dict[str, tuple[float, datetime]] | None = None) -> None:
        """Bring the group's usage to `now` before the slots it holds change (in `usage` and
        `load`, copies of the queue's own, when given)."""
        load = self._load if load is None else load
        usage = self._usage if usage is None else usage
        usage[group] = (self._usage_at(group, load, usage, now), now) if group in usage else (0.0, now)

    def put(self, candidate: Candidate) -> None:
        old = self._current.get(candidate.key)
        if old == candidate:
            return
        group = self.group_of(candidate)
        if old is not None and self.group_of(old) != group:
            self.discard(old.key)
            old = None
        self._current[candidate.key] = candidate
        if old is None:
            self._sizes[group] = self._sizes.get(group, 0) + 1
        self._served.setdefault(group, self._turn)
        heap = self._groups.setdefault(group, [])
        heapq.heappush(heap, candidate)
        if len(heap) > 2 * self._sizes[group] + 64:  # mostly entries left behind: rebuild
            heap[:] = [c for c in heap if self._current.get(c.key) == c]
            heapq.heapify(heap)
        self._rerank(group)

    def discard(self, key: tuple[str, str]) -> None:
        old = self._current.pop(key, None)
        if old is not None:
            group = self.group_of(old)
            self._sizes[group] -= 1
            if not self._sizes[group]:
                self._forget(group)

    def pop(self, eligible: Callable[[str], bool] | None = None,
            held: Callable[[Candidate], bool] | None = None) -> Candidate | None:
        """Remove and return the task to admit next, from a group `eligible` allows (all, when
        None), or None when none waits there. With fair shares, its group holds one slot more.
        A task `held` says may not start (a concurrency key of it has no room) leaves the queue
        without taking a turn or a slot: the caller keeps it until its key has room."""
        passed: list[tuple[Rank, str]] = []
        try:
            while self._order:
                rank, group = heapq.heappop(self._order)
                if self._ranked.get(group) != rank:
                    continue  # left behind by a newer entry of its group
                del self._ranked[group]
                if self._rank(group) != rank:  # its best task went or was re-ranked: rank it again
                    self._rerank(group)
                    continue
                if eligible is not None and not eligible(group):
                    passed.append((rank, group))
                    continue
                if held is not None and held(self._groups[group][0]):
                    self.discard(self._groups[group][0].key)
                    self._rerank(group)
                    continue
                candidate = heapq.heappop(self._groups[group])
                del self._current[candidate.key]
                self._sizes[group] -= 1
                self._turn += 1
                self._served[group] = self._turn
                if self._fair is not None:
                    if self._now is not None and self._half_life() is not None:
                        self._settle(group, self._now)
                    self._load[group] = self._load.get(group, 0) + 1
                self._rerank(group)
                if len(self._order) > 2 * len(self._ranked) + 64:
                    self._order = [(r, g) for g, r in self._ranked.items()]
                    heapq.heapify(self._order)
                return candidate
            return None
        finally:
            for rank, group in passed:
                self._ranked[group] = rank
                heapq.heappush(self._order, (rank, group))

    def _standing(self, group: str, best: Candidate, load: Mapping[str, int],
                  usage: Mapping[str, tuple[float, datetime]]) -> float:
        if self._fair is None:
            return best.sort_key[0]
        return (load.get(group, 0) + self._usage_at(group, load, usage, self._now)) / self._fair.weight(group)

    def _rank(self, group: str) -> Rank | None:
        """The group's place now, its heap's left-behind head entries dropped; None (and the group
        forgotten) when none of its tasks waits."""
        heap = self._groups.get(group)
        while heap and self._current.get(heap[0].key) != heap[0]:
            heapq.heappop(heap)
        if not heap:
            self._forget(group)
            return None
        return (self._standing(group, heap[0], self._load, self._usage), self._served[group], heap[0].sort_key)

    def _forget(self, group: str) -> None:
        """No task of the group waits: when one comes, the group joins the back of the rotation
        (among the groups of its standing). The slots it holds are kept: they are not the queue's."""
        for held in (self._groups, self._sizes, self._served, self._ranked):
            held.pop(group, None)

    def _rerank(self, group: str) -> None:
        rank = self._rank(group)
        if rank is not None and self._ranked.get(group) != rank:
            self._ranked[group] = rank
            heapq.heappush(self._order, (rank, group))

    def in_order(self) -> Iterator[Candidate]:
        """The waiting tasks in the order `pop` would take them (every group eligible), taking
        none: each group's tasks sorted once, then the groups' turns played out on a copy of when
        each was last served (and of the slots each holds). O(n log n), for the pool's queue marks
        (`marks`) and `describe`'s place, not for admission."""
        groups: dict[str, list[Candidate]] = {}
        for candidate in self._current.values():
            groups.setdefault(self.group_of(candidate), []).append(candidate)
        for tasks in groups.values():
            tasks.sort(reverse=True)  # the best last, so taking it is a pop()
        served, turn, load = {group: self._served[group] for group in groups}, self._turn, dict(self._load)
        usage = dict(self._usage)

        def rank(group: str) -> Rank:
            best = groups[group][-1]
            return (self._standing(group, best, load, usage), served[group], best.sort_key)

        order = [(rank(group), group) for group in groups]
        heapq.heapify(order)
        while order:
            _, group = heapq.heappop(order)
            yield groups[group].pop()
            turn += 1
            served[group] = turn
            if self._fair is not None:
                if self._now is not None and self._half_life() is not None:
                    self._settle(group, self._now, load, usage)
                load[group] = load.get(group, 0) + 1
            if groups[group]:
                heapq.heappush(order, (rank(group), group))

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._current

    def __len__(self) -> int:
        return len(self._current)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._current)


MARKS_FROM = 2_000
"""A pool's status carries queue marks while more than this many wait; up to this many, `describe`
works out a place by reading the pool's queued tasks."""


def marks(queue: Queue, now: datetime, most: int = QUEUE_MARKS_MOST) -> QueueMarks:
    """The queue's first and last task and evenly spaced ones between, `most` at most, in
    admission order: what a pool's status carries so that a queued task's place can be read
    between two of them without listing the pool."""
    waiting = len(queue)
    step = max(1, -(-(waiting - 1) // max(1, most - 1)))  # ceil: the last place is marked too
    taken = [(place, c) for place, c in enumerate(queue.in_order(), start=1)
             if (place - 1) % step == 0 or place == waiting]
    return QueueMarks(taken_at=now, waiting=waiting, marks=tuple(
        QueueMark(place=place, name=c.name, priority=-c.sort_key[0], submitted_at=c.sort_key[1], group=c.group or None,
                  submitter=(c.submitter or None) if by_submitter(queue.fair) else None)
        for place, c in taken))


def capacity(pool: TaskPoolSpec) -> int:
    """How many attempts the pool may run at once now: its concurrency, or none while paused."""
    return 0 if pool.paused else pool.concurrency



COUNTS_ONLY = frozenset({"paused", "concurrency", "group_concurrency"})
"""The pool's fields that say only how many of its tasks start at once."""


def tasks_unmoved(old: TaskPoolSpec, new: TaskPoolSpec) -> bool:
    """True when a pool's edit leaves each of its tasks' own decisions as they were, so only the pool
    need be looked at again (its free slots are granted to the waiting tasks, which then run): it
    changed only how many start (pause, resume, concurrency, groupConcurrency), and the pool's
    waiting tasks all say the same `queued` whatever those are — a pool of Jobs that neither rate
    limits (a free slot there means a countdown to write) nor hands admission to Kueue. Resuming a
    pool with 100,000 queued would otherwise reconcile each of them for nothing (issue 56)."""
    if any(spec.delivery != "Job" or spec.rate_limit is not None or spec.admission is not None
           for spec in (old, new)):
        return False
    return old.model_dump(exclude=set(COUNTS_ONLY)) == new.model_dump(exclude=set(COUNTS_ONLY))
