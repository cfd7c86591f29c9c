"""`cronoq schedule list|suspend|resume|trigger|backfill`: the TaskSchedules from the shell.

`trigger` is one fire of a schedule now, as its own Task (also reachable as `cronoq trigger`,
its older spelling). Suspending sets `spec.suspend`: no fires, and the times that pass while
suspended are not caught up on when it resumes. Resuming also resumes a schedule that
pauseAfterFailures paused (any edit of the spec does). Backfilling adds a range of past fire
times to spec.backfills, which the operator runs (not an edit of the fires).
"""
from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone

from rich.text import Text

from cronoq.api import TaskSchedule
from cronoq.cli import EXIT_OK, UsageError, render
from cronoq.client import Client

RESOURCE = "taskschedule.cronoq.io"
COLUMNS = ["NAME", "SCHEDULE", "SUSPEND", "ACTIVE", "LAST FIRE", "NEXT FIRE", "AGE"]


def add_verb(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from cronoq.cli import Parser, group_flags

    sched = sub.add_parser("schedule", help="TaskSchedules: list, suspend, resume, trigger, backfill",
                           description="The TaskSchedules: list them, suspend (no fires; the times that pass are "
                                       "not caught up on), resume, trigger (one fire now, as its own Task).")
    group_flags(sched)
    verbs = sched.add_subparsers(dest="schedule_command", metavar="VERB", parser_class=Parser, required=True)
    ls = verbs.add_parser("list", parents=[common], help="the schedules, with suspend, active, last and next fire")
    ls.add_argument("--all-namespaces", "-A", action="store_true", help="schedules of every namespace")
    ls.add_argument("-o", "--output", choices=["json", "yaml", "name"])
    ls.add_argument("--no-headers", action="store_true", help="the table without its header line")
    for verb, text in (("suspend", "no more fires until resumed (the times that pass are not caught up on)"),
                       ("resume", "fire again from the next fire time")):
        v = verbs.add_parser(verb, parents=[common], help=text)
        v.add_argument("names", nargs="+", metavar="SCHEDULE")
    b = verbs.add_parser("backfill", parents=[common],
                         help="run the schedule's past fire times in a range, each once (spec.backfills)")
    b.add_argument("schedule", metavar="SCHEDULE")
    b.add_argument("--from", dest="start", required=True, metavar="TIME",
                   help="the first fire time to run (RFC 3339 with a zone, e.g. 2026-12-01T00:00:00Z)")
    b.add_argument("--to", dest="end", required=True, metavar="TIME",
                   help="the last fire time to run (inclusive; fire times after now are the schedule's own)")
    t = verbs.add_parser("trigger", parents=[common],
                         help="fire once, now (its own Task, named <schedule>-manual-<unix seconds>)")
    t.add_argument("schedule", metavar="SCHEDULE")
    # The older spelling, `cronoq trigger SCHEDULE`: kept, out of the listing.
    old = sub.add_parser("trigger", parents=[common], description="Same as `cronoq schedule trigger`.")
    old.add_argument("schedule", metavar="SCHEDULE")


def run(args: argparse.Namespace) -> int:
    from cronoq.cli import merge_group_flags, runner

    merge_group_flags(args)
    verb = "trigger" if args.command == "trigger" else args.schedule_command
    return runner.run(args, VERBS[verb])


def schedule_list(args: argparse.Namespace, client: Client) -> int:
    schedules = client.schedules(all_namespaces=args.all_namespaces)
    where = "any namespace" if args.all_namespaces else f"{client.namespace} namespace"
    render.listing(schedules, output=args.output, resource=RESOURCE, noun="schedules", where=where, columns=COLUMNS,
                   row=lambda o: _row(o, args.all_namespaces), all_namespaces=args.all_namespaces,
                   headers=not args.no_headers)
    return EXIT_OK


def _row(schedule: TaskSchedule, namespaces: bool) -> list[Text]:
    spec, s = schedule.spec, schedule.status
    when = (s.schedule if s and s.schedule else None) or spec.schedule or "-"
    cells = [render.cell(schedule.metadata.name or ""), render.cell(when),
             _suspend_cell(schedule),
             render.cell(s.active if s else 0),
             render.cell(render.age(s.last_fire_time) if s and s.last_fire_time else "-"),
             render.cell(s.next_fire_time.isoformat() if s and s.next_fire_time else "-"),
             render.cell(render.age(schedule.metadata.creation_timestamp))]
    return [render.cell(schedule.metadata.namespace or ""), *cells] if namespaces else cells


def _suspend_cell(schedule: TaskSchedule) -> Text:
    """`true`, `false`, or `paused` when pauseAfterFailures stopped the fires though spec.suspend
    is false (`cronoq schedule resume` resumes it): `false` there would say it fires."""
    if schedule.spec.suspend:
        return render.cell("true", style="yellow")
    return render.cell("paused", style="yellow") if _paused(schedule) else render.cell("false")


def _paused(schedule: TaskSchedule) -> bool:
    from cronoq.engine.schedule import PAUSED

    conditions = schedule.status.conditions if schedule.status else ()
    return any(c.type == PAUSED and c.status.value == "True" for c in conditions)


def _resume_paused(client: Client, name: str) -> None:
    """Resume a schedule pauseAfterFailures paused though spec.suspend is false: the pause lasts
    until the spec changes, so suspend and resume it (two edits; no fire happens in between)."""
    schedule = client.schedule(name)
    if not schedule.spec.suspend and _paused(schedule):
        client.suspend(name, True)


def suspend(args: argparse.Namespace, client: Client) -> int:
    for name in args.names:
        client.suspend(name, True)
        print(f"{RESOURCE}/{name} suspended")
    return EXIT_OK


def resume(args: argparse.Namespace, client: Client) -> int:
    for name in args.names:
        _resume_paused(client, name)
        client.suspend(name, False)
        print(f"{RESOURCE}/{name} resumed")
    return EXIT_OK


def _time(flag: str, text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise UsageError(f"{flag} {text}: not an RFC 3339 time with a zone (e.g. 2026-12-01T00:00:00Z)")
    return at.astimezone(timezone.utc)


def backfill(args: argparse.Namespace, client: Client) -> int:
    """Add a range to spec.backfills: the operator creates each fire time's Task that does not
    exist, once, oldest first, within the concurrency policy; `status.backfills` shows how far."""
    from cronoq.api.schedule import BACKFILL_MOST
    from cronoq.engine.schedule import timetable_of

    start, end = _time("--from", args.start), _time("--to", args.end)
    if end < start:
        raise UsageError(f"--to {args.end} is before --from {args.start}")
    schedule = client.schedule(args.schedule)
    upto = min(end, datetime.now(timezone.utc))
    count = timetable_of(schedule).span(start - timedelta(microseconds=1), upto, BACKFILL_MOST + 1).count
    if count > BACKFILL_MOST:
        raise UsageError(f"more than {BACKFILL_MOST:,} fire times from {args.start} to {args.end}: split the range")
    _, added = client.backfill(args.schedule, start, end)
    said = f"{count:,} fire time{'s' if count != 1 else ''} up to now"
    print(f"{RESOURCE}/{args.schedule} backfill from {start.isoformat()} to {end.isoformat()} "
          + (f"added ({said}; those whose Task exists are not run again)" if added else "was asked already"))
    return EXIT_OK


def trigger(args: argparse.Namespace, client: Client) -> int:
    name, created = client.trigger(args.schedule)
    print(f"task.cronoq.io/{name} created" if created
          else f"task.cronoq.io/{name} exists already (triggered within the same second)")
    return EXIT_OK


VERBS = {"list": schedule_list, "suspend": suspend, "resume": resume, "trigger": trigger, "backfill": backfill}
