"""`cronoq submit`: a Task from flags (or manifests from -f), checked offline, then created;
`--wait` waits for it as `cronoq wait` does.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from cronoq.api import DurationError
from cronoq.api.durations import parse as parse_duration
from cronoq.cli import EXIT_OK, UsageError, render
from cronoq.cli.runner import seconds
from cronoq.cli.tasks.selection import RESOURCE
from cronoq.cli.tasks.wait import wait
from cronoq.client import Client
from cronoq.client.client import check_manifest


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
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


def check(args: argparse.Namespace) -> None:
    """Read and check the manifests (or the flags' one) offline: `args.manifests`."""
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
