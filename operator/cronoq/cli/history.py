"""`cronoq history`: executions (ended attempts) across tasks, newest first, read straight from the
archive's database (the operator's `--archive`, the same URL: cronoq/archive.py), so tasks long
deleted are listed with those still there. No cluster is contacted."""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from typing import Any

from cronoq.api import AttemptOutcome, DurationError, TERMINAL_PHASES
from cronoq.api.durations import parse as parse_duration
from cronoq.cli import EXIT_FAILED, EXIT_OK, UsageError, render

COLUMNS = ("NAMESPACE", "NAME", "ATTEMPT", "POOL", "OUTCOME", "REASON", "CODE", "DURATION", "FINISHED", "MESSAGE")
WIDE = ("KEY", "TRIGGER", "DELIVERY", "PHASE", "JOB/WORKER", "UID")


def add_verb(sub: argparse._SubParsersAction) -> None:
    h = sub.add_parser(
        "history", help="executions across tasks from the archive, deleted tasks too (filters, -o json)",
        description="Ended attempts of every task the operator archived (--archive), newest first: "
                    "outcome, reason, exit or response code, duration, when. Reads the archive's database "
                    "directly (sqlite:///path or postgresql://...), not the cluster.")
    h.add_argument("--archive", default=None, metavar="URL",
                   help="the archive's database, as the operator's --archive (default: $CRONOQ_ARCHIVE)")
    h.add_argument("--namespace", "-n", default=None, help="only tasks of this namespace (default: every one)")
    h.add_argument("--pool", help="only tasks of this pool")
    h.add_argument("--name", help="only the task of this name")
    h.add_argument("--key", help="only tasks of this idempotency key")
    h.add_argument("--outcome", choices=[o.value for o in AttemptOutcome], help="only attempts that ended so")
    h.add_argument("--phase", choices=sorted(p.value for p in TERMINAL_PHASES),
                   help="only attempts of tasks that finished in this phase")
    h.add_argument("--reason", help="only attempts that ended for this reason (e.g. Timeout, OOMKilled)")
    h.add_argument("--response-code", type=int, metavar="CODE", help="only push attempts answered with this code")
    h.add_argument("--since", metavar="TIME",
                   help="only attempts that finished since: a duration ago (1h, 7d) or an RFC 3339 time")
    h.add_argument("--until", metavar="TIME", help="only attempts that finished before: as --since")
    h.add_argument("--limit", type=int, default=50, help="at most this many rows, newest first (default: 50)")
    h.add_argument("-o", "--output", choices=["json", "wide"], help="json: one object per row; wide: more columns")
    h.add_argument("--no-headers", action="store_true", help="the table without its header line")


def when(text: str | None, flag: str, now: datetime) -> datetime | None:
    """--since/--until: a duration ago, or a time (RFC 3339; without a zone, UTC)."""
    if text is None:
        return None
    try:
        return now - parse_duration(text)
    except (DurationError, ValueError):
        pass
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is neither a duration (1h, 7d) nor an RFC 3339 time") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat().replace("+00:00", "Z") if isinstance(v, datetime) else v for k, v in row.items()}


