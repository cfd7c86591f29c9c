"""Concurrency keys (issue 54, item 2): a task names keys (`spec.concurrencyKeys`), the namespace's
TaskPools declare how many running attempts may hold each (`concurrencyKeyLimits`), and a task is
granted a slot only while every key it names has room, whichever pool it is in. A key with limit 1
is a mutex.

The limits of a namespace are the union of its pools' declarations: a key's own entry wins over a
prefix's (`customer-*`), a longer prefix over a shorter one, and where pools declare the same entry
the smallest limit holds (declaring a key again can only tighten it). A key no pool declares has
no limit.

What holds a key is what holds a slot (a running attempt, a grant not started yet, an aborted
attempt whose container may still run), counted by the caller from what it observed: a new leader
counts the running attempts its watches listed before it grants, so the limit holds across a
failover. Pure: no clock is needed, and no I/O."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from cronoq.api import KeyLimit, TaskPoolSpec

K = TypeVar("K")


POLICY_STRENGTH = {"Queue": 0, "SupersedeQueued": 1, "CancelRunning": 2}


def _stricter(a: KeyLimit, b: KeyLimit) -> KeyLimit:
    """Of two pools' entries for one key: the smaller limit, then the stronger policy."""
    return min(a, b, key=lambda e: (e.limit, -POLICY_STRENGTH[e.on_newer]))


@dataclass(frozen=True)
class Limits:
    """A namespace's key limits, from every pool that declares some."""

    exact: Mapping[str, KeyLimit]
    prefixes: tuple[tuple[str, KeyLimit], ...]
    """(prefix, its entry), the longest prefix first."""

    @classmethod
    def of(cls, declared: Iterable[KeyLimit]) -> Limits:
        exact: dict[str, KeyLimit] = {}
        prefixes: dict[str, KeyLimit] = {}
        for entry in declared:
            if entry.key.endswith("*"):
                into, name = prefixes, entry.key[:-1]
            else:
                into, name = exact, entry.key
            into[name] = _stricter(entry, into[name]) if name in into else entry
        return cls(exact, tuple(sorted(prefixes.items(), key=lambda p: -len(p[0]))))

    @classmethod
    def of_pools(cls, pools: Iterable[TaskPoolSpec]) -> Limits:
        return cls.of(entry for spec in pools for entry in spec.concurrency_key_limits)

    def rule(self, key: str) -> KeyLimit | None:
        """The entry that governs `key` (None: no pool declares it)."""
        found = self.exact.get(key)
        if found is not None:
            return found
        return next((entry for prefix, entry in self.prefixes if key.startswith(prefix)), None)

    def limit(self, key: str) -> int | None:
        """How many running attempts may hold `key` at once (None: no limit)."""
        entry = self.rule(key)
        return entry.limit if entry is not None else None

    def supersedes(self, key: str) -> bool:
        """A newer task naming `key` ends older ones (its policy is not Queue)."""
        entry = self.rule(key)
        return entry is not None and entry.on_newer != "Queue"

    def __bool__(self) -> bool:
        return bool(self.exact or self.prefixes)


def blocking(keys: Iterable[str], held: Mapping[str, int], limits: Limits) -> str | None:
    """The first of `keys` (in the task's order) with no room for one more holder, or None when a
    task naming them may start."""
    for key in keys:
        limit = limits.limit(key)
        if limit is not None and held.get(key, 0) >= limit:
            return key
    return None


def next_holders(waiting: Iterable[tuple[bool, Any, K]], room: int | None) -> list[K]:
    """Which tasks parked on a key that has `room` again (None: no limit now) go back to their
    pools' queues: `waiting` is (its pool has a free slot, its place in line, the task); those
    that can run at once first, each kind best placed first, `room` of them. So the key goes to
    the best waiter that can take it, whichever pool freed it."""
    ordered = sorted(waiting, key=lambda w: (not w[0], w[1]))
    return [task for _, _, task in ordered[:room]]


