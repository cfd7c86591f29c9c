"""The `cronoq` command line."""
from __future__ import annotations

import argparse

from cronoq import __version__


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cronoq", description="Tasks as pods, with the guarantees of a task queue.")
    p.add_argument("--version", action="version", version=f"cronoq {__version__}")
    p.add_subparsers(dest="command", metavar="COMMAND")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command is None:
        parser().print_help()
    return 0