def run(args: argparse.Namespace, now: datetime | None = None) -> int:
    from cronoq.archive import ArchiveError, Database, Filter

    now = now or datetime.now(timezone.utc)
    url = args.archive or os.environ.get("CRONOQ_ARCHIVE")
    if not url:
        raise UsageError("history: no archive: give --archive URL (or $CRONOQ_ARCHIVE), the operator's --archive")
    if args.limit < 1:
        raise UsageError("history: --limit must be at least 1")
    where = Filter(namespace=args.namespace, pool=args.pool, name=args.name, key=args.key, outcome=args.outcome,
                   phase=args.phase, reason=args.reason, response_code=args.response_code,
                   since=when(args.since, "--since", now), until=when(args.until, "--until", now), limit=args.limit)
    try:
        db = Database(url)
        if db.dialect == "sqlite" and not os.path.exists(db.path):
            raise ArchiveError(f"no archive at {db.path}")
        try:
            rows = db.query(where)
        finally:
            db.close()
    except ArchiveError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as err:  # noqa: BLE001 - the database's own errors: one line
        print(f"error: the archive cannot be read: {render.terminal_safe(str(err))}", file=sys.stderr)
        return EXIT_FAILED
    if args.output == "json":
        print(json.dumps([_jsonable(r) for r in rows], indent=2))
        return EXIT_OK
    out = render.console()
    if not rows:
        print("No executions in the archive match.", file=sys.stderr)
        return EXIT_OK
    wide = args.output == "wide"
    cells = []
    for r in rows:
        code = r["response_code"] if r["response_code"] is not None else r["exit_code"]
        message = (r["message"] or "").splitlines()[0] if r["message"] else ""
        line = [render.cell(r["namespace"]), render.cell(r["name"]), render.cell(r["attempt"]), render.cell(r["pool"]),
                render.cell(r["outcome"]), render.cell(r["reason"] or "-"),
                render.cell("-" if code is None else code), render.cell(render.duration(r["duration_ms"])),
                render.cell(render.age(r["finished_at"], now) + " ago" if r["finished_at"] else "-")]
        if wide:
            line += [render.cell(r["key"] or "-"), render.cell(r["trigger"]), render.cell(r["delivery"]),
                     render.phase_text(r["phase"]) if r["phase"] else render.cell("-"),
                     render.cell(r["job"] or r["worker"] or "-"), render.cell(r["task_uid"])]
        line.append(render.cell(message))
        cells.append(line)
    columns = list(COLUMNS[:-1]) + (list(WIDE) if wide else []) + [COLUMNS[-1]]
    render.show(out, render.table(columns, cells, show_header=not args.no_headers))
    return EXIT_OK


def describe_archived(namespace: str, name: str, url: str) -> int | None:
    """`cronoq describe` of a task that is gone from the cluster: what the archive holds of the
    newest task of that name (its final phase, message, output and attempts). None when the
    archive holds none (the caller then says the task is not found)."""
    from cronoq.archive import Database

    db = Database(url)
    if db.dialect == "sqlite" and not os.path.exists(db.path):
        return None
    try:
        found = db.task(namespace, name)
    finally:
        db.close()
    if found is None:
        return None
    task, attempts = found
    out = render.console()
    pairs: list[tuple[str, Any]] = [
        ("Name", task["name"]), ("Namespace", task["namespace"]), ("Pool", task["pool"]),
        ("Phase", render.phase_text(task["phase"])), ("Attempt", task["attempts"])]
    if task["key"]:
        pairs.append(("Key", task["key"]))
    if task["duplicate_of"]:
        pairs.append(("Duplicate of", task["duplicate_of"]))
    for label, column in (("Submitted", "submitted_at"), ("Finished", "finished_at")):
        if task[column] is not None:
            pairs.append((label, task[column].isoformat()))
    pairs.append(("Archived", render.cell("deleted from the cluster; this is what the archive kept (uid "
                                          f"{task['task_uid']})")))
    if task["message"]:
        pairs.append(("Message", render.cell(task["message"], multiline=True)))
    if task["output_available"]:
        pairs.append(("Output", render.cell(task["output"] or "", multiline=True)))
    render.show(out, render.fields_grid(pairs))
    print()
    if not attempts:
        print("Attempts: none")
        return EXIT_OK
    print("Attempts:")
    rows = [[render.cell(a["attempt"]), render.cell(a["trigger"]),
             render.cell(f"worker {a['worker']}" if a["worker"] else f"Job {a['job']}" if a["job"] else "-"),
             render.cell(a["started_at"].strftime("%Y-%m-%d %H:%M:%S") if a["started_at"] else "-"),
             render.cell(render.duration(a["duration_ms"])), render.cell(a["outcome"]),
             render.cell("-" if a["exit_code"] is None else a["exit_code"]), render.cell(a["reason"] or "-"),
             render.cell((a["message"] or "").strip() or "-")] for a in attempts]
    render.show(out, render.table(["ATTEMPT", "TRIGGER", "RAN ON", "STARTED", "DURATION", "OUTCOME", "EXIT CODE",
                                   "REASON", "MESSAGE"], rows))
    return EXIT_OK
