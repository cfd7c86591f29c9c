"""The runner every verb of the CLI goes through, whatever its resource (tasks, pools, schedules,
the dashboard): check the input offline, make the client, call the verb, and turn what can go
wrong into one line on stderr and an exit code (see `cronoq.cli`): bad input 2, a refusal or a
task that did not succeed 1.

Also what more than one verb shares: the flag parsing (`seconds`, `output_format`, `add_chunk_size`),
the output formats written as they are read (`print_list`, `print_jsonpath`, `mixed_note`), and
names as `-o name` prints them (`bare`).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any, Callable

import yaml

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


# ---------------------------------------------------------------------- output formats and paging


def output_format(value: str) -> str:
    """-o of the listing verbs: a format, or a JSONPath template checked before any request."""
    if value in ("wide", "json", "yaml", "name"):
        return value
    if value.startswith("jsonpath="):
        template = value[len("jsonpath="):]
        if len(template) > 1 and template[0] == template[-1] and template[0] in "'\"":
            template = template[1:-1]  # as kubectl, quotes around the template are not part of it
        try:
            render.jsonpath(template, {})
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"jsonpath: {err}") from None
        return "jsonpath=" + template
    if value.startswith("custom-columns="):
        try:
            render.custom_columns(value[len("custom-columns="):])
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"custom-columns: {err}") from None
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: one of wide, json, yaml, name, jsonpath=TEMPLATE, "
                                     "custom-columns=HEADER:JSONPATH,...")


def _chunk_size(value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number of tasks, at least 1")
    return size


def add_chunk_size(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunk-size", type=_chunk_size, default=PAGE, metavar="N",
                   help=f"tasks per list request, as kubectl's (default {PAGE}): a listing is read, shown and "
                        "acted on page by page, never held whole")


def print_list(fmt: str, objects: Iterator[dict[str, Any]]) -> int:
    """`{"apiVersion": "v1", "kind": "List", "items": [...]}` in JSON or YAML, the same text
    `render.dump` makes of the whole List, written an item at a time; returns the items written."""
    n = 0
    if fmt == "json":
        for obj in objects:
            item = "\n".join("    " + line for line in json.dumps(obj, indent=2).splitlines())
            sys.stdout.write(('{\n  "apiVersion": "v1",\n  "kind": "List",\n  "items": [\n' if not n else ",\n") + item)
            n += 1
        sys.stdout.write("\n  ]\n}\n" if n else '{\n  "apiVersion": "v1",\n  "kind": "List",\n  "items": []\n}\n')
    else:
        for obj in objects:
            sys.stdout.write(("apiVersion: v1\nkind: List\nitems:\n" if not n else "")
                             + yaml.safe_dump([obj], sort_keys=False))
            n += 1
        if not n:
            sys.stdout.write("apiVersion: v1\nkind: List\nitems: []\n")
    sys.stdout.flush()
    return n


def print_jsonpath(output: str, objects: list[dict[str, Any]], single: bool) -> None:
    """As kubectl: the template applied to the object (one named) or to the List; no newline
    added (the template says where lines end)."""
    doc = objects[0] if single and len(objects) == 1 else {"apiVersion": "v1", "kind": "List", "items": objects}
    sys.stdout.write(render.jsonpath(output[len("jsonpath="):], doc))
    sys.stdout.flush()


def mixed_note() -> None:
    print("note: the listing took longer than the API server keeps one snapshot (about 5 minutes): its later "
          "pages were read from a newer one, so a task changed meanwhile may be missing or shown as it was",
          file=sys.stderr)


def bare(name: str) -> str:
    """Accept `task.cronoq.io/x` and `tasks/x` (as -o name prints them) where a name is expected."""
    return name.split("/", 1)[1] if "/" in name else name
