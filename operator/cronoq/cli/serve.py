"""`cronoq operator`: run the operator (the only verb that imports the controller)."""
from __future__ import annotations

import argparse
import asyncio
import logging


def run_operator(args: argparse.Namespace) -> int:
    from cronoq.controller.runtime import RUNTIME, serve
    from cronoq.controller.settings import from_flags

    RUNTIME.options = from_flags(args)
    if RUNTIME.options.archive:
        from cronoq.archive import ArchiveError, Database
        from cronoq.cli import UsageError
        try:
            Database(RUNTIME.options.archive)  # the URL's form only: the database may come later
        except ArchiveError as err:
            raise UsageError(f"--archive: {err}") from None
    logging.basicConfig(level=RUNTIME.options.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    asyncio.run(serve(RUNTIME))
    return 0
