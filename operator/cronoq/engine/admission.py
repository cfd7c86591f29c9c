"""Which ready tasks of a pool get a slot (DESIGN §5): while running attempts < concurrency,
the highest `priority` first; among tasks of one priority, fairness groups (a task's `group`)
take turns; within a group, the oldest `submittedAt` first, then the name (a stable tie-break).
A retried task keeps its submission time, so it keeps its place among its priority.

The order is the pool's `Queue`'s; how many slots are free, and which groups are at the pool's
`groupConcurrency`, are counted where the slots are kept (controller/slots.py), which pops the
queue while a slot is free."""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterator

from cronoq.api import QueueMark, QueueMarks, TaskPoolSpec
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
    """Its fairness group; "" for tasks that name none (they share one group)."""

    @classmethod
    def of(cls, namespace: str, name: str, priority: int, submitted_at: datetime, group: str | None = None) -> Candidate:
        return cls((-priority, submitted_at, namespace, name), namespace, name, group or "")

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


Rank = tuple[int, int, datetime, str, str]
"""A group's place: (-priority of its best task, the turn it was last served at, that task's
submission, namespace, name)."""


class Queue:
    """A pool's waiting tasks in admission order: a heap per fairness group, and a heap of groups
    ranked by their best task's priority, then by whose turn it is (the group served longest ago;
    a group new to the queue counts as served at the latest turn, so it joins the back of the
    rotation, not its front). With one group (no task names one) this is plain priority order.

    Adding, re-ranking (a priority change), removing and taking the best are O(log n) however long
    the backlog: entries left behind by a re-rank or removal are skipped when they surface, and a
    group's entry whose best task went is ranked again then."""

    def __init__(self) -> None:
        self._current: dict[tuple[str, str], Candidate] = {}
        self._groups: dict[str, list[Candidate]] = {}
        self._sizes: dict[str, int] = {}
        self._served: dict[str, int] = {}
        """Group → the turn it was last served at (or joined the queue at)."""
        self._turn = 0
        self._order: list[tuple[Rank, str]] = []
        self._ranked: dict[str, Rank] = {}
        """Group → the rank of its one live entry in `_order`."""

    def put(self, candidate: Candidate) -> None:
        old = self._current.get(candidate.key)
        if old == candidate:
            return
        if old is not None and old.group != candidate.group:
            self.discard(old.key)
            old = None
        group = candidate.group
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
            self._sizes[old.group] -= 1
            if not self._sizes[old.group]:
                self._forget(old.group)

    def pop(self, eligible: Callable[[str], bool] | None = None) -> Candidate | None:
        """Remove and return the task to admit next, from a group `eligible` allows (all, when
        None), or None when none waits there."""
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
                candidate = heapq.heappop(self._groups[group])
                del self._current[candidate.key]
                self._sizes[group] -= 1
                self._turn += 1
                self._served[group] = self._turn
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

    def _rank(self, group: str) -> Rank | None:
        """The group's place now, its heap's left-behind head entries dropped; None (and the group
        forgotten) when none of its tasks waits."""
        heap = self._groups.get(group)
        while heap and self._current.get(heap[0].key) != heap[0]:
            heapq.heappop(heap)
        if not heap:
            self._forget(group)
            return None
        priority, submitted, namespace, name = heap[0].sort_key
        return (priority, self._served[group], submitted, namespace, name)

    def _forget(self, group: str) -> None:
        """No task of the group waits: when one comes, the group joins the back of the rotation."""
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
        each was last served. O(n log n), for the pool's queue marks (`marks`), not for admission."""
        groups: dict[str, list[Candidate]] = {}
        for candidate in self._current.values():
            groups.setdefault(candidate.group, []).append(candidate)
        for tasks in groups.values():
            tasks.sort(reverse=True)  # the best last, so taking it is a pop()
        served, turn = {group: self._served[group] for group in groups}, self._turn

        def rank(group: str) -> Rank:
            priority, submitted, namespace, name = groups[group][-1].sort_key
            return (priority, served[group], submitted, namespace, name)

        order = [(rank(group), group) for group in groups]
        heapq.heapify(order)
        while order:
            _, group = heapq.heappop(order)
            yield groups[group].pop()
            turn += 1
            served[group] = turn
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
        QueueMark(place=place, name=c.name, priority=-c.sort_key[0], submitted_at=c.sort_key[1], group=c.group or None)
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
