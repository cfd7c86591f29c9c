"""`cronoq operator`: run the operator (the only verb that imports the controller)."""
from __future__ import annotations

import argparse
import asyncio
import logging


def run_operator(args: argparse.Namespace) -> int:
    from cronoq.controller.runtime import RUNTIME, serve
    from cronoq.controller.settings import from_flags

    RUNTIME.options = from_flags(args)
    logging.basicConfig(level=RUNTIME.options.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    asyncio.run(serve(RUNTIME))
    return 0
