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
failover.

Debounce (`onNewer: Debounce`): the tasks naming the key that wait for it (`Debouncing`: not yet
released) form a burst; its newest is released at `quiet` after its arrival, or at `maxWait`
after the burst's oldest, whichever comes first, and every older task ends Superseded once a newer
one is released. Who is released is what each Task's status says (not Debouncing any more), and
the times are the tasks' submission times: a new leader computes the same, from no memory of its
own. Pure: the clock is passed in, and no I/O."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from cronoq.api import KeyLimit, TaskPoolSpec

K = TypeVar("K")


POLICY_STRENGTH = {"Queue": 0, "Debounce": 1, "SupersedeQueued": 2, "CancelRunning": 3}


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


def key_of_wait(reason: str | None, message_text: str | None) -> str | None:
    """The concurrency key a queued task's status says it waits for (reason WaitingForKey or
    Debouncing, from its message), or None: what the dashboard counts per key."""
    if reason == "WaitingForKey":
        return waits_for(message_text)
    prefix = "debouncing key "
    if reason == "Debouncing" and message_text and message_text.startswith(prefix):
        return message_text[len(prefix):].split(":", 1)[0]
    return None


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
    """Whether a newer task ends this one: for a key of it whose policy is SupersedeQueued or
    Debounce (and this task runs no attempt) or CancelRunning, the newest unfinished task naming the
    key (`peers`: key → the arrivals of the unfinished tasks naming it, this one's included or not;
    for a Debounce key only those released from debouncing) if it is newer."""
    for key in keys:
        entry = limits.rule(key)
        if entry is None or entry.on_newer == "Queue" or (running and entry.on_newer != "CancelRunning"):
            continue
        newest = max(peers.get(key, ()), default=None)
        if newest is not None and newest > mine:
            return Superseded(newest[1], key)
    return None


def debounces(key: str, limits: Limits) -> bool:
    """`key`'s policy is Debounce."""
    entry = limits.rule(key)
    return entry is not None and entry.debounce is not None and entry.on_newer == "Debounce"


@dataclass(frozen=True)
class Debouncing:
    """Why a task naming a Debounce key waits: the burst of tasks waiting on the key is not over."""

    key: str
    newest: str
    """The newest task waiting on the key: the one that starts when the burst ends."""
    mine: bool
    """This task is the newest (else it ends Superseded once the newest is released)."""
    start_at: datetime
    """When the newest starts unless a newer task arrives: `quiet` after its arrival, at most
    `maxWait` after the oldest's."""
    latest: datetime
    """When it starts at the latest, whatever arrives: `maxWait` after the oldest's arrival."""

    def message(self) -> str:
        """The Task's message (reason Debouncing): `debouncing key X: starts at 12:00:30Z unless a
        newer task arrives (at the latest 12:10:00Z)`; an older one names no time, so it is written
        once however many arrive after it."""
        if not self.mine:
            return (f"debouncing key {self.key}: a newer task with the key was submitted; "
                    f"this one ends Superseded when the newest starts")
        return (f"debouncing key {self.key}: starts at {self.start_at:%H:%M:%SZ} unless a newer task arrives "
                f"(at the latest {self.latest:%H:%M:%SZ})")

    def described(self) -> str:
        """`cronoq describe`'s line."""
        if not self.mine:
            return (f"debouncing key {self.key}: newer task {self.newest} supersedes this one when it starts "
                    f"(at {self.start_at:%H:%M:%SZ} unless a newer task arrives, at the latest {self.latest:%H:%M:%SZ})")
        return self.message()


def debouncing(keys: Iterable[str], mine: Arrival, waiting: Mapping[str, Iterable[Arrival]], limits: Limits,
               now: datetime) -> Debouncing | None:
    """Whether a task that has not started waits for a Debounce key of it (the first such key, in
    the task's order), or None when none holds it. `waiting`: key → the arrivals of the unfinished
    tasks naming it that are still debouncing (this one's included or not). The newest of them
    (with this one) starts at its arrival + quiet or the oldest's + maxWait, whichever is sooner."""
    for key in keys:
        entry = limits.rule(key)
        if entry is None or entry.on_newer != "Debounce" or entry.debounce is None:
            continue
        burst = {*waiting.get(key, ()), mine}
        newest, oldest = max(burst), min(burst)
        latest = oldest[0] + entry.debounce.max_wait
        start_at = min(newest[0] + entry.debounce.quiet, latest)
        if newest == mine and now >= start_at:
            continue
        return Debouncing(key, newest[1], newest == mine, start_at, latest)
    return None


def due(wait: Debouncing, now: datetime) -> timedelta | None:
    """When a debouncing task is to be looked at again: the newest at its start time; an older one
    never (the newest's release wakes it)."""
    return max(wait.start_at - now, timedelta(0)) if wait.mine else None
