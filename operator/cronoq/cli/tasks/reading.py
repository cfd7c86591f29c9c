"""`cronoq logs`, `tree` and `inputs`: what an attempt logged, a task's dependencies, and what its
attempts receive from them.
"""
from __future__ import annotations

import argparse
import json
import sys

from cronoq.cli import EXIT_OK, UsageError, render
from cronoq.cli.runner import bare, seconds
from cronoq.client import Client, TaskNotFound
from cronoq.pod_protocol.inputs import plain


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    lg = sub.add_parser("logs", parents=[common], help="the log of a task's attempt (default: the newest)")
    lg.add_argument("name", metavar="TASK")
    lg.add_argument("--attempt", "-a", type=int, help="attempt number (default: the newest)")
    lg.add_argument("--follow", "-f", action="store_true", help="stream the log while the attempt runs")
    lg.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    lg.add_argument("--since", metavar="DURATION", help="only the lines of the last DURATION, e.g. 10m")
    lg.add_argument("--timestamps", action="store_true", help="each line with its time (RFC 3339)")

    t = sub.add_parser("tree", parents=[common], help="a task's dependencies, with their phases and outputs")
    t.add_argument("names", nargs="+", metavar="NAME")

    i = sub.add_parser("inputs", parents=[common],
                       help="what a task's attempts receive from its dependencies (CRONOQ_INPUTS, ctx.inputs), as JSON")
    i.add_argument("name", metavar="TASK")


def check(args: argparse.Namespace) -> None:
    if args.command == "logs":
        if args.tail is not None and args.tail < 0:
            raise UsageError("--tail counts lines: 0 or more")
        args.since_seconds = seconds(args.since, "--since")


def logs(args: argparse.Namespace, client: Client) -> int:
    name = bare(args.name)
    if args.attempt is not None and args.attempt < 1:
        raise UsageError("--attempt counts from 1")
    _, number, pod = client.attempt_pod(name, args.attempt)
    print(f"==> task {name}, attempt {number}, pod {pod['metadata']['name']} <==", file=sys.stderr, flush=True)
    for line in client.logs(name, number, follow=args.follow, tail=args.tail, since=args.since_seconds,
                            timestamps=args.timestamps):
        print(line, flush=args.follow)
    return EXIT_OK


def tree(args: argparse.Namespace, client: Client) -> int:
    """Each task's dependencies, read by GETs from the roots down (a task reached twice is read
    once): the tree's tasks, never the namespace's."""
    names = [bare(n) for n in args.names]
    tasks = {n: client.get(n) for n in names}  # a root that does not exist is bad input
    wanted = [d.task for t in tasks.values() for d in t.spec.depends_on]
    missing: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in tasks or name in missing:
            continue
        try:
            tasks[name] = found = client.get(name)
        except TaskNotFound:
            missing.add(name)
            continue
        wanted.extend(d.task for d in found.spec.depends_on)
    out = render.console()
    for name in names:
        render.show(out, render.dependency_tree(name, tasks))
    return EXIT_OK


def inputs(args: argparse.Namespace, client: Client) -> int:
    """The inputs as the task's attempts receive them: the JSON of CRONOQ_INPUTS (docs/inputs.md)."""
    found = client.inputs(bare(args.name))
    print(render.on_terminal(json.dumps(plain(found), indent=2, ensure_ascii=False), sys.stdout))
    return EXIT_OK
