"""`cronoq wait`: until the tasks end, then their outputs (or errors); a progress bar on a terminal."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cronoq.api import Task, TaskPhase
from cronoq.cli import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, render
from cronoq.cli.runner import bare, seconds
from cronoq.client import Client, OutputUnavailable, TaskFailed, WaitTimeout, status_of


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    w = sub.add_parser("wait", parents=[common], help="wait until the tasks end; print their output")
    w.add_argument("names", nargs="+", metavar="NAME")
    w.add_argument("--timeout", help="stop waiting after this long (e.g. 30s, 5m), exit code 3; the tasks go on")
    w.add_argument("-o", "--output", choices=["json"], help="print every result as JSON")


def check(args: argparse.Namespace) -> None:
    seconds(args.timeout, "--timeout")


def wait(args: argparse.Namespace, client: Client) -> int:
    names = list(dict.fromkeys(bare(n) for n in args.names))
    timeout = seconds(args.timeout, "--timeout")
    for name in names:
        client.get(name)  # a typo is bad input (exit 2), not a wait that never ends
    err = render.console(stderr=True)
    try:
        if err.is_terminal:
            finished = _wait_with_progress(client, names, timeout, err)
        else:
            finished = client.wait_all(names, timeout=timeout)
    except WaitTimeout as e:
        # What ended in time is still reported; the exit code says that not everything did.
        _report([n for n in names if n in e.finished], e.finished, args.output == "json", many=len(names) > 1)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_TIMEOUT
    return _report(names, finished, args.output == "json", many=len(names) > 1)


def _wait_with_progress(client: Client, names: list[str], timeout: float | None, err) -> dict[str, Task]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    phases: dict[str, str] = {}
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=False) as progress:
        bar = progress.add_task("waiting", total=len(names))

        def on_change(task: Task) -> None:
            phases[task.metadata.name] = str(task.phase or "Pending")
            done = sum(1 for p in phases.values() if TaskPhase(p).terminal) if phases else 0
            counts: dict[str, int] = {}
            for p in phases.values():
                counts[p] = counts.get(p, 0) + 1
            desc = ", ".join(f"{n} {p}" for p, n in sorted(counts.items()))
            progress.update(bar, completed=done, description=desc)

        return client.wait_all(names, timeout=timeout, on_change=on_change)


def _report(names: list[str], finished: dict[str, Task], as_json: bool, many: bool) -> int:
    """Print each finished task's output (alone: just the output, for pipes) or error."""
    code = EXIT_OK
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        task = finished[name]
        entry: dict[str, Any] = {"phase": str(task.phase), "status": status_of(task.phase)}
        try:
            result = Client.result(task)
            entry["output"] = result.output
            if not as_json:
                raw = render.on_terminal(result.raw_output or "", sys.stdout)
                print(f"{name}: succeeded {raw}".rstrip() if many else raw)
        except OutputUnavailable:
            entry["output"] = None
            if not as_json:
                print(f"{name}: succeeded (no output)", file=sys.stdout if many else sys.stderr)
        except TaskFailed as failed:
            code = EXIT_FAILED
            entry["message"] = failed.message
            if not as_json:
                print(f"error: {render.terminal_safe(str(failed), multiline=True)}", file=sys.stderr)
        results[name] = entry
    if as_json:
        print(json.dumps(results, indent=2))
    return code
