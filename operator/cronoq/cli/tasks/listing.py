"""`cronoq get` and `cronoq list`: the tasks named or selected, a page at a time, in the format
asked for; `-w` then prints each change.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from cronoq.api import Task
from cronoq.cli import EXIT_OK, UsageError, render
from cronoq.cli.runner import bare, mixed_note, output_format, print_jsonpath, print_list
from cronoq.cli.tasks.selection import RESOURCE, add_filters, phases
from cronoq.client import Client
from cronoq.client.client import Pages


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    for verb, helptext in (("get", "show tasks (all, or the ones named)"), ("list", "list the tasks")):
        g = sub.add_parser(verb, parents=[common], help=helptext)
        if verb == "get":
            g.add_argument("names", nargs="*", metavar="NAME")
        g.add_argument("-o", "--output", type=output_format, metavar="FORMAT",
                       help="wide, json, yaml, name, jsonpath=TEMPLATE (kubectl's: '{.items[*].metadata.name}', "
                            "'{range .items[*]}{.metadata.name}{\"\\n\"}{end}'), or "
                            "custom-columns=NAME:.metadata.name,PHASE:.status.phase")
        add_filters(g)
        g.add_argument("--no-headers", action="store_true", help="tables without their header line")
        g.add_argument("--watch", "-w", action="store_true", help="after listing, print each change")


def check(args: argparse.Namespace) -> None:
    if args.watch and (args.output or "").startswith("custom-columns="):
        raise UsageError(f"{args.command} -w: custom-columns are for a listing (columns sized to their rows); "
                         "watch with -o jsonpath=... instead")
    if args.command == "get" and args.names and args.all_namespaces:
        raise UsageError("get: a task is named in one namespace: give names or -A, not both")
    args.phase = phases(args.phase)


def get(args: argparse.Namespace, client: Client) -> int:
    """The tasks named (GETs), or those the filters select, read and printed a page at a time: a
    table page by page (as kubectl's, each page's columns sized to its rows, the header once),
    names, and JSON or YAML as one List written as its items arrive. A JSONPath template or
    custom columns read the whole List (as kubectl's do)."""
    names = [bare(n) for n in getattr(args, "names", [])]
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
        shown = print_list(args.output, (t.to_dict() for page in pages for t in page))
    elif args.output in ("json", "yaml"):
        tasks = [t for page in pages for t in page]
        print(render.dump([t.to_dict() for t in tasks], args.output, single=True))
        shown = len(tasks)
    elif args.output and args.output.startswith("jsonpath="):
        objects = [t.to_dict() for page in pages for t in page]
        print_jsonpath(args.output, objects, single=single)
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
        mixed_note()
    if not shown and args.output in (None, "wide"):
        where = "any namespace" if args.all_namespaces else f"{client.namespace} namespace"
        print(f"No tasks found in {where}.", file=sys.stderr)
    return EXIT_OK


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
            print_jsonpath(args.output, [task.to_dict()], single=True)
        elif args.output == "name":
            print(f"{RESOURCE}/{task.metadata.name}", flush=True)
        else:
            render.show(out, render.watch_line(render.row(task, wide, everywhere), everywhere))
    return EXIT_OK
