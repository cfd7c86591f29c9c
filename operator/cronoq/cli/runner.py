"""The runner every verb of the CLI goes through, whatever its resource (tasks, pools, schedules,
the dashboard): check the input offline, make the client, call the verb, and turn what can go
wrong into one line on stderr and an exit code (see `cronoq.cli`): bad input 2, a refusal or a
task that did not succeed 1.

Also the flag parsing more than one resource's verbs share (`seconds`).
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from cronoq.api import DurationError
from cronoq.api.durations import parse as parse_duration
from cronoq.apiserver.config import ConfigError
from cronoq.apiserver.errors import ApiError, server_message
from cronoq.cli import EXIT_FAILED, EXIT_USAGE, UsageError, render
from cronoq.client import (
    Client, ClientError, InvalidTask, LogsUnavailable, NotRetryable, ObjectNotFound, TaskNotFound,
)
from cronoq.client.client import PAGE

Verb = Callable[[argparse.Namespace, Client], int]
"""A verb: the parsed command line and a client of the namespace it names → an exit code."""


def run(args: argparse.Namespace, verb: Verb, check: Callable[[argparse.Namespace], None] | None = None) -> int:
    """Run a verb; `check` first parses what can be parsed offline, so that bad input is reported
    before any cluster is contacted. The client's errors become one line and an exit code."""
    try:
        if check is not None:
            check(args)
        client = Client(namespace=args.namespace, kubeconfig=args.kubeconfig, context=args.context,
                        page_size=getattr(args, "chunk_size", None) or PAGE)
        return verb(args, client)
    except (UsageError, InvalidTask, TaskNotFound, ObjectNotFound, NotRetryable) as err:
        return fail(str(err), EXIT_USAGE)
    except (LogsUnavailable, ClientError) as err:
        return fail(str(err), EXIT_FAILED)
    except ConfigError as err:
        return fail(f"no cluster to talk to: {err}", EXIT_FAILED)
    except ApiError as err:
        return fail(api_error(err), EXIT_USAGE if err.status in (400, 422) else EXIT_FAILED)


def fail(message: str, code: int) -> int:
    """`error: ...` on stderr; returns `code`."""
    # The message may quote the cluster (a task's message, the API server's refusal).
    print(f"error: {render.terminal_safe(message, multiline=True)}", file=sys.stderr)
    return code


def api_error(err: ApiError) -> str:
    """What the API server said of a refused request (its status and reason when it said nothing)."""
    message = server_message(err)
    return f"{err.status} {err.reason}" if message is None else message


def seconds(text: str | None, flag: str) -> float | None:
    """A duration flag (`90`, `30s`, `5m`) in seconds (None when not given); bad input names the flag."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration(text).total_seconds()
    except DurationError as err:
        raise UsageError(f"{flag}: {err}") from None
