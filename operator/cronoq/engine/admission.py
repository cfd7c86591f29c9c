"""Which ready tasks of a pool get a slot (DESIGN §5): while running attempts < concurrency,
the highest `priority` first, then the oldest `submittedAt`, then the name (a stable tie-break).
A retried task keeps its submission time, so it keeps its place among its priority."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable


@dataclass(frozen=True, order=True)
class Candidate:
    """A task waiting for a slot, ordered so that the first in sort order is admitted first."""

    sort_key: tuple
    namespace: str
    name: str

    @classmethod
    def of(cls, namespace: str, name: str, priority: int, submitted_at: datetime) -> Candidate:
        return cls((-priority, submitted_at, namespace, name), namespace, name)


def admit(candidates: Iterable[Candidate], *, concurrency: int, running: int) -> list[Candidate]:
    """The candidates that may start now, in the order they should start."""
    free = max(concurrency - running, 0)
    if free == 0:
        return []
    return sorted(candidates)[:free]
