"""`cronoq pool list|status|pause|resume|drain`: the TaskPools as the person on call sees them.

Pausing sets the pool's `spec.paused`: no new attempt starts, the running ones go on, and the
concurrency is kept for when it resumes. `drain` pauses and then waits until no attempt of the
pool runs (a watch of the pool's tasks, never a poll).
"""
from __future__ import annotations

import argparse
import sys

from rich.text import Text

from cronoq.api import TaskPhase, TaskPool
from cronoq.cli import EXIT_OK, EXIT_TIMEOUT, render, retention
from cronoq.client import Client

RESOURCE = "taskpool.cronoq.io"
COLUMNS = ["NAME", "CONCURRENCY", "PAUSED", "RATE LIMIT", "RUNNING", "QUEUED", "AGE"]


def add_verb(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from cronoq.cli import Parser, group_flags

    pool = sub.add_parser("pool", help="TaskPools: list, status, pause, resume, drain",
                          description="The TaskPools: list them, show one, pause (no new attempts start; running "
                                      "ones go on; concurrency is kept), resume, drain (pause, then wait until "
                                      "no attempt runs).")
    group_flags(pool)
    verbs = pool.add_subparsers(dest="pool_command", metavar="VERB", parser_class=Parser, required=True)
    ls = verbs.add_parser("list", parents=[common],
                          help="the pools, with concurrency, paused, rate limit, running, queued")
    ls.add_argument("--all-namespaces", "-A", action="store_true", help="pools of every namespace")
    ls.add_argument("-o", "--output", choices=["json", "yaml", "name"])
    ls.add_argument("--no-headers", action="store_true", help="the table without its header line")
    st = verbs.add_parser("status", parents=[common], help="one pool: limits, tasks by phase, its Ready condition")
    st.add_argument("name", metavar="POOL")
    for verb, text in (("pause", "start no new attempts; running ones go on; concurrency is kept"),
                       ("resume", "start attempts again, at the concurrency the pool kept")):
        v = verbs.add_parser(verb, parents=[common], help=text)
        v.add_argument("names", nargs="+", metavar="POOL")
    dr = verbs.add_parser("drain", parents=[common],
                          help="pause, then wait until none of the pool's attempts runs (resume undoes it)")
    dr.add_argument("name", metavar="POOL")
    dr.add_argument("--timeout", help="stop waiting after this long (e.g. 10m), exit code 3; the pool stays paused")


def run(args: argparse.Namespace) -> int:
    from cronoq.cli import merge_group_flags, runner

    merge_group_flags(args)
    return runner.run(args, VERBS[args.pool_command])


def pool_list(args: argparse.Namespace, client: Client) -> int:
    pools = client.pools(all_namespaces=args.all_namespaces)
    where = "any namespace" if args.all_namespaces else f"{client.namespace} namespace"
    render.listing(pools, output=args.output, resource=RESOURCE, noun="pools", where=where, columns=COLUMNS,
                   row=lambda o: _row(o, args.all_namespaces), all_namespaces=args.all_namespaces,
                   headers=not args.no_headers)
    return EXIT_OK


def _row(pool: TaskPool, namespaces: bool) -> list[Text]:
    s = pool.status
    cells = [render.cell(pool.metadata.name or ""), render.cell(pool.spec.concurrency),
             render.cell("true" if pool.spec.paused else "false", style="yellow" if pool.spec.paused else ""),
             render.cell(rate_limit(pool) or "-"), render.cell(s.running if s else 0), render.cell(s.queued if s else 0),
             render.cell(render.age(pool.metadata.creation_timestamp))]
    return [render.cell(pool.metadata.namespace or ""), *cells] if namespaces else cells


def rate_limit(pool: TaskPool) -> str | None:
    """`2/s, burst 5`: the pool's limit on attempt starts (None: it has none)."""
    limit = pool.spec.rate_limit
    return None if limit is None else f"{limit.starts_per_second:g}/s, burst {limit.burst}"


def pool_status(args: argparse.Namespace, client: Client) -> int:
    pool = client.pool(args.name)
    if pool is None:
        from cronoq.client import ObjectNotFound
        raise ObjectNotFound("TaskPool", client.namespace, args.name)
    s = pool.status
    pairs: list[tuple[str, object]] = [
        ("Name", pool.metadata.name), ("Namespace", pool.metadata.namespace),
        ("Concurrency", pool.spec.concurrency), ("Paused", "true" if pool.spec.paused else "false"),
        ("Rate limit", rate_limit(pool) or "none"),
        ("Running", s.running if s else 0), ("Queued", s.queued if s else 0),
        ("Retention", retention.pool_line(pool.spec)),
    ]
    if s and s.counts:
        counts = s.counts.model_dump()
        by_phase = ", ".join(f"{n} {phase}" for phase in TaskPhase
                             if (n := counts.get(_field(phase), 0)))
        pairs.append(("Tasks", by_phase or "none"))
    ready = next((c for c in (s.conditions if s else ()) if c.type == "Ready"), None)
    if ready:
        pairs.append(("Ready", render.cell(f"{ready.status} ({ready.reason}): {ready.message}")))
    render.show(render.console(), render.fields_grid(pairs))
    return EXIT_OK


def _field(phase: TaskPhase) -> str:
    from cronoq.api import snake_case
    return snake_case(phase.value)


def pause(args: argparse.Namespace, client: Client) -> int:
    for name in args.names:
        pool = client.pause(name, True)
        print(f"{RESOURCE}/{name} paused: no new attempt starts; running ones go on "
              f"(concurrency {pool.spec.concurrency} kept)")
    return EXIT_OK


def resume(args: argparse.Namespace, client: Client) -> int:
    for name in args.names:
        pool = client.pause(name, False)
        print(f"{RESOURCE}/{name} resumed (concurrency {pool.spec.concurrency})")
    return EXIT_OK


def drain(args: argparse.Namespace, client: Client) -> int:
    """Pause, then watch the pool's tasks until none is Running."""
    from cronoq.cli.runner import seconds

    timeout = seconds(args.timeout, "--timeout")
    client.pause(args.name, True)
    print(f"{RESOURCE}/{args.name} paused; waiting for its running attempts to end", file=sys.stderr)
    running = {t.metadata.name or "" for t in client.list(pool=args.name, phase="Running")}
    if running:
        for kind, task in client.watch(pool=args.name, timeout=timeout):
            if kind != "DELETED" and task.phase is TaskPhase.RUNNING:
                running.add(task.metadata.name or "")
            else:
                running.discard(task.metadata.name or "")
            if not running:
                break
    if not running:
        print(f"{RESOURCE}/{args.name} drained: no attempt runs (the pool stays paused; "
              f"`cronoq pool resume {args.name}` starts it again)")
        return EXIT_OK
    print(f"error: timed out after {args.timeout} draining pool {args.name}: still running: "
          f"{', '.join(sorted(running))}", file=sys.stderr)
    return EXIT_TIMEOUT


VERBS = {"list": pool_list, "status": pool_status, "pause": pause, "resume": resume, "drain": drain}
