"""`cronoq operator`: run the operator (the only verb that imports the controller)."""
from __future__ import annotations

import argparse
import asyncio
import logging


def run_operator(args: argparse.Namespace) -> int:
    from cronoq.controller.runtime import RUNTIME, Options, serve
    from cronoq.engine.jobs import TaskServiceAccount

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    RUNTIME.options = Options(namespaces=tuple(args.namespaces), metrics_port=args.metrics_port or None,
                              probe_port=args.probe_port or None, workers=args.workers,
                              watch_seconds=args.watch_seconds, events=args.events,
                              leader_election=args.leader_election, lease_namespace=args.lease_namespace,
                              lease_name=args.lease_name, sidecar_image=args.sidecar_image,
                              min_schedule_interval=args.min_schedule_interval,
                              lease_guard=args.lease_guard, trust_worker_leases=args.trust_worker_leases,
                              task_service_account=TaskServiceAccount(
                                  args.task_service_account, frozenset(args.task_service_account_namespaces)))
    asyncio.run(serve(RUNTIME))
    return 0
