"""Which tasks a task verb reads or acts on: the filter flags of the listing and bulk verbs
(`add_filters`, checked offline by `phases` and `check_selection`), the tasks a bulk verb acts on
(`targets`, kept by `select`), and how a task is named on a verb's output (`RESOURCE`, `ref`).
"""
from __future__ import annotations

import argparse
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

from cronoq.api import Task, TaskPhase
from cronoq.cli import PHASES, UsageError
from cronoq.cli.runner import add_chunk_size, bare, mixed_note, seconds
from cronoq.client import Client, status_of


RESOURCE = "task.cronoq.io"


def add_filters(p: argparse.ArgumentParser, bulk: bool = False) -> None:
    """The flags that select tasks: those of the listing verbs, and of the bulk actions."""
    p.add_argument("--phase", action="append", default=[], help="only tasks in this phase (repeatable, or a,b)")
    p.add_argument("--pool", "-p", help="only tasks of this pool")
    p.add_argument("--key", "-k", help="only tasks with this key")
    p.add_argument("--selector", "-l", help="label selector, e.g. app=etl,tier!=web")
    p.add_argument("--all-namespaces", "-A", action="store_true", help="tasks of every namespace")
    add_chunk_size(p)
    if bulk:
        p.add_argument("--older-than", metavar="DURATION",
                       help="only tasks finished (unfinished: created) more than this long ago, e.g. 24h")
        p.add_argument("--all", action="store_true", help="every task of the namespace (when no filter is given)")
        p.add_argument("--dry-run", action="store_true", help="list what would be touched; change nothing")


def phases(values: list[str]) -> list[str]:
    by_lower = {p.lower(): p for p in PHASES} | {status_of(TaskPhase(p)): p for p in PHASES if TaskPhase(p).terminal}
    out = []
    for value in (v for vs in values for v in vs.split(",") if v):
        phase = by_lower.get(value.lower())
        if phase is None:
            raise UsageError(f"--phase {value}: not a phase (one of {', '.join(PHASES)})")
        out.append(phase)
    return out


def check_selection(args: argparse.Namespace) -> None:
    """A bulk verb takes names or filters (or --all), never neither: `cronoq delete` alone
    deletes nothing, as `kubectl delete tasks` does."""
    filters = [f for f, given in (("--phase", args.phase), ("--pool", args.pool), ("--key", args.key),
                                  ("-l", args.selector), ("--older-than", args.older_than)) if given]
    args.older_than_seconds = seconds(args.older_than, "--older-than")
    if args.names and (filters or args.all or args.all_namespaces):
        raise UsageError(f"{args.command}: give task names or filters ({', '.join(filters or ['--all', '-A'])}), "
                         "not both")
    if not args.names and not filters and not args.all:
        raise UsageError(f"{args.command}: give task names, filters (--phase, --pool, --key, -l, --older-than) "
                         "or --all")


def select(tasks: list[Task], older_than: float | None, now: datetime) -> list[Task]:
    """The tasks `--older-than` keeps: finished more than that long ago, or (unfinished)
    created more than that long ago. Without it, all of them."""
    if older_than is None:
        return tasks
    cutoff = now - timedelta(seconds=older_than)

    def since(task: Task) -> datetime | None:
        finished = task.status.finished_at if task.status else None
        return finished or task.metadata.creation_timestamp

    return [t for t in tasks if (at := since(t)) is not None and at <= cutoff]


def targets(args: argparse.Namespace, client: Client) -> Iterator[Task]:
    """The tasks a bulk verb acts on: the ones named (a missing one is an error), or the ones
    its filters select, a page at a time: each page is acted on before the next is read, so a
    selection of 100,000 tasks is never held whole. A selection acted on for longer than the API
    server keeps its snapshot goes on from a newer one (a note on stderr says so)."""
    if args.names:
        yield from [client.get(bare(n)) for n in args.names]
        return
    pages = client.pages(phase=args.phase or None, pool=args.pool, key=args.key, label_selector=args.selector,
                         all_namespaces=args.all_namespaces)
    for page in pages:
        yield from select(page, args.older_than_seconds, datetime.now(timezone.utc))
    if pages.mixed:
        mixed_note()


def ref(task: Task, everywhere: bool) -> str:
    """How a bulk verb names a task: kubectl's `-o name`, with the namespace across namespaces."""
    name = f"{RESOURCE}/{task.metadata.name}"
    return f"{task.metadata.namespace}/{name}" if everywhere else name
