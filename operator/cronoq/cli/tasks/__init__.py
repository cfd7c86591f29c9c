"""The task verbs of the CLI, one module per concern: `submit`, `listing` (get, list), `wait`,
`bulk` (cancel, retry, delete), `describe`, `reading` (logs, tree, inputs), and `selection`, the
filters and targets they share. Thin wrappers that parse flags, call `cronoq.client`, and render.
They run through `cronoq.cli.runner`, as every resource's verbs do: errors become one line on
stderr and an exit code (see `cronoq.cli`): bad input 2, a task that did not succeed 1, out of
time 3.
"""
from __future__ import annotations

import argparse
from typing import Callable

from cronoq.cli import runner
from cronoq.cli.tasks import bulk, describe, listing, reading, submit, wait

Check = Callable[[argparse.Namespace], None]


def add_verbs(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """The verbs' parsers, in the order `--help` lists them."""
    for module in (submit, listing, wait, bulk, describe, reading):
        module.add(sub, common)


def run(args: argparse.Namespace) -> int:
    """Run the task verb the command names, through the runner."""
    return runner.run(args, VERBS[args.command], check_input)


def check_input(args: argparse.Namespace) -> None:
    """Parse what can be parsed offline, so that bad input never waits on the cluster (the runner
    calls it before it makes the client)."""
    if (check := CHECKS.get(args.command)) is not None:
        check(args)


VERBS: dict[str, runner.Verb] = {
    "submit": submit.submit, "get": listing.get, "list": listing.get, "wait": wait.wait, "cancel": bulk.cancel,
    "retry": bulk.retry, "delete": bulk.delete, "describe": describe.describe, "logs": reading.logs,
    "tree": reading.tree, "inputs": reading.inputs,
}

CHECKS: dict[str, Check] = {
    "submit": submit.check, "get": listing.check, "list": listing.check, "wait": wait.check, "cancel": bulk.check,
    "retry": bulk.check, "delete": bulk.check, "logs": reading.check,
}
