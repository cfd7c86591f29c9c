"""The task verbs of the CLI (submit, get/list, wait, cancel, retry, delete, describe, logs, tree,
inputs): thin wrappers that parse flags, call `cronoq.client`, and render. They run through
`cronoq.cli.runner`, as every resource's verbs do: errors become one line on stderr and an exit
code (see `cronoq.cli`): bad input 2, a task that did not succeed 1, out of time 3.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from cronoq.api import TERMINAL_PHASES, DurationError, Task, TaskPhase
from cronoq.api.durations import parse as parse_duration
from cronoq.cli import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, PHASES, UsageError
from cronoq.cli import render, retention, runner
from cronoq.cli.runner import seconds
from cronoq.client import (
    Client, NotRetryable, OutputUnavailable, TaskFailed, TaskNotFound, WaitTimeout, status_of,
)
from cronoq.client.client import PAGE, RETRYABLE_PHASES, Pages, check_manifest
from cronoq.engine import admission, delay, keylimits
from cronoq.engine.admission import MARKS_FROM
from cronoq.engine.attempts import waiting
from cronoq.pod_protocol.inputs import plain

RESOURCE = "task.cronoq.io"


def add_verbs(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    for add in (_add_submit, _add_listing, _add_wait, _add_bulk, _add_reading):
        add(sub, common)


def _add_submit(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("submit", parents=[common], help="submit a task (flags, or -f manifest)",
                       description="Submit a task. A command and its arguments follow `--`: "
                                   "cronoq submit hello --image busybox -- echo hi")
    s.add_argument("name", nargs="?", help="task name (default: generated from --generate-name)")
    s.add_argument("-f", "--filename", help="a Task manifest (YAML or JSON; - for stdin)")
    s.add_argument("--generate-name", help="name prefix when no name is given (default: task-)")
    s.add_argument("--image", "-i", help="container image")
    s.add_argument("--arg", action="append", dest="args", help="container argument (repeatable)")
    s.add_argument("--env", "-e", action="append", default=[], metavar="NAME=VALUE", help="environment (repeatable)")
    s.add_argument("--pool", "-p", help="TaskPool (default: default)")
    s.add_argument("--priority", type=int, help="higher runs first (default 0)")
    s.add_argument("--key", "-k", help="idempotency key: a task holding it is returned instead of a new one")
    s.add_argument("--group", help="fairness group (a tenant, a customer): groups of one priority take turns "
                                   "for the pool's slots, and the pool's groupConcurrency caps each")
    s.add_argument("--payload", help="JSON handed to the container as CRONOQ_PAYLOAD")
    s.add_argument("--payload-file", help="file holding the JSON payload")
    s.add_argument("--attempt-timeout", help="each attempt's time limit (spec.timeout), e.g. 10m: "
                                             "an attempt still running then is killed")
    # `--timeout` would say neither which limit it is: refused with a line naming both.
    s.add_argument("--timeout", dest="ambiguous_timeout", help=argparse.SUPPRESS)
    s.add_argument("--max-attempts", type=int, help="attempts, counting the first")
    s.add_argument("--start-deadline", help="end the task without running it if it has not started this long "
                                            "after submission (spec.startDeadline), e.g. 5m")
    s.add_argument("--deadline", help="the whole task's time limit from submission (spec.deadline), e.g. 1h: "
                                      "a running attempt is stopped then and the task fails")
    for flag, field, what in RETENTION_FLAGS:
        s.add_argument(flag, help=f"{what} (spec.{field}), e.g. 168h")
    s.add_argument("--max-retry-duration", help="no retry starts this long after the first attempt "
                                                "(spec.retry.maxRetryDuration), e.g. 30m")
    s.add_argument("--retry-rule", action="append", default=[], metavar="ACTION:FIELD=V,V[:FIELD=V]",
                   help="a retry rule (repeatable, in order): Retry, Fail or Ignore the attempts whose reasons, "
                        "exitCodes and responseCodes are among these, e.g. Ignore:reasons=Evicted,NodeLost or "
                        "Fail:exitCodes=3")
    s.add_argument("--delay", help="start no sooner than this long after creation (spec.startDelay), e.g. 10m")
    s.add_argument("--not-before", metavar="TIME",
                   help="start no sooner than this RFC 3339 time (spec.notBefore), e.g. 2026-12-06T14:00:00Z")
    s.add_argument("--depends-on", action="append", default=[], metavar="TASK[:Success|Failure|Complete]",
                   help="wait for this task first (repeatable)")
    s.add_argument("--label", "-l", action="append", default=[], metavar="KEY=VALUE", help="task label (repeatable)")
    s.add_argument("--pod-annotation", action="append", default=[], metavar="KEY=VALUE",
                   help="annotation of the attempt pods (repeatable)")
    s.add_argument("--wait", action="store_true", help="wait for the task and print its output")
    s.add_argument("--wait-timeout", help="with --wait: stop waiting after this long (e.g. 5m), exit code 3; "
                                          "the task goes on")
    s.add_argument("-o", "--output", choices=["name", "json", "yaml"], help="print the task in this format")


def _add_listing(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    for verb, helptext in (("get", "show tasks (all, or the ones named)"), ("list", "list the tasks")):
        g = sub.add_parser(verb, parents=[common], help=helptext)
        if verb == "get":
            g.add_argument("names", nargs="*", metavar="NAME")
        g.add_argument("-o", "--output", type=_output_format, metavar="FORMAT",
                       help="wide, json, yaml, name, jsonpath=TEMPLATE (kubectl's: '{.items[*].metadata.name}', "
                            "'{range .items[*]}{.metadata.name}{\"\\n\"}{end}'), or "
                            "custom-columns=NAME:.metadata.name,PHASE:.status.phase")
        add_filters(g)
        g.add_argument("--no-headers", action="store_true", help="tables without their header line")
        g.add_argument("--watch", "-w", action="store_true", help="after listing, print each change")


def _add_wait(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    w = sub.add_parser("wait", parents=[common], help="wait until the tasks end; print their output")
    w.add_argument("names", nargs="+", metavar="NAME")
    w.add_argument("--timeout", help="stop waiting after this long (e.g. 30s, 5m), exit code 3; the tasks go on")
    w.add_argument("-o", "--output", choices=["json"], help="print every result as JSON")


def _add_bulk(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
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


def _add_reading(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    d = sub.add_parser("describe", parents=[common], help="a task, its attempt history, dependencies and events")
    d.add_argument("name", metavar="NAME")
    d.add_argument("--archive", metavar="URL", default=None,
                   help="a task gone from the cluster is described from this archive (the operator's --archive; "
                        "default: $CRONOQ_ARCHIVE)")
    d.add_argument("--place", action="store_true",
                   help=f"a queued task's exact place in its pool's queue past {PLACE_LIMIT:,} queued (reads every "
                        "queued task of the pool, page by page; without it, the place between the pool's queue marks)")
    add_chunk_size(d)

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


def _output_format(value: str) -> str:
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


def run(args: argparse.Namespace) -> int:
    """Run the task verb the command names, through the runner."""
    return runner.run(args, VERBS[args.command], check_input)


def check_input(args: argparse.Namespace) -> None:
    """Parse what can be parsed offline, so that bad input never waits on the cluster (the runner
    calls it before it makes the client)."""
    if args.command == "submit":
        if args.ambiguous_timeout is not None:
            raise UsageError("submit: --timeout is ambiguous: --attempt-timeout limits each attempt (the task's "
                             "spec.timeout), --wait-timeout limits how long --wait waits")
        flags = any(getattr(args, f) for f in (
            "image", "args", "env", "pool", "priority", "key", "payload", "payload_file", "attempt_timeout",
            "max_attempts", "retry_rule", "depends_on", "label", "pod_annotation", "name", "generate_name", "delay",
            "not_before", "start_deadline", "deadline", "max_retry_duration",
            *(_dest(flag) for flag, _, _ in RETENTION_FLAGS))) or args.trailing
        if args.filename and flags:
            raise UsageError("submit: give a manifest (-f) or flags, not both")
        manifests = _read_manifests(args.filename) if args.filename else [_manifest_from_flags(args)]
        args.manifests = [check_manifest(m) for m in manifests]
        seconds(args.wait_timeout, "--wait-timeout")
    if args.command in ("get", "list") and args.watch and (args.output or "").startswith("custom-columns="):
        raise UsageError(f"{args.command} -w: custom-columns are for a listing (columns sized to their rows); "
                         "watch with -o jsonpath=... instead")
    if args.command == "get" and args.names and args.all_namespaces:
        raise UsageError("get: a task is named in one namespace: give names or -A, not both")
    if "phase" in args:
        args.phase = _phases(args.phase)
    if "dry_run" in args:
        _check_selection(args)
    if args.command == "wait":
        seconds(args.timeout, "--timeout")
    if args.command == "logs":
        if args.tail is not None and args.tail < 0:
            raise UsageError("--tail counts lines: 0 or more")
        args.since_seconds = seconds(args.since, "--since")
    if args.command == "retry":
        seconds(args.wait_timeout, "--wait-timeout")


def _check_selection(args: argparse.Namespace) -> None:
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


def _bare(name: str) -> str:
    """Accept `task.cronoq.io/x` and `tasks/x` (as -o name prints them) where a name is expected."""
    return name.split("/", 1)[1] if "/" in name else name


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        out[k] = v
    return out


RULE_FIELDS = ("reasons", "exitCodes", "responseCodes")


def _retry_rule(text: str) -> dict[str, Any]:
    """`Ignore:reasons=Evicted,NodeLost` → {action: Ignore, reasons: [Evicted, NodeLost]}; the
    model checks the rest (actions, bounds) with the manifest."""
    action, *matches = text.split(":")
    if not matches:
        raise UsageError(f"--retry-rule {text!r}: expected ACTION:FIELD=V,V (e.g. Ignore:reasons=Evicted)")
    rule: dict[str, Any] = {"action": action}
    for match in matches:
        field, sep, values = match.partition("=")
        if field not in RULE_FIELDS or not sep or not values:
            raise UsageError(f"--retry-rule {text!r}: {match!r} is not FIELD=V,V with FIELD one of "
                             f"{', '.join(RULE_FIELDS)}")
        items = values.split(",")
        try:
            rule[field] = items if field == "reasons" else [int(v) for v in items]
        except ValueError:
            raise UsageError(f"--retry-rule {text!r}: {field} are numbers") from None
    return rule


def _phases(values: list[str]) -> list[str]:
    by_lower = {p.lower(): p for p in PHASES} | {status_of(TaskPhase(p)): p for p in PHASES if TaskPhase(p).terminal}
    out = []
    for value in (v for vs in values for v in vs.split(",") if v):
        phase = by_lower.get(value.lower())
        if phase is None:
            raise UsageError(f"--phase {value}: not a phase (one of {', '.join(PHASES)})")
        out.append(phase)
    return out


# ---------------------------------------------------------------------- submit


def submit(args: argparse.Namespace, client: Client) -> int:
    manifests = args.manifests
    for manifest in manifests:
        pool_name = (manifest.get("spec") or {}).get("pool", "default")
        if client.pool(pool_name) is None:
            raise UsageError(f"TaskPool {pool_name} does not exist in namespace {client.namespace} "
                             "(create it first, or choose another with --pool)")
    created_tasks = []
    out = render.console()
    for manifest in manifests:
        task, created = client._submit(manifest)
        created_tasks.append(task)
        name = task.metadata.name
        if args.output == "name":
            print(f"{RESOURCE}/{name}")
        elif args.output:
            print(render.dump([task.to_dict()], args.output, single=True))
        elif created:
            out.print(f"{RESOURCE}/{name} created", markup=False)
        else:
            out.print(f"{RESOURCE}/{name} unchanged: it holds key {task.spec.key!r} "
                      f"({task.phase or 'not started'}); no new task was created", markup=False)
    if args.wait:
        args.names, args.timeout = [t.metadata.name for t in created_tasks], args.wait_timeout
        args.output = None
        return wait(args, client)
    return EXIT_OK


def _read_manifests(path: str) -> list[dict]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        docs = [d for d in yaml.safe_load_all(text) if d]
    except OSError as err:
        raise UsageError(f"-f {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise UsageError(f"-f {path}: not YAML: {str(err).splitlines()[0]}") from None
    items = [i for d in docs for i in (d.get("items", []) if d.get("kind") == "List" else [d])]
    if not items or not all(isinstance(i, dict) for i in items):
        raise UsageError(f"-f {path}: no Task manifest in it")
    return items


RETENTION_FLAGS = (
    ("--ttl-after-finished", "ttlAfterFinished", "delete the task this long after it ends"),
    ("--ttl-after-success", "ttlAfterSuccess", "delete the task this long after it succeeds"),
    ("--ttl-after-failure", "ttlAfterFailure", "delete the task this long after it ends otherwise (Failed, "
                                               "DeadLettered, Cancelled, Skipped)"),
    ("--job-retention", "jobRetention", "keep each attempt's Job and pod this long after it ends"),
    ("--job-retention-after-success", "jobRetentionAfterSuccess", "jobRetention if the task succeeds"),
    ("--job-retention-after-failure", "jobRetentionAfterFailure", "jobRetention if the task ends otherwise"),
)
"""Submit flags for the retention fields (docs/retention.md): (flag, spec field, help)."""


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _manifest_from_flags(args: argparse.Namespace) -> dict:
    spec: dict[str, Any] = {"pool": args.pool or "default"}
    if args.image:
        spec["image"] = args.image
    if args.trailing:
        spec["command"] = args.trailing
    if args.args:
        spec["args"] = args.args
    if args.env:
        spec["env"] = [{"name": k, "value": v} for k, v in _pairs(args.env, "--env").items()]
    if args.priority is not None:
        spec["priority"] = args.priority
    if args.key:
        spec["key"] = args.key
    if args.group:
        spec["group"] = args.group
    if args.payload is not None and args.payload_file:
        raise UsageError("give --payload or --payload-file, not both")
    if args.payload is not None or args.payload_file:
        flag = "--payload" if args.payload is not None else f"--payload-file {args.payload_file}"
        try:
            text = args.payload if args.payload is not None else Path(args.payload_file).read_text()
            spec["payload"] = json.loads(text)
        except OSError as err:
            raise UsageError(f"{flag}: {err.strerror}") from None
        except ValueError as err:
            raise UsageError(f"{flag} is not JSON: {err}") from None
    if args.attempt_timeout:
        spec["timeout"] = args.attempt_timeout
    if args.max_attempts is not None:
        spec["retry"] = {"maxAttempts": args.max_attempts}
    if args.max_retry_duration:
        spec.setdefault("retry", {})["maxRetryDuration"] = args.max_retry_duration
    if args.start_deadline:
        spec["startDeadline"] = args.start_deadline
    if args.deadline:
        spec["deadline"] = args.deadline
    for flag, field, _ in RETENTION_FLAGS:
        if value := getattr(args, _dest(flag)):
            spec[field] = value
    if args.retry_rule:
        spec.setdefault("retry", {})["rules"] = [_retry_rule(text) for text in args.retry_rule]
    if args.depends_on:
        edges = (d.partition(":") for d in args.depends_on)
        spec["dependsOn"] = [{"task": t, "on": on or "Success"} for t, _, on in edges]
    if args.pod_annotation:
        spec["podMetadata"] = {"annotations": _pairs(args.pod_annotation, "--pod-annotation")}
    spec.update(_start_time(args.delay, args.not_before))
    metadata: dict[str, Any] = {"name": args.name} if args.name else {"generateName": args.generate_name or "task-"}
    if args.label:
        metadata["labels"] = _pairs(args.label, "--label")
    return {"apiVersion": "cronoq.io/v1alpha1", "kind": "Task", "metadata": metadata, "spec": spec}


def _start_time(delay: str | None, not_before: str | None) -> dict[str, str]:
    """`--delay` / `--not-before` as spec.startDelay / spec.notBefore, checked offline."""
    if delay and not_before:
        raise UsageError("submit: give --delay or --not-before, not both")
    if delay:
        try:
            parse_duration(delay)
        except DurationError as err:
            raise UsageError(f"--delay: {err}") from None
        return {"startDelay": delay}
    if not_before:
        try:
            when = datetime.fromisoformat(not_before)
        except ValueError:
            when = None
        if when is None or when.tzinfo is None:
            raise UsageError(f"--not-before {not_before}: not an RFC 3339 time with a zone "
                             "(e.g. 2026-12-06T14:00:00Z)")
        return {"notBefore": when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")}
    return {}


# ---------------------------------------------------------------------- get / list


def get(args: argparse.Namespace, client: Client) -> int:
    """The tasks named (GETs), or those the filters select, read and printed a page at a time: a
    table page by page (as kubectl's, each page's columns sized to its rows, the header once),
    names, and JSON or YAML as one List written as its items arrive. A JSONPath template or
    custom columns read the whole List (as kubectl's do)."""
    names = [_bare(n) for n in getattr(args, "names", [])]
    if args.watch:
        return _watch(args, client, names)
    listing: Pages | None = None
    if names:
        pages: Iterable[list[Task]] = [[client.get(n) for n in names]]
    else:
        pages = listing = client.pages(phase=args.phase or None, pool=args.pool, key=args.key,
                                       label_selector=args.selector, all_namespaces=args.all_namespaces)
    single = len(names) == 1
    shown = 0
    if args.output in ("json", "yaml") and not single:
        shown = _print_list(args.output, (t.to_dict() for page in pages for t in page))
    elif args.output in ("json", "yaml"):
        tasks = [t for page in pages for t in page]
        print(render.dump([t.to_dict() for t in tasks], args.output, single=True))
        shown = len(tasks)
    elif args.output and args.output.startswith("jsonpath="):
        objects = [t.to_dict() for page in pages for t in page]
        _print_jsonpath(args.output, objects, single=single)
        shown = len(objects)
    elif args.output and args.output.startswith("custom-columns="):
        columns = render.custom_columns(args.output[len("custom-columns="):])
        rows = [render.custom_row(columns, t.to_dict()) for page in pages for t in page]
        render.show(render.console(), render.table([h for h, _ in columns], rows, show_header=not args.no_headers))
        shown = len(rows)
    elif args.output == "name":
        for page in pages:
            for t in page:
                print(f"{RESOURCE}/{t.metadata.name}")
            sys.stdout.flush()
            shown += len(page)
    else:
        out = render.console()
        for page in pages:
            if page:
                render.show(out, render.task_table(page, args.output == "wide", args.all_namespaces,
                                                   show_header=not args.no_headers and not shown))
            shown += len(page)
    if listing is not None and listing.mixed:
        _mixed_note()
    if not shown and args.output in (None, "wide"):
        where = "any namespace" if args.all_namespaces else f"{client.namespace} namespace"
        print(f"No tasks found in {where}.", file=sys.stderr)
    return EXIT_OK


def _print_list(fmt: str, objects: Iterator[dict[str, Any]]) -> int:
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


def _mixed_note() -> None:
    print("note: the listing took longer than the API server keeps one snapshot (about 5 minutes): its later "
          "pages were read from a newer one, so a task changed meanwhile may be missing or shown as it was",
          file=sys.stderr)


def _print_jsonpath(output: str, objects: list[dict[str, Any]], single: bool) -> None:
    """As kubectl: the template applied to the object (one named) or to the List; no newline
    added (the template says where lines end)."""
    doc = objects[0] if single and len(objects) == 1 else {"apiVersion": "v1", "kind": "List", "items": objects}
    sys.stdout.write(render.jsonpath(output[len("jsonpath="):], doc))
    sys.stdout.flush()


def _watch(args: argparse.Namespace, client: Client, names: list[str]) -> int:
    """`get -w`: every task the filters select, then each change, in the format asked for
    (a table row, a name, or a whole JSON/YAML document each)."""
    wide, everywhere = args.output == "wide", args.all_namespaces
    out = render.console()
    if args.output in (None, "wide") and not args.no_headers:
        out.print(render.watch_line([render.Text(h) for h in render.headers(wide, everywhere)], everywhere))
    phases = args.phase
    wanted = set(names)
    for _, task in client.watch(phase=phases[0] if len(phases) == 1 else None, pool=args.pool, key=args.key,
                                label_selector=args.selector, all_namespaces=everywhere):
        if wanted and task.metadata.name not in wanted:
            continue
        if phases and str(task.phase) not in phases:
            continue
        if args.output in ("json", "yaml"):
            print(render.dump([task.to_dict()], args.output, single=True), flush=True)
        elif args.output and args.output.startswith("jsonpath="):
            _print_jsonpath(args.output, [task.to_dict()], single=True)
        elif args.output == "name":
            print(f"{RESOURCE}/{task.metadata.name}", flush=True)
        else:
            render.show(out, render.watch_line(render.row(task, wide, everywhere), everywhere))
    return EXIT_OK


# ---------------------------------------------------------------------- wait


def wait(args: argparse.Namespace, client: Client) -> int:
    names = list(dict.fromkeys(_bare(n) for n in args.names))
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


# ---------------------------------------------------------------------- cancel / retry


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


def _targets(args: argparse.Namespace, client: Client) -> Iterator[Task]:
    """The tasks a bulk verb acts on: the ones named (a missing one is an error), or the ones
    its filters select, a page at a time: each page is acted on before the next is read, so a
    selection of 100,000 tasks is never held whole. A selection acted on for longer than the API
    server keeps its snapshot goes on from a newer one (a note on stderr says so)."""
    if args.names:
        yield from [client.get(_bare(n)) for n in args.names]
        return
    pages = client.pages(phase=args.phase or None, pool=args.pool, key=args.key, label_selector=args.selector,
                         all_namespaces=args.all_namespaces)
    for page in pages:
        yield from select(page, args.older_than_seconds, datetime.now(timezone.utc))
    if pages.mixed:
        _mixed_note()


def _ref(task: Task, everywhere: bool) -> str:
    """How a bulk verb names a task: kubectl's `-o name`, with the namespace across namespaces."""
    name = f"{RESOURCE}/{task.metadata.name}"
    return f"{task.metadata.namespace}/{name}" if everywhere else name


def _count(n: int, done: str, dry_run: bool) -> None:
    """The line that ends a bulk verb, on stderr (stdout stays one line per task)."""
    print(f"{n} task{'' if n == 1 else 's'} {'would be ' + done + ' (dry run)' if dry_run else done}",
          file=sys.stderr)


def cancel(args: argparse.Namespace, client: Client) -> int:
    everywhere = args.all_namespaces
    acted = 0
    for task in _targets(args, client):
        ref = _ref(task, everywhere)
        if task.phase in TERMINAL_PHASES:
            if args.names:
                print(f"{ref} not cancelled: already {task.phase}")
            continue
        if task.spec.cancel:
            if args.names:
                print(f"{ref} not cancelled: cancel already requested")
            continue
        if args.dry_run:
            print(f"{ref} would be cancelled ({task.phase or 'Pending'})")
        elif client.in_namespace(task.metadata.namespace or client.namespace).cancel(task.metadata.name):
            print(f"{ref} cancel requested")
        else:
            continue
        acted += 1
    if not args.names:
        _count(acted, "cancelled", args.dry_run)
    return EXIT_OK


def retry(args: argparse.Namespace, client: Client) -> int:
    everywhere = args.all_namespaces
    created: list[Task] = []
    targets: Iterable[Task] = list(_targets(args, client)) if args.names else _targets(args, client)
    for task in targets if args.names else ():  # named: all of them retryable, or none is retried
        if task.phase not in RETRYABLE_PHASES:
            raise NotRetryable(f"task {task.metadata.name} is {task.phase or 'not started'}; only Failed or "
                               "DeadLettered tasks can be retried")
    for task in targets:
        ref, name = _ref(task, everywhere), task.metadata.name or ""
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
        print(f"{_ref(new, everywhere)} created (retry of {name})")
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
    everywhere = args.all_namespaces
    acted = 0
    for task in _targets(args, client):
        ref = _ref(task, everywhere)
        if args.dry_run:
            print(f"{ref} would be deleted ({task.phase or 'Pending'})")
        elif client.in_namespace(task.metadata.namespace or client.namespace).delete(task.metadata.name or ""):
            print(f"{ref} deleted")
        else:
            continue
        acted += 1
    if not args.names:
        _count(acted, "deleted", args.dry_run)
    return EXIT_OK


# ---------------------------------------------------------------------- describe / logs / tree


def describe(args: argparse.Namespace, client: Client) -> int:
    try:
        task = client.get(_bare(args.name))
    except TaskNotFound:
        url = getattr(args, "archive", None) or os.environ.get("CRONOQ_ARCHIVE")
        if url:  # deleted meanwhile (its retention ended): what the archive kept of it
            from cronoq.cli.history import describe_archived
            shown = describe_archived(client.namespace, _bare(args.name), url)
            if shown is not None:
                return shown
        raise
    s = task.status
    out = render.console()
    pairs: list[tuple[str, Any]] = [
        ("Name", task.metadata.name), ("Namespace", task.metadata.namespace), ("Pool", task.spec.pool),
        ("Priority", task.spec.priority), ("Phase", render.phase_text(task.phase)),
        ("Attempt", s.attempt if s else 0),
    ]
    if task.spec.key:
        pairs.append(("Key", task.spec.key))
    if submitter := admission.submitter_of(task):
        pairs.append(("Submitter", render.cell(submitter)))
    if s and s.duplicate_of:
        pairs.append(("Duplicate of", s.duplicate_of))
    if "cronoq.io/retry-of" in task.metadata.labels:
        pairs.append(("Retry of", task.metadata.labels["cronoq.io/retry-of"]))
    retries = client.retries_of(task.metadata.name or "")
    if retries:
        pairs.append(("Retried as", ", ".join(f"{r.metadata.name} ({r.phase or 'Pending'})" for r in retries)))
    if task.spec.image:
        pairs.append(("Image", task.spec.image))
    if s and s.submitted_at:
        pairs.append(("Submitted", s.submitted_at.isoformat()))
    if s and s.finished_at:
        pairs.append(("Finished", s.finished_at.isoformat()))
    if s and s.next_attempt_at:
        pairs.append(("Next attempt", s.next_attempt_at.isoformat()))
    if s and s.ignored_attempts:
        pairs.append(("Ignored attempts", f"{s.ignored_attempts} (retry rules said Ignore: not counted against "
                                          "maxAttempts)"))
    if (start := delay.not_before(task)) is not None:
        pairs.append(("Not before", _not_before(start, s.attempt if s else 0)))
    if task.spec.depends_on:
        pairs.append(("Depends on", ", ".join(f"{d.task} ({d.on})" for d in task.spec.depends_on)))
    if task.spec.concurrency_keys:
        pairs.append(("Concurrency keys", render.cell(", ".join(task.spec.concurrency_keys))))
    if task.phase is TaskPhase.QUEUED:
        pairs.append(("Waiting", render.cell(_why_queued(task, client, args.place))))
        if held := _key_wait_text(task, client):
            pairs.append(("Waiting for", render.cell(held)))
    pool = client.pool(task.spec.pool)
    if task.phase is TaskPhase.RUNNING and pool is not None and pool.spec.admission is not None \
            and pool.spec.admission.kueue is not None and (hold := client.kueue_hold(task)) is not None:
        pairs.append(("Waiting", render.cell(waiting.kueue_text(hold, position=True))))
    if limits := waiting.limits_text(task, pool.spec if pool is not None else None):
        pairs.append(("Deadlines", limits))
    pairs.append(("Retention", retention.task_line(task, pool.spec if pool is not None else None)))
    if s and s.message:
        pairs.append(("Message", render.cell(s.message, multiline=True)))
    if s and s.output_available:
        pairs.append(("Output", render.cell(s.output or "", multiline=True)))
    if s and s.checkpoint:
        pairs.append(("Checkpoint", render.cell(render.checkpoint_text(s.checkpoint, s.attempt), multiline=True)))
    render.show(out, render.fields_grid(pairs))
    print()
    if s and s.attempts:
        print("Attempts:")
        render.show(out, render.attempts_table(task))
    else:
        print("Attempts: none yet")
    events = client.events(task)
    if events:
        print("\nEvents:")
        render.show(out, render.events_table(events[-15:]))
    return EXIT_OK


def _not_before(start: datetime, attempt: int) -> str:
    """`describe`'s line for a delayed start: the time, and how far it is while it is ahead."""
    text, now = delay.spelled(start), datetime.now(timezone.utc)
    if attempt == 0 and start > now:
        text += f" (in {render.age(now, start)})"
    return text


PLACE_LIMIT = MARKS_FROM
"""Past this many queued tasks in its pool (the pool's status says how many), `describe` reads the
task's place between the marks of the pool's queue the operator keeps in its status, unless asked
to work it out exactly (`--place`): that reads every queued task of the pool."""


def _why_queued(task: Task, client: Client, place_anyway: bool = False) -> str:
    """Why a queued task has no slot, and where it stands (`engine.attempts.waiting` words both):
    read from its pool (a GET; when its status carries queue marks, past the operator's
    --queue-marks-from, the place between them) and, while the pool's status counts at most PLACE_LIMIT queued tasks (or when asked),
    the pool's queued tasks (a LIST by the selectable fields spec.pool and
    status.phase, page by page; what is kept of each is its place in the order, not the Task);
    the running tasks of the pool only when its groupConcurrency decides. No write."""
    name = task.spec.pool
    pool = client.pool(name)
    if pool is None:
        return waiting.described(waiting.of_task(task, None), "", datetime.now(timezone.utc))
    fair = pool.spec.fair_share
    counted = pool.status.queued if pool.status else 0
    queue_marks = pool.status.queue_marks if pool.status else None
    exactly = f"`cronoq describe {task.metadata.name} --place` reads them all"
    group = admission.fair_group(task.spec.group, admission.submitter_of(task), fair)
    running: Counter[str] | None = None

    def by_group() -> Counter[str]:
        """The pool's running tasks by fairness group, read once, when something decides on them."""
        nonlocal running
        if running is None:
            running = Counter(admission.fair_group(t.spec.group, admission.submitter_of(t), fair)
                              for page in client.pages(pool=name, phase="Running") for t in page)
        return running

    queued_groups: set[str] = set()
    if queue_marks is not None and not place_anyway:  # the operator took them: past its --queue-marks-from
        place = f"{waiting.between(task, queue_marks, fair)}; for the exact place, {exactly}"
    elif counted > PLACE_LIMIT and not place_anyway:
        place = f"one of {counted:,} queued in pool {name} (the place is worked out up to {PLACE_LIMIT:,} queued: {exactly})"
    else:
        queued = [t for page in client.pages(pool=name, phase="Queued") for t in page]
        queued_groups = {admission.fair_group(t.spec.group, admission.submitter_of(t), fair) for t in queued}
        place = str(waiting.place(task, queued, fair, by_group() if fair is not None else None))

    def share() -> waiting.Share:
        assert fair is not None  # (asked for only when the pool shares its slots)
        return waiting.share_of(fair, pool.spec.concurrency, group, by_group(), queued_groups)

    return waiting.described(waiting.of_task(task, pool, lambda: by_group()[group], share), place,
                             datetime.now(timezone.utc))


def _key_wait_text(task: Task, client: Client) -> str | None:
    """Which concurrency key holds a queued task and who holds the key (`engine.keylimits` words it),
    from the namespace's pools and running tasks (a LIST of each, only for a task naming keys);
    None when it names none or each has room."""
    if not task.spec.concurrency_keys:
        return None
    running = [(t.metadata.name or "", t.spec.concurrency_keys) for page in client.pages(phase="Running")
               for t in page if t.spec.concurrency_keys]
    found = keylimits.of_tasks(task.spec.concurrency_keys, running, (p.spec for p in client.pools()))
    return keylimits.described(found) if found is not None else None


def logs(args: argparse.Namespace, client: Client) -> int:
    name = _bare(args.name)
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
    names = [_bare(n) for n in args.names]
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
    found = client.inputs(_bare(args.name))
    print(render.on_terminal(json.dumps(plain(found), indent=2, ensure_ascii=False), sys.stdout))
    return EXIT_OK


VERBS: dict[str, runner.Verb] = {
    "submit": submit, "get": get, "list": get, "wait": wait, "cancel": cancel, "retry": retry, "delete": delete,
    "describe": describe, "logs": logs, "tree": tree, "inputs": inputs,
}
