"""The `cronoq` command line: `cronoq operator` runs the operator; `cronoq cancel` cancels tasks."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from cronoq import __version__


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cronoq", description="Tasks as pods, with the guarantees of a task queue.")
    p.add_argument("--version", action="version", version=f"cronoq {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    op = sub.add_parser("operator", help="run the operator against the current kubeconfig (or in-cluster)")
    op.add_argument("--namespace", "-n", action="append", default=[], dest="namespaces",
                    help="watch only this namespace (repeatable); default: all namespaces")
    op.add_argument("--metrics-port", type=int, default=9090, help="serve Prometheus /metrics here (0: off)")
    op.add_argument("--probe-port", type=int, default=8080, help="serve /healthz and /readyz here (0: off)")
    op.add_argument("--workers", type=int, default=8, help="tasks reconciled concurrently")
    op.add_argument("--leader-election", action=argparse.BooleanOptionalAction, default=True,
                    help="compete for a Lease so that only one replica acts (default: on)")
    op.add_argument("--lease-namespace", default=None,
                    help="namespace of the leader Lease (default: $POD_NAMESPACE, else default)")
    op.add_argument("--lease-name", default="cronoq-leader", help="name of the leader Lease")
    op.add_argument("--sidecar-image", default=f"ghcr.io/cronoq/operator:{__version__}",
                    help="image of the heartbeat sidecar added to pods of tasks with heartbeatSidecar: true")
    op.add_argument("--log-level", default=os.environ.get("CRONOQ_LOG_LEVEL", "info"),
                    choices=["debug", "info", "warning", "error"])

    sub.add_parser("heartbeat", help="renew this attempt's heartbeat Lease until SIGTERM (the sidecar)")
    sub.add_parser("push", help="make this push task attempt's HTTP request and report the answer (the push runner)")

    cancel = sub.add_parser("cancel", help="cancel tasks (sets spec.cancel: true)")
    cancel.add_argument("names", nargs="+", metavar="NAME")
    cancel.add_argument("--namespace", "-n", default=None, help="namespace of the tasks (default: the context's)")
    return p


def run_operator(args: argparse.Namespace) -> int:
    from cronoq.controller.runtime import RUNTIME, Options, serve

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    RUNTIME.options = Options(namespaces=tuple(args.namespaces), metrics_port=args.metrics_port or None,
                              probe_port=args.probe_port or None, workers=args.workers,
                              leader_election=args.leader_election, lease_namespace=args.lease_namespace,
                              lease_name=args.lease_name, sidecar_image=args.sidecar_image)
    asyncio.run(serve(RUNTIME))
    return 0


def cancel(args: argparse.Namespace) -> int:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    from cronoq.api import GROUP, VERSION

    config.load_kube_config()
    namespace = args.namespace or config.list_kube_config_contexts()[1]["context"].get("namespace", "default")
    api = client.CustomObjectsApi()
    failed = 0
    for name in args.names:
        try:
            api.patch_namespaced_custom_object(GROUP, VERSION, namespace, "tasks", name, {"spec": {"cancel": True}})
            print(f"task.cronoq.io/{name} cancel requested")
        except ApiException as err:
            failed += 1
            print(f"error: task {namespace}/{name}: {err.reason}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "operator":
        return run_operator(args)
    if args.command == "cancel":
        return cancel(args)
    if args.command == "heartbeat":
        from cronoq.heartbeat import main as heartbeat_main
        return heartbeat_main([])
    if args.command == "push":
        from cronoq.push import main as push_main
        return push_main([])
    parser().print_help()
    return 0
