"""Shell completion, by argcomplete: verbs and flags from the parser itself, and the names of
tasks, pools and schedules read from the cluster (in the namespace and context the command
line names so far).

`cronoq completion bash|zsh|fish` prints the script to source; `kubectl_complete-cronoq` is
the executable kubectl (1.26+) runs to complete `kubectl cronoq ...`: it answers in kubectl's
own format, one candidate a line and then `:4` (no file completion).
"""
from __future__ import annotations

import argparse
import io
import os
import shlex
import sys
from typing import Any, Callable

EXECUTABLES = ["cronoq", "kubectl-cronoq"]
TASK_VERBS = ("get", "wait", "cancel", "retry", "delete", "describe", "logs", "tree", "inputs")
NO_FILE_COMPLETION = 4
"""kubectl's (cobra's) ShellCompDirectiveNoFileComp."""


def _names(kind: str) -> Callable[..., list[str]]:
    """A completer of the names of one kind, in the namespace given so far (never an error: a
    cluster out of reach completes nothing)."""
    def complete(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
        try:
            from cronoq.client import Client

            client = Client(namespace=getattr(parsed_args, "namespace", None),
                            kubeconfig=getattr(parsed_args, "kubeconfig", None),
                            context=getattr(parsed_args, "context", None))
            if kind == "task":
                return _task_names(client, prefix)
            elif kind == "pool":
                names = [p.metadata.name or "" for p in client.pools()]
            else:
                names = [s.metadata.name or "" for s in client.schedules()]
        except Exception:  # noqa: BLE001 - completion must never print a traceback into the shell
            return []
        return [n for n in names if n.startswith(prefix)]
    return complete


def _task_names(client: Any, prefix: str) -> list[str]:
    """The namespace's task names that start with `prefix`, read page by page in the API server's
    order (by name): the reading stops at the first name past them, so completing among 100,000
    tasks reads the pages up to the prefix, not all of them."""
    names: list[str] = []
    for page in client.pages():
        for task in page:
            name = task.metadata.name or ""
            if name.startswith(prefix):
                names.append(name)
            elif name > prefix:
                return names
    return names


def attach(parser: argparse.ArgumentParser) -> None:
    """Give the positional names and `--pool` their completers."""
    tasks, pools, schedules = _names("task"), _names("pool"), _names("schedule")
    verbs = _subparsers(parser)
    for verb, command in verbs.items():
        inner = _subparsers(command)
        for sub_verb, sub_command in inner.items():
            for action in sub_command._actions:
                if not action.option_strings and action.dest in ("names", "name", "schedule"):
                    action.completer = pools if verb == "pool" else schedules  # type: ignore[attr-defined]
        for action in command._actions:
            if "--pool" in action.option_strings:
                action.completer = pools  # type: ignore[attr-defined]
            elif not action.option_strings and action.dest in ("names", "name") and verb in TASK_VERBS:
                action.completer = tasks  # type: ignore[attr-defined]
            elif verb == "trigger" and action.dest == "schedule":
                action.completer = schedules  # type: ignore[attr-defined]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def autocomplete(parser: argparse.ArgumentParser, output: io.StringIO | None = None) -> None:
    """Answer the shell's completion request (argcomplete's environment) and return. With
    `output` (kubectl's way), argcomplete's debug lines go to stderr, not to its fd 9, which
    belongs to the shell's script only."""
    import argcomplete
    from argcomplete import io as argcomplete_io

    class Finder(argcomplete.CompletionFinder):
        def _init_debug_stream(self) -> None:
            if output is None:
                super()._init_debug_stream()
            else:
                argcomplete_io.debug_stream = sys.stderr

    attach(parser)
    Finder()(parser, always_complete_options=False, exit_method=lambda code: None, output_stream=output)


def script(shell: str) -> str:
    """The completion script of `shell` for `cronoq` and `kubectl-cronoq`."""
    import argcomplete

    return argcomplete.shellcode(EXECUTABLES, shell=shell)


def kubectl_main(argv: list[str] | None = None) -> int:
    """`kubectl_complete-cronoq [__complete] ARGS... WORD`: the candidates for WORD after
    `kubectl cronoq ARGS...`, a line each, then `:4`."""
    from cronoq.cli import parser

    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] == "__complete":
        words = words[1:]
    *before, current = words or [""]
    line = " ".join(["cronoq", *(shlex.quote(w) for w in before), current])
    saved = dict(os.environ)
    os.environ.update({"_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
                       "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_SUPPRESS_SPACE": "1"})
    os.environ.pop("_ARGCOMPLETE_SHELL", None)
    output = io.StringIO()
    try:
        autocomplete(parser(), output)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    candidates = [c for c in output.getvalue().split("\n") if c]
    print("\n".join([*candidates, f":{NO_FILE_COMPLETION}"]))
    return 0
