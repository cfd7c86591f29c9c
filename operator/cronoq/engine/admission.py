"""Which ready tasks of a pool get a slot (DESIGN §5): while running attempts < concurrency,
the highest `priority` first, then the oldest `submittedAt`, then the name (a stable tie-break).
A retried task keeps its submission time, so it keeps its place among its priority.

The order is `Candidate`'s and the pool's `Queue` keeps it; how many slots are free is counted
where the slots are kept (controller/slots.py), which pops the queue while one is."""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime
from typing import Iterator

from cronoq.api import TaskPoolSpec


@dataclass(frozen=True, order=True)
class Candidate:
    """A task waiting for a slot, ordered so that the first in sort order is admitted first."""

    sort_key: tuple[int, datetime, str, str]
    """(-priority, submitted_at, namespace, name)."""
    namespace: str
    name: str

    @classmethod
    def of(cls, namespace: str, name: str, priority: int, submitted_at: datetime) -> Candidate:
        return cls((-priority, submitted_at, namespace, name), namespace, name)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


class Queue:
    """A pool's waiting tasks in admission order. Adding, re-ranking (a priority change) and
    taking the best are O(log n), so granting slots behind a backlog of thousands stays cheap.
    A re-ranked or removed task's old heap entry stays behind and is skipped when it surfaces."""

    def __init__(self) -> None:
        self._heap: list[Candidate] = []
        self._current: dict[tuple[str, str], Candidate] = {}

    def put(self, candidate: Candidate) -> None:
        if self._current.get(candidate.key) == candidate:
            return
        self._current[candidate.key] = candidate
        heapq.heappush(self._heap, candidate)

    def discard(self, key: tuple[str, str]) -> None:
        self._current.pop(key, None)

    def pop(self) -> Candidate | None:
        """Remove and return the task to admit next, or None when none waits."""
        while self._heap:
            candidate = heapq.heappop(self._heap)
            if self._current.get(candidate.key) == candidate:
                del self._current[candidate.key]
                if len(self._heap) > 2 * len(self._current) + 64:  # mostly stale entries: rebuild
                    self._heap = list(self._current.values())
                    heapq.heapify(self._heap)
                return candidate
        return None

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._current

    def __len__(self) -> int:
        return len(self._current)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._current)


def capacity(pool: TaskPoolSpec) -> int:
    """How many attempts the pool may run at once now: its concurrency, or none while paused."""
    return 0 if pool.paused else pool.concurrency

