"""The `cronoq` command line, also installed as the kubectl plugin `kubectl-cronoq`.

The user's verbs are the shell's face of `cronoq.client`, one module per resource: the task verbs
(submit, get/list, wait, cancel, retry, delete, describe, logs, tree, inputs) in
`cronoq.cli.tasks` (a module per concern), `pool` in `cronoq.cli.pools`, `schedule` in `cronoq.cli.schedules`,
`dashboard` in `cronoq.cli.dashboard`, `history` (the archive's executions, read from its database) in
`cronoq.cli.history`. Each runs through `cronoq.cli.runner`, which makes the
client and turns errors into one line and an exit code. The internal verbs
(`operator`, `heartbeat` the sidecar, `push` the push runner) run inside the cluster and are
left out of `--help`.

No flag is ever taken from a prefix of its name (`--name` is not `--namespace`): every parser
has argparse's `allow_abbrev` off, and an unknown flag that starts a known one is named as such.

Exit codes: 0 the task(s) succeeded (or the command did what it was asked), 1 a task did not
succeed or the cluster refused, 2 usage or bad input (one line on stderr), 3 timed out.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from cronoq import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
PHASES = ("Blocked", "Queued", "Running", "Retrying", "Succeeded", "Failed", "DeadLettered", "Cancelled", "Skipped")


class UsageError(Exception):
    """Bad command line or bad input: reported as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (not usage + error) and is raised, not exited on,
    so that main() owns the exit code; and flags are never abbreviated."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def parser() -> Parser:
    p = Parser(prog=_prog(), description="Tasks as pods, with the guarantees of a task queue.")
    p.add_argument("--version", action="version", version=f"cronoq {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    # The internal verbs get no help=: argparse then leaves them out of the COMMAND listing.
    op = sub.add_parser("operator", description="Run the operator against the current kubeconfig (or in-cluster).")
    from cronoq.controller.settings import add_flags
    add_flags(op)  # every flag, its type, default and help from the operator's settings

    sub.add_parser("heartbeat", description="Renew this attempt's heartbeat Lease until SIGTERM (the sidecar).")
    sub.add_parser("push", description="Make this push task attempt's HTTP request and report the answer "
                                        "(the push runner).")

    from cronoq.cli import dashboard, history, pools, schedules, tasks
    common = _common()
    tasks.add_verbs(sub, common)
    pools.add_verb(sub, common)
    schedules.add_verb(sub, common)
    dashboard.add_verb(sub, common)
    history.add_verb(sub)
    comp = sub.add_parser("completion", help="print the shell completion script (bash, zsh or fish)",
                          description="Print the completion script of a shell, completing verbs, flags and the "
                                      "names of tasks, pools and schedules: source <(cronoq completion bash)")
    comp.add_argument("shell", choices=["bash", "zsh", "fish"])
    return p


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--namespace", "-n", default=None, help="namespace of the tasks (default: the context's)")
    common.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    common.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    return common


def group_flags(group: argparse.ArgumentParser) -> None:
    """`cronoq pool -n NS list` as well as `cronoq pool list -n NS`: the common flags on a verb
    group too. Their own dests (`group_*`), since the inner verb's defaults would overwrite
    values of the same dest; `merge_group_flags` folds them in."""
    group.add_argument("--namespace", "-n", dest="group_namespace", default=None, help=argparse.SUPPRESS)
    group.add_argument("--kubeconfig", dest="group_kubeconfig", default=None, help=argparse.SUPPRESS)
    group.add_argument("--context", dest="group_context", default=None, help=argparse.SUPPRESS)


def merge_group_flags(args: argparse.Namespace) -> None:
    for flag in ("namespace", "kubeconfig", "context"):
        setattr(args, flag, getattr(args, flag, None) or getattr(args, f"group_{flag}", None))


def _unrecognized(p: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> UsageError:
    """`unrecognized arguments`, naming the flags an unknown one is the start of: argparse would
    have taken `--name` for `--namespace`; cronoq never does, and says so."""
    verb, words = p, []
    for dest in ("command", "pool_command", "schedule_command"):  # down to the innermost verb given
        chosen = getattr(args, dest, None)
        subs = [a for a in verb._actions if isinstance(a, argparse._SubParsersAction)]
        if chosen and subs:
            verb = subs[0].choices[chosen]
            words.append(chosen)
    message = f"{' '.join([p.prog, *words])}: unrecognized arguments: {' '.join(extra)}"
    for word in extra:
        flag = word.split("=", 1)[0]
        if flag.startswith("--"):
            longer = sorted(o for o in verb._option_string_actions if o.startswith(flag) and o != flag)
            if longer:
                message += f" ({flag} is not short for {' or '.join(longer)}: flags are never abbreviated)"
    return UsageError(message)


def _prog() -> str:
    return "kubectl cronoq" if os.path.basename(sys.argv[0]).startswith("kubectl-") else "cronoq"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (cronoq.cli.complete)
        from cronoq.cli.complete import autocomplete
        autocomplete(parser())
        return EXIT_OK
    try:
        # `submit ... -- CMD ARGS` passes the command through untouched, like `kubectl run`.
        trailing: list[str] = []
        if argv and argv[0] == "submit" and "--" in argv:
            at = argv.index("--")
            argv, trailing = argv[:at], argv[at + 1:]
        p = parser()
        args, extra = p.parse_known_args(argv)
        if extra:
            raise _unrecognized(p, args, extra)
        args.trailing = trailing
        if args.command == "operator":
            from cronoq.cli.serve import run_operator
            return run_operator(args)
        if args.command == "heartbeat":
            from cronoq.heartbeat import main as heartbeat_main
            return heartbeat_main([])
        if args.command == "push":
            from cronoq.push import main as push_main
            return push_main([])
        if args.command in ("schedule", "trigger"):
            from cronoq.cli.schedules import run as run_schedule
            return run_schedule(args)
        if args.command == "completion":
            from cronoq.cli.complete import script
            print(script(args.shell))
            return EXIT_OK
        if args.command == "dashboard":
            from cronoq.cli.dashboard import run as run_dashboard
            return run_dashboard(args)
        if args.command == "history":
            from cronoq.cli.history import run as run_history
            return run_history(args)
        if args.command == "pool":
            from cronoq.cli.pools import run as run_pool
            return run_pool(args)
        if args.command is None:
            parser().print_help()
            return EXIT_OK
        from cronoq.cli import tasks
        return tasks.run(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader stopped (`cronoq describe x | head`): not an error; keep Python's exit quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
