"""The bulk verbs, `cronoq cancel`, `retry` and `delete`: the tasks named, or every one the filters
select, acted on a page at a time (`--dry-run`: listed, not touched).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

from cronoq.api import TERMINAL_PHASES, Task
from cronoq.cli import EXIT_OK, UsageError
from cronoq.cli.runner import seconds
from cronoq.cli.tasks import selection
from cronoq.cli.tasks.selection import add_filters, check_selection, phases
from cronoq.cli.tasks.wait import wait
from cronoq.client import Client, NotRetryable
from cronoq.client.client import RETRYABLE_PHASES


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    c = sub.add_parser("cancel", parents=[common], help="cancel tasks (sets spec.cancel: true): named, or selected",
                       description="Cancel the tasks named, or every unfinished task the filters select "
                                   "(--all: every one). --dry-run lists them and changes nothing.")
    c.add_argument("names", nargs="*", metavar="NAME")
    add_filters(c, bulk=True)

    r = sub.add_parser("retry", parents=[common],
                       help="re-drive Failed or DeadLettered tasks as new tasks: named, or selected",
                       description="Re-drive the tasks named, or every Failed or DeadLettered task the filters "
                                   "select (--all: every one) that was not retried yet, each as a new task "
                                   "<name>-r-xxxxx. --dry-run lists them and creates nothing.")
    r.add_argument("names", nargs="*", metavar="NAME")
    add_filters(r, bulk=True)
    r.add_argument("--max-attempts", type=int, help="attempts of the new task (default: as the original)")
    r.add_argument("--wait", action="store_true", help="wait for the new task(s)")
    r.add_argument("--wait-timeout", help="with --wait: stop waiting after this long, exit code 3")

    x = sub.add_parser("delete", parents=[common], help="delete tasks (their Jobs and pods go with them)",
                       description="Delete the tasks named, or every task the filters select (--all: every "
                                   "one). An unfinished task's running attempt is stopped with it. --dry-run "
                                   "lists them and deletes nothing.")
    x.add_argument("names", nargs="*", metavar="NAME")
    add_filters(x, bulk=True)


def check(args: argparse.Namespace) -> None:
    args.phase = phases(args.phase)
    check_selection(args)
    if args.command == "retry":
        seconds(args.wait_timeout, "--wait-timeout")


def _count(n: int, done: str, dry_run: bool) -> None:
    """The line that ends a bulk verb, on stderr (stdout stays one line per task)."""
    print(f"{n} task{'' if n == 1 else 's'} {'would be ' + done + ' (dry run)' if dry_run else done}",
          file=sys.stderr)


def _each(args: argparse.Namespace, client: Client, done: str, said: str,
          act: Callable[[Client, str], bool], skip: Callable[[Task], str | None] = lambda task: None) -> int:
    """The loop of `cancel` and `delete`: each selected task passed over (saying why when it was
    named), listed (--dry-run) or acted on; the count of those acted on at the end."""
    everywhere = args.all_namespaces
    acted = 0
    for task in selection.targets(args, client):
        ref = selection.ref(task, everywhere)
        why = skip(task)
        if why:
            if args.names:
                print(f"{ref} not {done}: {why}")
            continue
        if args.dry_run:
            print(f"{ref} would be {done} ({task.phase or 'Pending'})")
        elif act(client.in_namespace(task.metadata.namespace or client.namespace), task.metadata.name or ""):
            print(f"{ref} {said}")
        else:
            continue
        acted += 1
    if not args.names:
        _count(acted, done, args.dry_run)
    return EXIT_OK


def _uncancellable(task: Task) -> str | None:
    if task.phase in TERMINAL_PHASES:
        return f"already {task.phase}"
    return "cancel already requested" if task.spec.cancel else None


def cancel(args: argparse.Namespace, client: Client) -> int:
    return _each(args, client, "cancelled", "cancel requested", lambda where, name: bool(where.cancel(name)),
                 _uncancellable)


def retry(args: argparse.Namespace, client: Client) -> int:
    everywhere = args.all_namespaces
    created: list[Task] = []
    targets: Iterable[Task] = list(selection.targets(args, client)) if args.names else selection.targets(args, client)
    for task in targets if args.names else ():  # named: all of them retryable, or none is retried
        if task.phase not in RETRYABLE_PHASES:
            raise NotRetryable(f"task {task.metadata.name} is {task.phase or 'not started'}; only Failed or "
                               "DeadLettered tasks can be retried")
    for task in targets:
        ref, name = selection.ref(task, everywhere), task.metadata.name or ""
        where = client.in_namespace(task.metadata.namespace or client.namespace)
        if not args.names:  # selected: only what can be retried, and only once
            if task.phase not in RETRYABLE_PHASES:
                continue
            retried = where.retries_of(name)
            if retried:
                print(f"{ref} skipped: retried already as {', '.join(r.metadata.name or '' for r in retried)}")
                continue
        if args.dry_run:
            print(f"{ref} would be retried ({task.phase})")
            created.append(task)
            continue
        new = where.retry(name, max_attempts=args.max_attempts)
        print(f"{selection.ref(new, everywhere)} created (retry of {name})")
        created.append(new)
    if not args.names:
        _count(len(created), "retried", args.dry_run)
    if args.wait and created and not args.dry_run:
        if everywhere and len({t.metadata.namespace for t in created}) > 1:
            raise UsageError("retry --wait: the new tasks are in several namespaces; wait for them one namespace "
                             "at a time")
        waiter = client.in_namespace(created[0].metadata.namespace or client.namespace)
        args.names, args.timeout, args.output = [t.metadata.name for t in created], args.wait_timeout, None
        return wait(args, waiter)
    return EXIT_OK


def delete(args: argparse.Namespace, client: Client) -> int:
    return _each(args, client, "deleted", "deleted", lambda where, name: bool(where.delete(name)))
