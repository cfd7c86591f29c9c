"""`cronoq dashboard`: the queue in a browser, served on 127.0.0.1 with the user's own rights.

Like `kubectl proxy`, it runs on the user's machine and makes every read and write with the
user's kubeconfig: it can see and do nothing the user could not, and needs no Service or
ServiceAccount in the cluster. A write the user may not make comes back as the API server's
refusal, shown on the page.
"""
from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cronoq.client import Client

DEFAULT_PORT = 8765


def add_verb(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("dashboard", parents=[common],
                       help="serve a dashboard of the queue on 127.0.0.1, with your own kubeconfig's rights",
                       description="Serve the dashboard (overview per pool, tasks with filters, a task's attempts, "
                                   "logs, Events and dependencies, schedules, actions, and the archive's history with --archive) "
                                   "on 127.0.0.1, live. Every "
                                   "read and write is made with your kubeconfig, as kubectl would.")
    p.add_argument("--all-namespaces", "-A", action="store_true", help="every namespace you may list")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--archive", default=None, metavar="URL",
                   help="the archive's database (the operator's --archive; default: $CRONOQ_ARCHIVE), read by the "
                        "History page: executions of every task, deleted ones too")


def run(args: argparse.Namespace) -> int:
    from cronoq.cli import EXIT_OK, UsageError, runner

    if not 0 <= args.port <= 65535:
        raise UsageError(f"dashboard: --port {args.port} is not a port (0 to 65535)")

    archive = args.archive or os.environ.get("CRONOQ_ARCHIVE") or None
    if archive is not None:
        from cronoq.archive import ArchiveError, Database

        try:
            Database(archive)  # a URL of no known kind is refused now, not on the page
        except ArchiveError as err:
            raise UsageError(f"dashboard: --archive: {err}") from None

    def verb(args: argparse.Namespace, client: Client) -> int:
        serve(client, args.all_namespaces, args.port, archive)
        return EXIT_OK

    return runner.run(args, verb)


def serve(client: Client, all_namespaces: bool, port: int, archive: str | None = None) -> None:
    """Serve until interrupted; print the launch URL once listening (with the port picked, if 0).
    `archive`: the archive's URL, for the history page."""
    import asyncio
    import logging
    import socket

    from aiohttp import web

    from cronoq.cli.dashboard.server import STATE, make_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    where = "every namespace" if all_namespaces else f"namespace {client.namespace}"

    async def main() -> None:
        app = make_app(client, all_namespaces, port, archive=archive)
        runner = web.AppRunner(app, handle_signals=True)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        # Only this URL lets a browser in: any local user can connect to 127.0.0.1, none can read it here.
        print(f"cronoq dashboard of {where}: open {app[STATE].launch_url(port)} (Ctrl-C stops it)", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())