@dataclass(frozen=True)
class KeyWait:
    """Why a task waits for a key: the key, its limit and the tasks that hold it now."""

    key: str
    limit: int
    holders: tuple[str, ...]
    """Names of the tasks holding it (their attempts run, or are about to), sorted."""

    def holders_text(self, most: int = 3) -> str:
        if not self.holders:
            return "nobody (a slot is about to be granted)" if self.limit else "nobody: its limit is 0"
        shown = ", ".join(self.holders[:most])
        return shown + (f" and {len(self.holders) - most} more" if len(self.holders) > most else "")


def message(wait: KeyWait) -> str:
    """The Task's message (reason WaitingForKey): which key holds it, its limit, and who held it
    when the task began to wait for it (`describe` says who holds it now)."""
    return (f"waiting for concurrency key {wait.key}: {len(wait.holders)} of {wait.limit} running across pools, "
            f"held by {wait.holders_text()}")


def waits_for(message_text: str | None) -> str | None:
    """The key a WaitingForKey message names (None: it names none), so that a task waiting for
    the same key is not written again each time the key changes hands."""
    prefix = "waiting for concurrency key "
    if not message_text or not message_text.startswith(prefix):
        return None
    return message_text[len(prefix):].split(":", 1)[0]


def described(wait: KeyWait) -> str:
    """`cronoq describe`'s line: `concurrency key deploy/service-x has 1 of 1 running (limit across
    every pool of the namespace): held by deploy-a`."""
    return (f"concurrency key {wait.key} has {len(wait.holders)} of {wait.limit} running (its limit across every "
            f"pool of the namespace): held by {wait.holders_text(most=5)}")


def key_wait(keys: Iterable[str], holders: Mapping[str, Iterable[str]], limits: Limits) -> KeyWait | None:
    """Why a task naming `keys` waits, from the tasks holding each key (`holders`: key → names),
    or None when every key has room."""
    held = {key: len(set(names)) for key, names in holders.items()}
    key = blocking(keys, held, limits)
    if key is None:
        return None
    limit = limits.limit(key)
    assert limit is not None
    return KeyWait(key, limit, tuple(sorted(set(holders.get(key, ())))))


def of_tasks(keys: Iterable[str], running: Iterable[tuple[str, Iterable[str]]],
             pools: Iterable[TaskPoolSpec]) -> KeyWait | None:
    """`key_wait` from what a client reads: the namespace's running tasks (name, their keys) and
    its pools (`cronoq describe`; the operator counts grants and stopping attempts too)."""
    holders: dict[str, set[str]] = {}
    for name, held in running:
        for key in held:
            holders.setdefault(key, set()).add(name)
    return key_wait(keys, holders, Limits.of_pools(pools))


@dataclass(frozen=True)
class Superseded:
    """A newer task naming one of a task's keys ends it (the key's `onNewer` policy)."""

    by: str
    """The newest unfinished task naming the key."""
    key: str

    def message(self) -> str:
        return f"superseded by newer task {self.by} (concurrency key {self.key})"


Arrival = tuple[datetime, str]
"""When a task was submitted, and its name: which of two is newer (the name breaks a tie)."""


def superseded(keys: Iterable[str], mine: Arrival, running: bool, peers: Mapping[str, Iterable[Arrival]],
               limits: Limits) -> Superseded | None:
    """Whether a newer task ends this one: for a key of it whose policy is SupersedeQueued (and this
    task runs no attempt) or CancelRunning, the newest unfinished task naming the key (`peers`: key →
    the arrivals of the unfinished tasks naming it, this one's included or not) if it is newer."""
    for key in keys:
        entry = limits.rule(key)
        if entry is None or entry.on_newer == "Queue" or (running and entry.on_newer != "CancelRunning"):
            continue
        newest = max(peers.get(key, ()), default=None)
        if newest is not None and newest > mine:
            return Superseded(newest[1], key)
    return None
