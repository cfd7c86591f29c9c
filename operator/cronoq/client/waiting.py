"""`Client`'s waiting: for one task or many to end, by a watch on the Task(s) resumed from a fresh
read when it ends (never a sleep-and-poll loop)."""
from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from typing import Any, Callable

from cronoq.api import TERMINAL_PHASES, Task, TaskPhase
from cronoq.apiserver.errors import Gone
from cronoq.client.common import TaskRef, name_of, selector_of
from cronoq.client.errors import (
    OutputUnavailable,
    TaskFailed,
    TaskNotFound,
    WaitTimeout,
)
from cronoq.client.results import Result, SavedCheckpoint

WATCH_CHUNK = 60
"""Seconds one watch request lasts at most before it is renewed (a quiet watch can go stale)."""
SYNCED = "SYNCED"
"""The event `_follow` gives after a listing, with the names of the listed tasks (to tell which are missing)."""


class Waiting:
    """A part of `Client` (it holds `api`, `namespace`, `path` and the reads used here)."""

    def checkpoint(self, ref: TaskRef) -> SavedCheckpoint | None:
        """The newest checkpoint an attempt of the task saved, with the number of that attempt
        (None while none did): what its next attempt resumes from."""
        task = self.get(name_of(ref))
        saved = task.status.checkpoint if task.status else None
        return SavedCheckpoint.of(saved) if saved is not None else None

    def wait(self, ref: TaskRef, timeout: float | None = None) -> Result:
        """Wait until the task ends. Succeeded → a Result (output parsed when it is JSON);
        succeeded without a stored output → OutputUnavailable; any other end → TaskFailed;
        out of time → WaitTimeout."""
        name = name_of(ref)
        return self.result(self.wait_all([name], timeout=timeout)[name])

    @staticmethod
    def result(task: Task) -> Result:
        """The Result of a finished task, or the error `wait` raises for it."""
        if task.phase is TaskPhase.SUCCEEDED:
            result = Result(task)
            if not (task.status and task.status.output_available):
                raise OutputUnavailable(result)
            return result
        if task.phase in TERMINAL_PHASES:
            raise TaskFailed(task)
        raise ValueError(f"task {task.metadata.name} has not finished (phase {task.phase})")

    def wait_all(self, refs: Iterable[TaskRef], timeout: float | None = None,
                 on_change: Callable[[Task], None] | None = None) -> dict[str, Task]:
        """Wait, over one watch of the namespace, until every task has ended; return the
        finished Tasks by name, in the order given (use `result` on each). `on_change` sees every
        observed state of the tasks (for progress displays). Out of time → WaitTimeout."""
        names = list(dict.fromkeys(name_of(r) for r in refs))
        deadline = None if timeout is None else time.monotonic() + timeout
        done: dict[str, Task] = {}
        wanted = set(names)
        field_selector = f"metadata.name={names[0]}" if len(names) == 1 else None

        def see(obj: dict) -> None:
            task = Task.model_validate(obj)
            name = task.metadata.name
            if name not in wanted or name in done:
                return
            if on_change:
                on_change(task)
            if task.phase in TERMINAL_PHASES:
                done[name] = task

        for kind, obj in self._follow(deadline, field_selector=field_selector):
            if kind == SYNCED:
                missing = wanted - obj - done.keys()
                if missing:
                    raise TaskNotFound(self.namespace, sorted(missing)[0])
            elif kind == "DELETED" and obj["metadata"]["name"] in wanted - done.keys():
                raise TaskNotFound(self.namespace, obj["metadata"]["name"])
            else:
                see(obj)
            if len(done) == len(wanted):
                return {n: done[n] for n in names}
        raise WaitTimeout([n for n in names if n not in done], timeout or 0,
                          {n: done[n] for n in names if n in done})

    def watch(self, phase: str | None = None, pool: str | None = None, key: str | None = None,
              label_selector: str | None = None, *, all_namespaces: bool = False,
              timeout: float | None = None) -> Iterator[tuple[str, Task]]:
        """The namespace's (or every namespace's) tasks as they change: first ("ADDED", task) for
        each existing one, then every change, without end (or until `timeout` seconds passed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for kind, obj in self._follow(deadline, phase, pool, key, label_selector, all_namespaces=all_namespaces):
            if kind != SYNCED:
                yield kind, Task.model_validate(obj)

    def _follow(self, deadline: float | None, phase: str | None = None, pool: str | None = None, key: str | None = None,
                label_selector: str | None = None, field_selector: str | None = None, *,
                all_namespaces: bool = False) -> Iterator[tuple[str, Any]]:
        """The client's one watch loop: ("ADDED", object) for each listed task, page by page, then
        (SYNCED, the set of the listed tasks' names), then every change, resuming from the last
        version seen when a watch ends and listing again when that version is gone (410), until
        `deadline` (None: no end)."""
        rv: str | None = None
        selector = selector_of(phase, pool, key, field_selector)
        while deadline is None or time.monotonic() < deadline:
            if rv is None:  # page by page, from one snapshot: the watch goes on from its version
                listing = self._listing(selector, label_selector, all_namespaces=all_namespaces, consistent=True)
                names: set[str] = set()
                for items in listing:
                    if listing.restarts:  # started again from a new snapshot: only its names count
                        names.clear()
                        listing.restarts = 0
                    for obj in items:
                        names.add(obj["metadata"]["name"])
                        yield "ADDED", obj
                rv = listing.version
                yield SYNCED, names
            try:
                for kind, obj in self._watch(rv or "", deadline, selector, label_selector, all_namespaces=all_namespaces):
                    rv = obj["metadata"]["resourceVersion"]
                    yield kind, obj
            except Gone:  # our resourceVersion is too old; list again
                rv = None

    def _watch(self, rv: str, deadline: float | None, field_selector: str | None, label_selector: str | None = None,
               *, all_namespaces: bool = False) -> Iterator[tuple[str, dict]]:
        """Events after `rv` until `deadline` (or one WATCH_CHUNK, then the caller lists again)."""
        remaining = WATCH_CHUNK if deadline is None else min(WATCH_CHUNK, deadline - time.monotonic())
        if remaining <= 0:
            return
        events = self.api.watch(self.path("tasks", all_namespaces=all_namespaces), {
            "resourceVersion": rv, "timeoutSeconds": max(1, math.ceil(remaining)), "allowWatchBookmarks": False,
            "fieldSelector": field_selector or None, "labelSelector": label_selector or None})
        try:
            for event in events:  # an ERROR event raises its error (Gone: the version is too old)
                yield event["type"], event["object"]
                if deadline is not None and time.monotonic() >= deadline:
                    return
        finally:
            events.close()
